"""The zoo's GPT-2 through `fl.profile`, inference and a training step: its text, its module table to depth 3,
where its kernels' times come from, an HTML page and a Perfetto trace per mode.

    python benchmarks/profile_gpt2.py OUT_DIR [--size gpu|tiny]

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
    for train in (False, True):
        mode = "train" if train else "infer"
        model, inputs = models.build("gpt2", size=size, device=device, dtype=dtype, train=train)
        start = time.perf_counter()
        prof = fl.profile(model, **inputs, train=train)
        seconds = time.perf_counter() - start
        print(f"===== gpt2 {mode}: fl.profile took {seconds:.1f} s")
        print(prof.as_text())
        print(prof.modules[prof.modules.depth <= 3].to_string())
        print(prof.kernels.timing.value_counts().to_string())
        start = time.perf_counter()
        prof.to_html(args.out / f"gpt2_{mode}.html")
        print(f"to_html: {time.perf_counter() - start:.1f} s")
        prof.trace(args.out / f"gpt2_{mode}.json")
        prof.modules.to_csv(args.out / f"gpt2_{mode}_modules.csv")
        prof.kernels.to_csv(args.out / f"gpt2_{mode}_kernels.csv")
        summary[mode] = {"profile_s": round(seconds, 1), "text": prof.as_text()}
    (args.out / "gpt2_profile.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
