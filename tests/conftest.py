"""Shared fixtures: the device parametrisation (CPU always; CUDA on the GPU machine, marked `gpu`)."""

from __future__ import annotations

import os
import zlib
from typing import Any

import pytest
import torch

DEVICES = [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)]


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> str:
    if request.param == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device here")
    return str(request.param)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true",
                     help="rewrite tests/golden/*.py from the current code generator (then review the diff)")


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden")) or os.environ.get("FUSIONLAB_UPDATE_GOLDEN") == "1"


@pytest.fixture(autouse=True)
def _seeded(request: pytest.FixtureRequest) -> None:
    """A per-test seed from the test's id: inputs are random but the same on every run (CI stability)."""
    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The OpInfo pass rate per op and overall (from each test's user_properties, so it also works with xdist)."""
    rows: dict[str, dict[str, int]] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            for key, value in getattr(report, "user_properties", ()):
                if key == "opinfo" and getattr(report, "when", "call") == "call":
                    rows[value[0]] = value[1]
    if not rows:
        return
    write = terminalreporter.write_line
    terminalreporter.section("OpInfo samples through fusionlab (passed / eager-runnable)")
    total: dict[str, int] = {}
    for name in sorted(rows):
        counts = rows[name]
        for outcome, count in counts.items():
            total[outcome] = total.get(outcome, 0) + count
        ran = counts.get("passed", 0) + counts.get("refused", 0) + counts.get("failed", 0)
        extra = "".join(f", {counts[k]} {k}" for k in ("refused", "failed", "not applicable") if counts.get(k))
        write(f"  {name:40s} {counts.get('passed', 0):4d}/{ran:<4d} {100 * counts.get('passed', 0) / max(ran, 1):6.1f}%"
              f"{extra}")
    passed, ran = total.get("passed", 0), total.get("passed", 0) + total.get("refused", 0) + total.get("failed", 0)
    write(f"  overall: {passed}/{ran} samples passed ({100 * passed / max(ran, 1):.2f}%) over {len(rows)} ops; "
          f"{total.get('refused', 0)} refused (data-dependent), {total.get('failed', 0)} failed, "
          f"{total.get('not applicable', 0)} not applicable (eager raises)")
