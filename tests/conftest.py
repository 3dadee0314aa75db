"""Shared fixtures: the device parametrisation (CPU always; CUDA on the GPU machine, marked `gpu`)."""

from __future__ import annotations

import zlib

import pytest
import torch

DEVICES = [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)]


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> str:
    if request.param == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device here")
    return str(request.param)


@pytest.fixture(autouse=True)
def _seeded(request: pytest.FixtureRequest) -> None:
    """A per-test seed from the test's id: inputs are random but the same on every run (CI stability)."""
    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))
