"""fusionlab.display.modules and the ModuleGraph widget: the zoo's tiny GPT-2 folded by module, clicks, search,
plumbing, the icicle of time by module, and the Explorer folding a big graph."""

from __future__ import annotations

import re
import time

import pandas
import pytest
import torch
from torch import nn

import fusionlab as fl
from fusionlab import models
from fusionlab.display.modules import (
    ModuleTree,
    draw_modules,
    icicle,
    is_big,
    modelled_frame,
    module_tree,
    plumbing,
    short_name,
    size_text,
)
from fusionlab.widgets import Explorer
from fusionlab.widgets.module_graph import ModuleGraph

TOP = {"transformer.wte", "transformer.wpe", "transformer.h.0", "transformer.h.1", "transformer.ln_f", "lm_head"}


@pytest.fixture(scope="module")
def gpt2() -> fl.Exploration:
    model, inputs = models.build("gpt2", size="tiny", train=False)
    return fl.explore(model, **inputs)


@pytest.fixture(scope="module")
def tree(gpt2: fl.Exploration) -> ModuleTree:
    return module_tree(gpt2)


def boxes(drawing: object) -> set[str]:
    return {drawing.names[i] for i, kind in drawing.kinds.items() if kind == "module"}  # type: ignore[attr-defined]


def test_tree_holds_the_layers_and_its_counts_add_up(gpt2: fl.Exploration, tree: ModuleTree) -> None:
    graph = gpt2.decomposed.graph
    assert {"transformer", "transformer.h", "transformer.h.0", "transformer.h.1.attn", "transformer.h.1.mlp"} <= \
        {info.path for info in tree}
    assert len(tree.root.nodes) == len(graph.nodes) == len(set(tree.root.nodes))
    for info in tree:  # a module's nodes are its own plus its children's, each once
        assert len(info.nodes) == len(info.own) + sum(len(tree[c].nodes) for c in info.children)
        assert info.nbytes == sum(g.bytes_read + g.bytes_written for g in gpt2.fused.groups
                                  if g.name in (*info.kernels, *info.externs)) or info.path == ""
    kernels = [g.name for g in gpt2.fused.groups if g.is_kernel]
    assert sorted(tree.root.kernels) == sorted(kernels)
    assert tree["transformer.h.0"].nbytes == tree["transformer.h.1"].nbytes > 0  # two identical layers
    assert tree["transformer.h.0.attn.c_attn"].externs  # the projection runs in cuBLAS (extern)
    # a layer's parameters sit in the module that owns them
    assert tree.module_of["transformer_h_0_ln_1_weight"] == "transformer.h.0.ln_1"
    assert "h.0.attn" in tree.as_text()
    with pytest.raises(KeyError, match="no module 'transformer.h.9'"):
        tree["transformer.h.9"]


def test_the_first_view_is_one_box_per_top_level_module(tree: ModuleTree) -> None:
    assert tree.default_expanded() == {"", "transformer", "transformer.h"}
    drawing = draw_modules(tree)
    assert boxes(drawing) == TOP
    box_lines = [line for line in drawing.dot.splitlines() if re.match(r"\s+m\d+ \[", line)]
    assert len(box_lines) == len(TOP)
    h0 = drawing.id_of("transformer.h.0")
    label = next(line for line in box_lines if line.strip().startswith(f"{h0} "))
    assert 'label="h.0\\n' in label and "kernels" in label and "kB" in label and 'tooltip="transformer.h.0:' in label
    # edges are added up between boxes: one edge from layer 0 to layer 1
    h1 = drawing.id_of("transformer.h.1")
    assert len(re.findall(rf"^\s+{h0} -> {h1} ", drawing.dot, flags=re.MULTILINE)) == 1
    with pytest.raises(ValueError, match="cannot expand 'nope'"):
        draw_modules(tree, {"", "nope"})


