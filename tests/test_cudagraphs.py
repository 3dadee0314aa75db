"""CUDA graphs on both entry points (fusionlab.runtime.cudagraphs): the option's plumbing and refusals on a CPU;
on the GPU machine (`gpu`), replays equal eager on fresh inputs, a new shape captures again, outputs of a call are
not overwritten by the next, parameters updated in place are read, a training step's gradients match, dropout
draws what eager draws from the same seed."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

import fusionlab as fl
from fusionlab.dynamo_backend import _cudagraphs_option
from fusionlab.runtime.cudagraphs import CudaGraphs, CudaGraphsError, _layout, layout_guard


def gelu_bias(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x + b) * 2


# -- the option, on any machine -----------------------------------------------------------------------
def test_the_layout_guard_passes_only_layouts_python_finds_equal() -> None:
    """A replay's inputs are matched to a captured graph by one C++ check (`layout_guard`); whatever it passes, the
    Python comparison of sizes, strides and dtype passes too. Square shapes, where a transposed layout has the
    captured sizes; and the check keeps no input alive."""
    import gc
    import weakref

    torch.manual_seed(0)
    square, wide = torch.randn(6, 6), torch.randn(4, 6)
    captured = [square, square.t(), wide, wide[:, ::2], torch.randn(2, 3, 4, 4).contiguous(
        memory_format=torch.channels_last), torch.randn(5, dtype=torch.bfloat16)]
    guard = layout_guard(captured)
    assert guard is not None, "torch's tensor guards are missing: replays compare layouts in Python"
    calls = [
        [torch.randn(6, 6), torch.randn(6, 6).t(), torch.randn(4, 6), torch.randn(4, 6)[:, ::2],
         torch.randn(2, 3, 4, 4).contiguous(memory_format=torch.channels_last), torch.randn(5, dtype=torch.bfloat16)],
        [torch.randn(6, 6).t(), torch.randn(6, 6).t(), *captured[2:]],  # a transposed square input
        [*captured[:3], torch.randn(4, 3), *captured[4:]],  # a slice's strides made dense
        [*captured[:4], torch.randn(2, 3, 4, 4), captured[5]],  # channels-last made row-major
        [*captured[:5], torch.randn(5)],  # another dtype
        [*captured[:2], torch.randn(4, 7)[:, :6], *captured[3:]],  # same sizes, a longer row
    ]
    for number, call in enumerate(calls):
        same = all(_layout(a) == _layout(b) for a, b in zip(call, captured, strict=True))
        assert guard(*call) == same == (number == 0), number
    value = torch.randn(3)
    alive = weakref.ref(value)
    held = layout_guard([value])
    del value
    gc.collect()
    assert alive() is None and held is not None


def test_explore_refuses_cpu_inputs_naming_the_device() -> None:
    with pytest.raises(CudaGraphsError, match=r"needs CUDA tensors: the example inputs are on cpu.*\.to\('cuda'\)"):
        fl.explore(gelu_bias, torch.randn(4, 8), torch.randn(8), cudagraphs=True)


def test_explore_refuses_a_cpu_module_with_cuda_graphs() -> None:
    with pytest.raises(CudaGraphsError, match="on cpu"):
        fl.explore(torch.nn.Linear(4, 4), torch.randn(2, 4), cudagraphs="overwrite")


def test_explore_takes_only_the_listed_values() -> None:
    with pytest.raises(ValueError, match=r"cudagraphs='yes' is not an option: pass False, True .* or 'overwrite'"):
        fl.explore(gelu_bias, torch.randn(4, 8), torch.randn(8), cudagraphs="yes")
    with pytest.raises(ValueError, match="is not an option"):
        fl.explore(gelu_bias, torch.randn(4, 8), torch.randn(8), cudagraphs=1)


def test_off_by_default_and_kept_by_with_fusion() -> None:
    ex = fl.explore(gelu_bias, torch.randn(4, 8), torch.randn(8))
    assert ex.cudagraphs is False
    x, b = torch.randn(4, 8), torch.randn(8)
    torch.testing.assert_close(ex(x, b), gelu_bias(x, b))  # the plain path is untouched
    decisions = [d for d in ex.fused.decisions if d.fused]
    again = ex.with_fusion(forbid=[(decisions[0].producer, decisions[0].consumer)])
    assert again.cudagraphs is False


def test_a_function_parameter_named_cudagraphs_is_ambiguous() -> None:
    def scaled(x: torch.Tensor, cudagraphs: bool = False) -> torch.Tensor:
        return x * 2

    with pytest.raises(TypeError, match="cudagraphs=True is ambiguous"):
        fl.explore(scaled, torch.randn(4), cudagraphs=True)


def test_backend_options_and_mode() -> None:
    assert _cudagraphs_option(None, {}) is False
    assert _cudagraphs_option("reduce-overhead", {}) is True
    assert _cudagraphs_option("default", {"cudagraphs": "overwrite"}) == "overwrite"
    with pytest.raises(ValueError, match=r"no option 'cuda_graphs': its options are \{'cudagraphs'"):
        _cudagraphs_option(None, {"cuda_graphs": True})
    with pytest.raises(ValueError, match="mode='default' or 'reduce-overhead'.*got 'max-autotune'"):
        _cudagraphs_option("max-autotune", {})


def test_backend_refuses_cpu_through_torch_compile() -> None:
    torch._dynamo.reset()
    compiled = torch.compile(torch.nn.Linear(4, 4), backend="fusionlab", options={"cudagraphs": True})
    with pytest.raises(Exception, match="cudagraphs=True needs CUDA tensors"):
        compiled(torch.randn(2, 4))
    torch._dynamo.reset()


def test_graphs_refuse_cpu_inputs_at_the_call() -> None:
    graphed = CudaGraphs(lambda x: (x * 2,), name="double")
    with pytest.raises(CudaGraphsError, match="the inputs of double are on cpu"):
        graphed(torch.randn(4))
    assert graphed.captures == 0
    with pytest.raises(ValueError, match="warmup must be at least 1"):
        CudaGraphs(lambda x: (x,), warmup=0)


def test_handed_memory_is_held_by_any_alias_of_it() -> None:
    """The check before a replay that overwrites saved activations: the graph's own references do not count; the
    handed tensor, a view or a detached alias of it (a saved-tensor hook's copy-free pack) do, until dropped."""
    from fusionlab.runtime.cudagraphs import _Storage

    own = torch.randn(8)  # the graph's output
    buffer_view = own[:4]  # the graph's other references, taken before the count
    storage = _Storage(own)
    assert not storage.held()
    handed = own.detach()
    assert storage.held()
    alias = handed[2:].detach()
    del handed
    assert storage.held(), "a detached view of the handed tensor still reads the graph's memory"
    del alias
    assert not storage.held()
    del buffer_view
    assert not storage.held()


# -- on the GPU machine ------------------------------------------------------------------------------
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")


@pytest.mark.gpu
@cuda
def test_replays_equal_eager_and_keep_earlier_outputs() -> None:
    x, b = torch.randn(64, 256, device="cuda"), torch.randn(256, device="cuda")
    ex = fl.explore(gelu_bias, x, b, cudagraphs=True)
    inputs = [(torch.randn_like(x), torch.randn_like(b)) for _ in range(3)]
    outputs = [ex(*call) for call in inputs]
    for call, output in zip(inputs, outputs):  # call 1's output is intact after calls 2 and 3
        torch.testing.assert_close(output, gelu_bias(*call))
    # call 1 handed out the graph's memory; call 2 found it still held, so the output is copied from then on, by a
    # graph captured again (the first one writes the memory call 1's output holds)
    assert ex.graphed.copied_outputs == {0}
    assert ex.graphed.captures == 2 and ex.graphed.replays == 3
    assert len({o.data_ptr() for o in outputs}) == 3
    # the calls were matched to the graph by the C++ layout check (torch has it on every version we support)
    (entry,) = [entry for entries in ex.graphed.graphs.values() for entry in entries]
    assert entry.guard is not None and entry.fits([*inputs[0]])
    assert not entry.fits([inputs[0][0].t().contiguous().t(), inputs[0][1]])  # same sizes, column-major


@pytest.mark.gpu
@cuda
def test_outputs_let_go_before_the_next_call_are_never_copied() -> None:
    x, b = torch.randn(64, 256, device="cuda"), torch.randn(256, device="cuda")
    ex = fl.explore(gelu_bias, x, b, cudagraphs=True)
    addresses = set()
    for _ in range(4):
        fresh = torch.randn_like(x), torch.randn_like(b)
        output = ex(*fresh)
        torch.testing.assert_close(output, gelu_bias(*fresh))
        addresses.add(output.data_ptr())
        del output
    assert ex.graphed.copied_outputs == set() and ex.graphed.captures == 1 and len(addresses) == 1


@pytest.mark.gpu
@cuda
def test_gradients_accumulated_over_steps_are_not_overwritten() -> None:
    """Gradients left in `.grad` from one step to the next (accumulated, no zero_grad): the backward graph's outputs
    are held at its next replay, so they are copied from then on; every step's sums equal eager's twin's."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 8)).cuda()
    twin = copy.deepcopy(model)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="fusionlab", options={"cudagraphs": True})
    for step in range(5):
        x = torch.randn(16, 32, device="cuda")
        compiled(x).square().sum().backward()
        twin(x).square().sum().backward()
        for g, want in zip(_grads(model), _grads(twin), strict=True):
            torch.testing.assert_close(g, want, rtol=1e-4, atol=1e-5, msg=f"step {step}")
    backward = _graphed("backward")
    assert backward.copied_outputs and backward.replays >= 2, backward
    torch._dynamo.reset()


@pytest.mark.gpu
@cuda
def test_overwrite_returns_the_graphs_memory() -> None:
    x, b = torch.randn(64, 256, device="cuda"), torch.randn(256, device="cuda")
    ex = fl.explore(gelu_bias, x, b, cudagraphs="overwrite")
    first = ex(x, b)
    torch.testing.assert_close(first, gelu_bias(x, b))
    y = torch.randn_like(x)
    second = ex(y, b)
    assert second.data_ptr() == first.data_ptr()  # as documented: the next call overwrites
    torch.testing.assert_close(first, gelu_bias(y, b))


@pytest.mark.gpu
@cuda
def test_a_new_shape_captures_again() -> None:
    ex = fl.explore(gelu_bias, torch.randn(16, 128, device="cuda"), torch.randn(128, device="cuda"),
                    dynamic=True, cudagraphs=True)
    for rows in (16, 48, 16):
        x, b = torch.randn(rows, 128, device="cuda"), torch.randn(128, device="cuda")
        torch.testing.assert_close(ex(x, b), gelu_bias(x, b))
    assert ex.graphed.captures == 2 and ex.graphed.replays == 3
    graphed = CudaGraphs(lambda a: (a.sum(0),), max_graphs=2, name="column_sum")
    for rows in (4, 8):
        graphed(torch.ones(rows, 3, device="cuda"))
    with pytest.raises(CudaGraphsError, match="column_sum has captured 2 graphs"):
        graphed(torch.ones(12, 3, device="cuda"))


@pytest.mark.gpu
@cuda
def test_parameters_are_read_in_place() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU()).cuda()
    x = torch.randn(8, 32, device="cuda")
    ex = fl.explore(model, x, cudagraphs=True)
    torch.testing.assert_close(ex(x), model(x))
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(0.5)  # as an optimizer step does: same memory, new values
    fresh = torch.randn_like(x)
    torch.testing.assert_close(ex(fresh), model(fresh))
    assert ex.graphed.captures == 1


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("mode", [True, "overwrite"])
def test_inputs_and_buffers_written_in_place_are_written_on_every_replay(mode: bool | str) -> None:
    """An input the function writes (copied into the graph's buffer) gets its new value after each replay; a
    module's buffer (read in place) is written by the graph itself. Both as eager's, call after call, one capture."""
    def bump(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x.mul_(2).add_(y)
        return x.sum(0)

    y = torch.randn(16, 8, device="cuda")
    ex = fl.explore(bump, torch.randn(16, 8, device="cuda"), y, cudagraphs=mode)
    for _ in range(3):
        x = torch.randn(16, 8, device="cuda")
        want_x = x.clone()
        want = bump(want_x, y)
        torch.testing.assert_close(ex(x, y), want)
        torch.testing.assert_close(x, want_x)
    model = torch.nn.BatchNorm1d(8).cuda()
    twin = copy.deepcopy(model)
    ex = fl.explore(model, y, cudagraphs=mode)
    for _ in range(3):
        x = torch.randn(16, 8, device="cuda")
        torch.testing.assert_close(ex(x), twin(x))
        for got, want in zip(model.buffers(), twin.buffers(), strict=True):
            torch.testing.assert_close(got, want)
    (entry,) = [e for entries in ex.graphed.graphs.values() for e in entries]
    assert ex.graphed.captures == 1 and entry.host_writes == (), "the buffers are written inside the graph"


@pytest.mark.gpu
@cuda
def test_mixed_devices_are_refused() -> None:
    graphed = CudaGraphs(lambda a, b: (a + b.to(a.device),), name="add")
    with pytest.raises(CudaGraphsError, match="input 1 on cpu beside inputs on cuda"):
        graphed(torch.ones(4, device="cuda"), torch.ones(4))


def _train_steps(run: Any, model: torch.nn.Module, batches: list[dict[str, torch.Tensor]]) -> list[Any]:
    from fusionlab import models

    return [models.train_step(run, dict(model.named_parameters()), batch) for batch in batches]


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("mode", [True, "overwrite"])
def test_training_steps_match_eager(mode: bool | str) -> None:
    from fusionlab import models

    model, inputs = models.build("gpt2", "tiny", device="cuda", dtype=torch.float32, train=True)
    batches = [inputs, {k: v.clone() for k, v in inputs.items()}]
    batches[1]["input_ids"] = torch.randint_like(inputs["input_ids"], 0, int(inputs["input_ids"].max()) + 1)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="fusionlab", options={"cudagraphs": mode})
    for batch in batches:  # each step checked before the next: with "overwrite" its loss is the graph's memory
        [(loss, grads)] = _train_steps(compiled, model, [batch])
        [(want_loss, want_grads)] = _train_steps(model, model, [batch])
        torch.testing.assert_close(loss, want_loss, rtol=1e-4, atol=1e-4)
        for name, grad in want_grads.items():
            torch.testing.assert_close(grads[name], grad, rtol=1e-3, atol=1e-4, msg=name)
    torch._dynamo.reset()


def _graphed(role: str) -> CudaGraphs:
    from fusionlab import dynamo_backend

    (graph,) = [g for g in dynamo_backend.graphs if g.role == role][-1:]
    return graph.exploration.graphed


def _grads(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.grad.clone() for p in model.parameters()]  # type: ignore[union-attr]


@pytest.mark.gpu
@cuda
def test_saved_activations_are_not_copied_and_a_second_forward_does_not_overwrite_them() -> None:
    """cudagraphs=True in training: the forward hands out its saved activations as the graph's memory and the
    backward reads them there (no copy either way); the graph writes its batch norm's new running statistics into
    the module's buffers itself; a forward run while the last one's activations are still held (gradients
    accumulated over two micro-batches) runs without the graph, so both backwards are right. Gradients and running
    statistics as eager's twin's."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.BatchNorm1d(64), torch.nn.Tanh(),
                                torch.nn.Linear(64, 8)).cuda()
    twin = copy.deepcopy(model)
    batches = [torch.randn(16, 32, device="cuda") for _ in range(4)]
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="fusionlab", options={"cudagraphs": True})

    def check(*steps: torch.Tensor) -> None:
        for module in (model, twin):
            module.zero_grad()
        sum(compiled(x).square().sum() for x in steps).backward()  # type: ignore[union-attr]
        sum(twin(x).square().sum() for x in steps).backward()  # type: ignore[union-attr]
        for g, want in zip(_grads(model), _grads(twin), strict=True):
            torch.testing.assert_close(g, want, rtol=1e-4, atol=1e-5)
        for got, want in zip(model.buffers(), twin.buffers(), strict=True):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)

    for x in batches:  # plain steps: captured, then replayed
        check(x)
    forward, backward = _graphed("forward"), _graphed("backward")
    assert forward.replays >= 2 and forward.bypassed == 0 and backward.bypassed == 0, (forward, backward)
    assert forward.kept_from is not None and len(forward.writes) == 3, "saved activations uncopied, statistics written"
    (written,) = [e for entries in forward.graphs.values() for e in entries]
    assert written.host_writes == () and len(written.in_place) >= 7, "parameters and buffers read and written in place"
    (entry,) = [e for entries in backward.graphs.values() for e in entries]
    assert len(entry.in_place) >= 2, "the backward reads the saved activations where the forward left them"
    # two micro-batches, one backward: the second forward must not overwrite what the first saved
    check(batches[0], batches[1])
    assert forward.bypassed >= 1
    replays = forward.replays
    check(batches[2])  # and the graph is replayed again once the backward has run
    assert forward.replays == replays + 1, forward
    torch._dynamo.reset()


