"""fusionlab's intermediate representation: typed, immutable values and nodes.

A `Graph` is a flat SSA program of `Node`s. Shapes hold ints or sympy expressions (symbolic sizes when
`dynamic=True`). Nodes never carry a free-form meta dict: every field is typed.

    >>> TensorType((4, 8), torch.float32).numel
    32
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Union

import sympy
import torch

Dim = Union[int, sympy.Expr]
Kind = Literal["input", "pointwise", "reduction", "view", "matmul", "extern"]


def dtype_name(dtype: torch.dtype) -> str:
    """`torch.float32` -> "float32"."""
    return str(dtype).removeprefix("torch.")


def dim_text(dim: Dim) -> str:
    return str(dim)


def is_static(dim: Dim) -> bool:
    return isinstance(dim, int) or (isinstance(dim, sympy.Expr) and dim.is_number)


def static_value(dim: Dim) -> int | None:
    if isinstance(dim, int):
        return dim
    if dim.is_number:
        return int(dim)
    return None


def product(dims: tuple[Dim, ...]) -> Dim:
    result: Dim = 1
    for dim in dims:
        result = result * dim
    if isinstance(result, sympy.Expr) and result.is_number:
        return int(result)
    return result


def contiguous_strides(shape: tuple[Dim, ...]) -> tuple[Dim, ...]:
    strides: list[Dim] = []
    running: Dim = 1
    for dim in reversed(shape):
        strides.append(running)
        running = product((running, dim))
    return tuple(reversed(strides))


def channels_last_strides(shape: tuple[Dim, ...]) -> tuple[Dim, ...]:
    """The strides of a 4-D [N, C, H, W] value stored in NHWC order."""
    _, c, h, w = shape
    return (product((h, w, c)), 1, product((w, c)), c)


def is_channels_last(value: TensorType) -> bool:
    """Typed dense in NHWC order, and not merely because its sizes make NHWC and row-major the same strides (a
    convolution's result in channels-last: decompose/layout.py). Sizes may be symbolic."""
    return value.rank == 4 and value.strides is not None \
        and tuple(value.strides) == tuple(channels_last_strides(value.shape)) \
        and tuple(value.strides) != tuple(contiguous_strides(value.shape))


def unique_names(taken: Iterable[str]) -> Callable[[str], str]:
    """A maker of names none of `taken` has: given `base`, it returns `base`, else the first of `base_1`, `base_2`,
    ... not taken yet, and counts what it returns as taken (new nodes added to a graph get names of their own)."""
    names = set(taken)

    def unique(base: str) -> str:
        name, number = base, 1
        while name in names:
            name, number = f"{base}_{number}", number + 1
        names.add(name)
        return name

    return unique


@dataclass(frozen=True)
class TensorType:
    """Shape (ints or sympy expressions), dtype, and strides where they are known (graph inputs, externs)."""

    shape: tuple[Dim, ...]
    dtype: torch.dtype
    strides: tuple[Dim, ...] | None = None

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> Dim:
        return product(self.shape)

    @property
    def itemsize(self) -> int:
        return torch.empty((), dtype=self.dtype).element_size()

    @property
    def is_static(self) -> bool:
        return all(is_static(d) for d in self.shape)

    def nbytes(self, sizes: dict[sympy.Symbol, int] | None = None) -> int:
        """Bytes of the whole tensor, with symbolic sizes substituted from `sizes` (or their capture values)."""
        numel = self.numel
        if isinstance(numel, sympy.Expr):
            numel = int(numel.subs(sizes or {}))
        return int(numel) * self.itemsize

    def text(self) -> str:
        return f"{dtype_name(self.dtype)}[{', '.join(dim_text(d) for d in self.shape)}]"

    def with_dtype(self, dtype: torch.dtype) -> TensorType:
        return TensorType(self.shape, dtype)


@dataclass(frozen=True)
class Ref:
    """A use of the value named `name` inside a node's arguments."""

    name: str

    def __str__(self) -> str:
        return self.name


Scalar = Union[bool, int, float]
Arg = Union[Ref, Scalar, None]


@dataclass(frozen=True)
class Node:
    """One operation: a graph input, a primitive (pointwise, reduction, view, matmul) or an extern op.

    `op` names the primitive ("add", "sum", "permute", ...) or, for extern nodes, the aten op.
    `params` holds the op's static parameters as sorted (key, value) pairs; `origin` is the captured aten
    node it was decomposed from, `module` the dotted path of the module that called it
    ("transformer.h.0.attn.c_attn", "" at the top level) and `source` the user's line ("model.py:12 in forward").
    """

    name: str
    kind: Kind
    op: str
    args: tuple[Arg, ...]
    type: TensorType
    params: tuple[tuple[str, Any], ...] = ()
    origin: str = ""
    module: str = ""
    source: str = ""

    @property
    def where(self) -> str:
        """Where the node came from: "h.0.attn (model.py:12 in forward)"; "" when unknown."""
        return where_text(self.module, self.source)

    def param(self, key: str, default: Any = None) -> Any:
        for name, value in self.params:
            if name == key:
                return value
        return default

    @property
    def inputs(self) -> tuple[str, ...]:
        """Names of the values this node reads, in order, without repeats."""
        seen: dict[str, None] = {}
        for arg in self.args:
            if isinstance(arg, Ref):
                seen[arg.name] = None
        for ref in self.param("extra_refs", ()):
            seen[ref] = None
        return tuple(seen)

    def text(self) -> str:
        items = [_arg_text(a) for a in self.args]
        items += [f"{k}={_param_text(v)}" for k, v in self.params if k != "extra_refs"]
        return f"{self.name}: {self.type.text()} = {self.op}({', '.join(items)})"


def draws_random_numbers(node: Node) -> bool:
    """An extern op tagged nondeterministic_seeded (bernoulli, rand, randn, ...): it draws from the generator, so
    it runs in program order and is never dropped, as eager draws it."""
    target = node.param("target") if node.kind == "extern" else None
    return torch.Tag.nondeterministic_seeded in getattr(target, "tags", ())


def where_text(module: str, source: str) -> str:
    """A module path and a source line as one phrase: "h.0.attn (model.py:12 in forward)", "model.py:12 in f",
    "h.0.attn", or "" when neither is known."""
    if module and source:
        return f"{module} ({source})"
    return module or source


def _arg_text(arg: Arg) -> str:
    return str(arg) if isinstance(arg, Ref) else repr(arg)


def _param_text(value: Any) -> str:
    if isinstance(value, torch.dtype):
        return dtype_name(value)
    return repr(value)


@dataclass(frozen=True)
class Graph:
    """A flat program: `inputs` and `outputs` name values; `nodes` are in topological order."""

    inputs: tuple[str, ...]
    nodes: tuple[Node, ...]
    outputs: tuple[str, ...]
    hints: tuple[tuple[sympy.Symbol, int], ...] = ()  # captured values of symbolic sizes
    _index: dict[str, Node] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self._index.update({node.name: node for node in self.nodes})

    def __getitem__(self, name: str) -> Node:
        return self._index[name]

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def nbytes(self, name: str) -> int:
        """Bytes of value `name`, with symbolic sizes at their captured values."""
        return self[name].type.nbytes(dict(self.hints))

    def users(self) -> dict[str, tuple[str, ...]]:
        """For each value, the nodes that read it (in program order)."""
        users: dict[str, list[str]] = {node.name: [] for node in self.nodes}
        for node in self.nodes:
            for name in node.inputs:
                users[name].append(node.name)
        return {name: tuple(found) for name, found in users.items()}

    def text(self) -> str:
        lines = [f"def program({', '.join(self.inputs)}):"]
        for node in self.nodes:
            if node.kind == "input":
                continue
            tag = "  # extern" if node.kind == "extern" else ""
            lines.append(f"    {node.text()}{tag}")
        lines.append(f"    return ({', '.join(self.outputs)}{',' if len(self.outputs) == 1 else ''})")
        return "\n".join(lines)
