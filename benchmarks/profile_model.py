"""Zoo models through `fl.profile`, inference and a training step: the text, the module table to depth 3, the
slowest kernels, where the kernels' times come from, an HTML page and a Perfetto trace per model and mode.

    python benchmarks/profile_model.py OUT_DIR [--models gpt2 vit ...] [--modes infer train] [--size gpu|tiny]

On a GPU: GPU size, bf16, CUDA. Elsewhere: the tiny size on the CPU (a check that the script runs).
"""

from __future__ import annotations

import argparse
import datetime
import json
import time
from pathlib import Path

import torch
import triton

import fusionlab as fl
from fusionlab import models


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--models", nargs="+", default=["gpt2"], choices=models.names())
    parser.add_argument("--modes", nargs="+", default=["infer", "train"], choices=("infer", "train"))
    parser.add_argument("--size", choices=("gpu", "tiny"), default=None)
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    size = args.size or ("gpu" if cuda else "tiny")
    device, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    args.out.mkdir(parents=True, exist_ok=True)
    header = {"date": datetime.date.today().isoformat(), "device": torch.cuda.get_device_name() if cuda else "cpu",
              "torch": torch.__version__, "triton": triton.__version__, "size": size, "dtype": str(dtype)}
    print(json.dumps(header))
    summary = {"header": header}
    for name in args.models:
        for mode in args.modes:
            train = mode == "train"
            model, inputs = models.build(name, size=size, device=device, dtype=dtype, train=train)
            start = time.perf_counter()
            prof = fl.profile(model, **inputs, train=train)
            seconds = time.perf_counter() - start
            print(f"===== {name} {mode}: fl.profile took {seconds:.1f} s")
            print(prof.as_text())
            print(prof.modules[prof.modules.depth <= 3].to_string())
            print(prof.kernels.timing.value_counts().to_string())
            print(_slowest(prof.kernels))
            stem = args.out / f"{name}_{mode}"
            start = time.perf_counter()
            prof.to_html(stem.with_suffix(".html"))
            print(f"to_html: {time.perf_counter() - start:.1f} s")
            prof.trace(stem.with_suffix(".json"))
            prof.modules.to_csv(f"{stem}_modules.csv")
            prof.kernels.to_csv(f"{stem}_kernels.csv")
            summary[f"{name} {mode}"] = {"profile_s": round(seconds, 1), "text": prof.as_text()}
    (args.out / "profile.json").write_text(json.dumps(summary, indent=1))


def _slowest(kernels, n: int = 15) -> str:
    """The n kernels with the most time, per side, with their module."""
    columns = ["graph", "kernel", "kind", "module", "bytes", "time_us", "roofline_pct", "timing"]
    return kernels.sort_values("time_us", ascending=False)[columns].head(n).to_string()


if __name__ == "__main__":
    main()
