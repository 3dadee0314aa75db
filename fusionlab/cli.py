"""The `fusionlab` command: `fusionlab bench` runs the workload suite; `fusionlab report` writes a page;
`fusionlab profile` profiles a model.

    python -m fusionlab bench softmax layer_norm --device cpu --out results
    python -m fusionlab bench --device cuda --size gpu --out results      # the whole suite on a GPU
    python -m fusionlab bench --models --out results                      # the model zoo, inference and training
    python -m fusionlab profile mypackage.models:tiny_gpt2 --trace gpt2.json  # a model, module by module
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from fusionlab.inductor import warm_up_inductor
from fusionlab.measure import workloads
from fusionlab.measure.suite import (
    kernel_rows,
    markdown_table,
    results_stem,
    run_suite,
    write_kernel_results,
    write_results,
)

__all__ = ["build_parser", "main"]

_DTYPES = ("float32", "bfloat16", "float16")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fusionlab", description="See and measure GPU kernel fusion in PyTorch.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    bench = commands.add_parser(
        "bench",
        help="benchmark eager vs fusionlab vs Inductor on the workload suite",
        description="Benchmark eager, fusionlab and TorchInductor on named workloads (all by default). On a CPU, "
        "fusionlab's time is modelled on a GPU profile and labelled so.",
    )
    bench.add_argument("workloads", nargs="*", metavar="NAME", help="workloads to run (default: all)")
    bench.add_argument("--device", choices=("cpu", "cuda"), default=None, help="default: cuda when available")
    bench.add_argument("--size", choices=("cpu", "gpu"), default=None, help="default: gpu on cuda, cpu on cpu")
    bench.add_argument("--dtype", choices=_DTYPES, default=None, help="default: bfloat16 at gpu size, else float32")
    bench.add_argument("--out", default="results", help="folder for the CSV and Markdown (default: results)")
    bench.add_argument("--repeat", type=int, default=20, help="timed runs on a CPU (default: 20)")
    bench.add_argument("--rounds", type=int, default=None,
                       help="rounds in which eager, fusionlab and Inductor take turns (default: 5)")
    bench.add_argument("--profile", default="H200", help="GPU profile for modelled times (default: H200)")
    bench.add_argument("--quiet", action="store_true", help="no progress bars")
    bench.add_argument("--list", action="store_true", help="list the workloads and exit")
    bench.add_argument("--models", action="store_true",
                       help="benchmark the model zoo (fusionlab.models) instead, inference and a training step; "
                            "NAME then names models")
    bench.add_argument("--modes", default="inference,training", help="with --models: inference, training or both")

    report = commands.add_parser(
        "report",
        help="write one self-contained HTML page about a function",
        description="Write the views of one function (MODULE:FUNCTION) as a self-contained HTML page.",
    )
    report.add_argument("target", metavar="MODULE:FUNCTION", help="for example mypackage.models:block")
    report.add_argument("--out", default="report.html", help="the page to write (default: report.html)")
    report.add_argument("--no-timings", dest="timings", action="store_false", help="leave the benchmark out")

    profiled = commands.add_parser(
        "profile",
        help="profile a model module by module: graphs, breaks, kernels, eager/fusionlab/Inductor times",
        description="Profile the model MODULE:FUNCTION returns (FUNCTION takes no arguments and returns (model, "
        "inputs); inputs a tuple or a dict). Writes a page and, with --trace, a Perfetto/chrome://tracing trace. "
        "On a CPU fusionlab's times are modelled on a GPU profile and labelled so.",
    )
    profiled.add_argument("target", metavar="MODULE:FUNCTION", help="for example mypackage.models:tiny_gpt2")
    profiled.add_argument("--train", action="store_true", help="profile a training step (loss.backward())")
    profiled.add_argument("--out", default="profile.html", help="the page to write (default: profile.html)")
    profiled.add_argument("--trace", default=None, help="also write a Chrome/Perfetto trace JSON here")
    profiled.add_argument("--rounds", type=int, default=5, help="timed rounds per figure (default: 5)")
    profiled.add_argument("--no-inductor", dest="inductor", action="store_false",
                          help="leave Inductor out (its compile is the slow part on a CPU)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = build_parser().parse_args(argv)
    if arguments.command == "bench":
        return _bench(arguments)
    if arguments.command == "profile":
        from fusionlab.profile.target import main as profile_main

        return profile_main(arguments.target, out=arguments.out, trace=arguments.trace, train=arguments.train,
                            rounds=arguments.rounds, inductor=arguments.inductor)
    return _report(arguments)


def _bench(arguments: argparse.Namespace) -> int:
    if arguments.models:
        return _bench_models(arguments)
    if arguments.list:
        for workload in workloads.all_workloads():
            print(f"{workload.name:<18} {workload.bound:<8} {workload.description}")
        return 0
    unknown = [name for name in arguments.workloads if name not in workloads.names()]
    if unknown:
        print(f"fusionlab bench: unknown workload {', '.join(unknown)}; choose from {', '.join(workloads.names())}",
              file=sys.stderr)
        return 2
    device = arguments.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        print("fusionlab bench: --device cuda was asked for, but torch sees no CUDA device; use --device cpu",
              file=sys.stderr)
        return 2
    if arguments.repeat < 1:
        print(f"fusionlab bench: --repeat must be at least 1, got {arguments.repeat}", file=sys.stderr)
        return 2
    if arguments.rounds is not None and arguments.rounds < 1:
        print(f"fusionlab bench: --rounds must be at least 1, got {arguments.rounds}", file=sys.stderr)
        return 2

    warm_up_inductor(device)  # so that the first workload's cold compile leaves out Inductor's imports
    finished: list[dict[str, Any]] = []
    kernels: list[dict[str, Any]] = []

    def keep(row: dict[str, Any]) -> None:
        finished.append(row)
        write_results(finished, arguments.out)  # after every workload: a run cut short keeps what it measured
        write_kernel_results(kernels, Path(arguments.out) / f"{results_stem(finished)}_kernels.csv")
        if not arguments.quiet:
            _print_progress(row)

    rows = run_suite(
        arguments.workloads or None,
        device=device,
        size=arguments.size,
        dtype=getattr(torch, arguments.dtype) if arguments.dtype else None,
        repeat=arguments.repeat,
        profile=arguments.profile,
        progress=not arguments.quiet,
        on_row=keep,
        rounds=arguments.rounds,
        on_report=lambda report: kernels.extend(kernel_rows(report)),
    )
    csv_path, markdown_path = write_results(rows, arguments.out)
    print(markdown_table(rows))
    print(f"\nwrote {csv_path}, {markdown_path} and {csv_path.with_name(csv_path.stem + '_kernels.csv')}")
    failed = [row["workload"] for row in rows if row.get("error")]
    if failed:
        print(f"fusionlab bench: {len(failed)} workloads failed: {', '.join(failed)} (see the error column)",
              file=sys.stderr)
        return 1
    return 0


def _bench_models(arguments: argparse.Namespace) -> int:
    from fusionlab import models
    from fusionlab.measure.models import bench_models, model_table, write_model_results

    if arguments.list:
        for name in models.names():
            print(f"{name:<10} {models.spec(name).description}")
        return 0
    unknown = [name for name in arguments.workloads if name not in models.names()]
    modes = [mode.strip() for mode in arguments.modes.split(",") if mode.strip()]
    bad_modes = [mode for mode in modes if mode not in ("inference", "training")]
    if unknown or bad_modes or not modes:
        print(f"fusionlab bench --models: unknown model {', '.join(unknown)} (choose from "
              f"{', '.join(models.names())})" if unknown else
              f"fusionlab bench --models: --modes takes inference and/or training, got {arguments.modes!r}",
              file=sys.stderr)
        return 2
    device = arguments.device or ("cuda" if torch.cuda.is_available() else "cpu")
    size = {"cpu": "tiny", "gpu": "gpu", None: None}[arguments.size]
    finished: list[dict[str, Any]] = []

    def keep(row: dict[str, Any]) -> None:
        finished.append(row)
        write_model_results(finished, arguments.out)  # after every row: a run cut short keeps what it measured
        if not arguments.quiet:
            print(model_table([row]).splitlines()[-1], file=sys.stderr)

    rows = bench_models(arguments.workloads or None, modes=modes, on_row=keep, device=device, size=size,
                        dtype=getattr(torch, arguments.dtype) if arguments.dtype else None, rounds=arguments.rounds,
                        repeat=max(1, min(arguments.repeat, 20)))
    csv_path, markdown_path = write_model_results(rows, arguments.out)
    print(model_table(rows))
    print(f"\nwrote {csv_path} and {markdown_path}")
    failed = [f"{row['model']} {row['mode']}" for row in rows if row.get("error")]
    if failed:
        print(f"fusionlab bench --models: {len(failed)} failed or differ from eager: {', '.join(failed)}",
              file=sys.stderr)
        return 1
    return 0


def _print_progress(row: dict[str, Any]) -> None:
    if row.get("error"):
        print(f"{row['workload']}: failed: {row['error']}", file=sys.stderr)
        return
    print(
        f"{row['workload']}: eager {row['eager_ms']:.4g} ms, fusionlab {row['fusionlab_ms']:.4g} ms "
        f"({row['fusionlab_timing']}), inductor {row['inductor_ms']:.4g} ms",
        file=sys.stderr,
    )


def _report(arguments: argparse.Namespace) -> int:
    try:
        from fusionlab import report
    except ImportError as error:
        print(f"fusionlab report is not available in this installation ({error})", file=sys.stderr)
        return 2
    return int(report.main(arguments.target, out=arguments.out, timings=arguments.timings))


if __name__ == "__main__":
    raise SystemExit(main())
