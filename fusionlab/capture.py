"""Capture: a function or nn.Module plus example inputs -> an aten-level torch.fx graph with types.

Parameters and buffers become graph inputs; Python scalars and keyword arguments are specialised into the
graph (calling with other values is an error that says so). With `dynamic=True` the leading dimension of
every tensor argument is symbolic; all other sizes are fixed at their captured values.

    >>> result = capture(torch.nn.functional.gelu, (torch.randn(4, 8),), {})
    >>> [spec.name for spec in result.inputs]
    ['input']
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sympy
import torch
import torch.fx.experimental._config as fx_config
import torch.utils._pytree as pytree
from torch.fx.experimental.proxy_tensor import make_fx

from fusionlab.ir import Dim, TensorType


class CaptureError(ValueError):
    """The function or its inputs cannot be captured; the message says why and what to do."""


TENSOR_SLOT = type("TensorSlot", (), {"__repr__": lambda self: "<tensor>"})()


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


@dataclass(frozen=True)
class SymbolBinding:
    """Where a symbolic size comes from at run time: dimension `dim` of graph input `input_index`."""

    symbol: sympy.Symbol
    input_index: int
    dim: int
    captured_value: int


@dataclass(frozen=True)
class CaptureResult:
    graph_module: torch.fx.GraphModule
    inputs: tuple[InputSpec, ...]
    aten_nodes: tuple[AtenNode, ...]
    types: dict[str, TensorType]
    multi_types: dict[str, tuple[TensorType | None, ...]]
    output_spec: pytree.TreeSpec
    output_template: tuple[Any, ...]  # TENSOR_SLOT where a tensor goes; other leaves (None outputs) as they are
    constant_leaves: tuple[tuple[int, Any], ...]
    input_spec: pytree.TreeSpec
    symbols: tuple[SymbolBinding, ...]
    module: torch.nn.Module | None


def _target_name(target: Any) -> str:
    if isinstance(target, torch._ops.OpOverload):
        return f"aten.{target.__name__}" if target.namespace == "aten" else str(target)
    return getattr(target, "__name__", str(target))


def _signature_names(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[str]:
    """A readable name for each flattened leaf of (args, kwargs): the parameter it binds to."""
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
        named: dict[str, Any] = dict(bound.arguments)
    except (TypeError, ValueError):
        named = {f"arg{i}": a for i, a in enumerate(args)} | dict(kwargs)
    names: list[str] = []
    for key, value in named.items():
        leaves = pytree.tree_leaves(value)
        names.extend([key] if len(leaves) == 1 else [f"{key}_{i}" for i in range(len(leaves))])
    return names


def capture(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
            dynamic: bool = False) -> CaptureResult:
    """Trace `fn(*args, **kwargs)` to aten ops (functionalized: no in-place ops remain)."""
    module = fn if isinstance(fn, torch.nn.Module) else None
    state: dict[str, torch.Tensor] = {}
    state_kinds: dict[str, str] = {}
    if module is not None:
        for name, param in module.named_parameters():
            state[name], state_kinds[name] = param.detach(), "parameter"
        for name, buffer in module.named_buffers():
            state[name], state_kinds[name] = buffer, "buffer"
        call_target: Callable[..., Any] = module.forward
    else:
        call_target = fn

    leaves, input_spec = pytree.tree_flatten((args, kwargs))
    leaf_names = _signature_names(call_target, args, kwargs)
    if len(leaf_names) != len(leaves):
        leaf_names = [f"arg{i}" for i in range(len(leaves))]
    tensor_positions = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    constants = tuple((i, leaf) for i, leaf in enumerate(leaves) if not isinstance(leaf, torch.Tensor))
    for i, leaf in constants:
        if leaf is not None and not isinstance(leaf, (bool, int, float, str, torch.dtype, torch.device)):
            raise CaptureError(f"argument {leaf_names[i]!r} is a {type(leaf).__name__}; fusionlab captures "
                               "tensors and Python scalars: pass tensors (or lists of tensors) instead")
    if not tensor_positions and not state:
        raise CaptureError("no tensor among the example inputs: pass at least one torch.Tensor")
    state_names = list(state)

    def traced(*flat: torch.Tensor) -> list[torch.Tensor]:
        state_values = dict(zip(state_names, flat[: len(state_names)]))
        all_leaves = list(leaves)
        for position, tensor in zip(tensor_positions, flat[len(state_names):]):
            all_leaves[position] = tensor
        call_args, call_kwargs = pytree.tree_unflatten(all_leaves, input_spec)
        if module is not None:
            result = torch.func.functional_call(module, state_values, call_args, call_kwargs)
        else:
            result = fn(*call_args, **call_kwargs)
        outputs, spec = pytree.tree_flatten(result)
        holder["spec"] = spec
        for i, out in enumerate(outputs):
            if out is not None and not isinstance(out, torch.Tensor):
                raise CaptureError(f"output {i} is a {type(out).__name__}; fusionlab needs every output "
                                   "to be a tensor (or None): return tensors only")
        holder["template"] = [TENSOR_SLOT if isinstance(o, torch.Tensor) else o for o in outputs]
        return [o for o in outputs if isinstance(o, torch.Tensor)]

    holder: dict[str, Any] = {}
    example = [*state.values(), *(leaves[i] for i in tensor_positions)]
    try:
        with torch.no_grad(), fx_config.patch(use_duck_shape=False):  # type: ignore[attr-defined]
            # In-place ops stay in the graph (functionalize would lose symbolic sizes); decompose rebinds them.
            graph_module = make_fx(traced, tracing_mode="symbolic" if dynamic else "fake")(*example)
    except CaptureError:
        raise
    except Exception as error:  # noqa: BLE001 - re-raised with context
        raise CaptureError(f"could not trace {getattr(fn, '__name__', type(fn).__name__)}: "
                           f"{type(error).__name__}: {error}") from error

    placeholders = [n for n in graph_module.graph.nodes if n.op == "placeholder"]
    kinds = [state_kinds[n] for n in state_names] + ["input"] * len(tensor_positions)
    display = state_names + [leaf_names[i] for i in tensor_positions]
    substitution, symbols = _symbol_plan(placeholders, kinds, dynamic)

    types: dict[str, TensorType] = {}
    multi_types: dict[str, tuple[TensorType | None, ...]] = {}
    for node in graph_module.graph.nodes:
        value = node.meta.get("val")
        if isinstance(value, torch.Tensor):
            types[node.name] = _tensor_type(value, substitution)
        elif isinstance(value, (list, tuple)):
            multi_types[node.name] = tuple(_tensor_type(v, substitution) if isinstance(v, torch.Tensor) else None
                                           for v in value)

    inputs = tuple(
        InputSpec(name=name, kind=kind, type=types[node.name], placeholder=node.name,
                  device=str(tensor.device))
        for name, kind, node, tensor in zip(display, kinds, placeholders, example)
    )
    aten_nodes = tuple(
        AtenNode(node.name, _target_name(node.target), types.get(node.name),
                 ", ".join(str(a) for a in node.args))
        for node in graph_module.graph.nodes if node.op == "call_function"
    )
    return CaptureResult(graph_module, inputs, aten_nodes, types, multi_types, holder["spec"],
                         tuple(holder["template"]), constants, input_spec, symbols, module)


def _symbol_plan(placeholders: list[torch.fx.Node], kinds: list[str],
                 dynamic: bool) -> tuple[dict[sympy.Symbol, int], tuple[SymbolBinding, ...]]:
    """Keep the leading dimension of user inputs symbolic; fix every other symbol at its captured value."""
    if not dynamic:
        return {}, ()
    shape_env = None
    kept: dict[sympy.Symbol, SymbolBinding] = {}
    for index, (node, kind) in enumerate(zip(placeholders, kinds)):
        value = node.meta["val"]
        for dim, size in enumerate(value.shape):
            if isinstance(size, torch.SymInt):
                shape_env = size.node.shape_env
                expr = size.node.expr
                if dim == 0 and kind == "input" and isinstance(expr, sympy.Symbol) and expr not in kept:
                    kept[expr] = SymbolBinding(expr, index, 0, int(size.node.hint))
    if shape_env is None:
        return {}, ()
    substitution = {sym: int(val) for sym, val in _hints(shape_env).items() if sym not in kept}
    renamed = {binding.symbol: sympy.Symbol(f"s{i}", integer=True, positive=True)
               for i, binding in enumerate(kept.values())}
    # Substituting fixed symbols first, then renaming the kept ones to s0, s1, ... in argument order.
    plan: dict[sympy.Symbol, Any] = {**substitution, **renamed}
    bindings = tuple(SymbolBinding(renamed[b.symbol], b.input_index, b.dim, b.captured_value)
                     for b in kept.values())
    return plan, bindings


def _hints(shape_env: Any) -> dict[sympy.Symbol, Any]:
    """The captured value of every size symbol (the attribute was renamed in torch 2.13)."""
    if hasattr(shape_env, "backed_var_to_val"):
        return dict(shape_env.backed_var_to_val)
    return dict(shape_env.var_to_val)


def _to_dim(size: Any, plan: dict[sympy.Symbol, Any]) -> Dim:
    if isinstance(size, torch.SymInt):
        expr = sympy.sympify(size.node.expr).xreplace(plan)
        return int(expr) if isinstance(expr, int) or expr.is_number else expr
    return int(size)


def _tensor_type(value: torch.Tensor, plan: dict[sympy.Symbol, Any]) -> TensorType:
    shape = tuple(_to_dim(s, plan) for s in value.shape)
    strides = tuple(_to_dim(s, plan) for s in value.stride())
    return TensorType(shape, value.dtype, strides)
