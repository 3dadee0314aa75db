"""The program as a Graphviz graph: one coloured cluster per fusion group, extern ops drawn apart.

`draw_graph` writes DOT text itself (every name a user chose is quoted and escaped; DOT ids are our own
`n0`, `cluster_0`), and returns it with the map from DOT id to node or group name, which the interactive
view uses to turn a click into a selection. Edges carry the value's type in a tooltip; an edge inside a
cluster stays in registers, an edge that leaves one is written to memory and read back.

    >>> drawing = draw_graph(ex.fused)                 # final groups
    >>> drawing = draw_graph(ex.fused, step=3)         # the groups after decision 3, that decision marked
    >>> drawing.names["cluster_0"]
    'pointwise_0_add_mul_erf'
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fusionlab.display import style
from fusionlab.fusion.fuse import FusionDecision
from fusionlab.fusion.kinds import KERNEL_GROUP_KINDS, GroupKind, group_kind
from fusionlab.ir import Graph, where_text
from fusionlab.stages import Captured, Decomposed, Fused

__all__ = ["Block", "GraphDrawing", "draw_graph", "dot_string", "graph_blocks", "resolve_stage"]

@dataclass(frozen=True)
class Block:
    """Nodes drawn together: a fusion group (final, or as it stood at some step of the replay)."""

    members: tuple[str, ...]
    kind: GroupKind
    group: str  # the final group these nodes end up in (what a click on the cluster selects)
    colour: int  # index into the palette: the final group's position
    label: str
    tooltip: str


@dataclass(frozen=True)
class GraphDrawing:
    """DOT text plus what each DOT id stands for (`names`: id -> node or group name; `kinds`: "node"/"group")."""

    dot: str
    names: dict[str, str] = field(default_factory=dict)
    kinds: dict[str, str] = field(default_factory=dict)
    level: str = "decomposed"
    step: int | None = None

    def id_of(self, name: str) -> str | None:
        """The DOT id drawing `name` (a node name first, then a group name)."""
        for kind in ("node", "group"):
            for dot_id, value in self.names.items():
                if value == name and self.kinds[dot_id] == kind:
                    return dot_id
        return None


def dot_string(text: object) -> str:
    """`text` as a quoted DOT string: backslashes, quotes and control characters cannot break out."""
    cleaned = re.sub(r"[\x00-\x08\x0b-\x1f\x7f]", " ", str(text))
    escaped = cleaned.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _attributes(values: dict[str, object]) -> str:
    return "[" + " ".join(f"{key}={dot_string(value)}" for key, value in values.items()) + "]"


def resolve_stage(stage: Any) -> tuple[Captured, Decomposed | None, Fused | None]:
    """The captured, decomposed and fused stages reachable from `stage` (later ones may be None)."""
    if isinstance(stage, Fused):
        return stage.previous.previous, stage.previous, stage
    if isinstance(stage, Decomposed):
        return stage.previous, stage, None
    if isinstance(stage, Captured):
        return stage, None, None
    previous = getattr(stage, "previous", None)
    if previous is not None:
        return resolve_stage(previous)
    fused = getattr(stage, "fused", None)  # an Exploration
    if isinstance(fused, Fused):
        return resolve_stage(fused)
    raise TypeError(f"cannot draw a graph of {type(stage).__name__}: give a Captured, Decomposed or Fused stage "
                    "(or an Exploration)")


def graph_blocks(fused: Fused, step: int | None = None) -> tuple[Block, ...]:
    """The groups to draw: the final ones (`step=None`) or the partition after decision `step`."""
    graph = fused.previous.graph
    final_index = {name: i for i, group in enumerate(fused.groups) for name in group.nodes}
    if step is None:
        return tuple(Block(g.nodes, g.kind, g.name, i, f"{g.name}\n{g.kind}: reads {g.bytes_read:,} B, writes "
                           f"{g.bytes_written:,} B", _group_tooltip(g, graph)) for i, g in enumerate(fused.groups))
    blocks = []
    for members in fused.groups_after(step):
        index = final_index.get(members[0], 0)
        final = fused.groups[index]
        complete = set(members) == set(final.nodes)
        kind = group_kind(graph[m].kind for m in members)
        label = final.name if complete else f"part of {final.name}"
        computing = sum(graph[m].kind not in ("view", "input") for m in members)  # views are index arithmetic
        blocks.append(Block(tuple(members), kind, final.name, index, f"{label}\n{computing} primitives",
                            f"{', '.join(members)} (ends up in {final.name})"))
    return tuple(blocks)


def _group_tooltip(group: Any, graph: Any) -> str:
    computing = sum(graph[n].kind not in ("view", "input") for n in group.nodes)  # views are index arithmetic
    spans = ", ".join(m or "(top level)" for m in getattr(group, "modules", ()))
    where = f"; in {group.module}" if getattr(group, "module", "") else (f"; spans {spans}" if spans else "")
    return (f"{group.name}: {group.kind} kernel over {computing} primitives; reads "
            f"{', '.join(group.inputs)}; writes {', '.join(group.outputs)}{where}")


def draw_graph(stage: Any, *, step: int | None = None, selected: str | None = None, level: str | None = None,
               edge_labels: bool = False, rankdir: str = "TB") -> GraphDrawing:
    """DOT for `stage`: a Captured/Decomposed graph, or a Fused one with its groups as coloured clusters.

    `step` replays the fusion decisions up to that one (-1: before any); `selected` (a node or group name)
    is outlined; `level` is "decomposed" (fusionlab primitives) or "captured" (aten ops).
    """
    captured, decomposed, fused = resolve_stage(stage)
    chosen = level or ("decomposed" if decomposed is not None else "captured")
    if chosen not in ("decomposed", "captured"):
        raise ValueError(f"level must be 'decomposed' or 'captured', got {level!r}")
    if step is not None and fused is None:
        raise ValueError("step= replays fusion decisions: draw a Fused stage")
    decision = None
    if fused is not None and step is not None and 0 <= step < len(fused.decisions):
        decision = fused.decisions[step]
    blocks = graph_blocks(fused, step) if fused is not None else ()
    writer = _DotWriter(rankdir, edge_labels, selected, decision)
    if chosen == "decomposed":
        if decomposed is None:
            raise ValueError("this stage has no decomposed graph: draw it at level='captured'")
        _draw_decomposed(writer, decomposed.graph, blocks)
    else:
        _draw_captured(writer, captured, decomposed, blocks)
    return GraphDrawing(writer.text(), dict(writer.names), dict(writer.kinds), chosen, step)


class _DotWriter:
    def __init__(self, rankdir: str, edge_labels: bool, selected: str | None,
                 decision: FusionDecision | None) -> None:
        graph = _attributes({"rankdir": rankdir, "nodesep": 0.25, "ranksep": 0.3, "fontname": style.FONT,
                             "fontsize": 10, "bgcolor": "transparent", "tooltip": " "})
        node = _attributes({"fontname": style.FONT, "fontsize": 10, "height": 0.3, "margin": "0.08,0.03"})
        edge = _attributes({"fontname": style.FONT, "fontsize": 8, "arrowsize": 0.6})
        self.lines = ["digraph fusionlab {", f"  graph {graph};", f"  node {node};", f"  edge {edge};"]
        self.edge_labels = edge_labels
        self.selected = selected
        self.decision = decision
        self.names: dict[str, str] = {}
        self.kinds: dict[str, str] = {}
        self.ids: dict[str, str] = {}

    def node_id(self, name: str) -> str:
        if name not in self.ids:
            self.ids[name] = f"n{len(self.ids)}"
            self.names[self.ids[name]] = name
            self.kinds[self.ids[name]] = "node"
        return self.ids[name]

    def node(self, name: str, attributes: dict[str, object], indent: str = "  ") -> None:
        attributes = dict(attributes)
        marks = self.decision
        if marks is not None and name in (marks.producer, marks.consumer):
            attributes["color"] = style.FUSED_COLOUR if marks.fused else style.KEPT_APART_COLOUR
            attributes["penwidth"] = 2.5
        if self.selected == name:
            attributes["color"] = style.SELECTED_COLOUR
            attributes["penwidth"] = 3
        self.lines.append(f"{indent}{self.node_id(name)} {_attributes(attributes)};")

    def edge(self, source: str, target: str, tooltip: str, label: str, inside: bool) -> None:
        attributes: dict[str, object] = {"tooltip": tooltip}
        if inside:
            attributes.update(color="#9ca3af", style="dashed")
        else:
            attributes.update(color="#111827", penwidth=1.2)
        marks = self.decision
        if marks is not None and (source, target) == (marks.producer, marks.consumer):
            attributes.update(color=style.FUSED_COLOUR if marks.fused else style.KEPT_APART_COLOUR, penwidth=3,
                              style="solid")
        if self.edge_labels and label:
            attributes["label"] = label
        self.lines.append(f"  {self.node_id(source)} -> {self.node_id(target)} {_attributes(attributes)};")

    def cluster(self, index: int, block: Block, draw_members: list[tuple[str, dict[str, object]]]) -> None:
        cluster_id = f"cluster_{index}"
        self.names[cluster_id] = block.group
        self.kinds[cluster_id] = "group"
        colour = style.group_colour(block.colour)
        chosen = self.selected == block.group
        attributes = {"label": block.label, "tooltip": block.tooltip, "style": "filled,rounded",
                      "fillcolor": colour.fill, "color": style.SELECTED_COLOUR if chosen else colour.border,
                      "penwidth": 3 if chosen else 1.2, "fontcolor": colour.border, "labeljust": "l"}
        self.lines.append(f"  subgraph {cluster_id} {{")
        for key, value in attributes.items():
            self.lines.append(f"    {key}={dot_string(value)};")
        for name, node_attributes in draw_members:
            self.node(name, node_attributes, indent="    ")
        self.lines.append("  }")

    def text(self) -> str:
        return "\n".join([*self.lines, "}"]) + "\n"


def _node_style(kind: str, is_output: bool) -> dict[str, object]:
    if kind == "input":
        attributes: dict[str, object] = {"shape": "ellipse", "style": "filled", "fillcolor": style.INPUT_FILL}
    elif kind == "extern":
        attributes = {"shape": "box3d", "style": "filled,bold", "fillcolor": style.EXTERN_FILL,
                      "color": style.EXTERN_BORDER}
    elif kind == "view":
        attributes = {"shape": "box", "style": "dashed,rounded", "color": style.VIEW_BORDER, "fontcolor": "#4b5563"}
    elif kind == "reduction":
        attributes = {"shape": "invtrapezium", "style": "filled", "fillcolor": "white"}
    else:
        attributes = {"shape": "box", "style": "filled,rounded", "fillcolor": "white"}
    if is_output:
        attributes["peripheries"] = 2
    return attributes


def _draw_decomposed(writer: _DotWriter, graph: Graph, blocks: Sequence[Block]) -> None:
    block_of = {name: i for i, block in enumerate(blocks) for name in block.members}
    outputs = set(graph.outputs)

    def attributes(name: str) -> dict[str, object]:
        node = graph[name]
        result = _node_style(node.kind, name in outputs)
        if node.kind == "input":
            result.update(label=f"{name}\n{node.type.text()}", tooltip=f"input {name}: {node.type.text()}")
        else:
            tag = "extern " if node.kind == "extern" else ""
            title = node.op if node.op == name else f"{name} = {tag}{node.op}"
            where = node.where
            result.update(label=f"{title}\n{node.type.text()}",
                          tooltip=node.text() + (f"\nin {where}" if where else ""))
        return result

    for name in graph.inputs:
        writer.node(name, attributes(name))
    for index, block in enumerate(blocks):
        if block.kind in KERNEL_GROUP_KINDS:
            writer.cluster(index, block, [(m, attributes(m)) for m in block.members])
    for node in graph.nodes:
        if node.kind != "input" and (node.name not in block_of or blocks[block_of[node.name]].kind
                                     not in KERNEL_GROUP_KINDS):
            writer.node(node.name, attributes(node.name))
    for node in graph.nodes:
        for value in node.inputs:
            kind = graph[value].type.text()
            inside = value in block_of and block_of.get(value) == block_of.get(node.name)
            where = "stays in registers (same kernel)" if inside else "written to memory, read back"
            tooltip = f"{value} -> {node.name}: {kind}, {graph.nbytes(value):,} B; {where}"
            writer.edge(value, node.name, tooltip, kind, inside)


def _draw_captured(writer: _DotWriter, captured: Captured, decomposed: Decomposed | None,
                   blocks: Sequence[Block]) -> None:
    graph_module = captured.graph_module
    names = {spec.placeholder: spec.name for spec in captured.inputs}
    types = {node.name: node.type for node in captured.aten_nodes}
    wheres = {node.name: where_text(node.module, node.source) for node in captured.aten_nodes}
    spec_types = {spec.placeholder: spec.type for spec in captured.inputs}
    aten_block = _aten_blocks(decomposed, blocks) if decomposed is not None else {}
    outputs = set(captured.outputs)

    def attributes(fx_name: str, target: str) -> dict[str, object]:
        kind: str = blocks[aten_block[fx_name]].kind if fx_name in aten_block else "pointwise"
        if target == "":
            kind = "input"
        result = _node_style(kind, fx_name in outputs)
        value_type = types.get(fx_name) or spec_types.get(fx_name)
        type_text = value_type.text() if value_type is not None else ""
        shown = names.get(fx_name, fx_name)
        result.update(label=f"{shown}\n{target}\n{type_text}" if target else f"{shown}\n{type_text}",
                      tooltip=f"{shown}: {target or 'input'} {type_text}"
                      + (f"\nin {wheres[fx_name]}" if wheres.get(fx_name) else ""))
        return result

    targets = {node.name: node.target for node in captured.aten_nodes}
    fx_nodes = [n for n in graph_module.graph.nodes if n.op in ("placeholder", "call_function")]
    for node in fx_nodes:
        if node.op == "placeholder":
            writer.node(node.name, attributes(node.name, ""))
    members: dict[int, list[str]] = {}
    for node in fx_nodes:
        if node.op == "call_function" and node.name in aten_block:
            members.setdefault(aten_block[node.name], []).append(node.name)
    for index, block in enumerate(blocks):
        if block.kind in KERNEL_GROUP_KINDS and index in members:
            writer.cluster(index, block, [(m, attributes(m, targets.get(m, ""))) for m in members[index]])
    for node in fx_nodes:
        if node.op == "call_function" and not (node.name in aten_block and blocks[aten_block[node.name]].kind
                                               in KERNEL_GROUP_KINDS):
            writer.node(node.name, attributes(node.name, targets.get(node.name, "")))
    for node in fx_nodes:
        for source in node.all_input_nodes:
            if source.op not in ("placeholder", "call_function"):
                continue
            value_type = types.get(source.name) or spec_types.get(source.name)
            type_text = value_type.text() if value_type is not None else "?"
            inside = source.name in aten_block and aten_block[source.name] == aten_block.get(node.name)
            shown = names.get(source.name, source.name)
            writer.edge(source.name, node.name, f"{shown} -> {node.name}: {type_text}", type_text, inside)


def _aten_blocks(decomposed: Decomposed, blocks: Sequence[Block]) -> dict[str, int]:
    """Each aten node -> the block holding most of its primitives (a kernel block wins a tie)."""
    block_of = {name: i for i, block in enumerate(blocks) for name in block.members}
    counts: dict[str, dict[int, int]] = {}
    for node in decomposed.graph.nodes:
        if node.kind == "input" or not node.origin or node.name not in block_of:
            continue
        tally = counts.setdefault(node.origin, {})
        tally[block_of[node.name]] = tally.get(block_of[node.name], 0) + 1
    result = {}
    for origin, tally in counts.items():
        result[origin] = max(tally, key=lambda i: (blocks[i].kind in KERNEL_GROUP_KINDS, tally[i], -i))
    return result
