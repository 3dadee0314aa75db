"""Tables as static HTML with inline styles: groups, decisions, edges, Inductor's kernels, timings.

Every cell is escaped unless it is wrapped in `Html` (our own markup). Rows can be highlighted (the selected
group, the decision at the current step).

    >>> html = groups_table(ex.fused, selected="pointwise_0_add_mul_erf")
    >>> html = decisions_table(ex.fused, upto=3)
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from typing import Any

from fusionlab.display import style
from fusionlab.fusion.fuse import FusionGroup
from fusionlab.ir import Graph
from fusionlab.stages import Decomposed, Fused

__all__ = ["Html", "decisions_table", "edges_table", "frame_table", "groups_table", "html_table",
           "inductor_decisions_table", "inductor_table"]


class Html(str):
    """Markup we wrote ourselves: `html_table` puts it in a cell unescaped."""


def _cell(value: Any) -> str:
    if isinstance(value, Html):
        return str(value)
    if value is None:
        return ""
    if isinstance(value, float):
        return html.escape(f"{value:.4g}")
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return html.escape(str(value))


def html_table(columns: Sequence[str], rows: Iterable[Sequence[Any]], highlight: Iterable[int] = (),
               caption: str = "", max_height: str = "") -> str:
    """A table; rows at the `highlight` positions are shaded."""
    marked = set(highlight)
    head = "".join(f"<th style='{style.HEADER_STYLE}'>{html.escape(c)}</th>" for c in columns)
    body = []
    for index, row in enumerate(rows):
        extra = style.HIGHLIGHT_STYLE if index in marked else ""
        cells = "".join(f"<td style='{style.CELL_STYLE}{extra}'>{_cell(v)}</td>" for v in row)
        body.append(f"<tr data-row='{index}'>{cells}</tr>")
    title = f"<caption style='text-align:left;font-weight:600;font-size:12px'>{html.escape(caption)}</caption>" \
        if caption else ""
    table = f"<table style='{style.TABLE_STYLE}'>{title}<thead><tr>{head}</tr></thead><tbody>{''.join(body)}" \
            "</tbody></table>"
    if max_height:
        return f"<div style='max-height:{max_height};overflow:auto'>{table}</div>"
    return table


def groups_table(fused: Fused, selected: str | None = None, max_height: str = "") -> str:
    """One row per kernel or extern call: kind, primitives, the aten nodes it covers, bytes read and written.

    View-only groups (a reshape or permute between kernels: no kernel of their own, no bytes moved) share one
    last row, so that a model's dozens of views do not drown its kernels.
    """
    graph = fused.previous.graph
    rows: list[list[Any]] = []
    marked = []
    views = [group for group in fused.groups if group.kind == "view"]
    for group in fused.groups:
        if group.kind == "view":
            continue
        if selected is not None and (selected == group.name or selected in group.nodes):
            marked.append(len(rows))
        ops = [graph[n].op for n in group.nodes if graph[n].kind != "input"]
        computing = sum(graph[n].kind not in ("view", "input") for n in group.nodes)  # views are index arithmetic
        rows.append([group.name, group.kind, computing, ", ".join(ops[:12]) + (" ..." if len(ops) > 12 else ""),
                     ", ".join(group.origins), _module_cell(group), _sources_cell(graph, group.nodes),
                     group.bytes_read, group.bytes_written])
    if views:
        if selected is not None and any(selected == g.name or selected in g.nodes for g in views):
            marked.append(len(rows))
        names = [g.name for g in views]
        origins = [origin for g in views for origin in g.origins]
        rows.append([f"{len(views)} view{'s' if len(views) != 1 else ''}: " + ", ".join(names[:6])
                     + (" ..." if len(names) > 6 else ""), "view", len(views), "no kernel of their own",
                     ", ".join(origins[:12]) + (" ..." if len(origins) > 12 else ""), None, None, None, None])
    externs = sum(1 for group in fused.groups if group.kind == "extern")
    caption = f"{len(fused.kernels)} kernels, {externs} extern calls, {len(views)} views ({fused.policy_name!r} policy)"
    return html_table(["group", "kind", "primitives", "ops", "aten nodes", "module", "source", "bytes read",
                       "bytes written"], rows, marked, caption=caption, max_height=max_height)


def _module_cell(group: FusionGroup) -> str:
    """The module a group's ops share ("h.0.attn"), or the ones it spans when they share none."""
    if group.module or not group.modules:
        return group.module
    spans = [m or "(top level)" for m in group.modules]
    return ", ".join(spans[:4]) + (" ..." if len(spans) > 4 else "")


