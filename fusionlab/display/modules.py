"""A whole model's graph, folded by module: model -> layer -> attention/MLP -> primitives.

`module_tree` groups a stage's nodes by their `module` path (nodes of the top level sit at the root; a parameter
sits in the module that owns it); each module counts its nodes, kernels and bytes. `draw_modules` writes DOT in which
a collapsed module is one box and an expanded one a cluster, with edges added up between what is drawn, so the first
view of a 12-layer model is a dozen boxes. Plumbing (views, and values computed from no floating-point input: masks,
position ids, index arithmetic) is hidden unless asked for, and the drawing says how many nodes it hid.

    >>> tree = module_tree(ex)                           # ex = fl.explore(model, **inputs)
    >>> drawing = draw_modules(tree)                     # the default view: the model's layers, collapsed
    >>> drawing = draw_modules(tree, tree.default_expanded() | {"transformer.h.0"})
    >>> icicle(frame, value="time_ms")                   # time by module (frame: module, time_ms, label)
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from fusionlab.display import style
from fusionlab.display.graph import dot_string, resolve_stage
from fusionlab.fusion.fuse import common_module
from fusionlab.fusion.kinds import KERNEL_GROUP_KINDS
from fusionlab.ir import Graph
from fusionlab.measure.devices import get_profile, model_time
from fusionlab.measure.timing import node_flops

__all__ = ["MODULE_VIEW_NODES", "IcicleChart", "ModuleDrawing", "ModuleInfo", "ModuleTree", "draw_modules", "icicle",
           "is_big", "modelled_frame", "module_tree", "plumbing", "short_name", "size_text"]

ROOT = ""
MODULE_VIEW_NODES = 80  # above this many nodes (inputs aside) the Explorer and the page fold the graph by module
_SEARCH_LIMIT = 24  # a search expands to at most this many matches (a search for "add" would open every layer)


def size_text(nbytes: float) -> str:
    """`1234567` -> "1.2 MB" (decimal units, as bandwidths are quoted)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{int(nbytes)} B"


def short_name(path: str) -> str:
    """The readable tail of a module path: "transformer.h.0.attn" -> "h.0.attn" (numbers keep their container)."""
    if not path:
        return "(model)"
    parts = path.split(".")
    kept = [parts.pop()]
    while parts and (kept[0].isdigit() or parts[-1].isdigit()):
        kept.insert(0, parts.pop())
    return ".".join(kept)


def plumbing(graph: Graph) -> frozenset[str]:
    """Views, and nodes computed from no floating-point input (masks, position ids, iota/full/index arithmetic)."""
    floating: set[str] = set()
    for node in graph.nodes:
        if node.kind == "input":
            if node.type.dtype.is_floating_point or node.type.dtype.is_complex:
                floating.add(node.name)
        elif any(name in floating for name in node.inputs):
            floating.add(node.name)
    return frozenset(n.name for n in graph.nodes if n.kind != "input" and (n.kind == "view" or n.name not in floating))


@dataclass(frozen=True)
class ModuleInfo:
    """One module: its nodes (its own and its descendants'), the kernels and extern calls it holds, their bytes."""

    path: str
    children: tuple[str, ...]
    own: tuple[str, ...]
    nodes: tuple[str, ...]
    kernels: tuple[str, ...]
    externs: tuple[str, ...]
    nbytes: int
    time_ms: float | None = None

    @property
    def name(self) -> str:
        return short_name(self.path)

    @property
    def depth(self) -> int:
        return 0 if not self.path else self.path.count(".") + 1

    def summary(self) -> str:
        """ "3 kernels · 1 extern · 1.2 MB" (and the time when known)."""
        parts = [f"{len(self.kernels)} kernel{'s' if len(self.kernels) != 1 else ''}"]
        if self.externs:
            parts.append(f"{len(self.externs)} extern{'s' if len(self.externs) != 1 else ''}")
        parts.append(size_text(self.nbytes))
        if self.time_ms is not None:
            parts.append(f"{self.time_ms:.3g} ms")
        return " · ".join(parts)


