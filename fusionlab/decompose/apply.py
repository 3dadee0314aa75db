"""Decompose: the captured aten graph -> fusionlab's primitive graph, through one rule table (`rules.RULES`).

An aten op with no rule, or whose rule cannot handle its arguments, becomes an extern node: it runs as the
eager aten call between kernels, and every view marks it as such. Its reason says why: some ops are extern on
purpose (`DELIBERATE_EXTERNS`: products in cuBLAS, convolutions in cuDNN, fused attention, window ops, random ops),
the rest lack a rule.

    >>> graph = decompose(capture(torch.sigmoid, (torch.randn(4),), {})).graph
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sympy
import torch
import torch.utils._pytree as pytree

from fusionlab.capture import CaptureError, CaptureResult, output_values, strides_of
from fusionlab.capture.decompositions import decomposed_from
from fusionlab.decompose import attention
from fusionlab.decompose import layout as layouts
from fusionlab.decompose.builder import Builder, Rule, RuleNotApplicable, short_name
from fusionlab.decompose.operand_layout import attention_operands_as_traced
from fusionlab.decompose.output_layout import eager_output_strides
from fusionlab.decompose.reshape_moves import move_reshapes
from fusionlab.decompose.rules import RULES
from fusionlab.ir import Graph, Node, Ref, TensorType, draws_random_numbers
from fusionlab.names import sanitize

aten = torch.ops.aten


def _ops(*names: str) -> tuple[Any, ...]:
    """The op packets this torch has (torch 2.11 and 2.13 name a few differently)."""
    return tuple(packet for name in names if (packet := getattr(aten, name, None)) is not None)


_PRODUCT = ("runs in cuBLAS: a matrix product is the vendor library's work (matmul='extern', the default; "
            "fl.explore(..., matmul='triton') generates 2-D float products in Triton)")
_CONVOLUTION = "runs in cuDNN: a convolution (and its gradient) is the vendor library's work"
_ATTENTION = ("runs PyTorch's fused attention kernel (flash / memory-efficient attention): already one kernel that "
              "never stores the score matrix")
_WINDOW = ("is a sliding-window op (each output reads a window of its input, or scatters back into one): runs in "
           "eager PyTorch")
_EMBEDDING_GRAD = ("is a scatter-add with repeated indices (the rows of a token seen twice add up): a kernel would "
                   "need atomic adds; runs in eager PyTorch")
RANDOM = ("draws random numbers: runs in eager PyTorch, in program order, so from the same generator state "
          "(torch.manual_seed) it draws what eager draws")

#: Ops that run as extern calls on purpose, and why; each reason follows the op's name ("aten.mm.default runs in
#: cuBLAS: ..."). Random ops (tagged nondeterministic_seeded) are found by their tag and say RANDOM.
DELIBERATE_EXTERNS: dict[Any, str] = {
    **dict.fromkeys(_ops("mm", "addmm", "bmm", "baddbmm", "matmul", "mv", "addmv", "dot", "vdot", "addbmm",
                         "linear", "_int_mm", "_scaled_mm"), _PRODUCT),
    **dict.fromkeys(_ops("convolution", "_convolution", "convolution_backward", "cudnn_convolution",
                         "cudnn_convolution_transpose", "convolution_overrideable",
                         "convolution_backward_overrideable", "mkldnn_convolution"), _CONVOLUTION),
    **dict.fromkeys(_ops("_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_backward",
                         "_scaled_dot_product_flash_attention_for_cpu",
                         "_scaled_dot_product_flash_attention_for_cpu_backward",
                         "_scaled_dot_product_efficient_attention", "_scaled_dot_product_efficient_attention_backward",
                         "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_cudnn_attention_backward",
                         "_scaled_dot_product_fused_attention_overrideable",
                         "_scaled_dot_product_fused_attention_overrideable_backward", "_flash_attention_forward",
                         "_flash_attention_backward", "_efficient_attention_forward",
                         "_efficient_attention_backward"), _ATTENTION),
    **dict.fromkeys(_ops("max_pool2d_with_indices", "max_pool2d_with_indices_backward", "max_pool3d_with_indices",
                         "max_pool3d_with_indices_backward", "avg_pool2d", "avg_pool2d_backward", "avg_pool3d",
                         "avg_pool3d_backward", "_adaptive_avg_pool2d", "_adaptive_avg_pool2d_backward",
                         "adaptive_max_pool2d", "adaptive_max_pool2d_backward", "max_unpool2d", "im2col", "col2im"),
                    _WINDOW),
    **dict.fromkeys(_ops("embedding_dense_backward", "embedding_backward"), _EMBEDDING_GRAD),
}


def deliberate_reason(target: Any) -> str | None:
    """Why `target` runs as an extern op on purpose ("aten.mm.default runs in cuBLAS: ..."), or None when it only
    lacks a rule."""
    packet = getattr(target, "overloadpacket", None)
    why = DELIBERATE_EXTERNS.get(target) or DELIBERATE_EXTERNS.get(packet)
    if why is None and torch.Tag.nondeterministic_seeded in getattr(target, "tags", ()):
        why = RANDOM
    return None if why is None else f"{short_name(target)} {why}"


@dataclass(frozen=True)
class DecomposeResult:
    graph: Graph
    fallbacks: tuple[tuple[str, str], ...]  # (aten node, reason it runs as an extern op)
    values: tuple[tuple[str, str], ...] = ()  # (aten node, the IR value holding its result), in program order


def decompose(captured: CaptureResult, rules: dict[Any, Rule] | None = None, layout: str = "auto",
              saved_from: int | None = None,
              output_strides: Sequence[tuple[int, ...] | None] | None = None) -> DecomposeResult:
    """Apply the rule table to every aten node, in program order; then choose the convolutions' layout (`layout`:
    decompose/layout.py; the outputs from `saved_from` on are saved activations, which may come back
    channels-last); then lay out the caller's outputs as eager does (decompose/output_layout.py), and the fused
    attentions' operands as traced (decompose/operand_layout.py)."""
    table = RULES if rules is None else rules
    nodes: list[Node] = []
    builder = Builder(nodes, {})
    env: dict[str, Any] = {}
    fallbacks: list[tuple[str, str]] = []
    inputs: list[str] = []
    outputs: list[str] = []
    values: list[tuple[str, str]] = []
    display = {spec.placeholder: sanitize(spec.name) for spec in captured.inputs}
    attentions = attention.match(captured.graph_module)
    provenance = {node.name: (node.module, node.source) for node in captured.aten_nodes}
    for fx_node in captured.graph_module.graph.nodes:
        builder.module, builder.source = provenance.get(fx_node.name, ("", ""))
        if fx_node.op == "placeholder":
            builder.origin = fx_node.name
            ref = builder._add("input", "input", (), captured.types[fx_node.name], base=display[fx_node.name])
            inputs.append(ref.name)
            env[fx_node.name] = ref
        elif fx_node.op == "output":
            outputs.extend(_apart(builder, [env[value.name] for value in pytree.tree_leaves(fx_node.args[0])],
                                  pytree.tree_leaves(fx_node.args[0])))
        elif fx_node.op == "get_attr":
            env[fx_node.name] = _tensor_constant(builder, fx_node, captured, fallbacks)
        elif fx_node.target is operator.getitem:
            env[fx_node.name] = env[fx_node.args[0].name][fx_node.args[1]]
        elif fx_node.op == "call_function":
            _refuse_data_dependent(fx_node, captured)
            sizes = captured.multi_types.get(fx_node.name)
            if fx_node.name in captured.sizes:  # a size computation (`a.shape[0] * 2`): its value or expression
                env[fx_node.name] = captured.sizes[fx_node.name]
                continue
            if (fx_node.name not in captured.types and sizes is None) or (sizes is not None and not any(sizes)):
                env[fx_node.name] = None  # nothing a later node can use (a symbolic bool, an assertion)
                continue
            if fx_node.name in attentions:
                env[fx_node.name] = _fused_attention(builder, fx_node, attentions[fx_node.name], env, captured,
                                                     fallbacks)
            else:
                env[fx_node.name] = _apply(builder, table, fx_node, env, captured, fallbacks)
        if isinstance(env.get(fx_node.name), Ref):
            values.append((fx_node.name, env[fx_node.name].name))
    hints = tuple((b.symbol, b.captured_value) for b in captured.symbols)
    live = _live(nodes, outputs)
    running = {node.origin for node in live if node.kind == "extern"}  # an extern no output needs is not run
    graph = move_reshapes(Graph(tuple(inputs), live, tuple(outputs), hints))
    given = output_strides is not None and len(output_strides) == len(graph.outputs)
    strides = list(output_strides or ()) if given else _traced_strides(captured.graph_module, len(graph.outputs))
    converts = layouts.wanted(captured.graph_module, layout)
    training = converts and layouts.in_training(captured.graph_module, layout, saved_from)
    if converts:
        graph = layouts.channels_last(graph, saved_from, training=training, eager_strides=strides)
    # (a training step's saved activations, read by its backward graph alone, keep the layout kernels give them)
    if saved_from is not None:
        strides = strides[:saved_from] + [None] * (len(strides) - saved_from)
    # (the values a returned view chain starts at: eager's strides as traced here, unless this trace's inputs are
    # the channels-last saved activations of a training step)
    traced = {} if given and training else _value_strides(captured.graph_module, values, graph)
    graph = eager_output_strides(graph, strides, traced)
    graph = attention_operands_as_traced(graph, captured.graph_module, saved_from)
    return DecomposeResult(graph, tuple(f for f in fallbacks if f[0] in running), tuple(values))


