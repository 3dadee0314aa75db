"""Capture's decompositions (fusionlab/capture/decompositions.py): every op in the table becomes fused kernels instead
of an extern call, through `fl.explore` and through `torch.compile(backend="fusionlab")` (forward and backward), and
agrees with eager; the ops left extern on purpose say why; random ops draw what eager draws."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import fusionlab as fl
from fusionlab import dynamo_backend
from fusionlab.capture.decompositions import DECOMPOSITIONS, decomposed_from
from fusionlab.decompose.rules import RULES
from fusionlab.verify import verify_call

aten = torch.ops.aten
SHAPES = [pytest.param((8, 16), id="8x16"), pytest.param((16, 16), id="square")]


def _extern_ops(explorations: Iterable[Any]) -> set[str]:
    """The op names ("gelu_backward", "safe_masked_attention") of every extern node in these explorations' decomposed
    graphs."""
    return {node.op.split(".")[1] if "." in node.op else node.op
            for ex in explorations for node in ex.decomposed.graph.nodes if node.kind == "extern"}


def _assert_close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Equal within 1e-5 of the tensor's own scale (float32): relative where values are large, the same absolute
    bound where they pass through zero."""
    scale = float(expected.detach().abs().max()) if expected.numel() else 1.0
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5 * max(scale, 1e-6))


def test_only_ops_without_a_rule_are_decomposed() -> None:
    """Ops fusionlab has rules for (layer norm's forward, softmax, gelu, ...) are captured as before."""
    assert DECOMPOSITIONS
    assert not [op for op in DECOMPOSITIONS if op in RULES or op.overloadpacket in RULES]


# -- direct calls through fl.explore -----------------------------------------------------------------------------
def _pair(shape: tuple[int, ...]) -> tuple[torch.Tensor, ...]:
    return torch.randn(shape), torch.randn(shape)


