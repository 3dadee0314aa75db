"""PyTorch's own OpInfo samples through fusionlab, compared to eager.

The ops checked are the ones fusionlab claims: every OpInfo whose aten op has a rule in `fusionlab.decompose.RULES`,
plus `COMPOSITES`, OpInfos whose captured graph is made only of such ops (found once by capturing their first
sample; see the list). Every float32 `reference_inputs` sample (a superset of `sample_inputs`: extremal values,
large and non-contiguous tensors) runs under the "default" policy, and every `sample_inputs` sample also under
"none" (each primitive its own kernel: the view and stride paths between kernels).

A sample ends in one of four ways:
- passed: same values (NaN where eager has NaN), dtype and structure as eager;
- refused: fusionlab says it cannot capture it, for the one reason it documents: a value read out of a tensor
  (`.item()`, a tensor passed as a size) or a shape that depends on one (the sample asks for something fusionlab
  does not promise, and the error says what to do);
- not applicable: eager itself raises or returns no tensor (e.g. `Tensor.__rsub__` on a float);
- failed: anything else. Each op's test fails on any failed sample.

The per-op and overall pass rates are printed at the end of the session (tests/conftest.py).

Variants (test_opinfo_variants): the same ops' `sample_inputs` in bfloat16 and float16 (compared to eager in that
dtype with fusionlab.compare.TOLERANCES: eager rounds every intermediate, a fused kernel keeps float32), and the
in-place variant (`op.inplace_variant`, float32: the output and the written input both match eager's, run on
separate clones). The default run takes a deterministic sample of each (VARIANT_SAMPLES per op, spread over the
sample list); `pytest -m fuzz` runs them all (test_opinfo_variants_full). Pass rates per variant are printed.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
import torch.utils._pytree as pytree

import fusionlab as fl
from fusionlab.compare import TOLERANCES
from fusionlab.decompose import RULES
from tests.fuzz import skip_unless_asked

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    try:
        from torch.testing._internal.common_methods_invocations import op_db
    except ImportError as error:  # PyTorch's test helpers need expecttest (the `test` extra installs it)
        pytest.skip(f"OpInfo database unavailable: {error}", allow_module_level=True)

# Samples per op and policy: bounds the run time (all of today's ops stay under it; see the summary).
MAX_SAMPLES = 200
# The overall share of samples that must pass (refused and failed count against it); see test_overall_pass_rate.
MIN_PASS_RATE = 0.99
REFUSALS = ("reads a number out of tensor", "data-dependent output shape",
            # in-place ops with no functional form (square_, selu_), and in-place changes of an input's layout
            "an in-place op fusionlab cannot capture", "changes the shape or strides of input")
# Variants beyond float32 (test_opinfo_variants): samples per op in the default run, taken evenly from the list.
VARIANTS = ("bfloat16", "float16", "inplace")
VARIANT_SAMPLES = 1  # about 400 samples over the three variants: the default run stays within ~2 CPU-minutes more

# OpInfos built only from ops with rules (views, casts, norms, masked reductions, reflected operators, ...).
# Found by capturing each OpInfo's first float32 sample; random ops (dropout) are left out: eager and fused runs
# draw different numbers.
COMPOSITES = (
    "broadcast_to", "broadcast_tensors", "chunk", "sum_to_size", "expand_as", "meshgrid.variadic_tensors",
    "meshgrid.list_of_tensors", "nn.functional.softmin", "nn.functional.softmin.with_dtype",
    "nn.functional.normalize", "nn.functional.layer_norm", "nn.functional.softsign", "nn.functional.tanhshrink",
    "to", "nn.functional.relu6", "narrow", "outer", "float_power", "__radd__", "__rdiv__", "__rmul__", "__rmod__",
    "__rpow__", "__rsub__", "hsplit", "vsplit", "dsplit", "isfinite", "einsum", "ravel", "reshape_as", "view_as",
    "bfloat16", "bool", "byte", "char", "double", "half", "int", "long", "short", "cdouble", "cfloat", "chalf",
    "movedim", "trapz", "trapezoid", "T", "H", "mT", "mH", "kron", "nn.functional.l1_loss", "norm", "norm.fro",
    "norm.inf", "repeat_interleave", "nn.functional.kl_div", "linalg.norm", "linalg.norm.subgradients_at_zero",
    "linalg.matrix_norm", "special.ndtr", "masked.sum", "masked.amax", "masked.amin", "masked.argmax",
    "masked.argmin", "masked.norm", "masked.softmin", "masked.logsumexp",
)


def full_name(op: Any) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def _aten_names(op: Any) -> set[str]:
    names = {op.aten_name or op.name, op.name}
    for name in list(names):
        for prefix in ("nn.functional.", "special.", "linalg."):
            if name.startswith(prefix):
                names.add(name[len(prefix):])
        names.add(name.replace(".", "_"))
        names.add("_" + name.split(".")[-1])  # softmax -> aten._softmax
    return names


def has_rule(op: Any) -> bool:
    packets = (getattr(torch.ops.aten, name, None) for name in _aten_names(op))
    return any(packet is not None and packet in RULES for packet in packets)


CLAIMED = [op for op in op_db
           if (has_rule(op) or full_name(op) in COMPOSITES) and torch.float32 in op.supported_dtypes("cpu")]
RESULTS: dict[str, Counter[str]] = {}


def as_function(op: Any, sample: Any) -> tuple[Callable[..., Any], tuple[torch.Tensor, ...]]:
    """The sample as a function of its tensors only: numbers, dims and dtypes are closed over (and so
    specialised, as fusionlab specialises Python scalars). A sample without tensors gets an unused one."""
    leaves, spec = pytree.tree_flatten((sample.input, sample.args, sample.kwargs))
    positions = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    padded = not positions

    def function(*tensors: torch.Tensor) -> Any:
        filled = list(leaves)
        for position, tensor in zip(positions, tensors[1:] if padded else tensors):
            filled[position] = tensor
        first, args, kwargs = pytree.tree_unflatten(filled, spec)
        return op(first, *args, **kwargs)

    tensors = tuple(leaves[p] for p in positions) or (torch.ones(1),)
    return function, tensors


def run_sample(op: Any, sample: Any, policy: str, variant: str = "float32") -> tuple[str, str]:
    """("passed" | "refused" | "not applicable" | "failed", detail). `variant` "inplace" runs
    `op.inplace_variant` on clones (eager's and fusionlab's) and compares the written inputs too; "bfloat16" and
    "float16" samples are compared with fusionlab.compare.TOLERANCES."""
    function, tensors = as_function(op.inplace_variant if variant == "inplace" else op, sample)
    clones = (lambda: tuple(t.clone() for t in tensors)) if variant == "inplace" else (lambda: tensors)
    eager_inputs = clones()
    try:
        with torch.no_grad():
            expected = function(*eager_inputs)
    except Exception as error:  # noqa: BLE001 - eager's own refusal
        return "not applicable", f"eager raises {type(error).__name__}"
    leaves = pytree.tree_leaves(expected)
    if not leaves or not all(isinstance(leaf, torch.Tensor) for leaf in leaves):
        return "not applicable", f"eager returns {type(expected).__name__}"
    fused_inputs = clones()
    try:
        actual = fl.explore(function, *clones(), policy=policy)(*fused_inputs)
    except fl.CaptureError as error:
        if any(reason in str(error) for reason in REFUSALS):
            return "refused", str(error)
        return "failed", f"CaptureError: {error}"
    except Exception as error:  # noqa: BLE001 - reported with the sample
        return "failed", f"{type(error).__name__}: {error}"
    try:
        assert pytree.tree_structure(actual) == pytree.tree_structure(expected), "output structure differs"
        if variant in ("bfloat16", "float16"):
            atol, rtol = TOLERANCES[getattr(torch, variant)]
            for want, got in zip(leaves, pytree.tree_leaves(actual)):
                exact = not want.dtype.is_floating_point  # integer and bool results (argmax, comparisons)
                torch.testing.assert_close(got, want, equal_nan=True, atol=0 if exact else atol,
                                           rtol=0 if exact else rtol)
        else:
            torch.testing.assert_close(actual, expected, equal_nan=True)
        if variant == "inplace":
            torch.testing.assert_close(fused_inputs, eager_inputs, equal_nan=True, msg=lambda m: f"inputs after: {m}")
    except AssertionError as error:
        return "failed", str(error)
    return "passed", ""


def samples(op: Any, sampler: str) -> Iterator[Any]:
    generated = getattr(op, sampler)("cpu", torch.float32, requires_grad=False)
    for index, sample in enumerate(generated):
        if index >= MAX_SAMPLES:
            return
        yield sample


@pytest.mark.parametrize("op", CLAIMED, ids=full_name)
def test_opinfo_samples(op: Any, request: pytest.FixtureRequest) -> None:
    counts: Counter[str] = Counter()
    failures: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for policy, sampler in (("default", "reference_inputs"), ("none", "sample_inputs")):
            for sample in samples(op, sampler):
                outcome, detail = run_sample(op, sample, policy)
                counts[outcome] += 1
                if outcome == "failed":
                    failures.append(f"[{policy}] {sample.summary()}\n    {detail.splitlines()[0] if detail else ''}"
                                    if hasattr(sample, "summary") else f"[{policy}] {sample!r}: {detail}")
    RESULTS[full_name(op)] = counts
    request.node.user_properties.append(("opinfo", (full_name(op), dict(counts))))
    assert not failures, f"{full_name(op)}: {len(failures)} samples differ from eager:\n" + "\n".join(failures[:8])


def variant_ops(variant: str) -> list[Any]:
    if variant == "inplace":
        return [op for op in CLAIMED if op.inplace_variant is not None]
    dtype = getattr(torch, variant)
    return [op for op in CLAIMED if dtype in op.supported_dtypes("cpu")]


def variant_samples(op: Any, variant: str, limit: int | None) -> list[Any]:
    """The variant's `sample_inputs`, or `limit` of them spread evenly over the list (the same ones every run)."""
    dtype = torch.float32 if variant == "inplace" else getattr(torch, variant)
    generated = list(op.sample_inputs("cpu", dtype, requires_grad=False))[:MAX_SAMPLES]
    if limit is None or len(generated) <= limit:
        return generated
    return [generated[i * len(generated) // limit] for i in range(limit)]


def check_variant(op: Any, variant: str, limit: int | None, request: pytest.FixtureRequest) -> None:
    counts: Counter[str] = Counter()
    failures: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for sample in variant_samples(op, variant, limit):
            outcome, detail = run_sample(op, sample, "default", variant)
            counts[outcome] += 1
            if outcome == "failed":
                failures.append(f"{sample.summary() if hasattr(sample, 'summary') else sample!r}\n"
                                f"    {detail.splitlines()[0] if detail else ''}")
    request.node.user_properties.append(("opinfo-variant", (variant, full_name(op), dict(counts))))
    assert not failures, (f"{full_name(op)} ({variant}): {len(failures)} samples differ from eager:\n"
                          + "\n".join(failures[:8]))


VARIANT_CASES = [pytest.param(op, variant, id=f"{variant}-{full_name(op)}")
                 for variant in VARIANTS for op in variant_ops(variant)]


@pytest.mark.parametrize(("op", "variant"), VARIANT_CASES)
def test_opinfo_variants(op: Any, variant: str, request: pytest.FixtureRequest) -> None:
    """A deterministic sample of the half-precision and in-place samples (the full set: -m fuzz)."""
    check_variant(op, variant, VARIANT_SAMPLES, request)


@pytest.mark.fuzz
@pytest.mark.parametrize(("op", "variant"), VARIANT_CASES)
def test_opinfo_variants_full(op: Any, variant: str, request: pytest.FixtureRequest) -> None:
    skip_unless_asked(request.config)
    check_variant(op, variant, None, request)


def test_overall_pass_rate() -> None:
    """Of all samples eager can run, at least MIN_PASS_RATE pass. Every op's test already fails on a wrong result
    or a crash, so what this bounds is the refusals: today only data-dependent samples (narrow with a tensor
    start, repeat_interleave with tensor repeats), well under 1%."""
    if len(RESULTS) < len(CLAIMED):
        pytest.skip("run the whole module in one process (no -k, no xdist) to get the overall rate")
    total = Counter[str]()
    for counts in RESULTS.values():
        total.update(counts)
    ran = total["passed"] + total["refused"] + total["failed"]
    assert ran > 0
    rate = total["passed"] / ran
    assert rate >= MIN_PASS_RATE, f"OpInfo pass rate {rate:.2%} < {MIN_PASS_RATE:.0%}: {dict(total)}"


def test_claimed_ops_cover_the_ufunc_lists() -> None:
    """The unary, binary and reduction ufunc OpInfos with a rule are all in CLAIMED."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.testing._internal.common_methods_invocations import (
            binary_ufuncs,
            reduction_ops,
            unary_ufuncs,
        )
    names = {full_name(op) for op in CLAIMED}
    in_op_db = {id(op) for op in op_db}  # the lists also hold Python references (_refs.*)
    for op in [*unary_ufuncs, *binary_ufuncs, *reduction_ops]:
        if id(op) in in_op_db and has_rule(op) and torch.float32 in op.supported_dtypes("cpu"):
            assert full_name(op) in names
    assert len(CLAIMED) >= 150