@dataclass(frozen=True)
class ModuleTree:
    """A stage's nodes folded by module. Example: `module_tree(ex)["transformer.h.0"].kernels`."""

    graph: Graph
    modules: tuple[ModuleInfo, ...]
    module_of: Mapping[str, str]  # node -> the module path it is drawn in
    group_of: Mapping[str, str]  # node -> its fusion group ("" before fusion)
    plumbing: frozenset[str]
    _index: dict[str, ModuleInfo] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self._index.update({info.path: info for info in self.modules})

    def __getitem__(self, path: str) -> ModuleInfo:
        if path not in self._index:
            known = ", ".join(info.path for info in self.modules[1:6])
            raise KeyError(f"no module {path!r} in this graph; its modules are paths such as {known}")
        return self._index[path]

    def __contains__(self, path: object) -> bool:
        return path in self._index

    def __iter__(self) -> Iterator[ModuleInfo]:
        return iter(self.modules)

    def __len__(self) -> int:
        return len(self.modules)

    def __repr__(self) -> str:
        layers = sum(1 for info in self.modules if info.path and info.path.rsplit(".", 1)[-1].isdigit())
        return f"ModuleTree({len(self.modules) - 1} modules, {layers} numbered, {len(self.graph.nodes)} nodes, " \
               f"{len(self.plumbing)} plumbing)"

    @property
    def root(self) -> ModuleInfo:
        return self._index[ROOT]

    @staticmethod
    def ancestors(path: str) -> tuple[str, ...]:
        """"a.b.c" -> ("", "a", "a.b"): the modules that must be open for `path` to be seen."""
        parts = path.split(".") if path else []
        return (ROOT, *(".".join(parts[:i]) for i in range(1, len(parts))))

    def opening(self, path: str) -> frozenset[str]:
        """What a click on `path` opens: the module, its parents, and a chain of only children below it (a stage
        holding nothing but its `layers` opens them too)."""
        opened = {*self.ancestors(path), path}
        while len(self[path].children) == 1 and not self[path].own:
            path = self[path].children[0]
            opened.add(path)
        return frozenset(opened)

    def default_expanded(self, limit: int = 24) -> frozenset[str]:
        """The first view: open the root and the containers of numbered children (h -> h.0 ... h.N) that hold at
        least a quarter of the nodes and sit in no numbered item themselves (a layer's own Sequential stays shut),
        with their parents, shallowest first, while at most `limit` boxes are drawn; a model with no such container
        opens its largest modules until about eight are drawn."""
        wanted: set[str] = set()
        for info in self.modules:
            inside_item = any(part.isdigit() for part in info.path.split("."))
            numbered = any(child.rsplit(".", 1)[-1].isdigit() for child in info.children)
            if numbered and not inside_item and 4 * len(info.nodes) >= len(self.root.nodes):
                wanted.update(self.ancestors(info.path), {info.path})
        expanded = {ROOT}
        for path in sorted(wanted - {ROOT}, key=lambda p: (p.count("."), p)):
            if all(a in expanded for a in self.ancestors(path)) and \
                    self._boxes(expanded | {path}) <= limit:
                expanded.add(path)
        while not wanted and self._boxes(expanded) < 8:
            closed = [self[c] for p in expanded for c in self[p].children if c not in expanded and self[c].children]
            if not closed:
                break
            largest = max(closed, key=lambda info: len(info.nodes))
            if self._boxes(expanded | {largest.path}) > limit:
                break
            expanded.add(largest.path)
        return frozenset(expanded)

    def _boxes(self, expanded: set[str]) -> int:
        return sum(1 for p in expanded for c in self[p].children if c not in expanded)

    def find(self, text: str) -> tuple[str, ...]:
        """Nodes and modules whose name, op or module path contains `text` (case-insensitive): modules first."""
        needle = text.strip().lower()
        if not needle:
            return ()
        found = [info.path for info in self.modules if info.path and needle in info.path.lower()]
        found += [node.name for node in self.graph.nodes
                  if needle in node.name.lower() or needle in node.op.lower()
                  or needle in node.origin.lower() or (node.source and needle in node.source.lower())]
        return tuple(found)

    def expanded_for(self, names: Iterable[str], expanded: Iterable[str] = ()) -> frozenset[str]:
        """`expanded` plus what must open for each of `names` (nodes or modules, the first few) to be seen."""
        opened = set(expanded) | {ROOT}
        for name in list(names)[:_SEARCH_LIMIT]:
            path = name if name in self._index else self.module_of.get(name)
            if path is None:
                continue
            opened.update(self.ancestors(path))
            if name not in self._index:
                opened.add(path)
        return frozenset(opened)

    def as_text(self) -> str:
        lines = []
        for info in sorted(self.modules, key=lambda i: _order_key(self, i.path)):
            lines.append(f"{'  ' * info.depth}{info.name}: {len(info.nodes)} nodes · {info.summary()}")
        return "\n".join(lines)

    def frame(self) -> Any:
        """A pandas DataFrame, one row per module: module, depth, nodes, kernels, externs, bytes, time_ms."""
        import pandas

        return pandas.DataFrame([{"module": i.path, "depth": i.depth, "nodes": len(i.nodes), "kernels": len(i.kernels),
                                  "externs": len(i.externs), "bytes": i.nbytes, "time_ms": i.time_ms}
                                 for i in self.modules])


