"""What capture hands on: the traced graph with its types, inputs, mutations and guards.

    >>> result = capture(torch.sigmoid, (torch.randn(4),), {})
    >>> result.inputs[0].kind
    'input'
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch
import torch.utils._pytree as pytree

from fusionlab.capture.state import StateSource
from fusionlab.ir import TensorType


class CaptureError(ValueError):
    """The function or its inputs cannot be captured; the message says why and what to do."""


TENSOR_SLOT = type("TensorSlot", (), {"__repr__": lambda self: "<tensor>"})()


class ObjectSlot:
    """An output that is neither a tensor nor a pytree container (a transformers `DynamicCache`): the object as
    traced, and the tensors it holds. Each call returns a copy of it holding that call's tensors."""

    def __init__(self, obj: Any, tensors: list[torch.Tensor]) -> None:
        self.obj = obj
        self.tensors = tensors  # the traced tensors inside `obj`, in the order the program returns them

    def __repr__(self) -> str:
        return f"<{type(self.obj).__name__} of {len(self.tensors)} tensors>"

    def rebuild(self, values: list[torch.Tensor]) -> Any:
        memo: dict[int, Any] = {id(traced): value for traced, value in zip(self.tensors, values)}
        return copy.deepcopy(self.obj, memo)


def tensors_inside(obj: Any, found: dict[int, torch.Tensor] | None = None, depth: int = 0) -> list[torch.Tensor]:
    """The tensors an object holds in its attributes, lists, tuples and dicts (each once, in order found)."""
    found = {} if found is None else found
    if isinstance(obj, torch.Tensor):
        found.setdefault(id(obj), obj)
    elif depth < 8 and isinstance(obj, (list, tuple, set, frozenset)):
        for item in obj:
            tensors_inside(item, found, depth + 1)
    elif depth < 8 and isinstance(obj, dict):
        for item in obj.values():
            tensors_inside(item, found, depth + 1)
    elif depth < 8 and hasattr(obj, "__dict__") and not isinstance(obj, (type, torch.nn.Module)):
        for item in vars(obj).values():
            tensors_inside(item, found, depth + 1)
    return list(found.values())


def fill_template(template: tuple[Any, ...], outputs: Iterator[torch.Tensor]) -> list[Any]:
    """The output leaves of one call: `template` with each slot filled from `outputs` in order."""
    leaves: list[Any] = []
    for slot in template:
        if slot is TENSOR_SLOT:
            leaves.append(next(outputs))
        elif isinstance(slot, ObjectSlot):
            leaves.append(slot.rebuild([next(outputs) for _ in slot.tensors]))
        else:
            leaves.append(slot)
    return leaves


def output_values(graph_module: torch.fx.GraphModule) -> list[Any]:
    """The traced value (`meta["val"]`) of each leaf its output node returns, in order; None for a leaf that is no
    node (a None output). Eager's strides of the outputs are read from them."""
    output = next(n for n in reversed(graph_module.graph.nodes) if n.op == "output")
    return [leaf.meta.get("val") if isinstance(leaf, torch.fx.Node) else None
            for leaf in pytree.tree_leaves(output.args[0])]


def strides_of(value: Any) -> tuple[int, ...] | None:
    """A traced tensor's strides; None for anything else, or when one of them is symbolic."""
    if isinstance(value, torch.Tensor) and all(isinstance(s, int) for s in value.stride()):
        return tuple(value.stride())
    return None


@dataclass(frozen=True)
class InputSpec:
    """A graph input: a user tensor ("input"), a module parameter or a buffer."""

    name: str
    kind: str
    type: TensorType
    placeholder: str
    device: str


@dataclass(frozen=True)
class AtenNode:
    """One call in the captured graph, as the views show it."""

    name: str
    target: str
    type: TensorType | None
    args_text: str
    decomposed_from: str | None = None  # the aten op a capture decomposition replaced ("aten.gelu_backward")
    module: str = ""  # dotted module path from the model root ("transformer.h.0.attn.c_attn"); "" at the top level
    source: str = ""  # the user's source line, "modeling_gpt2.py:123 in forward"; "" when unknown


@dataclass(frozen=True)
class SymbolBinding:
    """Where a symbolic size comes from at run time: dimension `dim` of graph input `input_index`."""

    symbol: sympy.Symbol
    input_index: int
    dim: int
    captured_value: int


@dataclass(frozen=True)
class Mutation:
    """The function writes graph input `input_index` (a user tensor or a buffer): the program returns the new value
    as graph output `output_index`, and the caller copies it back into the tensor, as eager would have."""

    input_index: int
    output_index: int
    name: str


@dataclass(frozen=True)
class Guard:
    """A condition on the dynamic sizes that tracing relied on (`s0 > 4` from `if a.shape[0] > 4:`): the program
    is only valid where it holds, so every call checks it."""

    expr: sympy.Basic
    source: str  # the user's line that made tracing rely on it, where it could be found


@dataclass(frozen=True)
class CaptureResult:
    graph_module: torch.fx.GraphModule
    inputs: tuple[InputSpec, ...]
    aten_nodes: tuple[AtenNode, ...]
    types: dict[str, TensorType]
    multi_types: dict[str, tuple[TensorType | None, ...]]
    output_spec: pytree.TreeSpec
    output_template: tuple[Any, ...]  # TENSOR_SLOT where a tensor goes, ObjectSlot for an object holding tensors;
    # other leaves (None outputs) as they are
    constant_leaves: tuple[tuple[int, Any], ...]
    input_spec: pytree.TreeSpec
    symbols: tuple[SymbolBinding, ...]
    module: torch.nn.Module | None
    state: StateSource = None  # type: ignore[assignment]
    mutations: tuple[Mutation, ...] = ()
    guards: tuple[Guard, ...] = ()
    user_outputs: int = 0  # graph outputs the user's function returns; the mutated values follow them
    sizes: dict[str, Any] = field(default_factory=dict)  # a size computation's node -> its value (int or sympy)
    call_flat: Callable[..., list[torch.Tensor]] | None = None  # the user's function on flat graph inputs (eager)
