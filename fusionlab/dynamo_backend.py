"""`torch.compile(model, backend="fusionlab")`: Dynamo captures, AOTAutograd splits forward and backward, and
each aten graph runs through fusionlab's pipeline.

    >>> compiled = torch.compile(torch.nn.functional.gelu, backend="fusionlab")
    >>> compiled(torch.randn(8))
    >>> fusionlab.dynamo_backend.graphs[-1]
    BackendGraph(0, 'inference', 1 kernel, 0 extern)

Every graph the backend compiles is kept, labelled, in `graphs` (the latest 64): its Dynamo graph number, its role
(forward and backward in training, inference under no_grad), the graph break that ended it, and its
`Exploration`, so a notebook can open the backward graph of a training step:

    >>> [g for g in fusionlab.dynamo_backend.graphs if g.role == "backward"][-1].exploration.show()

When Dynamo recompiles with symbolic sizes (a second batch size), each new size gets its own exploration of the same
graph, made on its first call (`BackendGraph.explorations`). A graph identical to one compiled before (the same aten
code traced to the same dtypes and sizes, inputs of the same sizes, strides and dtypes, the same options: Dynamo
recompiles a model whose forward set a Python attribute on its first call, as Hugging Face's classification loss
sets `config.problem_type`) reuses that graph's program instead of planning and compiling it again.
"""

from __future__ import annotations

import functools
import itertools
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch._dynamo.backends.common import aot_autograd
from torch._dynamo.backends.registry import register_backend
from torch._functorch.partitioners import min_cut_rematerialization_partition

from fusionlab.capture import fill_template, output_values, strides_of
from fusionlab.capture.masks import drop_empty_masks
from fusionlab.decompose.layout import check_layout, output_strides
from fusionlab.explore import Exploration
from fusionlab.runtime.cudagraphs import cudagraph_mode

__all__ = ["BackendGraph", "backend", "compile_graph", "explorations", "forget", "graphs", "mark", "since"]

#: the explorations the backend made, newest last (the latest 64)
explorations: deque[Exploration] = deque(maxlen=64)
# an exploration per identical graph (`_program_key`), while one is kept
_programs: weakref.WeakValueDictionary[tuple[Any, ...], Exploration] = weakref.WeakValueDictionary()


@dataclass
class BackendGraph:
    """One aten graph the backend compiled: which Dynamo graph it came from, its role, and its explorations."""

    index: int  # the Dynamo graph's number in this process (0, 1, ...)
    role: str  # "forward", "backward" (training) or "inference" (no grad)
    graph_module: torch.fx.GraphModule  # the aten graph as AOTAutograd handed it
    ended_by: str = ""  # the graph break that ended this Dynamo graph (reason and user source line), "" if none
    dynamic: bool = False  # the graph has symbolic sizes: each new size is explored on its first call
    saved_outputs_from: int | None = None  # a forward graph's first output saved for the backward (AOTAutograd's)
    input_updates: tuple[int, ...] = ()  # outputs AOTAutograd copies into mutated inputs (data only) and lets go
    static_inputs: tuple[int, ...] = ()  # inputs Dynamo marks static (parameters, buffers), by position
    explorations: dict[tuple[Any, ...], Exploration] = field(default_factory=dict)  # sizes -> exploration

    @property
    def exploration(self) -> Exploration:
        """The exploration made first (at the sizes Dynamo compiled for)."""
        return next(iter(self.explorations.values()))

    @property
    def name(self) -> str:
        return f"graph {self.index} ({self.role})"

    def __repr__(self) -> str:
        fused = self.exploration.fused
        kernels = sum(1 for g in fused.groups if g.is_kernel)
        externs = sum(1 for g in fused.groups if g.kind == "extern")
        sizes = f", {len(self.explorations)} sizes" if len(self.explorations) > 1 else ""
        return (f"BackendGraph({self.index}, {self.role!r}, {kernels} kernel{'s' * (kernels != 1)}, "
                f"{externs} extern{'s' * (externs != 1)}{sizes})")


#: the graphs compiled through the backend, labelled, newest last (the latest 64)
graphs: deque[BackendGraph] = deque(maxlen=64)
_numbers = itertools.count()
_compiled = itertools.count(1)
_serials: dict[int, int] = {}  # id(BackendGraph) -> its place among every graph compiled in this process


