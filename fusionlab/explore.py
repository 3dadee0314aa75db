"""`fusionlab.explore`: the lazy pipeline over one function and its example inputs.

    >>> ex = explore(lambda x, b: torch.nn.functional.gelu(x + b), torch.randn(8, 16), torch.randn(16))
    >>> ex.fused
    Fused(policy='default', 1 kernel, 0 extern, 7 decisions)
    >>> out = ex(torch.randn(8, 16), torch.randn(16))
    >>> ex.verify().ok
    True

An `Exploration` only caches the stages: `ex.decomposed` is `ex.captured.decompose(...)` with its options, and so on
down the pipeline (fusionlab.stages).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch
import torch.utils._pytree as pytree

from fusionlab.capture import check_aliasing, check_guards, check_inputs, fill_template, flatten_call
from fusionlab.decompose import decomposition_rules
from fusionlab.decompose.layout import check_layout
from fusionlab.eager_grad import needs_grad, run_with_grad
from fusionlab.fusion.policy import Policy, resolve_policy
from fusionlab.localise import Programs
from fusionlab.runtime.cudagraphs import CudaGraphs, cudagraph_mode, refuse_cpu, write_inputs
from fusionlab.stages import Captured, Compiled, Decomposed, Fused, Generated, capture
from fusionlab.verify import VerifyReport, verify_call

__all__ = ["Exploration", "capture", "explore"]


class _TensorSpec(NamedTuple):
    """What a released example tensor looked like; for an integer tensor, the range of its values where a call
    showed them (`low`, `high`: indices stay valid when `verify` draws fresh ones in that range)."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device
    low: int | None = None
    high: int | None = None

    @property
    def integer(self) -> bool:
        return not (self.dtype.is_floating_point or self.dtype.is_complex or self.dtype == torch.bool)

    def make(self) -> torch.Tensor:
        tensor = torch.empty_strided(self.shape, self.stride, dtype=self.dtype, device=self.device)
        if self.integer and self.low is not None and self.high is not None and tensor.numel():
            tensor.fill_(self.low)  # its range as the call showed it, which `random_like` draws from
            tensor[(0,) * tensor.dim()] = self.high
        return tensor


