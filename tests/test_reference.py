"""The reference interpreter of the primitive IR (fusionlab.decompose.reference) against eager PyTorch."""

from __future__ import annotations

import itertools
import warnings
from typing import Any

import pytest
import torch
import torch.utils._pytree as pytree

import fusionlab as fl
from fusionlab.capture import capture
from fusionlab.decompose import POINTWISE, REDUCTIONS, decompose
from fusionlab.decompose.reference import POINTWISE_OPS, REDUCTION_OPS, interpret, run
from tests.cases import CASES, Case

try:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from tests.test_opinfo import CLAIMED, as_function, full_name
except (ImportError, pytest.skip.Exception):  # PyTorch's OpInfo database needs the test extra
    CLAIMED, as_function, full_name = [], None, str  # type: ignore[assignment]

# Decompositions known to compute something other than eager: the interpreter must show the difference (when one
# is fixed, its entry goes).
KNOWN_WRONG: set[tuple[str, torch.dtype]] = set()  # (op, dtype) pairs the decomposition gets wrong: none known


def test_every_primitive_has_a_meaning() -> None:
    assert set(POINTWISE) <= set(POINTWISE_OPS)
    assert set(REDUCTIONS) <= set(REDUCTION_OPS)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_reference_matches_eager(case: Case) -> None:
    fn = case.callable_on("cpu")
    args, kwargs = case.make_inputs("cpu")
    ex = fl.explore(fn, *args, **kwargs)
    flat = [t.clone() for t in ex.flat_inputs(args, kwargs)]
    with torch.no_grad():
        expected = [t for t in pytree.tree_leaves(fn(*args, **kwargs)) if isinstance(t, torch.Tensor)]
    actual = ex.decomposed.run(*flat)
    assert len(actual) >= len(expected)  # values written to inputs follow the outputs
    for index, (got, want) in enumerate(zip(actual, expected)):
        assert got.dtype == want.dtype, f"{case.name} output {index}: {got.dtype} != {want.dtype}"
        torch.testing.assert_close(got, want, equal_nan=True, **case.tolerance(),
                                   msg=lambda m, i=index: f"{case.name} output {i}: {m}")


def test_interpret_returns_every_value() -> None:
    x = torch.randn(4, 8)
    graph = decompose(capture(lambda t: torch.softmax(t, -1), (x,), {})).graph
    values = interpret(graph, [x])
    assert set(values) == {node.name for node in graph.nodes}
    amax = next(node.name for node in graph.nodes if node.op == "amax")
    torch.testing.assert_close(values[amax], x.amax(-1, keepdim=True))
    torch.testing.assert_close(values[graph.outputs[0]], torch.softmax(x, -1))


def test_half_precision_is_computed_in_float32_and_rounded_per_node() -> None:
    x = torch.randn(64, dtype=torch.bfloat16)
    graph = decompose(capture(lambda t: t * 3.1 + 1.7, (x,), {})).graph
    assert [n.op for n in graph.nodes if n.kind != "input"] == ["mul", "add"]
    (got,) = run(graph, [x])
    want = ((x.float() * 3.1).bfloat16().float() + 1.7).bfloat16()
    assert got.dtype == torch.bfloat16 and torch.equal(got, want)


def test_integer_division_rounds_like_pytorch() -> None:
    a = torch.tensor([-7, -7, 7, 7, -1, 5])
    b = torch.tensor([2, -2, 2, -2, 3, -3])
    graph = decompose(capture(lambda x, y: (x // y, x % y), (a, b), {})).graph
    quotient, remainder = run(graph, [a, b])
    assert torch.equal(quotient, torch.tensor([-4, 3, 3, -4, -1, -2]))
    assert torch.equal(remainder, torch.tensor([1, -1, 1, -1, 2, -1]))


def test_views_externs_and_several_outputs() -> None:
    x = torch.randn(4, 6)

    def f(t: torch.Tensor) -> Any:
        top = torch.topk(t, 2, dim=-1)  # an extern op with two results
        return top.values.t()[1:, ::2] + top.indices.float().t()[1:, ::2], t.unsqueeze(0).expand(3, 4, 6)[2, 1]

    graph = decompose(capture(f, (x,), {})).graph
    assert {n.kind for n in graph.nodes} >= {"extern", "view"}
    actual = run(graph, [x])
    for got, want in zip(actual, f(x)):
        torch.testing.assert_close(got, want)


def test_reductions_over_several_axes() -> None:
    x = torch.rand(3, 4, 5) + 0.5

    def f(t: torch.Tensor) -> Any:
        return t.prod(), t.argmax(), t.amin((0, 2), keepdim=True), t.sum((0, 2))

    actual = run(decompose(capture(f, (x,), {})).graph, [x])
    for got, want in zip(actual, f(x)):
        torch.testing.assert_close(got, want)


def test_matmul_nodes() -> None:
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    ex = fl.explore(lambda x, y: torch.relu(x @ y), a, b, matmul="triton")
    assert any(n.kind == "matmul" for n in ex.decomposed.nodes)
    torch.testing.assert_close(ex.decomposed.run(a, b)[0], torch.relu(a @ b))


def test_symbolic_sizes_are_bound_from_the_inputs() -> None:
    ex = fl.explore(lambda t: t.reshape(-1, 2).sum(-1), torch.randn(4, 6), dynamic=True)
    x = torch.randn(7, 6)
    torch.testing.assert_close(ex.decomposed.run(x)[0], x.reshape(-1, 2).sum(-1))


def _samples(op: Any) -> list[tuple[torch.dtype, Any]]:
    found = []
    for dtype in (torch.float32, torch.bfloat16, torch.int64):
        if dtype in op.supported_dtypes("cpu"):
            found += [(dtype, s) for s in itertools.islice(op.sample_inputs("cpu", dtype, requires_grad=False), 1)]
    return found


@pytest.mark.skipif(not CLAIMED, reason="PyTorch's OpInfo database is unavailable")
@pytest.mark.parametrize("op", CLAIMED or [None], ids=full_name)
def test_reference_matches_eager_on_opinfo_samples(op: Any) -> None:
    """The first sample of every OpInfo fusionlab claims, in float32, bfloat16 and int64, through capture and
    decompose, run by the interpreter (no kernels; test_opinfo runs every sample through the kernels)."""
    failures = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for dtype, sample in _samples(op):
            function, tensors = as_function(op, sample)
            try:
                with torch.no_grad():
                    expected = pytree.tree_leaves(function(*tensors))
                graph = decompose(capture(function, tensors, {})).graph
            except Exception:  # noqa: BLE001 - eager refuses it, or fusionlab refuses to capture it (test_opinfo)
                continue
            if not expected or not all(isinstance(e, torch.Tensor) for e in expected):
                continue
            tolerance = {"atol": 5e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {}
            detail = "matches eager: remove it from KNOWN_WRONG"
            try:
                for got, want in zip(run(graph, tensors), expected):
                    assert got.dtype == want.dtype, f"dtype {got.dtype} != {want.dtype}"
                    torch.testing.assert_close(got, want, equal_nan=True, **tolerance)
                wrong = False
            except AssertionError as error:
                wrong, detail = True, str(error).splitlines()[0]
            if wrong != ((op.name, dtype) in KNOWN_WRONG):
                name = sample.summary() if hasattr(sample, "summary") else repr(sample)
                failures.append(f"{dtype} {name}: {detail}")
    assert not failures, f"{full_name(op)}:\n" + "\n".join(failures[:5])
