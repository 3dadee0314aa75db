"""torch.compile(model, backend="fusionlab"): forward and backward graphs run through fusionlab's kernels."""

from __future__ import annotations

import copy

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
    before = len(dynamo_backend.explorations)
    x = torch.randn(4, 16)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), atol=1e-5, rtol=1e-5)
    new = list(dynamo_backend.explorations)[before:]
    assert new, "the backend compiled no graph"
    assert any(e.fused.kernels for e in new), "no fusionlab kernel in the compiled graphs"


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
