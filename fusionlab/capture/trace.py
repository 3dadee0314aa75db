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
import re
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import sympy
import torch
import torch.fx.experimental._config as fx_config
import torch.fx.traceback as fx_traceback
import torch.utils._pytree as pytree
from torch.fx.experimental.proxy_tensor import make_fx

from fusionlab.capture.decompositions import DECOMPOSITIONS, decomposed_from
from fusionlab.capture.guards import guards_of
from fusionlab.capture.provenance import (
    ProvenanceInterpreter,
    ProvenanceMode,
    is_internal,
    module_paths,
    provenance,
    short_path,
)
from fusionlab.capture.result import (
    TENSOR_SLOT,
    AtenNode,
    CaptureError,
    CaptureResult,
    InputSpec,
    Mutation,
    ObjectSlot,
    SymbolBinding,
    tensors_inside,
)
from fusionlab.capture.state import StateSource, substituted
from fusionlab.ir import Dim, TensorType


def capture(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
            dynamic: bool = False) -> CaptureResult:
    """Trace `fn(*args, **kwargs)` to aten ops, functionalized: writes through views become `*_scatter` ops, and
    writes to inputs and buffers become values the program returns (`CaptureResult.mutations`)."""
    source = StateSource(fn)
    module = fn if isinstance(fn, torch.nn.Module) else None
    state = {name: tensor.detach() for name, (tensor, _) in source.named().items()}
    state_kinds = {name: kind for name, (_, kind) in source.named().items()}
    call_target: Callable[..., Any] = module.forward if module is not None else fn
    if isinstance(module, torch.fx.GraphModule):
        # A graph from Dynamo carries each node's module and source line in its meta: run it node by node, so that
        # preserve_node_meta hands them to the nodes each one records.
        call_target = ProvenanceInterpreter(module).run

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
        layouts = [(t.shape, t.stride()) for t in flat]
        with substituted(source, state_values):
            result = call_target(*call_args, **call_kwargs)
        for tensor, before, name in zip(flat, layouts, [*state_names, *(leaf_names[i] for i in tensor_positions)]):
            if (tensor.shape, tensor.stride()) != before:
                raise CaptureError(f"the function changes the shape or strides of input {name!r} in place "
                                   f"({tuple(before[0])} -> {tuple(tensor.shape)}: squeeze_, t_, transpose_, "
                                   "resize_, ...): a captured program cannot change its caller's tensors' layout. "
                                   "Return the reshaped tensor instead (y = x.squeeze())")
        outputs, spec = pytree.tree_flatten(result)
        holder["spec"] = spec
        template: list[Any] = []
        returned: list[torch.Tensor] = []
        for out in outputs:
            if isinstance(out, torch.Tensor):
                template.append(TENSOR_SLOT)
                returned.append(out)
            elif isinstance(out, (torch.SymInt, torch.SymFloat, torch.SymBool)):
                raise CaptureError(f"output {len(template)} is a size ({out}) that changes with the inputs' sizes: "
                                   "fusionlab returns tensors; return it as a tensor (torch.tensor(x.shape[0])) or "
                                   "read it from the output's shape")
            elif isinstance(out, (bool, int, float, str, torch.dtype, torch.device, type(None))):
                template.append(out)
            else:  # an object holding tensors (a transformers cache): rebuilt around each call's tensors
                if not hasattr(out, "__dict__") or hasattr(type(out), "__slots__"):
                    raise CaptureError(f"output {len(template)} is a {type(out).__name__}, which fusionlab cannot "
                                       "rebuild around each call's tensors (it has no __dict__): return tensors, "
                                       "tuples, lists, dicts or dataclasses of them")
                inside = tensors_inside(out)
                template.append(ObjectSlot(out, inside))
                returned.extend(inside)
        holder["template"] = template
        return returned

    holder: dict[str, Any] = {}
    # The same tensor passed twice (`explore(h, x, x)`) would be one graph input read for both: each gets its own
    # stand-in, so a later call with two different tensors computes what eager would.
    example = _distinct([*state.values(), *(leaves[i] for i in tensor_positions)])
    name = getattr(fn, "__name__", type(fn).__name__)
    try:
        # preserve_node_meta: each node keeps the aten op it came from (`meta["original_aten"]`), so the nodes a
        # decomposition made say which op they replace.
        patched = fx_config.patch(use_duck_shape=False)  # type: ignore[attr-defined]
        # ProvenanceMode: every node records the module and the user's line that called it (a GraphModule's own
        # nodes already know theirs).
        stamping = (contextlib.nullcontext() if isinstance(module, torch.fx.GraphModule)
                    else ProvenanceMode(module_paths(source.roots), traced.__code__))
        with torch.no_grad(), patched, _compiling(), fx_traceback.preserve_node_meta(), stamping:
            graph_module = make_fx(torch.func.functionalize(traced, remove="mutations"),
                                   decomposition_table=DECOMPOSITIONS,
                                   tracing_mode="symbolic" if dynamic else "fake")(*example)
    except CaptureError:
        raise
    except Exception as error:  # noqa: BLE001 - re-raised with context
        running = stamping.module if isinstance(stamping, ProvenanceMode) else ""
        raise _capture_error(name, error, running) from error

    source.fingerprint = source.modes()  # after the trace: a forward may set its own attributes (caches) as it runs
    placeholders = [n for n in graph_module.graph.nodes if n.op == "placeholder"]
    kinds = [state_kinds[n] for n in state_names] + ["input"] * len(tensor_positions)
    display = state_names + [leaf_names[i] for i in tensor_positions]
    user_outputs = sum(len(t.tensors) if isinstance(t, ObjectSlot) else t is TENSOR_SLOT for t in holder["template"])
    mutations = _returned_mutations(graph_module, placeholders, display, kinds)
    substitution, symbols = _symbol_plan(placeholders, kinds, dynamic)
    guards = guards_of(placeholders, substitution, symbols)

    types: dict[str, TensorType] = {}
    multi_types: dict[str, tuple[TensorType | None, ...]] = {}
    sizes: dict[str, Any] = {}
    for node in graph_module.graph.nodes:
        value = node.meta.get("val")
        if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
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
                 ", ".join(str(a) for a in node.args), decomposed_from(node), *provenance(node.meta))
        for node in graph_module.graph.nodes if node.op == "call_function"
    )
    return CaptureResult(graph_module, inputs, aten_nodes, types, multi_types, holder["spec"],
                         tuple(holder["template"]), constants, input_spec, symbols, module, source, mutations,
                         guards, user_outputs, sizes, traced)


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


