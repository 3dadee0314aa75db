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


def _properties(terminalreporter: Any, wanted: str) -> list[Any]:
    found = []
    for reports in terminalreporter.stats.values():
        for report in reports:
            for key, value in getattr(report, "user_properties", ()):
                if key == wanted and getattr(report, "when", "call") == "call":
                    found.append(value)
    return found


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """OpInfo pass rates (per op; per variant: bfloat16, float16, in-place) and the fuzzer's outcome tables
    (from each test's user_properties, so it also works with xdist)."""
    _opinfo_summary(terminalreporter)
    _opinfo_variant_summary(terminalreporter)
    _fuzz_summary(terminalreporter)


def _opinfo_variant_summary(terminalreporter: Any) -> None:
    rows = _properties(terminalreporter, "opinfo-variant")
    if not rows:
        return
    write = terminalreporter.write_line
    terminalreporter.section("OpInfo variants through fusionlab (passed / eager-runnable samples)")
    for variant in sorted({variant for variant, _, _ in rows}):
        total: dict[str, int] = {}
        failing = []
        for name, counts in ((n, c) for v, n, c in rows if v == variant):
            for outcome, count in counts.items():
                total[outcome] = total.get(outcome, 0) + count
            if counts.get("failed"):
                failing.append(f"{name} ({counts['failed']})")
        passed = total.get("passed", 0)
        ran = passed + total.get("refused", 0) + total.get("failed", 0)
        ops = sum(1 for v, _, _ in rows if v == variant)
        write(f"  {variant:9s} {passed:5d}/{ran:<5d} {100 * passed / max(ran, 1):6.1f}% over {ops} ops; "
              f"{total.get('refused', 0)} refused, {total.get('failed', 0)} failed, "
              f"{total.get('not applicable', 0)} not applicable")
        if failing:
            write(f"            failing ops: {', '.join(failing[:30])}{' ...' if len(failing) > 30 else ''}")


def _fuzz_summary(terminalreporter: Any) -> None:
    programs = _properties(terminalreporter, "fuzz")
    campaigns = _properties(terminalreporter, "fuzz-campaign")
    if not programs and not campaigns:
        return
    write = terminalreporter.write_line
    if programs:
        from tests.fuzz.campaign import Summary
        from tests.fuzz.oracle import Result

        summary = Summary()
        for seed, features, outcomes in programs:
            summary.add(seed, tuple(features), [Result(runner, outcome) for runner, outcome in outcomes])
        terminalreporter.section("fuzz: fixed-seed programs through fusionlab vs eager")
        for line in summary.lines()[:-1] if summary.failures else summary.lines():
            write(line)
    for lines in campaigns:
        terminalreporter.section("fuzz campaign (-m fuzz)")
        for line in lines:
            write(line)


def _opinfo_summary(terminalreporter: Any) -> None:
    rows: dict[str, dict[str, int]] = {value[0]: value[1] for value in _properties(terminalreporter, "opinfo")}
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
