"""verify(): fresh inputs within the example's range, inputs and buffers compared after the call, and the first
stage and node where the values part."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

import fusionlab as fl
from fusionlab.compare import OutputError, compare
from fusionlab.decompose import POINTWISE, RULES, PointwisePrimitive
from fusionlab.localise import generated_values
from fusionlab.verify import VerifyReport, random_like

aten = torch.ops.aten


# -- fresh inputs ---------------------------------------------------------------------------------------------------
def test_index_inputs_are_drawn_within_the_example_range() -> None:
    report = fl.explore(lambda w, i: w[i], torch.randn(3, 4), torch.tensor([0, 2])).verify()
    assert report.ok, report.as_text()
    drawn = random_like(torch.tensor([-1, 5, 2] * 50))
    assert int(drawn.min()) >= -1 and int(drawn.max()) <= 5 and len(drawn.unique()) > 3
    assert not bool((drawn == 0).any())  # the example holds no zero (a divisor stays non-zero)
    assert torch.equal(random_like(torch.full((6,), 7)), torch.full((6,), 7))  # all equal: that value
    assert bool((random_like(torch.tensor([0, 3] * 50)) == 0).any())  # a zero in the example may be drawn


def test_other_dtypes_keep_their_draws() -> None:
    flags = random_like(torch.zeros(200, dtype=torch.bool))
    assert flags.any() and not flags.all()
    floats = random_like(torch.zeros(3, 5))
    assert floats.abs().sum() > 0 and floats.shape == (3, 5)
    expanded = random_like(torch.tensor([1, 9]).expand(4, 2))
    assert expanded.stride() == (0, 1) and bool((expanded >= 1).all() & (expanded <= 9).all())


# -- inputs and buffers after the call ------------------------------------------------------------------------------
def _scale_in_place(a: torch.Tensor) -> torch.Tensor:
    a.mul_(2)
    return a.sum()


def test_an_input_written_by_the_function_is_compared_after_the_call() -> None:
    example = torch.randn(4)
    kept = example.clone()
    ex = fl.explore(_scale_in_place, example)
    report = ex.verify(seed=1)
    assert torch.equal(example, kept)  # verify draws its own inputs: the example is left alone
    row = next(r for r in report.after_call if r.label == "input 'a' after the call")
    # What eager and the fused program leave in `a`, independently of verify.
    eager = torch.randn(4)
    fused = eager.clone()
    _scale_in_place(eager)
    ex(fused)
    assert row.ok == torch.allclose(eager, fused)
    assert report.ok == row.ok
    if not row.ok:  # the outputs agree at every stage: the difference is the write itself
        assert report.first_divergence is not None and report.first_divergence.stage == "after the call"
        assert report.first_divergence.node == "input 'a'"


def test_inputs_left_alone_are_rows_that_agree() -> None:
    report = fl.explore(lambda x, y: x + y, torch.randn(3), torch.randn(3)).verify()
    assert [r.label for r in report.after_call] == ["input 'x' after the call", "input 'y' after the call"]
    assert report.ok and all(r.ok for r in report.after_call)


class Counter(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros((), dtype=torch.int64))
        self.scale = torch.nn.Parameter(torch.full((4,), 2.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.add_(1)
        return x * self.scale


def test_a_module_buffer_is_compared_and_left_as_eager_leaves_it() -> None:
    module = Counter()
    x = torch.randn(4)
    probe = copy.deepcopy(module)
    fl.explore(probe, x)(x)
    fused_writes = int(probe.calls) == 1  # whether the fused program writes the buffer back (as eager does)
    report = fl.explore(module, x).verify()
    row = next(r for r in report.after_call if r.label == "buffer 'calls' after the call")
    assert row.ok == fused_writes
    assert not any("scale" in r.label for r in report.after_call)  # a parameter neither run changed: no row
    assert int(module.calls) == 1  # one eager call's effect: the fused run's is undone
    assert torch.equal(module.scale.detach(), torch.full((4,), 2.0))


# -- where the values part ------------------------------------------------------------------------------------------
def test_a_report_that_agrees_compares_the_stages_only_when_asked() -> None:
    ex = fl.explore(lambda x: torch.softmax(x, -1) * 2, torch.randn(4, 8))
    plain = ex.verify()
    assert plain.ok and plain.stages == () and plain.first_divergence is None
    taught = ex.verify(localise=True)
    assert taught.ok and taught.first_divergence is None
    assert taught.lesson() == "captured == eager; decomposed == captured; generated == decomposed"
    assert all(check.compared > 0 for check in taught.stages)


def test_a_wrong_decomposition_is_found_at_its_aten_node(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(RULES, aten.cos, lambda b, x: b.pointwise("sin", x))
    report = fl.explore(lambda x: torch.cos(x).exp() * 2, torch.randn(16)).verify()
    assert not report.ok
    divergence = report.first_divergence
    assert divergence is not None and (divergence.stage, divergence.node) == ("decomposed", "cos")
    assert "captured matches, decomposed differs" in divergence.text()
    assert [c.ok for c in report.stages] == [True, False, True]
    assert report.lesson().startswith("captured == eager; decomposed differs from captured first at cos")


def test_a_wrong_kernel_is_found_at_its_first_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(POINTWISE, "exp", PointwisePrimitive("exp", 1, "(tl.exp({0}) * 1.5)"))
    ex = fl.explore(lambda x: (x.sin().exp() + 1).sum(-1), torch.randn(4, 8), policy="none")
    report = ex.verify()
    assert not report.ok
    divergence = report.first_divergence
    kernel = next(k.name for k in ex.generated.kernels if "exp" in ex.fused.groups[[g.name for g in
                                                                                   ex.fused.groups].index(k.group)].nodes)
    assert divergence is not None and (divergence.stage, divergence.node, divergence.kernel) == ("generated", "exp",
                                                                                                  kernel)
    assert f"decomposed matches, generated differs (kernel {kernel}" in divergence.text()
    assert report.lesson().startswith("captured == eager; decomposed == captured; generated differs from "
                                      "decomposed first at exp")


def test_a_stale_capture_is_found_against_eager() -> None:
    settings = {"scale": 2.0}
    ex = fl.explore(lambda x: x * settings["scale"], torch.randn(8))
    ex.compiled  # noqa: B018 - captured (and compiled) now, with scale 2
    settings["scale"] = 3.0  # a Python value baked into the graph at capture
    report = ex.verify()
    assert report.first_divergence is not None and report.first_divergence.stage == "captured"
    assert report.stages[0].text().startswith("captured differs from eager first at")


def test_generated_values_keep_every_kernel_output() -> None:
    x = torch.randn(4, 8)
    ex = fl.explore(lambda t: (t.exp() + 1).sum(-1), x, policy="none")
    outputs, values, writers = generated_values(ex.compiled.function, ex.generated.kernels, [x])
    kernel_outputs = {v for g in ex.fused.groups if g.is_kernel for v in g.outputs}
    assert set(values) == kernel_outputs and set(writers) == kernel_outputs
    torch.testing.assert_close(values["exp"], x.exp())
    torch.testing.assert_close(outputs[0], (x.exp() + 1).sum(-1))


# -- the views ------------------------------------------------------------------------------------------------------
def test_the_html_shows_the_stages_and_escapes_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(RULES, aten.cos, lambda b, x: b.pointwise("sin", x))
    page = fl.explore(lambda x: torch.cos(x) + 1, torch.randn(8)).verify()._repr_html_()
    assert "first divergence" in page and "<th>stage</th>" in page and "decomposed" in page
    row = OutputError(0, (2,), torch.float32, 1.0, 1.0, False, "input '<script>' after the call")
    assert "<script>" not in VerifyReport((), (row,))._repr_html_()


def test_the_report_page_and_the_explorer_show_where_values_part(monkeypatch: pytest.MonkeyPatch) -> None:
    """A mismatch in the views: the report page and the Explorer's title carry the stage-by-stage table."""
    monkeypatch.setitem(RULES, aten.cos, lambda b, x: b.pointwise("sin", x))
    ex = fl.explore(lambda a: torch.cos(a) * 2, torch.randn(4, 6))
    page = ex.to_html(timings=False, inductor=False)
    assert "decomposed differs from captured first at cos" in page
    title = ex.show(inductor=False)._title(verify=True)
    assert "decomposed differs from captured first at cos" in title


