"""The backend inside PyTorch's distributed engines on a CPU (issue 17): `benchmarks/distributed.py` under torchrun with
2 gloo processes, a tiny GPT-2 under DistributedDataParallel and a tiny Llama under FSDP2, fusionlab's training steps
against eager's. (The same script on 2 GPUs uses NCCL and the zoo's GPU size.)"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("model, engine", [("gpt2", "ddp"), ("llama", "fsdp")])
def test_training_steps_under_ddp_and_fsdp2_match_eager(tmp_path: Path, model: str, engine: str) -> None:
    pytest.importorskip("transformers")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               str(ROOT / "benchmarks" / "distributed.py"), str(tmp_path), "--models", model, "--engines", engine,
               "--steps", "3", "--no-inductor"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)  # this checkout
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    rows = {row["runner"]: row for row in csv.DictReader(open(tmp_path / "distributed_cpu.csv", encoding="utf-8"))}
    ours, eager = rows["fusionlab"], rows["eager"]
    assert ours["correct"] == "True" and ours["weight_tolerance"] == ""  # weights: checked beside Inductor only
    assert float(ours["grad_err"]) <= float(ours["tolerance"]) == 1e-4
    assert float(ours["loss_err"]) <= 1e-4
    assert float(ours["weight_err"]) < 1e-2  # after the AdamW steps (Inductor's, when it runs, sets the bound)
    graphs = int(ours["graphs"])
    # DDP: Dynamo's DDP optimizer splits the model at a bucket boundary (forward and backward of each part);
    # FSDP2: its hooks break the model at every sharded layer
    assert graphs >= (6 if engine == "ddp" else 4) and ours["graph_names"].count("(backward)") == graphs // 2
    # all-reduces (DDP) or all-gathers and reduce-scatters (FSDP2) in a step; DDP's buckets follow the order in
    # which gradients became ready, so eager's count can differ from ours by one
    assert int(ours["collectives"]) > 0 and abs(int(ours["collectives"]) - int(eager["collectives"])) <= 1
    assert ours["step_ms"] == "" and float(eager["step_ms"]) > 0  # the interpreter is not timed
    page = (tmp_path / "distributed_cpu.md").read_text(encoding="utf-8")
    assert f"| {model} | {engine} | fusionlab |" in page and "interpreter" in page


def test_profile_of_a_model_inside_ddp_reads_its_module_tree(tmp_path: Path) -> None:
    """fl.profile of a DistributedDataParallel model (one gloo process): the rows are the wrapped module's tree, which
    Dynamo names the graphs' nodes by, so eager's per-module times and fusionlab's kernels meet in the same rows."""
    pytest.importorskip("transformers")
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    import fusionlab as fl
    from fusionlab import models

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        model, inputs = models.build("gpt2", "tiny", train=True)
        prof = fl.profile(DistributedDataParallel(model), **inputs, train=True, inductor=False, rounds=1)
    finally:
        dist.destroy_process_group()
    frame = prof.modules.set_index("module")
    assert not any(path.startswith("module.") for path in frame.index)
    for path in ("transformer.h.0", "transformer.h.0.attn"):
        assert frame.loc[path, "eager_ms"] > 0 and frame.loc[path, "kernels"] + frame.loc[path, "externs"] > 0
    assert prof.model_name == "GPT2LMHeadModel" and any("DistributedDataParallel" in n for n in prof.notes)
    assert torch.isfinite(torch.tensor(frame.loc["", "fusionlab_ms"]))