def is_big(graph: Graph) -> bool:
    """More than `MODULE_VIEW_NODES` nodes (inputs aside): a graph to draw folded by module."""
    return sum(node.kind != "input" for node in graph.nodes) > MODULE_VIEW_NODES


def _order_key(tree: ModuleTree, path: str) -> tuple[int, ...]:
    order = {info.path: index for index, info in enumerate(tree.modules)}
    return tuple(order[p] for p in (*tree.ancestors(path), path)) if path else ()


def module_tree(stage: Any, times: Mapping[str, float] | None = None) -> ModuleTree:
    """Fold a Decomposed or Fused stage (or an Exploration) by module. `times`: module path -> ms, shown when given."""
    captured, decomposed, fused = resolve_stage(stage)
    if decomposed is None:
        raise ValueError("module_tree needs the decomposed graph: give ex, ex.decomposed or ex.fused")
    graph = decomposed.graph
    owner = {spec.placeholder: spec.name.rsplit(".", 1)[0] if "." in spec.name else ROOT
             for spec in captured.inputs if spec.kind in ("parameter", "buffer")}
    compute_modules = {node.module for node in graph.nodes if node.kind != "input"}
    known = {ancestor for path in compute_modules for ancestor in (*ModuleTree.ancestors(path), path)}
    module_of: dict[str, str] = {}
    for node in graph.nodes:
        if node.kind == "input":
            home = owner.get(node.origin, ROOT)
            while home not in known and home:  # a parameter of a module that runs no op of its own
                home = home.rsplit(".", 1)[0] if "." in home else ROOT
            module_of[node.name] = home
        else:
            module_of[node.name] = node.module
    paths: dict[str, None] = {ROOT: None}
    for node in graph.nodes:  # program order: a model's modules come out in the order they run
        for path in (*ModuleTree.ancestors(module_of[node.name]), module_of[node.name]):
            paths.setdefault(path, None)
    children: dict[str, list[str]] = {path: [] for path in paths}
    for path in paths:
        if path:
            children[path.rsplit(".", 1)[0] if "." in path else ROOT].append(path)
    own: dict[str, list[str]] = {path: [] for path in paths}
    for node in graph.nodes:
        own[module_of[node.name]].append(node.name)
    groups = fused.groups if fused is not None else ()
    group_of = {name: group.name for group in groups for name in group.nodes}
    home_of_group: dict[str, list[Any]] = {path: [] for path in paths}
    for group in groups:
        if group.kind == "view":
            continue
        computing = [module_of[n] for n in group.nodes if graph[n].kind not in ("view", "input")]
        home_of_group[common_module(computing) if computing else ROOT].append(group)

    infos: dict[str, ModuleInfo] = {}
    for path in reversed(list(paths)):  # children before parents: a parent adds up its children
        below = [infos[c] for c in children[path]]
        mine = home_of_group[path]
        infos[path] = ModuleInfo(
            path, tuple(children[path]), tuple(own[path]),
            tuple(own[path]) + tuple(n for info in below for n in info.nodes),
            tuple(g.name for g in mine if g.kind in KERNEL_GROUP_KINDS) + tuple(k for i in below for k in i.kernels),
            tuple(g.name for g in mine if g.kind == "extern") + tuple(k for i in below for k in i.externs),
            sum(g.bytes_read + g.bytes_written for g in mine) + sum(i.nbytes for i in below),
            None if times is None else times.get(path))
    return ModuleTree(graph, tuple(infos[path] for path in paths), module_of, group_of, plumbing(graph))