@pytest.mark.gpu
@cuda
def test_a_graphs_output_is_read_in_place_by_the_next_graph_until_its_caller_holds_it() -> None:
    """A graph break between a model and its loss (as in Hugging Face's causal LMs): the model's graph hands its
    output to the loss's graph, and the loss's backward hands its gradient to the model's backward; each is read
    where it lies, not copied into a buffer. A caller that keeps the model's output past the next step makes the
    model's graph copy it; the loss's graph then copies it into a buffer, in a graph captured again. Gradients and
    the kept outputs as eager's twin's, on fresh inputs."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 48)).cuda()
    twin = copy.deepcopy(model)

    def step(module: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = module(x)
        torch._dynamo.graph_break()
        return h, h.log_softmax(-1)[:, :3].sum()

    torch._dynamo.reset()
    compiled = torch.compile(lambda x: step(model, x), backend="fusionlab", options={"cudagraphs": True})

    def check(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        for module in (model, twin):
            module.zero_grad(set_to_none=True)
        h, loss = compiled(x)
        loss.backward()
        want_h, want = step(twin, x)
        want.backward()
        for g, expected in zip(_grads(model), _grads(twin), strict=True):
            torch.testing.assert_close(g, expected, rtol=1e-4, atol=1e-5)
        return h, want_h

    for _ in range(4):  # the model's output let go at once
        h, _ = check(torch.randn(16, 32, device="cuda"))
        del h
    from fusionlab import dynamo_backend

    ours = list(dynamo_backend.graphs)[-4:]  # the model's and the loss's forward and backward
    (model_index, loss_index) = sorted({g.index for g in ours})
    graphed = {(g.index, g.role): g.exploration.graphed for g in ours}
    loss_forward, model_backward = graphed[loss_index, "forward"], graphed[model_index, "backward"]
    for graphs in (loss_forward, model_backward):
        (entry,) = [e for entries in graphs.graphs.values() for e in entries]
        assert entry.copied == (), f"{graphs}: an input copied into a buffer ({entry.copied})"
        assert graphs.replays >= 2 and graphs.bypassed == 0, graphs
    kept = [check(torch.randn(16, 32, device="cuda")) for _ in range(3)]  # each step's output kept
    for h, want_h in kept:  # intact after the steps after it
        torch.testing.assert_close(h, want_h, rtol=1e-4, atol=1e-5)
    assert graphed[model_index, "forward"].copied_outputs, "the kept output is copied by its graph"
    entries = [e for entries in loss_forward.graphs.values() for e in entries]
    assert entries and all(e.copied for e in entries), "the loss's graph copies the moved output into a buffer"
    assert loss_forward.replays >= 4, loss_forward
    torch._dynamo.reset()


@pytest.mark.gpu
@cuda
def test_overwrite_refuses_a_backward_after_a_second_forward() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1)).cuda()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="fusionlab", options={"cudagraphs": "overwrite"})
    x = torch.randn(8, 32, device="cuda")
    compiled(x).sum().backward()  # capture
    first = compiled(x).sum()
    compiled(torch.randn_like(x)).sum()  # overwrites the activations the first one saved
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        first.backward()
    torch._dynamo.reset()


@pytest.mark.gpu
@cuda
def test_dropout_draws_what_eager_draws_from_one_seed() -> None:
    def noisy(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.dropout(x * 2, p=0.5, training=True) + 1

    x = torch.randn(64, 128, device="cuda")
    ex = fl.explore(noisy, x, cudagraphs=True)
    ex(x)  # capture
    torch.manual_seed(7)
    ours = [ex(x), ex(x)]
    torch.manual_seed(7)
    eager = [noisy(x), noisy(x)]
    assert not torch.equal(ours[0], ours[1])  # each replay draws anew
    for got, want in zip(ours, eager):
        torch.testing.assert_close(got, want)