class Exploration:
    """One function and its example inputs; each stage is computed on first use, once.

    `captured=` or `decomposed=` start it from stages made already (by another exploration of the same function
    and options, as `with_fusion` does): those are reused, not computed again. `stages_of=` reuses every stage
    another exploration has made, up to its compiled program (the backend's, for a graph identical to one it has
    compiled: fusionlab.dynamo_backend).

        >>> again = Exploration(ex.fn, ex.example_args, ex.example_kwargs, decomposed=ex.decomposed, policy="none")
    """

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], *,
                 policy: str | Policy = "default", dynamic: bool = False, forbid: Sequence[tuple[str, str]] = (),
                 force: Sequence[tuple[str, str]] = (), looped_reductions: bool = False, autotune: bool = False,
                 matmul: str = "extern", cudagraphs: bool | str = False, conv_layout: str = "auto",
                 captured: Captured | None = None, decomposed: Decomposed | None = None,
                 stages_of: Exploration | None = None) -> None:
        self.fn = fn
        self.example_args = args
        self.example_kwargs = kwargs
        self.policy = resolve_policy(policy)
        self.dynamic = dynamic
        self.forbid = tuple(forbid)
        self.force = tuple(force)
        self.looped_reductions = looped_reductions
        self.autotune = autotune
        self.matmul = matmul
        self._rules = decomposition_rules(matmul)  # checks the option now, not at the first stage
        self.conv_layout = check_layout(conv_layout)
        self.cudagraphs = cudagraph_mode(cudagraphs)
        # the backend's forward graph of a training step: its outputs from this position on are the activations only
        # its backward graph reads (they may be stored channels-last: decompose/layout.py; with cudagraphs=True they
        # are handed out uncopied: fusionlab.runtime.cudagraphs). Set before the first stage is asked for.
        self.saved_outputs_from: int | None = None
        # the backend's outputs that AOTAutograd copies into mutated inputs at once (with cudagraphs=True handed out
        # uncopied too)
        self.input_updates: tuple[int, ...] = ()
        # more inputs CUDA graphs read in place (the backend's: a module's parameters and buffers, as Dynamo marks
        # them): a batch norm's running statistics are then updated by the graph itself
        self.static_inputs: tuple[int, ...] = ()
        # the strides eager gives each output, where the caller knows them better than a trace of this graph does
        # (the backend's, from AOTAutograd's graph); None: read from the capture
        self.eager_output_strides: list[tuple[int, ...] | None] | None = None
        if self.cudagraphs:
            held = list(fn.parameters()) if isinstance(fn, torch.nn.Module) else []
            refuse_cpu(pytree.tree_leaves((args, kwargs)) + held, "the example inputs")
        if decomposed is not None:
            if captured is not None and decomposed.previous is not captured:
                raise ValueError("decomposed= was not made from captured=: pass one of them, or the decomposition "
                                 "of the capture (captured.decompose(...))")
            captured = decomposed.previous
            vars(self)["decomposed"] = decomposed  # the cached_property's own slot: used as if computed here
        if captured is not None:
            vars(self)["captured"] = captured
        if stages_of is not None:
            for stage in ("captured", "decomposed", "fused", "generated", "compiled"):
                if stage in vars(stages_of):  # (the cached_properties it has computed)
                    vars(self)[stage] = vars(stages_of)[stage]
        self._checked: set[tuple[Any, ...]] = set()
        # A plain function of positional tensors (no module, no closure state): calls need no pytree flattening.
        self._plain_call = (not isinstance(fn, torch.nn.Module) and not kwargs
                            and all(isinstance(a, torch.Tensor) for a in args))

    @property
    def example_args(self) -> tuple[Any, ...]:
        """The example positional inputs; after `release_examples()`, fresh uninitialised tensors of their shapes,
        strides, dtypes and devices on each read."""
        if self._example_specs is None:
            return self._example_args
        return tuple(spec.make() if isinstance(spec, _TensorSpec) else spec for spec in self._example_specs)

    @example_args.setter
    def example_args(self, args: tuple[Any, ...]) -> None:
        self._example_args = args
        self._example_specs: tuple[Any, ...] | None = None
        self._ranges_learnt = False

    def release_examples(self) -> None:
        """Let go of the example tensors, keeping what they look like (shape, strides, dtype, device): the backend
        explores each graph on uninitialised stand-ins of the sizes Dynamo saw, and holding them would hold as much
        memory as the graph's inputs (a training step's saved activations) for as long as the graph is kept."""
        if self._example_specs is not None:
            return  # released already: the specs describe the tensors, `_example_args` is empty
        self._example_specs = tuple(_TensorSpec(tuple(a.shape), a.stride(), a.dtype, a.device)
                                    if isinstance(a, torch.Tensor) else a for a in self._example_args)
        self._example_args = ()

    def learn_integer_ranges(self, args: Sequence[Any]) -> None:
        """Keep the range of each integer tensor among `args` (a call's real inputs, in the examples' order) for
        released examples that have none: the backend explores on uninitialised stand-ins, so `verify` learns
        which indices are valid from the graph's first call. Costs one synchronisation, the first time only."""
        specs = self._example_specs
        if specs is None or self._ranges_learnt or len(args) != len(specs):
            return
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            return  # inside a caller's CUDA graph: no reading values back
        self._ranges_learnt = True
        wanted = [i for i, spec in enumerate(specs) if isinstance(spec, _TensorSpec) and spec.integer
                  and isinstance(args[i], torch.Tensor) and args[i].numel()]
        if not wanted:
            return
        ranges = torch.stack([torch.stack(torch.aminmax(args[i].detach())).to(torch.int64) for i in wanted])
        learnt = list(specs)
        for i, (low, high) in zip(wanted, ranges.tolist()):
            learnt[i] = specs[i]._replace(low=low, high=high)
        self._example_specs = tuple(learnt)

    def _refuse_unknown_integers(self) -> None:
        specs = self._example_specs or ()
        unknown = [f"#{i} ({spec.dtype}, shape {list(spec.shape)})" for i, spec in enumerate(specs)
                   if isinstance(spec, _TensorSpec) and spec.integer and spec.low is None and 0 not in spec.shape]
        if unknown:
            raise ValueError(
                f"verify() needs the range of this graph's integer input(s) {', '.join(unknown)} (indices, say), and "
                "has none: the backend traced the graph on uninitialised stand-ins and learns the ranges from the "
                "graph's first call. Call the compiled function once, then verify().")

    @property
    def example_inputs(self) -> tuple[Any, ...]:
        return self.example_args

    def __repr__(self) -> str:
        name = getattr(self.fn, "__name__", type(self.fn).__name__)
        return f"Exploration({name}, policy={self.policy.name!r}, dynamic={self.dynamic})"

    # -- stages ---------------------------------------------------------------------------------
    @functools.cached_property
    def captured(self) -> Captured:
        return capture(self.fn, *self.example_args, dynamic=self.dynamic, kwargs=self.example_kwargs)

    @functools.cached_property
    def decomposed(self) -> Decomposed:
        strides = self.eager_output_strides
        if strides is not None:  # (the new values of mutated inputs follow the function's outputs: no caller's)
            strides = list(strides) + [None] * len(self.captured.result.mutations)
        return self.captured.decompose(self._rules, self.conv_layout, self.saved_outputs_from, strides)

    @functools.cached_property
    def fused(self) -> Fused:
        return self.decomposed.fuse(self.policy, self.forbid, self.force)

    @functools.cached_property
    def generated(self) -> Generated:
        return self.fused.generate(self.looped_reductions)

    @functools.cached_property
    def compiled(self) -> Compiled:
        return self.generated.compile(self.autotune)

    @functools.cached_property
    def graphed(self) -> CudaGraphs:
        """The compiled program replayed from CUDA graphs (with `cudagraphs=`; fusionlab.runtime.cudagraphs)."""
        static = {i for i, spec in enumerate(self.captured.inputs) if spec.kind != "input"} | set(self.static_inputs)
        name = getattr(self.fn, "__name__", type(self.fn).__name__)
        return CudaGraphs(self.compiled, static=static, clone_outputs=self.cudagraphs != "overwrite", name=name,
                          kept_from=self.saved_outputs_from, handed=self.input_updates, writes=self._writes)

    @functools.cached_property
    def _writes(self) -> tuple[tuple[int, int], ...]:
        """(input, output) per value the function writes into an input: the output holds its new value."""
        return tuple((m.input_index, m.output_index) for m in self.captured.result.mutations)

    @functools.cached_property
    def _flat_output(self) -> bool:
        """Whether the function returns a flat tuple or list of leaves."""
        spec = self.captured.result.output_spec
        children = ([spec.child(i) for i in range(spec.num_children)] if callable(getattr(spec, "child", None))
                    else list(spec.children_specs))  # torch 2.13 / 2.11
        return spec.type in (tuple, list) and all(c.is_leaf() for c in children)

    # -- running --------------------------------------------------------------------------------
    def flat_inputs(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
        state = self.captured.result.state
        simple = (self._plain_call and not kwargs and len(args) == len(self.example_args)
                  and all(isinstance(a, torch.Tensor) for a in args)
                  and (state is None or not (state.roots or state.places)))
        tensors = list(args) if simple else flatten_call(self.captured.result, args, kwargs)
        # A call like the last checked one (same shapes, dtypes, devices) needs no second check.
        signature = tuple((t.shape, t.dtype, t.device) for t in tensors)
        if signature not in self._checked:
            check_inputs(self.captured.result, tensors)
            check_guards(self.captured.result, tensors)
            self._checked.add(signature)
        check_aliasing(self.captured.result, tensors)  # every call: memory, not shapes
        return tensors

    def run_flat(self, tensors: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        """Run on graph inputs in order (parameters and buffers first); returns the flat outputs. Values the
        function wrote into its inputs or buffers are copied back into them, as eager would have."""
        result = self.captured.result
        with torch.no_grad():
            if self.cudagraphs:  # (the graph writes the mutated inputs itself)
                outputs = tuple(self.graphed(*tensors))
            else:
                outputs = tuple(self.compiled(*tensors))
                # one copy launch per dtype (a model's batch norms: hundreds of statistics)
                write_inputs(tensors, outputs, self._writes)
        return outputs[: result.user_outputs] if result.mutations else outputs

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        tensors = self.flat_inputs(args, kwargs)
        raw = self._raw_inputs(args, kwargs) if torch.is_grad_enabled() else ()
        if needs_grad(raw) and self.captured.result.call_flat is not None:
            # An input or parameter requires grad: the output must too (the backward differentiates eager).
            outputs = iter(run_with_grad(lambda flat: self.run_flat(tensors), self.captured.result.call_flat, raw))
        else:
            outputs = iter(self.run_flat(tensors))
        result = self.captured.result
        leaves = fill_template(result.output_template, outputs)
        if self._flat_output:  # a tuple or list of tensors: no tree to rebuild (host time, every call)
            return leaves if result.output_spec.type is list else tuple(leaves)
        return pytree.tree_unflatten(leaves, result.output_spec)

    def _raw_inputs(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
        """The graph inputs as the caller holds them (parameters not detached), to see what requires grad."""
        state = self.captured.result.state
        if not kwargs and all(isinstance(a, torch.Tensor) for a in args):
            tensors = list(args)
        else:
            tensors = [leaf for leaf in pytree.tree_leaves((args, kwargs)) if isinstance(leaf, torch.Tensor)]
        if state is not None and (state.roots or state.places):
            named = state.named()
            tensors = [named[spec.name][0] for spec in self.captured.inputs if spec.kind != "input"] + tensors
        return tensors

    def verify(self, seed: int | None = None, localise: bool | None = None) -> VerifyReport:
        """Run eager and fused on separate copies of fresh random inputs: the max abs/rel error per output and per
        input or buffer after the call. Where something differs (or with `localise=True`) the captured, decomposed
        and generated programs are compared value by value too: `report.first_divergence` names where they part."""

        def programs() -> Programs:
            return Programs(self.captured.result, self.decomposed.graph, self.decomposed.values,
                            self.generated.kernels, self.compiled.function)

        self._refuse_unknown_integers()
        return verify_call(self.fn, self.example_args, self.example_kwargs, self.captured.result, self,
                           self.flat_inputs, programs, seed, localise)

    def with_fusion(self, forbid: Sequence[tuple[str, str]] = (),
                    force: Sequence[tuple[str, str]] = ()) -> Exploration:
        """A new exploration with decisions changed (node names as in `decomposed`; see `fused.decisions`)."""
        result = Exploration(self.fn, self.example_args, self.example_kwargs, policy=self.policy,
                             dynamic=self.dynamic, forbid=self.forbid + tuple(forbid),
                             force=self.force + tuple(force), looped_reductions=self.looped_reductions,
                             autotune=self.autotune, matmul=self.matmul, cudagraphs=self.cudagraphs,
                             conv_layout=self.conv_layout, decomposed=self.decomposed)
        result.fused  # noqa: B018 - validate the request now: an illegal forced fusion raises here
        return result

    # -- the measuring and viewing layers (optional extras, imported on use) ----------------------
    def benchmark(self, **options: Any) -> Any:
        """Timings of eager, fusionlab and Inductor: a `BenchReport` (see fusionlab.measure.bench)."""
        from fusionlab.measure.bench import benchmark

        return benchmark(self, **options)

    def inductor(self, cpu_backend: str = "cpp") -> Any:
        """TorchInductor's kernels and fusion decisions for the same function (see fusionlab.inductor)."""
        from fusionlab.inductor import inductor_view

        return inductor_view(self.fn, self.example_args, captured_node_names=self.captured.aten_nodes,
                             cpu_backend=cpu_backend)  # type: ignore[arg-type]

    def show(self, **options: Any) -> Any:
        """The Explorer widget: graph, groups, sources and timings, linked (`inductor=False` skips Inductor)."""
        from fusionlab.widgets import Explorer

        taken = [name for name, parameter in inspect.signature(Explorer).parameters.items()
                 if parameter.kind == inspect.Parameter.KEYWORD_ONLY]
        unknown = sorted(set(options) - set(taken) - {"layout"})
        if unknown:
            raise TypeError(f"show() takes {', '.join(f'{name}=' for name in taken)} (and a widget's layout=), got "
                            f"{', '.join(f'{name}=' for name in unknown)}: the Explorer times nothing until its "
                            "timings tab is run; to_html(timings=False) is the page's option")
        return Explorer(self, **options)

    def to_html(self, path: str | None = None, **options: Any) -> str:
        """All views as one self-contained HTML page; written to `path` when given (`timings=False` skips timing)."""
        from fusionlab.report import exploration_html

        page = exploration_html(self, **options)
        if path is not None:
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(page)
        return page


def explore(fn: Callable[..., Any], *example_inputs: Any, policy: str | Policy = "default",
            dynamic: bool = False, looped_reductions: bool = False, autotune: bool = False,
            matmul: str = "extern", cudagraphs: bool | str = False, conv_layout: str = "auto",
            kwargs: dict[str, Any] | None = None, **example_kwargs: Any) -> Exploration:
    """Start exploring `fn` on example inputs. Nothing runs until a stage is asked for.

    `looped_reductions=True` forces looped reductions even where a row fits in registers; `autotune=True` times a
    small set of block sizes and warps per kernel and shape on the first CUDA launch and keeps the fastest (the
    choices and their timings are on `ex.compiled.kernels`). `matmul="triton"` turns 2-D matrix products (mm,
    addmm, F.linear) into generated Triton matmuls with their pointwise consumers fused as an epilogue; the default
    `"extern"` runs them in cuBLAS between kernels. `cudagraphs=True` (CUDA only) replays each call from a CUDA graph
    captured per input layout, and results of earlier calls stay as they were (an output still held at the next
    call is copied from then on); `cudagraphs="overwrite"` returns the graph's own
    output memory, overwritten by the next call (fusionlab.runtime.cudagraphs). `conv_layout="auto"` runs 2-D
    convolutions on CUDA in channels-last order, the kernels around them storing their values so, and in a training
    step's graphs (the backend's forward and backward, or any graph with a convolution backward) also the saved
    activations and the convolutions' backwards (decompose/layout.py: `in_training`);
    `"channels_last"` does it on every device; `"as_traced"` keeps the layouts eager gives.
    Keyword arguments of `fn` go after the inputs (`explore(fn, x, scale=2.0)`), or in `kwargs={...}` where one is
    named like an option of explore."""
    if not callable(fn):
        raise TypeError(f"explore() needs a function or nn.Module, got {type(fn).__name__}")
    if kwargs is None:
        _refuse_ambiguous_options(fn, {"policy": policy, "dynamic": dynamic, "looped_reductions": looped_reductions,
                                       "autotune": autotune, "matmul": matmul, "cudagraphs": cudagraphs,
                                       "conv_layout": conv_layout})
    else:
        example_kwargs = {**kwargs, **example_kwargs}
    return Exploration(fn, example_inputs, example_kwargs, policy=policy, dynamic=dynamic,
                       looped_reductions=looped_reductions, autotune=autotune, matmul=matmul, cudagraphs=cudagraphs,
                       conv_layout=conv_layout)


def _refuse_ambiguous_options(fn: Callable[..., Any], given: dict[str, Any]) -> None:
    """`explore(fn, x, policy=...)` where `fn` itself takes `policy`: say which one it went to, and how to choose."""
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    try:
        parameters = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return
    defaults = inspect.signature(explore).parameters
    for name, value in given.items():
        if name in parameters and value is not defaults[name].default:
            raise TypeError(f"{name}={value!r} is ambiguous: explore() has an option {name!r} and your function "
                            f"has a parameter {name!r}. Pass your function's keyword arguments in kwargs=: "
                            f"fl.explore(fn, *inputs, kwargs={{{name!r}: ...}}) (explore's own options stay "
                            f"keywords beside it)")