@dataclass(frozen=True)
class ModuleDrawing:
    """DOT text; `names`: DOT id -> module path or node name; `kinds`: "module" (a box), "cluster" (an open
    module) or "node"; `hidden`: plumbing nodes left out; `expanded`: the open modules."""

    dot: str
    names: dict[str, str]
    kinds: dict[str, str]
    hidden: int
    expanded: frozenset[str]

    def id_of(self, name: str) -> str | None:
        return next((dot_id for dot_id, value in self.names.items() if value == name), None)


def _attributes(values: Mapping[str, object]) -> str:
    return "[" + " ".join(f"{key}={dot_string(value)}" for key, value in values.items()) + "]"


def draw_modules(tree: ModuleTree, expanded: Iterable[str] | None = None, *, hide_plumbing: bool = True,
                 highlight: Iterable[str] = (), selected: str | None = None, rankdir: str = "TB") -> ModuleDrawing:
    """DOT of `tree` with `expanded` modules open (default: `tree.default_expanded()`); the rest are boxes.

    Edges between what is drawn add up the values crossing them (count and bytes in the tooltip). `highlight`
    (nodes or modules, e.g. search matches) and `selected` are outlined.
    """
    opened = frozenset(tree.default_expanded() if expanded is None else expanded) | {ROOT}
    unknown = sorted(p for p in opened if p not in tree)
    if unknown:
        raise ValueError(f"cannot expand {', '.join(map(repr, unknown[:3]))}: not a module of this graph "
                         f"(modules: {', '.join(repr(i.path) for i in tree.modules[1:5])}, ...)")
    graph, marked = tree.graph, set(highlight) | ({selected} if selected else set())
    hidden = tree.plumbing if hide_plumbing else frozenset()
    module_ids = {info.path: f"m{index}" for index, info in enumerate(tree.modules)}
    node_ids = {node.name: f"n{index}" for index, node in enumerate(graph.nodes)}
    names: dict[str, str] = {}
    kinds: dict[str, str] = {}

    folded_into: dict[str, str | None] = {}  # module -> the outermost folded module holding it (None: all open)
    for info in tree.modules:
        folded_into[info.path] = next((module_ids[p] for p in (*tree.ancestors(info.path), info.path)
                                       if p not in opened), None)

    def drawn_as(node: str) -> str | None:
        box = folded_into[tree.module_of[node]]
        return box if box is not None or node in hidden else node_ids[node]

    outline = {"color": style.SELECTED_COLOUR, "penwidth": 3}
    lines = ["digraph modules {", "  " + "graph " + _attributes({
        "rankdir": rankdir, "nodesep": 0.25, "ranksep": 0.35, "fontname": style.FONT, "fontsize": 11,
        "bgcolor": "transparent", "tooltip": " "}) + ";",
        "  node " + _attributes({"fontname": style.FONT, "fontsize": 10, "height": 0.3, "margin": "0.1,0.04"}) + ";",
        "  edge " + _attributes({"fontname": style.FONT, "fontsize": 8, "arrowsize": 0.6}) + ";"]
    outputs = set(graph.outputs)

    def write(path: str, indent: str) -> None:
        for name in tree[path].own:
            if name in hidden:
                continue
            node = graph[name]
            attributes = _node_attributes(node, tree.group_of.get(name, ""), name in outputs)
            if name in marked:
                attributes.update(outline)
            names[node_ids[name]], kinds[node_ids[name]] = name, "node"
            lines.append(f"{indent}{node_ids[name]} {_attributes(attributes)};")
        for child in tree[path].children:
            info, dot_id = tree[child], module_ids[child]
            tooltip = f"{child}: {len(info.nodes)} nodes · {info.summary()}"
            if child in opened:
                names[f"cluster_{dot_id}"], kinds[f"cluster_{dot_id}"] = child, "cluster"
                lines.append(f"{indent}subgraph cluster_{dot_id} {{")
                attributes = {"label": f"{info.name} · {info.summary()}", "tooltip": f"{tooltip} (click to fold)",
                              "style": "rounded,dashed", "color": "#6366f1", "fontcolor": "#3730a3",
                              "labeljust": "l", **(outline if child in marked else {})}
                lines.extend(f"{indent}  {key}={dot_string(value)};" for key, value in attributes.items())
                write(child, indent + "  ")
                lines.append(f"{indent}}}")
            else:
                names[dot_id], kinds[dot_id] = child, "module"
                attributes = {"shape": "box", "style": "filled,rounded,bold", "fillcolor": "#eef2ff",
                              "color": "#4338ca", "label": f"{info.name}\n{info.summary()}",
                              "tooltip": f"{tooltip} (click to expand)", **(outline if child in marked else {})}
                lines.append(f"{indent}{dot_id} {_attributes(attributes)};")

    write(ROOT, "  ")
    sources: dict[str, frozenset[str]] = {}  # what is drawn for a value: itself, its box, or (hidden) its producers

    def drawn_sources(name: str) -> frozenset[str]:
        if name not in sources:
            shown = drawn_as(name)
            sources[name] = frozenset({shown}) if shown is not None else frozenset(
                s for value in graph[name].inputs for s in drawn_sources(value))
        return sources[name]

    crossing: dict[tuple[str, str], list[int]] = {}
    for node in graph.nodes:
        target = drawn_as(node.name)
        if target is None:
            continue
        for value in node.inputs:
            for source in drawn_sources(value):
                if source != target:
                    tally = crossing.setdefault((source, target), [0, 0])
                    tally[0] += 1
                    tally[1] += graph.nbytes(value)
    for (source, target), (count, nbytes) in crossing.items():
        lines.append(f"  {source} -> {target} " + _attributes({
            "tooltip": f"{count} value{'s' if count != 1 else ''}, {size_text(nbytes)}",
            "penwidth": min(4.0, 1.0 + count / 4), "color": "#374151"}) + ";")
    lines.append("}")
    return ModuleDrawing("\n".join(lines) + "\n", names, kinds, len(hidden), opened)


