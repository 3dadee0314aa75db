"""The model zoo end to end: every model through `fl.explore` and `torch.compile(backend="fusionlab")`, inference and
a training step, against eager on the same weights and inputs (float32 on CPU, 1e-5 relative)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import fusionlab as fl
from fusionlab import dynamo_backend, models

pytest.importorskip("transformers")

NAMES = models.names()


def _close(actual: torch.Tensor, expected: torch.Tensor, scale: float, what: str) -> None:
    """Within 1e-5 of the largest value of `expected`, or of `scale` (the largest of its kind: a gradient that is
    zero in exact arithmetic is rounding noise in both)."""
    err = (actual.float() - expected.float()).abs().max().item()
    bound = 1e-5 * max(expected.float().abs().max().item(), 1e-3 * scale)
    assert err <= bound, f"{what}: max error {err:.3g} > {bound:.3g}"


def _outputs(output: Any) -> dict[str, torch.Tensor]:
    """Every tensor of a model output, by where it is (logits, each layer's cached keys and values, ...)."""
    leaves = {"logits": output.logits}
    cache = getattr(output, "past_key_values", None)
    for i, layer in enumerate(getattr(cache, "layers", []) or []):
        leaves[f"cache {i} keys"], leaves[f"cache {i} values"] = layer.keys, layer.values
    return leaves


def _compare_inference(run: Any, model: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> None:
    with torch.no_grad():
        expected, actual = _outputs(model(**inputs)), _outputs(run(**inputs))
    assert expected.keys() == actual.keys()
    for key in expected:
        _close(actual[key], expected[key], 0.0, key)


def _compare_training(run: Any, model: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> None:
    parameters = dict(model.named_parameters())
    loss, grads = models.train_step(model, parameters, inputs)
    our_loss, our_grads = models.train_step(run, parameters, inputs)
    _close(our_loss, loss, 0.0, "loss")
    assert our_grads.keys() == grads.keys(), "a parameter has no gradient"
    scale = max(g.abs().max().item() for g in grads.values())
    for name, grad in grads.items():
        _close(our_grads[name], grad, scale, f"gradient of {name}")


def test_zoo_names_and_errors() -> None:
    assert {"gpt2", "llama", "bert", "resnet50", "vit"} <= set(NAMES)
    with pytest.raises(ValueError, match="no model 'gpt3'.*choose one of"):
        models.build("gpt3")
    with pytest.raises(ValueError, match="size 'huge'"):
        models.build("gpt2", size="huge")


@pytest.mark.parametrize("name", NAMES)
def test_zoo_builds_nonzero_models(name: str) -> None:
    model, inputs = models.build(name, train=True)
    assert model.training and "labels" in inputs
    assert all(p.any() for p in model.parameters()), "a zero parameter would make a check vacuous"
    assert torch.isfinite(models.loss_of(model(**inputs)))


@pytest.mark.parametrize("name", NAMES)
def test_explore_inference_matches_eager(name: str) -> None:
    model, inputs = models.build(name)
    ex = fl.explore(model, **inputs)
    _compare_inference(ex, model, inputs)
    # fresh inputs of the same shapes, through the same program
    _, other = models.build(name, seed=7)
    _compare_inference(ex, model, other)


@pytest.mark.parametrize("name", NAMES)
def test_backend_inference_matches_eager(name: str) -> None:
    torch._dynamo.reset()
    model, inputs = models.build(name)
    _compare_inference(torch.compile(model, backend="fusionlab"), model, inputs)
    assert dynamo_backend.graphs[-1].role == "inference"


@pytest.mark.parametrize("name", NAMES)
def test_explore_training_step_matches_eager(name: str) -> None:
    model, inputs = models.build(name, train=True)
    _compare_training(fl.explore(model, **inputs), model, inputs)


@pytest.mark.parametrize("name", NAMES)
def test_backend_training_step_matches_eager(name: str) -> None:
    torch._dynamo.reset()
    model, inputs = models.build(name, train=True)
    before = dynamo_backend.mark()
    _compare_training(torch.compile(model, backend="fusionlab"), model, inputs)
    new = dynamo_backend.since(before)
    roles = {(g.index, g.role) for g in new}
    assert any((index, "backward") in roles for index, role in roles if role == "forward"), roles
    largest = max((g for g in new if g.role == "backward"), key=lambda g: len(g.graph_module.graph.nodes))
    assert largest.exploration.fused.kernels, "the model's backward graph has no fusionlab kernel"


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_backend_after_recompiles_with_new_sizes(name: str) -> None:
    """A second and third sequence length: Dynamo recompiles with symbolic sizes; each size is explored once."""
    torch._dynamo.reset()
    model, inputs = models.build(name)
    compiled = torch.compile(model, backend="fusionlab")
    before = dynamo_backend.mark()
    for length in (16, 12, 9):
        cut = {key: value[:, :length] for key, value in inputs.items()}
        _compare_inference(compiled, model, cut)
    assert any(g.dynamic and len(g.explorations) == 2 for g in dynamo_backend.since(before))


def test_backend_training_after_a_new_batch_size() -> None:
    torch._dynamo.reset()
    model, inputs = models.build("gpt2", train=True)
    compiled = torch.compile(model, backend="fusionlab")
    for batch in (2, 1, 2):
        _compare_training(compiled, model, {key: value[:batch] for key, value in inputs.items()})


def test_backend_labels_graph_breaks() -> None:
    torch._dynamo.reset()

    def branchy(x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(x) * 2
        if y.sum() > 0:
            y = y + 1
        return y.softmax(-1)

    x = torch.randn(4, 8)
    before = dynamo_backend.mark()
    torch.testing.assert_close(torch.compile(branchy, backend="fusionlab")(x), branchy(x))
    new = dynamo_backend.since(before)
    assert len({g.index for g in new}) == 2
    first = min(new, key=lambda g: g.index)
    assert "graph break at" in first.ended_by and "if/while on a tensor" in first.ended_by, first.ended_by
    assert "test_models.py" in first.ended_by


def test_llama_cache_is_returned_and_matches() -> None:
    model, inputs = models.build("llama")
    ex = fl.explore(model, **inputs)
    out = ex(**inputs)
    assert type(out.past_key_values).__name__ == "DynamicCache"
    _compare_inference(ex, model, inputs)


def test_bench_model_row_on_cpu() -> None:
    """Correctness first (ours and Inductor's error against eager), then measured eager and Inductor times; on a
    CPU fusionlab's interpreted kernels are not timed, and the row says so."""
    from fusionlab.measure.models import MODEL_COLUMNS, bench_model, model_table

    row = bench_model("vit", mode="inference", size="tiny", device="cpu", repeat=2)
    assert set(row) == set(MODEL_COLUMNS)
    assert row["correct"] and row["fusionlab_err"] < 1e-5 and row["inductor_err"] < 1e-5, row
    assert row["eager_ms"] > 0 and row["inductor_ms"] > 0 and row["fusionlab_ms"] is None
    assert "not timed" in row["timing"] and row["threads"] == 1
    assert row["fusionlab_kernels"] > 0 and row["fusionlab_compile_s"] > 0
    assert "| vit | inference | 2 | float32 |" in model_table([row])


def test_cli_lists_the_zoo(capsys: pytest.CaptureFixture[str]) -> None:
    from fusionlab.cli import main

    assert main(["bench", "--models", "--list"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in NAMES)
    assert main(["bench", "--models", "gpt3"]) == 2
