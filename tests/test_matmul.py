"""Triton matmuls with fused epilogues (`explore(..., matmul="triton")`): rules, fusion decisions, generated source,
launch configs, and output equal to eager on fresh inputs (the interpreter on CPU; CUDA on the GPU machine).

The golden source of the linear+gelu kernel is tests/golden/linear_gelu_mm_triton.py (`--update-golden`).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import fusionlab as fl
from fusionlab.runtime.matmul import MatmulConfig, MatmulShape, choose_matmul, matmul_candidates
from tests.cases import CASES, Case, find
from tests.test_cases import assert_matches

GOLDEN = Path(__file__).parent / "golden"
EPILOGUE = "matmul epilogue: applied to the accumulator tile before the store"
TRITON_CASES = [c for c in CASES if "matmul" in c.tags] + [
    find(name) for name in ("matmul_between_chains", "bmm_softmax", "module_mlp", "module_sequential")]


def explore_case(case: Case, device: str = "cpu", **options: object) -> fl.Exploration:
    args, kwargs = case.make_inputs(device)
    return fl.explore(case.callable_on(device), *args, matmul="triton", **options, **kwargs)  # type: ignore[arg-type]


def code_only(source: str) -> str:
    return "\n".join(line.split("#")[0].rstrip() for line in source.splitlines())


@pytest.mark.parametrize("policy", ["none", "pointwise", "default"])
@pytest.mark.parametrize("case", TRITON_CASES, ids=lambda c: c.name)
def test_triton_matmul_matches_eager(case: Case, policy: str, device: str) -> None:
    fn = case.callable_on(device)
    ex = explore_case(case, device, policy=policy)
    fresh_args, fresh_kwargs = case.make_inputs(device)
    with torch.no_grad():
        expected = fn(*fresh_args, **fresh_kwargs)
    assert_matches(ex(*fresh_args, **fresh_kwargs), expected, case)


@pytest.mark.parametrize(("name", "epilogue"), [
    ("linear_gelu_mm", ("add", "erf")), ("linear_gelu_bf16", ("add", "erf")), ("addmm_bias", ("add",)),
    ("addmm_scaled", ("add", "mul")), ("f_linear_relu", ("add", "maximum")), ("mm_residual", ("sigmoid", "add")),
    ("mm_cast_out", ("cast", "mul")), ("mm_odd", ()),
])
def test_one_kernel_holds_the_matmul_and_its_epilogue(name: str, epilogue: tuple[str, ...]) -> None:
    ex = explore_case(find(name))
    (kernel,) = ex.generated.kernels
    assert kernel.kind == "matmul"
    (group,) = ex.fused.kernels
    ops = [ex.decomposed.graph[n].op for n in group.nodes]
    assert "matmul" in ops and all(op in ops for op in epilogue), ex.fused.as_text()
    code = code_only(kernel.source)
    assert code.count("tl.dot(") == 1 and code.count("tl.store(") == 1, kernel.source
    # the epilogue reads the accumulator after the K loop; nothing is stored before it
    assert code.index("tl.dot(") < code.index("tl.store("), kernel.source
    assert ex.compiled.launches_per_call == 1
    assert "extern" not in ex.generated.wrapper


def test_a_product_used_twice_is_computed_once_and_stored_twice() -> None:
    ex = explore_case(find("mm_two_outputs"))
    (kernel,) = ex.generated.kernels
    code = code_only(kernel.source)
    assert code.count("tl.dot(") == 1 and code.count("tl.store(") == 2, kernel.source


def test_epilogue_decisions_record_reasons() -> None:
    decisions = explore_case(find("linear_gelu_mm")).fused.decisions
    assert any(d.fused and d.producer == "matmul" and d.reason == EPILOGUE for d in decisions), decisions
    assert all(d.fused for d in decisions), [d.reason for d in decisions if not d.fused]


@pytest.mark.parametrize(("name", "reason", "kernels"), [
    ("f_linear_relu", "prologue into the matmul's inputs", 1),  # W.t() is a strided view read by the matmul
    ("matmul_between_chains", "prologue into the matmul's inputs", 2),  # relu(x * 2) is stored, then read
    ("mm_then_softmax", "a reduction over the matmul's output", 2),
    ("mm_chain", "a consumer needing another matmul", 2),
])
def test_what_cannot_be_an_epilogue_is_refused_with_a_reason(name: str, reason: str, kernels: int) -> None:
    ex = explore_case(find(name))
    refused = [d for d in ex.fused.decisions if not d.fused]
    assert any(d.reason.startswith(reason) for d in refused), ex.fused.as_text()
    assert len(ex.fused.kernels) == kernels, ex.fused.as_text()
    assert ex.verify(seed=0).ok


def test_forcing_a_prologue_is_refused_by_the_fusion_pass() -> None:
    """A user policy or force= cannot put a matmul's operand inside its kernel: the domain check says why."""
    ex = explore_case(find("matmul_between_chains"))
    with pytest.raises(fl.FusionError, match="prologues into a matmul's inputs are not fused"):
        ex.with_fusion(force=[("maximum", "matmul")])