def _sources_cell(graph: Graph, nodes: Sequence[str]) -> str:
    """The user's lines a group's compute nodes came from, each once ("model.py:12 in forward; ...")."""
    computing = [n for n in nodes if graph[n].kind not in ("view", "input")] or list(nodes)
    sources = list(dict.fromkeys(graph[n].source for n in computing if graph[n].source))
    return "; ".join(sources[:3]) + (" ..." if len(sources) > 3 else "")


def decisions_table(fused: Fused, upto: int | None = None, max_height: str = "") -> str:
    """The fusion decisions in order; with `upto`, those after it are left out and it is shaded."""
    shown = fused.decisions if upto is None else fused.decisions[: upto + 1]
    rows = []
    for decision in shown:
        verdict = Html("<b style='color:%s'>%s</b>" % (
            (style.FUSED_COLOUR, "fused") if decision.fused else (style.KEPT_APART_COLOUR, "kept apart")))
        rows.append([decision.step, decision.producer, decision.consumer, verdict, decision.bytes_saved,
                     decision.reason])
    marked = [len(rows) - 1] if upto is not None and rows else []
    return html_table(["step", "producer", "consumer", "verdict", "bytes saved", "reason"], rows, marked,
                      caption=f"{len(fused.decisions)} decisions", max_height=max_height)


def edges_table(stage: Decomposed | Fused, max_height: str = "") -> str:
    """Every value passed between nodes: its type, its size, and whether it leaves its kernel."""
    decomposed = stage.previous if isinstance(stage, Fused) else stage
    graph = decomposed.graph
    group_of = {n: g.name for g in stage.groups for n in g.nodes} if isinstance(stage, Fused) else {}
    rows = []
    for node in graph.nodes:
        for value in node.inputs:
            inside = value in group_of and group_of[value] == group_of.get(node.name)
            where = "registers" if inside else ("memory" if group_of else "")
            rows.append([value, node.name, graph[value].type.text(), graph.nbytes(value), where])
    return html_table(["from", "to", "type", "bytes", "passes through"], rows, max_height=max_height)


def inductor_table(view: Any, highlight: Sequence[str] = (), max_height: str = "") -> str:
    """Inductor's kernels in launch order: language, aten ops, the captured nodes they cover, bytes."""
    rows, marked = [], []
    for index, kernel in enumerate(view.kernels):
        if kernel.name in highlight:
            marked.append(index)
        size = None if kernel.num_gb is None else f"{kernel.num_gb * 1e3:.4f}"
        rows.append([kernel.name, kernel.language, ", ".join(kernel.aten_ops), ", ".join(kernel.node_names), size])
    state = "generated, not run" if getattr(view, "generated_only", False) else "compiled and run"
    return html_table(["kernel", "language", "aten ops", "captured nodes", "MB"], rows, marked,
                      caption=f"TorchInductor on {view.device} ({state}): {len(view.kernels)} kernels",
                      max_height=max_height)


def inductor_decisions_table(view: Any, max_height: str = "") -> str:
    """Inductor's fusion decisions (scheduler node pairs and its reasons)."""
    rows = [[d.node1, d.node2, "fused" if d.fused else "not fused", d.reason] for d in view.decisions]
    return html_table(["node 1", "node 2", "verdict", "reason"], rows, caption="Inductor's fusion decisions",
                      max_height=max_height)


def frame_table(frame: Any, max_height: str = "", digits: int = 4) -> str:
    """A pandas DataFrame (or a list of dicts) as an escaped table; floats to `digits` significant digits."""
    if hasattr(frame, "to_dict"):
        columns = [str(c) for c in frame.columns]
        records = frame.to_dict(orient="records")
    else:
        records = list(frame)
        columns = list(records[0]) if records else []
    rows = []
    for record in records:
        row = []
        for column in columns:
            value = record.get(column)
            if isinstance(value, float):
                row.append(None if value != value else Html(html.escape(f"{value:.{digits}g}")))
            else:
                row.append(value)
        rows.append(row)
    return html_table(columns, rows, max_height=max_height)