def _apart(builder: Builder, refs: list[Ref], leaves: list[Any]) -> list[str]:
    """The outputs' values, each one that eager computes apart from an earlier output on the same memory given a
    copy of its own: the decomposition merges equal expressions (`return x * 2, x * 2`), and two outputs sharing a
    buffer would both change when the caller writes into one."""
    from torch.multiprocessing.reductions import StorageWeakRef

    first: dict[str, Any] = {}  # the value an output's memory starts at -> the eager storage of the first on it
    copies: dict[tuple[str, Any], str] = {}  # (a value, its eager storage) -> its copy: one tensor returned twice
    names: list[str] = []
    for position, (ref, leaf) in enumerate(zip(refs, leaves, strict=True)):
        val = leaf.meta.get("val") if isinstance(leaf, torch.fx.Node) else None
        storage = StorageWeakRef(val.untyped_storage()) if isinstance(val, torch.Tensor) else None
        root = builder.producer(ref)
        while root is not None and root.kind == "view" and root.op != "output_of" and root.inputs:
            root = builder.producer(Ref(root.inputs[0]))
        key = root.name if root is not None else ref.name
        if key in first and storage is not None and first[key] is not None and storage != first[key]:
            if (ref.name, storage) not in copies:
                copied = builder._add("pointwise", "copy", (ref,), builder.type_of(ref), {"apart": position})
                copies[(ref.name, storage)] = copied.name
            ref = Ref(copies[(ref.name, storage)])
        else:
            first.setdefault(key, storage)
        names.append(ref.name)
    return names


