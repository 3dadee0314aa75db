"""Channels-last convolutions: the memory layout a 2-D convolution reads, chosen once the graph is decomposed.

cuDNN runs a half-precision 2-D convolution in NHWC order. Given NCHW tensors, PyTorch converts its input and weight
before it (`nchwToNhwc` kernels) and its result after it: on an H200, ResNet-50's conversions took 0.58 ms of its
4.15 ms in kernels. Inductor converts the graph instead ("layout optimisation"); so does this pass, with
`conv_layout="channels_last"` (or "auto", the default: on CUDA devices):

- A convolution's input that a kernel computes (batch norm, relu, a residual add) is *stored* channels-last by that
  kernel: the value `v` becomes `permute(copy(permute(v, NHWC)), NCHW)`, and every reader of `v` reads that view.
  Fusion takes the copy into `v`'s own kernel (a permute is index arithmetic, fusion/domain.py), which then writes
  NHWC straight away, and nothing else. The caller still gets `v` itself, as eager lays it out.
- An input no kernel computes (a graph input, a pooling op's result) goes through `aten.contiguous(memory_format=
  channels_last)`, which returns it as it is when it is channels-last already: a pooling op keeps its input's layout,
  so the input of a pooling op is stored channels-last like a convolution's.
- The weight the same way: a copy per call, as Inductor's (parameters may change between calls). In training the
  forward saves that copy for the backward, in place of the weight (and the image's copy, in place of the image):
  the backward converts neither again.

A convolution of a channels-last input returns a channels-last result; its type says so, so that no later step takes
it for a dense row-major tensor (kernels read it with the strides it has at run time). Grouped and transposed
convolutions, and those whose result the caller gets, keep the traced layout.

Training (`training=True`: `in_training` says when; "auto" asks for it in a training step's graphs on CUDA, and
"channels_last" always). A training step's forward graph returns the activations its backward graph reads (AOTAutograd's
outputs from `num_forward` on). No caller sees those: they are stored channels-last like any convolution's input, and
the backend reports their strides to AOTAutograd (`output_strides`), which compiles the backward graph for them, as it
does after Inductor's layout choice. In the backward graph, `convolution_backward` gets channels-last operands the same
way; the input's gradient is typed channels-last and the weight's is made row-major for the caller. On an H200,
ResNet-50's step took 8.40 ms of kernels against 10.29 as traced (docs/PERFORMANCE.md, sixteenth round), and the whole
step with CUDA graphs 10.67 ms against 12.80 (seventeenth round).

    >>> graph = channels_last(decompose(capture(resnet_block, (x,), {})).graph)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import torch
import torch.utils._pytree as pytree

from fusionlab.decompose.builder import short_name
from fusionlab.ir import (
    Graph,
    Node,
    Ref,
    TensorType,
    channels_last_strides,
    contiguous_strides,
    is_channels_last,
    unique_names,
)

aten = torch.ops.aten

LAYOUTS = ("auto", "channels_last", "as_traced")
NHWC, NCHW = (0, 2, 3, 1), (0, 3, 1, 2)
# Ops that return their result in their input's layout: an input stored channels-last comes back channels-last.
_KEEPS_LAYOUT = frozenset(op for op in (getattr(aten, name, None) for name in (
    "max_pool2d_with_indices", "avg_pool2d", "_adaptive_avg_pool2d")) if op is not None)
# Pooling ops' backwards: ATen lays the input's gradient out as the input (`self`, their second operand), and copies
# the gradient they read into that layout first.
_POOL_BACKWARDS = frozenset(op for op in (getattr(aten, name, None) for name in (
    "max_pool2d_with_indices_backward", "avg_pool2d_backward", "_adaptive_avg_pool2d_backward")) if op is not None)
_REASON = ("converts to channels-last for the convolution (conv_layout): cuDNN runs it in NHWC order; "
           "no copy when the tensor is channels-last already")
_RESTORE = ("makes row-major what the caller gets from this op (conv_layout): its operand may be channels-last, and "
            "the op's result would follow it")


def check_layout(layout: str) -> str:
    if layout not in LAYOUTS:
        raise ValueError(f"unknown conv_layout {layout!r}: use 'auto' (channels-last convolutions on CUDA devices, "
                         "in training the backward's too; the default), 'channels_last' (on every device) or "
                         "'as_traced' (the layouts eager gives)")
    return layout


def wanted(graph_module: torch.fx.GraphModule, layout: str) -> bool:
    """Whether `layout` asks for channels-last convolutions in this captured graph ("auto": a convolution, or a
    training step's convolution backward, runs on CUDA)."""
    if check_layout(layout) != "auto":
        return layout == "channels_last"
    return _runs(graph_module, (aten.convolution.default, aten.convolution_backward.default), on_cuda=True)


def in_training(graph_module: torch.fx.GraphModule, layout: str, saved_from: int | None) -> bool:
    """Whether the pass converts this graph as part of a training step (its saved activations and convolution
    backwards too): always with "channels_last"; with "auto", a training step's forward graph (it says where its
    saved activations start) or its backward graph (it has a convolution backward)."""
    return layout == "channels_last" or saved_from is not None or \
        _runs(graph_module, (aten.convolution_backward.default,))


def _runs(graph_module: torch.fx.GraphModule, targets: tuple[Any, ...], on_cuda: bool = False) -> bool:
    """Whether the captured graph calls one of `targets` (`on_cuda`: on a CUDA tensor, by its traced values)."""
    for node in graph_module.graph.nodes:
        if node.target in targets and (not on_cuda or any(isinstance(v, torch.Tensor) and v.device.type == "cuda"
                                                          for v in pytree.tree_leaves(node.meta.get("val")))):
            return True
    return False


def channels_last(graph: Graph, hidden_from: int | None = None, training: bool = False,
                  eager_strides: Sequence[tuple[int, ...] | None] = ()) -> Graph:
    """`graph` with its 2-D convolutions in channels-last order (the module's docstring says how). With `training`,
    the outputs from position `hidden_from` on are no caller's (a training step's saved activations, which only its
    backward graph reads): they may come back channels-last, as `output_strides` says; and the convolutions'
    backwards are converted too, their weights' gradients laid out as `eager_strides` (per output) has them."""
    converts = {n.name for n in graph.nodes if _converts(n, graph)}
    visible = _visible(graph, converts, hidden_from if training else None, training)
    convolutions = [n for n in graph.nodes if n.name in converts and n.name not in visible
                    and (training or n.param("target") is aten.convolution.default)]
    if not convolutions:
        return graph
    rewrite = _Rewrite(graph, visible, converts, training)
    rewrite.eager_strides = dict(zip(graph.outputs, eager_strides, strict=False))
    for node in graph.nodes:
        target = node.param("target") if node.kind == "extern" else None
        if getattr(target, "overloadpacket", target) not in _KEEPS_LAYOUT or node.name in visible \
                or not _is_4d(graph, _operand(node, 0)):
            continue
        stored = rewrite.store_channels_last(_operand(node, 0))
        if stored and not node.param("outputs"):
            rewrite.retype(node)  # (max_pool2d_with_indices also returns indices: its type says only the values')
    if training:
        for node in graph.nodes:
            if node.kind == "extern" and getattr(node.param("target"), "overloadpacket", None) in _POOL_BACKWARDS \
                    and node.name not in visible and _is_4d(graph, _operand(node, 0)) \
                    and rewrite.channels_last_at_run_time(_operand(node, 1)):
                rewrite.store_channels_last(_operand(node, 0))  # (when a kernel computes the gradient)
                rewrite.retype(node)
    for node in convolutions:
        backward = node.param("target") is aten.convolution_backward.default
        for position in (0, 1, 2) if backward else (0, 1):  # (the gradient,) the input, the weight
            value = _operand(node, position)
            if not rewrite.store_channels_last(value):
                rewrite.convert_before(node, value)
        rewrite.converting.add(node.name)
        if not backward or _operand(node, 10)[0]:  # (a backward's first result is the input's gradient, if asked)
            rewrite.retype(node)
    if training:
        for name in _between_kernels(graph, visible, rewrite.converting):
            rewrite.store_channels_last(Ref(name))
    return rewrite.graph()


def _between_kernels(graph: Graph, visible: set[str], converting: set[str]) -> list[str]:
    """The activations (4-D, static, more than one channel and position) kernels compute that only kernels and
    converted convolutions read: stored channels-last too, so that a kernel reading channels-last operands does not
    write or read one of them row-major (a residual's gradient in ResNet's backward, read by the next batch norm's:
    those kernels ran 5-9x slower on an H200, reading along channels and writing along rows). A value no kernel
    boundary separates from its readers stays in registers either way."""
    users = graph.users()
    found = []
    for node in graph.nodes:
        shape = node.type.shape
        if node.kind not in ("pointwise", "reduction") or node.type.rank != 4 or node.name in visible \
                or not _layouts_differ(shape):
            continue
        readers = [graph[u] for u in users.get(node.name, ())]
        if readers and all(r.kind in ("pointwise", "reduction") or r.name in converting for r in readers):
            found.append(node.name)
    return found


# A convolution's arguments: how many are tensors (input, weight; or gradient, input, weight), where its `transposed`
# and `groups` flags are, and how many it takes
_CONVOLUTIONS = {aten.convolution.default: (2, 6, 8, 9), aten.convolution_backward.default: (3, 7, 9, 11)}


def _converts(node: Node, graph: Graph) -> bool:
    """A 2-D, ungrouped, untransposed convolution (or its backward) of static shape."""
    if node.kind != "extern" or node.param("target") not in _CONVOLUTIONS:
        return False
    tensors, transposed, groups, count = _CONVOLUTIONS[node.param("target")]
    args, _ = node.param("call")
    if len(args) < count or args[transposed] or args[groups] != 1:
        return False
    operands = [_operand(node, p) for p in range(tensors)]
    return all(isinstance(v, Ref) and _is_4d(graph, v) for v in operands) and node.type.rank == 4 \
        and all(isinstance(d, int) for v in operands for d in graph[v.name].type.shape)


def _visible(graph: Graph, converts: set[str], hidden_from: int | None = None, training: bool = False) -> set[str]:
    """The values whose layout the caller sees: the outputs (before `hidden_from`; a hidden one that is a view of a
    value too, not an op's second result), and what they view (a returned slice of a value has its strides). They
    keep the layout eager gives them, and so do the views and ops that read them in that layout. A convolution's
    backward (of those in `converts`, the convolutions the pass can convert) is not seen through the gradients it
    returns: the weight's is made row-major after it (`_Rewrite.graph`)."""
    shown = graph.outputs if hidden_from is None else graph.outputs[:hidden_from]
    seen = set(shown) | {name for name in graph.outputs if graph[name].kind == "view" and graph[name].op != "output_of"}
    for node in reversed(graph.nodes):
        if node.name in seen and node.kind == "view" and not (training and _of_conv_backward(graph, node, converts)):
            seen.update(node.inputs)
    return seen


def _of_conv_backward(graph: Graph, node: Node, converts: set[str]) -> bool:
    """A result of a convolution's backward that the pass converts (one in `converts`; a grouped or transposed one
    keeps its layout, and is seen through its results like any op)."""
    return node.op == "output_of" and graph[node.inputs[0]].param("target") is aten.convolution_backward.default \
        and node.inputs[0] in converts


def output_strides(graph: Graph) -> list[tuple[int, ...] | None]:
    """Per output of `graph` (as `channels_last` left it), its strides where they are not the ones eager gives:
    a hidden output stored channels-last (a permute of a kernel's NHWC copy, or a converted convolution's result);
    None elsewhere. AOTAutograd compiles the backward graph for the saved activations' strides reported so."""
    strides: list[tuple[int, ...] | None] = []
    for name in graph.outputs:
        node = graph[name]
        shape = node.type.shape
        stored = node.kind == "view" and node.op == "permute" and tuple(node.param("dims")) == NCHW \
            and graph[node.inputs[0]].op == "copy" and graph[graph[node.inputs[0]].inputs[0]].op == "permute"
        if node.type.rank == 4 and all(isinstance(d, int) for d in shape) and (
                stored or (node.kind == "extern" and node.type.strides == channels_last_strides(shape))):
            strides.append(tuple(int(d) for d in channels_last_strides(shape)))
        else:
            strides.append(None)
    return strides


def _layouts_differ(shape: Sequence[Any]) -> bool:
    """A static 4-D shape whose NCHW and NHWC layouts differ for ATen (more than one channel and one position): of
    another, `suggest_memory_format` may answer either, and a copy between them may be no copy."""
    return all(isinstance(d, int) for d in shape) and shape[1] > 1 and shape[2] * shape[3] > 1


def _operand(node: Node, position: int) -> Any:
    args, _ = node.param("call")
    return args[position] if position < len(args) else None


def _is_4d(graph: Graph, value: Any) -> bool:
    return isinstance(value, Ref) and graph[value.name].type.rank == 4


class _Rewrite:
    """The graph's nodes, with the new ones placed and the readers redirected when `graph()` is called."""

    def __init__(self, graph: Graph, visible: set[str], converts: set[str], training: bool = False) -> None:
        self.source, self.visible, self.converts, self.training = graph, visible, converts, training
        self.eager_strides: dict[str, tuple[int, ...] | None] = {}  # an output -> the strides eager gives it
        self.after: dict[str, list[Node]] = {}  # new nodes, placed right after the named node
        self.before: dict[str, list[Node]] = {}  # new nodes, placed right before the named node
        self.redirect: dict[str, str] = {}  # a value -> the channels-last view its readers read instead
        self.replaced: dict[str, Node] = {}  # rewritten nodes
        self.unique_name = unique_names(n.name for n in graph.nodes)  # a name no node has yet
        self.converted: dict[str, str] = {}  # a value -> its `contiguous(channels_last)` result
        self.reads_original: set[str] = set()  # the permutes that start each copy: they read the value itself
        self.retyped: set[str] = set()  # results typed channels-last (convolutions, pools)
        self.converting: set[str] = set()  # the convolutions (and backwards) given channels-last operands

    def store_channels_last(self, value: Ref) -> bool:
        """Have the kernel computing `value` store it channels-last (False when no kernel computes it, or the caller
        gets it: it keeps its layout)."""
        if value.name in self.redirect:
            return True
        producer = self.source[value.name]
        if producer.kind not in ("pointwise", "reduction") or value.name in self.visible:
            return False
        permuted, stored, view = stored_permuted(producer, NHWC, self.unique_name, ("nhwc", "channels_last", "cl"))
        self.after.setdefault(value.name, []).extend([permuted, stored, view])
        self.reads_original.add(permuted.name)
        self.redirect[value.name] = view.name
        return True

    def channels_last_at_run_time(self, value: Any) -> bool:
        """Whether `value` is laid out channels-last when the graph runs: a static 4-D input typed so (a saved
        activation the forward stored so), or a value a kernel stores so; of more than one channel and position
        (ATen's `suggest_memory_format` may take another for those)."""
        if not _is_4d(self.source, value):
            return False
        node = self.source[value.name]
        if not _layouts_differ(node.type.shape):
            return False
        return value.name in self.redirect or node.name in self.retyped or (
            node.kind == "input" and is_channels_last(node.type))

    def _contiguous(self, value: Node, name: str, layout: torch.memory_format, like: Node) -> Node:
        """`aten.contiguous(value, memory_format=layout)`: no copy when `value` is laid out so already."""
        shape, dtype = value.type.shape, value.type.dtype
        strides = channels_last_strides(shape) if layout == torch.channels_last else contiguous_strides(shape)
        reason = _REASON if layout == torch.channels_last else _RESTORE
        return Node(self.unique_name(name), "extern", short_name(aten.contiguous.default), (),
                    TensorType(shape, dtype, strides),
                    tuple(sorted({"target": aten.contiguous.default, "reason": reason,
                                  "call": ((Ref(value.name),), {"memory_format": layout}),
                                  "extra_refs": (value.name,)}.items())),
                    like.origin, like.module, like.source)

    def convert_before(self, node: Node, value: Ref) -> None:
        """`aten.contiguous(value, memory_format=channels_last)` before `node` reads it."""
        if value.name not in self.converted:
            converted = self._contiguous(self.source[value.name], f"{value.name}_cl", torch.channels_last, node)
            self.before.setdefault(node.name, []).append(converted)
            self.converted[value.name] = converted.name
        current = self.replaced.get(node.name, node)
        self.replaced[node.name] = swapped(current, {value.name: self.converted[value.name]})

    def retype(self, node: Node) -> None:
        """A convolution (or pooling op) of channels-last operands: its result is channels-last."""
        current = self.replaced.get(node.name, node)
        shape = current.type.shape
        self.replaced[node.name] = replace(current, type=TensorType(shape, current.type.dtype,
                                                                    channels_last_strides(shape)))
        self.retyped.add(node.name)

    def graph(self) -> Graph:
        nodes: list[Node] = []
        for node in self.source.nodes:
            nodes.extend(self._redirected(n) for n in self.before.get(node.name, []))
            nodes.append(self._redirected(self.replaced.get(node.name, node)))
            nodes.extend(n if n.name in self.reads_original else self._redirected(n)
                         for n in self.after.get(node.name, []))
        outputs = tuple(name if name in self.visible else self.redirect.get(name) or self._kept_converted(name)
                        for name in self.source.outputs)
        nodes, outputs = self._weight_gradients(nodes, outputs)
        return Graph(self.source.inputs, tuple(self._restored(nodes)), outputs, self.source.hints)

    def _kept_converted(self, name: str) -> str:
        """For a saved activation that is a graph input this graph converts by a copy (a 3x3 convolution's weight,
        the image), the copy: the backward graph gets it channels-last (`output_strides`) and converts nothing
        again. Where the conversion may copy nothing (one channel, a 1x1 kernel, an input traced channels-last),
        the input itself."""
        converted = self.converted.get(name)
        node = self.source[name]
        shape = node.type.shape
        copies = self.training and converted is not None and node.kind == "input" and node.type.rank == 4 \
            and _layouts_differ(shape) and node.type.strides is not None \
            and tuple(node.type.strides) == tuple(contiguous_strides(shape))
        return converted if copies and converted is not None else name

    def _weight_gradients(self, nodes: list[Node], outputs: tuple[str, ...]) -> tuple[list[Node], tuple[str, ...]]:
        """A converted convolution's backward returns the weight's gradient channels-last: the caller gets it as
        eager lays it out (`aten.contiguous` after the backward: row-major, or channels-last where eager's is, a
        channels-last input's; no copy when it is so already)."""
        returned = set(outputs)  # the outputs, and the values their view chains start at
        for name in outputs:
            node = self.source[name] if name in self.source else None
            while node is not None and node.kind == "view" and node.op != "output_of" and node.inputs:
                node = self.source[node.inputs[0]]
                returned.add(node.name)
        out: list[Node] = []
        swaps: dict[str, str] = {}
        for node in nodes:
            out.append(swapped(node, swaps) if node.kind == "view" else node)  # (a returned chain reads it)
            if node.kind == "view" and _of_conv_backward(self.source, node, self.converts) and node.name in returned \
                    and node.type.rank == 4 and node.inputs[0] in self.converting:
                wanted = self.eager_strides.get(node.name)
                layout = torch.channels_last if wanted is not None and is_channels_last(
                    TensorType(node.type.shape, node.type.dtype, wanted)) else torch.contiguous_format
                restored = self._contiguous(node, f"{node.name}_as_eager", layout, node)
                out.append(restored)
                swaps[node.name] = restored.name
        return out, tuple(swaps.get(name, name) for name in outputs)

    def _restored(self, nodes: list[Node]) -> list[Node]:
        """`nodes` with the operands of each extern op whose result the caller sees made row-major first where they
        may be channels-last at run time (a converted convolution's result, a pool or interpolation of one, ...):
        such an op returns its result in its operand's layout."""
        nhwc = self.retyped | set(self.converted.values()) | set(self.redirect.values())
        if self.training:  # the saved activations the forward stored channels-last (of static shape, as the
            # convolutions the pass converts)
            nhwc |= {name for name in self.source.inputs if is_channels_last(self.source[name].type)
                     and all(isinstance(d, int) for d in self.source[name].type.shape)}
        made = {node.name: node for node in nodes}
        out: list[Node] = []
        for node in nodes:
            if node.kind == "extern" and node.name in self.visible and nhwc.intersection(node.inputs):
                swaps: dict[str, str] = {}
                for value in [v for v in node.inputs if v in nhwc]:
                    restored = self._contiguous(made[value], f"{value}_nchw", torch.contiguous_format, node)
                    out.append(restored)
                    swaps[value] = restored.name
                node = swapped(node, swaps)
            elif node.kind in ("extern", "view") and nhwc.intersection(node.inputs):
                nhwc.add(node.name)  # an op's result follows its operand's layout; so does a view's
            out.append(node)
        return out

    def _redirected(self, node: Node) -> Node:
        """`node` reading each stored-channels-last value through its view; a view or an extern op whose result the
        caller sees keeps reading the value itself (its result would follow the NHWC layout otherwise)."""
        if node.kind in ("view", "extern") and node.name in self.visible:
            return node
        return swapped(node, self.redirect)


def stored_permuted(producer: Node, order: tuple[int, ...], name: Callable[[str], str],
                    suffixes: tuple[str, str, str]) -> tuple[Node, Node, Node]:
    """`permute(copy(permute(v, order)), inverse)` for the value `producer` computes: a copy stored in `order`'s
    dimension order (fusion takes it into v's kernel) and the view of it in v's own shape, whose strides follow
    `order`. Named v's name with each suffix (`name` makes a name unique)."""
    shape, dtype = producer.type.shape, producer.type.dtype
    inverse = tuple(order.index(d) for d in range(len(order)))
    reordered = tuple(shape[d] for d in order)
    where = (producer.origin, producer.module, producer.source)
    permuted = Node(name(f"{producer.name}_{suffixes[0]}"), "view", "permute", (Ref(producer.name),),
                    TensorType(reordered, dtype), (("dims", order),), *where)
    stored = Node(name(f"{producer.name}_{suffixes[1]}"), "pointwise", "copy", (Ref(permuted.name),),
                  TensorType(reordered, dtype), (), *where)
    view = Node(name(f"{producer.name}_{suffixes[2]}"), "view", "permute", (Ref(stored.name),),
                TensorType(shape, dtype), (("dims", inverse),), *where)
    return permuted, stored, view


def swapped(node: Node, swaps: dict[str, str]) -> Node:
    """`node` reading `swaps[v]` wherever it read `v`."""
    if not swaps.keys() & set(node.inputs):
        return node

    def swap(value: Any) -> Any:
        return Ref(swaps[value.name]) if isinstance(value, Ref) and value.name in swaps else value

    args = tuple(swap(a) for a in node.args)
    params = dict(node.params)
    if "call" in params:
        params["call"] = pytree.tree_map(swap, params["call"], is_leaf=lambda v: isinstance(v, Ref))
        params["extra_refs"] = tuple(dict.fromkeys(swaps.get(r, r) for r in params.get("extra_refs", ())))
    return replace(node, args=args, params=tuple(sorted(params.items())))
