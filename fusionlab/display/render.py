"""DOT text -> SVG through Graphviz's `dot` program, or a clear message (and the DOT text) when it is missing.

    >>> rendered = render_svg(draw_graph(ex.fused).dot)
    >>> rendered.svg is not None or print(rendered.message)
"""

from __future__ import annotations

import functools
import html
import re
import shutil
import subprocess
from dataclasses import dataclass

from fusionlab.display import style

__all__ = ["INSTALL_DOT", "RenderedGraph", "find_dot", "render_svg", "graph_html"]

INSTALL_DOT = ("Graphviz's `dot` program is not installed, so the graph cannot be drawn. Install it with "
               "`apt-get install graphviz` (Debian/Ubuntu), `brew install graphviz` (macOS) or "
               "`conda install -c conda-forge graphviz`, then run this cell again. "
               "The DOT text of the graph is shown instead; the tables and sources work without it.")


@dataclass(frozen=True)
class RenderedGraph:
    """An inline `<svg>` element, or `svg=None` and a `message` saying why (the `dot` text is kept)."""

    dot: str
    svg: str | None
    message: str = ""


def find_dot() -> str | None:
    """The path of Graphviz's `dot` program, or None."""
    return shutil.which("dot")


def render_svg(dot: str, timeout: float = 60.0) -> RenderedGraph:
    """Run `dot -Tsvg`; the result starts at `<svg` (no XML prolog), ready to inline in HTML."""
    binary = find_dot()
    if binary is None:
        return RenderedGraph(dot, None, INSTALL_DOT)
    return _render(binary, dot, timeout)


@functools.lru_cache(maxsize=128)  # stepping back and forth through decisions redraws the same graphs
def _render(binary: str, dot: str, timeout: float) -> RenderedGraph:
    try:
        done = subprocess.run([binary, "-Tsvg"], input=dot.encode("utf-8"), capture_output=True,
                              timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return RenderedGraph(dot, None, f"Graphviz's dot failed to run ({error}); the DOT text is shown instead.")
    if done.returncode != 0:
        detail = done.stderr.decode("utf-8", "replace").strip()
        return RenderedGraph(dot, None, f"Graphviz's dot could not lay out this graph ({detail}); "
                                        "the DOT text is shown instead.")
    svg = done.stdout.decode("utf-8", "replace")
    start = svg.find("<svg")
    svg = svg[start:] if start >= 0 else svg
    # Graphviz's natural size, shrunk to fit a narrower container (the viewBox keeps the aspect ratio).
    svg = re.sub(r"^<svg ", '<svg style="max-width:100%;height:auto" ', svg, count=1)
    return RenderedGraph(dot, svg)


def graph_html(rendered: RenderedGraph) -> str:
    """The SVG, or the message and the escaped DOT text: safe static HTML either way."""
    if rendered.svg is not None:
        return f"<div class='fusionlab-graph'>{rendered.svg}</div>"
    return (f"<div class='fusionlab-graph'><div style='{style.WARNING_STYLE}'>{html.escape(rendered.message)}</div>"
            f"<pre style='font-size:11px;max-height:400px;overflow:auto'>{html.escape(rendered.dot)}</pre></div>")
