"""Capture: a function or nn.Module plus example inputs -> an aten-level torch.fx graph with types.

Parameters and buffers become graph inputs; Python scalars and keyword arguments are specialised into the
graph (calling with other values is an error that says so). With `dynamic=True` the leading dimension of
every tensor argument is symbolic; all other sizes are fixed at their captured values.

    >>> result = capture(torch.nn.functional.gelu, (torch.randn(4, 8),), {})
    >>> [spec.name for spec in result.inputs]
    ['input']
"""

from __future__ import annotations

import contextlib
import inspect
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
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
    state: StateSource = None  # type: ignore[assignment]
    mutations: tuple[Mutation, ...] = ()
    guards: tuple[Guard, ...] = ()
    user_outputs: int = 0  # graph outputs the user's function returns; the mutated values follow them
    sizes: dict[str, Any] = field(default_factory=dict)  # a size computation's node -> its value (int or sympy)
    call_flat: Callable[..., list[torch.Tensor]] | None = None  # the user's function on flat graph inputs (eager)


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


class StateSource:
    """The tensors a function reads besides its arguments: a module's parameters and buffers, and the modules and
    tensors a closure refers to (`lambda h: block(h)[0]`). They are graph inputs, read afresh on every call."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.roots: dict[str, torch.nn.Module] = {}
        self.places: dict[str, tuple[Any, str]] = {}  # closure tensor -> (its cell or globals dict, key)
        if isinstance(fn, torch.nn.Module):
            self.roots[""] = fn
        else:
            owner = getattr(fn, "__self__", None)
            if isinstance(owner, torch.nn.Module):
                self.roots["self"] = owner
            self._closure(fn)
        self.fingerprint = self.modes()

    def _closure(self, fn: Callable[..., Any]) -> None:
        function = getattr(fn, "__func__", fn)
        if not inspect.isfunction(function):
            return
        cells = dict(zip(function.__code__.co_freevars, function.__closure__ or ()))
        for name, cell in cells.items():
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if isinstance(value, torch.nn.Module):
                self.roots[name] = value
            elif isinstance(value, torch.Tensor):
                self.places[name] = (cell, "cell_contents")
        for name in _global_names(function.__code__):
            value = function.__globals__.get(name)
            if isinstance(value, torch.nn.Module):
                self.roots.setdefault(name, value)
            elif isinstance(value, torch.Tensor) and name not in self.places:
                self.places[name] = (function.__globals__, name)

    def closure_tensor(self, name: str) -> torch.Tensor:
        container, key = self.places[name]
        return container[key] if isinstance(container, dict) else getattr(container, key)  # type: ignore[no-any-return]

    def set_closure_tensor(self, name: str, value: torch.Tensor) -> None:
        container, key = self.places[name]
        if isinstance(container, dict):
            container[key] = value
        else:
            setattr(container, key, value)

    def _modules(self) -> dict[str, torch.nn.Module]:
        return {_join(root, name): module for root, top in self.roots.items()
                for name, module in top.named_modules(remove_duplicate=False)}

    def named(self) -> dict[str, tuple[torch.Tensor, str]]:
        """Every state tensor by its dotted name, with its kind ("parameter", "buffer" or "closure")."""
        found: dict[str, tuple[torch.Tensor, str]] = {}
        for root, module in self.roots.items():
            for name, param in module.named_parameters():
                found[_join(root, name)] = (param, "parameter")
            for name, buffer in module.named_buffers():
                found[_join(root, name)] = (buffer, "buffer")
        for name in self.places:
            found[name] = (self.closure_tensor(name), "closure")
        return found

    def modes(self) -> tuple[tuple[str, Any], ...]:
        """What changes a module's program without changing its tensors: `training` and plain attributes
        (`eps`, `momentum`, `p`, ...)."""
        items: list[tuple[str, Any]] = []
        for path, module in self._modules().items():
            items.append((f"{path or type(module).__name__}.training", module.training))
            for key, value in vars(module).items():
                if not key.startswith("_") and isinstance(value, (bool, int, float, str, type(None))):
                    items.append((f"{path or type(module).__name__}.{key}", value))
        return tuple(items)

    def check(self) -> None:
        """Refuse a call after a module's mode or attributes changed: the captured program would be stale."""
        if not self.roots:
            return
        now = self.modes()
        if now == self.fingerprint:
            return
        before = dict(self.fingerprint)
        changed = [(k, before.get(k, "<absent>"), v) for k, v in now if before.get(k, "<absent>") != v
                   and not (v != v and before.get(k) != before.get(k))]
        changed += [(k, v, "<absent>") for k, v in self.fingerprint if k not in dict(now)]
        if not changed:
            return
        key, old, new = changed[0]
        raise StateChanged(f"{key} was {old!r} when the program was captured and is {new!r} now "
                           f"({len(changed)} change(s)): the captured graph would compute the old behaviour. "
                           "Explore again after changing a module's mode (model.train()/model.eval()) or attributes")


