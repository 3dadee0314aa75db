"""`python -m tests.fuzz --programs 2000 --out fuzz-repros --shrink`: run programs, print the summary, write repros.

`--seed 123` runs one program and prints it, its outcome and (with --shrink) its shrunk repro."""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from tests.fuzz.campaign import run_campaign
from tests.fuzz.generate import generate
from tests.fuzz.oracle import run
from tests.fuzz.shrink import shrink


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    parser.add_argument("--programs", type=int, default=1000, help="how many programs (seeds start..start+N)")
    parser.add_argument("--start", type=int, default=0, help="the first seed")
    parser.add_argument("--processes", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out", type=Path, default=None, help="folder for one repro file per distinct failure")
    parser.add_argument("--shrink", action="store_true", help="drop statements while the program still fails")
    parser.add_argument("--seed", type=int, default=None, help="run one program and print it")
    args = parser.parse_args()
    if args.seed is not None:
        program = generate(args.seed)
        print(program.source())
        for runner in program.runners:
            result = run(program, runner)
            print(f"{runner}: {result.outcome} {result.detail}")
            if result.outcome in ("wrong", "crashed"):
                if args.shrink:
                    program = shrink(program, result)
                print(program.repro(runner, f"{result.outcome}: {result.detail.splitlines()[0]}"))
        return
    start = time.perf_counter()
    summary = run_campaign(range(args.start, args.start + args.programs), args.processes, args.out, args.shrink,
                           progress=True)
    print("\n".join(summary.lines()))
    print(f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