def _layer_norm_backward(g: torch.Tensor, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> Any:
    mean = x.mean(-1, keepdim=True)
    rstd = torch.rsqrt(x.var(-1, keepdim=True, correction=0) + 1e-5)
    return aten.native_layer_norm_backward(g, x, [x.shape[-1]], mean, rstd, w, b, [True, True, True])


def _nll_forward(reduction: int) -> Callable[..., Any]:
    def fn(x: torch.Tensor, target: torch.Tensor) -> Any:
        return aten.nll_loss_forward(torch.log_softmax(x, -1), target, None, reduction, -100)
    return fn


def _nll_backward(x: torch.Tensor, target: torch.Tensor) -> Any:
    total = (target != -100).sum().to(x.dtype)
    return aten.nll_loss_backward(torch.tensor(0.5), torch.log_softmax(x, -1), target, None, 1, -100, total)


def _targets(shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    target = torch.randint(0, shape[1], (shape[0],))
    target[1] = -100  # ignored
    return torch.randn(shape), target


def _masked(shape: tuple[int, ...]) -> tuple[torch.Tensor]:
    x = torch.randn(shape)
    x[0] = float("-inf")  # a fully masked row: _safe_softmax gives zeros, not NaN
    x[1, ::2] = float("-inf")
    return (x,)


def _batch_norm_inputs(shape: tuple[int, ...]) -> tuple[torch.Tensor, ...]:
    channels = shape[1]
    return (torch.randn(shape[0], channels, 3, 3), torch.randn(channels), torch.randn(channels),
            torch.randn(channels), torch.rand(channels) + 0.5)


def _batch_norm_backward(g: torch.Tensor, x: torch.Tensor, w: torch.Tensor, mean: torch.Tensor,
                         var: torch.Tensor) -> Any:
    _, save_mean, save_rstd = aten.native_batch_norm(x, w, None, None, None, True, 0.1, 1e-5)
    return aten.native_batch_norm_backward(g, x, w, mean, var, save_mean, save_rstd, True, 1e-5, [True, True, True])


DIRECT = [
    pytest.param(lambda g, x: aten.gelu_backward(g, x), _pair, "gelu_backward", id="gelu_backward"),
    pytest.param(lambda g, x: aten.gelu_backward(g, x, approximate="tanh"), _pair, "gelu_backward",
                 id="gelu_backward_tanh"),
    pytest.param(lambda g, x: aten.silu_backward(g, x), _pair, "silu_backward", id="silu_backward"),
    pytest.param(lambda g, x: aten.tanh_backward(g, torch.tanh(x)), _pair, "tanh_backward", id="tanh_backward"),
    pytest.param(lambda g, x: aten.sigmoid_backward(g, torch.sigmoid(x)), _pair, "sigmoid_backward",
                 id="sigmoid_backward"),
    pytest.param(lambda g, x: aten.threshold_backward(g, torch.relu(x), 0), _pair, "threshold_backward",
                 id="threshold_backward"),
    pytest.param(lambda g, x: aten.hardtanh_backward(g, x, -0.5, 0.5), _pair, "hardtanh_backward",
                 id="hardtanh_backward"),
    pytest.param(lambda g, x: aten.leaky_relu_backward(g, x, 0.1, False), _pair, "leaky_relu_backward",
                 id="leaky_relu_backward"),
    pytest.param(lambda g, x: aten.elu_backward(g, 1.0, 1.0, 1.0, False, x), _pair, "elu_backward",
                 id="elu_backward"),
    pytest.param(lambda g, x: aten.softplus_backward(g, x, 1.0, 20.0), _pair, "softplus_backward",
                 id="softplus_backward"),
    pytest.param(lambda g, x: aten.hardsigmoid_backward(g, x * 4), _pair, "hardsigmoid_backward",
                 id="hardsigmoid_backward"),
    pytest.param(lambda g, x: aten.hardswish_backward(g, x * 4), _pair, "hardswish_backward",
                 id="hardswish_backward"),
    pytest.param(lambda g, x: aten.mish_backward(g, x), _pair, "mish_backward", id="mish_backward"),
    pytest.param(lambda g, x: aten._softmax_backward_data(g, torch.softmax(x, -1), -1, torch.float32), _pair,
                 "_softmax_backward_data", id="softmax_backward"),
    pytest.param(lambda g, x: aten._softmax_backward_data(g, torch.softmax(x, 0), 0, torch.float32), _pair,
                 "_softmax_backward_data", id="softmax_backward_dim0"),
    pytest.param(lambda g, x: aten._log_softmax_backward_data(g, torch.log_softmax(x, -1), -1, torch.float32),
                 _pair, "_log_softmax_backward_data", id="log_softmax_backward"),
    pytest.param(lambda x: aten._safe_softmax(x, -1), _masked, "_safe_softmax", id="safe_softmax"),
    pytest.param(_layer_norm_backward, lambda s: (*_pair(s), torch.randn(s[-1]), torch.randn(s[-1])),
                 "native_layer_norm_backward", id="layer_norm_backward"),
    pytest.param(_nll_forward(1), _targets, "nll_loss_forward", id="nll_loss_forward_mean"),
    pytest.param(_nll_forward(2), _targets, "nll_loss_forward", id="nll_loss_forward_sum"),
    pytest.param(_nll_forward(0), _targets, "nll_loss_forward", id="nll_loss_forward_none"),
    pytest.param(_nll_backward, _targets, "nll_loss_backward", id="nll_loss_backward"),
    pytest.param(lambda g: aten.slice_backward(g, [g.shape[0], 2 * g.shape[1]], 1, 3, 3 + g.shape[1], 1),
                 lambda s: (torch.randn(s),), "slice_backward", id="slice_backward"),
    pytest.param(lambda g: aten.select_backward(g, [5, *g.shape], 0, 2), lambda s: (torch.randn(s),),
                 "select_backward", id="select_backward"),
    pytest.param(lambda x, w, b, m, v: aten._native_batch_norm_legit_no_training(x, w, b, m, v, 0.1, 1e-5),
                 _batch_norm_inputs, "_native_batch_norm_legit_no_training", id="batch_norm_no_training"),
    pytest.param(lambda x, w, b, m, v: aten._native_batch_norm_legit_functional(x, w, b, m, v, True, 0.1, 1e-5),
                 _batch_norm_inputs, "_native_batch_norm_legit_functional", id="batch_norm_functional"),
    pytest.param(lambda x, w, b, m, v: aten.native_batch_norm(x, w, b, None, None, True, 0.1, 1e-5),
                 _batch_norm_inputs, "native_batch_norm", id="native_batch_norm_no_stats"),
    pytest.param(lambda x, w, b, m, v: _batch_norm_backward(torch.randn_like(x), x, w, m, v), _batch_norm_inputs,
                 "native_batch_norm_backward", id="native_batch_norm_backward"),
]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(("fn", "make", "op"), DIRECT)
def test_explore_decomposes(fn: Callable[..., Any], make: Callable[..., Any], op: str,
                            shape: tuple[int, ...]) -> None:
    if op == "native_batch_norm_backward":  # the randn_like inside would draw differently in each program
        torch.manual_seed(0)
    inputs = make(shape)
    ex = fl.explore(fn, *inputs)
    assert op not in _extern_ops([ex]), ex.decomposed.fallbacks
    fresh = make(shape)
    torch.manual_seed(1)
    expected = fn(*fresh)
    torch.manual_seed(1)
    actual = ex(*fresh)
    expected = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    actual = list(actual) if isinstance(actual, (tuple, list)) else [actual]
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected):
        _assert_close(got, want)


def test_attention_math_path_safe_softmax() -> None:
    """scaled_dot_product_attention's math path calls _safe_softmax (torch >= 2.5): a fully masked query row attends
    to nothing (zeros), not NaN, in fusionlab's kernels as in eager."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    mask = torch.ones(8, 8, dtype=torch.bool).tril()
    mask[2] = False

    def attend(q: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, q, q, attn_mask=mask)

    q = torch.randn(2, 4, 8, 16)
    with sdpa_kernel(SDPBackend.MATH):
        ex = fl.explore(attend, q)
        ex.captured  # noqa: B018 - captured now, inside the backend choice
        expected = attend(q)
    assert "_safe_softmax" not in _extern_ops([ex]), ex.decomposed.fallbacks
    assert "aten._safe_softmax" in {decomposed_from(n) for n in ex.captured.graph_module.graph.nodes}
    actual = ex(q)
    assert not actual.isnan().any() and not actual[:, :, 2].any()
    _assert_close(actual, expected)


def test_decomposed_nodes_name_their_op() -> None:
    """The Captured stage says what happened: each node a decomposition wrote names the op it replaces."""
    g, x = torch.randn(4, 16), torch.randn(4, 16)
    ex = fl.explore(_layer_norm_backward, g, x, torch.randn(16), torch.randn(16))
    origins = {decomposed_from(node) for node in ex.captured.graph_module.graph.nodes}
    assert "aten.native_layer_norm_backward" in origins
    assert "= aten.native_layer_norm_backward" not in ex.captured.as_text()  # what ran is its decomposition
    assert decomposed_from(next(n for n in ex.captured.graph_module.graph.nodes if n.op == "placeholder")) is None


# -- torch.compile: forward and backward ---------------------------------------------------------------------------
def _compiled_step(fn: Callable[..., torch.Tensor], inputs: list[torch.Tensor]) -> tuple[list[Any], set[str]]:
    """Loss and gradients of `fn` compiled with fusionlab, and the extern ops of the graphs it compiled."""
    torch._dynamo.reset()
    before = dynamo_backend.mark()
    loss = torch.compile(fn, backend="fusionlab")(*inputs)
    loss.backward()
    grads = [t.grad for t in inputs if t.requires_grad]
    explored = [e for g in dynamo_backend.since(before) for e in g.explorations.values()]
    return [loss.detach(), *grads], _extern_ops(explored)


def _eager_step(fn: Callable[..., torch.Tensor], inputs: list[torch.Tensor]) -> list[Any]:
    loss = fn(*inputs)
    loss.backward()
    return [loss.detach(), *[t.grad for t in inputs if t.requires_grad]]


def _squares(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    return lambda *args: (fn(*args) ** 2).sum()


TRAINING = [
    pytest.param(_squares(lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b)), 3, ["native_layer_norm_backward"],
                 id="layer_norm"),
    pytest.param(_squares(lambda x, w: F.rms_norm(x, x.shape[-1:], w, 1e-6)), 2, ["_fused_rms_norm_backward"],
                 id="rms_norm"),
    pytest.param(_squares(F.gelu), 1, ["gelu_backward"], id="gelu"),
    pytest.param(_squares(lambda x: F.gelu(x, approximate="tanh")), 1, ["gelu_backward"], id="gelu_tanh"),
    pytest.param(_squares(F.silu), 1, ["silu_backward"], id="silu"),
    pytest.param(_squares(torch.tanh), 1, ["tanh_backward"], id="tanh"),
    pytest.param(_squares(torch.sigmoid), 1, ["sigmoid_backward"], id="sigmoid"),
    pytest.param(_squares(F.relu), 1, ["threshold_backward"], id="relu"),
    pytest.param(_squares(F.hardtanh), 1, ["hardtanh_backward"], id="hardtanh"),
    pytest.param(_squares(F.leaky_relu), 1, ["leaky_relu_backward"], id="leaky_relu"),
    pytest.param(_squares(F.elu), 1, ["elu_backward"], id="elu"),
    pytest.param(_squares(F.softplus), 1, ["softplus_backward"], id="softplus"),
    pytest.param(_squares(F.hardswish), 1, ["hardswish_backward"], id="hardswish"),
    pytest.param(_squares(F.mish), 1, ["mish_backward"], id="mish"),
    pytest.param(_squares(lambda x: torch.softmax(x, -1)), 1, ["_softmax_backward_data"], id="softmax"),
    pytest.param(_squares(lambda x: torch.log_softmax(x, 0)), 1, ["_log_softmax_backward_data"], id="log_softmax"),
    pytest.param(_squares(lambda x: x[:, 2:9]), 1, ["slice_backward"], id="slice"),
    pytest.param(_squares(lambda x: x[:, 3]), 1, ["select_backward"], id="select"),
]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(("fn", "tensors", "ops"), TRAINING)
def test_compiled_backward_decomposes(fn: Callable[..., torch.Tensor], tensors: int, ops: list[str],
                                      shape: tuple[int, ...]) -> None:
    first = torch.randn(shape)
    inputs = [first, *[torch.randn(shape[-1]) for _ in range(tensors - 1)]]
    ours = [t.clone().requires_grad_() for t in inputs]
    theirs = [t.clone().requires_grad_() for t in inputs]
    actual, externs = _compiled_step(fn, ours)
    expected = _eager_step(fn, theirs)
    assert not externs & set(ops), externs
    for got, want in zip(actual, expected):
        _assert_close(got, want)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_compiled_cross_entropy(shape: tuple[int, ...], reduction: str) -> None:
    """log_softmax + nll_loss forward and backward, with an ignored target."""
    logits, target = _targets(shape)
    ours, theirs = logits.clone().requires_grad_(), logits.clone().requires_grad_()

    def fn(x: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(x, target, reduction=reduction)

    actual, externs = _compiled_step(fn, [ours])
    expected = _eager_step(fn, [theirs])
    assert not externs & {"nll_loss_forward", "nll_loss_backward", "_log_softmax_backward_data"}, externs
    for got, want in zip(actual, expected):
        _assert_close(got, want)


# -- batch norm: every form, with the running statistics ------------------------------------------------------------
def _batch_norm(dims: int, train: bool) -> nn.Module:
    module = (nn.BatchNorm1d if dims == 2 else nn.BatchNorm2d)(6).train(train)
    with torch.no_grad():
        module.running_mean.normal_()
        module.running_var.uniform_(0.5, 2.0)
        module.weight.normal_()
        module.bias.normal_()
    return module


def _batch_norm_input(dims: int, square: bool) -> torch.Tensor:
    if dims == 2:
        return torch.randn(6 if square else 10, 6)
    return torch.randn(3, 6, 5, 5) if square else torch.randn(2, 6, 4, 7)


def _assert_same_state(ours: nn.Module, eager: nn.Module) -> None:
    for (name, got), (_, want) in zip(ours.named_buffers(), eager.named_buffers()):
        assert got.dtype == want.dtype, name
        _assert_close(got.float(), want.float())


@pytest.mark.parametrize("square", [False, True], ids=["oblong", "square"])
@pytest.mark.parametrize("dims", [2, 4])
@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
def test_explore_batch_norm(train: bool, dims: int, square: bool) -> None:
    module = _batch_norm(dims, train)
    eager = copy.deepcopy(module)
    ex = fl.explore(module, _batch_norm_input(dims, square))
    assert not {op for op in _extern_ops([ex]) if "batch_norm" in op}, ex.decomposed.fallbacks
    x = _batch_norm_input(dims, square)
    for _ in range(2):  # the running statistics move on each call, as eager's do
        _assert_close(ex(x), eager(x))
        _assert_same_state(module, eager)
    assert ex.verify().ok


@pytest.mark.parametrize("square", [False, True], ids=["oblong", "square"])
@pytest.mark.parametrize("dims", [2, 4])
@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
def test_compiled_batch_norm(train: bool, dims: int, square: bool) -> None:
    """`_native_batch_norm_legit_functional` (train: the running statistics come back as the buffers' new values),
    `_native_batch_norm_legit_no_training` (eval) and `native_batch_norm_backward`."""
    module = _batch_norm(dims, train)
    eager = copy.deepcopy(module)
    x = _batch_norm_input(dims, square)
    ours, theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
    mix = torch.randn_like(x)  # not a sum of squares: its gradient through a train-mode batch norm is zero
    actual, externs = _compiled_step(lambda t: (module(t) * mix).sum(), [ours])
    expected = _eager_step(lambda t: (eager(t) * mix).sum(), [theirs])
    assert not {op for op in externs if "batch_norm" in op}, externs
    for got, want in zip(actual, expected):
        _assert_close(got, want)
    for param, reference in zip(module.parameters(), eager.parameters()):
        _assert_close(param.grad, reference.grad)
    _assert_same_state(module, eager)


# -- extern on purpose: the reason says why ------------------------------------------------------------------------
def _reasons(explorations: Iterable[Any]) -> dict[str, str]:
    return {node.op.split(".")[1]: node.param("reason") for ex in explorations for node in ex.decomposed.graph.nodes
            if node.kind == "extern"}


def test_deliberate_externs_say_why() -> None:
    torch._dynamo.reset()
    before = dynamo_backend.mark()
    conv = nn.Conv2d(3, 4, 3)
    table = nn.Embedding(10, 8)

    def fn(image: torch.Tensor, ids: torch.Tensor, a: torch.Tensor, b: torch.Tensor, q: torch.Tensor) -> Any:
        pooled = F.max_pool2d(conv(image), 2)
        attended = F.scaled_dot_product_attention(q, q, q)
        return pooled.sum() + table(ids).sum() + (a @ b).sum() + attended.sum()

    inputs = [torch.randn(2, 3, 8, 8, requires_grad=True), torch.tensor([[1, 2, 1, 3]]),
              torch.randn(4, 8, requires_grad=True), torch.randn(8, 4, requires_grad=True),
              torch.randn(1, 2, 4, 8, requires_grad=True)]
    torch.compile(fn, backend="fusionlab")(*inputs).backward()
    reasons = _reasons([e for g in dynamo_backend.since(before) for e in g.explorations.values()])
    assert "cuBLAS" in reasons["mm"]
    assert "cuDNN" in reasons["convolution"] and "cuDNN" in reasons["convolution_backward"]
    assert "sliding-window" in reasons["max_pool2d_with_indices"]
    assert "sliding-window" in reasons["max_pool2d_with_indices_backward"]
    assert "atomic" in reasons["embedding_dense_backward"]
    attention = [op for op in reasons if op.startswith("_scaled_dot_product")]
    assert len(attention) == 2 and all("attention kernel" in reasons[op] for op in attention), reasons
    for op, reason in reasons.items():  # each reason starts with the op's name, as fusion decisions quote it
        assert reason.startswith("aten.") and op in reason.split(" ")[0], reason


def test_fusion_decisions_quote_the_reason() -> None:
    conv = nn.Conv2d(3, 4, 3)
    ex = fl.explore(lambda x: torch.relu(conv(x)), torch.randn(1, 3, 6, 6))
    assert any(d.reason.startswith("extern op: aten.convolution.default runs in cuDNN") for d in ex.fused.decisions)


# -- random ops: eager externs in program order, so one seed gives eager's numbers ------------------------------------
def _dropouts(x: torch.Tensor) -> torch.Tensor:
    a = F.dropout(torch.softmax(torch.exp(torch.sin(x)), -1), 0.3)
    b = F.dropout(x, 0.5)  # ready before `a`, drawn after it
    return a * 2 + torch.cos(b)


def test_explore_dropout_draws_what_eager_draws() -> None:
    x = torch.randn(16, 16)
    ex = fl.explore(_dropouts, x)
    assert "bernoulli" in _extern_ops([ex]) or "native_dropout" in _extern_ops([ex])
    assert "random numbers" in _reasons([ex]).get("bernoulli", _reasons([ex]).get("native_dropout", ""))
    torch.manual_seed(7)
    expected = _dropouts(x)
    torch.manual_seed(7)
    _assert_close(ex(x), expected)
    report = ex.verify()
    assert report.ok and "random numbers" in report.note and "random numbers" in report.as_text()


def test_verify_explains_random_ops_that_differ() -> None:
    x = torch.randn(16, 16)
    ex = fl.explore(_dropouts, x)

    def out_of_step(*args: Any) -> Any:
        torch.rand(3)  # one draw more than eager: every mask after it differs
        return ex(*args)

    report = verify_call(ex.fn, ex.example_args, ex.example_kwargs, ex.captured.result, out_of_step,
                         ex.flat_inputs, lambda: None)  # type: ignore[arg-type, return-value]
    assert not report.ok
    assert "model.eval()" in report.note and "model.eval()" in report.as_text()


def test_compiled_dropout_matches_eager_with_the_same_seed() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.Dropout(0.2), nn.GELU(), nn.Linear(32, 8), nn.Dropout(0.1)).train()
    eager = copy.deepcopy(model)
    x = torch.randn(4, 16)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="fusionlab")
    for step in range(2):
        torch.manual_seed(100 + step)
        loss = (compiled(x) ** 2).sum()
        loss.backward()
        torch.manual_seed(100 + step)
        expected = (eager(x) ** 2).sum()
        expected.backward()
        _assert_close(loss.detach(), expected.detach())
        for param, reference in zip(model.parameters(), eager.parameters()):
            _assert_close(param.grad, reference.grad)


def test_captured_text_names_the_op_each_decomposed_node_replaces() -> None:
    def backward(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        mean = x.mean(-1, keepdim=True)
        return torch.ops.aten.native_layer_norm_backward(x, x, [8], mean, mean, w, b, [True, True, True])[0]

    ex = fl.explore(backward, torch.randn(4, 8), torch.randn(8), torch.randn(8))
    text = ex.captured.as_text()
    assert "# from aten.native_layer_norm_backward" in text
    assert "native_layer_norm_backward(" not in text  # decomposed, not called
    mean_line = next(line for line in text.splitlines() if "aten.mean" in line)
    assert "# from" not in mean_line  # the function's own call
