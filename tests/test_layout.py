"""Channels-last convolutions (decompose/layout.py): the kernels around a convolution store its input in NHWC
order, the convolution gets channels-last operands, and every result is eager's, in eager's layout for the caller."""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import fusionlab as fl
from fusionlab import dynamo_backend
from fusionlab.compare import TOLERANCES
from fusionlab.decompose.layout import channels_last, in_training, output_strides, wanted
from fusionlab.ir import channels_last_strides, is_channels_last

aten = torch.ops.aten


class Block(nn.Module):
    """A ResNet-like block: conv, batch norm, relu, max pool, then two convolutions (one a 1x1 shortcut) added."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.b1 = nn.BatchNorm2d(channels)
        self.c2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.b2 = nn.BatchNorm2d(channels)
        self.down = nn.Conv2d(channels, channels, 1)
        for norm in (self.b1, self.b2):  # statistics and affine parameters that change the numbers
            norm.running_mean.normal_()
            norm.running_var.uniform_(0.5, 2.0)
            nn.init.normal_(norm.weight)
            nn.init.normal_(norm.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(torch.relu(self.b1(self.c1(x))), 2)
        y = torch.relu(self.b2(self.c2(x)) + self.down(x))
        return F.adaptive_avg_pool2d(y, 1).flatten(1)


class ConvolutionLayouts(TorchDispatchMode):
    """Records, for each convolution run, whether its input and weight are channels-last."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[bool, bool]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func is aten.convolution.default:
            self.seen.append(tuple(t.is_contiguous(memory_format=torch.channels_last)  # type: ignore[arg-type]
                                   for t in args[:2]))
        return func(*args, **(kwargs or {}))


def _explore(model: nn.Module, x: torch.Tensor, layout: str) -> fl.Exploration:
    with torch.no_grad():
        return fl.explore(model, x, conv_layout=layout)


