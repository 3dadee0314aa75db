"""Triton source for a matmul group: one 2-D product in [BLOCK_M, BLOCK_N] output tiles, then its epilogue.

Each program owns one output tile. Programs are numbered in groups of GROUP_M tile rows, so programs running at
the same time share B's column tiles (and A's row tiles) in L2. The K loop accumulates `tl.dot` products in
float32; operand rows and columns wrap around (`% size`) rather than being masked, so the loop's loads need a mask
only on K, and only when K is not a multiple of BLOCK_K (`EVEN_K`, chosen at launch). The epilogue (bias,
activation, residual, casts) is emitted by the pointwise machinery of `KernelWriter` over the tile: rows are
`xindex`, columns `rindex`, and the product itself is the accumulator. Sizes and strides are kernel arguments.
"""

from __future__ import annotations

import torch

from fusionlab.codegen.indexing import KernelArgument
from fusionlab.codegen.kernel import KernelSource, KernelWriter
from fusionlab.codegen.plan import plan_matmul
from fusionlab.codegen.provenance import module_comments
from fusionlab.codegen.reduction_loops import Scope
from fusionlab.fusion.domain import IndexMap
from fusionlab.fusion.fuse import FusionGroup
from fusionlab.ir import Graph, Ref
from fusionlab.names import comment

MATMUL_CONSTEXPRS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "EVEN_K")

# Local names of the matmul's own code: reserved so that no value or argument can take them.
_LOCALS = ("pid", "pid_m", "pid_n", "programs_m", "programs_n", "programs_in_group", "first_m", "group_rows",
           "rows", "columns", "k_index", "a_pointers", "b_pointers", "a_tile", "b_tile", "acc", "k", "d0", "d1",
           "knumel") + MATMUL_CONSTEXPRS


