"""One self-contained HTML page about one exploration: the graph, the groups and decisions, both sources, timings.

No network and no kernel needed to read it: styles are inline, the graph and the charts are inline SVG, and a
few lines of inline script (optional: the page reads fine without it) filter the sources by a click on the
graph. Every name from user code is escaped. A graph of more than `MODULE_VIEW_NODES` nodes (a whole model) is
drawn folded by module, with each folded module of the first view pre-drawn open, so a click opens it in place;
a bar on stderr shows each part as it is made (TorchInductor's compile and the benchmark take the time).

    >>> page = exploration_html(ex)                         # or ex.to_html("report.html")
    $ fusionlab report fusionlab.measure.workloads:softmax --out softmax.html
"""

from __future__ import annotations

import datetime
import html
import importlib
import inspect
import json
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from fusionlab.display.graph import draw_graph, resolve_stage
from fusionlab.display.links import inductor_kernels_of, kernel_body, kernel_of_group, wrapper_sections
from fusionlab.display.modules import (
    MODULE_VIEW_NODES,
    ModuleDrawing,
    draw_modules,
    icicle,
    is_big,
    modelled_frame,
    module_tree,
)
from fusionlab.display.plots import CPU_NOTE, figure_svg, kernel_figure, roofline_figure, timing_figure
from fusionlab.display.render import graph_html, render_svg
from fusionlab.display.session import load_inductor
from fusionlab.display.source import source_panel
from fusionlab.display.tables import (
    decisions_table,
    edges_table,
    frame_table,
    groups_table,
    inductor_decisions_table,
    inductor_table,
)
from fusionlab.explore import Exploration, explore
from fusionlab.measure import workloads

__all__ = ["MODULE_VIEW_NODES", "exploration_html", "load_target", "main", "module_graph_html", "module_graph_section"]

_PAGE_STYLE = """
body { font-family: Helvetica, Arial, sans-serif; margin: 24px auto; max-width: 1280px; color: #111827; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; border-bottom: 1px solid #e5e7eb; }
.fl-note { font-size: 12px; color: #4b5563; }
.fl-pair { display: flex; gap: 10px; } .fl-pair > div { flex: 1; min-width: 0; }
.fl-group { margin: 10px 0 18px; } .fl-group.fl-hidden { display: none; }
#fl-graph g.node, #fl-graph g.cluster { cursor: pointer; }
#fl-graph.fl-modules svg { max-width: 100%; height: auto; }
#fl-graph g.fl-selected polygon, #fl-graph g.fl-selected path,
#fl-graph g.fl-selected ellipse { stroke: #f59e0b; stroke-width: 3px; }
button { font-size: 12px; }
"""

_MODULE_STYLE = ("#fl-graph g.node, #fl-graph g.cluster { cursor: pointer; } "
                 "#fl-graph.fl-modules svg { max-width: 100%; height: auto; } "
                 ".fl-note { font-size: 12px; color: #4b5563; }")