# 6 channels of 6x6: square sizes, where a layout mistake would not show in the shapes
@pytest.mark.parametrize("shape", [(2, 8, 12, 10), (2, 6, 6, 6)], ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_channels_last_block_matches_eager(shape: tuple[int, ...], dtype: torch.dtype, device: str) -> None:
    """On a CPU by asking for it; on CUDA by default ("auto")."""
    # cuDNN's float32 convolutions round through TF32 by default, differently per layout: compare exact float32 (the
    # context manager: other tests' torch.testing helpers forbid setting the flag itself)
    cudnn = torch.backends.cudnn
    with cudnn.flags(enabled=cudnn.enabled, benchmark=cudnn.benchmark, deterministic=cudnn.deterministic,
                     allow_tf32=False):
        _check_block(shape, dtype, device)


def _check_block(shape: tuple[int, ...], dtype: torch.dtype, device: str) -> None:
    torch.manual_seed(0)
    model = Block(shape[1]).eval().to(device, dtype)
    ex = _explore(model, torch.randn(shape, dtype=dtype, device=device), "channels_last" if device == "cpu" else "auto")
    fresh = torch.randn(shape, dtype=dtype, device=device)
    with torch.no_grad():
        expected = model(fresh)
        ex(fresh)  # capture and a first call on CUDA run the convolutions more than once: record a later call
        recorder = ConvolutionLayouts()
        with recorder:
            got = ex(fresh)
    atol, rtol = TOLERANCES[dtype]
    torch.testing.assert_close(got, expected, atol=atol, rtol=rtol)
    assert recorder.seen == [(True, True)] * 3, "every convolution gets channels-last operands"
    # the batch norm + relu before the pool writes NHWC and nothing else; no kernel stores a value twice
    stored = [o for k in ex.fused.kernels for o in k.outputs]
    assert any(o.endswith("_channels_last") for o in stored), ex.fused.as_text()
    assert "maximum" not in stored, "the NCHW value is not written next to its NHWC copy"


def test_as_traced_and_auto_on_a_cpu_keep_eager_layouts() -> None:
    torch.manual_seed(0)
    model, x = Block(8).eval(), torch.randn(2, 8, 12, 10)
    for layout in ("as_traced", "auto"):  # auto: channels-last on CUDA devices only
        ex = _explore(model, x, layout)
        ex.compiled  # noqa: B018
        assert not [n for n in ex.decomposed.graph.nodes if "contiguous" in n.op or n.op == "permute"]
        recorder = ConvolutionLayouts()
        with torch.no_grad():
            expected = model(x)
            with recorder:
                got = ex(x)
        torch.testing.assert_close(got, expected)
        assert [data for data, _ in recorder.seen] == [False] * 3  # (a 1x1 weight is both layouts at once)


def test_a_value_the_caller_gets_keeps_its_layout() -> None:
    """A convolution's input that is also returned: the caller gets it as eager lays it out (row-major), and the
    convolution still reads a channels-last copy."""
    torch.manual_seed(0)
    conv = nn.Conv2d(4, 4, 3, padding=1)

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.relu(x * 2)
        return h, torch.relu(conv(h))

    x = torch.randn(2, 4, 5, 5)
    with torch.no_grad():
        ex = fl.explore(fn, x, conv_layout="channels_last")
        ex.compiled  # noqa: B018
        recorder = ConvolutionLayouts()
        with recorder:
            h, out = ex(x)
        expected = fn(x)
    torch.testing.assert_close(h, expected[0])
    torch.testing.assert_close(out, expected[1])
    assert h.stride() == expected[0].stride()
    assert recorder.seen == [(True, True)]


def test_grouped_convolutions_keep_their_layout() -> None:
    conv = nn.Conv2d(4, 4, 3, padding=1, groups=2)
    x = torch.randn(2, 4, 6, 6)
    with torch.no_grad():
        ex = fl.explore(lambda t: conv(torch.relu(t)), x, conv_layout="channels_last")
        torch.testing.assert_close(ex(x), conv(torch.relu(x)))
    assert not [n for n in ex.decomposed.graph.nodes if n.op == "permute"]


def _channels_last_training_step(model: nn.Module, x: torch.Tensor) -> fl.Exploration:
    """One training step of `model` through the backend with conv_layout="channels_last", its gradients and batch
    norm statistics checked against an eager twin's; returns the backward graph's exploration."""
    return _channels_last_step_graphs(model, x)["backward"]


def _channels_last_step_graphs(model: nn.Module, x: torch.Tensor) -> dict[str, fl.Exploration]:
    """As `_channels_last_training_step`; returns each graph's exploration by role."""
    twin = __import__("copy").deepcopy(model)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="fusionlab", options={"conv_layout": "channels_last"})
    before = dynamo_backend.mark()
    compiled(x).square().mean().backward()
    twin(x).square().mean().backward()
    for (name, got), want in zip(model.named_parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(got.grad, want.grad, atol=1e-5, rtol=1e-4, msg=name)
    for got, want in zip(model.buffers(), twin.buffers(), strict=True):
        torch.testing.assert_close(got, want)
    return {g.role: g.exploration for g in dynamo_backend.since(before)}


@pytest.mark.parametrize("channels, size", [(8, 6), (8, 8)], ids=["nchw", "square_c_h_w"])
def test_a_batch_norm_backward_stores_its_gradient_channels_last_itself(channels: int, size: int) -> None:
    """In a channels-last training step, the batch-norm backward's reduction kernel writes the gradient the next
    convolution backward reads in NHWC order itself (`fusion.domain.permuted_store`): no kernel of its own copies it
    there. Also when C, H and W are equal, where the NHWC shape is the NCHW one. Gradients as eager's."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU(),
                          nn.Conv2d(channels, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, 4))
    backward = _channels_last_training_step(model, torch.randn(3, 3, size, size))
    graph = backward.decomposed.graph
    stored = [n for n in graph.nodes if n.name.endswith("_channels_last")]
    assert stored, "the convolution backward's gradient operand is stored channels-last by a kernel"
    groups = {name: group for group in backward.fused.groups for name in group.nodes}
    for node in stored:
        assert groups[node.name].kind == "reduction", (node.name, groups[node.name].name)
    torch._dynamo.reset()


class _Residual(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU(),
                                  nn.Conv2d(channels, channels, 3, padding=1), nn.BatchNorm2d(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + x)


def test_a_residual_networks_backward_keeps_every_activation_channels_last() -> None:
    """Training in channels-last, no kernel of the backward stores an activation row-major: the residual's gradient,
    read only by kernels (the next batch norm's backward) and convolutions, is stored NHWC too, and a kernel that
    stores two gradients stores both NHWC (fusion.domain.permuted_store). Gradients and statistics as eager's."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), _Residual(8), _Residual(8),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))
    backward = _channels_last_training_step(model, torch.randn(3, 3, 6, 6))
    graph = backward.decomposed.graph
    stored = [v for g in backward.fused.groups if g.kind in ("pointwise", "reduction") for v in g.outputs
              if graph[v].type.rank == 4 and graph[v].type.shape[1] > 1 and graph[v].type.shape[2] > 1]
    # (a view of such a value that several kernels read is read through by each of them, never stored in the
    # view's row-major order by the first: fusion/recompute.py stops at the permuted copy)
    assert stored and all(v.endswith("_channels_last") and graph[v].kind != "view" for v in stored), stored
    torch._dynamo.reset()


def test_a_residual_chains_gradient_is_stored_once_not_recomputed_down_the_chain() -> None:
    """The gradient a residual block hands back (relu's mask of the sum of its branches' gradients) is read by the
    next block's batch-norm backward kernels through its channels-last view. Stored once, it is read once per
    reader; recomputed, each reader would read every convolution gradient of the chain before it (ResNet-50's
    backward read 12.5 GB in float32 so, 9.8 once stored: fusion/recompute.py follows the view to its readers).
    No kernel reads more than two convolution gradients, however long the chain."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          *(_Residual(8) for _ in range(4)), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))
    backward = _channels_last_training_step(model, torch.randn(3, 3, 6, 6))
    graph = backward.decomposed.graph
    backwards = {n.name for n in graph.nodes
                 if n.kind == "extern" and n.param("target") is torch.ops.aten.convolution_backward.default}
    gradients = backwards | {n.name for n in graph.nodes if n.op == "output_of" and n.inputs[0] in backwards}
    read = {g.name: len(gradients.intersection(g.inputs)) for g in backward.fused.groups
            if g.kind in ("pointwise", "reduction")}
    assert max(read.values()) <= 2, read
    torch._dynamo.reset()


def test_a_training_steps_backward_converts_no_weight_the_forward_converted() -> None:
    """The forward converts each 3x3 weight (and the image) to channels-last for its convolution; the backward
    graph gets those copies as saved activations, typed channels-last (`layout._Rewrite._kept_converted`), and
    copies none of them again: ResNet-50's step made 54 layout copies on an H200, 18 of them in the backward for
    values the forward had copied. Gradients as eager's."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1),
                          nn.ReLU(), nn.Conv2d(8, 8, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten())
    steps = _channels_last_step_graphs(model, torch.randn(2, 3, 6, 6))
    graphs = {role: ex.decomposed.graph for role, ex in steps.items()}

    def converted(graph: Any) -> list[tuple[Any, bool]]:  # (the shape, typed channels-last) of what is converted
        return [(graph[n.inputs[0]].type.shape, is_channels_last(graph[n.inputs[0]].type)) for n in graph.nodes
                if n.kind == "extern" and n.param("target") is aten.contiguous.default
                and n.param("call")[1]["memory_format"] == torch.channels_last]

    copied = [shape for shape, typed in converted(graphs["forward"]) if not typed]
    assert sorted(copied) == [(2, 3, 6, 6), (8, 3, 3, 3), (8, 8, 1, 1), (8, 8, 3, 3)], copied
    again = [shape for shape, typed in converted(graphs["backward"]) if not typed and shape[2:] != (1, 1)]
    assert again == [], again
    torch._dynamo.reset()


@pytest.mark.parametrize("pool", [nn.MaxPool2d(3, 2, 1), nn.AvgPool2d(2)], ids=["max", "avg"])
def test_a_pools_backward_reads_and_returns_channels_last(pool: nn.Module) -> None:
    """A pooling op's backward (ATen's) lays the input's gradient out as the input, and copies the gradient it reads
    into that layout first: in a channels-last step, the kernel computing that gradient (a residual's add) stores it
    channels-last. ResNet-50's stem on an H200: the add took 89 us, transposing to row-major. Gradients as eager's.
    (The result's type is channels-last from the capture already, the saved input arriving so.)"""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), pool, _Residual(8),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))
    backward = _channels_last_training_step(model, torch.randn(3, 3, 8, 8))
    graph = backward.decomposed.graph
    pools = [n for n in graph.nodes if n.kind == "extern" and n.op.endswith(("pool2d_with_indices_backward.default",
                                                                              "avg_pool2d_backward.default"))]
    assert len(pools) == 1, pools
    gradient = graph[pools[0].param("call")[0][0].name]
    assert gradient.op == "permute" and graph[gradient.inputs[0]].name.endswith("_channels_last"), gradient
    torch._dynamo.reset()


