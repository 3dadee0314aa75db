"""The workload suite: names, sizes, inputs, FLOPs and minimal bytes; every workload runs through fusionlab."""

from __future__ import annotations

import pytest
import torch

import fusionlab as fl
from fusionlab.measure import workloads
from fusionlab.measure.workloads import GPTBlock, Workload, tensor_bytes

REQUIRED = {"gelu_bias", "softmax", "layer_norm", "rms_norm", "swiglu", "add_layer_norm", "linear_gelu", "gpt_block"}


def test_names_are_unique_and_cover_the_required_suite() -> None:
    names = workloads.names()
    assert len(names) == len(set(names))
    assert REQUIRED <= set(names)
    assert all(isinstance(w, Workload) and w.bound in ("memory", "compute") for w in workloads.all_workloads())


def test_unknown_name_says_what_exists() -> None:
    with pytest.raises(KeyError, match="softmax"):
        workloads.get("sofmax")


def test_gpu_sizes_fill_an_h200_without_allocating() -> None:
    x, b = workloads.get("gelu_bias").build("gpu", "meta")[1]
    assert x.shape == (8192, 8192) and b.shape == (8192,) and x.dtype == torch.bfloat16
    x, w, b = workloads.get("linear_gelu").build("gpu", "meta")[1]
    assert (x.shape, w.shape, b.shape) == ((8192, 4096), (4096, 16384), (16384,))
    assert workloads.get("linear_gelu").flops((x, w, b)) == 2 * 8192 * 4096 * 16384
    block, (tokens,) = workloads.get("gpt_block").build("gpu", "meta")
    assert isinstance(block, GPTBlock) and tokens.dim() == 3


@pytest.mark.parametrize("name", workloads.names())
def test_cpu_size_runs_eagerly_and_counts_its_bytes(name: str) -> None:
    workload = workloads.get(name)
    fn, inputs = workload.build("cpu", "cpu")
    assert all(t.numel() <= 128 * 256 for t in inputs if isinstance(t, torch.Tensor))
    outputs = fn(*inputs)
    assert workload.min_bytes(inputs, outputs) == tensor_bytes(inputs) + tensor_bytes(outputs) > 0
    assert workloads.find(fn) is workload
    assert (workload.flops(inputs) > 0) == (workload.bound == "compute")


def test_inputs_are_reproducible_and_module_weights_frozen() -> None:
    first = workloads.get("swiglu").build("cpu", "cpu")[1]
    second = workloads.get("swiglu").build("cpu", "cpu")[1]
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    assert not torch.equal(first[0], first[1])
    block = workloads.get("gpt_block").build("cpu", "cpu")[0]
    assert not any(p.requires_grad for p in block.parameters())


def test_gpt_block_flops_match_pytorch_count() -> None:
    from fusionlab.measure.timing import count_flops

    block, inputs = workloads.get("gpt_block").build("cpu", "cpu")
    assert workloads.get("gpt_block").flops(inputs) == count_flops(block, inputs)


def test_bad_size_is_refused() -> None:
    with pytest.raises(ValueError, match="'cpu' or 'gpu'"):
        workloads.get("softmax").build("huge", "cpu")  # type: ignore[arg-type]


@pytest.mark.parametrize("name", workloads.names())
def test_every_workload_runs_through_fusionlab(name: str) -> None:
    fn, inputs = workloads.get(name).build("cpu", "cpu")
    report = fl.explore(fn, *inputs).verify()
    assert report.ok, report