def test_float64_and_batched_products_stay_extern_with_a_reason() -> None:
    ex = explore_case(find("mm_float64"))
    assert [n.op for n in ex.decomposed.graph.nodes if n.kind == "extern"] == ["aten.mm.default"]
    (reason,) = [r for _, r in ex.decomposed.fallbacks]
    assert "tl.dot does not compute torch.float64" in reason and "cuBLAS" in reason
    assert "tl.dot does not compute torch.float64" in ex.decomposed.as_text()
    bmm = explore_case(find("bmm_softmax"))
    assert any(n.op == "aten.bmm.default" for n in bmm.decomposed.graph.nodes if n.kind == "extern")


def test_extern_is_the_default() -> None:
    case = find("linear_gelu_mm")
    args, _ = case.make_inputs("cpu")
    default = fl.explore(case.fn, *args)
    explicit = fl.explore(case.fn, *args, matmul="extern")
    assert default.matmul == "extern"
    assert [n.op for n in default.decomposed.graph.nodes if n.kind == "extern"] == ["aten.mm.default"]
    assert not any(n.kind == "matmul" for n in default.decomposed.graph.nodes)
    assert default.generated.as_text().split("\n", 1)[1] == explicit.generated.as_text().split("\n", 1)[1]
    assert any("extern op: aten.mm.default runs in cuBLAS" in d.reason for d in default.fused.decisions)


def test_bad_matmul_option_names_what_was_given() -> None:
    with pytest.raises(ValueError, match=r"unknown matmul option 'cublas': use 'extern' .* or 'triton'"):
        fl.explore(lambda x, w: x @ w, torch.randn(4, 4), torch.randn(4, 4), matmul="cublas")


def test_with_fusion_keeps_the_matmul_option() -> None:
    ex = explore_case(find("linear_gelu_mm"))
    again = ex.with_fusion(forbid=[("matmul", "add")])
    assert again.matmul == "triton"
    assert len(again.fused.kernels) == 2 and again.verify(seed=0).ok


def test_no_size_in_matmul_source() -> None:
    fn = lambda x, w, b: F.gelu(x @ w + b)  # noqa: E731
    first = fl.explore(fn, torch.randn(37, 53), torch.randn(53, 71), torch.randn(71), matmul="triton")
    second = fl.explore(fn, torch.randn(20, 31), torch.randn(31, 9), torch.randn(9), matmul="triton")
    code = code_only(first.generated.kernels[0].source)
    baked = re.findall(r"(?<![\w.])(37|53|71)(?![\w.])", code)
    assert not baked, f"sizes {baked} baked into:\n{code}"
    assert [code_only(k.source) for k in first.generated.kernels] == \
        [code_only(k.source) for k in second.generated.kernels]
    assert "x.size(1)" in first.generated.wrapper  # K is read off the operand at run time