class _ImageAlsoFlattened(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.linear = nn.Conv2d(3, 8, 3, padding=1), nn.Linear(3 * 6 * 6, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x).mean((2, 3)) * self.linear(x.view(x.shape[0], -1))


class _WeightAlsoViewed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x).mean((2, 3)) @ self.conv.weight.view(8, -1)


@pytest.mark.parametrize("make, shape", [
    (lambda: nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.InstanceNorm2d(8, affine=True), nn.ReLU(),
                           nn.Conv2d(8, 4, 3)), (2, 3, 6, 6)),
    (_ImageAlsoFlattened, (2, 3, 6, 6)),
    (_WeightAlsoViewed, (2, 4, 6, 6)),
], ids=["instance_norm", "image_flattened", "weight_viewed"])
def test_a_backward_that_views_a_value_saved_channels_last(make: Any, shape: tuple[int, ...]) -> None:
    """The forward hands over saved activations channels-last (an activation, a weight's or the image's copy) and
    AOTAutograd traced the backward's `view`s of them for eager's layout, where they cannot view the channels-last
    value: the backend compiles them as reshapes (`dynamo_backend._views_as_reshapes`). Each model failed to compile
    its backward before. Gradients as eager's."""
    torch.manual_seed(0)
    _channels_last_training_step(make(), torch.randn(shape))
    torch._dynamo.reset()


