"""`ModelProfile.show()`: the profile as a widget, quick to open. The summary (graphs, verdicts, breaks, notes) and
the time by module come first; the tables are HTML in tabs; a graph's Explorer is built only when its button is
clicked (a model's graph is the slow part to draw). Saved notebooks keep the summary and tables as static HTML.

    >>> view = ProfileView(prof)
    >>> view.open_graph(0)         # what a click on "open graph 0 (inference)" does
"""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets

from fusionlab.widgets.base import StaticFallback

__all__ = ["ProfileView"]


class ProfileView(StaticFallback, widgets.VBox):  # type: ignore[misc]
    """The profile's summary, time by module, tables and graphs (each graph's Explorer on demand)."""

    def __init__(self, profile: Any, *, summary: str, modules: str, kernels: str) -> None:
        self.profile = profile
        self._static = summary + modules + kernels
        self.output = widgets.Output()
        self.opened: str | None = None
        self.explorer: Any = None  # the Explorer of the graph opened last
        self.buttons = []
        for place, graph in enumerate(profile.graphs):
            button = widgets.Button(description=f"open {graph.name}", layout=widgets.Layout(width="auto"),
                                    tooltip=str(graph.verdict))
            button.on_click(lambda _, place=place: self.open_graph(place))
            self.buttons.append(button)
        self.tabs = widgets.Tab(children=[widgets.HTML(modules), widgets.HTML(kernels),
                                          widgets.VBox([widgets.HBox(self.buttons), self.output])])
        for index, title in enumerate(("modules", "kernels", "graphs")):
            self.tabs.set_title(index, title)
        super().__init__([widgets.HTML(summary), self.tabs])

    def open_graph(self, place: int) -> None:
        """Show graph `place`'s Explorer in the graphs tab."""
        from IPython.display import display

        graph = self.profile.graphs[place]
        self.opened = graph.name
        self.explorer = graph.exploration.show()
        self.output.clear_output()
        with self.output:
            display(self.explorer)

    def static_html(self) -> str:
        return self._static