def mark() -> int:
    """How many graphs the backend has compiled so far: `since(mark())` later gives the ones compiled after it
    (`graphs` keeps only the latest 64, so its length is no count)."""
    return max(_serials.values(), default=0)


def forget() -> None:
    """Drop the graphs and explorations kept for inspection, and the kernels, buffers and CUDA graphs they hold (a
    model's compiled graphs stay alive while Dynamo's cache holds them: `torch._dynamo.reset()` lets go of those)."""
    graphs.clear()
    explorations.clear()
    _serials.clear()
    _programs.clear()


def since(count: int) -> list[BackendGraph]:
    """The graphs compiled after `mark()` returned `count`, oldest first (of those `graphs` still keeps)."""
    return [g for g in graphs if _serials.get(id(g), 0) > count]


def hint_int(size: int | torch.SymInt) -> int:
    """The value Dynamo saw for a size, read without adding a guard (which would specialise the graph)."""
    if not isinstance(size, torch.SymInt):
        return int(size)
    node = size.node
    hint = getattr(node, "hint", None)
    return int(hint) if hint is not None else int(node.shape_env.size_hint(node.expr))


def _real(value: Any) -> Any:
    """Dynamo hands fake tensors (and symbolic sizes) to the compiler: fusionlab traces real (uninitialised)
    stand-ins at the sizes Dynamo saw, read without adding a guard."""
    if isinstance(value, torch.SymInt):
        return hint_int(value)
    if not isinstance(value, torch.Tensor):
        return value
    shape = [hint_int(s) for s in value.shape]
    strides = [hint_int(s) for s in value.stride()]
    return torch.empty_strided(shape, strides, dtype=value.dtype, device=value.device)


def _views_as_reshapes(graph_module: torch.fx.GraphModule) -> None:
    """A backward graph's `view`s as `reshape`s. AOTAutograd traced it for the saved activations as eager lays them
    out, and the forward may hand them over in another layout (channels-last: `_report_strides`, as after
    Inductor's layout choice), where a `view` can fail ("view size is not compatible with input tensor's size and
    stride"): an instance norm's backward views an activation, a flattened image or a viewed weight is saved.
    AOTAutograd's graphs are functional, so a reshape, a view where the strides allow one and a copy where they do
    not, gives the same values."""
    changed = False
    for node in graph_module.graph.nodes:
        if node.op == "call_function" and node.target in (torch.ops.aten.view.default,
                                                           torch.ops.aten._unsafe_view.default):
            node.target = torch.ops.aten.reshape.default
            changed = True
    if changed:
        graph_module.recompile()


def _is_symbolic(value: Any) -> bool:
    if isinstance(value, torch.SymInt):
        return True
    return isinstance(value, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in (*value.shape,
                                                                                            *value.stride()))


def _sizes_key(args: Sequence[Any], positions: Sequence[int]) -> tuple[Any, ...]:
    return tuple(tuple(args[i].shape) if isinstance(args[i], torch.Tensor) else args[i] for i in positions)