def test_dynamic_rows_reuse_the_matmul_kernel() -> None:
    fn = lambda x, w, b: torch.relu(x @ w + b)  # noqa: E731
    w, b = torch.randn(24, 40), torch.randn(40)
    ex = fl.explore(fn, torch.randn(16, 24), w, b, dynamic=True, matmul="triton")
    sources = [k.source for k in ex.generated.kernels]
    for rows in (3, 33):
        x = torch.randn(rows, 24)
        torch.testing.assert_close(ex(x, w, b), fn(x, w, b), atol=1e-4, rtol=1e-4)
    assert [k.source for k in ex.generated.kernels] == sources
    assert all(len(handle.modules) == 1 for handle in ex.compiled.handles)


def test_golden_matmul_source(update_golden: bool) -> None:
    ex = explore_case(find("linear_gelu_mm"))
    text = "\n\n\n".join([k.source.rstrip() for k in ex.generated.kernels] + [ex.generated.wrapper.rstrip()]) + "\n"
    path = GOLDEN / "linear_gelu_mm_triton.py"
    if update_golden or not path.exists():
        path.write_text(text)
        if not update_golden:
            pytest.fail(f"{path.name} did not exist and was written: review and commit it")
    assert text == path.read_text(), "the matmul kernel's source changed; if intended, run --update-golden"


def test_launch_configs() -> None:
    gpu = MatmulShape(8192, 16384, 4096, 2)
    assert choose_matmul(gpu, "cuda") == MatmulConfig(128, 256, 64, 8, 8, 3)
    found = matmul_candidates(gpu)
    assert found[0] == choose_matmul(gpu, "cuda") and len(found) == len(set(found)) >= 6
    assert {c.num_stages for c in found} >= {3, 4}
    small = MatmulShape(33, 65, 47, 4)
    for config in [choose_matmul(small, "cuda"), choose_matmul(small, "interpreter"), *matmul_candidates(small)]:
        assert min(config.BLOCK_M, config.BLOCK_N, config.BLOCK_K) >= 16  # tl.dot's smallest block
        assert config.BLOCK_M <= 64 and config.BLOCK_N <= 128 and config.BLOCK_K <= 64
    config = MatmulConfig(32, 32, 32, 8, 4, 3)
    assert config.grid(small) == (2 * 3,)
    assert config.meta(small)["EVEN_K"] is False and config.meta(MatmulShape(33, 65, 64))["EVEN_K"] is True
    assert "stages=3" in config.describe()


def test_interpreter_launch_records_its_config() -> None:
    ex = explore_case(find("linear_gelu_mm"))
    args, _ = find("linear_gelu_mm").make_inputs("cpu")
    ex(*args)
    (handle,) = ex.compiled.handles
    assert isinstance(handle.last_config, MatmulConfig)
    (info,) = ex.compiled.kernels
    assert info.backends == ("interpreter",) and info.config["BLOCK_K"] == 32


@pytest.mark.gpu
def test_autotune_records_matmul_choices() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device here")
    x, w, b = (torch.randn(256, 512, device="cuda", dtype=torch.bfloat16),
               torch.randn(512, 384, device="cuda", dtype=torch.bfloat16),
               torch.randn(384, device="cuda", dtype=torch.bfloat16))
    ex = fl.explore(lambda x, w, b: F.gelu(x @ w + b), x, w, b, matmul="triton", autotune=True)
    torch.testing.assert_close(ex(x, w, b), F.gelu(x @ w + b), atol=0.1, rtol=0.02)
    (info,) = ex.compiled.kernels
    assert info.tuning and "stages=" in info.tuning[0][0] and info.config["num_stages"] >= 2


