"""A kernel's shape, decided before any line of it is written: the `KernelPlan`.

Planning answers the questions the emitter (codegen/kernel.py) and the launcher need: does a pointwise kernel walk
a flat index or a 2-D tile [rows, trailing dimensions] (`tiled`, when broadcast operands would need index
division), does a reduction keep each row in registers (`persistent`) or loop over it (`looped`), which mean and
variance share one Welford loop, how the kernel is launched (`kind`, `numels`, `constexprs`) and how heavy each
element is.

    >>> plan = plan_kernel(graph, group, contiguous={"x"})
    >>> plan.kind, plan.persistent, plan.numels
    ('reduction', True, ('xnumel', 'rnumel'))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fusionlab.codegen import online_softmax, welford
from fusionlab.codegen.kinds import KernelKind, kernel_kind
from fusionlab.decompose.primitives import INDEXED
from fusionlab.fusion.domain import Domain, alignment, non_unit
from fusionlab.fusion.fuse import FusionGroup
from fusionlab.ir import Dim, Graph, static_value

PERSISTENT_LIMIT = 16384
HEAVY_OPS = frozenset({"exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "erf", "erfinv", "tanh", "sigmoid",
                       "pow", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
                       "atan2"})
# The order of a kernel's parameters by role (then the numels, then the constexprs).
ARGUMENT_ROLES = ("input", "output", "size", "stride", "extent", "scalar")


@dataclass(frozen=True)
class KernelPlan:
    """How one group's kernel walks its domain; frozen before emission starts.

    `layout` is the domain as the kernel's index space sees it: a reduction's own, or for a tiled pointwise kernel
    the domain with its last dimension walked as columns (`rindex`)."""

    kind: KernelKind
    domain: Domain
    layout: Domain
    tiled: bool
    persistent: bool
    welford: tuple[tuple[str, str], ...] = ()  # (mean, its variance's reduction) pairs sharing one loop
    heavy: int = 0  # special-function ops and extra stores per element: more warps hide their latency
    accumulators: int = 1  # [XBLOCK, RBLOCK] tiles a looped reduction keeps live at once (block sizes shrink)
    row_block: str = "XBLOCK"  # the rows' block (a matmul's epilogue walks BLOCK_M rows)
    column_block: str = "RBLOCK"  # the columns' block of a 2-D layout (BLOCK_N in a matmul's epilogue)
    online: tuple[tuple[str, str], ...] = ()  # (amax, the sum of exp(x - amax)) pairs sharing one loop
    # a looped kernel's reductions by the pass over the rows that computes them (`reduction_passes`), and the
    # full-size outputs each pass's loop of plain reductions stores (`output_stores`; the rest: one loop after them)
    passes: tuple[tuple[str, ...], ...] = ()
    stores: tuple[tuple[str, ...], ...] = ()

    @property
    def reduction(self) -> bool:
        return self.domain.is_reduction

    @property
    def looped(self) -> bool:
        return self.reduction and not self.persistent

    @property
    def two_d(self) -> bool:
        """Rows and columns: `xindex` [XBLOCK, 1] and `rindex` [1, RBLOCK]."""
        return self.reduction or self.tiled

    @property
    def trailing_axes(self) -> bool:
        """Whether the layout's columns are its last dimensions (a row is contiguous in a dense value)."""
        rank = len(self.layout.shape)
        return self.layout.axes == tuple(range(rank - len(self.layout.axes), rank))

    @property
    def partners(self) -> dict[str, str]:
        return dict(self.welford)

    @property
    def paired(self) -> set[str]:
        """The reductions of Welford and online-softmax pairs (each pair has a loop of its own)."""
        return {name for pairs in (self.welford, self.online) for pair in pairs for name in pair}

    @property
    def reduction_loops(self) -> int:
        """The loops over each row that compute reductions: per pass, one per pair and one for the others."""
        heads = {head for pairs in (self.welford, self.online) for head, _ in pairs}
        return sum(len(heads.intersection(names)) + any(n not in self.paired for n in names) for names in self.passes)

    @property
    def numels(self) -> tuple[str, ...]:
        return ("xnumel", "rnumel") if self.two_d else ("xnumel",)

    @property
    def constexprs(self) -> tuple[str, ...]:
        return ("XBLOCK", "RBLOCK", "EVEN_X", "EVEN_R") if self.two_d else ("XBLOCK", "EVEN_X")

    def describe(self) -> str:
        """The kernel's shape in one comment line."""
        if self.persistent:
            return "persistent reduction: each row stays in registers, one pass"
        if self.reduction:
            loops = self.reduction_loops
            looped = (f"looped reduction: {loops} pass{'es' if loops > 1 else ''} over each row for its reductions "
                      "(those reading no other's result share one), each output stored in the first of them after "
                      "what it reads, else in one more")
            looped += "; a mean and the variance around it share one pass (Welford)" if self.welford else ""
            return looped + ("; a maximum and the sum of exponentials share one pass (online softmax)"
                             if self.online else "")
        if self.tiled:
            return ("pointwise over a 2-D tile [rows, trailing dimensions]: broadcast operands are indexed by row "
                    "or column, no division per element")
        return "pointwise: one flat pass"