# Reads the JSON island (ids -> names, names -> groups), filters the source sections on a click. On a graph folded
# by module, a click on a folded module swaps in its pre-drawn open view (a <template>), a click on an open module's
# frame goes back to the first view. No eval, no innerHTML: names only ever reach the page as text.
_PAGE_SCRIPT = """
(function () {
  var data = JSON.parse(document.getElementById("fl-data").textContent);
  var status = document.getElementById("fl-status");
  var graph = document.getElementById("fl-graph");
  var moduleStatus = document.getElementById("fl-module-status");
  var first = Array.prototype.map.call(graph.childNodes, function (n) { return n.cloneNode(true); });
  function show(group) {
    var found = false;
    document.querySelectorAll(".fl-group").forEach(function (section) {
      var match = section.getAttribute("data-group") === group;
      found = found || match;
      section.classList.toggle("fl-hidden", group !== null && !match);
    });
    if (!status) { return; }
    status.textContent = group === null ? "showing every group"
      : found ? "showing group " + group : "group " + group + " is a view: no kernel of its own";
  }
  function openModule(name) {
    var views = document.querySelectorAll("template.fl-module-view");
    for (var i = 0; i < views.length; i++) {
      if (views[i].getAttribute("data-module") === name) {
        graph.replaceChildren(views[i].content.cloneNode(true));
        moduleStatus.textContent = "opened " + name + "; click its label to fold it";
        return;
      }
    }
    moduleStatus.textContent = name + " opens further in a notebook: fusionlab.widgets.ModuleGraph(ex)";
  }
  graph.addEventListener("click", function (event) {
    var element = event.target.closest ? event.target.closest("g.node, g.cluster") : null;
    if (!element || !graph.contains(element)) { return; }
    event.stopPropagation();
    var title = element.querySelector("title");
    var id = title ? title.textContent : "";
    var name = data.names[id];
    var kind = (data.kinds || {})[id];
    if (kind === "module") { openModule(name); return; }
    if (kind === "cluster") {
      graph.replaceChildren.apply(graph, first.map(function (n) { return n.cloneNode(true); }));
      moduleStatus.textContent = "folded " + name;
      return;
    }
    graph.querySelectorAll(".fl-selected").forEach(function (e) { e.classList.remove("fl-selected"); });
    element.classList.add("fl-selected");
    var group = name === undefined ? undefined : data.groups[name];
    if (group !== undefined) { show(group); }
  });
  var showAll = document.getElementById("fl-show-all");
  if (showAll) { showAll.addEventListener("click", function () { show(null); }); }
})();
"""


def _section(title: str, body: str, anchor: str) -> str:
    return f"<h2 id='{anchor}'>{html.escape(title)}</h2>{body}"


def _note(text: str) -> str:
    return f"<p class='fl-note'>{html.escape(text)}</p>"


def _json_island(value: Any) -> str:
    """JSON that cannot close its <script> element: every '<', '>' and '&' is a \\u escape."""
    text = json.dumps(value)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def exploration_html(ex: Any, *, inductor: Any = True, timings: Any = True, title: str | None = None,
                     progress: bool = True) -> str:
    """The page. `inductor`: True (compute it), False, or an InductorView; `timings`: True (run the
    benchmark), False, or a BenchReport. A part that fails says so on the page; the rest is still written.
    `progress`: a bar on stderr (a notebook bar in Jupyter) names each part as it is made.
    """
    name = str(title or getattr(ex.fn, "__name__", type(ex.fn).__name__))
    steps = ["verify", "graph", "tables"] + (["TorchInductor (torch.compile)"] if inductor is True else []) + \
        ["sources"] + (["timings (benchmark)"] if timings is True else [])
    with _progress(progress, steps, name) as step:
        step("verify")
        fused, generated = ex.fused, ex.generated
        localised = ""  # where a mismatch was first seen, stage by stage (verify's own HTML)
        try:
            report = ex.verify()
            verified, localised = repr(report), ("" if report.ok else report._repr_html_())
        except Exception as error:  # keep writing the page: say what failed
            verified = f"verify failed: {type(error).__name__}: {error}"
        step("graph")
        graph_part, names, kinds = _graph_part(fused)
        group_of = {node: group.name for group in fused.groups for node in group.nodes}
        group_of.update({group.name: group.name for group in fused.groups})
        for group in fused.groups:
            for origin in group.origins:
                group_of.setdefault(origin, group.name)
        island = _json_island({"names": names, "kinds": kinds, "groups": group_of})
        step("tables")
        big = is_big(fused.previous.graph)
        edges = _note("every edge: ex.show()'s edges tab (left out of a page this large)") if big else \
            f"<details><summary>every edge: types and sizes</summary>{edges_table(fused)}</details>"
        tables = [_section("Groups", groups_table(fused), "groups"),
                  _section("Fusion decisions, in order", decisions_table(fused), "decisions"), edges]
        if inductor is True:
            step("TorchInductor (torch.compile)")
        view = load_inductor(ex, inductor)
        step("sources")
        sources = [_section("Sources: fusionlab beside TorchInductor", _sources(ex, generated, view), "sources"),
                   _section("Wrapper programs", _wrappers(generated, view), "wrappers"),
                   _section("TorchInductor", _inductor(view), "inductor")]
        if timings is True:
            step("timings (benchmark)")
        timed = _section("Timings", _timings(ex, timings), "timings")
    parts = [
        f"<h1>fusionlab: {html.escape(name)}</h1>",
        _note(f"{ex!r} | {fused!r} | {verified}") + localised,
        _note(f"written {datetime.datetime.now().isoformat(timespec='seconds')} by fusionlab with torch "
              f"{torch.__version__}; self-contained: no network needed."),
        graph_part, *tables, *sources, timed,
    ]
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>fusionlab: {html.escape(name)}</title><style>{_PAGE_STYLE}</style></head><body>"
        + "".join(parts)
        + f"<script type='application/json' id='fl-data'>{island}</script><script>{_PAGE_SCRIPT}</script>"
        + "</body></html>\n"
    )


