"""Triton source for one fusion group.

A group walks its `Domain`: pointwise kernels a flat index over the whole shape; reduction kernels a 2-D tile of
[XBLOCK rows, RBLOCK reduced elements]. Every value is emitted at an *index map* (which domain dimension each of
its own dimensions follows; None for a broadcast dimension), so broadcasts and size-1 reshapes inside a kernel are
index arithmetic, not copies. Sizes and strides are kernel arguments: no size is baked into the source.

Reductions are *persistent* (the whole row in registers, one pass) when the reduced size is static and at most
`PERSISTENT_LIMIT`; otherwise *looped* (one loop over the row per reduction, and one more for the outputs; a
mean and the variance around it share one loop, see codegen/welford.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from fusionlab.codegen import welford
from fusionlab.codegen.kinds import KernelKind, kernel_kind
from fusionlab.decompose import FLOAT32_OVERRIDES, INTEGER_OVERRIDES, POINTWISE, compute_dtype
from fusionlab.fusion.domain import Domain, alignment, non_unit, reads_own_row, store_map, value_map, view_map
from fusionlab.fusion.fuse import FusionGroup
from fusionlab.ir import Graph, Node, Ref, static_value
from fusionlab.names import Namer, comment

PERSISTENT_LIMIT = 16384
HEAVY_OPS = frozenset({"exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "erf", "erfinv", "tanh", "sigmoid",
                       "pow", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
                       "atan2"})

TRITON_DTYPES = {
    torch.float32: "tl.float32", torch.float16: "tl.float16", torch.bfloat16: "tl.bfloat16",
    torch.float64: "tl.float64", torch.int64: "tl.int64", torch.int32: "tl.int32", torch.int16: "tl.int16",
    torch.int8: "tl.int8", torch.uint8: "tl.uint8", torch.bool: "tl.int1",
}

# For each dimension of a value: the domain dimension it follows, None (broadcast), or a Shift (a slice of a
# concatenation: domain index minus `offset`, valid for `length` elements).
IndexMap = tuple


@dataclass(frozen=True)
class Shift:
    dim: int
    offset: str  # a kernel argument (sizes are never baked into source)
    length: str


@dataclass(frozen=True)
class KernelArgument:
    """One kernel parameter and where the wrapper finds its value."""

    name: str
    role: str  # "input" | "output" | "size" | "stride" | "numel" | "scalar" (an integer given by `expr`)
    value: str = ""  # the graph value (input/output/stride) it belongs to
    dim: int = -1
    expr: str = ""  # for sizes: the sympy expression, printed


@dataclass(frozen=True)
class KernelSource:
    name: str
    group: str
    kind: KernelKind
    source: str
    arguments: tuple[KernelArgument, ...]
    persistent: bool
    domain: Domain
    heavy: int = 0  # special-function ops and extra stores per element: more warps hide their latency
    accumulators: int = 1  # [XBLOCK, RBLOCK] tiles a looped reduction keeps live at once (block sizes shrink)

    @property
    def constexprs(self) -> tuple[str, ...]:
        return ("XBLOCK", "EVEN_X") if self.kind == "pointwise" else ("XBLOCK", "RBLOCK", "EVEN_X", "EVEN_R")


HALF_DTYPES = (torch.float16, torch.bfloat16)

# Ops whose Python-number operand PyTorch keeps at float32 precision for half-precision tensors (its kernels read
# it with `original_scalar_value`); other ops convert the number to the tensor's dtype first, so that `h > 1.1` on
# bfloat16 compares with 1.1015625 (checked against eager on CPU: add, sub, comparisons, fmod, remainder, pow).
UNROUNDED_SCALAR_OPS = frozenset({"mul", "div", "floor_divide"})


def _literal(value: object, dtype: torch.dtype, op: str = "") -> str:
    """A Python number as a Triton literal of `dtype` (a value's own dtype; half precision computes in float32)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if dtype in HALF_DTYPES and op not in UNROUNDED_SCALAR_OPS:
        value = float(torch.tensor(float(value), dtype=torch.float64).to(dtype))  # type: ignore[arg-type]
    if dtype.is_floating_point:
        number = float(value)  # type: ignore[arg-type]
        text = repr(number)
        if number != number:
            text = 'float("nan")'
        elif number in (float("inf"), float("-inf")):
            text = 'float("inf")' if number > 0 else 'float("-inf")'
        if dtype == torch.float64:
            # Triton makes a Python float a float32 constant: 0.1 would lose its float64 digits, and libdevice's
            # fmod(a, 2.0) would run in float32.
            return f"tl.full([], {text}, tl.float64)"
        return text
    return repr(int(value))  # type: ignore[call-overload]


def convert(expr: str, source: torch.dtype, target: torch.dtype) -> str:
    """`expr` (computed in `source`) converted to `target`, kept in `target`'s compute dtype.

    PyTorch converts to a half dtype through float32 (c10::Half(float), c10::BFloat16(float)): float64 and integer
    values are rounded to float32 first, then to the half dtype. bfloat16 goes through the preamble's helpers,
    which Triton's interpreter cannot get wrong."""
    if target == torch.bfloat16:
        return f"_round_bfloat16({expr})"
    if target == torch.float16:
        widened = expr if source == torch.float32 else f"{expr}.to(tl.float32)"
        return f"{widened}.to(tl.float16).to(tl.float32)"
    return f"{expr}.to({TRITON_DTYPES[target]})"


def _mask(index: str, numel: str, even: str, shape: str) -> str:
    """A bounds mask that is a constant True when the launch says the size divides the block."""
    return f"tl.full({shape}, True, tl.int1) if {even} else {index} < {numel}"


@dataclass
class _Scope:
    lines: list[str]
    cache: dict[tuple[str, IndexMap], str] = field(default_factory=dict)
    indent: str = "    "


class KernelWriter:
    """Writes one kernel; `contiguous` names the inputs known to be laid out densely in row-major order."""

    x_block = "XBLOCK"  # the rows' block (a matmul's epilogue walks BLOCK_M rows)

    def __init__(self, graph: Graph, group: FusionGroup, name: str, contiguous: set[str],
                 force_looped: bool = False, tile_pointwise: bool = True) -> None:
        assert group.domain is not None
        self.graph, self.group, self.name, self.contiguous = graph, group, name, contiguous
        self.domain = group.domain
        self.members = set(group.nodes)
        # Index variables (d0, d1, ...) are reserved up front so no value name can take them.
        self.namer = Namer({f"d{i}" for i in range(len(group.domain.shape))} | {
                            "xindex", "rindex", "xmask", "rmask", "mask", "xnumel", "rnumel", "XBLOCK", "RBLOCK",
                            "EVEN_X", "EVEN_R",
                            "roffset", "xoffset", "take", "candidate"})
        self.arguments: dict[str, KernelArgument] = {}
        self.reduction = self.domain.is_reduction
        rnumel: int | None = 1
        for axis in self.domain.axes:
            size = static_value(self.domain.shape[axis])
            rnumel = rnumel * size if (size is not None and rnumel is not None) else None
        # A pointwise kernel with broadcast or strided operands walks a 2-D tile [rows, last dimension]: the
        # column index is then a plain arange (a bias is read at `rindex`, with no integer division per element).
        self.tiled = tile_pointwise and not self.reduction and self._wants_tile()
        self.two_d = self.reduction or self.tiled
        rank = len(self.domain.shape)
        self.layout = Domain(self.domain.shape, (rank - 1,)) if self.tiled else self.domain
        # A reduction over leading axes reads its rows with a stride: it loops over small [XBLOCK, RBLOCK] tiles,
        # wide along the contiguous outer dimension, instead of holding strided rows in registers.
        self.persistent = (self.reduction and not force_looped and rnumel is not None and rnumel <= PERSISTENT_LIMIT
                           and self._trailing_axes())
        self.globals: dict[str, str] = {}  # reduction results, visible after their loop
        # A looped mean followed by a sum/mean of squared deviations from it: both in one Welford pass.
        self.welford = welford.partners(graph, group.nodes) if self.reduction and not self.persistent else {}
        self.top = _Scope([])
        self.dim_lines: dict[str, str] = {}

    def _wants_tile(self) -> bool:
        """Tile when operands read through a broadcast or a stride are at least half as many as the dense
        full-size ones: then the per-element index division costs more than the 2-D grid (measured on an H200:
        gelu(x + b) 0.110 -> 0.098 ms tiled; relu(x + b + r1) + r2 0.133 flat vs 0.139 tiled)."""
        shape = self.domain.shape
        if len(shape) < 2 or shape[-1] == 1:
            return False
        dense = other = 0
        for value in self.group.inputs:
            node_shape = self.graph[value].type.shape
            if non_unit(node_shape) == non_unit(shape) and value in self.contiguous:
                dense += 1
            else:
                other += 1
        return other > 0 and 2 * other >= dense

    # -- arguments ------------------------------------------------------------------------------
    def _argument(self, raw: str, role: str, value: str = "", dim: int = -1, expr: str = "") -> str:
        key = f"{role}:{value}:{dim}:{raw}"
        if key not in self.arguments:
            name = self.namer.identifier(raw, key)
            self.arguments[key] = KernelArgument(name, role, value, dim, expr)
        return self.arguments[key].name

    def _size(self, dim: int) -> str:
        return self._argument(f"size{dim}", "size", dim=dim, expr=str(self.domain.shape[dim]))

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

    def _trailing_axes(self) -> bool:
        rank = len(self.layout.shape)
        return self.layout.axes == tuple(range(rank - len(self.layout.axes), rank))

    def full_map(self) -> IndexMap:
        return tuple(range(len(self.domain.shape)))

    def map_for(self, shape: Sequence[object], level: str) -> IndexMap:
        """Align a stored or loaded shape with the domain (full) or its outer dimensions (row)."""
        return value_map(shape, self.domain, level)  # type: ignore[arg-type]

    def _flat_offset(self, index_map: IndexMap) -> str | None:
        """The offset of a dense row-major value read at `index_map`, when no div/mod is needed."""
        used = [m for m in index_map if m is not None]
        every = [d for d in range(len(self.domain.shape)) if self.domain.shape[d] != 1]
        if self.two_d:
            outer = [d for d in self.layout.outer if self.layout.shape[d] != 1]
            if used == every and self._trailing_axes():
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
        terms = []
        for position, dim in enumerate(index_map):
            if dim is None:
                continue
            stride = self._argument(f"stride_{value}_{position}", "stride", value, position)
            terms.append(f"{self.entry_expr(dim)} * {stride}")
        return " + ".join(terms) or "0"

    def entry_expr(self, entry: int | Shift) -> str:
        if isinstance(entry, Shift):
            return f"({self.dim_expr(entry.dim)} - {entry.offset})"
        return self.dim_expr(entry)

    def guards(self, index_map: IndexMap) -> list[str]:
        """Range conditions of the concatenation slices a load reads (so no other slice's index is read)."""
        return [f"({self.dim_expr(e.dim)} >= {e.offset}) & ({self.dim_expr(e.dim)} < {e.offset} + {e.length})"
                for e in index_map if isinstance(e, Shift)]

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

    # -- emission -------------------------------------------------------------------------------
    def emit(self, value: str, index_map: IndexMap, scope: _Scope) -> str:
        node = self.graph[value]
        if value in self.members and node.kind == "reduction":
            # A reduction result exists for the kernel's own rows only ([XBLOCK, 1]): fusion
            # (domain.misread_reduction) keeps out a group that reads one at another index, where reusing it
            # would be silently wrong.
            if not reads_own_row(node, index_map, self.domain):
                raise AssertionError(f"{self.name}: {value} is read at {index_map}, not at its own row: the fusion "
                                     "pass should have kept this reduction in a kernel of its own")
            return self._reduce(node, scope)
        key = (value, index_map)
        if key in scope.cache:
            return scope.cache[key]
        if value not in self.members:
            expr = self._load(node, index_map, scope)
        elif node.kind == "view":
            return self.emit(node.inputs[0], self._view_map(node, index_map), scope)
        else:
            expr = self._pointwise(node, index_map, scope)
        # A fresh name per emission (scope.cache shares within a scope); not keyed by id(scope): a freed scope's
        # id is reused, which made names depend on memory addresses.
        variable = self.namer.identifier(value, f"emitted:{len(self.namer.names)}")
        scope.lines.append(f"{scope.indent}{variable} = {expr}")
        scope.cache[key] = variable
        return variable

    def _load(self, node: Node, index_map: IndexMap, scope: _Scope) -> str:
        pointer = self._argument(f"in_{node.name}", "input", node.name)
        offset = self.offset(node.name, index_map, node.name in self.contiguous)
        mask = self.mask_for(offset)
        guards = self.guards(index_map)
        if guards:
            mask = " & ".join(([mask] if mask else []) + guards)
        dtype = node.type.dtype
        load = f"tl.load({pointer} + {offset}" + (f", mask={mask}, other=0" if mask else "")
        load += ")"
        if mask is None:
            # One element for the whole block: make it a block, as Triton's scalars and blocks mix unevenly
            # (the interpreter cannot `&` a scalar comparison with a block one).
            load = f"tl.broadcast_to({load}, {f'[{self.x_block}, 1]' if self.two_d else f'[{self.x_block}]'})"
        if dtype == torch.bfloat16:
            load = f"_from_bfloat16({load})"
        elif compute_dtype(dtype) != dtype:
            load += f".to({TRITON_DTYPES[compute_dtype(dtype)]})"
        return load

    def _view_map(self, node: Node, index_map: IndexMap) -> IndexMap:
        return view_map(self.graph, node, index_map)

    def _concatenate(self, node: Node, index_map: IndexMap, scope: _Scope) -> str:
        """cat along `dim`: each input is read at the domain index shifted by the sizes before it."""
        dim = int(node.param("dim"))
        entry = index_map[dim]
        base = entry.offset if isinstance(entry, Shift) else "0"
        domain_dim = entry.dim if isinstance(entry, Shift) else entry
        assert domain_dim is not None, "a concatenation along a broadcast dimension"
        pieces, start = [], base
        # Positional arguments, not `node.inputs`: that drops repeats, and cat([a, a]) reads `a` twice.
        parts = [arg.name for arg in node.args if isinstance(arg, Ref)]
        for index, (value, size) in enumerate(zip(parts, node.param("sizes"), strict=True)):
            length = self._argument(f"cat_{node.name}_{index}", "scalar", expr=str(size))
            shifted = tuple(Shift(domain_dim, start, length) if d == dim else e for d, e in enumerate(index_map))
            end = f"{start} + {length}" if start != "0" else length
            pieces.append((end, self.emit(value, shifted, scope)))
            start = f"({end})"
        expr = pieces[-1][1]
        for end, value in reversed(pieces[:-1]):
            expr = f"tl.where({self.dim_expr(domain_dim)} < {end}, {value}, {expr})"
        return expr

    def _pointwise(self, node: Node, index_map: IndexMap, scope: _Scope) -> str:
        if node.op == "cat":
            return self._concatenate(node, index_map, scope)
        operand_dtype = node.type.dtype
        refs = [a for a in node.args if isinstance(a, Ref)]
        if node.op != "where" and refs:  # where's data operands have the node's own dtype
            operand_dtype = self.graph[refs[-1].name].type.dtype
        operands = []
        for index, arg in enumerate(node.args):
            if isinstance(arg, Ref):
                operands.append(self._rounded(arg.name, self.emit(arg.name, index_map, scope), node.type.dtype))
            else:
                kind = operand_dtype if not (node.op == "where" and index == 0) else torch.bool
                operands.append(_literal(arg, kind, node.op))
        if node.op == "cast":
            source = self.graph[node.inputs[0]].type.dtype
            target = node.param("dtype")
            if source == target:
                return operands[0]
            if target == torch.bool:
                return f"({operands[0]} != 0)"
            return convert(operands[0], compute_dtype(source), target)
        primitive = POINTWISE[node.op]
        if not operand_dtype.is_floating_point and node.op in INTEGER_OVERRIDES:
            return INTEGER_OVERRIDES[node.op].format(*operands)
        if compute_dtype(operand_dtype) == torch.float32 and node.op in FLOAT32_OVERRIDES:
            return FLOAT32_OVERRIDES[node.op].format(*operands)
        return primitive.render(operands)

    def _rounded(self, value: str, expr: str, consumer: torch.dtype) -> str:
        """`expr` rounded to its half-precision dtype where a node of another dtype reads it.

        Half-precision values are computed in float32; a chain that stays in one half dtype keeps that precision
        (within the dtype's tolerance), but a value that leaves it (a cast to float32 or an integer, a comparison,
        an argmax) must be the value PyTorch rounded: bfloat16's `(h * 1.1).float()` differs by up to an ulp, and
        `h * 1.1 > 1.0` flips where the rounding crosses 1.0. Values loaded from memory are already rounded."""
        dtype = self.graph[value].type.dtype
        if dtype not in HALF_DTYPES or dtype == consumer:
            return expr
        source = self.graph[value]
        while source.kind == "view" and source.name in self.members:
            source = self.graph[source.inputs[0]]
        if source.name not in self.members or source.op == "cast":  # a load, or rounded by its cast
            return expr
        return convert(expr, torch.float32, dtype)

    def _reduce(self, node: Node, scope: _Scope) -> str:
        if node.name in self.globals:
            return self.globals[node.name]
        source = self.graph[node.inputs[0]]
        accumulate = compute_dtype(source.type.dtype)
        tl_type = TRITON_DTYPES[accumulate]
        identity = {"sum": "0", "mean": "0", "prod": "1", "amax": 'float("-inf")', "amin": 'float("inf")',
                    "argmax": 'float("-inf")', "argmin": 'float("inf")'}[node.op]
        if accumulate == torch.bool and node.op in ("amax", "argmax", "amin", "argmin"):
            identity = "0" if node.op in ("amax", "argmax") else "1"
        elif not accumulate.is_floating_point and node.op in ("amax", "argmax", "amin", "argmin"):
            info = torch.iinfo(accumulate)
            identity = str(info.min if node.op in ("amax", "argmax") else info.max)
        result = self.namer.identifier(node.name)
        keep = "[:, None]"
        if self.persistent:
            value = self._rounded(source.name, self.emit(source.name, self.full_map(), self.top), node.type.dtype)
            masked = f"tl.where(mask, {value}, {identity})"
            if node.op in ("argmax", "argmin"):
                lanes = "tl.broadcast_to(rindex, [XBLOCK, RBLOCK]).to(tl.int64)"
                extreme = self.namer.identifier(f"{result}_value")
                self.top.lines.append(f"    {extreme}, {result} = tl.reduce(({masked}, {lanes}), 1, _{node.op})")
                self.top.lines.append(f"    {result} = {result}{keep}")
            else:
                line = {
                    "sum": f"tl.sum({masked}, 1){keep}",
                    "mean": f"(tl.sum({masked}, 1){keep} / rnumel)",
                    "prod": f"tl.reduce({masked}, 1, _multiply){keep}",
                    "amax": f"tl.reduce({masked}, 1, _maximum){keep}",
                    "amin": f"tl.reduce({masked}, 1, _minimum){keep}",
                }[node.op]
                self.top.lines.append(f"    {result} = {line}")
        elif node.name in self.welford:
            self._welford(node, source, result, tl_type)
        else:
            accumulator = self.namer.identifier(f"acc_{result}")
            positions = self.namer.identifier(f"{accumulator}_index")
            lines = self.top.lines
            lines.append(f"    {accumulator} = tl.full([XBLOCK, RBLOCK], {identity}, {tl_type})")
            if node.op in ("argmax", "argmin"):
                lines.append(f"    {positions} = tl.zeros([XBLOCK, RBLOCK], tl.int64)")
            loop = self._open_loop()
            value = self._rounded(source.name, self.emit(source.name, self.full_map(), loop), node.type.dtype)
            masked = f"tl.where(mask, {value}, {identity})"
            pad = loop.indent
            update = {
                "sum": f"{accumulator} + {masked}", "mean": f"{accumulator} + {masked}",
                "prod": f"{accumulator} * {masked}",
                "amax": f"_maximum({accumulator}, {masked})", "amin": f"_minimum({accumulator}, {masked})",
            }
            if node.op in update:
                loop.lines.append(f"{pad}{accumulator} = {update[node.op]}")
            else:
                # Strictly better (or the first NaN): each lane keeps its first extreme value.
                better = ">" if node.op == "argmax" else "<"
                loop.lines.append(f"{pad}candidate = {masked}")
                loop.lines.append(f"{pad}take = (candidate {better} {accumulator}) | ((candidate != candidate) & "
                                  f"({accumulator} == {accumulator}))")
                loop.lines.append(f"{pad}{positions} = tl.where(take, rindex + {positions} * 0, "
                                  f"{positions})")
                loop.lines.append(f"{pad}{accumulator} = tl.where(take, candidate, {accumulator})")
            lines.extend(loop.lines)
            final = {
                "sum": f"tl.sum({accumulator}, 1){keep}", "mean": f"(tl.sum({accumulator}, 1){keep} / rnumel)",
                "prod": f"tl.reduce({accumulator}, 1, _multiply){keep}",
                "amax": f"tl.reduce({accumulator}, 1, _maximum){keep}",
                "amin": f"tl.reduce({accumulator}, 1, _minimum){keep}",
            }
            if node.op in final:
                lines.append(f"    {result} = {final[node.op]}")
            else:
                extreme = self.namer.identifier(f"{result}_value")
                lines.append(f"    {extreme}, {result} = tl.reduce(({accumulator}, {positions}), 1, "
                             f"_{node.op})")
                lines.append(f"    {result} = {result}{keep}")
        self.globals[node.name] = result
        return result

    def _welford(self, node: Node, source: Node, result: str, tl_type: str) -> None:
        """`node` (a mean) and its partner (the sum or mean of squared deviations from it) in one pass."""
        second = self.graph[self.welford[node.name]]
        variance = self.namer.identifier(second.name)
        mean, m2, count, delta, total = (self.namer.identifier(f"{result}_{part}")
                                         for part in ("running", "m2", "count", "delta", "total"))
        lines = self.top.lines
        lines.extend(f"    {acc} = tl.zeros([XBLOCK, RBLOCK], {tl_type})" for acc in (mean, m2, count))
        loop = self._open_loop()
        value = self.emit(source.name, self.full_map(), loop)
        loop.lines.extend(welford.loop_lines(loop.indent, value, mean, m2, count, delta))
        lines.extend(loop.lines)
        lines.extend(welford.combine_lines(mean, m2, count, result, variance, total, second.op == "mean"))
        self.globals[second.name] = variance

    def _open_loop(self) -> _Scope:
        loop = _Scope([], indent="        ")
        # A reduction over leading axes reads strided [XBLOCK, RBLOCK] tiles: software-pipelined (the next tiles'
        # loads in flight while this one is summed), column_normalize ran 0.148 -> 0.129 ms on an H200; rows read
        # along the contiguous axis gained nothing from it (rms_norm looped 0.071 -> 0.075), so they keep `range`.
        walk = "range(0, rnumel, RBLOCK)" if self._trailing_axes() else "tl.range(0, rnumel, RBLOCK, num_stages=3)"
        loop.lines.extend([
            f"    for roffset in {walk}:",
            "        rindex = roffset + tl.arange(0, RBLOCK)[None, :]",
            f"        rmask = {_mask('rindex', 'rnumel', 'EVEN_R', '[1, RBLOCK]')}",
            "        mask = xmask & rmask",
        ])
        return loop

    # -- the whole kernel -----------------------------------------------------------------------
    def _store(self, value: str, scope: _Scope) -> None:
        node = self.graph[value]
        level = alignment(node.type.shape, self.domain) or "full"
        expr = self.emit(value, store_map(node, self.domain), scope)
        if node.type.dtype == torch.bfloat16:
            expr = f"_to_bfloat16({expr})"  # tl.store's own conversion truncates under Triton's interpreter
        pointer = self._argument(f"out_{value}", "output", value)
        if level == "row":
            offset = "xindex"
        elif self.reduction and not self._trailing_axes():
            terms = []
            for dim in range(len(self.domain.shape)):
                later = [self._size(d) for d in range(dim + 1, len(self.domain.shape))]
                terms.append(f"{self.dim_expr(dim)}" + (f" * {' * '.join(later)}" if later else ""))
            offset = " + ".join(terms)
        else:
            offset = "xindex * rnumel + rindex" if self.two_d else "xindex"
        mask = "xmask" if level == "row" else ("mask" if self.two_d else "xmask")
        scope.lines.append(f"{scope.indent}tl.store({pointer} + {offset}, {expr}, mask={mask})")

    def write(self) -> KernelSource:
        outputs = list(self.group.outputs)
        row_outputs = [o for o in outputs if alignment(self.graph[o].type.shape, self.domain) == "row"]
        full_outputs = [o for o in outputs if o not in row_outputs]
        reductions = [n for n in self.group.nodes if self.graph[n].kind == "reduction"]
        if not self.reduction:
            for value in outputs:
                self._store(value, self.top)
        elif self.persistent:
            for name in reductions:
                self._reduce(self.graph[name], self.top)
            for value in outputs:
                self._store(value, self.top)
        else:
            for name in reductions:
                self._reduce(self.graph[name], self.top)
            for value in row_outputs:
                self._store(value, self.top)
            if full_outputs:
                loop = self._open_loop()
                for value in full_outputs:
                    self._store(value, loop)
                self.top.lines.extend(loop.lines)
        return self._assemble()

    def _header(self) -> list[str]:
        # EVEN_X / EVEN_R are set at launch when the size is a multiple of the block: the mask is then a constant
        # True, which Triton folds away (unmasked, vectorised loads and stores; measured 4% on gelu(x + b)).
        if self.tiled:
            return ["    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]",
                    f"    xmask = {_mask('xindex', 'xnumel', 'EVEN_X', '[XBLOCK, 1]')}",
                    "    rindex = tl.program_id(1) * RBLOCK + tl.arange(0, RBLOCK)[None, :]",
                    f"    rmask = {_mask('rindex', 'rnumel', 'EVEN_R', '[1, RBLOCK]')}", "    mask = xmask & rmask"]
        if not self.reduction:
            return ["    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)",
                    f"    xmask = {_mask('xindex', 'xnumel', 'EVEN_X', '[XBLOCK]')}"]
        lines = ["    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]",
                 f"    xmask = {_mask('xindex', 'xnumel', 'EVEN_X', '[XBLOCK, 1]')}"]
        if self.persistent:
            lines += ["    rindex = tl.arange(0, RBLOCK)[None, :]",
                      f"    rmask = {_mask('rindex', 'rnumel', 'EVEN_R', '[1, RBLOCK]')}", "    mask = xmask & rmask"]
        return lines

    def _assemble(self) -> KernelSource:
        ordered = sorted(self.arguments.values(),
                         key=lambda a: ["input", "output", "size", "stride", "scalar"].index(a.role))
        numels = ["xnumel", "rnumel"] if self.two_d else ["xnumel"]
        constexprs = ["XBLOCK: tl.constexpr"] + (["RBLOCK: tl.constexpr"] if self.two_d else [])
        constexprs += ["EVEN_X: tl.constexpr"] + (["EVEN_R: tl.constexpr"] if self.two_d else [])
        params = [a.name for a in ordered] + numels + constexprs
        primitives = [self.graph[n].op for n in self.group.nodes if self.graph[n].kind != "view"]
        read = ", ".join(f"{v} ({self.graph[v].type.text()})" for v in self.group.inputs) or "nothing"
        written = ", ".join(f"{v} ({self.graph[v].type.text()})" for v in self.group.outputs)
        looped = "looped reduction: one pass over each row per reduction, one more for the outputs"
        if self.welford:
            looped += "; a mean and the variance around it share one pass (Welford)"
        style = ("persistent reduction: each row stays in registers, one pass" if self.persistent else looped
                 if self.reduction else "pointwise over a 2-D tile [rows, last dimension]: broadcast operands "
                 "are indexed by row or column, no division" if self.tiled else "pointwise: one flat pass")
        lines = [
            "@triton.jit",
            f"def {self.name}({', '.join(params)}):",
            f"    # primitives: {comment(', '.join(primitives))}",
            f"    # reads {self.group.bytes_read} bytes: {comment(read)}",
            f"    # writes {self.group.bytes_written} bytes: {comment(written)}",
            f"    # {style}",
        ]
        lines += self._header()
        lines += [f"    {line}" for line in self.dim_lines.values()]
        lines += self.top.lines
        arguments = tuple(ordered) + tuple(KernelArgument(n, "numel") for n in numels)
        heavy = sum(1 for n in self.group.nodes if self.graph[n].op in HEAVY_OPS
                    and alignment(self.graph[n].type.shape, self.domain) == "full")
        heavy += max(0, sum(1 for o in self.group.outputs
                            if alignment(self.graph[o].type.shape, self.domain) == "full") - 1)
        kind: KernelKind = "tiled" if self.tiled else kernel_kind(self.group.kind)
        if self.reduction and not self._trailing_axes():
            kind = "outer_reduction"
        accumulators = 1
        if self.reduction and not self.persistent:
            accumulators = 3 if self.welford else 2 if any(self.graph[n].op in ("argmax", "argmin")
                                                           for n in self.group.nodes) else 1
        return KernelSource(self.name, self.group.name, kind, "\n".join(lines) + "\n", arguments,
                            self.persistent, self.domain, heavy, accumulators)