# -- half precision -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_truncating_division_of_half_precision_rounds_once_as_eager(dtype: torch.dtype, device: str) -> None:
    """Eager truncates the float quotient of a half-precision division, then rounds: 0.7 (0.69921875 in bf16) / 0.1
    is 6, not trunc(bf16(6.99)) = 7. Integers, so exactly."""
    x = torch.tensor([0.1, 0.7, -0.3, 2.5, -1.5, 0.5, -2.5, 3.7, -0.7, 1.0, -1.0]).to(device, dtype)
    y = torch.tensor([0.3, 0.1, 0.7, 3.0, 0.2, 0.1, 0.3, 0.7, 0.1, 0.3, 0.3]).to(device, dtype)
    for fn in (lambda a, b: torch.div(a, 0.1, rounding_mode="trunc"),
               lambda a, b: torch.div(a, b, rounding_mode="trunc")):
        got, want = fl.explore(fn, x, y)(x, y), fn(x, y)
        assert torch.equal(got, want), (got, want)


def test_a_float32_value_computed_from_bfloat16_gets_bfloat16s_tolerance() -> None:
    """A float32 output of a bfloat16 chain differs from eager by the ulps eager rounds each intermediate to (a
    fused kernel keeps float32): verify compares it with bfloat16's tolerance, and a float32 output computed from
    float32 alone keeps float32's."""
    from fusionlab.compare import computed_through

    def fn(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.log_softmax((a.mean(0) + a.sum(-1, keepdim=True)).float() / (b.abs() + 1), -3), b * 2

    a, b = torch.randn(2, 6, 6).mul(4).bfloat16(), torch.randn(2, 6, 6)
    ex = fl.explore(fn, a, b)
    assert computed_through(ex.captured.graph_module) == [torch.bfloat16, torch.float32]
    report = ex.verify()
    assert report.ok, report
    assert [o.dtype for o in report.outputs] == [torch.float32, torch.float32]
    # a mask, a count or a shape taken from a bfloat16 value carries none of its rounding: float64 stays float64's
    m, x = torch.randn(8).bfloat16(), torch.randn(8).double()
    for fn in (lambda m, x: torch.where(m > 0, x * 3, x), lambda m, x: (m > 0).sum().double() + x,
               lambda m, x: torch.zeros_like(m, dtype=torch.float64) + x.exp()):
        assert computed_through(fl.explore(fn, m, x).captured.graph_module) == [torch.float64]
    for fn in (lambda m, x: m.double().zero_() + x, lambda m, x: m.double().copy_(x * 3)):  # overwritten values
        assert computed_through(fl.explore(fn, m, x).captured.graph_module) == [torch.float64]



@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_half_precision_divisions_match_eager_on_many_values(dtype: torch.dtype, device: str) -> None:
    """Truncating division of half-precision tensors by tensors, by one-element tensors, by a float32 tensor and by
    a number, on 4096 values: every result as eager's, exactly (on a CPU eager divides two tensors in the
    half-precision dtype, a tensor by a number or a one-element tensor in float32). Flooring division within the
    dtype's tolerance: eager's CPU kernel rounds its remainder steps to bfloat16 (8.9375 // 0.1171875 is 75 there,
    76 in float32 and on CUDA)."""
    torch.manual_seed(0)
    x = (torch.randn(4096) * 8).to(device, dtype)
    y = (torch.rand(4096) * 0.9 + 0.1).to(device, dtype)
    for mode in ("trunc", "floor"):
        for fn in (lambda a, b, m=mode: torch.div(a, b, rounding_mode=m),
                   lambda a, b, m=mode: torch.div(a, 0.1, rounding_mode=m),
                   lambda a, b, m=mode: torch.div(a, b[:1], rounding_mode=m),  # one element: eager's scalar path
                   lambda a, b, m=mode: torch.div(a, b[0], rounding_mode=m),
                   lambda a, b, m=mode: torch.div(a, b.float(), rounding_mode=m),
                   lambda a, b, m=mode: torch.div(a, b[:1].expand_as(b), rounding_mode=m),  # expanded: a scalar
                   lambda a, b, m=mode: torch.div(0.3, b, rounding_mode=m),  # the number in b's dtype first
                   lambda a, b, m=mode: torch.div(torch.tensor(0.3, device=b.device), b[0], rounding_mode=m)):
            got, want = fl.explore(fn, x, y)(x, y), fn(x, y)
            if mode == "trunc":
                assert torch.equal(got, want), (mode, int((got != want).sum()))
            else:
                assert compare(want, got).ok and int((got != want).sum()) <= 4, int((got != want).sum())


def _mixed_divisions(device: str) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(0)
    xb, yb = (torch.randn(4096) * 8).bfloat16(), (torch.rand(4096) * 0.9 + 0.1).bfloat16()
    xf, yf = torch.randn(4096) * 8, torch.rand(4096) * 0.9 + 0.1
    pairs = {"int64/bf16": ((torch.randn(4096) * 50).long(), yb), "bf16/0-d f32": (xb, torch.tensor(0.3)),
             "bf16/0-d f32 (0.1)": (xb, torch.tensor(0.1)), "0-d f64/f32": (torch.tensor(5.3).double(), yf),
             "f32/0-d f64": (xf, torch.tensor(0.3).double()), "f64/f32": (xf.double(), yf), "bf16/f32": (xb, yf),
             "bf16/expanded int64": (torch.full((4096,), 512.0).bfloat16(), torch.tensor([257]).expand(4096)),
             "bf16/expanded bf16": (xb, yb[:1].expand(4096))}
    return {name: (a.to(device), b.to(device)) for name, (a, b) in pairs.items()}


def test_truncating_division_of_mixed_dtypes_matches_eager(device: str) -> None:
    """Operands of other dtypes than the result's are converted to it first, as eager's TensorIterator does (an int64
    or a 0-d float32 operand beside bfloat16 is rounded to bfloat16); a 0-d float64 beside float32 divides in
    float32 (it crashed: `div_rn` takes float32 only). Exactly eager's, every value."""
    def fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.div(a, b, rounding_mode="trunc")

    for name, (a, b) in _mixed_divisions(device).items():
        got, want = fl.explore(fn, a, b)(a, b), fn(a, b)
        assert got.dtype == want.dtype and torch.equal(got, want), (name, int((got != want).sum()))
    # a divisor eager takes as a scalar or not by its strides as traced (TensorIterator's is_scalar): views of an
    # expanded one; and a number, for each floating dtype
    a = _mixed_divisions(device)["bf16/f32"][0]
    b = (torch.rand(64) + 0.1).bfloat16().to(device)
    for view in (lambda a, b: torch.div(a, b[:1].expand(8192)[::2], rounding_mode="trunc"),
                 lambda a, b: torch.div(a, b[:1].expand(3, 4096)[0], rounding_mode="trunc"),
                 lambda a, b: torch.div(a, b[:1].reshape(1, 1).expand(4096, 1).t(), rounding_mode="trunc"),
                 lambda a, b: torch.div(a, 0.1, rounding_mode="trunc"),
                 lambda a, b: torch.div(a.double(), 0.1, rounding_mode="trunc"),
                 lambda a, b: torch.div(a.float(), 0.1, rounding_mode="trunc")):
        got, want = fl.explore(view, a, b)(a, b), view(a, b)
        assert torch.equal(got, want), int((got != want).sum())


def test_truncating_division_follows_the_cuda_rule_on_a_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CUDA rule run under the interpreter against aten's CUDA kernel written out (operands in the result's
    dtype, a half quotient rounded to it, then truncated): the GPU checks the same through the test above."""
    from fusionlab.decompose.rules import pointwise

    monkeypatch.setattr(pointwise, "_on_cpu", lambda b: False)

    def fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.div(a, b, rounding_mode="trunc")

    tenths = torch.cat([torch.tensor([0.7, 0.3, 1.1, 2.3, -0.7]), torch.randn(4091) * 8]).double()  # 0.7 / 0.1: 6
    cases = {**_mixed_divisions("cpu"), "f64/0.1": (tenths, 0.1),
             "bf16/0.1": (_mixed_divisions("cpu")["bf16/f32"][0], 0.1)}
    for name, (a, b) in cases.items():
        if not isinstance(b, torch.Tensor):  # a number: aten's CUDA kernel multiplies by its reciprocal
            accumulate = torch.float64 if a.dtype == torch.float64 else torch.float32
            want = torch.trunc(a.to(accumulate) * (1 / torch.tensor(b, dtype=accumulate))).to(a.dtype)
            got = fl.explore(lambda x, y=b: fn(x, y), a)(a)
            assert torch.equal(got, want), (name, int((got != want).sum()))
            continue
        kind = torch.result_type(a, b)
        quotient = a.to(kind).double() / b.to(kind).double() if kind == torch.float64 else \
            a.to(kind).float() / b.to(kind).float()
        want = torch.trunc(quotient.to(kind).float() if kind in (torch.bfloat16, torch.float16) else quotient).to(kind)
        got = fl.explore(fn, a, b)(a, b)
        assert torch.equal(got, want), (name, int((got != want).sum()))


@pytest.mark.parametrize("fn", [
    lambda x: (x * 2, x * 2),
    lambda x: (x * 2, (x * 2)[1:]),
    lambda x: (x * 2, x * 2, x * 2),
    lambda x: (lambda y: (y, y[1:]))(x * 2),
    lambda x: (lambda y, z: (y, z, z))(x * 2, x * 2),
], ids=["twice", "and_a_slice", "three_times", "one_value_and_its_view", "a_merged_one_returned_twice"])
def test_outputs_share_memory_exactly_where_eagers_do(fn: Any, device: str) -> None:
    """The decomposition merges equal expressions; outputs that eager computes apart still get memory of their own
    (a write into one after the call leaves the other as eager's), and a view of one output stays its view."""
    x = torch.randn(4, 5, device=device)
    got, want = fl.explore(fn, x)(x), fn(x)

    def shared(tensors: tuple[torch.Tensor, ...]) -> list[list[bool]]:
        return [[a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr() for b in tensors] for a in tensors]

    assert shared(got) == shared(want)
    got[0].add_(1)
    want[0].add_(1)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)
