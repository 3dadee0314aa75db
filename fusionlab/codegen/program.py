"""The wrapper program: Python that allocates buffers, launches kernels, calls extern ops and applies views.

Everything a user named reaches the source only through `Namer` (identifiers) or `comment` (one-line
comments); extern ops and non-literal constants are passed in the program's namespace, never spelled out.

    def fusionlab_program(x, b):
        # pointwise_0_add_mul_erf: reads x, b; writes mul_2
        mul_2 = empty((8, 16), (16, 1), torch.float32)
        launch(pointwise_0_add_mul_erf, x, b, mul_2, 16, xnumel=128)
        return (mul_2,)
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import sympy
import torch
from torch.utils._sympy.printers import PythonPrinter

from fusionlab.capture import CaptureResult
from fusionlab.codegen.kernel import KernelSource, KernelWriter
from fusionlab.codegen.kinds import TILE_KINDS
from fusionlab.codegen.launch_checks import LaunchChecks
from fusionlab.codegen.matmul import MatmulWriter
from fusionlab.codegen.plan import plan_kernel
from fusionlab.codegen.preamble import KERNEL_PREAMBLE
from fusionlab.fusion.fuse import FuseResult, FusionGroup
from fusionlab.ir import (
    Dim,
    Graph,
    Node,
    Ref,
    TensorType,
    channels_last_strides,
    contiguous_strides,
    is_channels_last,
    product,
)
from fusionlab.names import Namer, comment

__all__ = ["KERNEL_PREAMBLE", "Program", "WrapperSection", "generate_program"]


class WrapperSection(NamedTuple):
    """The wrapper lines one group wrote (1-based, inclusive): its allocations and launch, extern calls or views."""

    group: str
    first: int
    last: int


@dataclass(frozen=True)
class Program:
    wrapper: str
    kernels: tuple[KernelSource, ...]
    namespace_constants: dict[str, Any]
    input_names: tuple[str, ...]
    sections: tuple[WrapperSection, ...] = ()  # each group's lines of `wrapper`, in program order
    # per kernel, the positions of its launch's arguments that may differ in what Triton specialises on from one
    # call to the next (an input's address, a size read at run time); the others are the same on every call
    launch_checks: dict[str, tuple[int, ...]] = field(default_factory=dict)
    input_dtypes: tuple[torch.dtype | None, ...] = ()  # what the program was generated for, input by input


def render_dim(dim: Dim) -> str:
    """A size as Python source: `s0 * 2`, `min(s0, 5)`, `s0 // 2` (sympy's own printing is not Python)."""
    if not isinstance(dim, sympy.Expr) or dim.is_number:
        return str(int(dim))
    return str(PythonPrinter().doprint(dim))


def render_shape(shape: Sequence[Dim]) -> str:
    items = [render_dim(d) for d in shape]
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


class ProgramWriter:
    def __init__(self, graph: Graph, fused: FuseResult, captured: CaptureResult,
                 force_looped: bool = False) -> None:
        self.graph, self.fused, self.captured = graph, fused, captured
        self.force_looped = force_looped
        # Size symbols (s0, s1, ...) are spelled by sympy: reserve them so no argument can take their names.
        self.namer = Namer({"torch", "empty", "launch", "device", "reinterpret", "allocator"}
                           | {str(b.symbol) for b in captured.symbols})
        self.constants: dict[str, Any] = {}
        self.lines: list[str] = []
        self.kernels: list[KernelSource] = []
        # An extern's result that a kernel reads, dense as traced (a convolution's NCHW output): the wrapper makes
        # sure with .contiguous() (no copy when it is), so kernels index it as dense, with no division per element,
        # and so do its views read by kernels or extern ops, made in one step from it (`reinterpret`).
        # the values kernels read, and the wrapper's views in program order
        self.kernel_reads = {value for group in fused.groups if group.is_kernel for value in group.inputs}
        self.allocated = {value for group in fused.groups if group.is_kernel for value in group.outputs}
        self.extern_nodes = {name for group in fused.groups if group.kind == "extern" for name in group.nodes}
        self.launch_checks: dict[str, tuple[int, ...]] = {}
        self.wrapper_views = dict.fromkeys(name for group in fused.groups
                                           if not group.is_kernel and group.kind != "extern" for name in group.nodes)
        extern_reads = {value for name in self.extern_nodes for value in graph[name].inputs}
        through_views: set[str] = set()
        for name in reversed(self.wrapper_views):  # read through views, too
            if (name in self.kernel_reads or name in extern_reads or name in through_views) and graph[name].inputs:
                through_views.add(graph[name].inputs[0])
        # (a result the caller also gets keeps its own layout unless a kernel reads it directly)
        read = self.kernel_reads | (through_views - set(graph.outputs))
        read_externs = [name for group in fused.groups if group.kind == "extern" for name in group.nodes
                        if name in read and graph[name].type.rank >= 2]
        self.dense_externs = {name for name in read_externs if not graph[name].param("outputs")
                              and _traced_dense(graph[name].type)}
        # extern results typed channels-last (a convolution of channels-last operands, or the input's gradient from
        # its backward, the first of its results: decompose/layout.py) are made so (no copy when they are): kernels
        # read them with strides known now
        # (of an op with several results, only a first result a kernel reads: the op may not return one at all)
        self.channels_last_externs = {name for name in read_externs if name not in self.dense_externs
                                      and is_channels_last(graph[name].type)
                                      and (not graph[name].param("outputs") or name in self.kernel_reads)}

    def var(self, value: str) -> str:
        return self.namer.identifier(value, f"value:{value}")

    def all_outputs(self, extern: str) -> str:
        """The tuple an extern op with several outputs returns."""
        return self.namer.identifier(f"{extern}_all", f"all:{extern}")

    def constant(self, value: Any, hint: str) -> str:
        if value is None or isinstance(value, (bool, int, str)):
            return repr(value)
        if isinstance(value, float) and value == value and value not in (float("inf"), float("-inf")):
            return repr(value)
        if isinstance(value, sympy.Expr):
            return render_dim(value)
        if isinstance(value, sympy.logic.boolalg.Boolean):  # a condition on sizes (`a.numel() > 8`)
            return f"({PythonPrinter().doprint(value)})"
        if isinstance(value, torch.dtype):
            return repr(value)  # "torch.float32": ours, not user text
        name = self.namer.identifier(f"const_{hint}", key=f"constant:{len(self.constants)}")  # one name per value
        self.constants[name] = value
        return name

    def render_arg(self, value: Any, hint: str) -> str:
        if isinstance(value, Ref):
            return self.var(value.name)
        if isinstance(value, (list, tuple)):
            items = [self.render_arg(v, hint) for v in value]
            body = ", ".join(items) + ("," if isinstance(value, tuple) and len(items) == 1 else "")
            return f"[{body}]" if isinstance(value, list) else f"({body})"
        if isinstance(value, dict):
            return "{" + ", ".join(f"{k!r}: {self.render_arg(v, hint)}" for k, v in value.items()) + "}"
        return self.constant(value, hint)

    # -- pieces ---------------------------------------------------------------------------------
    def contiguous_values(self) -> set[str]:
        """The values kernels may index as dense row-major tensors."""
        dense = {name for spec, name in zip(self.captured.inputs, self.graph.inputs) if _traced_dense(spec.type)}
        for group in self.fused.groups:
            if group.is_kernel:
                dense.update(group.outputs)
        return dense | self.dense_externs

    def known_layouts(self, dense: set[str], channels_last: Collection[str] = ()
                      ) -> dict[str, tuple[tuple[Dim, ...], Dim]]:
        """Strides and storage offsets, as they will be at run time, of the values in `dense` (dense at run time), in
        `channels_last` (dense in NHWC order at run time) and of the wrapper's views of them (a slice of an input made
        contiguous): a view's follow from its source's, sizes being what the program is built for."""
        known: dict[str, tuple[tuple[Dim, ...], Dim]] = {
            v: (contiguous_strides(self.graph[v].type.shape), 0) for v in dense}
        known.update({v: (channels_last_strides(self.graph[v].type.shape), 0) for v in channels_last})
        for name in self.wrapper_views:
            node = self.graph[name]
            source = known.get(node.inputs[0]) if node.inputs else None
            if source is not None:
                layout = view_layout(node, self.graph[node.inputs[0]].type.shape, *source)
                if layout is not None:
                    known[name] = layout
        return known

    def kernel(self, group: FusionGroup, index: int, dense: set[str]) -> None:
        name = self.namer.identifier(group.name)
        # A view the wrapper would make only to pass its pointer: the kernel reads its base instead (as a dense
        # tensor, or with the view's strides, known when the program is built)
        aliases = {} if group.kind == "matmul" else self.view_aliases
        if group.kind == "matmul":
            source = MatmulWriter(self.graph, group, name, dense).write()
        else:
            dense = dense | set(self.dense_views)
            plan = plan_kernel(self.graph, group, dense, self.force_looped, self.view_strides)
            source = KernelWriter(self.graph, group, name, dense, plan, self.view_strides).write()
        self.kernels.append(source)
        where = f" (in {comment(group.module)})" if group.module else ""
        self.lines.append(f"    # {comment(group.name)}{where}: reads {comment(', '.join(group.inputs))}; "
                          f"writes {comment(', '.join(group.outputs))}")
        for value in group.outputs:
            node = self.graph[value]
            dtype = self.constant(node.type.dtype, "dtype")
            self.lines.append(f"    {self.var(value)} = empty({render_shape(node.type.shape)}, "
                              f"{render_shape(contiguous_strides(node.type.shape))}, {dtype})")
        args: list[str] = []
        for argument in source.arguments:
            if argument.role in ("input", "output"):
                args.append(self.var(aliases.get(argument.value, argument.value)))
            elif argument.role == "size":
                args.append(render_dim(group.domain.shape[argument.dim]))  # type: ignore[union-attr]
            elif argument.role == "stride" and argument.value in self.layouts:  # known: no .stride() call
                args.append(render_dim(self.layouts[argument.value][0][argument.dim]))
            elif argument.role == "stride":
                args.append(f"{self.var(argument.value)}.stride({argument.dim})")
            elif argument.role == "extent" and argument.value in aliases:  # a view not made: its size as built
                args.append(render_dim(self.graph[argument.value].type.shape[argument.dim]))
            elif argument.role == "extent":  # a size read off a tensor at run time (a matmul's K, a gather's table)
                args.append(f"{self.var(argument.value)}.size({argument.dim})")
            elif argument.role == "scalar":
                args.append(render_dim(argument.amount) if argument.amount is not None else str(int(argument.expr)))
        self.launch_checks[name] = tuple(
            i for i, (argument, text) in enumerate(zip(source.arguments, args))
            if not (_literal(text) or self.checks.same_on_every_call(argument, aliases)))
        domain = group.domain
        assert domain is not None
        tiles = source.kind in TILE_KINDS
        axes = domain.axes if domain.is_reduction else ((source.columns or (len(domain.shape) - 1,)) if tiles else ())
        outer = tuple(d for d in range(len(domain.shape)) if d not in axes)
        xnumel = product(tuple(domain.shape[d] for d in outer))
        call = f"    launch({name}, {', '.join(args)}, xnumel={render_dim(xnumel)}"
        if axes:
            call += f", rnumel={render_dim(product(tuple(domain.shape[d] for d in axes)))}"
        self.lines.append(call + ")")

    def extern(self, node: Node) -> None:
        call_args, call_kwargs = node.param("call")
        op = self.constant(node.param("target"), node.op)
        rendered = [self.render_arg(a, node.op) for a in call_args]
        rendered += [f"{k}={self.render_arg(v, node.op)}" for k, v in call_kwargs.items()]
        target = self.var(node.name)
        if node.param("outputs"):
            target = self.all_outputs(node.name)
        where = f" (in {comment(node.module)})" if node.module else ""
        self.lines.append(f"    {target} = {op}({', '.join(rendered)})  # extern: {comment(node.op)} runs "
                          f"eagerly{where}")
        if node.param("outputs"):
            self.lines.append(f"    {self.var(node.name)} = {target}[0]")
        if node.name in self.dense_externs:
            self.lines.append(f"    {target} = {target}.contiguous()  # dense as traced: no copy when it is")
        elif node.name in self.channels_last_externs:
            first = self.var(node.name)
            self.lines.append(f"    {first} = {first}.contiguous(memory_format=torch.channels_last)  # no copy when "
                              "it is")

    def view(self, node: Node) -> None:
        source = self.var(node.inputs[0])
        target = self.var(node.name)
        if node.op == "output_of":
            self.lines.append(f"    {target} = {self.all_outputs(node.inputs[0])}[{int(node.param('index'))}]")
            return
        if node.name in self.direct_views:
            strides, offset = self.layouts[node.name]
            root = self.var(self._view_source(node.name))
            self.lines.append(f"    {target} = reinterpret({root}, {render_shape(node.type.shape)}, "
                              f"{render_shape(strides)}, {render_dim(offset)})  # view of {root}, as built")
            return
        dims = tuple(int(d) for d in node.param("dims", ()))
        if node.name in self.composed:  # a permute of a permute: one step from the chain's start
            root, dims = self.composed[node.name]
            if dims == tuple(range(len(dims))) and node.name not in self.graph.outputs:
                self.lines.append(f"    {target} = {self.var(root)}  # the permutes cancel: the value itself")
                return
            source = self.var(root)  # (a result the caller gets stays a view, even where they cancel)
        if node.op == "reshape":
            expr = f"{source}.reshape({render_shape(node.type.shape)})"
        elif node.op == "expand":
            expr = f"{source}.expand({render_shape(node.type.shape)})"
        elif node.op == "permute":
            expr = f"{source}.permute({dims})"
        elif node.op == "slice":
            dim, start, step = int(node.param("dim")), node.param("start"), int(node.param("step"))
            length = node.type.shape[dim]
            size = self.graph[node.inputs[0]].type.shape[dim]
            in_range = all(isinstance(v, int) for v in (start, length, size)) and 0 <= start <= start + length <= size
            if step == 1 and in_range:  # a method call: a third of the host time of the aten op's (which clamps)
                expr = f"{source}.narrow({dim}, {render_dim(start)}, {render_dim(length)})"
            else:
                expr = (f"torch.ops.aten.slice.Tensor({source}, {dim}, {render_dim(start)}, "
                        f"{render_dim(start + length * step)}, {step})")
        elif node.op == "select":
            expr = f"{source}.select({int(node.param('dim'))}, {int(node.param('index'))})"
        else:
            raise ValueError(f"no wrapper form for the view {node.op!r}")
        self.lines.append(f"    {target} = {expr}  # view: no copy where PyTorch can avoid one")

    def write(self, input_names: Sequence[str]) -> Program:
        dense = self.contiguous_values()
        params = [self.namer.identifier(display, f"value:{value}")
                  for display, value in zip(input_names, self.graph.inputs)]
        header = [f"def fusionlab_program({', '.join(params)}):"]
        for binding in self.captured.symbols:
            header.append(f"    {binding.symbol} = {params[binding.input_index]}.shape[{binding.dim}]")
        first = params[0] if params else "None"
        header.append(f"    device = {first}.device")
        header.append("    empty = allocator(device)  # empty(sizes, strides, dtype) on that device")
        read = self.kernel_reads
        # Dense at run time: kernel outputs, extern results made dense, and the inputs kernels read (made dense
        # below); an input only viewed is left as the caller passed it (a copy of all of it to read a slice, and a
        # returned view of the caller's tensor no longer one, otherwise)
        inputs = set(self.graph.inputs)
        self.layouts = self.known_layouts({v for v in dense if v not in inputs or v in read},
                                          self.channels_last_externs)
        self.checks = LaunchChecks(self.graph, self.wrapper_views, self.layouts, self.extern_nodes, self.allocated,
                                   symbolic=bool(self.captured.symbols))
        self.view_aliases = {v: self._view_source(v) for v, (_, offset) in self.layouts.items()
                             if v not in dense and v not in self.channels_last_externs and offset == 0}
        self.dense_views = {v: source for v, source in self.view_aliases.items()
                            if tuple(self.layouts[v][0]) == tuple(contiguous_strides(self.graph[v].type.shape))}
        # the strides of the other views kernels may read (codegen/indexing.py: rows by the flat index)
        self.view_strides = {v: strides for v, (strides, _) in self.layouts.items()
                             if v not in dense and v not in self.dense_views}
        for value, param in zip(self.graph.inputs, params):
            if value in dense and value in read:  # no copy when it is dense already
                header.append(f"    {param} = {param}.contiguous()")
        # a view whose strides and offset are known is made in one step from the dense value its chain starts at
        # (`reinterpret`, as Inductor's wrapper does): the views between are not made, unless something else
        # reads them; a result the caller gets stays a view PyTorch made
        self.direct_views = {v for v in self.layouts if v in self.wrapper_views and v not in self.graph.outputs
                             and self.graph[v].op != "output_of"}
        self.composed = self._composed_permutes()
        needed = self._needed_views()
        spans: list[tuple[str, int, int]] = []  # each group's lines, as indices into self.lines
        for index, group in enumerate(self.fused.groups):
            start = len(self.lines)
            if group.is_kernel:
                self.kernel(group, index, dense)
            elif group.kind == "extern":
                for name in group.nodes:
                    self.extern(self.graph[name])
            else:
                for name in group.nodes:
                    if name in needed:
                        self.view(self.graph[name])
            spans.append((group.name, start, len(self.lines)))
        outputs = [self.var(v) for v in self.graph.outputs]
        body = header + self.lines + [f"    return ({', '.join(outputs)}{',' if len(outputs) == 1 else ''})"]
        sections = tuple(WrapperSection(group, len(header) + start + 1, len(header) + end)
                         for group, start, end in spans)
        dtypes = tuple(self.graph[v].type.dtype for v in self.graph.inputs)
        return Program("\n".join(body) + "\n", tuple(self.kernels), dict(self.constants), tuple(params), sections,
                       dict(self.launch_checks), dtypes)

    def _needed_views(self) -> set[str]:
        """The wrapper's views something needs as a tensor: an output, an extern's operand, a matmul kernel's, a
        view of one made from it; a view that kernels alone read, at offset 0 of a value whose layout is known, is not
        made (they read its base)."""
        readers: dict[str, set[str]] = {}
        for group in self.fused.groups:
            if group.is_kernel:
                for value in group.inputs:
                    readers.setdefault(value, set()).add("matmul" if group.kind == "matmul" else "kernel")
            else:
                for name in group.nodes:
                    for value in self.graph[name].inputs:
                        readers.setdefault(value, set()).add(name if group.kind != "extern" else "extern")
        needed: set[str] = set()
        roots: set[str] = set()  # where a needed composed permute starts
        for name in reversed(self.wrapper_views):  # a view's readers come after it
            users = readers.get(name, set())
            if (name in self.graph.outputs or name in roots or users - {"kernel"} - self.wrapper_views.keys()
                    or (users & needed) - self.direct_views - self.composed.keys()
                    or ("kernel" in users and name not in self.view_aliases)):
                needed.add(name)
                if name in self.composed:
                    roots.add(self.composed[name][0])
        return needed

    def _composed_permutes(self) -> dict[str, tuple[str, tuple[int, ...]]]:
        """Each permute the wrapper makes of another it makes (a weight's transpose transposed back, in a linear's
        backward): the value the chain of permutes starts at and the one permutation from it, so the wrapper makes
        one view, or none when the permutes cancel, instead of one per step (each a Python call on every run)."""
        composed: dict[str, tuple[str, tuple[int, ...]]] = {}
        for name in self.wrapper_views:
            node = self.graph[name]
            if node.op != "permute" or name in self.direct_views:
                continue
            source, dims = node.inputs[0], tuple(int(d) for d in node.param("dims"))
            if source in composed:
                root, inner = composed[source]
            elif (source in self.wrapper_views and self.graph[source].op == "permute"
                  and source not in self.direct_views):
                root, inner = self.graph[source].inputs[0], tuple(int(d) for d in self.graph[source].param("dims"))
            else:
                continue
            composed[name] = (root, tuple(inner[d] for d in dims))
        return composed

    def _view_source(self, value: str) -> str:
        """The value a chain of wrapper views starts from (a kernel's output that is itself a view node is where the
        chain starts: it is made, whatever it is inside its kernel)."""
        while value in self.wrapper_views and self.graph[value].inputs:
            value = self.graph[value].inputs[0]
        return value


def view_layout(node: Node, source_shape: tuple[Dim, ...], source: tuple[Dim, ...],
                offset: Dim) -> tuple[tuple[Dim, ...], Dim] | None:
    """The strides and storage offset of view `node` of a tensor with `source` strides at `offset`, as PyTorch gives
    them; None where they depend on more than that (a reshape of a non-dense tensor, one output of a multi-output
    op)."""
    if node.op in ("slice", "select"):
        dim = int(node.param("dim"))
        first = node.param("start" if node.op == "slice" else "index")
        if isinstance(first, int) and first < 0:
            first += source_shape[dim]
        offset = offset + first * source[dim]
        if node.op == "select":
            return tuple(s for d, s in enumerate(source) if d != dim), offset
        step = int(node.param("step"))
        return tuple(s * step if d == dim else s for d, s in enumerate(source)), offset
    if node.op == "permute":
        return tuple(source[int(d)] for d in node.param("dims")), offset
    if node.op == "expand":
        shape, lead = node.type.shape, node.type.rank - len(source)
        return tuple(0 if d < lead or (source_shape[d - lead] == 1 and shape[d] != 1) else source[d - lead]
                     for d in range(len(shape))), offset
    if node.op == "reshape" and tuple(source) == tuple(contiguous_strides(source_shape)):
        return contiguous_strides(node.type.shape), offset
    sizes = (*source_shape, *source, *node.type.shape)
    if node.op == "reshape" and all(isinstance(d, int) for d in sizes):  # a view where PyTorch makes one
        try:
            made = torch.empty_strided(source_shape, source, device="meta").view(node.type.shape)
        except (RuntimeError, ValueError):  # torch's meta `view` raises either, by version
            return None  # reshape copies here
        return tuple(made.stride()), offset
    return None


def generate_program(graph: Graph, fused: FuseResult, captured: CaptureResult,
                     force_looped: bool = False) -> Program:
    names = [spec.name for spec in captured.inputs]
    return ProgramWriter(graph, fused, captured, force_looped).write(names)


def _literal(text: str) -> bool:
    """A launch argument written as a number: the same on every call."""
    return text.removeprefix("-").isdigit()


def _traced_dense(value: TensorType) -> bool:
    """Dense row-major as traced (strides known and contiguous)."""
    return value.strides is not None and tuple(value.strides) == tuple(contiguous_strides(value.shape))
