"""Explorer (`ex.show()`): the graph, the stage and decision sliders, the tables, both sources and the timings,
linked: a click in the graph selects a group everywhere; moving the decision slider redraws the graph.

    >>> explorer = ex.show()
    >>> explorer.graph.selected = "exp"          # as a click would: the sources and tables follow
    >>> explorer.timings.run()                   # live benchmark charts
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets

from fusionlab.display import style
from fusionlab.display.links import find_group
from fusionlab.display.modules import is_big
from fusionlab.display.session import load_inductor
from fusionlab.display.tables import (
    decisions_table,
    edges_table,
    groups_table,
    inductor_decisions_table,
    inductor_table,
)
from fusionlab.inductor.correspondence import group_labels
from fusionlab.widgets.base import StaticFallback
from fusionlab.widgets.graph_view import GraphView
from fusionlab.widgets.module_graph import ModuleGraph
from fusionlab.widgets.source_compare import SourceCompare
from fusionlab.widgets.stepper import StageStepper
from fusionlab.widgets.timing_plot import TimingPlot

__all__ = ["Explorer"]


class Explorer(StaticFallback, ipywidgets.VBox):
    """Every view of one exploration, linked. `inductor`: True, False or an InductorView; `report`: a BenchReport."""

    def __init__(self, exploration: Any, *, inductor: Any = True, report: Any = None, verify: bool = True,
                 **kwargs: Any) -> None:
        self.exploration = exploration
        fused = exploration.fused
        self.fused = fused
        self.inductor = load_inductor(exploration, inductor)
        self.graph = GraphView(fused)
        self.stepper = StageStepper(exploration, graph=self.graph)
        self.source = SourceCompare(exploration.generated, inductor=self.inductor)
        self.timings = TimingPlot(exploration, report=report)
        self.title = ipywidgets.HTML(self._title(verify))
        self.selection = ipywidgets.HTML()
        self.groups = ipywidgets.HTML()
        self.decisions = ipywidgets.HTML()
        self.edges = ipywidgets.HTML(edges_table(fused, max_height="420px"))
        self.inductor_tables = ipywidgets.HTML(self._inductor_html())
        tabs = ipywidgets.Tab(children=[self.groups, self.decisions, self.edges, self.inductor_tables],
                              titles=("groups", "decisions", "edges", "Inductor"))
        side = ipywidgets.VBox([self.selection, tabs], layout={"width": "42%", "min_width": "320px"})
        self.stepper.layout.width = "58%"
        main: Any = self.stepper
        self.modules: ModuleGraph | None = None  # a whole model: its graph starts folded by module
        if is_big(fused.previous.graph):
            self.modules = ModuleGraph(fused)
            self.modules.observe(self._module_view_selected, names="selected")
            main = ipywidgets.Tab(children=[self.modules, self.stepper], titles=("by module", "every node"),
                                  layout={"width": "58%"})
        super().__init__([self.title, ipywidgets.HBox([main, side]), self.source, self.timings], **kwargs)
        self.add_class("fusionlab-explorer")
        self.graph.observe(lambda change: self.select(change["new"]), names="selected")
        self.source.observe(self._group_picked, names="group")
        self.stepper.observe(lambda _: self._refresh_decisions(), names=["step", "stage"])
        self.select(self.source.group)
        self._refresh_decisions()

    # -- linking --------------------------------------------------------------------------------------
    def select(self, name: str) -> None:
        """Select a node or group (what a click in the graph does): sources, tables and the graph follow."""
        if self.graph.selected != name:
            self.graph.selected = name  # comes back here through the observer
            return
        group = find_group(self.fused, name)
        if group is not None:
            self.source.select(group.name)
        self.groups.value = groups_table(self.fused, selected=group.name if group else None, max_height="420px")
        self.selection.value = self._selection_html(name)

    def _module_view_selected(self, change: dict[str, Any]) -> None:
        if change["new"]:
            self.select(change["new"])

    def _group_picked(self, change: dict[str, Any]) -> None:
        current = find_group(self.fused, self.graph.selected)
        if current is None or current.name != change["new"]:
            self.graph.selected = change["new"]

    def _refresh_decisions(self) -> None:
        upto = self.stepper.step if self.stepper.stage == "fused" else None
        self.decisions.value = decisions_table(self.fused, upto=upto, max_height="420px")

    # -- text -----------------------------------------------------------------------------------------
    def _title(self, verify: bool) -> str:
        ex = self.exploration
        parts = [repr(ex), repr(self.fused)]
        localised = ""  # a mismatch: verify's stage-by-stage table says where the values part
        if verify:
            try:
                report = ex.verify()
                parts.append(repr(report))
                localised = "" if report.ok else report._repr_html_()
            except Exception as error:  # show the failure, keep the views
                parts.append(f"verify failed: {type(error).__name__}: {error}")
        return f"<div style='font-family:{style.FONT};font-size:13px'><b>{html.escape(parts[0])}</b><br>" \
               f"<span style='{style.NOTE_STYLE}'>{html.escape(' | '.join(parts[1:]))}</span>{localised}</div>"

    def _selection_html(self, name: str) -> str:
        if not name:
            return f"<div style='{style.NOTE_STYLE}'>Click a node or a coloured group in the graph.</div>"
        graph = self.fused.previous.graph
        group = find_group(self.fused, name)
        lines = [f"selected: {name}"]
        if name in graph:
            lines.append(graph[name].text())
        if group is not None:
            lines.append(f"in group {group.name} ({group.kind}): reads {', '.join(group.inputs)}; writes "
                         f"{', '.join(group.outputs)}")
        elif name in graph.inputs:
            lines.append("a graph input: read from memory by the kernels that use it")
        body = "<br>".join(html.escape(line) for line in lines)
        return f"<div style='font-size:12px;font-family:{style.FONT};margin-bottom:4px'>{body}</div>"

    def _inductor_html(self) -> str:
        if self.inductor is None:
            return f"<div style='{style.NOTE_STYLE}'>Inductor not loaded (Explorer(ex, inductor=True)).</div>"
        if isinstance(self.inductor, str):
            return f"<div style='{style.WARNING_STYLE}'>Inductor is {html.escape(self.inductor)}</div>"
        decisions = (self.inductor.decisions_html(group_labels(self.fused), max_height="260px")
                     if getattr(self.inductor, "operations", ()) else  # in our node names and groups
                     inductor_decisions_table(self.inductor, max_height="260px"))
        return inductor_table(self.inductor, max_height="260px") + decisions

    def static_html(self) -> str:
        graph = self.modules.static_html() if self.modules is not None else self.stepper.static_html()
        return (f"<div>{self.title.value}{graph}{self.selection.value}{self.groups.value}"
                f"{self.source.static_html()}{self.timings.static_html()}</div>")

    def __repr__(self) -> str:
        return f"Explorer({self.exploration!r}, selected={self.graph.selected!r})"