def _explore(graph: BackendGraph, args: Sequence[Any], cudagraphs: bool | str = False,
             conv_layout: str = "auto") -> tuple[Exploration, list[torch.Tensor]]:
    """Explore `graph` at the sizes of `args` (real values), build its kernels now, and find the tensors the graph
    holds itself (constants made inside the function), which lead its inputs."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    eager_strides = _aot_output_strides(graph.graph_module)
    key = _program_key(graph, args, cudagraphs, conv_layout, eager_strides)
    with torch._guards.tracing(None), unset_fake_temporarily():
        ex = Exploration(graph.graph_module, tuple(args), {}, cudagraphs=cudagraphs, conv_layout=conv_layout,
                         stages_of=_programs.get(key) if key is not None else None)
        ex.saved_outputs_from, ex.input_updates = graph.saved_outputs_from, graph.input_updates
        ex.eager_output_strides = eager_strides
        ex.compiled  # noqa: B018 - generate and build now, not inside the first training step
        ex.release_examples()  # the stand-ins: as large as the graph's inputs, and uninitialised anyway
        held = ex.captured.result.state.named() if ex.captured.result.state is not None else {}
        constants = [held[spec.name][0].detach() for spec in ex.captured.result.inputs if spec.kind != "input"]
        # run_flat's positions: the constants, then the tensor arguments
        tensors = list(itertools.accumulate((isinstance(a, torch.Tensor) for a in args), initial=len(constants)))
        ex.static_inputs = tuple(tensors[i] for i in graph.static_inputs if isinstance(args[i], torch.Tensor))
    if key is not None:
        _programs[key] = ex
    explorations.append(ex)
    return ex, constants


def _program_key(graph: BackendGraph, args: Sequence[Any], cudagraphs: bool | str, conv_layout: str,
                 eager_strides: Sequence[tuple[int, ...] | None]) -> tuple[Any, ...] | None:
    """What makes two aten graphs one program: their code, every node's traced dtype, sizes and strides (the code
    does not print them: `a / b` of integers is float32 or float64 by the default dtype), the default dtype, role and
    AOTAutograd facts, each input's size, strides, dtype, device and requires_grad (or value), and the options. None
    for a graph whose code does not say all it runs (`get_attr` of its own tensors, `call_module` of a submodule) or
    whose facts do not hash. `eager_strides`: its outputs' strides as AOTAutograd traced them."""
    nodes = graph.graph_module.graph.nodes
    if any(node.op in ("get_attr", "call_module") for node in nodes):
        return None
    inputs = tuple((tuple(a.shape), a.stride(), a.dtype, a.device, a.requires_grad) if isinstance(a, torch.Tensor)
                   else (type(a), a) for a in args)
    key = (graph.graph_module.code, tuple(_traced_types(node) for node in nodes), torch.get_default_dtype(),
           graph.role, graph.saved_outputs_from, graph.input_updates, graph.static_inputs, inputs,
           tuple(eager_strides), cudagraphs, conv_layout)
    try:
        hash(key)
    except TypeError:  # (a symbolic float among the inputs, say)
        return None
    return key


def _traced_types(node: torch.fx.Node) -> tuple[Any, ...]:
    """A node's traced values as dtype, sizes and strides (symbolic ones by their expression)."""
    return tuple((v.dtype, v.layout, tuple(map(str, v.shape)),
                  tuple(map(str, v.stride())) if v.layout == torch.strided else ())
                 if isinstance(v, torch.Tensor) else type(v).__name__ for v in pytree.tree_leaves(node.meta.get("val")))


def _aot_output_strides(graph_module: torch.fx.GraphModule) -> list[tuple[int, ...] | None]:
    """The strides eager gives each output of an AOTAutograd graph (its output node's values, as AOTAutograd traced
    them: a backward graph compiled for channels-last saved activations is re-traced here on those, and would
    otherwise take its gradients' strides from them). Only its tensor outputs, those fusionlab's capture keeps: a
    None, a gradient no input needs, is not one."""
    return [strides_of(v) for v in output_values(graph_module) if isinstance(v, torch.Tensor)]


def _input_updates() -> tuple[int, ...]:
    """The graph's outputs that are new values of its mutated inputs, which AOTAutograd's epilogue copies into the
    inputs and lets go (data mutations only: AOTAutograd applies a metadata mutation with `as_strided_`, and a
    storage mutation with `set_`, which makes the input alias the output)."""
    context = torch._guards.TracingContext.try_get()
    metadata = getattr(context, "fw_metadata", None)
    indices, infos = getattr(metadata, "mutated_inp_runtime_indices", None), getattr(metadata, "input_info", None)
    if not isinstance(indices, list) or infos is None:
        return ()
    return tuple(position for position, index in enumerate(indices)
                 if getattr(infos[index], "mutates_data", False)
                 and not getattr(infos[index], "mutates_metadata", True))


def _static_inputs() -> tuple[int, ...]:
    """The graph's inputs Dynamo marks static (a module's parameters and buffers): their memory stays put between
    calls, so CUDA graphs read them in place, and a batch norm's running statistics are written there by the graph
    (AOTAutograd keeps those mutations in the graph: `keep_inference_input_mutations`)."""
    context = torch._guards.TracingContext.try_get()
    indices = getattr(getattr(context, "fw_metadata", None), "static_input_indices", None)
    return tuple(i for i in indices if isinstance(i, int)) if isinstance(indices, list) else ()


def _saved_outputs_from() -> int | None:
    """Where AOTAutograd's forward graph's outputs turn into what it saves for the backward (its metadata's
    `num_forward`: mutated inputs, outputs, intermediate bases, then saved tensors); None when it does not say. CUDA
    graphs hand the outputs from there on out uncopied (safe for any answer: they are handed out only while nothing
    else holds them, or the call runs without the graph), and on CUDA (or with conv_layout="channels_last") the layout
    pass stores them channels-last (a wrong answer there would give the caller an output in another layout than
    eager's)."""
    context = torch._guards.TracingContext.try_get()
    metadata = getattr(context, "fw_metadata", None)
    boundary = getattr(metadata, "num_forward", None)
    return boundary if isinstance(boundary, int) else None