@contextmanager
def _progress(enabled: bool, steps: list[str], name: str) -> Iterator[Callable[[str], None]]:
    """A tqdm.auto bar over the page's parts; it first says what makes a page slow."""
    if not enabled:
        yield lambda _: None
        return
    print(f"fusionlab: writing the page for {name}: {', '.join(steps)}. {SPEED_HINT}", file=sys.stderr)
    try:
        from tqdm.auto import tqdm
    except ImportError:  # no bar: one line per part
        yield lambda part: print(f"fusionlab: {part}", file=sys.stderr)
        return
    bar = tqdm(total=len(steps), desc="fusionlab page", file=sys.stderr, leave=False)
    started = [False]

    def step(part: str) -> None:
        if started[0]:
            bar.update(1)
        started[0] = True
        bar.set_postfix_str(part)

    try:
        yield step
    finally:
        bar.update(1)
        bar.close()


SPEED_HINT = ("timings=False skips timing and is fast; inductor=False skips TorchInductor's compile "
              "(both take the most time)")


def _graph_part(fused: Any) -> tuple[str, dict[str, str], dict[str, str]]:
    """The graph section and its DOT ids -> names (and kinds, for a graph folded by module)."""
    if is_big(fused.previous.graph):
        tree = module_tree(fused)
        if len(tree) > 1:  # a model with modules: fold it
            return module_graph_section(tree, fused)
    drawing = draw_graph(fused)
    graph = graph_html(render_svg(drawing.dot))
    aten = graph_html(render_svg(draw_graph(fused, level="captured").dot))
    body = _section("Graph: one colour per fusion group", f"<div id='fl-graph'>{graph}</div>" + _note(
        "Dashed grey edges stay in registers inside a kernel; solid edges are written to memory and read "
        "back. Grey 3-D boxes are extern ops (eager PyTorch / cuBLAS); dashed boxes are views. Hover for "
        "shapes and dtypes; click a node or a group to show only its sources below."), "graph")
    return body + f"<details><summary>the captured aten graph</summary>{aten}</details>", drawing.names, {}


def module_graph_html(stage: Any) -> str:
    """The graph of `stage` (an Exploration, or its Fused stage) folded by module, as a part of any page: its own
    data island and click script (a click opens a module in place, a click on its label folds it) and the modelled
    time by module. One per page: its elements have fixed ids (`ModelProfile.to_html` can put it under its tables).
    """
    _, _, fused = resolve_stage(stage)
    if fused is None:
        raise ValueError("module_graph_html needs the fusion groups: give ex or ex.fused")
    section, names, kinds = module_graph_section(module_tree(fused), fused)
    island = _json_island({"names": names, "kinds": kinds, "groups": {}})
    return (f"<style>{_MODULE_STYLE}</style>{section}<script type='application/json' id='fl-data'>{island}</script>"
            f"<script>{_PAGE_SCRIPT}</script>")


