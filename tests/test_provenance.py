"""Every node knows its module and its source line (issue 15): captured aten nodes, primitives, fusion groups and
kernels, through both entry points (fl.explore and torch.compile's backend); and the hints that use them (a model
in train mode drawing random numbers, a data-dependent branch)."""

from __future__ import annotations

import inspect
import re
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import fusionlab as fl
from fusionlab import dynamo_backend
from fusionlab.capture import CaptureError
from fusionlab.capture.provenance import module_path, provenance
from fusionlab.decompose import RULES
from fusionlab.display.tables import groups_table
from fusionlab.verify import verify_call

HERE = "test_provenance.py"


def line_of(function: Any, text: str) -> int:
    """The line number of the first line of `function` that contains `text`."""
    lines, start = inspect.getsourcelines(function)
    return start + next(i for i, line in enumerate(lines) if text in line)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.q(x)
        return torch.tanh(h) * 2 + x


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([Block(), Block()])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x.softmax(-1)


def _net() -> Net:
    torch.manual_seed(0)
    return Net().eval()


LINEAR = f"{HERE}:{line_of(Block.forward, 'self.q(x)')} in forward"
TANH = f"{HERE}:{line_of(Block.forward, 'torch.tanh')} in forward"
SOFTMAX = f"{HERE}:{line_of(Net.forward, 'softmax')} in forward"


def test_explore_every_stage_knows_module_and_line() -> None:
    model, x = _net(), torch.randn(4, 8)
    ex = fl.explore(model, x)
    places = {(node.target, node.module, node.source) for node in ex.captured.aten_nodes}
    assert ("aten.addmm.default", "layers.0.q", LINEAR) in places
    assert ("aten.addmm.default", "layers.1.q", LINEAR) in places
    assert ("aten.tanh.default", "layers.1", TANH) in places
    assert ("aten._softmax.default", "", SOFTMAX) in places
    assert all(node.source for node in ex.captured.aten_nodes), ex.captured.as_text()
    # every primitive carries its aten node's place
    aten = {node.name: node for node in ex.captured.aten_nodes}
    for node in ex.decomposed.graph.nodes:
        if node.kind != "input":
            assert (node.module, node.source) == (aten[node.origin].module, aten[node.origin].source), node
    # groups: their modules, and the module they share
    graph = ex.decomposed.graph
    for group in ex.fused.groups:
        computing = [graph[n] for n in group.nodes if graph[n].kind != "view"] or [graph[n] for n in group.nodes]
        assert group.modules == tuple(dict.fromkeys(n.module for n in computing)), group
    tanh_group = next(g for g in ex.fused.kernels if any(graph[n].op == "tanh" and graph[n].module == "layers.0"
                                                         for n in g.nodes))
    assert tanh_group.module == "layers.0" and "layers.0" in tanh_group.modules
    last = next(g for g in ex.fused.kernels if any(graph[n].op == "exp" for n in g.nodes))
    assert "" in last.modules and last.module == ""  # the top-level softmax fused with layer 1's epilogue
    # kernels carry the comment and expose the modules; the program still equals eager
    kernel = next(k for k in ex.generated.kernels if k.group == tanh_group.name)
    assert kernel.modules == tanh_group.modules
    assert f"# module: layers.0 ({TANH})" in kernel.source.split("@triton.jit")[0]
    torch.testing.assert_close(ex(x), model(x), atol=1e-5, rtol=1e-5)


def test_every_printed_stage_and_table_shows_the_place() -> None:
    ex = fl.explore(_net(), torch.randn(4, 8))
    for stage in (ex.captured, ex.decomposed):
        text = stage.as_text()
        assert f"# in layers.0.q ({LINEAR})" in text and f"# in layers.1 ({TANH})" in text
        assert f"# {SOFTMAX}" in text
        lines = text.splitlines()
        header = lines.index(f"    # in layers.1.q ({LINEAR})")
        assert "aten.t" in lines[header + 1] or "permute" in lines[header + 1], lines[header + 1]
    fused = ex.fused.as_text()
    assert "    # in layers.0\n" in fused  # the bias add (line of self.q(x)) and tanh: two lines, one module
    assert "    # across layers.1.q, layers.1, (top level)\n" in fused
    generated = ex.generated.as_text()
    assert f"# module: layers.1 ({TANH})" in generated and f"# module: (top level) ({SOFTMAX})" in generated
    assert re.search(r"# extern: aten\.mm\.default runs eagerly \(in layers\.0\.q\)", ex.generated.wrapper)
    table = re.sub(r" (style|data-row)='[^']*'", "", groups_table(ex.fused))
    assert "<th>module</th><th>source</th>" in table
    assert f"<td>layers.0</td><td>{LINEAR}; {TANH}</td>" in table