def plan_kernel(graph: Graph, group: FusionGroup, contiguous: set[str], force_looped: bool = False,
                strides: Mapping[str, tuple[Dim, ...]] | None = None) -> KernelPlan:
    """The plan of a pointwise or reduction group's kernel; `contiguous` names the values known to be dense,
    `strides` the other values' strides where they are known when the program is built."""
    domain = group.domain
    assert domain is not None
    reduction = domain.is_reduction
    rnumel: int | None = 1
    for axis in domain.axes:
        size = static_value(domain.shape[axis])
        rnumel = rnumel * size if (size is not None and rnumel is not None) else None
    # A pointwise kernel with broadcast or strided operands walks a 2-D tile [rows, trailing dimensions]: the column
    # index is then a plain arange (a bias is read at `rindex`, with no integer division per element).
    tiled = not reduction and _wants_tile(graph, group, domain, contiguous)
    layout = Domain(domain.shape, _columns(graph, group, domain, contiguous)) if tiled else domain
    shape = KernelPlan(kernel_kind(group.kind), domain, layout, tiled, False)
    # A reduction over leading axes reads its rows with a stride: it loops over small [XBLOCK, RBLOCK] tiles, wide
    # along the contiguous outer dimension, instead of holding strided rows in registers.
    # So does one over trailing axes of an operand whose contiguous dimension is kept (a channels-last NCHW value
    # summed over H and W: each row's elements lie C apart, consecutive rows are adjacent).
    outer = reduction and (not shape.trailing_axes or _kept_contiguous(graph, group, domain, contiguous, strides or {}))
    persistent = (reduction and not force_looped and rnumel is not None and rnumel <= PERSISTENT_LIMIT
                  and not outer)
    # A looped mean followed by a sum/mean of squared deviations from it: both in one Welford pass.
    partners = welford.partners(graph, group.nodes) if reduction and not persistent else {}
    # A looped amax followed by the sum of exp(x - amax): both in one pass (online softmax).
    online = online_softmax.partners(graph, group.nodes) if reduction and not persistent else {}
    kind: KernelKind = "tiled" if tiled else kernel_kind(group.kind)
    if outer:
        kind = "outer_reduction"
    heavy = sum(1 for n in group.nodes if graph[n].op in HEAVY_OPS and alignment(graph[n].type.shape, domain) == "full")
    heavy += max(0, sum(1 for o in group.outputs if alignment(graph[o].type.shape, domain) == "full") - 1)
    accumulators = 1
    passes: tuple[tuple[str, ...], ...] = ()
    stores: tuple[tuple[str, ...], ...] = ()
    if reduction and not persistent:
        passes = reduction_passes(graph, group, {**partners, **online})
        paired = {name for pairs in (partners, online) for pair in pairs.items() for name in pair}
        stores = output_stores(graph, group, passes, paired)
        shared = max((sum(2 if graph[n].op in ("argmax", "argmin") else 1 for n in names if n not in paired)
                      for names in passes), default=1)
        accumulators = max(3 if partners else 2 if online else 1, shared)
    return KernelPlan(kind, domain, layout, tiled, persistent, tuple(partners.items()), heavy, accumulators,
                      online=tuple(online.items()), passes=passes, stores=stores)


def output_stores(graph: Graph, group: FusionGroup, passes: Sequence[Sequence[str]],
                  paired: set[str]) -> tuple[tuple[str, ...], ...]:
    """Per pass, the group's full-size outputs its loop of plain reductions stores: each in the first such loop after
    the passes whose results it reads (a Welford or online-softmax pair's loop stores none). The relu mask of a
    batch norm's backward is stored in the loop of its sums."""
    level = {name: at for at, names in enumerate(passes, 1) for name in names}
    domain = group.domain
    assert domain is not None
    waiting = {value: max((level[r] for r in reductions_read(graph, group, [value], level)), default=0)
               for value in group.outputs if alignment(graph[value].type.shape, domain) != "row"}
    stores: list[tuple[str, ...]] = []
    for at, names in enumerate(passes, 1):
        here = tuple(value for value, needs in waiting.items() if needs < at) \
            if any(name not in paired for name in names) else ()
        stores.append(here)
        for value in here:
            del waiting[value]
    return tuple(stores)


