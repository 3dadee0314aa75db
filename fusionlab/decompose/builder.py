"""The Builder that decomposition rules call: it appends primitive nodes (pointwise, reduction, view) with
PyTorch's type promotion and broadcasting made explicit, and shares common subexpressions.

    >>> b = Builder([], {"x": TensorType((4, 8), torch.float32)})
    >>> b.pointwise("add", Ref("x"), 1.0)
    Ref(name='add')
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch
import torch.utils._pytree as pytree

from fusionlab.decompose import hoist, split
from fusionlab.decompose.primitives import POINTWISE
from fusionlab.ir import Arg, Dim, Node, Ref, Scalar, TensorType, static_value
from fusionlab.names import sanitize

Rule = Callable[..., Any]


class RuleNotApplicable(Exception):
    """A rule met arguments it does not handle: the op runs as an extern op instead."""


# The dtypes a generated kernel loads, computes and stores (complex, unsigned and float8 values run as extern ops).
KERNEL_DTYPES = frozenset({torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32,
                           torch.int16, torch.int8, torch.uint8, torch.bool})


# Integer ops that divide: a zero divisor raises in eager PyTorch.
INTEGER_DIVISIONS = frozenset({"floor_divide", "remainder", "fmod"})


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Half-precision values are computed in float32 and stored in their own dtype."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _broadcast_shape(shapes: Sequence[tuple[Dim, ...]]) -> tuple[Dim, ...]:
    rank = max((len(s) for s in shapes), default=0)
    result: list[Dim] = [1] * rank
    for shape in shapes:
        padded = (1,) * (rank - len(shape)) + tuple(shape)
        for i, dim in enumerate(padded):
            if dim != 1:
                if result[i] != 1 and result[i] != dim:
                    raise RuleNotApplicable(f"shapes {shapes} do not broadcast")
                result[i] = dim
    return tuple(result)


def _check_number(value: Any, what: str) -> None:
    if isinstance(value, sympy.Basic) or not isinstance(value, (bool, int, float)):
        raise RuleNotApplicable(f"{what} {value!r} is not a Python number (a symbolic size or a tensor)")


def short_name(target: Any) -> str:
    """`aten.addmm` for `torch.ops.aten.addmm.default`'s packet; a function's own name otherwise."""
    name = getattr(target, "__name__", str(target))
    namespace = getattr(target, "namespace", None)
    return f"{namespace}.{name}" if namespace else name


@dataclass
class Builder:
    """Appends primitive nodes; rules call its verbs. `expected` is the aten node's own output type."""

    nodes: list[Node]
    types: dict[str, TensorType]
    origin: str = ""
    module: str = ""  # the origin's module path and source line, copied onto every node a rule appends
    source: str = ""
    expected: Any = None
    node: Any = None  # the aten (torch.fx) node being decomposed: a rule may look at its users
    _counts: dict[str, int] | None = None
    _seen: dict[Any, Ref] = field(default_factory=dict)
    _producers: dict[str, Node] = field(default_factory=dict)  # a value's name -> the node that computes it
    _hoisted: dict[Any, Ref | None] = field(default_factory=dict)  # hoist.py's walks, each value and shape once

    def type_of(self, value: Ref) -> TensorType:
        return self.types[value.name]

    def _add(self, kind: str, op: str, args: tuple[Arg, ...], out: TensorType,
             params: dict[str, Any] | None = None, base: str | None = None) -> Ref:
        if kind in ("pointwise", "reduction"):
            for dtype in [out.dtype] + [self.types[a.name].dtype for a in args if isinstance(a, Ref)]:
                if dtype not in KERNEL_DTYPES:
                    raise RuleNotApplicable(f"kernels do not compute on {dtype} values")
        key: tuple[Any, ...] | None = (kind, op, args, tuple(sorted((params or {}).items())), out)
        if kind in ("pointwise", "reduction", "view", "matmul"):
            try:
                existing = self._seen.get(key)
            except TypeError:  # an unhashable parameter: no sharing
                existing, key = None, None
            if existing is not None:
                return existing  # common subexpression: `x + r` written twice is computed once
        counts = self._counts if self._counts is not None else {}
        self._counts = counts
        base = base or (op if op.isidentifier() else sanitize(op.split(".")[1] if op.count(".") >= 1 else op))
        number = counts.get(base, 0)
        counts[base] = number + 1
        name = base if number == 0 else f"{base}_{number}"
        while name in self.types:
            number += 1
            counts[base] = number + 1
            name = f"{base}_{number}"
        node = Node(name, kind, op, args, out, tuple(sorted((params or {}).items())),  # type: ignore[arg-type]
                    self.origin, self.module, self.source)
        self.nodes.append(node)
        self.types[name] = out
        self._producers[name] = node
        if kind in ("pointwise", "reduction", "view", "matmul") and key is not None:
            self._seen[key] = Ref(name)
        return Ref(name)

    def producer(self, value: Ref) -> Node | None:
        """The node that computes `value` (None for a value from outside this builder)."""
        return self._producers.get(value.name)

    def extern(self, target: Any, args: Any, kwargs: Any, reason: str, out: TensorType | None = None) -> Any:
        """`target(*args, **kwargs)` run by PyTorch between kernels, with the aten node's output type(s) (or `out`);
        `reason` says why in every view."""
        expected = out or self.expected
        params = {"target": target, "call": (args, kwargs), "reason": reason,
                  "extra_refs": tuple(r.name for r in pytree.tree_leaves((args, kwargs)) if isinstance(r, Ref))}
        op = short_name(target)
        if isinstance(expected, tuple):
            first = next((e for e in expected if e is not None), None)
            if first is None:
                raise RuleNotApplicable(f"{op} returns no tensors")
            packed = self._add("extern", op, (), first, params | {"outputs": len(expected)})
            results = [packed]
            for index, item in enumerate(expected[1:], start=1):
                if item is None:
                    results.append(None)  # type: ignore[arg-type]
                    continue
                results.append(self._add("view", "output_of", (packed,), item, {"index": index}))
            return tuple(results)
        if expected is None:
            raise RuleNotApplicable(f"{op} returns no tensor")
        return self._add("extern", op, (), expected, params)

    # -- pointwise ---------------------------------------------------------------------------------
    def result_dtype(self, *operands: Arg) -> torch.dtype:
        examples: list[Any] = []
        for operand in operands:
            if isinstance(operand, Ref):
                examples.append(torch.empty(1, dtype=self.type_of(operand).dtype))
            elif operand is not None:
                examples.append(operand)
        result = examples[0] if len(examples) == 1 and isinstance(examples[0], torch.Tensor) else None
        if result is not None:
            return result.dtype
        dtype = torch.result_type(examples[0], examples[1]) if len(examples) > 1 else torch.float32
        for extra in examples[2:]:
            dtype = torch.promote_types(dtype, torch.result_type(torch.empty(1, dtype=dtype), extra))
        return dtype

    def pointwise(self, op: str, *operands: Arg, dtype: torch.dtype | None = None) -> Ref:
        """`op` over broadcast operands, computed in their common dtype; returns a value of `dtype`."""
        primitive = POINTWISE[op]
        if any(isinstance(o, sympy.Basic) for o in operands):
            raise RuleNotApplicable("an operand is a symbolic size (a dynamic shape used as a number)")
        if len(operands) != primitive.arity:
            raise RuleNotApplicable(f"{op} takes {primitive.arity} operands, got {len(operands)}")
        data = operands[1:] if op == "where" else operands
        common = self.result_dtype(*data)
        if op in INTEGER_DIVISIONS and not (common.is_floating_point or common.is_complex):
            divisor = operands[1]
            if isinstance(divisor, Ref) or not divisor:
                # Eager raises ZeroDivisionError for an integer division by zero; a kernel cannot raise, and would
                # return whatever the hardware gives. A divisor that is a tensor (or zero) runs eagerly instead.
                raise RuleNotApplicable(f"integer {op} by {'a tensor' if isinstance(divisor, Ref) else divisor}: "
                                        "a zero divisor must raise ZeroDivisionError, as eager does")
        if primitive.returns_bool:
            out_dtype = torch.bool
        else:
            out_dtype = dtype or common
        if common == torch.bool and op == "add":
            common = torch.int8  # True + True is True in eager; a 1-bit add would wrap to False
        shape = _broadcast_shape([self.type_of(o).shape for o in operands if isinstance(o, Ref)])
        prepared: list[Arg] = []
        for index, operand in enumerate(operands):
            if isinstance(operand, Ref):
                target = torch.bool if (op == "where" and index == 0) else common
                operand = self.broadcast(self.cast(operand, target), shape)
            prepared.append(operand)
        node_dtype = torch.bool if primitive.returns_bool else common
        result = self._add("pointwise", op, tuple(prepared), TensorType(shape, node_dtype))
        return self.cast(result, out_dtype)

    def cast(self, value: Ref, dtype: torch.dtype) -> Ref:
        current = self.type_of(value)
        if current.dtype == dtype:
            return value
        return self._add("pointwise", "cast", (value,), current.with_dtype(dtype), {"dtype": dtype})

    def constant(self, value: Scalar, dtype: torch.dtype) -> Ref:
        """A 0-d constant: a pointwise copy of a literal, broadcast (index arithmetic) where it is used."""
        return self._add("pointwise", "copy", (value,), TensorType((), dtype))

    def full(self, value: Scalar, like: Ref, dtype: torch.dtype | None = None) -> Ref:
        """A constant of `like`'s shape (`like`'s values are not read)."""
        return self.fill(self.type_of(like).shape, value, dtype or self.type_of(like).dtype)

    # -- values computed from an element's index (primitives.INDEXED) --------------------------------
    def fill(self, shape: Sequence[Dim], value: Scalar, dtype: torch.dtype) -> Ref:
        """A constant tensor: `full(value=...)`, computed where it is used (no operand, nothing loaded)."""
        _check_number(value, "a fill value")
        if dtype not in KERNEL_DTYPES:
            raise RuleNotApplicable(f"kernels do not compute on {dtype} values")
        if not dtype.is_floating_point and isinstance(value, float) and value == value \
                and value not in (float("inf"), float("-inf")):
            value = bool(value) if dtype == torch.bool else int(value)  # as torch.full(..., 2.7, dtype=int64): 2
        if dtype in (torch.bfloat16, torch.float16) and isinstance(value, (int, float)) and not isinstance(value, bool):
            value = float(torch.tensor(float(value), dtype=dtype))  # the tensor holds the rounded value: 1000.3 -> 1000
        return self._add("pointwise", "full", (), TensorType(tuple(shape), dtype), {"value": value})

    def iota(self, shape: Sequence[Dim], dim: int, dtype: torch.dtype, start: Any = 0, step: Any = 1) -> Ref:
        """`start + step * i`, i the element's index along `dim`: `arange` in a kernel (nothing loaded).

            >>> b.iota((4,), 0, torch.int64)   # arange(4)
        """
        _check_number(step, "an iota step")
        if isinstance(start, sympy.Expr) and start.is_number:
            start = int(start)
        if not isinstance(start, (int, float, sympy.Expr)) or isinstance(start, bool):
            raise RuleNotApplicable(f"iota start {start!r} is not a number")
        if dtype not in KERNEL_DTYPES or dtype == torch.bool:
            raise RuleNotApplicable(f"an index-valued tensor of {dtype}")
        params = {"dim": dim % max(len(shape), 1), "start": start, "step": step}
        if dtype in (torch.bfloat16, torch.float16):  # computed in float32, then rounded as the tensor would be
            wide = self._add("pointwise", "iota", (), TensorType(tuple(shape), torch.float32), params)
            return self.cast(wide, dtype)
        return self._add("pointwise", "iota", (), TensorType(tuple(shape), dtype), params)

    def index(self, table: Ref, indices: Sequence[Ref], dim: int, shape: Sequence[Dim], wrap: bool) -> Ref:
        """`table[:, ..., i_0, ..., i_K-1, ...]` with the K index tensors on dims dim..dim+K-1 (adjacent), giving
        `shape` = table.shape[:dim] + the indices' broadcast shape + table.shape[dim+K:]. Each index tensor is
        broadcast to `shape` here (a pointwise read); the table is read at computed positions, whole from memory.
        `wrap`: a negative index counts from the end (aten.index); else it is out of range (embedding, gather)."""
        table_type = self.type_of(table)
        if table_type.dtype not in KERNEL_DTYPES:
            raise RuleNotApplicable(f"kernels do not compute on {table_type.dtype} values")
        operands: list[Arg] = [table]
        for index in indices:
            index_type = self.type_of(index)
            if index_type.dtype not in (torch.int64, torch.int32):
                raise RuleNotApplicable(f"an index tensor of {index_type.dtype} (int64 or int32 indices are read in "
                                        "a kernel; a bool mask gives a data-dependent shape)")
            operands.append(self.broadcast(index, tuple(shape)))
        hoisted = hoist.gathered(self, table, operands[1:], dim, tuple(shape), wrap)  # type: ignore[arg-type]
        if hoisted is not None:  # gathered from what the table is computed from (decompose/hoist.py)
            return hoisted
        return self._add("pointwise", "index", tuple(operands), TensorType(tuple(shape), table_type.dtype),
                         {"dim": dim, "wrap": wrap})

    def checked(self, index: Ref, size: Dim) -> Ref:
        """`index`, asserted to lie in [0, size) where it is used (an out-of-range index raises in eager)."""
        return self._add("pointwise", "checked", (index,), self.type_of(index), {"size": size})

    def pad(self, value: Ref, before: Sequence[int], after: Sequence[int], fill: Scalar) -> Ref:
        """`value` with `before[d]` elements of `fill` ahead of it along each dim d and `after[d]` behind it
        (negative amounts crop): a masked read."""
        _check_number(fill, "a pad value")
        current = self.type_of(value)
        shape = tuple(size + low + high for size, low, high in zip(current.shape, before, after))
        return self._add("pointwise", "pad", (value,), TensorType(shape, current.dtype),
                         {"before": tuple(before), "value": fill})

    def roll(self, value: Ref, shifts: Sequence[int], dims: Sequence[int]) -> Ref:
        """`torch.roll`: element i along each dim d comes from (i - shifts[d]) mod size."""
        current = self.type_of(value)
        return self._add("pointwise", "roll", (value,), current, {"shifts": tuple(shifts), "dims": tuple(dims)})

    # -- views -------------------------------------------------------------------------------------
    def reshape(self, value: Ref, shape: Sequence[Dim]) -> Ref:
        current = self.type_of(value)
        if tuple(current.shape) == tuple(shape):
            return value
        producer = self.producer(value)
        if producer is not None and producer.op == "reshape":  # a reshape of a reshape: one reshape of its input
            return self.reshape(producer.args[0], shape)  # type: ignore[arg-type]
        return self._add("view", "reshape", (value,), TensorType(tuple(shape), current.dtype),
                         {"shape": tuple(shape)})

    def broadcast(self, value: Ref, shape: tuple[Dim, ...]) -> Ref:
        current = self.type_of(value)
        if tuple(current.shape) == shape:
            return value
        padded = (1,) * (len(shape) - current.rank) + tuple(current.shape)
        value = self.reshape(value, padded)
        if padded == shape:
            return value
        return self._add("view", "expand", (value,), TensorType(shape, current.dtype), {"shape": shape})

    def view(self, op: str, value: Ref, out_shape: tuple[Dim, ...], **params: Any) -> Ref:
        current = self.type_of(value)
        return self._add("view", op, (value,), TensorType(out_shape, current.dtype), params)

    # -- reductions --------------------------------------------------------------------------------
    def reduce(self, op: str, value: Ref, axes: Sequence[int], keepdim: bool,
               dtype: torch.dtype | None = None) -> Ref:
        current = self.type_of(value)
        rank = current.rank
        axes = tuple(sorted({a % rank for a in axes})) if rank else ()
        if not axes:
            if rank == 0:
                return self.pointwise("copy", value) if op not in ("argmax", "argmin") else self.full(0, value,
                                                                                                    torch.int64)
            axes = tuple(range(rank))
        if dtype is not None:
            value = self.cast(value, dtype)
            current = self.type_of(value)
        if op in ("sum", "prod") and dtype is None and not current.dtype.is_floating_point \
                and not current.dtype.is_complex:
            value = self.cast(value, torch.int64)
            current = self.type_of(value)
        shape = tuple((1 if i in axes else d) for i, d in enumerate(current.shape) if keepdim or i not in axes)
        out_dtype = torch.int64 if op in ("argmax", "argmin") else current.dtype
        plan = self.split_plan(value, axes, op)
        if plan is not None:
            return self._split_reduce(op, value, plan, shape)
        return self._add("reduction", op, (value,), TensorType(shape, out_dtype),
                         {"axes": axes, "keepdim": keepdim})

    def split_plan(self, value: Ref, axes: Sequence[int], op: str = "sum") -> split.SplitPlan | None:
        """How a reduction of `value` over `axes` is split in two (decompose/split.py), or None."""
        static = tuple(static_value(d) for d in self.type_of(value).shape)
        rank = len(static)
        axes = tuple(sorted({a % rank for a in axes})) if axes else tuple(range(rank))
        return split.plan_split(static, axes, op) if None not in static else None  # type: ignore[arg-type]

    def partial(self, op: str, value: Ref, axes: tuple[int, ...]) -> Ref:
        """The first of a split reduction's two (`{op}_partial`, dims kept): never split again."""
        shape = tuple(1 if i in axes else d for i, d in enumerate(self.type_of(value).shape))
        return self._add("reduction", op, (value,), TensorType(shape, self.type_of(value).dtype),
                         {"axes": axes, "keepdim": True}, base=f"{op}_partial")

    def _split_reduce(self, op: str, value: Ref, plan: split.SplitPlan, shape: tuple[Dim, ...]) -> Ref:
        """A reduction as two (decompose/split.py): partial values over `plan.first`, then over `plan.second`. The
        partial values of a half-precision sum, mean or product are float32, as one kernel's accumulator is."""
        dtype = self.type_of(value).dtype
        if op in ("sum", "mean", "prod"):
            value = self.cast(value, compute_dtype(dtype))
        value = hoist.reshaped(self, value, plan.shape)  # a reshape would keep a pointwise producer out of the kernel
        partial = self.partial(op, value, plan.first)
        total = self.reduce(op, partial, plan.second, keepdim=True)
        return self.cast(self.reshape(total, shape), dtype)

    def reduced_numel(self, value: Ref, axes: Sequence[int]) -> int:
        shape = self.type_of(value).shape
        count: Any = 1
        for axis in ({a % len(shape) for a in axes} if axes else range(len(shape))):
            count = count * shape[axis]
        if not isinstance(count, int) and not getattr(count, "is_number", False):
            raise RuleNotApplicable("the reduced size is symbolic")
        return int(count)