def test_plain_function_has_lines_and_kernels_stay_unmarked() -> None:
    def gelu_bias(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return F.gelu(x + b)

    ex = fl.explore(gelu_bias, torch.randn(4, 8), torch.randn(8))
    line = f"{HERE}:{line_of(gelu_bias, 'F.gelu')} in gelu_bias"
    assert {(n.module, n.source) for n in ex.captured.aten_nodes} == {("", line)}
    assert all(g.modules == () and g.module == "" for g in ex.fused.groups)
    assert all("# module:" not in k.source for k in ex.generated.kernels)  # golden sources are unchanged
    assert f"    # {line}" in ex.decomposed.as_text()


def test_gpt2_ops_name_their_transformers_module() -> None:
    pytest.importorskip("transformers")
    from transformers import pytorch_utils

    from fusionlab import models

    model, inputs = models.build("gpt2", size="tiny")
    ex = fl.explore(model, **inputs)
    addmm = f"transformers/pytorch_utils.py:{line_of(pytorch_utils.Conv1D.forward, 'addmm')} in forward"
    places = {(n.target, n.module, n.source) for n in ex.captured.aten_nodes}
    assert ("aten.addmm.default", "transformer.h.0.attn.c_attn", addmm) in places  # q, k and v in one product
    assert ("aten.addmm.default", "transformer.h.1.mlp.c_proj", addmm) in places
    norms = {n.module: n.source for n in ex.captured.aten_nodes if n.target == "aten.native_layer_norm.default"}
    assert set(norms) == {"transformer.h.0.ln_1", "transformer.h.0.ln_2", "transformer.h.1.ln_1",
                          "transformer.h.1.ln_2", "transformer.ln_f"}
    assert all(s.startswith("transformers/models/gpt2/modeling_gpt2.py:") for s in norms.values()), norms
    assert not any("torch/" in n.source for n in ex.captured.aten_nodes)  # torch's own frames are skipped
    modules = {m for g in ex.fused.groups for m in g.modules}
    assert {"transformer.h.0.attn.c_attn", "transformer.h.1.ln_2", "lm_head"} <= modules
    assert any(k.source.startswith("# module: transformer.h.0.") for k in ex.generated.kernels)


def test_backend_graphs_carry_dynamo_provenance_forward_and_backward() -> None:
    torch._dynamo.reset()
    model = _net().train()
    eager = _net().train()
    x = torch.randn(4, 8)
    before = dynamo_backend.mark()
    loss = torch.compile(model, backend="fusionlab")(x).square().sum()
    loss.backward()
    expected = eager(x).square().sum()
    expected.backward()
    torch.testing.assert_close(loss, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(model.layers[0].q.weight.grad, eager.layers[0].q.weight.grad, atol=1e-5, rtol=1e-5)
    graphs = {g.role: g.exploration for g in dynamo_backend.since(before)}
    forward = {(n.target, n.module, n.source) for n in graphs["forward"].captured.aten_nodes}
    assert ("aten.addmm.default", "layers.1.q", LINEAR) in forward
    assert ("aten.tanh.default", "layers.0", TANH) in forward
    backward = graphs["backward"]
    products = {n.module for n in backward.captured.aten_nodes if n.target == "aten.mm.default"}
    assert products == {"layers.0.q", "layers.1.q"}  # each weight gradient names the Linear it belongs to
    assert any("# module: layers." in k.source for k in backward.generated.kernels)


def test_dynamo_module_paths_are_dotted_from_the_root() -> None:
    assert module_path("L['self'].transformer.h[0]._modules['attn']") == "transformer.h.0.attn"
    assert module_path("L['self'].layers.0.q") == "layers.0.q"
    assert module_path("G['block'].mlp") == "block.mlp"
    meta = {"nn_module_stack": {"a": ("L['self'].h.0", object), "b": ("L['self'].h.0.attn", object)},
            "stack_trace": '  File "/x/lib/python3.12/site-packages/transformers/models/gpt2/modeling_gpt2.py", '
                           'line 12, in forward\n    y = f(x)\n'
                           f'  File "{torch.__file__}", line 3, in f\n    return g(x)\n'}
    assert provenance(meta) == ("h.0.attn", "transformers/models/gpt2/modeling_gpt2.py:12 in forward")


# -- hints ------------------------------------------------------------------------------------------------------------
class Dropping(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.drop = nn.Dropout(0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.proj(x)).relu()


def test_train_mode_dropout_is_named_and_matches_eager() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(Dropping(), Dropping()).train()
    ex = fl.explore(model, torch.randn(4, 8))
    report = ex.verify()
    assert report.ok, report.as_text()
    assert report.note.startswith("the model is in train mode and draws random numbers (Dropout at 0.drop, "
                                  "Dropout at 1.drop)")

    def out_of_step(*args: Any) -> Any:
        torch.rand(3)  # a draw eager does not make: every mask after it differs
        return ex(*args)

    report = verify_call(ex.fn, ex.example_args, ex.example_kwargs, ex.captured.result, out_of_step,
                         ex.flat_inputs, lambda: None)  # type: ignore[arg-type, return-value]
    assert not report.ok
    assert "train mode" in report.note and "Dropout at 1.drop" in report.note and "model.eval()" in report.note
    assert "model.eval()" in report.as_text()


def _draws_out_of_data_order(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    h = torch.exp(x)
    a = h * torch.rand_like(h)  # waits for exp's kernel, which also waits for the product below
    b = y * torch.rand_like(y)  # ready at once: must still be drawn second
    return a + b, h + torch.mm(y, y)


def _unused_draw(x: torch.Tensor) -> torch.Tensor:
    torch.rand(3)  # unused, but it moves the generator on
    return x * torch.rand_like(x)


@pytest.mark.parametrize("fn", [_draws_out_of_data_order, _unused_draw])
def test_random_ops_draw_in_eager_order(fn: Any) -> None:
    inputs = [torch.randn(4, 4) for _ in inspect.signature(fn).parameters]
    ex = fl.explore(fn, *inputs)
    torch.manual_seed(11)
    expected = fn(*inputs)
    torch.manual_seed(11)
    actual = ex(*inputs)
    torch.testing.assert_close(actual, expected)


def test_gpt2_in_train_mode_with_dropout_verifies() -> None:
    pytest.importorskip("transformers")
    from fusionlab import models

    model, inputs = models.build("gpt2", size="tiny", train=True, dropout=0.1)
    report = fl.explore(model, **inputs).verify()
    assert report.ok, report.as_text()
    assert "train mode" in report.note and "Dropout at transformer.h.0.mlp.dropout" in report.note


class Branching(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(4, 4)
        self.gate = Gate()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gate(self.inner(x))


class Gate(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return x * 2
        return x - 1


def test_data_dependent_branch_is_named_with_its_line_and_module() -> None:
    line = line_of(Gate.forward, "if x.sum() > 0:")
    with pytest.raises(CaptureError) as error:
        fl.explore(Branching(), torch.randn(2, 4)).captured  # noqa: B018
    message = str(error.value)
    assert message.startswith(f"data-dependent branch at {HERE}:{line} (`if x.sum() > 0:`) in module gate:"), message
    assert "torch.where" in message and "backend='fusionlab'" in message and "Guard" not in message


def test_backend_graph_break_names_the_line() -> None:
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = Branching()
    x = torch.randn(2, 4)
    before = dynamo_backend.mark()
    torch.testing.assert_close(torch.compile(model, backend="fusionlab")(x), model(x))
    ended = [g.ended_by for g in dynamo_backend.since(before) if g.ended_by]
    line = line_of(Gate.forward, "if x.sum() > 0:")
    assert ended and re.search(rf"graph break at \S*{HERE}:{line} `if x.sum\(\) > 0:`", ended[0]), ended


def test_first_divergence_names_the_module_and_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(RULES, torch.ops.aten.tanh, lambda b, x: b.pointwise("sin", x))  # a wrong rule
    report = fl.explore(_net(), torch.randn(4, 8)).verify()
    divergence = report.first_divergence
    assert not report.ok and divergence is not None and divergence.stage == "decomposed"
    assert divergence.text().endswith(f"; the node comes from layers.0 ({TANH})"), divergence.text()


def test_the_graph_tooltips_say_where_a_node_and_a_group_come_from() -> None:
    """Hovering a node of the drawn graph names its module and source line; a group's cluster names its module."""
    from fusionlab.display.graph import draw_graph

    ex = fl.explore(_net(), torch.randn(4, 8))
    decomposed = draw_graph(ex.fused).dot
    assert re.search(r'tooltip="[^"]*tanh[^"]*\\nin layers\.1 \(' + re.escape(TANH), decomposed), decomposed[:2000]
    assert re.search(r'tooltip="pointwise_\d+[^"]*; in layers\.0"', decomposed)
    captured = draw_graph(ex.fused, level="captured").dot
    assert re.search(r'tooltip="[^"]*addmm[^"]*\\nin layers\.0\.q \(' + re.escape(LINEAR), captured)
    page = ex.to_html(timings=False, inductor=False)
    assert re.search(r"<h3[^>]*>pointwise_\d+[^<]*; in layers\.0</h3>", page)