def _traced_strides(graph_module: torch.fx.GraphModule, count: int) -> list[tuple[int, ...] | None]:
    """The strides eager gives each output of the traced graph (None where unknown, or symbolic)."""
    strides = [strides_of(value) for value in output_values(graph_module)]
    return strides if len(strides) == count else [None] * count


def _value_strides(graph_module: torch.fx.GraphModule, values: list[tuple[str, str]], graph: Graph
                   ) -> dict[str, tuple[int, ...]]:
    """Eager's strides of each IR value that an aten node computed itself (the node is its origin)."""
    fx_nodes = {node.name: node for node in graph_module.graph.nodes}
    found: dict[str, tuple[int, ...]] = {}
    for fx_name, value in values:
        strides = strides_of(fx_nodes[fx_name].meta.get("val")) if fx_name in fx_nodes else None
        if value in graph and graph[value].origin == fx_name and strides is not None:
            found[value] = strides
    return found


def _fused_attention(builder: Builder, fx_node: torch.fx.Node, found: attention.Attention, env: dict[str, Any],
                     captured: CaptureResult, fallbacks: list[tuple[str, str]]) -> Ref:
    """The second product of a matched attention (decompose/attention.py): PyTorch's attention of the 4-D q, k, v
    (contiguous, as the product's result is), viewed as the product's [B * H, T, Dv] result."""
    builder.origin, builder.node, builder.expected = fx_node.name, fx_node, _expected(fx_node, captured)
    q, k, v = (env[n.name] for n in (found.q, found.k, found.v))
    mask = env[found.mask.name] if found.mask is not None else None
    batch, heads, length, _ = builder.type_of(q).shape
    out = TensorType((batch, heads, length, builder.type_of(v).shape[3]), builder.type_of(q).dtype)
    if mask is None:
        target: Any = aten.scaled_dot_product_attention.default
        call: tuple[tuple[Any, ...], dict[str, Any]] = ((q, k, v), {"scale": found.scale})
    else:  # eager's NaN (a safe softmax's zeros) where a row's mask is -inf throughout
        if builder.type_of(mask).dtype != builder.type_of(q).dtype:  # float32 scores of half-precision q, k, v
            mask = builder.cast(mask, builder.type_of(q).dtype)
        target = attention.safe_masked_attention if found.safe else attention.masked_attention
        call = ((q, k, v, mask, found.scale), {})
    reason = f"{short_name(target)} {attention.REASON}"
    fallbacks.append((fx_node.name, reason))
    result = builder.extern(target, *call, reason, out=out)
    result = builder.extern(aten.contiguous.default, (result,), {}, reason, out=out)
    # a product of float32 copies of half-precision q, k, v (the math attention's) is float32: so is the result
    return builder.cast(builder.reshape(result, tuple(builder.expected.shape)), builder.expected.dtype)


