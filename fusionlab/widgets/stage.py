"""`stage.show()`: the widget for one stage object (graph, decision replay, sources or the program text).

    >>> ex.captured.show()      # the aten graph
    >>> ex.fused.show()         # the decision stepper
    >>> ex.generated.show()     # the kernels, group by group
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets

from fusionlab.display import style
from fusionlab.display.source import highlight_html
from fusionlab.display.tables import edges_table
from fusionlab.stages import Captured, Compiled, Decomposed, Fused, Generated
from fusionlab.widgets.base import StaticFallback
from fusionlab.widgets.graph_view import GraphView
from fusionlab.widgets.source_compare import SourceCompare
from fusionlab.widgets.stepper import StageStepper

__all__ = ["StageView", "stage_widget"]


class StageView(StaticFallback, ipywidgets.VBox):
    """A graph (when the stage has one) above the stage's program text, and optional tables."""

    def __init__(self, stage: Any, graph: GraphView | None, extra_html: str = "", **kwargs: Any) -> None:
        self.stage = stage
        self.graph = graph
        title = f"<div style='font-family:{style.FONT};font-size:13px'><b>{html.escape(repr(stage))}</b></div>"
        self.header = ipywidgets.HTML(title)
        self.text = ipywidgets.HTML(highlight_html(stage.as_text(), "python", "420px"))
        self.extra = ipywidgets.HTML(extra_html)
        children = [self.header] + ([graph] if graph is not None else []) + [self.text, self.extra]
        super().__init__(children, **kwargs)

    def static_html(self) -> str:
        graph = self.graph.static_html() if self.graph is not None else ""
        return f"<div>{self.header.value}{graph}{self.text.value}{self.extra.value}</div>"

    def __repr__(self) -> str:
        return f"StageView({self.stage!r})"


def stage_widget(stage: Any) -> Any:
    """The widget `stage.show()` returns, by stage type."""
    if isinstance(stage, Captured):
        return StageView(stage, GraphView(stage, level="captured"))
    if isinstance(stage, Decomposed):
        return StageView(stage, GraphView(stage), edges_table(stage, max_height="300px"))
    if isinstance(stage, Fused):
        return StageStepper(stage)
    if isinstance(stage, Generated):
        return SourceCompare(stage)
    if isinstance(stage, Compiled):
        return StageView(stage, None)
    raise TypeError(f"no widget for {type(stage).__name__}: give a stage object (ex.captured, ex.fused, ...)")