def test_a_click_on_a_layer_expands_it_and_a_click_on_its_label_folds_it(gpt2: fl.Exploration) -> None:
    view = ModuleGraph(gpt2)
    first_dot, first_svg = view.dot, view.svg
    assert view.expanded == ["", "transformer", "transformer.h"] and "<svg" in first_svg
    changes: list[list[str]] = []
    view.observe(lambda change: changes.append(change["new"]), names="expanded")
    layer = view.drawing.id_of("transformer.h.0")
    assert layer is not None and view.kinds[layer] == "module"
    view._handle_custom_msg({"event": "click", "id": layer}, [])  # what the front end sends on a click
    assert changes == [["", "transformer", "transformer.h", "transformer.h.0"]]
    assert view.kinds[f"cluster_{layer}"] == "cluster" and layer not in view.kinds
    assert view.dot != first_dot and view.svg != first_svg
    assert {"transformer.h.0.attn", "transformer.h.0.mlp"} <= boxes(view.drawing)
    view._handle_custom_msg({"event": "click", "id": f"cluster_{layer}"}, [])
    assert view.expanded == ["", "transformer", "transformer.h"] and view.dot == first_dot
    node = next(dot_id for dot_id, kind in view.kinds.items() if kind == "node")
    view.click(node)
    assert view.selected == view.names[node] and "selected: " in view.status
    view.expand("transformer.h.1.mlp.act")  # opens the modules above it too
    assert {"transformer.h.1", "transformer.h.1.mlp", "transformer.h.1.mlp.act"} <= set(view.expanded)
    view._handle_custom_msg({"event": "reset"}, [])
    assert view.expanded == ["", "transformer", "transformer.h"]
    with pytest.raises(ValueError, match="is not drawn now"):
        view.click("transformer.h.0.attn")


def test_search_finds_a_node_and_opens_its_modules(gpt2: fl.Exploration, tree: ModuleTree) -> None:
    graph = gpt2.decomposed.graph
    target = next(n for n in graph.nodes if n.kind == "reduction" and n.module == "transformer.h.1.ln_2")
    view = ModuleGraph(gpt2)
    view.search = target.name
    assert target.name in view.matches
    assert tree.module_of[target.name] in view.expanded and "transformer.h.1" in view.expanded
    node_id = view.drawing.id_of(target.name)
    line = next(line for line in view.dot.splitlines() if line.strip().startswith(f"{node_id} ["))
    assert 'color="#f59e0b"' in line and "match" in view.status
    view.search = "c_attn"  # a module path
    assert "transformer.h.0.attn.c_attn" in view.matches and view.drawing.id_of("transformer.h.0.attn.c_attn")
    assert tree.find("no-such-thing") == ()


def test_hide_plumbing_hides_and_counts(gpt2: fl.Exploration, tree: ModuleTree) -> None:
    graph = gpt2.decomposed.graph
    hidden = plumbing(graph)
    assert all(graph[n].kind == "view" for n in hidden if graph[n].op in ("reshape", "permute", "expand"))
    assert any(graph[n].op == "iota" for n in hidden)  # the position ids
    assert not any(graph[n].kind in ("matmul", "extern", "reduction") for n in hidden)
    opened = tree.default_expanded() | {"transformer.h.0", "transformer.h.0.attn"}
    shown, everything = draw_modules(tree, opened), draw_modules(tree, opened, hide_plumbing=False)
    assert shown.hidden == len(hidden) > 0 and everything.hidden == 0
    own_hidden = [n for n in tree["transformer.h.0.attn"].own if n in hidden]
    assert own_hidden and all(everything.id_of(n) and shown.id_of(n) is None for n in own_hidden)
    view = ModuleGraph(gpt2)
    assert f"{len(hidden)} plumbing nodes hidden" in view.status
    view.hide_plumbing = False
    assert "plumbing shown" in view.status