def reduction_passes(graph: Graph, group: FusionGroup, paired: Mapping[str, str]) -> tuple[tuple[str, ...], ...]:
    """A looped kernel's reductions by the pass over its rows that computes them: those that read no other
    reduction's result in the first, those that read first-pass results in the second, and so on; a Welford or
    online-softmax partner (`paired`: head -> partner) in its head's. A batch norm's backward sums the gradient
    and the gradient times the normalised input in one pass (before, one pass each: a third more bytes read)."""
    partner_of = {partner: head for head, partner in paired.items()}
    level: dict[str, int] = {}
    for name in group.nodes:
        if graph[name].kind != "reduction":
            continue
        if name in partner_of and partner_of[name] in level:
            level[name] = level[partner_of[name]]
            continue
        level[name] = 1 + max((level[r] for r in reductions_read(graph, group, graph[name].inputs, level)), default=0)
    passes: list[list[str]] = [[] for _ in range(max(level.values(), default=0))]
    for name, at in level.items():
        passes[at - 1].append(name)
    return tuple(tuple(names) for names in passes)


def reductions_read(graph: Graph, group: FusionGroup, values: Sequence[str], reductions: Mapping[str, int]) -> set[str]:
    """The reductions among `reductions` whose results `values` read, through the group's own nodes (and those it
    recomputes); not through another reduction (its own pass covers what it reads)."""
    members = set(group.nodes) | set(group.recomputed)
    found: set[str] = set()
    seen: set[str] = set()
    work = list(values)
    while work:
        name = work.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in reductions:
            found.add(name)
        elif name in members:
            work.extend(graph[name].inputs)
    return found


def _kept_contiguous(graph: Graph, group: FusionGroup, domain: Domain, contiguous: set[str],
                     strides: Mapping[str, tuple[Dim, ...]]) -> bool:
    """Whether an operand the group reads over its whole domain has its unit stride on a dimension the reduction
    keeps (strides known when the program is built, or as traced)."""
    for value in group.inputs:
        node = graph[value]
        if value in contiguous or tuple(node.type.shape) != tuple(domain.shape):
            continue
        known = strides.get(value, node.type.strides)
        unit = [d for d, (stride, size) in enumerate(zip(known or (), domain.shape, strict=False))
                if stride == 1 and size != 1]
        if unit and unit[-1] not in domain.axes:
            return True
    return False


def plan_matmul(graph: Graph, group: FusionGroup) -> KernelPlan:
    """A matmul group's plan: the product's [M, N] output in tiles, its epilogue over the tile as rows (`xindex`,
    BLOCK_M of them) and columns (`rindex`)."""
    domain = group.domain
    assert domain is not None
    if len(domain.shape) != 2:
        raise ValueError(f"{group.name}: a matmul kernel walks a 2-D output, not {tuple(domain.shape)}")
    heavy = sum(1 for n in group.nodes if graph[n].op in HEAVY_OPS)
    return KernelPlan("matmul", domain, Domain(domain.shape, (1,)), True, False, heavy=heavy, row_block="BLOCK_M",
                      column_block="BLOCK_N")


def _columns(graph: Graph, group: FusionGroup, domain: Domain, contiguous: set[str]) -> tuple[int, ...]:
    """The trailing dims a tile's columns walk: the last, and the ones before it over which every broadcast or
    strided operand is constant. Batch norm's per-channel vectors [1, C, 1, 1] over NCHW are constant over (H, W):
    columns H * W wide (49 to 12544) instead of W (7 to 112), each vector read once per row."""
    rank = len(domain.shape)
    members = set(group.nodes) | set(group.recomputed)
    # An operand read strided at full size, padded, rolled, concatenated or gathered varies along every dim: the
    # columns stay the last dim (more would only add index divisions).
    if any(graph[v].type.shape == domain.shape and v not in contiguous for v in group.inputs) \
            or any(graph[n].op in INDEXED and graph[n].op not in ("full", "iota") for n in members):
        return (rank - 1,)
    # what the kernel broadcasts, as the domain sees it (the value an expand reads)
    others = [graph[graph[n].inputs[0]].type.shape for n in members
              if graph[n].op == "expand" and graph[n].type.rank == rank]
    if not others or any(len(s) != rank for s in others):
        return (rank - 1,)
    first = rank - 1
    while first > 0:
        run = range(first - 1, rank)
        if not all(all(s[d] == 1 for d in run) for s in others):
            break  # an operand that varies along the run would need an index division per element
        first -= 1
    return tuple(range(first, rank))


def _wants_tile(graph: Graph, group: FusionGroup, domain: Domain, contiguous: set[str]) -> bool:
    """Tile when operands read through a broadcast or a stride are at least half as many as the dense full-size
    ones: then the per-element index division costs more than the 2-D grid (measured on an H200: gelu(x + b)
    0.110 -> 0.098 ms tiled; relu(x + b + r1) + r2 0.133 flat vs 0.139 tiled)."""
    shape = domain.shape
    if len(shape) < 2 or shape[-1] == 1:
        return False
    dense = other = 0
    for value in group.inputs:
        node_shape = graph[value].type.shape
        if non_unit(node_shape) == non_unit(shape) and value in contiguous:
            dense += 1
        else:
            other += 1
    return other > 0 and 2 * other >= dense
