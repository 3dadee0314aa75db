"""The reference interpreter of the primitive IR: a `Graph` run node by node with plain torch ops.

Each node means what the kernels compute: operands in the node's compute dtype (float32 for float16/bfloat16
values, `builder.compute_dtype`), the result rounded to the node's dtype. Every value is returned, so a caller can
compare intermediates with the captured aten program or with the generated kernels' buffers.

    >>> graph = decompose(capture(torch.sigmoid, (torch.randn(4),), {})).graph
    >>> values = interpret(graph, [torch.zeros(4)])
    >>> values[graph.outputs[0]]
    tensor([0.5000, 0.5000, 0.5000, 0.5000])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import sympy
import torch
import torch.utils._pytree as pytree

from fusionlab.decompose.builder import compute_dtype
from fusionlab.decompose.primitives import INDEXED
from fusionlab.ir import Dim, Graph, Node, Ref

Operation = Callable[..., torch.Tensor]

# One torch function per pointwise primitive (fusionlab.decompose.primitives.POINTWISE), with PyTorch's semantics
# (floor_divide and remainder round towards negative infinity, as the integer templates do).
POINTWISE_OPS: dict[str, Operation] = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "div_rn": torch.div, "neg": torch.neg,
    "abs": torch.abs,
    "reciprocal": torch.reciprocal, "exp": torch.exp, "exp2": torch.exp2, "expm1": torch.expm1, "log": torch.log,
    "log2": torch.log2, "log10": torch.log10, "log1p": torch.log1p, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
    "sin": torch.sin, "cos": torch.cos, "tan": torch.tan, "asin": torch.asin, "acos": torch.acos,
    "atan": torch.atan, "sinh": torch.sinh, "cosh": torch.cosh, "tanh": torch.tanh, "asinh": torch.asinh,
    "acosh": torch.acosh, "atanh": torch.atanh, "erf": torch.erf, "erfinv": torch.erfinv,
    "sigmoid": torch.sigmoid, "floor": torch.floor, "ceil": torch.ceil, "round": torch.round,
    "trunc": torch.trunc, "pow": torch.pow, "atan2": torch.atan2, "fmod": torch.fmod,
    "remainder": torch.remainder, "floor_divide": torch.floor_divide, "maximum": torch.maximum,
    "minimum": torch.minimum, "where": torch.where, "copy": torch.clone, "sign": torch.sign,
    "bitwise_and": torch.bitwise_and, "bitwise_or": torch.bitwise_or, "bitwise_xor": torch.bitwise_xor,
    "bitwise_not": torch.bitwise_not, "eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le,
    "gt": torch.gt, "ge": torch.ge, "logical_and": torch.logical_and, "logical_or": torch.logical_or,
    "logical_xor": torch.logical_xor, "logical_not": torch.logical_not, "isnan": torch.isnan,
    "isinf": torch.isinf,
}


def _last(x: torch.Tensor, axes: tuple[int, ...]) -> torch.Tensor:
    """`x` with the reduced axes moved last and flattened into one (argmax over several axes is over their
    flattened index, as a kernel's row index is)."""
    kept = [d for d in range(x.dim()) if d not in axes]
    moved = x.permute(*kept, *axes)
    return moved.reshape(*moved.shape[: len(kept)], -1)


def _on_last(reduce: Callable[[torch.Tensor], torch.Tensor]) -> Callable[..., torch.Tensor]:
    def run(x: torch.Tensor, axes: tuple[int, ...], keepdim: bool) -> torch.Tensor:
        result = reduce(_last(x, axes))
        if keepdim:
            result = result.reshape([1 if d in axes else size for d, size in enumerate(x.shape)])
        return result
    return run


REDUCTION_OPS: dict[str, Callable[..., torch.Tensor]] = {
    "sum": lambda x, axes, keepdim: torch.sum(x, axes, keepdim=keepdim),
    "mean": lambda x, axes, keepdim: torch.mean(x, axes, keepdim=keepdim),
    "amax": lambda x, axes, keepdim: torch.amax(x, axes, keepdim=keepdim),
    "amin": lambda x, axes, keepdim: torch.amin(x, axes, keepdim=keepdim),
    "prod": _on_last(lambda row: torch.prod(row, -1)),
    "argmax": _on_last(lambda row: torch.argmax(row, -1)),
    "argmin": _on_last(lambda row: torch.argmin(row, -1)),
}


class Interpreter:
    """Runs one graph's nodes in order; `values` holds every value computed so far (name -> tensor)."""

    def __init__(self, graph: Graph, inputs: Sequence[torch.Tensor]) -> None:
        if len(inputs) != len(graph.inputs):
            raise ValueError(f"the graph takes {len(graph.inputs)} inputs ({', '.join(graph.inputs)}), "
                             f"got {len(inputs)}")
        self.graph = graph
        self.values: dict[str, torch.Tensor] = dict(zip(graph.inputs, inputs))
        self.packed: dict[str, tuple[Any, ...]] = {}  # an extern op's several results, for `output_of`
        self.sizes: dict[sympy.Symbol, int] = {}  # symbolic sizes, bound from the inputs' shapes
        for name, tensor in zip(graph.inputs, inputs):
            for dim, size in zip(graph[name].type.shape, tensor.shape):
                if isinstance(dim, sympy.Symbol):
                    self.sizes[dim] = int(size)

    def size(self, dim: Dim) -> int:
        return int(dim.xreplace(self.sizes)) if isinstance(dim, sympy.Expr) else int(dim)

    def shape(self, dims: Sequence[Dim]) -> tuple[int, ...]:
        return tuple(self.size(d) for d in dims)

    def run(self) -> dict[str, torch.Tensor]:
        with torch.no_grad():
            for node in self.graph.nodes:
                if node.kind != "input":
                    self.values[node.name] = self.node(node)
        return self.values

    def node(self, node: Node) -> torch.Tensor:
        method: Callable[[Node], torch.Tensor] = getattr(self, node.kind)
        return method(node)

    def operand(self, arg: Any, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """A Ref's value in `dtype`'s compute dtype; a literal as a 0-d tensor of it."""
        if isinstance(arg, Ref):
            value = self.values[arg.name]
            return value.to(compute_dtype(value.dtype))
        return torch.tensor(arg, dtype=compute_dtype(dtype), device=device)

    def device(self) -> torch.device:
        return next((v.device for v in self.values.values()), torch.device("cpu"))

    # -- one method per node kind ------------------------------------------------------------------
    def pointwise(self, node: Node) -> torch.Tensor:
        refs = [self.values[a.name] for a in node.args if isinstance(a, Ref)]
        device = refs[0].device if refs else self.device()
        if node.op == "cast":
            return self.values[node.args[0].name].to(node.param("dtype"))  # type: ignore[union-attr]
        if node.op in INDEXED:
            return self.indexed(node, refs, device)
        data = node.args[1:] if node.op == "where" else node.args
        data_refs = [self.values[a.name] for a in data if isinstance(a, Ref)]
        dtype = data_refs[0].dtype if data_refs else node.type.dtype
        operands = [self.operand(a, dtype, device) for a in data]
        if node.op == "where":
            operands.insert(0, self.operand(node.args[0], torch.bool, device))
        result = POINTWISE_OPS[node.op](*operands)
        return result.expand(self.shape(node.type.shape)).to(node.type.dtype)

    def indexed(self, node: Node, refs: list[torch.Tensor], device: torch.device) -> torch.Tensor:
        """The primitives computed from an element's index (primitives.INDEXED), as torch calls."""
        shape = self.shape(node.type.shape)
        if node.op == "cat":
            return torch.cat(refs, dim=node.param("dim")).to(node.type.dtype)
        if node.op == "full":
            return torch.full(shape, node.param("value"), dtype=node.type.dtype, device=device)
        if node.op == "iota":
            dim, start, step = int(node.param("dim")), node.param("start"), node.param("step")
            start = self.size(start) if isinstance(start, sympy.Expr) else start
            wide = torch.float64 if node.type.dtype.is_floating_point else torch.int64
            line = start + step * torch.arange(shape[dim] if shape else 1, dtype=wide, device=device)
            placed = [1] * len(shape)
            if shape:
                placed[dim] = shape[dim]
            return line.reshape(placed).expand(shape).to(node.type.dtype)
        if node.op == "index":
            table, *indices = refs
            dim, count = int(node.param("dim")), len(indices)
            indexed = len(shape) - (table.dim() - count)
            # The index operands are broadcast to the output's shape: their own part is dims dim..dim+indexed.
            own = tuple(slice(None) if dim <= d < dim + indexed else 0 for d in range(len(shape)))
            compact = [index[own] for index in indices]
            if not node.param("wrap"):
                for index, size in zip(compact, table.shape[dim:dim + count]):
                    if bool(((index < 0) | (index >= size)).any()):
                        raise IndexError(f"{node.name}: an index out of range [0, {size}) (negative indices do not "
                                         "count from the end here, as in embedding and gather)")
            return table[(slice(None),) * dim + tuple(compact)].to(node.type.dtype)
        if node.op == "pad":
            source, before = refs[0], node.param("before")
            after = [out - size - low for out, size, low in zip(shape, source.shape, before)]
            amounts = [amount for low, high in zip(reversed(before), reversed(after)) for amount in (low, high)]
            return torch.constant_pad_nd(source, amounts, node.param("value")).to(node.type.dtype)
        if node.op == "checked":
            size = self.size(node.param("size"))
            if bool(((refs[0] < 0) | (refs[0] >= size)).any()):
                raise IndexError(f"{node.name}: an index out of range [0, {size})")
            return refs[0].clone()
        if node.op == "roll":
            return torch.roll(refs[0], list(node.param("shifts")), list(node.param("dims")))
        raise ValueError(f"the reference interpreter has no meaning for {node.op!r} ({node.name})")

    def reduction(self, node: Node) -> torch.Tensor:
        value = self.values[node.args[0].name]  # type: ignore[union-attr]
        reduce = REDUCTION_OPS[node.op]
        axes = tuple(int(a) for a in node.param("axes"))
        return reduce(value.to(compute_dtype(value.dtype)), axes, bool(node.param("keepdim"))).to(node.type.dtype)

    def view(self, node: Node) -> torch.Tensor:
        source = node.args[0].name  # type: ignore[union-attr]
        if node.op == "output_of":
            return self.packed[source][int(node.param("index"))]  # type: ignore[no-any-return]
        value = self.values[source]
        if node.op == "reshape":
            return value.reshape(self.shape(node.param("shape")))
        if node.op == "expand":
            return value.expand(self.shape(node.param("shape")))
        if node.op == "permute":
            return value.permute(*(int(d) for d in node.param("dims")))
        if node.op == "slice":
            dim, start, step = int(node.param("dim")), self.size(node.param("start")), int(node.param("step"))
            end = start + self.size(node.type.shape[dim]) * step
            return torch.ops.aten.slice.Tensor(value, dim, start, end, step)
        if node.op == "select":
            return value.select(int(node.param("dim")), int(node.param("index")))
        raise ValueError(f"the reference interpreter has no meaning for the view {node.op!r} ({node.name})")

    def matmul(self, node: Node) -> torch.Tensor:
        left, right = (self.values[a.name] for a in node.args)  # type: ignore[union-attr]
        dtype = compute_dtype(left.dtype)  # tl.dot accumulates half-precision products in float32
        return torch.matmul(left.to(dtype), right.to(dtype)).to(node.type.dtype)

    def extern(self, node: Node) -> torch.Tensor:
        args, kwargs = pytree.tree_map(lambda a: self.values[a.name] if isinstance(a, Ref) else a, node.param("call"))
        result = node.param("target")(*args, **kwargs)
        if node.param("outputs"):
            self.packed[node.name] = tuple(result)
            return result[0]  # type: ignore[no-any-return]
        return result  # type: ignore[no-any-return]


def interpret(graph: Graph, inputs: Sequence[torch.Tensor]) -> dict[str, torch.Tensor]:
    """Every value of `graph` (inputs included) computed with plain torch ops, by name."""
    return Interpreter(graph, inputs).run()


def run(graph: Graph, inputs: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """The graph's outputs, in order."""
    values = interpret(graph, inputs)
    return tuple(values[name] for name in graph.outputs)
