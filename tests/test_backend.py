"""torch.compile(model, backend="fusionlab"): forward and backward graphs run through fusionlab's kernels."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import fusionlab as fl
from fusionlab import dynamo_backend


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 8))


def test_forward_matches_eager_and_uses_fusionlab_kernels() -> None:
    torch._dynamo.reset()
    model = _model().eval()
    compiled = torch.compile(model, backend="fusionlab")
    before = dynamo_backend.mark()
    x = torch.randn(4, 16)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), atol=1e-5, rtol=1e-5)
    new = dynamo_backend.since(before)
    assert new, "the backend compiled no graph"
    assert any(g.exploration.fused.kernels for g in new), "no fusionlab kernel in the compiled graphs"


def test_gradients_match_eager() -> None:
    torch._dynamo.reset()
    eager = _model()
    ours = copy.deepcopy(eager)
    compiled = torch.compile(ours, backend=fl.backend)
    x = torch.randn(4, 16)
    (eager(x) ** 2).sum().backward()
    (compiled(x) ** 2).sum().backward()
    for expected, actual in zip(eager.parameters(), ours.parameters()):
        assert actual.grad is not None
        torch.testing.assert_close(actual.grad, expected.grad, atol=1e-5, rtol=1e-4)


def test_mark_and_since_count_graphs_when_the_kept_list_is_full(monkeypatch: Any) -> None:
    """`graphs` keeps the latest few: its length stops growing, so `since(mark())` (not a slice by length) finds
    the graphs a call compiled."""
    from collections import deque

    monkeypatch.setattr(dynamo_backend, "graphs", deque(maxlen=2))
    for scale in (2.0, 3.0, 4.0):
        torch._dynamo.reset()
        torch.compile(lambda x, s=scale: x * s, backend="fusionlab")(torch.randn(3))
    assert len(dynamo_backend.graphs) == 2
    before = dynamo_backend.mark()
    torch._dynamo.reset()
    torch.compile(torch.sin, backend="fusionlab")(torch.randn(3))
    new = dynamo_backend.since(before)
    assert len(new) == 1 and new[0] is dynamo_backend.graphs[-1]
    assert dynamo_backend.since(dynamo_backend.mark()) == []


def test_backend_graphs_let_go_of_their_stand_ins() -> None:
    # The backend explores each graph on uninitialised stand-ins as large as its inputs (a training step's saved
    # activations): a kept graph holds only what they looked like, and still runs, verifies and times.
    torch._dynamo.reset()
    before = dynamo_backend.mark()
    x = torch.randn(64, 32)
    compiled = torch.compile(lambda t: torch.softmax(t * 2, -1), backend=fl.backend)
    torch.testing.assert_close(compiled(x), torch.softmax(x * 2, -1))
    (graph,) = dynamo_backend.since(before)
    ex = graph.exploration
    assert ex._example_args == ()
    (stand_in,) = [a for a in ex.example_inputs if isinstance(a, torch.Tensor)]
    assert stand_in.shape == x.shape and stand_in.dtype == x.dtype and stand_in.stride() == x.stride()
    assert ex.verify().ok
    ex.release_examples()  # twice: still what they looked like
    assert [a.shape for a in ex.example_inputs if isinstance(a, torch.Tensor)] == [x.shape]
    fresh = torch.randn(64, 32)
    torch.testing.assert_close(compiled(fresh), torch.softmax(fresh * 2, -1))


def test_a_backend_graph_with_indices_verifies_with_the_range_its_first_call_showed() -> None:
    # The stand-ins are uninitialised: indices drawn from their "range" fell outside the table (an IndexError in
    # eager). verify() refuses until a call has shown the range, then draws valid indices from it.
    torch._dynamo.reset()
    table = nn.Embedding(10, 8)
    before = dynamo_backend.mark()
    compiled = torch.compile(lambda ids: table(ids).relu() * 2, backend=fl.backend)
    ids = torch.tensor([[3, 9, 0, 4], [1, 2, 9, 5]])
    with torch.no_grad():
        expected = table(ids).relu() * 2
        torch.testing.assert_close(compiled(ids), expected)
    (graph,) = dynamo_backend.since(before)
    ex = graph.exploration
    (spec,) = [s for s in ex._example_specs if getattr(s, "dtype", None) == torch.int64]
    assert (spec.low, spec.high) == (0, 9)
    report = ex.verify(seed=3)
    assert report.ok, report
    ex._example_specs = tuple(s._replace(low=None, high=None) if s is spec else s for s in ex._example_specs)
    with pytest.raises(ValueError, match=r"integer input.*int64, shape \[2, 4\].*first call"):
        ex.verify()


def test_forget_drops_the_kept_graphs() -> None:
    torch._dynamo.reset()
    torch.compile(lambda t: t.relu() + 1, backend=fl.backend)(torch.randn(8))
    assert dynamo_backend.graphs
    dynamo_backend.forget()
    assert not dynamo_backend.graphs and not dynamo_backend.explorations and dynamo_backend.mark() == 0
    before = dynamo_backend.mark()
    torch._dynamo.reset()
    torch.compile(lambda t: t.relu() * 3, backend=fl.backend)(torch.randn(8))
    assert len(dynamo_backend.since(before)) == 1


def test_batch_norm_statistics_are_written_by_fusionlab_and_parameters_marked_static() -> None:
    """In training, AOTAutograd keeps a batch norm's running-statistics updates in the forward graph
    (keep_inference_input_mutations): fusionlab writes them (one copy launch per dtype), not AOTAutograd's epilogue,
    so none is handed back as an output; the positions CUDA graphs read in place are the parameters' and buffers'
    (Dynamo's static inputs), not the batch's. Statistics and gradients as eager's twin's over three steps."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.Tanh())
    twin = copy.deepcopy(model)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="fusionlab")
    before = dynamo_backend.mark()
    for _ in range(3):
        x = torch.randn(5, 6)
        for module in (model, twin):
            module.zero_grad()
        compiled(x).sum().backward()
        twin(x).sum().backward()
        for got, want in zip(model.buffers(), twin.buffers(), strict=True):
            torch.testing.assert_close(got, want)
        for got, want in zip(model.parameters(), twin.parameters(), strict=True):
            torch.testing.assert_close(got.grad, want.grad)
    forward = next(g for g in dynamo_backend.since(before) if g.role == "forward")
    ex = forward.exploration
    assert forward.input_updates == () and len(ex.captured.result.mutations) == 3  # mean, var, count
    shapes = [tuple(n.meta["val"].shape) for n in forward.graph_module.graph.nodes if n.op == "placeholder"]
    assert sorted(ex.static_inputs) == [i for i, shape in enumerate(shapes) if shape != (5, 6)], shapes
    torch._dynamo.reset()


