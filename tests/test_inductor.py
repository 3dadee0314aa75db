"""The Inductor adapter against the installed torch: kernels, aten ops mapped onto our nodes, WhyNoFuse records.

Inductor's first C++ compile in a process takes ~10 s on a small CPU: the views are module-scoped fixtures.
"""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from fusionlab.inductor import compile_inductor, inductor_view
from fusionlab.inductor.records import InductorDecision, InductorKernel, InductorView, captured_pairs, match_nodes


def gelu_softmax_and_column_sum(x: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = F.gelu(x + b)
    return torch.softmax(y, -1), y.sum(0)


def column_mean_then_row_softmax(x: torch.Tensor) -> torch.Tensor:
    # A reduction over axis 0 feeding one over axis 1: Inductor's Triton backend keeps them in two kernels.
    return torch.softmax(x - x.mean(0, keepdim=True), -1)


def relu_linear_gelu(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.gelu(torch.relu(x) @ w + b)


def aten_nodes(fn, *inputs) -> dict[str, str]:  # type: ignore[no-untyped-def]
    graph = make_fx(fn)(*inputs).graph
    return {node.name: str(node.target) for node in graph.nodes if node.op == "call_function"}


@pytest.fixture(scope="module")
def cpp_case() -> tuple[InductorView, dict[str, str]]:
    inputs = (torch.randn(64, 256), torch.randn(256))
    nodes = aten_nodes(gelu_softmax_and_column_sum, *inputs)
    return inductor_view(gelu_softmax_and_column_sum, inputs, captured_node_names=nodes), nodes


@pytest.fixture(scope="module")
def triton_case() -> tuple[InductorView, dict[str, str]]:
    inputs = (torch.randn(64, 256),)
    nodes = aten_nodes(column_mean_then_row_softmax, *inputs)
    view = inductor_view(column_mean_then_row_softmax, inputs, captured_node_names=nodes, cpu_backend="triton")
    return view, nodes


def test_cpp_kernels_found_with_sources_and_aten_ops(cpp_case: tuple[InductorView, dict[str, str]]) -> None:
    view, _ = cpp_case
    assert view.device == "cpu" and not view.generated_only
    assert view.kernels and view.launches >= len(view.kernels)
    for kernel in view.kernels:
        assert kernel.language == "cpp" and kernel.name.startswith("cpp_fused_")
        assert "extern \"C\"" in kernel.source
        assert kernel.aten_ops
    ops = {op for kernel in view.kernels for op in kernel.aten_ops}
    assert {"add", "gelu", "_softmax", "sum"} <= ops


def test_cpp_kernels_cover_every_captured_node(cpp_case: tuple[InductorView, dict[str, str]]) -> None:
    view, nodes = cpp_case
    covered = {name for kernel in view.kernels for name in kernel.node_names}
    assert covered == set(nodes)
    assert view.kernels_of_node("_softmax")


def test_declined_fusions_are_records_with_reasons(cpp_case: tuple[InductorView, dict[str, str]]) -> None:
    view, _ = cpp_case
    declined = [d for d in view.decisions if not d.fused]
    assert declined, "Inductor declines at least one pair here (two reductions over different axes)"
    assert all(d.reason and d.node1 and d.node2 for d in declined)
    assert any(d.fused and d.reason == "fused" for d in view.decisions)
    assert len(set(view.decisions)) == len(view.decisions)


def test_fusion_logger_is_restored(cpp_case: tuple[InductorView, dict[str, str]]) -> None:
    logger = logging.getLogger("torch._inductor.scheduler.__fusion")
    assert not any(type(h).__name__ == "_FusionCollector" for h in logger.handlers)
    assert not logger.isEnabledFor(logging.DEBUG) or logger.propagate


def test_triton_source_on_cpu_is_generated_not_run(triton_case: tuple[InductorView, dict[str, str]]) -> None:
    view, nodes = triton_case
    assert view.generated_only
    assert len(view.kernels) == 2
    for kernel in view.kernels:
        assert kernel.language == "triton" and kernel.name.startswith("triton_")
        assert "@triton.jit" in kernel.source and "def get_args" not in kernel.source
        assert kernel.num_gb is not None and kernel.num_gb > 0 and kernel.bytes_moved
        assert kernel.scheduler_nodes
    first, second = view.kernels
    assert first.node_names == ("mean",)
    assert set(second.node_names) >= {"sub", "_softmax"}
    assert any(not d.fused and "shared data" in d.reason for d in view.decisions)


def test_extern_calls_are_kernels_and_take_their_nodes() -> None:
    inputs = (torch.randn(32, 64), torch.randn(64, 128), torch.randn(128))
    nodes = aten_nodes(relu_linear_gelu, *inputs)
    view = inductor_view(relu_linear_gelu, inputs, captured_node_names=nodes, cpu_backend="triton")
    extern = [kernel for kernel in view.kernels if kernel.language == "extern"]
    assert len(extern) == 1 and extern[0].aten_ops[0] in ("addmm", "mm")
    assert "mm" in extern[0].node_names
    assert view.launches == len(view.kernels) == 3


def test_compile_inductor_returns_a_working_function_and_its_compile_time() -> None:
    x = torch.randn(32, 64)
    compiled, seconds = compile_inductor(lambda t: torch.relu(t) * 2, (x,))
    assert seconds > 0
    torch.testing.assert_close(compiled(x), torch.relu(x) * 2)


def test_captured_nodes_in_every_accepted_form() -> None:
    class Node:
        def __init__(self, name: str, target: str) -> None:
            self.name, self.target = name, target

    expected = [("add", "add"), ("mul_1", "mul"), ("_softmax", "_softmax")]
    assert captured_pairs({"add": "aten.add.Tensor", "mul_1": "torch.ops.aten.mul.Tensor",
                           "_softmax": "aten._softmax.default"}) == expected
    assert captured_pairs(["add", "mul_1", "_softmax"]) == expected
    assert captured_pairs([Node("add", "aten.add.Tensor"), Node("mul_1", "aten.mul.Tensor"),
                           Node("_softmax", "aten._softmax.default")]) == expected
    assert captured_pairs({"mm": torch.ops.aten.mm.default}) == [("mm", "mm")]
    with pytest.raises(TypeError, match="captured_node_names"):
        captured_pairs([3])


def kernel(name: str, *ops: str) -> InductorKernel:
    return InductorKernel(name, "source", "triton", ops, (), None, None)


def test_matching_by_op_and_order() -> None:
    kernels = [kernel("k0", "add", "native_layer_norm"), kernel("k1", "native_layer_norm"), kernel("k2", "add")]
    captured = [("add", "add"), ("native_layer_norm", "native_layer_norm"), ("add_1", "add")]
    matched = match_nodes(kernels, captured)
    assert matched[0].node_names == ("add", "native_layer_norm")  # k == n: in order
    assert matched[1].node_names == ("native_layer_norm",)  # one node split over two kernels
    assert matched[2].node_names == ("add_1",)
    several = match_nodes([kernel("k0", "mul")], [("mul", "mul"), ("mul_1", "mul"), ("relu", "relu")])
    assert several[0].node_names == ("mul", "mul_1")


def test_kernel_names_split_into_aten_ops() -> None:
    from fusionlab.inductor.adapter import _ops_from_name

    assert _ops_from_name("cpp_fused__softmax_add_gelu_sum_0") == ("_softmax", "add", "gelu", "sum")
    assert _ops_from_name("triton_per_fused_native_layer_norm_3") == ("native_layer_norm",)
    assert _ops_from_name("cpp_fused_add_native_layer_norm_12") == ("add", "native_layer_norm")
    assert _ops_from_name("not_a_kernel") == ()


def test_text_and_html_escape_everything() -> None:
    view = InductorView(
        kernels=(InductorKernel("k<0>", "if a < b && c > d: pass", "triton", ("add",), ("add",), 0.5, 0),),
        decisions=(InductorDecision("op<0>", "op1", "reason & <why>"),),
        wrapper_source="",
        device="cpu",
        launches=1,
    )
    page = view._repr_html_()
    assert "<why>" not in page and "&lt;why&gt;" in page and "a &lt; b &amp;&amp; c &gt; d" in page
    assert "k<0>" in view.as_text() and "reason & <why>" in view.as_text()
    assert "1 kernels" in repr(view)
    with pytest.raises(KeyError, match="k<0>"):
        view.kernel("missing")


def test_unknown_cpu_backend_is_refused() -> None:
    with pytest.raises(ValueError, match="cpu_backend"):
        inductor_view(torch.relu, (torch.randn(4),), cpu_backend="halide")  # type: ignore[arg-type]


@pytest.mark.gpu
def test_cuda_view_has_triton_kernels_bytes_and_decisions() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device here")
    inputs = (torch.randn(1024, 1024, device="cuda"),)
    nodes = aten_nodes(column_mean_then_row_softmax, *inputs)
    view = inductor_view(column_mean_then_row_softmax, inputs, captured_node_names=nodes)
    assert not view.generated_only and view.device.startswith("cuda")
    assert all(k.language == "triton" and k.num_gb for k in view.kernels)
    assert {name for k in view.kernels for name in k.node_names} == set(nodes)
    assert view.decisions