class MatmulWriter(KernelWriter):
    """Writes the kernel of a group holding one `matmul` node and its epilogue (pointwise over [M, N])."""

    def __init__(self, graph: Graph, group: FusionGroup, name: str, contiguous: set[str]) -> None:
        # The epilogue walks the output tile as a 2-D [rows, columns] layout: xindex rows, rindex columns; its
        # broadcast scalars are sized by the tile's rows (BLOCK_M).
        super().__init__(graph, group, name, contiguous, plan_matmul(graph, group))
        self.namer.taken.update(_LOCALS)
        self.product = next(graph[n] for n in group.nodes if graph[n].kind == "matmul")

    def write(self) -> KernelSource:
        left, right = (arg.name for arg in self.product.args if isinstance(arg, Ref))
        a = self._argument(f"in_{left}", "input", left)
        b = self._argument(f"in_{right}", "input", right)
        a_rows, a_inner = (self._argument(f"stride_{left}_{d}", "stride", left, d) for d in (0, 1))
        b_inner, b_columns = (self._argument(f"stride_{right}_{d}", "stride", right, d) for d in (0, 1))
        epilogue = Scope([])
        for value in self.group.outputs:
            self._store(value, epilogue)
        # float32 operands: full-precision products, as eager PyTorch (tl.dot would use TF32 on the GPU).
        dtype = self.product.type.dtype
        precision = ', input_precision="ieee"' if dtype == torch.float32 else ""
        body = [
            "pid = tl.program_id(0)",
            "programs_m = tl.cdiv(xnumel, BLOCK_M)",
            "programs_n = tl.cdiv(rnumel, BLOCK_N)",
            "# programs numbered in groups of GROUP_M tile rows: programs running together share tiles in L2",
            "programs_in_group = GROUP_M * programs_n",
            "first_m = (pid // programs_in_group) * GROUP_M",
            "group_rows = tl.minimum(programs_m - first_m, GROUP_M)",
            "pid_m = first_m + (pid % programs_in_group) % group_rows",
            "pid_n = (pid % programs_in_group) // group_rows",
            "# operand rows and columns wrap around instead of being masked: the K loop's loads stay in bounds",
            "rows = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % xnumel",
            "columns = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % rnumel",
            "k_index = tl.arange(0, BLOCK_K)",
            f"a_pointers = {a} + (rows[:, None] * {a_rows} + k_index[None, :] * {a_inner})",
            f"b_pointers = {b} + (k_index[:, None] * {b_inner} + columns[None, :] * {b_columns})",
            "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
            "for k in range(0, tl.cdiv(knumel, BLOCK_K)):",
            "    if EVEN_K:",
            "        a_tile = tl.load(a_pointers)",
            "        b_tile = tl.load(b_pointers)",
            "    else:",
            "        a_tile = tl.load(a_pointers, mask=k_index[None, :] < knumel - k * BLOCK_K, other=0.0)",
            "        b_tile = tl.load(b_pointers, mask=k_index[:, None] < knumel - k * BLOCK_K, other=0.0)",
            f"    acc = tl.dot(a_tile, b_tile, acc{precision})",
            f"    a_pointers += BLOCK_K * {a_inner}",
            f"    b_pointers += BLOCK_K * {b_inner}",
            "# epilogue on the accumulator tile, then one store per output",
            "xindex = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]",
            "xmask = xindex < xnumel",
            "rindex = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]",
            "rmask = rindex < rnumel",
            "mask = xmask & rmask",
        ]
        body += list(self.dim_lines.values())
        return self._source(self._head() + [f"    {line}" for line in body] + epilogue.lines)

    def emit(self, value: str, index_map: IndexMap, scope: Scope) -> str:
        if value == self.product.name:
            # The epilogue reads the product from the accumulator, at the tile's own positions only: fusion
            # (domain.misread) keeps a reordered read of it out of the kernel.
            if any(e != d and not (e is None and size == 1)
                   for d, (e, size) in enumerate(zip(index_map, self.product.type.shape))):
                raise AssertionError(f"{self.name}: the product {value} is read at {index_map}, not at its own "
                                     "positions: the fusion pass should have kept this reader out of the kernel")
            return "acc"
        return super().emit(value, index_map, scope)

    def _head(self) -> list[str]:
        primitives = [self.graph[n].op for n in self.group.nodes if self.graph[n].kind != "view"]
        read = ", ".join(f"{v} ({self.graph[v].type.text()})" for v in self.group.inputs) or "nothing"
        written = ", ".join(f"{v} ({self.graph[v].type.text()})" for v in self.group.outputs)
        left, right = (self.graph[arg.name] for arg in self.product.args if isinstance(arg, Ref))
        flops = f"2 x {left.type.shape[0]} x {left.type.shape[1]} x {right.type.shape[1]} flops"
        return [
            *module_comments(self.graph, self.group),
            "@triton.jit",
            f"def {self.name}({', '.join(self._parameters())}):",
            f"    # primitives: {comment(', '.join(primitives))}",
            f"    # reads {self.group.bytes_read} bytes: {comment(read)}",
            f"    # writes {self.group.bytes_written} bytes: {comment(written)}",
            f"    # matmul: {comment(flops)} in [BLOCK_M, BLOCK_N] tiles, a float32 accumulator over K in BLOCK_K "
            "steps (tl.dot); the epilogue runs on the accumulator before the store",
        ]

    def _parameters(self) -> list[str]:
        names = [a.name for a in self.ordered_arguments()] + ["knumel", "xnumel", "rnumel"]
        return names + [f"{c}: tl.constexpr" for c in MATMUL_CONSTEXPRS]

    def _source(self, lines: list[str]) -> KernelSource:
        left = next(arg.name for arg in self.product.args if isinstance(arg, Ref))
        # K is the last positional argument: the wrapper passes it and the launcher reads it for EVEN_K.
        extent = KernelArgument("knumel", "extent", left, 1)
        numels = (KernelArgument("xnumel", "numel"), KernelArgument("rnumel", "numel"))
        return KernelSource(self.name, self.group.name, "matmul", "\n".join(lines) + "\n",
                            (*self.ordered_arguments(), extent, *numels), False, self.domain, self.plan.heavy,
                            modules=self.group.modules)