def test_empty_product_launches_nothing() -> None:
    fn = lambda x, w, b: F.gelu(x @ w + b)  # noqa: E731
    x, w, b = torch.randn(0, 20), torch.randn(20, 33), torch.randn(33)
    ex = fl.explore(fn, x, w, b, matmul="triton")
    assert ex(x, w, b).shape == (0, 33)
    (info,) = ex.compiled.kernels
    assert info.backends == ()


def linear_gelu(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.gelu(F.linear(x, w, b))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_extern_addmm_adds_its_bias_in_the_consumers_kernel(dtype: torch.dtype) -> None:
    """gelu(x @ w.T + b) with cuBLAS: aten.mm, then one kernel that adds the bias and applies gelu (addmm's bias
    epilogue costs more than reading the bias row in a kernel that runs anyway)."""
    x, w, b = (torch.randn(48, 40, dtype=dtype), torch.randn(24, 40, dtype=dtype), torch.randn(24, dtype=dtype))
    ex = fl.explore(linear_gelu, x, w, b)
    assert [n.op for n in ex.decomposed.graph.nodes if n.kind == "extern"] == ["aten.mm.default"]
    assert [g.kind for g in ex.fused.groups if g.kind != "view"] == ["extern", "pointwise"]
    (kernel,) = ex.generated.kernels
    assert "add" in kernel.name and "erf" in kernel.name
    fresh = (torch.randn_like(x), torch.randn_like(w), torch.randn_like(b))
    tolerance = {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {}
    torch.testing.assert_close(ex(*fresh), linear_gelu(*fresh), **tolerance)


@pytest.mark.parametrize(("name", "fn"), [
    ("output", lambda x, w, b: F.linear(x, w, b)),
    ("reshaped", lambda x, w, b: F.gelu(F.linear(x, w, b).view(4, -1, w.shape[0]))),
    ("reshaped_columns", lambda x, w, b: F.gelu(F.linear(x, w, b).view(48, 4, 6))),
    ("reshaped_then_transposed", lambda x, w, b: F.gelu(F.linear(x, w, b).view(4, 12, 24).transpose(1, 2))),
    ("reshaped_output", lambda x, w, b: F.linear(x, w, b).view(4, 12, 24)),
    ("full_bias_reshaped", lambda x, w, b: torch.relu(torch.addmm(b.expand(48, 24), x, w.t()).view(4, 12, 24))),
    ("also_an_output", lambda x, w, b: (lambda y: (y, F.gelu(y)))(F.linear(x, w, b))),
])
def test_extern_addmm_keeps_its_bias_when_no_kernel_takes_it(name: str, fn: object) -> None:
    """The product is an output or goes through a reshape first: a separate add kernel would cost a round trip (and
    for a 3-D linear, cuBLAS's bias epilogue measured free), so the bias stays in cuBLAS's epilogue, and the views
    say why."""
    x, w, b = torch.randn(48, 40), torch.randn(24, 40), torch.randn(24)
    ex = fl.explore(fn, x, w, b)  # type: ignore[arg-type]
    assert [n.op for n in ex.decomposed.graph.nodes if n.kind == "extern"] == ["aten.addmm.default"], name
    assert any("bias stays in cuBLAS's epilogue" in reason for _, reason in ex.decomposed.fallbacks)
    fresh = (torch.randn_like(x), torch.randn_like(w), torch.randn_like(b))
    torch.testing.assert_close(ex(*fresh), fn(*fresh))  # type: ignore[operator]


def test_extern_addmm_scales_product_and_bias() -> None:
    def scaled(b: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.relu(torch.addmm(b, x, w, beta=0.5, alpha=2.0))

    b, x, w = torch.randn(24), torch.randn(48, 40), torch.randn(40, 24)
    ex = fl.explore(scaled, b, x, w)
    assert [n.op for n in ex.decomposed.graph.nodes if n.kind == "extern"] == ["aten.mm.default"]
    fresh = (torch.randn_like(b), torch.randn_like(x), torch.randn_like(w))
    torch.testing.assert_close(ex(*fresh), scaled(*fresh))