def test_plumbing_of_a_small_function() -> None:
    def masked(x: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(x.shape[-1])
        mask = positions[None, :] <= positions[:, None]
        return torch.softmax(x.masked_fill(~mask, float("-inf")), -1).reshape(-1)

    ex = fl.explore(masked, torch.randn(4, 4))
    graph = ex.decomposed.graph
    hidden = plumbing(graph)
    computing = [n for n in graph.nodes if n.kind not in ("input", "view")]
    assert {graph[n].op for n in hidden} >= {"iota", "reshape"}
    assert {"exp", "sum"} <= {n.op for n in computing if n.name not in hidden}  # the softmax is compute


def test_default_view_of_a_model_without_numbered_layers() -> None:
    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm, self.up, self.down = nn.LayerNorm(16), nn.Linear(16, 32), nn.Linear(32, 16)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.first, self.second = Block(), Block()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.second(self.first(x))

    small = module_tree(fl.explore(Net(), torch.randn(2, 16)))
    assert small.default_expanded() >= {"", "first"}  # the largest modules open until a handful are drawn

    class Stack(nn.Module):  # numbered blocks whose own insides are numbered too (a ResNet stage's layers)
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(16, 16), nn.GELU()) for _ in range(2))
            self.head = nn.Linear(16, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for block in self.blocks:
                x = x + block(x)
            return self.head(x)

    stack = module_tree(fl.explore(Stack(), torch.randn(2, 16)))
    assert stack.opening("blocks.1") == {"", "blocks", "blocks.1"}
    assert stack.default_expanded() == {"", "blocks"}
    assert boxes(draw_modules(stack)) == {"blocks.0", "blocks.1", "head"}
    assert short_name("encoder.layers.3.attn") == "layers.3.attn" and short_name("") == "(model)"
    assert size_text(1_234_567) == "1.2 MB" and size_text(12) == "12 B"


def test_icicle_adds_children_up_and_says_how_times_were_made(gpt2: fl.Exploration) -> None:
    frame = pandas.DataFrame({"module": ["a.b", "a.c", "d"], "time_ms": [1.0, 3.0, 4.0],
                              "label": ["measured on cpu"] * 3})
    chart = icicle(frame)
    values = {module: value for module, value, _ in chart.cells}
    assert values == {"": 8.0, "a": 4.0, "a.b": 1.0, "a.c": 3.0, "d": 4.0}
    assert "a.c: 3 ms (measured on cpu)" in chart.svg and chart._repr_html_().startswith("<div")
    with pytest.raises(ValueError, match="measured or modelled"):
        icicle(frame.drop(columns="label"))
    with pytest.raises(ValueError, match="needs a 'seconds' column"):
        icicle(frame, value="seconds")
    modelled = modelled_frame(gpt2)
    times = dict(zip(modelled["module"], modelled["time_ms"]))
    assert set(modelled["label"]) == {"modelled on H200"}
    assert times["transformer.h.0"] > 0 and times[""] >= times["transformer"] >= times["transformer.h"]
    assert times["transformer.h"] >= times["transformer.h.0"] + times["transformer.h.1"]  # + kernels across layers
    whole = icicle(modelled)
    assert dict((m, v) for m, v, _ in whole.cells)["transformer.h.0"] == pytest.approx(times["transformer.h.0"])


def test_first_view_is_fast_and_reads_without_a_kernel(gpt2: fl.Exploration) -> None:
    assert gpt2.fused.groups  # the stages exist: time the view, not the capture
    started = time.perf_counter()
    view = ModuleGraph(gpt2)
    assert time.perf_counter() - started < 2.0
    page = view._repr_mimebundle_()[0]["text/html"]
    assert "<svg" in page and "plumbing nodes hidden" in page and "h.0" in page
    assert len(view.svg) < 60_000  # six boxes, not 190 nodes


def test_explorer_folds_a_big_graph_by_module(gpt2: fl.Exploration) -> None:
    assert is_big(gpt2.decomposed.graph)
    explorer = Explorer(gpt2, inductor=False, verify=False)
    assert isinstance(explorer.modules, ModuleGraph)
    node = next(dot_id for dot_id, kind in explorer.modules.kinds.items()
                if kind == "node" and explorer.modules.names[dot_id] in gpt2.decomposed.graph
                and gpt2.decomposed.graph[explorer.modules.names[dot_id]].kind != "input")
    explorer.modules.click(node)
    assert explorer.graph.selected == explorer.modules.names[node]
    assert "plumbing nodes hidden" in explorer.static_html()
    small = Explorer(fl.explore(lambda x: torch.softmax(x, -1), torch.randn(4, 8)), inductor=False, verify=False)
    assert small.modules is None
