"""Stage timings: each stage's `seconds` is its own work, so their sum (the benchmark's compile time) is honest."""

from __future__ import annotations

import time

import torch

import fusionlab as fl
from fusionlab.stages import STAGES


def test_stage_seconds_do_not_include_earlier_stages() -> None:
    ex = fl.explore(lambda x, w: torch.layer_norm(torch.softmax(x, -1) @ w, (16,)), torch.randn(8, 16),
                    torch.randn(16, 16))
    start = time.perf_counter()
    ex.compiled  # noqa: B018 - computes every stage, each inside the next one's call
    wall = time.perf_counter() - start
    total = sum(getattr(ex, stage).seconds for stage in STAGES)
    assert total <= wall, f"stage seconds sum to {total:.3f} s in a {wall:.3f} s computation: some counted twice"