def test_training_through_the_backend_in_channels_last(device: str) -> None:
    """A training step through torch.compile with conv_layout='channels_last' (on CUDA: the default, "auto"): loss
    and every gradient as eager's."""
    cudnn = torch.backends.cudnn  # (exact float32 convolutions: TF32 rounds differently per layout)
    with cudnn.flags(enabled=cudnn.enabled, benchmark=cudnn.benchmark, deterministic=cudnn.deterministic,
                     allow_tf32=False):
        _train_through_the_backend(device, "channels_last" if device == "cpu" else "auto")


def _train_through_the_backend(device: str, layout: str) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten()).to(device)
    x = torch.randn(4, 3, 8, 8, device=device)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="fusionlab", options={"conv_layout": layout})

    def step(run: Any) -> tuple[torch.Tensor, list[torch.Tensor]]:
        model.zero_grad()
        loss = run(x).square().mean()
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters()]  # type: ignore[union-attr]

    expected_loss, expected_grads = step(model)
    before = dynamo_backend.mark()
    loss, grads = step(compiled)
    torch.testing.assert_close(loss, expected_loss, atol=1e-5, rtol=1e-4)
    for got, expected in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-3)
    forward, backward = (next(g for g in dynamo_backend.since(before) if g.role == role)
                         for role in ("forward", "backward"))
    saved = forward.exploration.decomposed.graph
    # the saved activations the convolutions read are stored channels-last (no NCHW copy beside them), and
    # AOTAutograd compiled the backward graph for those strides
    reported = [s for s in output_strides(saved) if s is not None]
    assert len(reported) >= 3, saved.outputs
    backward_inputs = [a.stride() for a in backward.exploration.example_args if isinstance(a, torch.Tensor)]
    assert all(tuple(s) in backward_inputs for s in reported), (reported, backward_inputs)
    # not in training (an inference graph): the saved activations keep eager's layout, as do the backward's
    # convolutions
    traced = forward.exploration.captured.decompose(layout="as_traced").graph
    assert output_strides(channels_last(traced, forward.exploration.saved_outputs_from)) == [None] * len(traced.outputs)
    untrained = channels_last(backward.exploration.captured.decompose(layout="as_traced").graph)
    assert not [n for n in untrained.nodes if n.name.endswith("_cl")], "no conversion around a backward convolution"
    # the backward's convolutions read channels-last operands (no conversion of a saved activation: it is one)
    graph = backward.exploration.decomposed.graph
    convolutions = [n for n in graph.nodes if n.op == "aten.convolution_backward.default"]
    assert len(convolutions) == 2
    for node in convolutions:
        operands = [graph[v].type.strides for v in node.inputs[:3]]
        assert all(s is None or s == channels_last_strides(graph[v].type.shape)
                   for v, s in zip(node.inputs[:3], operands, strict=True)), (node.name, operands)