def _refuse_data_dependent(fx_node: torch.fx.Node, captured: CaptureResult) -> None:
    """A number read out of a tensor, or a shape that depends on one, is not known when kernels are generated:
    say so, rather than build a graph around a guess."""
    names = {spec.placeholder: spec.name for spec in captured.inputs}
    if fx_node.target in (torch.ops.aten._local_scalar_dense.default, torch.ops.aten.item.default):
        source = fx_node.args[0]
        tensor = names.get(source.name, source.name) if isinstance(source, torch.fx.Node) else "a tensor"
        raise CaptureError(f"{fx_node.name} reads a number out of tensor {tensor!r} (.item(), or a tensor passed where "
                           "PyTorch expects a number): fusionlab captures shapes, not values. Pass a Python number "
                           "instead, or keep this step outside the explored function")
    known = {binding.symbol for binding in captured.symbols}
    found = captured.multi_types.get(fx_node.name) or (captured.types.get(fx_node.name),)
    for value_type in found:
        if value_type is None:
            continue
        for dim in value_type.shape:
            if isinstance(dim, sympy.Expr) and not dim.free_symbols <= known:
                raise CaptureError(f"{fx_node.name} ({short_name(fx_node.target)}) has a data-dependent output shape "
                                   f"({value_type.text()}): fusionlab needs every size known at capture (or a "
                                   "dynamic leading size); keep this step outside the explored function")


def _live(nodes: list[Node], outputs: list[str]) -> tuple[Node, ...]:
    """Drop nodes no output depends on (e.g. the mean and rstd native_layer_norm also returns): a kernel that
    stores nothing is wasted work. A random draw stays, used or not: eager's later draws come after it."""
    needed = set(outputs) | {node.name for node in nodes if draws_random_numbers(node)}
    for node in reversed(nodes):
        if node.name in needed:
            needed.update(node.inputs)
    return tuple(n for n in nodes if n.kind == "input" or n.name in needed)


def _tensor_constant(builder: Builder, fx_node: torch.fx.Node, captured: CaptureResult,
                     fallbacks: list[tuple[str, str]]) -> Ref:
    """A tensor built inside the traced function (`torch.tensor(-inf)`): a literal when it holds one number,
    else a copy made by an extern op."""
    value = getattr(captured.graph_module, str(fx_node.target))
    builder.origin = fx_node.name
    builder.expected = captured.types[fx_node.name]
    if value.dim() == 0 and not value.dtype.is_complex:
        return builder.constant(value.item(), value.dtype)
    reason = "a tensor constant made inside the function: copied in by an extern op"
    fallbacks.append((fx_node.name, reason))
    return builder.extern(torch.ops.aten.clone.default, (value,), {}, reason)  # type: ignore[no-any-return]