def _distinct(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """`tensors` with every repeat of an earlier tensor object replaced by a copy of the same layout."""
    seen: set[int] = set()
    distinct = []
    for tensor in tensors:
        if id(tensor) in seen:
            copy = torch.empty_strided(tensor.shape, tensor.stride(), dtype=tensor.dtype, device=tensor.device)
            tensor = copy.copy_(tensor.detach())
        seen.add(id(tensor))
        distinct.append(tensor)
    return distinct


def _capture_error(name: str, error: Exception, module: str = "") -> CaptureError:
    """The trace failed: say where in the user's code and what to do, not only what torch said. `module` is the
    module whose code was running ("" at the top level)."""
    kind = type(error).__name__
    line = _user_line(error)
    where = f" at {line}" if line else ""
    if "DataDependent" in kind or "data-dependent" in str(error):
        frame = _user_frame(error)
        code = (frame.line or "").strip() if frame is not None else ""
        place = (f" at {short_path(frame.filename)}:{frame.lineno} (`{code}`)" if frame is not None else "") + (
            f" in module {module}" if module else "")
        if re.match(r"(el)?if\b|while\b|assert\b", code) or re.search(r"\bif\b.*\belse\b", code):
            return CaptureError(
                f"data-dependent branch{place}: {name} depends on the values inside a tensor there (it branches on "
                "one), and one captured graph holds one path only. Compute both sides and pick with "
                "torch.where(condition, a, b), or use "
                "torch.compile(fn, backend='fusionlab'), which splits the graph there (a graph break) and runs each "
                "part through fusionlab")
        if re.search(r"\.item\(\)|\.tolist\(\)|\b(int|float|bool)\(", code):
            return CaptureError(
                f"data-dependent value{place}: {name} depends on the values inside a tensor there (it reads a "
                "number out of one: .item(), int(), float()), which a captured graph cannot hold. Pass it as a "
                "Python number, keep it a tensor, or use "
                "torch.compile(fn, backend='fusionlab'), which splits the graph there")
        return CaptureError(
            f"{name} depends on the values inside a tensor{where} (a branch like `if x.sum() > 0`, `.item()`, or an "
            "op whose output size depends on the data, such as nonzero or boolean indexing): one captured graph "
            "cannot hold that. Use torch.compile(fn, backend='fusionlab'), which splits the function there and runs "
            "each part through fusionlab, or compute both branches and pick with torch.where")
    if "operator whose output has alias annotations" in str(error):
        op = str(error).split("annotations: ", 1)[-1].split("(", 1)[0]
        return CaptureError(f"{name} calls the in-place op {op}{where}, which functionalization cannot follow (it "
                            "has no functional form): an in-place op fusionlab cannot capture. Write its out-of-place "
                            "form and assign the result (x = x.square() for x.square_())")
    if "FakeTensor" in str(error) or "allow_non_fake_inputs" in str(error):
        return CaptureError(f"could not trace {name}: it reads a tensor that is neither an argument nor a parameter "
                            f"of a module it refers to{where}: pass that tensor as an argument")
    return CaptureError(f"could not trace {name}{where}: {kind}: {str(error).splitlines()[0] if str(error) else ''}")


def _user_frame(error: BaseException) -> traceback.FrameSummary | None:
    """The frame of the traceback nearest the error in the user's code (not torch's, fusionlab's or Python's)."""
    frames = [frame for frame in traceback.extract_tb(error.__traceback__) if not is_internal(frame.filename)
              and "/fusionlab/" not in frame.filename.replace("\\", "/")]
    return frames[-1] if frames else None


def _user_line(error: BaseException) -> str:
    """The last frame of the traceback in the user's code (not torch's or fusionlab's)."""
    found = ""
    for frame in traceback.extract_tb(error.__traceback__):
        path = frame.filename.replace("\\", "/")
        if "/torch/" in path or "/fusionlab/" in path or "/functorch/" in path or path.startswith("<frozen"):
            continue
        found = f"{path}:{frame.lineno}" + (f" `{frame.line.strip()}`" if frame.line else "")
    return found


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
    renamed = {binding.symbol: sympy.Symbol(f"s{i}", integer=True, positive=True)
               for i, binding in enumerate(kept.values())}
    substitution: dict[sympy.Symbol, Any] = {}
    replacements = getattr(shape_env, "replacements", {})
    for sym, val in _hints(shape_env).items():
        if sym in kept:
            continue
        # A symbol tracing equated with a kept one (`x * w` makes w's rows x's): it follows that one.
        replacement = sympy.sympify(replacements.get(sym, val))
        follows = replacement.free_symbols and replacement.free_symbols <= set(kept)
        substitution[sym] = replacement.xreplace(renamed) if follows else int(val)
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


def _to_value(size: torch.SymInt | torch.SymFloat | torch.SymBool, plan: dict[sympy.Symbol, Any]) -> Any:
    """A size computation's value: a Python number, or a sympy expression over the kept symbols."""
    expr = sympy.sympify(sympy.sympify(size.node.expr).xreplace(plan))  # a fixed symbol may leave a Python int
    if isinstance(size, torch.SymBool):
        return bool(expr) if expr in (sympy.true, sympy.false) else expr
    if expr.is_number:
        return int(expr) if isinstance(size, torch.SymInt) else float(expr)
    return expr


def _tensor_type(value: torch.Tensor, plan: dict[sympy.Symbol, Any]) -> TensorType:
    shape = tuple(_to_dim(s, plan) for s in value.shape)
    strides = tuple(_to_dim(s, plan) for s in value.stride())
    return TensorType(shape, value.dtype, strides)