def test_auto_converts_both_graphs_of_a_training_step_on_cuda() -> None:
    """conv_layout="auto" asks for channels-last wherever a convolution or a convolution backward runs on CUDA (on
    an H200, ResNet-50's training step with CUDA graphs took 10.67 ms against 12.80 as traced:
    docs/PERFORMANCE.md), and converts a training step's graphs as training ones: the forward (it says where its
    saved activations start) and the backward. An inference graph is not one. The graphs here are a CPU step's,
    their convolutions' values then made CUDA ones (fake tensors: no GPU needed)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
    torch._dynamo.reset()
    before = dynamo_backend.mark()
    torch.compile(model, backend="fusionlab", options={"conv_layout": "as_traced"})(torch.randn(2, 3, 6, 6)).sum() \
        .backward()
    forward, backward = (next(g for g in dynamo_backend.since(before) if g.role == role)
                         for role in ("forward", "backward"))
    assert forward.saved_outputs_from is not None
    for graph in (forward, backward):
        assert not wanted(graph.graph_module, "auto"), "a CPU convolution keeps the traced layout"
        assert wanted(graph.graph_module, "channels_last") and not wanted(graph.graph_module, "as_traced")
    with FakeTensorMode():
        for graph in (forward, backward):
            for node in graph.graph_module.graph.nodes:
                if "convolution" in str(node.target):
                    node.meta["val"] = torch.utils._pytree.tree_map_only(torch.Tensor, lambda t: torch.empty_strided(
                        t.shape, t.stride(), dtype=t.dtype, device="cuda"), node.meta["val"])
    for graph in (forward, backward):
        assert wanted(graph.graph_module, "auto"), graph.role
    assert in_training(forward.graph_module, "auto", forward.saved_outputs_from)
    assert in_training(backward.graph_module, "auto", None)
    assert not in_training(forward.graph_module, "auto", None), "a graph of no training step (no saved outputs)"
    assert in_training(forward.graph_module, "channels_last", None)
    torch._dynamo.reset()


def test_an_unknown_layout_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown conv_layout 'nhwc'"):
        fl.explore(torch.relu, torch.randn(4), conv_layout="nhwc")
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed, match="unknown conv_layout 'nhwc'"):
        torch._dynamo.reset()
        torch.compile(torch.relu, backend="fusionlab", options={"conv_layout": "nhwc"})(torch.randn(4))


def test_an_average_pool_between_convolutions_passes_the_layout_on() -> None:
    """avg_pool2d keeps its input's layout: the kernel before it stores NHWC, the pool's result is channels-last and
    the next kernel reads it with known strides (no conversion before the second convolution)."""
    torch.manual_seed(0)
    first, second = nn.Conv2d(4, 6, 3, padding=1), nn.Conv2d(6, 6, 3, padding=1)

    def fn(x: torch.Tensor) -> torch.Tensor:
        pooled = F.avg_pool2d(torch.relu(first(x)), 2)
        return torch.relu(second(torch.sigmoid(pooled) * pooled))

    x = torch.randn(2, 4, 8, 8)
    with torch.no_grad():
        ex = fl.explore(fn, x, conv_layout="channels_last")
        ex.compiled  # noqa: B018
        recorder = ConvolutionLayouts()
        fresh = torch.randn_like(x)
        expected = fn(fresh)
        with recorder:
            got = ex(fresh)
    torch.testing.assert_close(got, expected)
    assert recorder.seen == [(True, True)] * 2
    wrapper = ex.generated.program.wrapper
    assert "avg_pool2d = avg_pool2d.contiguous(memory_format=torch.channels_last)" in wrapper, wrapper


SEEDS = int(os.environ.get("FUSIONLAB_LAYOUT_SEEDS", "12"))  # more: FUSIONLAB_LAYOUT_SEEDS=150 (150 passed)


class RandomConvNet(nn.Module):
    """A small random network of the patterns models mix around convolutions: 1x1 and 3x3 convolutions (strided,
    with and without bias), batch norm, activations, residual adds, max and average pools, a value read twice."""

    def __init__(self, seed: int, channels: int) -> None:
        super().__init__()
        self.rng = torch.Generator().manual_seed(seed)
        self.plan = [self._pick(("conv", "conv", "norm", "act", "add", "pool", "twice")) for _ in range(7)]
        self.convs = nn.ModuleList(nn.Conv2d(channels, channels, int(self._pick((1, 3))), padding="same",
                                             bias=bool(self._pick((True, False)))) for _ in self.plan)
        self.norms = nn.ModuleList(nn.BatchNorm2d(channels) for _ in self.plan)
        for norm in self.norms:
            norm.running_mean.normal_(generator=self.rng)
            norm.running_var.uniform_(0.5, 2.0, generator=self.rng)

    def _pick(self, choices: tuple[Any, ...]) -> Any:
        return choices[int(torch.randint(len(choices), (), generator=self.rng))]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skip = x
        for step, what in enumerate(self.plan):
            if what == "conv":
                x = self.convs[step](x)
            elif what == "norm":
                x = self.norms[step](x)
            elif what == "act":
                x = (torch.relu, torch.sigmoid, F.gelu)[step % 3](x)
            elif what == "add" and skip.shape == x.shape:
                x, skip = x + skip, x
            elif what == "pool" and x.shape[-1] >= 2:
                x = (F.max_pool2d if step % 2 else F.avg_pool2d)(x, 2)
            elif what == "twice":
                x = self.convs[step](torch.relu(x)) * torch.relu(x)
        return self.convs[-1](x) + 1


@pytest.mark.parametrize("seed", range(SEEDS))
def test_random_conv_networks_match_eager_in_channels_last(seed: int) -> None:
    channels = (4, 6, 8)[seed % 3]
    size = (6, 7, 8)[seed % 3]  # 6 channels of 6x6: square
    torch.manual_seed(seed)
    model = RandomConvNet(seed, channels).eval()
    x = torch.randn(2, channels, size, size)
    with torch.no_grad():
        ex = fl.explore(model, x, conv_layout="channels_last")
        fresh = torch.randn_like(x)
        torch.testing.assert_close(ex(fresh), model(fresh), atol=1e-4, rtol=1e-4, msg=lambda m: f"{model.plan}: {m}")
    converted = [n for n in ex.decomposed.graph.nodes if n.op == "permute" or "contiguous" in n.op]
    assert converted, "the last convolution at least reads a channels-last input"


def _strides(tensor: torch.Tensor) -> list[int]:
    return [stride for stride, size in zip(tensor.stride(), tensor.shape, strict=True) if size > 1]


class TrainedConvNet(nn.Module):
    """RandomConvNet in training (batch statistics), ending in a loss-friendly pool."""

    def __init__(self, seed: int, channels: int) -> None:
        super().__init__()
        self.net = RandomConvNet(seed, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.adaptive_avg_pool2d(self.net(x), 2).flatten(1)


@pytest.mark.parametrize("seed", range(max(SEEDS // 3, 2)))
def test_random_conv_networks_train_in_channels_last(seed: int) -> None:
    """Training steps of random conv networks through the backend: the forward stores its saved activations
    channels-last, the backward's convolutions read them so; the loss, every gradient (the input's too, on odd
    seeds) and the gradients' layouts are eager's."""
    channels = (4, 6, 8)[seed % 3]
    size = (6, 7, 8)[seed % 3]
    torch.manual_seed(seed)
    model = TrainedConvNet(seed, channels).train()
    x = torch.randn(2, channels, size, size, requires_grad=bool(seed % 2))
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="fusionlab", options={"conv_layout": "channels_last"})

    def step(run: Any) -> list[torch.Tensor]:
        # torch.autograd.grad, not .grad: accumulating into .grad lays a gradient out as its leaf, whatever the
        # backward returned
        wrt = list(model.parameters()) + ([x] if x.requires_grad else [])
        grads = torch.autograd.grad(run(x).square().mean(), wrt, allow_unused=True)
        return [g for g in grads if g is not None]

    expected = step(model)
    got = step(compiled)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, atol=1e-4, rtol=1e-3, msg=lambda m: f"{model.net.plan}: {m}")
        assert _strides(g) == _strides(e), "a gradient in eager's layout (dims of size 1 aside)"
    torch._dynamo.reset()


@pytest.mark.parametrize("fn", [
    lambda x, w: (F.conv2d(torch.relu(x), w).relu(), F.max_pool2d(torch.relu(x), 2)),
    lambda x, w: (F.conv2d(torch.relu(x), w).relu(), F.avg_pool2d(torch.relu(x), 2)),
    lambda x, w: (F.conv2d(torch.relu(x), w).relu(), F.interpolate(torch.relu(x), scale_factor=2)),
    lambda x, w: (F.conv2d(torch.relu(x), w).relu(), torch.relu(x)[:, :2]),
    lambda x, w: (F.conv2d(torch.relu(x), w).relu(), torch.relu(x).view(2, 3, 64)),
    lambda x, w: F.conv2d(torch.relu(x), w)[:, :2],
    lambda x, w: F.avg_pool2d(F.conv2d(torch.relu(x), w).relu(), 2).flatten(1),
    lambda x, w: F.max_pool2d(F.conv2d(x, w), 2),
    lambda x, w: F.interpolate(F.conv2d(x, w), scale_factor=2),
    lambda x, w: F.max_pool2d(F.conv2d(x, w), 2, return_indices=True),
    lambda x, w: F.conv2d(F.conv2d(x.relu(), w), w[:, :1].expand(4, 4, 3, 3).contiguous(), padding=1)[:, :2],
    lambda x, w: (F.conv2d(p := F.max_pool2d(x.relu(), 2), w).relu(), F.interpolate(p, scale_factor=2)),
], ids=["pool", "avg_pool", "interpolate", "slice", "view", "conv_slice", "pool_flattened", "pool_of_conv",
        "interpolate_of_conv", "pool_indices_of_conv", "conv_of_conv_sliced", "interpolate_of_a_pool"])
def test_what_the_caller_gets_has_eagers_strides(fn: Any) -> None:
    """A pool, an interpolation or a view of a convolution's input, a view of its result, or an op that reads its
    result, returned to the caller: eager's strides (user code calls .view on them), not the NHWC layout the
    convolution reads and writes."""
    x, w = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3)
    ex = fl.explore(fn, x, w, conv_layout="channels_last")
    fresh = torch.randn_like(x)
    got, expected = ex(fresh, w), fn(fresh, w)
    got, expected = (v if isinstance(v, tuple) else (v,) for v in (got, expected))
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e)
        assert g.stride() == e.stride()


def test_the_backend_returns_eagers_strides() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Conv2d(4, 4, 1))
    x = torch.randn(2, 3, 8, 8)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="fusionlab", options={"conv_layout": "channels_last"})
    with torch.no_grad():
        got, expected = compiled(x), model(x)
    torch.testing.assert_close(got, expected)
    assert got.stride() == expected.stride()
    torch._dynamo.reset()


@pytest.mark.parametrize("fn, make", [
    (lambda x: x * 2, lambda: torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last)),
    (lambda x: x.clone(), lambda: torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last)),
    (lambda x: torch.relu(x - x.mean((0, 2, 3), keepdim=True)),
     lambda: torch.randn(2, 6, 6, 6).contiguous(memory_format=torch.channels_last)),
    (lambda x: (torch.exp(x) + 1, torch.exp(x).sum(0)), lambda: torch.randn(7, 6).t()),
    (lambda x: torch.sigmoid(x) * x, lambda: torch.randn(3, 4, 5).permute(2, 0, 1)),
    (lambda x: (x + 1).t(), lambda: torch.randn(5, 5).t()),
    (lambda x: x[:, :2] * 3, lambda: torch.randn(4, 4).t()),
], ids=["channels_last_mul", "channels_last_clone", "channels_last_norm", "transposed_two_outputs",
        "permuted_3d", "square_transposed_back", "slice_of_transposed"])
def test_a_kernels_output_has_eagers_strides(fn: Any, make: Any) -> None:
    """A pointwise op of a channels-last, transposed or permuted input: eager lays its result out in its input's
    order, and so does fusionlab (the kernel stores it in that order: `output_layout.eager_output_strides`), values as
    eager's on fresh inputs, square shapes included."""
    ex = fl.explore(fn, make())
    fresh = make()
    got, expected = ex(fresh), fn(fresh)
    got, expected = (v if isinstance(v, tuple) else (v,) for v in (got, expected))
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e)
        assert _strides(g) == _strides(e), (g.stride(), e.stride())
