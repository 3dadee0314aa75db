"""Many programs at once: outcomes per runner and per feature, distinct failures, repros written to a folder.

    >>> summary = run_campaign(range(100), processes=2)
    >>> print("\\n".join(summary.lines()))
"""

from __future__ import annotations

import multiprocessing
import signal
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.fuzz.generate import generate
from tests.fuzz.oracle import OUTCOMES, Result, run
from tests.fuzz.shrink import shrink

SECONDS_PER_PROGRAM = 120


class ProgramTimeout(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise ProgramTimeout(f"a program ran longer than {SECONDS_PER_PROGRAM} s")


def run_seed(seed: int) -> tuple[int, tuple[str, ...], list[Result]]:
    """One program, every runner; a hang counts as a crash."""
    try:
        program = generate(seed)
    except Exception as error:  # noqa: BLE001 - a generator bug: reported, not counted against fusionlab
        return seed, ("generator",), [Result("generator", "crashed", repr(error), f"generator: {error!r}"[:120])]
    results = []
    for runner in program.runners:
        previous = signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(SECONDS_PER_PROGRAM)
        try:
            results.append(run(program, runner))
        except ProgramTimeout as error:
            results.append(Result(runner, "crashed", str(error), "timeout"))
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
    return seed, program.features, results


@dataclass
class Summary:
    by_runner: Counter[tuple[str, str]] = field(default_factory=Counter)
    by_feature: Counter[tuple[str, str]] = field(default_factory=Counter)
    failures: dict[tuple[str, str, str], list[int]] = field(default_factory=dict)  # (runner, outcome, sig) -> seeds
    refusals: Counter[str] = field(default_factory=Counter)
    programs: int = 0

    def add(self, seed: int, features: tuple[str, ...], results: list[Result]) -> None:
        self.programs += 1
        for result in results:
            self.by_runner[result.runner, result.outcome] += 1
            if result.runner == "explore":
                for feature in features:
                    self.by_feature[feature, result.outcome] += 1
            if result.outcome in ("wrong", "crashed"):
                self.failures.setdefault((result.runner, result.outcome, result.signature), []).append(seed)
            if result.outcome == "refused":
                self.refusals[result.signature] += 1

    @property
    def failed(self) -> int:
        return sum(n for (_, outcome), n in self.by_runner.items() if outcome in ("wrong", "crashed"))

    def lines(self) -> list[str]:
        head = f"  {'':16s}" + "".join(f"{o:>9s}" for o in OUTCOMES)
        rows = [f"{self.programs} programs", "per runner:", head]
        for runner in sorted({r for r, _ in self.by_runner}):
            rows.append(f"  {runner:16s}" + "".join(f"{self.by_runner[runner, o]:9d}" for o in OUTCOMES))
        rows += ["per feature (explore; a program counts under each feature it uses):", head]
        for feature in sorted({f for f, _ in self.by_feature}):
            rows.append(f"  {feature:16s}" + "".join(f"{self.by_feature[feature, o]:9d}" for o in OUTCOMES))
        if self.refusals:
            rows.append("refusals: " + ", ".join(f"{name} {n}" for name, n in self.refusals.most_common()))
        if self.failures:
            rows.append(f"distinct failures ({len(self.failures)}), most frequent first:")
            ranked = sorted(self.failures.items(), key=lambda item: -len(item[1]))
            for (runner, outcome, signature), seeds in ranked[:40]:
                rows.append(f"  {len(seeds):5d} {runner:7s} {outcome:7s} {signature[:110]}  (seeds {seeds[:4]})")
        return rows


def run_campaign(seeds: Iterable[int], processes: int = 2, out_dir: Path | None = None,
                 shrink_failures: bool = False, progress: bool = False) -> Summary:
    """Run every seed (in `processes` worker processes); with `out_dir`, write one repro per distinct failure."""
    summary = Summary()
    seeds = list(seeds)
    context = multiprocessing.get_context("spawn" if processes > 1 else "fork")
    with context.Pool(processes, maxtasksperchild=200) as pool:
        for count, (seed, features, results) in enumerate(pool.imap_unordered(run_seed, seeds, chunksize=4), 1):
            summary.add(seed, features, results)
            if progress and count % 500 == 0:
                print(f"{count}/{len(seeds)}: {dict(summary.by_runner)}", flush=True)
    if out_dir is not None:
        write_repros(summary, out_dir, shrink_failures)
    return summary


def write_repros(summary: Summary, out_dir: Path, shrink_failures: bool, per_signature: int = 1,
                 most: int = 60) -> list[Path]:
    """One runnable file per distinct failure (its first seed; the `most` most frequent), shrunk if asked."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    ranked = sorted(summary.failures.items(), key=lambda item: -len(item[1]))[:most]
    for number, ((runner, outcome, _), seeds) in enumerate(ranked):
        for seed in sorted(seeds)[:per_signature]:
            try:
                program = generate(seed)
            except Exception:  # noqa: BLE001 - a generator bug is reported by the summary, not written as a repro
                continue
            failure = run(program, runner)
            if failure.outcome not in ("wrong", "crashed"):
                continue
            if shrink_failures:
                program = shrink(program, failure, budget=30)
                failure = run(program, runner)
            path = out_dir / f"{number:03d}_{outcome}_{runner}_seed{seed}.py"
            path.write_text(program.repro(runner, f"{failure.outcome}: {failure.detail}") +
                            f"\n# {len(seeds)} programs failed like this: seeds {sorted(seeds)[:20]}\n")
            written.append(path)
    return written
