"""Pure rendering of fusionlab's stages: Graphviz DOT/SVG, highlighted sources, diffs, tables and charts.

Functions only: each takes stage objects (or benchmark rows) and returns text, HTML or a matplotlib Figure.
The widgets and the HTML report are built from these. Every name that comes from user code is escaped.

    >>> from fusionlab.display import draw_graph, render_svg
    >>> svg = render_svg(draw_graph(ex.fused).dot).svg
"""

from fusionlab.display.graph import GraphDrawing, dot_string, draw_graph, graph_blocks
from fusionlab.display.links import extern_calls, find_group, inductor_kernels_of, kernel_of_group, wrapper_sections
from fusionlab.display.render import INSTALL_DOT, RenderedGraph, find_dot, graph_html, render_svg
from fusionlab.display.source import diff_html, highlight_html, source_panel
from fusionlab.display.tables import (
    Html,
    decisions_table,
    edges_table,
    frame_table,
    groups_table,
    html_table,
    inductor_decisions_table,
    inductor_table,
)

__all__ = [
    "INSTALL_DOT", "GraphDrawing", "Html", "RenderedGraph", "decisions_table", "diff_html", "dot_string",
    "draw_graph", "edges_table", "extern_calls", "find_dot", "find_group", "frame_table", "graph_blocks",
    "graph_html", "groups_table", "highlight_html", "html_table", "inductor_decisions_table", "inductor_kernels_of",
    "inductor_table", "kernel_of_group", "render_svg", "source_panel", "wrapper_sections",
]
