"""How a kernel addresses its domain: index expressions, element offsets and bounds masks, and the kernel arguments
(sizes, strides) they read.

Every value is read or written at an *index map*: for each of its dimensions, the domain dimension it follows, None
(a broadcast), or a `Shift` (a slice of a concatenation). `IndexWriter` turns a map into Triton expressions over
`xindex` (rows) and `rindex` (columns of a 2-D layout), naming each size and stride it needs as an argument, so
that no size is ever baked into the source. The emitter (codegen/kernel.py) builds on it.

    >>> writer.offset("x", (0, 1), dense=False)
    'd0 * stride_x_0 + rindex * stride_x_1'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sympy

from fusionlab.codegen.plan import ARGUMENT_ROLES, KernelPlan
from fusionlab.fusion.domain import IndexMap
from fusionlab.fusion.fuse import FusionGroup
from fusionlab.ir import Dim, Graph
from fusionlab.names import Namer

# Names of the kernels' own code: reserved so that no value or argument can take them.
RESERVED = ("xindex", "rindex", "xmask", "rmask", "mask", "xnumel", "rnumel", "XBLOCK", "RBLOCK", "EVEN_X", "EVEN_R",
            "roffset", "xoffset", "take", "candidate")


@dataclass(frozen=True)
class Shift:
    """An index map's entry shifted back by `offset` and valid for `length`: a slice of a concatenation, or a
    padded operand (`dim` is the entry it shifts: a domain dimension, None for index 0, or another entry)."""

    dim: Any
    offset: str  # a kernel argument (sizes are never baked into source)
    length: str


@dataclass(frozen=True)
class Rolled:
    """An index map's entry read rolled: ((entry - shift) mod size), always in range (`torch.roll`)."""

    dim: Any
    shift: str  # kernel arguments
    size: str


@dataclass(frozen=True)
class KernelArgument:
    """One kernel parameter and where the wrapper finds its value."""

    name: str
    role: str  # "input" | "output" | "size" | "stride" | "numel" | "scalar" (an integer given by `expr`)
    value: str = ""  # the graph value (input/output/stride) it belongs to
    dim: int = -1
    expr: str = ""  # for sizes: the sympy expression, printed
    amount: Any = None  # for scalars: the int or size expression the wrapper passes


def bounds_mask(index: str, numel: str, even: str, shape: str) -> str:
    """A bounds mask that is a constant True when the launch says the size divides the block."""
    return f"tl.full({shape}, True, tl.int1) if {even} else {index} < {numel}"


