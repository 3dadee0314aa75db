"""The code generator: golden sources, sizes as arguments, kernel counts, looped and any-axis reductions.

Golden files hold each case's kernels and wrapper (without the shared preamble and the timing header). After an
intended change to the generated code, regenerate them and review the diff:

    pytest tests/test_codegen.py --update-golden        (or FUSIONLAB_UPDATE_GOLDEN=1)
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import fusionlab as fl
from fusionlab.codegen import reductions
from fusionlab.decompose.primitives import REDUCTIONS
from fusionlab.lessons import row_passes
from tests.cases import find

GOLDEN = Path(__file__).parent / "golden"
GOLDEN_CASES = [("softmax_last", "default"), ("softmax_last", "none"), ("layer_norm", "default"),
                ("gelu_bias", "default"), ("sum_axis0", "default"), ("transposed_input", "default"),
                ("matmul_between_chains", "default"), ("argmax_last", "default"), ("add_layer_norm", "default"),
                ("batch_norm_backward", "default"), ("sum_and_argmax_axis0", "default")]


def program_text(ex: fl.Exploration) -> str:
    generated = ex.generated
    parts = [kernel.source.rstrip() for kernel in generated.kernels] + [generated.wrapper.rstrip()]
    return "\n\n\n".join(parts) + "\n"


@pytest.mark.parametrize(("name", "policy"), GOLDEN_CASES, ids=[f"{n}-{p}" for n, p in GOLDEN_CASES])
def test_golden_source(name: str, policy: str, update_golden: bool) -> None:
    case = find(name)
    args, kwargs = case.make_inputs("cpu")
    text = program_text(fl.explore(case.callable_on("cpu"), *args, policy=policy, **kwargs))
    path = GOLDEN / f"{name}_{policy}.py"
    if update_golden or not path.exists():
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text)
        if not update_golden:
            pytest.fail(f"{path.name} did not exist and was written: review and commit it")
    assert text == path.read_text(), (f"generated source of {name!r} under {policy!r} changed; if intended, run "
                                      "pytest tests/test_codegen.py --update-golden and review the diff")


def code_only(source: str) -> str:
    """Kernel source without comments (they name the shapes and bytes for the reader)."""
    return "\n".join(line.split("#")[0].rstrip() for line in source.splitlines())


SIZE_CASES = [
    ("pointwise", lambda x, b: F.gelu(x + b), lambda r, c: (torch.randn(r, c), torch.randn(c))),
    ("softmax", lambda x: torch.softmax(x, -1), lambda r, c: (torch.randn(r, c),)),
    ("sum_axis0", lambda x: x.sum(0), lambda r, c: (torch.randn(r, c),)),
    ("middle_axis", lambda x: x.mean(1, keepdim=True) - x, lambda r, c: (torch.randn(3, r, c),)),
    ("transposed", lambda x: x.exp() * 2, lambda r, c: (torch.randn(c, r).t(),)),
    ("layer_norm", lambda x, w: F.layer_norm(x, (x.shape[-1],), w), lambda r, c: (torch.randn(r, c), torch.randn(c))),
]


@pytest.mark.parametrize(("name", "fn", "make"), SIZE_CASES, ids=[c[0] for c in SIZE_CASES])
@pytest.mark.parametrize("looped", [False, True], ids=["persistent", "looped"])
def test_no_size_in_kernel_source(name: str, fn: object, make: object, looped: bool) -> None:
    """Sizes are kernel arguments: no size literal in the code, and other sizes give the same kernels."""
    first = fl.explore(fn, *make(11, 37), looped_reductions=looped)  # type: ignore[operator]
    second = fl.explore(fn, *make(13, 29), looped_reductions=looped)  # type: ignore[operator]
    for kernel in first.generated.kernels:
        code = code_only(kernel.source)
        baked = re.findall(r"(?<![\w.])(11|37|33|407|1221)(?![\w.])", code)
        assert not baked, f"{name}: sizes {baked} baked into {kernel.name}:\n{kernel.source}"
    assert [code_only(k.source) for k in first.generated.kernels] == \
        [code_only(k.source) for k in second.generated.kernels], f"{name}: kernels depend on the sizes"
    for ex, sizes in ((first, (11, 37)), (second, (13, 29))):
        inputs = make(*sizes)  # type: ignore[operator]
        torch.testing.assert_close(ex(*inputs), fn(*inputs))  # type: ignore[operator]


@pytest.mark.parametrize(("name", "policy", "kernels"), [
    ("softmax_last", "default", 1), ("log_softmax", "default", 1), ("layer_norm", "default", 1),
    ("rms_norm", "default", 1), ("center", "default", 1), ("gelu_bias", "default", 1),
    ("gelu_bias", "pointwise", 1), ("softmax_axis0", "default", 1), ("softmax_3d_middle", "default", 1),
    ("add_layer_norm", "default", 1), ("module_rms_norm", "default", 1),
])
def test_kernel_count(name: str, policy: str, kernels: int) -> None:
    case = find(name)
    args, kwargs = case.make_inputs("cpu")
    ex = fl.explore(case.callable_on("cpu"), *args, policy=policy, **kwargs)
    assert len(ex.generated.kernels) == kernels, ex.fused.as_text()
    assert ex.compiled.launches_per_call == kernels


@pytest.mark.parametrize("name", ["softmax_last", "layer_norm", "rms_norm", "gelu_bias", "center", "logsumexp"])
def test_unfused_baseline_has_more_kernels(name: str) -> None:
    case = find(name)
    args, kwargs = case.make_inputs("cpu")
    counts = {policy: len(fl.explore(case.callable_on("cpu"), *args, policy=policy, **kwargs).generated.kernels)
              for policy in ("none", "pointwise", "default")}
    assert counts["none"] > counts["default"], counts
    assert counts["none"] >= counts["pointwise"] >= counts["default"], counts


LOOPED = [
    ("softmax", lambda x: torch.softmax(x, -1)),
    ("log_softmax", lambda x: torch.log_softmax(x, -1)),
    ("layer_norm", lambda x: F.layer_norm(x, (x.shape[-1],))),
    ("var_std", lambda x: (x.var(-1), x.std(-1, keepdim=True))),
    ("argmax_argmin", lambda x: (x.argmax(-1), x.argmin(-1))),
    ("max_min_values", lambda x: (x.amax(-1), x.amin(-1, keepdim=True))),
    ("prod", lambda x: (x * 0.001 + 1).prod(-1)),
    ("sum_then_epilogue", lambda x: x - x.sum(-1, keepdim=True) / x.shape[-1]),
    ("axis0", lambda x: torch.softmax(x, 0)),
    ("logsumexp", lambda x: torch.logsumexp(x, -1)),
    ("passes", lambda x: _three_passes(x, x.flip(-1), -1)),
]


def _three_passes(x: torch.Tensor, y: torch.Tensor, dim: int) -> tuple[torch.Tensor, ...]:
    """Two sums that read no reduction (first pass), one that reads the first (second pass), and outputs that need
    nothing, the first pass's, and the second's."""
    masked = torch.where(x > 0, y, 0)
    total, dot = masked.sum(dim, keepdim=True), (masked * x).sum(dim, keepdim=True)
    spread = (x - total / x.shape[dim]).abs().sum(dim, keepdim=True)
    return spread, total, dot, masked, x - dot, x / spread


@pytest.mark.parametrize(("name", "fn"), LOOPED, ids=[n for n, _ in LOOPED])
@pytest.mark.parametrize("policy", ["none", "default"])
def test_looped_reductions(name: str, fn: object, policy: str) -> None:
    """Rows longer than one block: the loop runs several times (the interpreter's looped block is 1024)."""
    x = torch.randn(3, 2500)
    x[1, 1700] = 50.0  # an extreme far into the row
    ex = fl.explore(fn, x, policy=policy, looped_reductions=True)
    reductions = [k for k in ex.generated.kernels if "reduction" in k.kind]
    assert reductions and all(not k.persistent for k in reductions)
    assert all("for roffset in " in k.source for k in reductions)
    # strided tiles (reductions over leading axes) are software-pipelined; rows along the contiguous axis are not
    assert all(("tl.range(0, rnumel, RBLOCK, num_stages=3)" in k.source) == (k.kind == "outer_reduction")
               for k in reductions)
    fresh = torch.randn(3, 2500)
    torch.testing.assert_close(ex(fresh), fn(fresh), atol=1e-5, rtol=1e-4)  # type: ignore[operator]
    assert ex.verify().ok


@pytest.mark.parametrize("dim", [0, -1], ids=["columns", "rows"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_sibling_reductions_share_a_pass_and_outputs_go_in_the_first_that_has_what_they_read(
        dim: int, dtype: torch.dtype) -> None:
    """codegen/plan.py `reduction_passes`: a square matrix (a rows-for-columns mix-up would not show in the
    shapes), reduced over its columns (an outer reduction) or rows (looped), both longer than one block."""
    x, y = torch.randn(1200, 1200, dtype=dtype), torch.randn(1200, 1200, dtype=dtype)
    ex = fl.explore(lambda x, y: _three_passes(x, y, dim), x, y, looped_reductions=True)
    (kernel,) = ex.generated.kernels
    passes = [(walk.loads, walk.stores) for walk in row_passes(kernel).passes]
    # the where() stored in the first pass, x - dot in the second, x / spread in one more; then the sums
    assert passes == [(("x", "y"), ("where",)), (("x",), ("sub_1",)), (("x",), ("div_1",)),
                      ((), ("sum", "sum_1", "sum_2"))], kernel.source
    fresh = [torch.randn(1200, 1200, dtype=dtype), torch.randn(1200, 1200, dtype=dtype)]
    expected = _three_passes(*(t.double() for t in fresh), dim)
    tolerance = {"atol": 1e-3, "rtol": 1e-4} if dtype == torch.float32 else {"atol": 0.5, "rtol": 2e-2}
    for got, want in zip(ex(*fresh), expected, strict=True):
        torch.testing.assert_close(got.double(), want.to(got.dtype).double(), **tolerance)


WELFORD = [
    ("column_normalize", lambda x: (x - x.mean(0, keepdim=True)) * torch.rsqrt(
        (x - x.mean(0, keepdim=True)).pow(2).mean(0, keepdim=True) + 1e-5)),
    ("var_mean_rows", lambda x: torch.var_mean(x, -1)),
    ("std_columns", lambda x: x.std(0)),
    ("layer_norm", lambda x: F.layer_norm(x, (x.shape[-1],))),
]


@pytest.mark.parametrize(("name", "fn"), WELFORD, ids=[n for n, _ in WELFORD])
@pytest.mark.parametrize("shape", [(1100, 3), (3, 1100)], ids=["tall", "wide"])
def test_mean_and_variance_share_one_welford_pass(name: str, fn: object, shape: tuple[int, int]) -> None:
    """A looped mean and the sum of squared deviations from it are one loop (Welford), not two; the result
    matches eager even when the mean is large against the spread (where E[x^2] - E[x]^2 would cancel)."""
    ex = fl.explore(fn, torch.randn(shape), looped_reductions=True)
    (kernel,) = [k for k in ex.generated.kernels if "(Welford)" in k.source]  # var_mean's own mean: a 2nd kernel
    writes_rows = name in ("column_normalize", "layer_norm")  # then one more loop writes the normalised rows
    assert kernel.source.count("for roffset in ") == (2 if writes_rows else 1)
    fresh = torch.randn(shape) * 0.5 + 100.0
    torch.testing.assert_close(ex(fresh), fn(fresh), atol=2e-3, rtol=1e-3)  # type: ignore[operator]


def test_welford_needs_the_same_input_and_axes() -> None:
    """Squared deviations from some other value's mean, or over other axes, keep their own loops."""
    x, y = torch.randn(40, 30), torch.randn(40, 30)
    ex = fl.explore(lambda a, b: ((a - a.mean(0, keepdim=True)) ** 2).sum(1) + ((b - a.mean(0)) ** 2).sum(0).sum(),
                    x, y, looped_reductions=True)
    assert all("(Welford)" not in k.source for k in ex.generated.kernels)
    torch.testing.assert_close(ex(x, y), ((x - x.mean(0, keepdim=True)) ** 2).sum(1)
                               + ((y - x.mean(0)) ** 2).sum(0).sum(), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("shape", [(6, 40), (4, 5, 6), (2, 3, 4, 5)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("looped", [False, True], ids=["persistent", "looped"])
@pytest.mark.parametrize("policy", ["none", "default"])
def test_reductions_over_every_axis(shape: tuple[int, ...], looped: bool, policy: str) -> None:
    """Each axis, pairs of axes, all axes; with the result broadcast back (the epilogue reads the row)."""
    rank = len(shape)
    axes: list[int | tuple[int, ...]] = [*range(rank), *[(a, b) for a in range(rank) for b in range(a + 1, rank)]]

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = []
        for axis in axes:
            out += [x.sum(axis), torch.amax(x, axis, keepdim=True) - x, x.mean(axis, keepdim=True)]
        out.append(x.sum())
        return tuple(out)

    ex = fl.explore(fn, torch.randn(shape), policy=policy, looped_reductions=looped)
    fresh = torch.randn(shape)
    torch.testing.assert_close(ex(fresh), fn(fresh), atol=1e-5, rtol=1e-5)


def test_argmax_over_middle_axis_with_ties() -> None:
    x = torch.randint(0, 3, (4, 7, 5)).float()
    for looped in (False, True):
        ex = fl.explore(lambda t: (t.argmax(1), t.argmin(1), t.argmax()), x, looped_reductions=looped)
        torch.testing.assert_close(ex(x), (x.argmax(1), x.argmin(1), x.argmax()))


def test_generated_text_is_the_whole_program() -> None:
    ex = fl.explore(lambda x: torch.softmax(x, -1), torch.randn(8, 32))
    text = ex.generated.as_text()
    assert "def fusionlab_program(" in text and "@triton.jit" in text
    for kernel in ex.generated.kernels:
        assert kernel.source.strip() in text
        assert "# primitives:" in kernel.source and "bytes" in kernel.source
    compile(ex.generated.kernel_module(ex.generated.kernels[0]), "<kernel>", "exec")


POINTER_TYPES = {torch.float32: "*fp32", torch.float16: "*fp16", torch.bfloat16: "*bf16", torch.float64: "*fp64",
                 torch.int64: "*i64", torch.int32: "*i32", torch.int16: "*i16", torch.int8: "*i8",
                 torch.uint8: "*u8", torch.bool: "*i1"}
COMPILED_CASES = ["softmax_last", "layer_norm", "fp16_layer_norm", "gelu_bias", "argmax_last", "sum_axis0",
                  "softmax_3d_middle", "where_scalar", "binary_int_floor_divide",
                  "act_mish", "binary_remainder", "transposed_softmax", "logsumexp", "prod_last"]


@pytest.mark.parametrize("name", COMPILED_CASES)
@pytest.mark.parametrize("looped", [False, True], ids=["persistent", "looped"])
def test_kernels_compile_for_the_h200_after_interpreted_runs(name: str, looped: bool) -> None:
    """Triton compiles every generated kernel for sm_90 (no GPU needed), in a process that has just run kernels
    under the interpreter: the interpreter must leave triton.language as it found it, and the real compiler is
    stricter than the interpreter."""
    import triton
    from triton.compiler import ASTSource

    from fusionlab.runtime.config import KernelShape, choose
    from fusionlab.runtime.targets import H200_TARGET

    case = find(name)
    args, kwargs = case.make_inputs("cpu")
    ex = fl.explore(case.callable_on("cpu"), *args, looped_reductions=looped, **kwargs)
    ex(*args, **kwargs)  # interpreted first, and a reduction that calls device functions (tl.sum, tl.reduce)
    softmax = fl.explore(lambda x: torch.softmax(x, -1), torch.randn(4, 8))
    softmax(torch.randn(4, 8))
    graph = ex.decomposed.graph
    for kernel, handle in zip(ex.generated.kernels, ex.compiled.handles):
        function = handle.function("cuda")
        signature: dict[str, str] = {}
        for argument in kernel.arguments:
            if argument.role in ("input", "output"):
                signature[argument.name] = POINTER_TYPES[graph[argument.value].type.dtype]
            else:
                signature[argument.name] = "i32"
        shape = KernelShape(kernel.kind, 64, 64, kernel.persistent)
        config = choose(shape, "cuda")
        for even in (True, False):  # both the masked and the unmasked form (sizes that do or do not divide)
            blocks = {"XBLOCK": config.XBLOCK, "RBLOCK": config.RBLOCK, "EVEN_X": even, "EVEN_R": even}
            constexprs = {}
            for name_ in kernel.constexprs:
                signature[name_] = "constexpr"
                constexprs[(function.arg_names.index(name_),)] = blocks[name_]
            compiled = triton.compile(ASTSource(function, signature, constexprs),
                                      target=H200_TARGET, options={"num_warps": config.num_warps})
            assert "ptx" in compiled.asm
            if even:  # the constant-True masks are folded: no predicated global loads remain
                assert "@%p" not in "\n".join(line for line in compiled.asm["ptx"].splitlines()
                                                if "ld.global" in line), kernel.name


def test_interpreted_runs_leave_triton_language_unchanged() -> None:
    """Triton's interpreter patches triton.language's builtins; after our interpreted launches (including the
    device functions reductions call) everything is as before, so a later CUDA compile sees the real language."""
    import triton.language as tl

    modules = (tl, tl.core, tl.math, tl.standard, tl.core.tensor)
    before = [dict(vars(module)) for module in modules]
    fl.explore(lambda x: (torch.softmax(x, -1), x.argmax(-1), x.prod(0)), torch.randn(4, 8))(torch.randn(4, 8))
    fl.explore(lambda x: torch.softmax(x, -1), torch.randn(4, 3000), looped_reductions=True)(torch.randn(4, 3000))
    for module, saved in zip(modules, before):
        # The interpreter's AST rewriter adds its own helpers to the modules it rewrites: harmless additions.
        names = set(saved) if module is tl.standard else set(saved) | set(vars(module))
        names.discard("__annotations__")  # created by Python when anyone asks a class for it
        changed = sorted(k for k in names if saved.get(k) is not vars(module).get(k))
        assert not changed, f"{getattr(module, '__name__', module)} left patched: {changed[:10]}"


def test_empty_sizes_keep_their_masks() -> None:
    """A size of 0 divides every block, but no index is in bounds then: the launch must keep the mask (without it
    the interpreter reads out of bounds and crashes the process)."""
    from fusionlab.runtime.config import BlockConfig, KernelShape

    config = BlockConfig(4, 8, 1)
    assert config.meta(KernelShape("reduction", 8, 8, True)) == {
        "XBLOCK": 4, "RBLOCK": 8, "EVEN_X": True, "EVEN_R": True}
    meta = config.meta(KernelShape("reduction", 8, 0, True))
    assert meta["EVEN_X"] and not meta["EVEN_R"]
    meta = config.meta(KernelShape("reduction", 0, 8, True))
    assert not meta["EVEN_X"] and meta["EVEN_R"]
    for looped in (False, True):
        ex = fl.explore(lambda x: (x.sum(-1), x.sum(0)), torch.randn(4, 0), looped_reductions=looped)
        torch.testing.assert_close(ex(torch.randn(4, 0)), (torch.zeros(4), torch.zeros(0)))


def test_short_rows_take_one_warp_per_program() -> None:
    """Rows of at most 1024 are reduced by one warp (shuffles, no shared memory between warps), 2048 elements per
    program; long rows keep several warps per row (docs/PERFORMANCE.md, eighth round)."""
    import triton

    from fusionlab.runtime.config import KernelShape, choose

    for rnumel, rows in ((1024, 2), (512, 4), (256, 8), (1000, 2)):
        config = choose(KernelShape("reduction", 65536, rnumel, True, 1), "cuda")
        assert (config.XBLOCK, config.RBLOCK, config.num_warps) == (rows, triton.next_power_of_2(rnumel), 1)
    assert choose(KernelShape("reduction", 8192, 8192, True, 1), "cuda").num_warps == 16
    assert choose(KernelShape("reduction", 8192, 2048, True, 0), "cuda").num_warps == 8


def test_reduction_tables_cover_every_reduction_primitive() -> None:
    # codegen/reductions.py keeps its own table per reduction primitive (decompose's REDUCTIONS names them).
    assert set(reductions.IDENTITY) == set(REDUCTIONS)
    assert set(reductions.ROW_REDUCE) | set(reductions.ARG_BETTER) == set(REDUCTIONS)
    assert set(reductions.ACCUMULATE) == set(reductions.ROW_REDUCE)


def test_wrapper_sections_are_the_lines_each_group_wrote() -> None:
    ex = fl.explore(lambda x, w: torch.relu(torch.softmax(x, -1) @ w).sum(-1), torch.randn(4, 8), torch.randn(8, 8))
    program = ex.generated.program
    lines = program.wrapper.splitlines()
    assert [s.group for s in program.sections] == [g.name for g in ex.fused.groups]
    assert lines[program.sections[0].first - 1].strip().startswith("#")
    assert lines[program.sections[-1].last].strip().startswith("return")
    assert all(a.last + 1 == b.first for a, b in zip(program.sections, program.sections[1:]))


@pytest.mark.parametrize("shape", [(4, 16, 14, 14), (2, 8, 7, 7), (3, 5, 1, 9), (2, 4, 16, 1), (6, 6, 6, 6)])
def test_a_tile_walks_every_trailing_dim_its_broadcast_operands_are_constant_over(shape: tuple[int, ...]) -> None:
    # Batch norm in eval form over NCHW: the per-channel vectors are constant over (H, W), so the tile's columns are
    # H * W (rows N * C): no index division per element, and no 7-wide tiles at 7 x 7
    n, c, h, w = shape
    mean, var, weight, bias = torch.randn(c), torch.rand(c) + 0.5, torch.randn(c), torch.randn(c)
    fn = lambda x, r: F.relu(F.batch_norm(x, mean, var, weight, bias, False) + r)  # noqa: E731
    ex = fl.explore(fn, torch.randn(shape), torch.randn(shape))
    tiled = [k for k in ex.generated.kernels if k.kind == "tiled"]
    if tiled:
        assert tiled[0].columns == (2, 3), tiled[0].columns
        assert f"xnumel={n * c}, rnumel={h * w})" in ex.generated.wrapper
    fresh = torch.randn(shape), torch.randn(shape)
    torch.testing.assert_close(ex(*fresh), fn(*fresh), rtol=1e-5, atol=1e-5)
    # a bias along the last dim still walks the last dim alone (it is read at the column)
    biased = fl.explore(lambda x, b: torch.tanh(x + b), torch.randn(shape), torch.randn(w))
    assert all(k.columns in ((), (3,)) for k in biased.generated.kernels)


def test_a_convolution_feeding_a_tile_is_indexed_as_dense() -> None:
    # cuDNN's (here: the CPU's) NCHW output, dense as traced: the wrapper makes sure (.contiguous(), no copy when it
    # is) and batch norm's tile walks (H, W) without an index division per element
    conv, bn = torch.nn.Conv2d(3, 8, 3, padding=1).eval(), torch.nn.BatchNorm2d(8).eval()
    with torch.no_grad():
        bn.running_mean.normal_()
        bn.running_var.uniform_(0.5, 2.0)
    fn = lambda x: F.relu(bn(conv(x)))  # noqa: E731
    with torch.no_grad():
        ex = fl.explore(fn, torch.randn(2, 3, 10, 10))
        assert [k.columns for k in ex.generated.kernels if k.kind == "tiled"] == [(2, 3)]
        assert ".contiguous()  # dense as traced" in ex.generated.wrapper
        fresh = torch.randn(2, 3, 10, 10)
        torch.testing.assert_close(ex(fresh), fn(fresh), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fn", [lambda x: F.pad(x, (1, 1, 1, 1)) * 2, lambda x: torch.cat([x, x], 3) + 1],
                         ids=["pad", "cat"])
def test_a_tile_over_a_padded_or_concatenated_operand_keeps_to_the_last_dim(fn: Any) -> None:
    # such an operand varies along every dim: more column dims would only add index divisions
    x = torch.randn(4, 6, 10, 12)
    ex = fl.explore(fn, x)
    assert all(k.columns in ((), (3,)) for k in ex.generated.kernels)
    fresh = torch.randn(4, 6, 10, 12)
    torch.testing.assert_close(ex(fresh), fn(fresh))


def _permute_chains(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, ...]:
    # a linear's backward in small: a weight transposed and transposed back for a product, the product's result
    # returned transposed twice; a three-step chain of a 3-D input read by a batched product and returned
    product = x @ w.t().t()
    chain = b.permute(0, 2, 1).permute(1, 0, 2).permute(2, 1, 0)
    return product.t().t(), torch.bmm(chain, c), chain


@pytest.mark.parametrize("square", [False, True], ids=["oblong", "square"])
def test_a_permute_of_a_permute_is_made_in_one_step_and_none_where_they_cancel(square: bool) -> None:
    n = 6 if square else 5
    args = (torch.randn(4, n), torch.randn(n, n), *((torch.randn(n, n, n),) * 2 if square
                                                    else (torch.randn(3, 2, 4), torch.randn(2, 4, 5))))
    ex = fl.explore(_permute_chains, *args)
    permutes = [line for line in ex.generated.wrapper.splitlines() if ".permute(" in line]
    # one view per chain that is returned or read where it is not the value itself
    assert len(permutes) == 2, "\n".join(permutes)
    assert "the permutes cancel" in ex.generated.wrapper
    fresh = tuple(torch.randn_like(a) for a in args)
    got, want = ex(*fresh), _permute_chains(*fresh)
    for g, e in zip(got, want, strict=True):
        torch.testing.assert_close(g, e)
        assert g.stride() == e.stride() and g._is_view() == e._is_view()
