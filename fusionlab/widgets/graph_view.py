"""GraphView: the program's graph (Graphviz SVG) in which a click on a node or a fusion group selects it.

The Python side is thin: traits for the SVG, the DOT text, the DOT-id -> name map and the selection. The front
end (`widgets/graph_view.js`) injects the SVG and sets `selected` on a click; other views observe it.

    >>> view = GraphView(ex.fused)
    >>> view.observe(lambda change: print(change["new"]), names="selected")
    >>> view.step = 3                                  # the groups after fusion decision 3
"""

from __future__ import annotations

from typing import Any

import anywidget
import traitlets

from fusionlab.display.graph import draw_graph, resolve_stage
from fusionlab.display.render import graph_html, render_svg
from fusionlab.widgets.base import StaticFallback, frontend_source

__all__ = ["GraphView"]


class GraphView(StaticFallback, anywidget.AnyWidget):
    """A Captured, Decomposed or Fused stage as a clickable graph; `selected` holds a node or group name.

    Example: `GraphView(ex.fused, level="captured")`.
    """

    _esm = frontend_source("graph_view.js")
    _css = frontend_source("graph_view.css")

    svg = traitlets.Unicode("").tag(sync=True)
    dot = traitlets.Unicode("").tag(sync=True)
    message = traitlets.Unicode("").tag(sync=True)
    names = traitlets.Dict().tag(sync=True)
    selected = traitlets.Unicode("").tag(sync=True)
    step = traitlets.Int(None, allow_none=True)
    level = traitlets.Unicode("decomposed")

    def __init__(self, stage: Any, *, level: str | None = None, step: int | None = None, selected: str = "",
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._stage = stage
        _, decomposed, _ = resolve_stage(stage)
        self.set_trait("level", level or ("decomposed" if decomposed is not None else "captured"))
        self.set_trait("step", step)
        self.redraw()
        self.selected = selected
        self.observe(lambda _: self.redraw(), names=["step", "level"])

    @property
    def stage(self) -> Any:
        return self._stage

    def show_stage(self, stage: Any, level: str | None = None, step: int | None = None) -> None:
        """Draw another stage (and level / replay step) in the same view."""
        self._stage = stage
        _, decomposed, _ = resolve_stage(stage)
        with self.hold_trait_notifications():
            self.set_trait("level", level or ("decomposed" if decomposed is not None else "captured"))
            self.set_trait("step", step)
        self.redraw()

    def redraw(self) -> None:
        drawing = draw_graph(self._stage, step=self.step, level=self.level)
        rendered = render_svg(drawing.dot)
        with self.hold_sync():
            self.names = drawing.names
            self.dot = drawing.dot
            self.message = rendered.message
            self.svg = rendered.svg or ""

    def static_html(self) -> str:
        drawing = draw_graph(self._stage, step=self.step, level=self.level, selected=self.selected or None)
        return graph_html(render_svg(drawing.dot))

    def __repr__(self) -> str:
        return f"GraphView({type(self._stage).__name__}, level={self.level!r}, step={self.step}, " \
               f"selected={self.selected!r})"