def _report_strides(context: Any, ex: Exploration, graph_module: torch.fx.GraphModule) -> None:
    """Tell AOTAutograd the strides of the saved activations the layout pass stores channels-last
    (decompose/layout.py), as Inductor does after its layout choice: it compiles the backward graph for them."""
    reported = getattr(context, "output_strides", None)
    graph = ex.decomposed.graph
    tensors = [isinstance(value, torch.Tensor) for value in output_values(graph_module)]
    count = len(graph.outputs) - len(ex.captured.result.mutations)  # (then the new values of mutated inputs)
    if reported is None or sum(tensors) != count:
        return
    ours = iter(output_strides(graph)[:count])
    reported.extend(next(ours) if tensor else None for tensor in tensors)  # one per AOTAutograd output


def compile_graph(graph_module: torch.fx.GraphModule, example_inputs: Sequence[Any], *, index: int | None = None,
                  role: str = "forward", ended_by: str = "", cudagraphs: bool | str = False,
                  conv_layout: str = "auto") -> Callable[..., Any]:
    """Compile one aten graph (forward, backward or inference) into fusionlab kernels (replayed from CUDA graphs
    with `cudagraphs=`, convolutions in the layout `conv_layout` chooses, as in `explore`)."""
    from functorch.compile import make_boxed_func

    dynamic_positions = [i for i, value in enumerate(example_inputs) if _is_symbolic(value)]
    if role == "backward":
        _views_as_reshapes(graph_module)
    graph = BackendGraph(next(_numbers) if index is None else index, role, graph_module, ended_by,
                         bool(dynamic_positions), _saved_outputs_from() if role == "forward" else None,
                         _input_updates() if role != "backward" else (),
                         _static_inputs() if role != "backward" else ())
    real = [_real(v) for v in example_inputs]
    context = torch._guards.TracingContext.try_get()
    first, first_constants = _explore(graph, real, cudagraphs, conv_layout)
    if graph.saved_outputs_from is not None and not dynamic_positions:
        _report_strides(context, first, graph_module)
    graph.explorations[_sizes_key(real, dynamic_positions)] = first
    specialised: dict[tuple[Any, ...], tuple[Exploration, list[torch.Tensor]]] = {
        _sizes_key(real, dynamic_positions): (first, first_constants)}
    _serials[id(graph)] = next(_compiled)
    if len(graphs) == graphs.maxlen:
        _serials.pop(id(graphs[0]), None)
    graphs.append(graph)

    def run(*args: Any) -> Any:
        ex, constants = first, first_constants
        if dynamic_positions:
            key = _sizes_key(args, dynamic_positions)
            if key not in specialised:
                specialised[key] = _explore(graph, args, cudagraphs, conv_layout)
                graph.explorations[key] = specialised[key][0]
            ex, constants = specialised[key]
        ex.learn_integer_ranges(args)  # (the first call only: `verify` draws valid indices from them)
        outputs = iter(ex.run_flat(constants + [a for a in args if isinstance(a, torch.Tensor)]))
        return fill_template(ex.captured.result.output_template, outputs)

    return make_boxed_func(run)  # type: ignore[no-any-return]


def _graph_break() -> str:
    """Why Dynamo ended the graph it is compiling now: "" when the function returned, else the break's reason and
    the user's source line (read from Dynamo's translator; "" where this torch does not say)."""
    try:
        from torch._dynamo.symbolic_convert import InstructionTranslator

        reason = InstructionTranslator.current_tx().output.compile_subgraph_reason
    except Exception:  # noqa: BLE001 - a private API: no reason rather than no graph
        return ""
    if reason is None or not reason.graph_break:
        return ""
    where = ""
    if reason.user_stack:
        frame = reason.user_stack[-1]
        line = (frame.line or "").strip()
        where = f" at {frame.filename}:{frame.lineno}" + (f" `{line}`" if line else "")
    text = reason.reason.strip().splitlines()[0]
    if text.startswith("generic_jump"):  # Dynamo's name for a branch it cannot follow
        text = "a Python branch on a tensor's value (if/while on a tensor): Dynamo runs it in Python, between graphs"
    return f"graph break{where}: {text}"