def _node_attributes(node: Any, group: str, is_output: bool) -> dict[str, object]:
    where = f"\n{node.source}" if node.source else ""
    if node.kind == "input":
        result: dict[str, object] = {"shape": "ellipse", "label": f"{node.name}\n{node.type.text()}",
                                     "tooltip": f"input {node.name}: {node.type.text()}"}
    else:
        title = node.op if node.op == node.name else f"{node.name} = {node.op}"
        result = {"shape": "box3d" if node.kind == "extern" else "box", "style": "filled,rounded",
                  "fillcolor": style.EXTERN_FILL if node.kind == "extern" else "white",
                  "label": f"{title}\n{node.type.text()}", "tooltip": f"{node.text()}\nkernel: {group or '-'}{where}"}
        if node.kind == "view":
            result.update(style="dashed,rounded", color=style.VIEW_BORDER)
    if is_output:
        result["peripheries"] = 2
    return result


def modelled_frame(stage: Any, profile: str = "H200") -> Any:
    """Modelled time by module (a DataFrame: module, time_ms, label): each kernel and extern call's bytes and FLOPs
    over the device profile, added up in the module that holds it. Not a measurement: the label says so."""
    import pandas

    captured, _, fused = resolve_stage(stage)
    if fused is None:
        raise ValueError("modelled_frame needs the fusion groups: give ex or ex.fused")
    device = get_profile(profile)
    flops = node_flops(captured.graph_module)
    milliseconds = {group.name: 1e3 * model_time(group.bytes_read + group.bytes_written, 1,
                                                 sum(flops.get(origin, 0) for origin in group.origins), device)
                    for group in fused.groups if group.kind != "view"}
    label = f"modelled on {device.name}"
    return pandas.DataFrame([{"module": info.path, "time_ms": sum(milliseconds[k] for k in (*info.kernels,
                                                                                            *info.externs)),
                              "label": label} for info in module_tree(fused)])