def module_graph_section(tree: Any, fused: Any = None) -> tuple[str, dict[str, str], dict[str, str]]:
    """The graph folded by module, for a page: the first view, each of its folded modules pre-drawn open (a click
    swaps it in), and the time by module (modelled). Returns the HTML and the DOT ids' names and kinds."""
    first = draw_modules(tree)
    views: list[tuple[str, ModuleDrawing]] = [
        (path, draw_modules(tree, first.expanded | tree.opening(path)))
        for dot_id, path in first.names.items() if first.kinds[dot_id] == "module"]
    names, kinds = dict(first.names), dict(first.kinds)
    for _, drawing in views:
        names.update(drawing.names)
        kinds.update(drawing.kinds)
    with ThreadPoolExecutor(max_workers=4) as pool:  # each `dot` run mostly waits for its process to start
        rendered = list(pool.map(render_svg, [first.dot] + [drawing.dot for _, drawing in views]))
    templates = "".join(f"<template class='fl-module-view' data-module='{html.escape(path, quote=True)}'>"
                        f"{graph_html(svg)}</template>" for (path, _), svg in zip(views, rendered[1:]))
    nodes = len(tree.graph.nodes)
    status = (f"{nodes} nodes folded into modules; {first.hidden} plumbing nodes (views, masks, position ids) "
              "hidden. Click a module to open it, an open module's label to fold it; hover for kernels and bytes.")
    chart = ""
    if fused is not None:
        try:
            chart = icicle(modelled_frame(fused))._repr_html_()
        except ValueError as error:  # nothing moved: no chart, say why
            chart = _note(f"no time by module: {error}")
    body = (f"<p class='fl-note'><span id='fl-module-status'>{html.escape(status)}</span></p>"
            f"<div id='fl-graph' class='fl-modules'>{graph_html(rendered[0])}</div>{templates}"
            + _note("Every node: ex.show() (the Explorer) or fusionlab.display.draw_graph(ex.fused); open and "
                    "search modules live with fusionlab.widgets.ModuleGraph(ex).")
            + (f"<h3 style='font-size:13px'>Time by module</h3>{chart}" if chart else ""))
    return _section("Graph, folded by module", body, "graph"), names, kinds


def _sources(ex: Any, generated: Any, view: Any) -> str:
    sections = wrapper_sections(generated)
    controls = ("<p class='fl-note'><span id='fl-status'>showing every group</span> "
                "<button id='fl-show-all' type='button'>show every group</button></p>")
    blocks = []
    for group in ex.fused.groups:
        kernel = kernel_of_group(generated, group.name)
        if kernel is None and group.kind == "view":
            continue
        if kernel is not None:
            ours = source_panel(f"fusionlab: {kernel.name} (Triton)", kernel.source, "python", max_height="520px")
        else:
            ours = source_panel(f"fusionlab: {group.name} (extern call between kernels)",
                                sections.get(group.name, ""), "python")
        if view is None or isinstance(view, str):
            theirs = _note(f"Inductor: {view or 'not requested'}")
        else:
            kernels = inductor_kernels_of(group, view)
            theirs = "".join(source_panel(f"TorchInductor: {k.name} ({k.language}; aten: {', '.join(k.aten_ops)})",
                                          kernel_body(k.source) if k.language == "triton" else k.source,
                                          "cpp" if k.language == "cpp" else "python", max_height="520px")
                             for k in kernels) or _note("no Inductor kernel lists these aten nodes")
        spans = ", ".join(m or "(top level)" for m in group.modules)
        where = f"; in {group.module}" if group.module else (f"; spans {spans}" if len(group.modules) > 1 else "")
        summary = (f"{group.name}: {group.kind}; aten nodes {', '.join(group.origins)}; reads "
                   f"{group.bytes_read:,} B, writes {group.bytes_written:,} B{where}")
        blocks.append(f"<div class='fl-group' data-group='{html.escape(group.name, quote=True)}'>"
                      f"<h3 style='font-size:13px'>{html.escape(summary)}</h3>"
                      f"<div class='fl-pair'><div>{ours}</div><div>{theirs}</div></div></div>")
    return controls + "".join(blocks)


def _wrappers(generated: Any, view: Any) -> str:
    ours = source_panel("fusionlab's wrapper: allocates, launches, calls externs", generated.wrapper)
    if view is None or isinstance(view, str):
        theirs = _note(f"Inductor: {view or 'not requested'}")
    else:
        theirs = f"<details><summary>TorchInductor's wrapper module</summary>" \
                 f"{source_panel('TorchInductor', view.wrapper_source, 'python', max_height='640px')}</details>"
    return f"<div class='fl-pair'><div>{ours}</div><div>{theirs}</div></div>"


