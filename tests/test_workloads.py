"""The workload suite: names, sizes, inputs, FLOPs and minimal bytes; every workload runs through fusionlab."""

from __future__ import annotations

import pytest
import torch

import fusionlab as fl
from fusionlab.codegen.plan import PERSISTENT_LIMIT
from fusionlab.measure import workloads
from fusionlab.measure.workload import input_output_bytes
from fusionlab.measure.workloads import GPTBlock, Workload, tensor_bytes

REQUIRED = {"gelu_bias", "softmax", "layer_norm", "rms_norm", "swiglu", "add_layer_norm", "linear_gelu", "gpt_block"}
# What models produce (issue 14): long rows, split reductions, indexed loads, rotary, an optimizer step, backward
# kernels, and groups harvested from the zoo.
MODEL_PATTERNS = {
    "cross_entropy_32k", "cross_entropy_128k", "cross_entropy_256k", "cross_entropy_backward", "log_softmax_vocabulary",
    "column_mean_var", "sum_leading_axes", "embedding_positions", "moe_dispatch_gather", "rotary_embedding",
    "adamw_step", "layer_norm_backward", "softmax_backward", "gelu_backward", "rms_norm_backward",
    "attention_masked_softmax", "bias_residual_layer_norm", "swiglu_chunked", "gpt2_embeddings_ln_1",
    "gpt2_mlp_gelu_new", "llama_embed_input_layernorm", "llama_residual_post_attention_layernorm",
    "bert_embeddings_layernorm", "bert_lm_head_gelu_layernorm",
}
# Rows longer than the persistent limit even at the CPU size: the interpreter checks the looped path on them.
LONG_ROWS = ("cross_entropy_128k", "cross_entropy_256k", "cross_entropy_backward", "log_softmax_vocabulary")


def test_names_are_unique_and_cover_the_required_suite() -> None:
    names = workloads.names()
    assert len(names) == len(set(names))
    assert REQUIRED <= set(names) and MODEL_PATTERNS <= set(names) and len(names) >= 30
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
    limit = 2 * 33_000 if name in LONG_ROWS else 128 * 256
    assert all(t.numel() <= limit for t in inputs if isinstance(t, torch.Tensor))
    outputs = fn(*inputs)
    if workload.min_bytes is input_output_bytes:
        assert workload.min_bytes(inputs, outputs) == tensor_bytes(inputs) + tensor_bytes(outputs) > 0
    found = workloads.find(fn)  # the cross-entropy sizes share one function: the first of them is found
    assert found is not None and found.fn is workload.fn and found.min_bytes is workload.min_bytes
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


def test_gpu_sizes_of_what_models_produce() -> None:
    logits, targets = workloads.get("cross_entropy_256k").build("gpu", "meta")[1]
    assert logits.shape == (2048, 256000) and targets.dtype == torch.int64
    (x,) = workloads.get("column_mean_var").build("gpu", "meta")[1]
    assert x.shape == (65536, 1024)
    q, k, cos, sin = workloads.get("rotary_embedding").build("gpu", "meta")[1]
    assert (q.shape, k.shape, cos.shape) == ((4, 32, 2048, 128), (4, 8, 2048, 128), (4, 2048, 128))


def test_minimal_bytes_of_indexed_loads_and_in_place_updates() -> None:
    # An embedding lookup reads the rows it gathers, not the table; AdamW writes back three of its four inputs.
    ids, table, weight = workloads.get("llama_embed_input_layernorm").build("gpu", "meta")[1]
    outputs = (torch.empty(4, 2048, 4096, device="meta", dtype=torch.bfloat16),) * 2
    rows = 4 * 2048 * 4096 * 2
    expected = tensor_bytes((ids, weight)) + rows + tensor_bytes(outputs)
    assert workloads.get("llama_embed_input_layernorm").min_bytes((ids, table, weight), outputs) == expected
    adamw = workloads.get("adamw_step")
    fn, inputs = adamw.build("cpu", "cpu")
    assert adamw.min_bytes(inputs, fn(*inputs)) == 7 * 4096 * 4


def test_targets_span_the_vocabulary() -> None:
    # verify() draws fresh targets between the example's least and greatest: they must reach both ends.
    logits, targets = workloads.get("cross_entropy_128k").build("cpu", "cpu")[1]
    assert int(targets.min()) == 0 and int(targets.max()) == logits.shape[1] - 1


@pytest.mark.parametrize("name", LONG_ROWS)
def test_long_rows_take_the_looped_path_at_the_cpu_size(name: str) -> None:
    fn, inputs = workloads.get(name).build("cpu", "cpu")
    assert inputs[0].shape[-1] > PERSISTENT_LIMIT
    kernels = fl.explore(fn, *inputs).generated.kernels
    assert any("looped reduction" in kernel.source for kernel in kernels)


def test_adamw_updates_its_states_in_place_like_eager() -> None:
    fn, inputs = workloads.get("adamw_step").build("cpu", "cpu")
    eager = [t.clone() for t in inputs]
    fused = [t.clone() for t in inputs]
    fn(*eager)
    fl.explore(fn, *[t.clone() for t in inputs])(*fused)
    for name, want, got, before in zip(("param", "grad", "exp_avg", "exp_avg_sq"), eager, fused, inputs):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6, msg=name)
        assert name == "grad" or not torch.equal(got, before), f"{name} was not updated"


def test_column_mean_var_reads_its_matrix_once() -> None:
    # var_mean's mean is the one its variance is centred on: one Welford kernel writes both (it was a second kernel
    # reading the matrix again).
    fn, inputs = workloads.get("column_mean_var").build("cpu", "cpu")
    ex = fl.explore(fn, *inputs)
    (kernel,) = ex.generated.kernels
    assert "(Welford)" in kernel.source
    assert ex.verify().ok


def test_fresh_inputs_are_new_values_of_the_same_kind() -> None:
    # The suite checks correctness on these: softmax rows stay probabilities, AdamW's second moment non-negative
    softmax, adamw = workloads.get("softmax_backward"), workloads.get("adamw_step")
    _, built = softmax.build("cpu")
    fresh = softmax.fresh_inputs("cpu")
    assert not torch.equal(built[1], fresh[1])
    torch.testing.assert_close(fresh[1].sum(-1), torch.ones(fresh[1].shape[:-1]))
    assert (adamw.fresh_inputs("cpu")[3] >= 0).all()
    for first, second in zip(softmax.fresh_inputs("cpu", draw=0), built):
        assert torch.equal(first, second)  # draw 0 is build's own
