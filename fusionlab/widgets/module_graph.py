"""ModuleGraph: a whole model's graph folded by module; a click opens or folds a module; zoom, pan and search.

The Python side holds the state (`expanded`, `hide_plumbing`, `search`, `selected`) and redraws the SVG when it
changes; the front end (`widgets/module_graph.js`) sends each click as a message, zooms with the mouse wheel and
pans with a drag (our own few lines over the SVG's viewBox: nothing is fetched at run time).

    >>> view = ModuleGraph(ex)                           # the model's layers, folded
    >>> view.click("transformer.h.0")                    # what a click on the box does: expanded gains it
    >>> view.search = "softmax"                          # matches are outlined, their modules opened
"""

from __future__ import annotations

import html
from typing import Any

import anywidget
import traitlets

from fusionlab.display import style
from fusionlab.display.modules import ModuleDrawing, ModuleTree, draw_modules, module_tree
from fusionlab.display.render import graph_html, render_svg
from fusionlab.widgets.base import StaticFallback, frontend_source

__all__ = ["ModuleGraph"]


class ModuleGraph(StaticFallback, anywidget.AnyWidget):
    """A Decomposed/Fused stage or an Exploration, folded by module. Example: `ModuleGraph(ex).expand("h.0")`."""

    _esm = frontend_source("svg_tools.js") + frontend_source("module_graph.js")
    _css = frontend_source("module_graph.css")

    svg = traitlets.Unicode("").tag(sync=True)
    dot = traitlets.Unicode("").tag(sync=True)
    message = traitlets.Unicode("").tag(sync=True)
    names = traitlets.Dict().tag(sync=True)
    kinds = traitlets.Dict().tag(sync=True)
    status = traitlets.Unicode("").tag(sync=True)
    expanded = traitlets.List(traitlets.Unicode()).tag(sync=True)
    hide_plumbing = traitlets.Bool(True).tag(sync=True)
    search = traitlets.Unicode("").tag(sync=True)
    matches = traitlets.List(traitlets.Unicode()).tag(sync=True)
    selected = traitlets.Unicode("").tag(sync=True)

    def __init__(self, stage: Any, *, tree: ModuleTree | None = None, expanded: Any = None,
                 hide_plumbing: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tree = tree if tree is not None else module_tree(stage)
        self._drawing: ModuleDrawing | None = None
        with self.hold_trait_notifications():
            self.expanded = self._ordered(self.tree.default_expanded() if expanded is None else expanded)
            self.hide_plumbing = hide_plumbing
        self.redraw()
        self.observe(lambda _: self.redraw(), names=["expanded", "hide_plumbing", "selected"])
        self.observe(self._searched, names="search")
        self.on_msg(self._message)

    # -- what a click does ----------------------------------------------------------------------------
    def click(self, name: str) -> None:
        """A click on a DOT id or a name: a folded module opens, an open one folds, a node is selected."""
        drawing = self.drawing
        dot_id = name if name in drawing.names else drawing.id_of(name)
        if dot_id is None:
            raise ValueError(f"{name!r} is not drawn now: give a module or node shown in the graph "
                             f"(open modules: {', '.join(self.expanded[1:4]) or 'none'}, ...)")
        kind, target = drawing.kinds[dot_id], drawing.names[dot_id]
        if kind == "module":
            self.expand(target)
        elif kind == "cluster":
            self.collapse(target)
        else:
            self.selected = target

    def expand(self, path: str) -> None:
        """Open module `path` (the modules above it, and a chain of only children below it)."""
        if path not in self.tree:
            raise ValueError(f"no module {path!r} in this graph; see ModuleGraph.tree.as_text() for the paths")
        self.expanded = self._ordered({*self.expanded, *self.tree.opening(path)})

    def collapse(self, path: str) -> None:
        """Fold module `path` into one box (the modules inside it fold with it)."""
        self.expanded = self._ordered(p for p in self.expanded if not (p == path or p.startswith(path + ".")))

    def reset(self) -> None:
        """Back to the first view: the default modules open, no search."""
        with self.hold_trait_notifications():
            self.search = ""
            self.expanded = self._ordered(self.tree.default_expanded())

    def _message(self, _: Any, content: Any, buffers: Any) -> None:
        if not isinstance(content, dict):
            return
        if content.get("event") == "click" and isinstance(content.get("id"), str):
            self.click(content["id"])
        elif content.get("event") == "reset":
            self.reset()

    def _searched(self, change: dict[str, Any]) -> None:
        found = self.tree.find(change["new"])
        self.matches = list(found)
        if found:
            self.expanded = self._ordered(self.tree.expanded_for(found, self.expanded))
        self.redraw()

    def _ordered(self, paths: Any) -> list[str]:
        chosen = set(paths) | {""}
        return [info.path for info in self.tree if info.path in chosen]

    # -- drawing --------------------------------------------------------------------------------------
    @property
    def drawing(self) -> ModuleDrawing:
        if self._drawing is None:
            self.redraw()
        assert self._drawing is not None
        return self._drawing

    def redraw(self) -> None:
        drawing = draw_modules(self.tree, self.expanded, hide_plumbing=self.hide_plumbing,
                               highlight=self.matches, selected=self.selected or None)
        rendered = render_svg(drawing.dot)
        self._drawing = drawing
        with self.hold_sync():
            self.names, self.kinds, self.dot = drawing.names, drawing.kinds, drawing.dot
            self.message, self.svg = rendered.message, rendered.svg or ""
            self.status = self._status(drawing)

    def _status(self, drawing: ModuleDrawing) -> str:
        boxes = sum(kind == "module" for kind in drawing.kinds.values())
        parts = [f"{boxes} folded modules (click one to open it, an open one's label to fold it)"]
        parts.append(f"{drawing.hidden} plumbing nodes hidden (views, masks, position ids)" if self.hide_plumbing
                     else f"plumbing shown ({len(self.tree.plumbing)} nodes)")
        if self.search:
            shown = ", ".join(self.matches[:5]) + (", ..." if len(self.matches) > 5 else "")
            parts.append(f"{len(self.matches)} match {self.search!r}" + (f": {shown}" if shown else ""))
        if self.selected:
            parts.append(f"selected: {self.selected}")
        return " | ".join(parts)

    def static_html(self) -> str:
        note = html.escape(f"{self.status}. Saved view: run the notebook to open modules.")
        return f"<div style='{style.NOTE_STYLE}'>{note}</div>" + graph_html(render_svg(self.drawing.dot))

    def __repr__(self) -> str:
        return f"ModuleGraph({self.tree!r}, expanded={len(self.expanded)} modules, " \
               f"hide_plumbing={self.hide_plumbing})"