def test_a_training_step_saves_no_value_the_backward_can_recompute_cheaply() -> None:
    """AOTAutograd decomposes batch norm and partitions by min-cut (`_joint_decompositions`): the forward saves the
    inputs, the convolution's result, the relu's (the next convolution's input) and the statistics, and neither the
    batch norm's own results nor a second, detached alias of the relu's (the default partition saved 11 values here,
    min-cut 8). Gradients and running statistics as eager's twin's."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 4, 3, padding=1))
    twin = copy.deepcopy(model)
    x = torch.randn(2, 3, 6, 6)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="fusionlab", options={"conv_layout": "as_traced"})
    before = dynamo_backend.mark()
    compiled(x).square().mean().backward()
    twin(x).square().mean().backward()
    for got, want in zip(model.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(got.grad, want.grad, atol=1e-5, rtol=1e-4)
    for got, want in zip(model.buffers(), twin.buffers(), strict=True):
        torch.testing.assert_close(got, want)
    forward = next(g for g in dynamo_backend.since(before) if g.role == "forward")
    assert forward.saved_outputs_from is not None
    output = next(n for n in forward.graph_module.graph.nodes if n.op == "output")
    saved = [v for v in output.args[0][forward.saved_outputs_from:] if isinstance(v, torch.fx.Node)]
    targets = [str(v.target) for v in saved]
    assert len(saved) == 8 and "aten.convolution.default" in targets and "aten.relu.default" in targets, targets
    assert not any("getitem" in t or "detach" in t or "batch_norm" in t for t in targets), targets
    torch._dynamo.reset()


class _SetsAnAttributeOnItsFirstCall(nn.Module):
    """As Hugging Face's classification loss sets `config.problem_type` on its first call: Dynamo's guard on the
    attribute fails on the second call, and it recompiles the same graph."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)
        self.kind: str | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind is None:
            self.kind = "regression"
        return torch.tanh(self.linear(x)).square().mean()