def backend(graph_module: torch.fx.GraphModule, example_inputs: Sequence[Any], *, mode: str | None = None,
            options: dict[str, Any] | None = None) -> Callable[..., Any]:
    """The Dynamo backend: each Dynamo graph gets a number, AOTAutograd splits it into forward and backward (or one
    inference graph), and each of those is compiled by `compile_graph` under that label.

    `torch.compile(model, backend="fusionlab", options={"cudagraphs": True})` replays every graph from CUDA graphs
    (`"overwrite"` as in `explore`); `mode="reduce-overhead"` is the same as `options={"cudagraphs": True}`;
    `options={"conv_layout": ...}` as in `explore`."""
    cudagraphs = _cudagraphs_option(mode, options or {})
    conv_layout = check_layout((options or {}).get("conv_layout", "auto"))
    index = next(_numbers)
    ended_by = _graph_break()
    # a mask built from sizes alone that masks nothing (transformers' under torch.compile) would send attention,
    # forward and backward, to PyTorch's math path: dropped before AOTAutograd differentiates the graph
    drop_empty_masks(graph_module)

    def compiler(role: str) -> Callable[..., Any]:
        return functools.partial(compile_graph, index=index, role=role, ended_by=ended_by, cudagraphs=cudagraphs,
                                 conv_layout=conv_layout)

    # min-cut partition (Inductor's): the backward recomputes cheap values (a batch norm's output, a relu) from
    # fewer saved ones, over the joint graph decomposed as `_joint_decompositions` says.
    # keep_inference_input_mutations: a data-only mutation of an input that needs no gradient (a batch norm's
    # running statistics, in training too) stays in the graph, where fusionlab writes it (one copy launch per dtype,
    # or inside a CUDA graph), instead of AOTAutograd's epilogue (one copy_ per statistic, on the host)
    split = aot_autograd(fw_compiler=compiler("forward"), bw_compiler=compiler("backward"),
                         inference_compiler=compiler("inference"), keep_inference_input_mutations=True,
                         decompositions=_joint_decompositions(), partition_fn=min_cut_rematerialization_partition)
    return split(graph_module, example_inputs)  # type: ignore[no-any-return]


@functools.cache
def _joint_decompositions() -> dict[Any, Any]:
    """What AOTAutograd decomposes before it partitions the joint graph: batch norm, forward and backward, into the
    means, variances and pointwise ops it is made of (as Inductor's table does), so that the min-cut partition sees
    its normalised output and the relu after it as cheap to recompute from the convolution's result and the
    statistics, and the forward saves those instead (ResNet-50's forward: 483 outputs where it returned 638).
    Log-softmax, its backward and `nll_loss_backward` likewise, with `detach` (an alias: the min-cut never
    recomputes through a detach, and autograd detaches the log-softmax it saves): the backward then recomputes a
    causal LM's log-probabilities from the bf16 logits and each row's max and log-sum, where the forward wrote them
    as a float32 [tokens, vocabulary] table (GPT-2 at 8x512 tokens: 0.8 GB a step). The fusion pass decomposes
    what is left (decompose/)."""
    from torch._decomp import get_decompositions

    aten = torch.ops.aten
    return get_decompositions([aten._native_batch_norm_legit_functional, aten.native_batch_norm_backward,
                               aten._native_batch_norm_legit, aten.native_batch_norm,
                               aten._native_batch_norm_legit_no_training,
                               aten.detach, aten._log_softmax, aten._log_softmax_backward_data,
                               aten.nll_loss_backward])


def _cudagraphs_option(mode: str | None, options: dict[str, Any]) -> bool | str:
    """torch.compile's `mode=` and `options=` as the backend reads them (Dynamo passes both to a custom backend)."""
    unknown = sorted(set(options) - {"cudagraphs", "conv_layout"})
    if unknown:
        raise ValueError(f"the fusionlab backend has no option {', '.join(map(repr, unknown))}: its options are "
                         "{'cudagraphs': False | True | 'overwrite', 'conv_layout': 'auto' | 'channels_last' | "
                         "'as_traced'}")
    if mode not in (None, "default", "reduce-overhead"):
        raise ValueError(f"the fusionlab backend takes mode='default' or 'reduce-overhead' (CUDA graphs), got "
                         f"{mode!r}")
    return cudagraph_mode(options.get("cudagraphs", mode == "reduce-overhead"))


register_backend(name="fusionlab")(backend)
