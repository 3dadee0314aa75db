"""The differential fuzzer (tests/fuzz): random programs through fusionlab, compared to eager PyTorch.

The default run checks a fixed set of seeds, one test per program (a failure names its seed and prints the program
and `python -m tests.fuzz --seed N --shrink` for a minimal repro). `pytest -m fuzz` runs FUZZ_PROGRAMS programs
(10,000 unless the environment says otherwise) on every core and prints the outcome table; it fails on any wrong
number or crash. A clear refusal (tests/fuzz/oracle.py: is_clear_refusal) is not a failure.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.fuzz import generate, run_all, skip_unless_asked
from tests.fuzz.campaign import run_campaign

DEFAULT_SEEDS = range(250)
FUZZ_PROGRAMS = int(os.environ.get("FUZZ_PROGRAMS", "10000"))
FUZZ_START = 100_000  # the on-demand run's seeds do not repeat the default run's


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", DEFAULT_SEEDS)
def test_program(seed: int, request: pytest.FixtureRequest) -> None:
    program = generate(seed)
    results = run_all(program)
    request.node.user_properties.append(("fuzz", (seed, program.features, [(r.runner, r.outcome) for r in results])))
    failed = [r for r in results if r.outcome in ("wrong", "crashed")]
    if failed:
        report = "\n".join(f"{r.runner}: {r.outcome}: {r.detail}" for r in failed)
        pytest.fail(f"program {seed} ({', '.join(program.features)}):\n{program.source()}\n{report}\n"
                    f"minimal repro: python -m tests.fuzz --seed {seed} --shrink", pytrace=False)


@pytest.mark.fuzz
@pytest.mark.timeout(0)
def test_fuzz_campaign(request: pytest.FixtureRequest) -> None:
    skip_unless_asked(request.config)
    out = Path(os.environ.get("FUZZ_REPROS", "test-artifacts/fuzz-repros"))
    summary = run_campaign(range(FUZZ_START, FUZZ_START + FUZZ_PROGRAMS), processes=os.cpu_count() or 1,
                           out_dir=out, shrink_failures=True)
    request.node.user_properties.append(("fuzz-campaign", summary.lines()))
    assert summary.failed == 0, (f"{summary.failed} wrong or crashed runs over {summary.programs} programs; "
                                 f"repros in {out}/\n" + "\n".join(summary.lines()))


def test_the_training_runner_reports_a_wrong_gradient(monkeypatch: pytest.MonkeyPatch) -> None:
    # a backend whose outputs are right and whose gradients are twice eager's: "wrong", named as a gradient
    import torch

    from tests.fuzz import oracle

    class Doubled(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            return x.clone()

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
            return grad * 2

    def compile_doubled(fn: Any, **_: Any) -> Any:
        return lambda *args: tuple(Doubled.apply(t) if t.requires_grad else t for t in fn(*args))

    program = next(p for p in map(generate, DEFAULT_SEEDS) if "train" in p.runners)
    assert run_all(program)[-1].outcome == "pass"
    monkeypatch.setattr(oracle.torch, "compile", compile_doubled)
    result = oracle.run(program, "train")
    assert result.outcome == "wrong" and result.detail.startswith("gradient of input"), result
    assert result.signature == "gradient values"