def test_a_recompiled_identical_graph_reuses_the_program(device: str) -> None:
    """The second graph's forward and backward take the first's programs (no second plan, no second compile), and
    gradients stay eager's (on CUDA replayed from CUDA graphs, each graph capturing its own); a graph of other code,
    or of another input layout, gets its own."""
    torch.manual_seed(0)
    model, x = _SetsAnAttributeOnItsFirstCall().to(device), torch.randn(4, 8, device=device)
    twin = copy.deepcopy(model)
    torch._dynamo.reset()
    before = dynamo_backend.mark()
    compiled = torch.compile(model, backend="fusionlab", options={"cudagraphs": device == "cuda"})
    for _ in range(4):
        model.zero_grad()
        twin.zero_grad()
        compiled(x).backward()
        twin(x).backward()
        for got, want in zip(model.parameters(), twin.parameters(), strict=True):
            torch.testing.assert_close(got.grad, want.grad)
    graphs = dynamo_backend.since(before)
    assert [g.role for g in graphs] == ["forward", "backward"] * 2
    assert graphs[0].index == graphs[1].index != graphs[2].index == graphs[3].index  # Dynamo recompiled
    first, second = graphs[:2], graphs[2:]
    for one, two in zip(first, second, strict=True):
        assert two.exploration.compiled is one.exploration.compiled, two.role
        assert two.exploration.fn is two.graph_module and two.exploration.fn is not one.graph_module
    # other code (relu, not tanh), and the same code on a column-major input: programs of their own
    other = torch.compile(lambda t: torch.relu(t).sum(), backend="fusionlab")
    other(x)
    transposed = torch.compile(lambda t: torch.tanh(t).sum(), backend="fusionlab")
    transposed(x)
    transposed(x.t().contiguous().t())
    made = [g.exploration.compiled for g in dynamo_backend.since(before)]
    assert len({id(program) for program in made[4:]}) == len(made[4:]) == 3
    torch._dynamo.reset()


def test_a_graph_of_the_same_code_traced_to_other_dtypes_gets_its_own_program() -> None:
    """`a / b` of integers prints the same code whatever the default dtype, but is float32 or float64 by it: the
    second function, compiled under float64, must not take the first one's float32 program."""
    def first(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a / b

    def second(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a / b

    a, b = torch.arange(1, 5), torch.arange(2, 6)
    torch._dynamo.reset()
    assert torch.compile(first, backend="fusionlab")(a, b).dtype == torch.float32
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        got = torch.compile(second, backend="fusionlab")(a, b)
        assert got.dtype == torch.float64, got.dtype
        torch.testing.assert_close(got, a / b)
    finally:
        torch.set_default_dtype(default)
        torch._dynamo.reset()


def _loss_step_against_eager(step: Callable[..., torch.Tensor], labels: torch.Tensor) -> int:
    """A bf16 loss step of hidden states [2, 8, 32] and a [32, 3000] head through the backend, its loss and both
    gradients against eager's; the backend's mark from before the compile."""
    h = torch.randn(2, 8, 32).to(torch.bfloat16).requires_grad_()
    w = (torch.randn(32, 3000) * 0.2).to(torch.bfloat16).requires_grad_()
    before = dynamo_backend.mark()
    loss = torch.compile(step, backend="fusionlab")(h, w, labels)
    loss.backward()
    ours = loss.detach(), h.grad.clone(), w.grad.clone()
    h.grad = w.grad = None
    loss = step(h, w, labels)
    loss.backward()
    for mine, eager in zip(ours, (loss.detach(), h.grad, w.grad)):
        torch.testing.assert_close(mine.float(), eager.float(), atol=2e-2, rtol=2e-2)
    return before


def test_a_loss_over_shifted_logits_made_contiguous_trains_as_eager_does() -> None:
    # the causal-LM loss of earlier transformers releases: `logits[..., :-1, :].contiguous()` then `view(-1, vocab)`.
    # The backward's view of the slice's gradient has no strides PyTorch can view (torch's meta `view` raised a
    # ValueError here, not the RuntimeError the program writer caught): the writer must copy, not fail to build
    torch._dynamo.reset()

    def step(h: torch.Tensor, w: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = (h @ w).float()
        shifted = logits[..., :-1, :].contiguous()
        return nn.functional.cross_entropy(shifted.view(-1, shifted.shape[-1]), labels[..., 1:].contiguous().view(-1))

    labels = torch.randint(0, 3000, (2, 8))
    labels[0, 3] = -100
    before = _loss_step_against_eager(step, labels)
    assert {g.role for g in dynamo_backend.since(before)} == {"forward", "backward"}


def test_a_bf16_loss_saves_its_logits_and_row_statistics_for_backward_not_float32_log_probabilities() -> None:
    # with `detach` and log-softmax decomposed before the min-cut partition (as Inductor's table does), the
    # backward recomputes the log-probabilities from the bf16 logits and each row's max and log-sum: the forward
    # no longer writes a float32 [rows, vocabulary] table for it
    torch._dynamo.reset()

    def step(h: torch.Tensor, w: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = h @ w
        return nn.functional.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.view(-1))

    before = _loss_step_against_eager(step, torch.randint(0, 3000, (2, 8)))
    (forward,) = [g for g in dynamo_backend.since(before) if g.role == "forward"]
    graph = forward.exploration.decomposed.graph
    saved = [graph[v].type for v in graph.outputs]
    assert not [t for t in saved if t.dtype == torch.float32 and t.numel >= 16 * 3000], saved
    assert any(t.dtype == torch.bfloat16 and t.numel == 16 * 3000 for t in saved), saved