class IndexWriter:
    """Index expressions of one kernel over `plan.layout`, and the arguments they name (in `arguments`)."""

    def __init__(self, graph: Graph, group: FusionGroup, name: str, plan: KernelPlan,
                 strides: Mapping[str, tuple[Dim, ...]] | None = None) -> None:
        self.graph, self.group, self.name, self.plan = graph, group, name, plan
        # Values whose strides at run time are these (views of dense values): their row dimensions can be
        # addressed by the flat row index where the strides collapse (a slice of a dense tensor).
        self.known_strides = dict(strides or {})
        self.domain, self.layout = plan.domain, plan.layout
        # Index variables (d0, d1, ...) are reserved up front so no value name can take them.
        self.namer = Namer({f"d{i}" for i in range(len(self.domain.shape))} | set(RESERVED))
        self.arguments: dict[str, KernelArgument] = {}
        self.dim_lines: dict[str, str] = {}  # `dN = ...` lines, emitted once before the body

    # -- arguments ------------------------------------------------------------------------------
    def _argument(self, raw: str, role: str, value: str = "", dim: int = -1, expr: str = "",
                  amount: Any = None) -> str:
        key = f"{role}:{value}:{dim}:{raw}"
        if key not in self.arguments:
            name = self.namer.identifier(raw, key)
            self.arguments[key] = KernelArgument(name, role, value, dim, expr, amount)
        return self.arguments[key].name

    def scalar(self, raw: str, amount: Any) -> str:
        """An integer kernel argument (an offset, a shift, a size of an operand): never a literal in the source."""
        return self._argument(raw, "scalar", expr=str(amount), amount=amount)

    def _size(self, dim: int) -> str:
        return self._argument(f"size{dim}", "size", dim=dim, expr=str(self.domain.shape[dim]))

    def ordered_arguments(self) -> list[KernelArgument]:
        """The named arguments in parameter order: inputs, outputs, sizes, strides, scalars."""
        return sorted(self.arguments.values(), key=lambda a: ARGUMENT_ROLES.index(a.role))

    # -- domain indexing ------------------------------------------------------------------------
    def _dims_of(self, group: Sequence[int], flat: str) -> dict[int, str]:
        """Expressions for each domain dimension in `group`, unflattened from the flat index `flat`."""
        result: dict[int, str] = {}
        for position, dim in enumerate(group):
            later = group[position + 1:]
            expr = flat
            if later:
                divisor = " * ".join(self._size(d) for d in later)
                expr = f"({expr} // ({divisor}))"
            if position > 0:
                expr = f"({expr} % {self._size(dim)})"
            result[dim] = expr
        return result

    def dim_expr(self, dim: int) -> str:
        if dim in self.layout.axes:
            exprs = self._dims_of(self.layout.axes, "rindex")
        else:
            exprs = self._dims_of(self.layout.outer, "xindex")
        variable = f"d{dim}"
        in_r = dim in self.layout.axes
        if variable not in self.dim_lines and not in_r:
            self.dim_lines[variable] = f"{variable} = {exprs[dim]}"
        return variable if not in_r else exprs[dim]

    def full_map(self) -> IndexMap:
        return tuple(range(len(self.domain.shape)))

    def _flat_offset(self, index_map: IndexMap) -> str | None:
        """The offset of a dense row-major value read at `index_map`, when no div/mod is needed."""
        used = [m for m in index_map if m is not None]
        every = [d for d in range(len(self.domain.shape)) if self.domain.shape[d] != 1]
        if self.plan.two_d:
            outer = [d for d in self.layout.outer if self.layout.shape[d] != 1]
            if used == every and self.plan.trailing_axes:
                return "xindex * rnumel + rindex"
            if used == outer:
                return "xindex"
            return None
        return "xindex" if used == every else None

    def offset(self, value: str, index_map: IndexMap, dense: bool) -> str:
        if dense:
            flat = self._flat_offset(index_map)
            if flat is not None:
                return flat
        merged = self._merged(value, index_map)
        terms = []
        for position, dim in enumerate(index_map):
            if dim is None or position in merged:
                continue
            stride = self._argument(f"stride_{value}_{position}", "stride", value, position)
            terms.append(f"{self.entry_expr(dim)} * {stride}")
        for flat, last in merged.values():
            stride = self._argument(f"stride_{value}_{last}", "stride", value, last)
            terms.append(f"{flat} * {stride}")
        return " + ".join(dict.fromkeys(terms)) or "0"

    def _merged(self, value: str, index_map: IndexMap) -> dict[int, tuple[str, int]]:
        """Positions of `value` read by one flat index: where they walk the layout's rows (or columns), each once,
        and the value's strides collapse over them taken in the layout's order (stride[i] == size[j] * stride[j]
        for consecutive i, j), `d0 * s0 + d1 * s1 + d2 * s2` is `xindex * s2`, with no division. The positions may
        be in another order than the layout's: a channels-last [N, C, H, W] value read over an NHWC domain is
        `xindex * 1`. Each merged position maps to (flat index, last position)."""
        strides = self.known_strides.get(value)
        if strides is None:
            return {}
        shape = self.graph[value].type.shape
        merged: dict[int, tuple[str, int]] = {}
        spans = [(self.layout.outer, "xindex")]
        if self.plan.two_d:
            spans.append((self.layout.axes, "rindex"))
        for dims, flat in spans:
            wanted = [d for d in dims if self.layout.shape[d] != 1]
            positions = sorted((p for p, e in enumerate(index_map) if isinstance(e, int) and e in wanted),
                               key=lambda p: wanted.index(index_map[p]))
            if len(wanted) < 2 or [index_map[p] for p in positions] != wanted:
                continue
            if all(_collapses(shape, strides, a, b) for a, b in zip(positions, positions[1:])):
                merged.update({p: (flat, positions[-1]) for p in positions})
        return merged

    def entry_expr(self, entry: Any) -> str:
        if entry is None:
            return "0"
        if isinstance(entry, Shift):
            return f"({self.entry_expr(entry.dim)} - {entry.offset})"
        if isinstance(entry, Rolled):
            # C-style % keeps the dividend's sign: one more `+ size` and `% size` make it Python's (in [0, size)).
            return f"((({self.entry_expr(entry.dim)} - {entry.shift}) % {entry.size} + {entry.size}) % {entry.size})"
        return self.dim_expr(entry)

    def in_range(self, entry: Shift) -> str:
        """Where a shifted entry falls inside its operand."""
        inner = self.entry_expr(entry.dim)
        return f"({inner} >= {entry.offset}) & ({inner} < {entry.offset} + {entry.length})"

    def guards(self, index_map: IndexMap) -> list[str]:
        """Range conditions of the shifted entries (concatenation slices, padding) a load reads, so that no index
        outside the operand is read."""
        found = []
        for entry in index_map:
            while isinstance(entry, (Shift, Rolled)):
                if isinstance(entry, Shift):
                    found.append(self.in_range(entry))
                entry = entry.dim
        return found

    def lanes(self, index_map: IndexMap) -> str | None:
        """The bounds mask of a value read at `index_map` (the lanes of the block that hold elements)."""
        return self.mask_for(" ".join(self.entry_expr(e) for e in index_map if e is not None))

    def block_shape(self, index_map: IndexMap) -> str:
        """The block a value read at `index_map` fills: rows, columns, both, or one element."""
        def base(entry: Any) -> Any:
            while isinstance(entry, (Shift, Rolled)):
                entry = entry.dim
            return entry
        used = {base(e) for e in index_map} - {None}
        if not self.plan.two_d:
            return "[XBLOCK]" if used else "[1]"
        rows = self.plan.row_block if used & set(self.layout.outer) else "1"
        columns = self.plan.column_block if used & set(self.layout.axes) else "1"
        return f"[{rows}, {columns}]"

    def mask_for(self, expr: str) -> str | None:
        has_x = "xindex" in expr or any(f"d{d}" in expr for d in self.layout.outer)
        has_r = "rindex" in expr
        if has_x and has_r:
            return "mask"
        if has_x:
            return "xmask"
        if has_r:
            return "rmask"
        return None


def _collapses(shape: tuple[Dim, ...], strides: tuple[Dim, ...], outer: int, inner: int) -> bool:
    """Whether dims `outer` and `inner` of a value, walked in that order, are one run in memory:
    stride[outer] == size[inner] * stride[inner] (sizes and strides may be symbolic). The flat index's term is then
    `(i_outer * size[inner] + i_inner) * stride[inner]`, whatever the dims between them or their order."""
    outer_stride, size, inner_stride = (sympy.sympify(v) for v in (strides[outer], shape[inner], strides[inner]))
    return sympy.expand(outer_stride - size * inner_stride) == 0