def _expected(fx_node: torch.fx.Node, captured: CaptureResult) -> Any:
    if fx_node.name in captured.multi_types:
        return captured.multi_types[fx_node.name]
    return captured.types.get(fx_node.name)


def functional_form(target: Any) -> tuple[Any, bool]:
    """`aten.add_.Tensor` -> (`aten.add.Tensor`, True): in-place ops are decomposed as their functional form."""
    schema = getattr(target, "_schema", None)
    packet = getattr(target, "overloadpacket", None)
    if schema is None or packet is None or not schema.is_mutable or not packet.__name__.endswith("_"):
        return target, False
    functional = getattr(torch.ops.aten, packet.__name__[:-1], None)
    overload = getattr(functional, target._overloadname, None) if functional is not None else None
    return (overload, True) if overload is not None else (target, False)


def _apply(builder: Builder, table: dict[Any, Rule], fx_node: torch.fx.Node, env: dict[str, Any],
           captured: CaptureResult, fallbacks: list[tuple[str, str]]) -> Any:
    target, in_place = functional_form(fx_node.target)
    result = _apply_functional(builder, table, target, fx_node, env, captured, fallbacks)
    first = fx_node.args[0] if fx_node.args else None
    if in_place and isinstance(first, torch.fx.Node):
        env[first.name] = result  # later reads of the mutated tensor see the new value
    return result


def _apply_functional(builder: Builder, table: dict[Any, Rule], target: Any, fx_node: torch.fx.Node,
                      env: dict[str, Any], captured: CaptureResult, fallbacks: list[tuple[str, str]]) -> Any:
    rule = table.get(target) or table.get(getattr(target, "overloadpacket", None))
    builder.origin = fx_node.name
    builder.node = fx_node
    builder.expected = _expected(fx_node, captured)
    args, kwargs = pytree.tree_map(lambda a: env[a.name] if isinstance(a, torch.fx.Node) else a,
                                   (fx_node.args, fx_node.kwargs))
    if rule is not None:
        mark = len(builder.nodes)
        try:
            result = rule(builder, *args, **kwargs)
            return _check(builder, result, builder.expected)
        except (RuleNotApplicable, KeyError, TypeError, ValueError, IndexError) as error:
            for node in builder.nodes[mark:]:
                builder.types.pop(node.name, None)
            del builder.nodes[mark:]
            builder._seen = {k: v for k, v in builder._seen.items() if v.name in builder.types}
            deliberate = deliberate_reason(target)
            reason = (f"{deliberate} ({error})" if deliberate else
                      f"the {short_name(target)} rule does not handle these arguments ({error}): runs as an extern op")
    else:
        reason = deliberate_reason(target) or _missing_rule(target, fx_node)
    fallbacks.append((fx_node.name, reason))
    return builder.extern(target, args, kwargs, reason)


def _missing_rule(target: Any, fx_node: torch.fx.Node) -> str:
    """An op with no rule; one written by a decomposition capture applied says which op it came from."""
    origin = decomposed_from(fx_node)
    source = f" (written by the decomposition of {origin})" if origin else ""
    return f"no decomposition rule for {short_name(target)}{source}: runs as an extern op between kernels"


def _check(builder: Builder, result: Any, expected: Any) -> Any:
    if isinstance(result, Ref):
        if expected is None:
            return result
        actual = builder.type_of(result)
        if tuple(actual.shape) != tuple(expected.shape):
            raise RuleNotApplicable(f"rule produced shape {actual.shape}, aten gives {expected.shape}")
        return builder.cast(result, expected.dtype)
    if isinstance(result, (tuple, list)):
        expected_items = expected if isinstance(expected, tuple) else (None,) * len(result)
        return tuple(_check(builder, r, e) for r, e in zip(result, expected_items))
    return result