def _inductor(view: Any) -> str:
    if view is None:
        return _note("not requested")
    if isinstance(view, str):
        return _note(f"Inductor is {view}")
    return inductor_table(view) + inductor_decisions_table(view, max_height="480px")


def _timings(ex: Any, timings: Any) -> str:
    report = timings
    if timings is True:
        try:
            report = ex.benchmark(progress=False)
        except Exception as error:  # the page is still useful without timings
            return _note(f"the benchmark failed: {type(error).__name__}: {error}")
    if not report:
        return _note("not requested (exploration_html(ex, timings=True) runs the benchmark)")
    rows = report.rows
    on_cpu = not str(report.device).startswith("cuda")
    charts = [timing_figure(rows, report.recorded, f"{report.workload} on {report.device}"), kernel_figure(rows),
              roofline_figure(rows)]
    body = "".join(f"<div>{figure_svg(chart)}</div>" for chart in charts)
    recorded = frame_table(list(report.recorded)) if report.recorded else ""
    return (_note(repr(report)) + (_note(CPU_NOTE) if on_cpu else "") + body + frame_table(report.table)
            + (f"<h3 style='font-size:13px'>Recorded on a GPU</h3>{recorded}" if recorded else ""))


# ---- the command line: fusionlab report MODULE:FUNCTION --out report.html --------------------------------


def load_target(target: str) -> Any:
    """`MODULE:FUNCTION` -> an Exploration.

    FUNCTION may be an Exploration; a workload function of `fusionlab.measure.workloads` (its CPU-size inputs are
    used); a callable with an `example_inputs` attribute; or a function of no arguments that returns an Exploration
    or `(fn, example_inputs)`. A bare workload name (`softmax`) works too.
    """
    if ":" not in target:
        if target in workloads.names():
            fn, inputs = workloads.get(target).build("cpu")
            return explore(fn, *inputs)
        raise ValueError(f"{target!r} is not MODULE:FUNCTION (for example fusionlab.measure.workloads:softmax) nor a "
                         f"workload name ({', '.join(workloads.names())})")
    module_name, _, attribute = target.partition(":")
    sys.path.insert(0, str(Path.cwd()))
    try:
        value: Any = importlib.import_module(module_name)
    finally:
        sys.path.pop(0)
    for part in attribute.split("."):
        if not hasattr(value, part):
            raise ValueError(f"module {module_name!r} has no attribute {attribute!r}")
        value = getattr(value, part)
    if isinstance(value, Exploration):
        return value
    known = workloads.find(value)
    if known is not None:
        fn, inputs = known.build("cpu")
        return explore(fn, *inputs)
    examples = getattr(value, "example_inputs", None)
    if examples is not None:
        inputs = examples() if callable(examples) else examples
        return explore(value, *tuple(inputs))
    if callable(value) and _takes_no_arguments(value):
        made = value()
        if isinstance(made, Exploration):
            return made
        if isinstance(made, tuple) and len(made) == 2 and callable(made[0]):
            return explore(made[0], *tuple(made[1]))
    raise ValueError(f"{target} needs example inputs: make it a function of no arguments that returns an "
                     "Exploration or (fn, example_inputs), or give the function an `example_inputs` attribute")


def _takes_no_arguments(value: Any) -> bool:
    try:
        signature = inspect.signature(value)
    except (TypeError, ValueError):
        return False
    return all(p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
               for p in signature.parameters.values())


def main(target: str, out: str = "report.html", timings: bool = True) -> int:
    """`fusionlab report`: write the page for `target`; 0 on success, 2 when the target cannot be loaded."""
    try:
        ex = load_target(target)
    except (ImportError, ValueError) as error:
        print(f"fusionlab report: {error}", file=sys.stderr)
        return 2
    page = exploration_html(ex, timings=timings)
    Path(out).write_text(page, encoding="utf-8")
    print(f"wrote {out} ({len(page) / 1e3:.0f} kB)")
    return 0
