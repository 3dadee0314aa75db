"""The Inductor adapter against the installed torch: kernels, aten ops mapped onto our nodes, WhyNoFuse records.

Inductor's first C++ compile in a process takes ~10 s on a small CPU: the views are module-scoped fixtures.
"""

from __future__ import annotations

import html
import logging
import re

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

import fusionlab as fl
from fusionlab.display.source import source_panel
from fusionlab.inductor import compile_inductor, group_labels, inductor_view
from fusionlab.inductor.matching import InductorNode, OurNode, match_graph
from fusionlab.inductor.records import (
    InductorDecision,
    InductorKernel,
    InductorOperation,
    InductorView,
    captured_pairs,
    match_nodes,
)


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


# ---- Inductor's operations in our names: matching, decisions, the decorator fold ---------------------------


def layer_norm_gelu_softmax(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.softmax(F.gelu(F.layer_norm(x, (32,), w, b)) + b, -1)


@pytest.fixture(scope="module")
def explored() -> tuple[fl.Exploration, InductorView]:
    ex = fl.explore(layer_norm_gelu_softmax, torch.randn(8, 32), torch.randn(32), torch.randn(32))
    return ex, ex.inductor(cpu_backend="triton")


def test_every_inductor_decision_names_our_nodes_and_groups(explored: tuple[fl.Exploration, InductorView]) -> None:
    ex, view = explored
    captured = {node.name for node in ex.captured.aten_nodes}
    assert view.operations and all(op.name.startswith("op") for op in view.operations)
    assert all(op.nodes and set(op.nodes) <= captured and not op.unmatched for op in view.operations)
    assert view.matches and all(m.ours in captured for m in view.matches)
    rules = {m.inductor: (m.ours, m.rule) for m in view.matches}
    assert rules["var_mean"] == ("native_layer_norm", "decomposed")  # Inductor's decomposition, our one node
    assert rules["amax"] == ("_softmax", "decomposed") and rules["erf"] == ("gelu", "decomposed")
    labels = group_labels(ex.fused)
    assert view.decisions
    for decision in view.decisions:
        for side in (decision.node1, decision.node2):
            ours, unmatched = view.our_nodes_of(side, decision.graph)
            assert ours and set(ours) <= captured and not unmatched
        text = view.describe(decision, labels)
        assert "(our group" in text and f"[Inductor's {decision.node1} + {decision.node2}]" in text
        assert "not recorded" not in text and "unmatched" not in text
    first = view.decisions[0]
    assert text_before_bracket(view.describe(first)).split(" + ")[0].split(", ")[0] in captured
    assert "our nodes (1)" in view.decisions_html(labels) and "Inductor's op" in view.decisions_html(labels)


def text_before_bracket(line: str) -> str:
    return line.split(" | ")[0]


def test_kernels_cover_our_nodes_through_their_operations(explored: tuple[fl.Exploration, InductorView]) -> None:
    ex, view = explored
    covered = {name for kernel in view.kernels for name in kernel.node_names}
    computed = {n.name for n in ex.captured.aten_nodes if n.target != "getitem"}
    assert computed <= covered
    for kernel in view.kernels:
        assert kernel.scheduler_nodes and all(re.fullmatch(r"op\d+", name) for name in kernel.scheduler_nodes)


def test_decorator_is_folded_and_the_full_source_kept(explored: tuple[fl.Exploration, InductorView]) -> None:
    _, view = explored
    kernel = next(k for k in view.kernels if k.language == "triton")
    assert "triton_meta=" in kernel.decorator and "inductor_meta=" in kernel.decorator
    assert kernel.decorator.startswith("@triton_heuristics.") and len(kernel.decorator.splitlines()) >= 4
    assert kernel.body.startswith("@triton.jit\ndef triton_") and "triton_meta" not in kernel.body
    assert kernel.decorator in kernel.source and "def triton_" in kernel.source  # the text API keeps it all
    page = source_panel(kernel.name, kernel.body, decorator=kernel.decorator)
    lines = len(kernel.decorator.splitlines())
    assert f"decorator: {lines} lines (show)</summary>" in page
    code = page.split("</details>")[-1]
    shown = html.unescape(re.sub(r"<[^>]+>", "", code)).strip()
    assert shown.startswith("@triton.jit\ndef triton_")


def test_in_place_names_match_their_functional_form() -> None:
    ours = [OurNode("add_1", "add", "add"), OurNode("relu_", "relu_", "relu_"), OurNode("relu__1", "relu_", "relu_")]
    theirs = [InductorNode("add_1", "add", "add"), InductorNode("relu", "relu", "relu"),
              InductorNode("relu_1", "relu", "relu")]
    assert [(m.ours, m.rule) for m in match_graph(theirs, ours)] == [
        ("add_1", "same name"), ("relu_", "same name"), ("relu__1", "same name")]
    # Different names: the k-th relu is our k-th relu_.
    renamed = [InductorNode("relu_7", "relu", "relu"), InductorNode("relu_8", "relu", "relu")]
    assert [(m.ours, m.rule) for m in match_graph(renamed, ours)] == [("relu_", "op and order"),
                                                                      ("relu__1", "op and order")]


def test_decomposed_calls_split_by_their_source_and_unmatched_is_said() -> None:
    ours = [OurNode("native_layer_norm", "native_layer_norm", "native_layer_norm"), OurNode("mul", "mul", "mul"),
            OurNode("native_layer_norm_1", "native_layer_norm", "native_layer_norm")]
    theirs = [InductorNode("var_mean", "var_mean", "native_layer_norm", "y"),
              InductorNode("mul", "mul", "native_layer_norm", "y"),  # our `mul`'s name, but from layer_norm
              InductorNode("mul_2", "mul", "mul", "mul"),
              InductorNode("var_mean_1", "var_mean", "native_layer_norm", "layer_norm_1"),
              InductorNode("cat", "cat", "cat", "cat")]
    found = [(m.inductor, m.ours, m.rule) for m in match_graph(theirs, ours)]
    assert found == [("var_mean", "native_layer_norm", "decomposed"), ("mul", "native_layer_norm", "decomposed"),
                     ("mul_2", "mul", "op and order"), ("var_mean_1", "native_layer_norm_1", "decomposed"),
                     ("cat", None, "unmatched")]
    # Two of Inductor's muls for one of ours: not guessed.
    two = [InductorNode("mul_2", "mul", "mul"), InductorNode("mul_3", "mul", "mul")]
    assert [m.rule for m in match_graph(two, ours[1:2])] == ["unmatched", "unmatched"]


def test_a_decision_on_nodes_no_rule_matches_says_unmatched() -> None:
    operations = (InductorOperation("op0", "SchedulerNode", ("buf0",), ("gelu_x",), ("gelu",)),
                  InductorOperation("op1", "SchedulerNode", ("buf1",), ("mul_tensor",), (), ("mul_tensor",)))
    view = InductorView((), (InductorDecision("op0", "op1", "no shared data"),), "", "cpu", operations=operations)
    text = view.describe(view.decisions[0], {"gelu": "pointwise_1"})
    assert text == ("gelu (our group pointwise_1) + unmatched: Inductor's mul_tensor | not fused: no shared data  "
                    "[Inductor's op0 + op1]")
    assert view.our_nodes_of("op0_op1") == (("gelu",), ("mul_tensor",))
    assert "op7 (not recorded)" in view.describe(InductorDecision("op7", "op0", "fused", True))