class StateChanged(ValueError):
    """A module's mode or a plain attribute changed after capture."""


def _join(root: str, name: str) -> str:
    return f"{root}.{name}" if root and name else (root or name)


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
    """Trace `fn(*args, **kwargs)` to aten ops, functionalized: writes through views become `*_scatter` ops, and
    writes to inputs and buffers become values the program returns (`CaptureResult.mutations`)."""
    source = StateSource(fn)
    module = fn if isinstance(fn, torch.nn.Module) else None
    state = {name: tensor.detach() for name, (tensor, _) in source.named().items()}
    state_kinds = {name: kind for name, (_, kind) in source.named().items()}
    call_target: Callable[..., Any] = module.forward if module is not None else fn

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
    for i in tensor_positions:
        _check_layout(leaves[i], leaf_names[i])
    for name, tensor in state.items():
        _check_layout(tensor, name)
    if not tensor_positions and not state:
        raise CaptureError("no tensor among the example inputs: pass at least one torch.Tensor")
    state_names = list(state)

    def traced(*flat: torch.Tensor) -> list[torch.Tensor]:
        state_values = dict(zip(state_names, flat[: len(state_names)]))
        all_leaves = list(leaves)
        for position, tensor in zip(tensor_positions, flat[len(state_names):]):
            all_leaves[position] = tensor
        call_args, call_kwargs = pytree.tree_unflatten(all_leaves, input_spec)
        with _substituted(source, state_values):
            result = call_target(*call_args, **call_kwargs)
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
    name = getattr(fn, "__name__", type(fn).__name__)
    try:
        with torch.no_grad(), fx_config.patch(use_duck_shape=False), _compiling():  # type: ignore[attr-defined]
            graph_module = make_fx(torch.func.functionalize(traced, remove="mutations"),
                                   tracing_mode="symbolic" if dynamic else "fake")(*example)
    except CaptureError:
        raise
    except Exception as error:  # noqa: BLE001 - re-raised with context
        raise _capture_error(name, error) from error

    placeholders = [n for n in graph_module.graph.nodes if n.op == "placeholder"]
    kinds = [state_kinds[n] for n in state_names] + ["input"] * len(tensor_positions)
    display = state_names + [leaf_names[i] for i in tensor_positions]
    user_outputs = sum(1 for t in holder["template"] if t is TENSOR_SLOT)
    mutations = _returned_mutations(graph_module, placeholders, display, kinds)
    substitution, symbols = _symbol_plan(placeholders, kinds, dynamic)
    guards = _guards(placeholders, substitution, symbols)

    types: dict[str, TensorType] = {}
    multi_types: dict[str, tuple[TensorType | None, ...]] = {}
    sizes: dict[str, Any] = {}
    for node in graph_module.graph.nodes:
        value = node.meta.get("val")
        if isinstance(value, (torch.SymInt, torch.SymFloat)):
            sizes[node.name] = _to_value(value, substitution)
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
                         tuple(holder["template"]), constants, input_spec, symbols, module, source, mutations,
                         guards, user_outputs, sizes, traced)


def _check_layout(tensor: torch.Tensor, name: str) -> None:
    if tensor.layout != torch.strided:
        raise CaptureError(f"input {name!r} is a {tensor.layout} tensor: fusionlab's kernels read strided (dense) "
                           f"tensors; pass {name}.to_dense() instead")
    if tensor.is_quantized or tensor.is_nested:
        raise CaptureError(f"input {name!r} is a quantized or nested tensor: fusionlab captures dense tensors; "
                           "dequantize it or pass its dense form")


@contextlib.contextmanager
def _compiling() -> Iterator[None]:
    """Libraries take their tracing-friendly paths where `torch.compiler.is_compiling()` says so (transformers skips
    data-dependent mask checks): capture is compiling, as torch.export's tracing is."""
    previous = getattr(torch.compiler, "_is_compiling_flag", None)
    if previous is None:
        yield
        return
    torch.compiler._is_compiling_flag = True
    try:
        yield
    finally:
        torch.compiler._is_compiling_flag = previous