# ---- time by module: an icicle chart -------------------------------------------------------------------------


@dataclass(frozen=True)
class IcicleChart:
    """An icicle of time by module as inline SVG: one row per depth, widths proportional to each module's time
    (its own plus its children's). `cells`: (module, value, depth) in drawing order; `label`: measured or modelled."""

    svg: str
    cells: tuple[tuple[str, float, int], ...]
    label: str

    def _repr_html_(self) -> str:
        return f"<div class='fusionlab-icicle'>{self.svg}</div>"


def icicle(frame: Any, value: str = "time_ms", *, module: str = "module", label: str | None = None,
           width: int = 960, row_height: int = 26) -> IcicleChart:
    """Time by module: `frame` holds a module path column and `value`; `label` (or a "label" column) says whether the
    times are measured or modelled. A module's width is its own value or, if larger, the sum of its children's."""
    for column in (module, value):
        if column not in frame.columns:
            raise ValueError(f"icicle needs a {column!r} column; the frame has {', '.join(map(str, frame.columns))}")
    if label is None:
        labels = sorted({str(v) for v in frame["label"].dropna()}) if "label" in frame.columns else []
        if not labels:
            raise ValueError("say whether the times are measured or modelled: icicle(frame, label='modelled on H200')"
                             " or a 'label' column")
        label = " / ".join(labels)
    given: dict[str, float] = {}
    for path, amount in zip(frame[module], frame[value]):
        if amount is not None and amount == amount:  # NaN: no figure for that module
            given[str(path)] = given.get(str(path), 0.0) + float(amount)
    children: dict[str, list[str]] = {ROOT: []}
    for path in given:
        for parent, child in zip(ModuleTree.ancestors(path), (*ModuleTree.ancestors(path)[1:], path)):
            if child and child not in children.setdefault(parent, []):
                children[parent].append(child)
            children.setdefault(child, [])
    total: dict[str, float] = {}

    def measure(path: str) -> float:
        total[path] = max(given.get(path, 0.0), sum(measure(c) for c in children.get(path, [])))
        return total[path]

    measure(ROOT)
    if total[ROOT] <= 0:
        raise ValueError(f"the {value!r} column has no positive value: nothing to draw")
    cells: list[tuple[str, float, int]] = []
    parts: list[str] = []
    depth_max = 0

    def place(path: str, x: float, depth: int) -> None:
        nonlocal depth_max
        span = total[path] / total[ROOT] * width
        depth_max = max(depth_max, depth)
        cells.append((path, total[path], depth))
        y, colour = depth * row_height, style.group_colour(depth)
        text = f"{path or 'model'}: {total[path]:.4g} {value.rsplit('_', 1)[-1]} ({label})"
        name = html.escape(short_name(path) if path else "model")
        fits = span > 7 * len(name) + 8
        parts.append(f"<g class='fl-icicle-cell' data-module='{html.escape(path, quote=True)}'><title>"
                     f"{html.escape(text)}</title><rect x='{x:.1f}' y='{y}' width='{max(span - 1, 0.5):.1f}' "
                     f"height='{row_height - 2}' fill='{colour.fill}' stroke='{colour.border}'/>"
                     + (f"<text x='{x + 4:.1f}' y='{y + row_height * 0.65:.1f}' font-size='11'>{name}</text>"
                        if fits else "") + "</g>")
        for child in children.get(path, []):
            place(child, x, depth + 1)
            x += total[child] / total[ROOT] * width

    place(ROOT, 0.0, 0)
    height = (depth_max + 1) * row_height + 18
    caption = html.escape(f"{value} by module, {label}; hover a cell for its time")
    svg = (f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' viewBox='0 0 {width} {height}'"
           f" style='max-width:100%;height:auto;font-family:{style.FONT}'>{''.join(parts)}"
           f"<text x='0' y='{height - 4}' font-size='11' fill='#4b5563'>{caption}</text></svg>")
    return IcicleChart(svg, tuple(cells), label)
