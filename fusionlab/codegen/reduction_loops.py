"""The reductions of a kernel in Triton source: a persistent row's in one line each, a looped kernel's in one loop
over the row per pass of `plan.passes` (plain reductions that read no other's result share it, with the full-size
outputs `plan.stores` places there), and each Welford or online-softmax pair in a loop of its own. A mixin of
`KernelWriter` (codegen/kernel.py), which emits the values the reductions read; each op's identity, loop step and
row reduction are codegen/reductions.py's tables.

    >>> writer._reduce(graph["sum_1"], writer.top)   # the variable that holds the row's sum, [XBLOCK, 1]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from fusionlab.codegen import online_softmax, reductions, welford
from fusionlab.codegen.dtypes import TRITON_DTYPES
from fusionlab.codegen.indexing import bounds_mask
from fusionlab.codegen.plan import KernelPlan
from fusionlab.decompose import compute_dtype
from fusionlab.fusion.domain import IndexMap
from fusionlab.ir import Graph, Node
from fusionlab.names import Namer


@dataclass
class Scope:
    """Lines of source at one level (the kernel's top, or a loop over the row) and the values emitted there."""

    lines: list[str]
    cache: dict[tuple[str, IndexMap], str] = field(default_factory=dict)
    indent: str = "    "
    tile_bytes: int = 0  # bytes per element of the [XBLOCK, RBLOCK] tiles loaded in this scope


class ReductionLoops:
    """The reduction emission of `KernelWriter`: what it needs of the writer is declared here."""

    graph: Graph
    plan: KernelPlan
    namer: Namer
    top: Scope
    loops: list[Scope]
    globals: dict[str, str]  # reduction results, visible after their loop
    welford: dict[str, str]
    online: dict[str, str]

    if TYPE_CHECKING:  # (the writer's own: declared for the type checker only, never shadowing them)
        def emit(self, value: str, index_map: IndexMap, scope: Scope) -> str: ...

        def full_map(self) -> IndexMap: ...

        def _rounded(self, value: str, expr: str, consumer: torch.dtype, op: str = "") -> str: ...

        def _store(self, value: str, scope: Scope) -> None: ...

    def _reduce(self, node: Node, scope: Scope) -> str:
        if node.name in self.globals:
            return self.globals[node.name]
        if not self.plan.persistent and node.name not in self.welford and node.name not in self.online:
            self._reduce_in_one_pass([node])
            return self.globals[node.name]
        source = self.graph[node.inputs[0]]
        accumulate = compute_dtype(source.type.dtype)
        tl_type = TRITON_DTYPES[accumulate]
        identity = reductions.identity(node.op, accumulate)
        result = self.namer.identifier(node.name)
        lines = self.top.lines
        if self.plan.persistent:
            value = self._rounded(source.name, self.emit(source.name, self.full_map(), self.top), node.type.dtype)
            masked = f"tl.where(mask, {value}, {identity})"
            if node.op in reductions.ARG_BETTER:
                extreme = self.namer.identifier(f"{result}_value")
                lines.extend(reductions.arg_reduce_lines(node.op, masked, reductions.ROW_LANES, extreme, result))
            else:
                lines.append(f"    {result} = {reductions.ROW_REDUCE[node.op].format(masked)}")
        elif node.name in self.welford:
            self._welford(node, source, result, tl_type)
        else:
            self._online_softmax(node, source, result, tl_type)
        self.globals[node.name] = result
        return result

    def _reduce_in_one_pass(self, nodes: Sequence[Node], outputs: Sequence[str] = ()) -> None:
        """Reductions that read no other one's result (a pass of `plan.passes`), each into its own accumulator, in
        one loop over the rows that loads every operand once; `outputs` (which read no result of this pass) are
        stored in the same loop."""
        lines = self.top.lines
        loop = self._open_loop()
        finals: list[str] = []
        for node in nodes:
            source = self.graph[node.inputs[0]]
            accumulate = compute_dtype(source.type.dtype)
            identity = reductions.identity(node.op, accumulate)
            result = self.namer.identifier(node.name)
            accumulator = self.namer.identifier(f"acc_{result}")
            positions = self.namer.identifier(f"{accumulator}_index")
            lines.append(f"    {accumulator} = tl.full([XBLOCK, RBLOCK], {identity}, {TRITON_DTYPES[accumulate]})")
            if node.op in reductions.ARG_BETTER:
                lines.append(f"    {positions} = tl.zeros([XBLOCK, RBLOCK], tl.int64)")
            value = self._rounded(source.name, self.emit(source.name, self.full_map(), loop), node.type.dtype)
            masked = f"tl.where(mask, {value}, {identity})"
            if node.op in reductions.ACCUMULATE:
                step = reductions.ACCUMULATE[node.op].format(accumulator, masked)
                loop.lines.append(f"{loop.indent}{accumulator} = {step}")
            else:
                loop.lines.extend(reductions.arg_update_lines(loop.indent, node.op, masked, accumulator, positions))
            if node.op in reductions.ROW_REDUCE:
                finals.append(f"    {result} = {reductions.ROW_REDUCE[node.op].format(accumulator)}")
            else:
                extreme = self.namer.identifier(f"{result}_value")
                finals.extend(reductions.arg_reduce_lines(node.op, accumulator, positions, extreme, result))
            self.globals[node.name] = result
        for value in outputs:
            self._store(value, loop)
        lines.extend(loop.lines)
        lines.extend(finals)

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

    def _online_softmax(self, node: Node, source: Node, result: str, tl_type: str) -> None:
        """`node` (an amax) and its partner (the sum of exp(x - amax)) in one pass."""
        total = self.namer.identifier(self.online[node.name])
        running_max, running_sum, masked, new_max, shift, row_shift = (
            self.namer.identifier(f"{result}_{part}") for part in ("running", "sum", "masked", "next", "shift", "row"))
        lines = self.top.lines
        lines.append(f"    {running_max} = tl.full([XBLOCK, RBLOCK], float(\"-inf\"), {tl_type})")
        lines.append(f"    {running_sum} = tl.zeros([XBLOCK, RBLOCK], {tl_type})")
        loop = self._open_loop()
        value = self._rounded(source.name, self.emit(source.name, self.full_map(), loop), node.type.dtype)
        loop.lines.extend(online_softmax.loop_lines(loop.indent, value, masked, running_max, running_sum, new_max,
                                                    shift))
        lines.extend(loop.lines)
        lines.extend(online_softmax.combine_lines(running_max, running_sum, result, total, row_shift))
        self.globals[self.online[node.name]] = total

    def _open_loop(self) -> Scope:
        loop = Scope([], indent="        ")
        self.loops.append(loop)
        # An outer reduction (over leading axes, or rows whose elements lie a kept dimension apart) reads strided
        # [XBLOCK, RBLOCK] tiles: software-pipelined (the next tiles' loads in flight while this one is summed),
        # column_normalize ran 0.148 -> 0.129 ms on an H200; rows read along the contiguous axis gained nothing from
        # it (rms_norm looped 0.071 -> 0.075), so they keep `range`.
        walk = "tl.range(0, rnumel, RBLOCK, num_stages=3)" if self.plan.kind == "outer_reduction" else \
            "range(0, rnumel, RBLOCK)"
        loop.lines.extend([
            f"    for roffset in {walk}:",
            "        rindex = roffset + tl.arange(0, RBLOCK)[None, :]",
            f"        rmask = {bounds_mask('rindex', 'rnumel', 'EVEN_R', '[1, RBLOCK]')}",
            "        mask = xmask & rmask",
        ])
        return loop