@contextlib.contextmanager
def _substituted(source: StateSource, values: dict[str, torch.Tensor]) -> Iterator[None]:
    """Inside the trace, every module the function reads (its own, or one a closure refers to) holds the traced
    stand-ins for its parameters and buffers, and closure tensors are swapped likewise."""
    with contextlib.ExitStack() as stack:
        for root, module in source.roots.items():
            prefix = f"{root}." if root else ""
            own = {k[len(prefix):]: v for k, v in values.items()
                   if (k.startswith(prefix) if prefix else k not in source.places)}
            stack.enter_context(torch.nn.utils.stateless._reparametrize_module(module, own))
        saved = {name: source.closure_tensor(name) for name in source.places}
        try:
            for name in source.places:
                source.set_closure_tensor(name, values[name])
            yield
        finally:
            for name, tensor in saved.items():
                source.set_closure_tensor(name, tensor)


def _global_names(code: Any) -> set[str]:
    """Names a function's code (and the code nested in it) reads as globals."""
    names = set(code.co_names)
    for constant in code.co_consts:
        if inspect.iscode(constant):
            names |= _global_names(constant)
    return names


def _returned_mutations(graph_module: torch.fx.GraphModule, placeholders: list[torch.fx.Node],
                        names: list[str], kinds: list[str]) -> tuple[Mutation, ...]:
    """Functionalization ends the graph with `copy_(input, new_value)` for every input it wrote: those become
    extra outputs, copied back by the caller (as AOTAutograd does), so the graph itself mutates nothing."""
    graph = graph_module.graph
    output = next(n for n in graph.nodes if n.op == "output")
    results = list(output.args[0])
    position = {node: index for index, node in enumerate(placeholders)}
    mutations: list[Mutation] = []
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target is torch.ops.aten.copy_.default and node.args[0] in position:
            target, value = node.args[0], node.args[1]
            index = position[target]
            if kinds[index] == "parameter":
                raise CaptureError(f"the function writes parameter {names[index]!r} in place: fusionlab captures "
                                   "programs that read parameters; update parameters outside the explored function")
            if value.meta["val"].shape != target.meta["val"].shape or value.meta["val"].dtype != \
                    target.meta["val"].dtype:
                with graph.inserting_before(node):
                    value = graph.call_function(torch.ops.aten.copy.default, (target, value))
                    value.meta["val"] = target.meta["val"]
            mutations.append(Mutation(index, len(results), names[index]))
            results.append(value)
            graph.erase_node(node)
    if mutations:
        output.args = (type(output.args[0])(results),)
        graph_module.recompile()
    return tuple(mutations)


def _capture_error(name: str, error: Exception) -> CaptureError:
    """The trace failed: say where in the user's code and what to do, not only what torch said."""
    kind = type(error).__name__
    line = _user_line(error)
    where = f" at {line}" if line else ""
    if "DataDependent" in kind or "data-dependent" in str(error):
        return CaptureError(
            f"{name} depends on the values inside a tensor{where} (a branch like `if x.sum() > 0`, `.item()`, or an "
            "op whose output size depends on the data, such as nonzero or boolean indexing): one captured graph "
            "cannot hold that. Use torch.compile(fn, backend='fusionlab'), which splits the function there and runs "
            "each part through fusionlab, or compute both branches and pick with torch.where")
    if "FakeTensor" in str(error) or "allow_non_fake_inputs" in str(error):
        return CaptureError(f"could not trace {name}: it reads a tensor that is neither an argument nor a parameter "
                            f"of a module it refers to{where}: pass that tensor as an argument")
    return CaptureError(f"could not trace {name}{where}: {kind}: {str(error).splitlines()[0] if str(error) else ''}")


def _user_line(error: BaseException) -> str:
    """The last frame of the traceback in the user's code (not torch's or fusionlab's)."""
    found = ""
    for frame in traceback.extract_tb(error.__traceback__):
        path = frame.filename.replace("\\", "/")
        if "/torch/" in path or "/fusionlab/" in path or "/functorch/" in path or path.startswith("<frozen"):
            continue
        found = f"{path}:{frame.lineno}" + (f" `{frame.line.strip()}`" if frame.line else "")
    return found


def _guards(placeholders: list[torch.fx.Node], plan: dict[sympy.Symbol, Any],
            symbols: tuple[SymbolBinding, ...]) -> tuple[Guard, ...]:
    """The size conditions tracing assumed, over the kept symbols (s0, s1, ...); trivially true ones dropped."""
    if not symbols:
        return ()
    shape_env = None
    for node in placeholders:
        for size in node.meta["val"].shape:
            if isinstance(size, torch.SymInt):
                shape_env = size.node.shape_env
    if shape_env is None:
        return ()
    kept = {b.symbol for b in symbols}
    found: list[Guard] = []
    for guard in shape_env.guards:
        expr = sympy.sympify(guard.expr).xreplace(plan)
        if expr in (sympy.true, True) or not (expr.free_symbols & kept):
            continue
        found.append(Guard(expr, _guard_line(guard)))
    # A symbol specialised to a value (`if a.shape[0] == 4`) is replaced, not guarded: keep it as a guard too.
    for symbol, replacement in getattr(shape_env, "replacements", {}).items():
        renamed = plan.get(symbol)
        if isinstance(renamed, sympy.Symbol) and renamed in kept:
            value = sympy.sympify(replacement).xreplace(plan)
            if value != renamed:
                found.append(Guard(sympy.Eq(renamed, value), ""))
    return tuple(found)


def _guard_line(guard: Any) -> str:
    sloc = getattr(guard, "sloc", None)
    for attribute in ("maybe_user_loc", "framework_loc"):
        location = getattr(sloc, attribute, None)
        if isinstance(location, traceback.FrameSummary):
            return f"{location.filename}:{location.lineno}" + (f" `{location.line.strip()}`" if location.line else "")
        if location:
            return str(location)
    return ""


_RELATIONS = {sympy.Eq: "==", sympy.Ne: "!=", sympy.Lt: "<", sympy.Le: "<=", sympy.Gt: ">", sympy.Ge: ">="}


def _condition_text(expr: sympy.Basic) -> str:
    """`Eq(a.shape[0], 4)` -> `a.shape[0] == 4`."""
    for relation, symbol in _RELATIONS.items():
        if isinstance(expr, relation):
            return f"{expr.args[0]} {symbol} {expr.args[1]}"
    return str(expr)


def flatten_call(captured: CaptureResult, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    """User arguments -> the graph's tensor inputs (state first), checking the specialised scalars and the modules'
    modes."""
    leaves, spec = pytree.tree_flatten((args, kwargs))
    if spec != captured.input_spec:
        expected_args, expected_kwargs = pytree.tree_unflatten([None] * captured.input_spec.num_leaves,
                                                               captured.input_spec)
        raise TypeError(f"called with {len(args)} positional argument(s) and keywords {sorted(kwargs)} holding "
                        f"{len(leaves)} values; the example inputs were {len(expected_args)} positional argument(s) "
                        f"and keywords {sorted(expected_kwargs)} holding {captured.input_spec.num_leaves} values: pass "
                        "arguments the way the example inputs were passed (or explore again)")
    for position, expected in captured.constant_leaves:
        value = leaves[position]
        same_nan = isinstance(value, float) and isinstance(expected, float) and value != value and expected != expected
        if not same_nan and (type(value) is not type(expected) or value != expected):
            raise ValueError(f"argument {position} was {expected!r} at capture and is {value!r} now: "
                             "Python scalars are specialised into the graph; explore again with the new value")
    tensors = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
    source = captured.state
    if source is not None and (source.roots or source.places):
        source.check()
        named = source.named()
        tensors = [named[spec.name][0].detach() for spec in captured.inputs if spec.kind != "input"] + tensors
    return tensors


class GuardFailed(ValueError):
    """A call's sizes break a condition the captured program relies on."""


def check_guards(captured: CaptureResult, tensors: Sequence[torch.Tensor]) -> None:
    """Every size condition tracing relied on must hold for this call's sizes."""
    if not captured.guards:
        return
    values = {b.symbol: int(tensors[b.input_index].shape[b.dim]) for b in captured.symbols}
    for guard in captured.guards:
        if bool(guard.expr.xreplace(values)):
            continue
        names = {b.symbol: sympy.Symbol(f"{captured.inputs[b.input_index].name}.shape[{b.dim}]")
                 for b in captured.symbols}
        condition = _condition_text(guard.expr.xreplace(names))
        sizes = ", ".join(f"{names[symbol]} = {value}" for symbol, value in values.items())
        where = f" (from {guard.source})" if guard.source else ""
        raise GuardFailed(f"the program was captured under the condition {condition}{where}, which does not hold "
                          f"for this call ({sizes}): the function takes another path at these sizes. Explore again "
                          "with inputs of these sizes")


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
                if expr.is_number:  # specialised by the function (`if a.shape[0] == 4`): keep it to say so
                    expr = getattr(size.node, "_expr", expr)
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


def _to_value(size: torch.SymInt | torch.SymFloat, plan: dict[sympy.Symbol, Any]) -> Any:
    """A size computation's value: a Python number, or a sympy expression over the kept symbols."""
    expr = sympy.sympify(size.node.expr).xreplace(plan)
    if expr.is_number:
        return int(expr) if isinstance(size, torch.SymInt) else float(expr)
    return expr


def _tensor_type(value: torch.Tensor, plan: dict[sympy.Symbol, Any]) -> TensorType:
    shape = tuple(_to_dim(s, plan) for s in value.shape)
    strides = tuple(_to_dim(s, plan) for s in value.stride())
    return TensorType(shape, value.dtype, strides)
