"""fl.profile: the module table, the kernels, the trace, graph breaks, training graphs, the CLI (tiny models, CPU)."""

from __future__ import annotations

import collections
import inspect
import json
import sys
from typing import Any

import pytest
import torch

import fusionlab as fl
from fusionlab import cli
from fusionlab.measure.devices import get_profile
from fusionlab.profile import GraphBreak
from fusionlab.profile.modules import MODULE_COLUMNS
from fusionlab.profile.records import Spread, parse_break
from fusionlab.profile.verdict import verdict_of


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(16, 32)
        self.down = torch.nn.Linear(32, 16)
        self.norm = torch.nn.LayerNorm(16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x + self.down(torch.nn.functional.gelu(self.up(x))))


class Branchy(torch.nn.Module):
    """Two blocks with a data-dependent branch between them: Dynamo breaks the graph there."""

    def __init__(self) -> None:
        super().__init__()
        self.first = Block()
        self.second = Block()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.first(x)
        if x.sum() > 0:
            x = x * 2
        return self.second(x)


def _line_of(text: str) -> int:
    lines, start = inspect.getsourcelines(Branchy.forward)
    return start + next(i for i, line in enumerate(lines) if text in line)


@pytest.fixture(scope="module")
def gpt2() -> tuple[torch.nn.Module, dict[str, torch.Tensor], fl.ModelProfile]:
    pytest.importorskip("transformers")
    from fusionlab import models

    model, inputs = models.build("gpt2", size="tiny")
    model.train()  # profiled in eval mode, put back after
    return model, inputs, fl.profile(model, **inputs, rounds=3, inductor=False)


@pytest.fixture(scope="module")
def trained() -> tuple[torch.nn.Module, fl.ModelProfile]:
    torch.manual_seed(0)
    model = Branchy()
    return model, fl.profile(model, torch.randn(4, 8, 16), train=True, rounds=2, inductor=False)


def test_module_table_covers_the_model_with_spread(gpt2: tuple) -> None:
    model, _, prof = gpt2
    frame = prof.modules
    assert tuple(frame.columns) == MODULE_COLUMNS
    paths = [path for path, _ in model.named_modules()]
    assert list(frame["module"])[: len(paths)] == paths  # tree order, the model itself first
    called = frame[frame["module"].isin(["", "transformer", "transformer.h.0", "transformer.h.0.attn", "lm_head"])]
    assert (called["eager_ms"] > 0).all()
    assert (called["eager_low_ms"] <= called["eager_ms"]).all()
    assert (called["eager_ms"] <= called["eager_high_ms"]).all()
    assert (called["rounds"] == 3).all()
    assert set(frame["fusionlab_timing"]) == {"modelled on H200"}
    root = prof.module("")
    assert root["kernels"] + root["externs"] == len(prof.kernels)
    assert root["eager_ms"] == pytest.approx(prof.eager.median)
    layer = prof.module("transformer.h.0")  # a layer's figures hold its children's
    assert layer["bytes"] >= prof.module("transformer.h.0.attn")["bytes"] + prof.module("transformer.h.0.mlp")["bytes"]
    assert prof.module("transformer.h")["eager_ms"] > 0  # a ModuleList is never called: the sum of its layers
    assert model.training  # train mode restored
    assert any("eval mode" in note for note in prof.notes)


def test_kernels_name_real_modules_and_model_their_time(gpt2: tuple) -> None:
    model, _, prof = gpt2
    paths = {path for path, _ in model.named_modules()}
    kernels = prof.kernels
    assert set(kernels["module"]) <= paths
    assert "transformer.h.0.attn.c_attn" in set(kernels["module"])  # the q/k/v projection's addmm
    assert set(kernels["timing"]) == {"modelled on H200"}
    device = get_profile("H200")
    row = kernels.iloc[0]
    ideal = max(row["bytes"] / device.memory_bandwidth_bytes_per_s, row["flops"] / device.bf16_flops_per_s) * 1e6
    assert row["time_us"] == pytest.approx(ideal + device.launch_overhead_s * 1e6)
    assert ((kernels["roofline_pct"] > 0) & (kernels["roofline_pct"] <= 100)).all()
    group = prof.graphs[0].exploration.fused.groups
    by_name = {g.name: g for g in group}
    for _, kernel in kernels.iterrows():
        assert kernel["bytes"] == by_name[kernel["group"]].bytes_read + by_name[kernel["group"]].bytes_written
    assert str(prof.graphs[0].verdict).startswith("host-bound: GPU idle")  # tiny kernels: launches dominate


def test_trace_holds_every_kernel_with_its_module(gpt2: tuple, tmp_path) -> None:
    model, _, prof = gpt2
    trace = json.loads(prof.trace(tmp_path / "trace.json").read_text())
    events = trace["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert [e["name"] for e in kernels] == list(prof.kernels["kernel"])
    paths = {path for path, _ in model.named_modules()}
    for event in kernels:
        assert {"module", "group", "kernel", "bytes"} <= set(event["args"]) and event["args"]["module"] in paths
        assert event["dur"] > 0 and "modelled" in event["args"]["timing"]
    launches = [e for e in events if e.get("cat") == "launch"]
    assert len(launches) == len(kernels)
    assert all(launch["ts"] <= kernel["ts"] for launch, kernel in zip(launches, kernels))  # a kernel after its launch
    names = [e["args"]["name"] for e in events if e.get("ph") == "M"]
    assert any("modelled" in name for name in names)
    modules = {e["args"]["module"] for e in events if e.get("cat") == "module"}
    assert {"transformer.h.0", "transformer.h.1.mlp"} <= modules  # eager's measured module calls beside them


def test_views_are_fast_and_self_contained(gpt2: tuple, tmp_path) -> None:
    import time

    pytest.importorskip("ipywidgets")
    _, _, prof = gpt2
    prof.show()  # the first call pays for imports
    start = time.perf_counter()
    widget = prof.show()
    assert time.perf_counter() - start < 2.0
    tabs = widget.children[1]
    assert [tabs.get_title(i) for i in range(3)] == ["modules", "kernels", "graphs"]
    assert widget.opened is None and widget.explorer is None and "transformer.h.0.attn" in widget.static_html()
    page = prof.to_html(tmp_path / "profile.html").read_text()
    assert "transformer.h.0.attn.c_attn" in page and "modelled on H200" in page
    assert "src=\"http" not in page and "src='http" not in page  # self-contained: nothing fetched
    assert "GPT2LMHeadModel" in prof.as_text()


def test_with_fusion_moves_the_modelled_time(gpt2: tuple) -> None:
    _, _, prof = gpt2
    decision = next(d for d in prof.graphs[0].exploration.fused.decisions if d.fused and d.bytes_saved > 0)
    changed = prof.with_fusion(0, forbid=[(decision.producer, decision.consumer)])
    assert len(changed.kernels) > len(prof.kernels)  # the pair is two kernels now
    assert changed.module("")["bytes"] > prof.module("")["bytes"]  # the value between them goes through memory
    assert changed.module("")["fusionlab_ms"] > prof.module("")["fusionlab_ms"]
    assert changed.module("")["eager_ms"] == prof.module("")["eager_ms"]  # measured figures unchanged
    assert "what-if" in changed.module("")["fusionlab_timing"]
    assert len(prof.kernels) == sum(g.kernels + g.externs for g in prof.graphs)  # the original is untouched
    # on CUDA, GPU time that matched no launch is in the model's row: a what-if keeps it there
    from dataclasses import replace

    unmatched = replace(prof, unmatched_ms=2.0).with_fusion(0, forbid=[(decision.producer, decision.consumer)])
    assert unmatched.module("")["fusionlab_ms"] == pytest.approx(changed.module("")["fusionlab_ms"] + 2.0)
    assert unmatched.module("transformer")["fusionlab_ms"] == changed.module("transformer")["fusionlab_ms"]


def test_training_graphs_and_saved_bytes(trained: tuple) -> None:
    _, prof = trained
    roles = [g.role for g in prof.graphs]
    assert roles.count("forward") == 2 and roles.count("backward") == 2
    for forward in (g for g in prof.graphs if g.role == "forward"):
        backward = next(g for g in prof.graphs if g.role == "backward" and g.index == forward.index)
        outputs = {node.name: node for node in forward.exploration.captured.aten_nodes}
        assert forward.saved and set(forward.saved) <= set(forward.exploration.captured.outputs)
        expected = sum(outputs[name].type.nbytes() for name in forward.saved)  # saved activations: forward outputs
        assert forward.saved_bytes == backward.saved_bytes == expected > 0
    assert prof.saved_bytes == sum(g.saved_bytes for g in prof.graphs if g.role == "forward")
    kernels = prof.kernels
    assert set(kernels["role"]) == {"forward", "backward"}
    assert {"first.up", "second.norm"} <= set(kernels["module"])


def test_a_graph_opens_on_its_button(trained: tuple) -> None:
    pytest.importorskip("ipywidgets")
    _, prof = trained
    widget = prof.show()
    assert [b.description for b in widget.buttons] == [f"open {g.name}" for g in prof.graphs]
    assert widget.explorer is None  # nothing built before the click
    widget.buttons[1].click()
    assert widget.opened == prof.graphs[1].name
    assert type(widget.explorer).__name__ == "Explorer" and widget.explorer.exploration is prof.graphs[1].exploration


def test_graph_break_reason_and_line(trained: tuple) -> None:
    _, prof = trained
    assert len(prof.breaks) == 1
    found = prof.breaks[0]
    assert found.source == f"test_profile.py:{_line_of('if x.sum() > 0')}"
    assert "branch" in found.reason and found.line.startswith("if x.sum() > 0")
    ended = [g for g in prof.graphs if g.ended_by is not None]
    assert {g.role for g in ended} == {"forward", "backward"}  # both halves of the first Dynamo graph


def test_refusals_name_what_was_given() -> None:
    with pytest.raises(TypeError, match="nn.Module.*fl.explore"):
        fl.profile(torch.relu, torch.randn(3))
    with pytest.raises(ValueError, match="rounds must be at least 1, got 0"):
        fl.profile(Block(), torch.randn(2, 16), rounds=0)


def test_records() -> None:
    assert Spread.of([3.0, 1.0, 2.0]) == Spread(2.0, 1.0, 3.0, 3)
    assert parse_break("") is None
    assert parse_break("graph break at /x/site-packages/transformers/m.py:12 `if a:`: why") == GraphBreak(
        "why", "transformers/m.py:12", "if a:")
    busy = verdict_of([(0.0, 10.0), (10.5, 20.0)], modelled=False, device="H200")
    assert busy.bound == "GPU-bound" and busy.median_gap_us == pytest.approx(0.5)
    idle = verdict_of([(0.0, 1.0), (10.0, 11.0), (20.0, 21.0)], modelled=True, device="H200")
    assert str(idle) == ("host-bound: GPU idle 86% between launches (median gap 9 µs), 3 launches, "
                         "modelled on H200")


def test_cli_writes_page_and_trace(tmp_path, monkeypatch, capsys) -> None:
    (tmp_path / "tiny_target.py").write_text(
        "import torch\n"
        "def build():\n"
        "    torch.manual_seed(0)\n"
        "    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU())\n"
        "    return model, (torch.randn(2, 8),)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "tiny_target", raising=False)
    code = cli.main(["profile", "tiny_target:build", "--out", "p.html", "--trace", "t.json", "--rounds", "1",
                     "--no-inductor"])
    assert code == 0
    trace = json.loads((tmp_path / "t.json").read_text())
    assert {e["args"]["module"] for e in trace["traceEvents"] if e.get("cat") == "kernel"} <= {"", "0", "1"}
    assert "Sequential" in (tmp_path / "p.html").read_text()
    assert "wrote" in capsys.readouterr().out
    assert cli.main(["profile", "tiny_target"]) == 2  # not MODULE:FUNCTION: refused, said why
    assert "MODULE:FUNCTION" in capsys.readouterr().err


@pytest.mark.slow
def test_inductor_per_module() -> None:
    torch.manual_seed(0)
    model = Block()
    prof = fl.profile(model, torch.randn(4, 8, 16), rounds=2)
    frame = prof.modules.set_index("module")
    assert prof.inductor is not None and prof.inductor.median > 0
    assert frame.loc["", "inductor_ms"] == pytest.approx(prof.inductor.median, rel=0.5)
    assert frame.loc["up", "inductor_ms"] > 0 and frame.loc["down", "inductor_ms"] > 0  # the addmm calls
    assert (frame["inductor_low_ms"] <= frame["inductor_ms"]).all()
    assert not any("not matched" in note for note in prof.notes)


@pytest.mark.gpu
def test_profile_on_cuda(tmp_path) -> None:
    """On the GPU box: every figure from the CUDA profiler, our kernels annotated in the profiler's own trace."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device here")
    pytest.importorskip("transformers")
    from fusionlab import models

    model, inputs = models.build("gpt2", size="tiny", device="cuda")
    prof = fl.profile(model, **inputs, rounds=3)
    kernels = prof.kernels
    generated = kernels[kernels["kind"] != "extern"]
    assert (generated["timing"] == "measured (CUDA profiler)").all() and (generated["time_us"] > 0).all()
    frame = prof.modules.set_index("module")
    for path in ("", "transformer.h.0", "transformer.h.0.mlp"):
        assert frame.loc[path, "eager_ms"] > 0 and frame.loc[path, "host_ms"] > 0 and frame.loc[path, "gpu_ms"] > 0
    assert frame.loc["", "inductor_ms"] > 0
    for leaf in ("transformer.wte", "transformer.h.0.attn.c_attn", "lm_head"):  # leaves' kernels found their module
        assert frame.loc[leaf, "gpu_ms"] > 0, leaf
    layer = frame.loc["transformer.h.0", "inductor_ms"]  # a layer's Inductor figure: whole, or none and said why
    assert layer > 0 or (layer != layer and any("not given on CUDA" in note for note in prof.notes))
    externs = kernels[kernels["kind"] == "extern"]  # cuBLAS's kernels found through the aten op that launched them
    assert (externs["timing"] == "measured (CUDA profiler)").mean() > 0.9
    assert not any("matched no launch" in note for note in prof.notes)
    assert not prof.graphs[0].verdict.modelled
    trace = json.loads(prof.trace(tmp_path / "trace.json").read_text())
    annotated = [e for e in trace["traceEvents"] if "group" in e.get("args", {})]
    assert {e["name"] for e in annotated} >= set(generated["kernel"])
    assert any(e.get("name", "").startswith("module: transformer.h.0") for e in trace["traceEvents"])


def test_cuda_launches_are_read_in_program_order() -> None:
    """The CUDA profiler's kernels given to our launches: generated kernels by name (a name two graphs share is told
    apart by its place), library kernels to the extern call whose aten op launched them, the rest left over."""
    from fusionlab.profile.cuda import GpuKernel, launch_times

    program = [("pointwise_0_add", False), ("extern_1_aten_addmm_default", True),
               ("extern_2_aten__scaled_dot_product_flash_attention_default", True), ("pointwise_0_add", False)]
    stream = [("pointwise_0_add", ()), ("sm90_gemm", ("aten::addmm",)),
              ("flash_fwd", ("aten::_flash_attention_forward", "aten::_scaled_dot_product_flash_attention")),
              ("flash_combine", ("aten::_scaled_dot_product_flash_attention",)), ("pointwise_0_add", ()),
              ("fill", ("aten::zeros",))]
    kernels, clock = [], 0.0
    for _ in range(2):  # two steps back to back
        for name, launchers in stream:
            kernels.append(GpuKernel(name, clock, clock + 2.0 + len(kernels) % 2, None, launchers))
            clock += 4.0
    times, left, skipped, _ = launch_times(program, kernels, calls=2)
    assert skipped == 0
    assert times == {0: 2.0, 1: 3.0, 2: 5.0, 3: 2.0}  # µs per step; flash attention's two kernels both counted
    assert left == pytest.approx(3.0)  # the fill no launch of ours made
    # DDP's all-reduce between the two graphs: neither ours nor left over, but a collective with its time
    from fusionlab.profile.cuda import collectives_us

    nccl = GpuKernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 1.0, 41.0, None)
    with_comms = kernels[:3] + [nccl] + kernels[3:]
    assert launch_times(program, with_comms, calls=2) == (times, left, 0, 0)

    # three calls of one library op in a row (q, k and v projections): each call's kernels are its own launch's
    mm = [(f"extern_{i}_aten_mm_default", True) for i in range(3)] + [("pointwise_3_add", False)]
    stream = [GpuKernel("gemm", 10.0 * i, 10.0 * i + 1 + i, None, ("aten::mm",), op=70 + i) for i in range(3)]
    stream.append(GpuKernel("pointwise_3_add", 40.0, 41.0, None))
    assert launch_times(mm, stream, calls=1) == ({0: 1.0, 1: 2.0, 2: 3.0, 3: 1.0}, 0.0, 0, 0)
    # a generated kernel found past another generated launch that never ran: the order was not the program's
    assert launch_times(mm, stream[3:] + stream[:3], calls=1).skipped == 0
    assert launch_times([("pointwise_0_a", False), ("pointwise_1_b", False)],
                        [GpuKernel("pointwise_1_b", 0.0, 1.0, None)], calls=1).skipped == 1
    assert collectives_us(with_comms, calls=2) == {"AllReduce": (0.5, 20.0)}
    # cuDNN's attention backward launches through the driver: its kernels have no host event in the profile. They
    # are the extern's when it is the one extern launch between the generated kernels around them; where two externs
    # meet, or after the extern's own kernels, they are left over rather than guessed.
    attention = "aten__scaled_dot_product_cudnn_attention_backward_default"
    backward = [("pointwise_0_mul", False), (f"extern_1_{attention}", True), ("pointwise_2_add", False),
                ("extern_3_aten_mm_default", True), (f"extern_4_{attention}", True), ("pointwise_5_add", False)]
    stream = [GpuKernel("pointwise_0_mul", 0.0, 1.0, None), GpuKernel("cudnn_bprop_a", 2.0, 9.0, None),
              GpuKernel("cudnn_bprop_b", 10.0, 12.0, None), GpuKernel("pointwise_2_add", 13.0, 14.0, None),
              GpuKernel("gemm", 15.0, 18.0, None, ("aten::mm",), op=5),
              GpuKernel("cudnn_bprop_a", 19.0, 26.0, None), GpuKernel("pointwise_5_add", 27.0, 28.0, None)]
    assert launch_times(backward, stream, calls=1) == ({0: 1.0, 1: 9.0, 2: 1.0, 3: 3.0, 5: 1.0}, 7.0, 0, 2)
    two = [("pointwise_0_mul", False), (f"extern_1_{attention}", True), (f"extern_2_{attention}", True),
           ("pointwise_3_add", False)]
    stream = [GpuKernel("pointwise_0_mul", 0.0, 1.0, None), GpuKernel("cudnn_bprop_a", 2.0, 9.0, None),
              GpuKernel("cudnn_bprop_a", 10.0, 17.0, None), GpuKernel("pointwise_3_add", 18.0, 19.0, None)]
    assert launch_times(two, stream, calls=1) == ({0: 1.0, 3: 1.0}, 14.0, 0, 0)
    # a kernel with no host event beside a library op that launches through the runtime is not its: left over
    plain = [("pointwise_0_mul", False), ("extern_1_aten_mm_default", True), ("pointwise_2_add", False)]
    stream = [GpuKernel("pointwise_0_mul", 0.0, 1.0, None), GpuKernel("foreign", 2.0, 50.0, None),
              GpuKernel("gemm", 51.0, 54.0, None, ("aten::mm",), op=9), GpuKernel("pointwise_2_add", 55.0, 56.0, None)]
    assert launch_times(plain, stream, calls=1) == ({0: 1.0, 1: 3.0, 2: 1.0}, 48.0, 0, 0)
    # a program of one attention extern: no generated kernel around it to bound it, so nothing is placed
    assert launch_times([(f"extern_0_{attention}", True)], [GpuKernel("cudnn_bprop_a", 0.0, 7.0, None)],
                        calls=1) == ({}, 7.0, 0, 0)


def test_cuda_kernels_are_linked_to_the_op_that_launched_them() -> None:
    """The profiler's events as torch gives them: a kernel's linked correlation id names the op that launched it,
    while the CUDA runtime's host events carry ids of another numbering that collide with the ops' ids; the GPU
    timeline also holds a CUDA-typed span for every record_function range (a user annotation), which is no kernel."""
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    from fusionlab.profile.cuda import gpu_kernels, module_gpu_ms

    def event(ident: int, name: str, device: Any, start: float, end: float, linked: int = 0, parent: Any = None,
              annotation: bool = False) -> SimpleNamespace:
        span = SimpleNamespace(start=start, end=end, elapsed_us=lambda: end - start)
        return SimpleNamespace(id=ident, name=name, device_type=device, time_range=span, linked_correlation_id=linked,
                               cpu_parent=parent, is_user_annotation=annotation, activity_type=None)

    block = event(7, "module: h.0", DeviceType.CPU, 0, 50)
    mlp = event(8, "module: h.0.mlp", DeviceType.CPU, 10, 40, parent=block)
    addmm = event(9, "aten::addmm", DeviceType.CPU, 12, 20, parent=mlp)
    launch = event(3, "cudaLaunchKernel", DeviceType.CPU, 14, 16, linked=9, parent=addmm)
    fill = event(5, "aten::fill_", DeviceType.CPU, 42, 48, parent=block)
    other = event(9, "cudaLaunchKernel", DeviceType.CPU, 43, 45, linked=5, parent=fill)  # CUPTI's 9 is addmm's 9
    gemm = event(4, "sm90_gemm", DeviceType.CUDA, 60, 70, linked=9)
    twin = event(1, "module: h.0.mlp", DeviceType.CUDA, 58, 75, linked=8, annotation=True)
    # a kernel whose event names no op (torch 2.11 leaves the link off): found through the launch sharing its id
    gelu = event(20, "aten::gelu", DeviceType.CPU, 30, 38, parent=mlp)
    launch_gelu = event(21, "cuLaunchKernelEx", DeviceType.CPU, 31, 33, linked=20, parent=gelu)
    gelu_kernel = event(21, "gelu_kernel", DeviceType.CUDA, 71, 73)
    kernels = gpu_kernels([block, mlp, addmm, launch, gelu, launch_gelu, fill, other, gemm, twin, gelu_kernel])
    assert [(k.name, k.module, k.launchers[0]) for k in kernels] == [("sm90_gemm", "h.0.mlp", "aten::addmm"),
                                                                     ("gelu_kernel", "h.0.mlp", "aten::gelu")]
    assert module_gpu_ms(kernels) == {"h.0.mlp": pytest.approx(0.012)}

    # torch 2.11: no linked_correlation_id on the FunctionEvents; Kineto's own events give it, by the kernel's id
    from fusionlab.profile.cuda import device_links

    def bare(item: SimpleNamespace) -> SimpleNamespace:
        return SimpleNamespace(**{k: v for k, v in vars(item).items() if k != "linked_correlation_id"})

    def raw(item: SimpleNamespace, linked: int) -> SimpleNamespace:
        return SimpleNamespace(correlation_id=lambda: item.id, linked_correlation_id=lambda: linked,
                               device_type=lambda: item.device_type, is_user_annotation=lambda: item.is_user_annotation)

    old_events = [bare(e) for e in (block, mlp, addmm, fill, other, gemm, twin)]
    results = SimpleNamespace(events=lambda: [raw(twin, 8), raw(gemm, 9)])
    links = device_links(SimpleNamespace(profiler=SimpleNamespace(kineto_results=results)))
    assert links == {4: 9}  # the annotation span left out
    assert [(k.name, k.module) for k in gpu_kernels(old_events, links)] == [("sm90_gemm", "h.0.mlp")]
    assert [k.module for k in gpu_kernels(old_events)] == [None]  # without the links: no module, not a wrong one


class _Layer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x)) * 2


class _Layers(torch.nn.Module):
    """Three identical layers: Inductor launches one Triton kernel for all three."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(_Layer() for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def test_inductor_launches_are_read_per_call_and_given_to_their_layer() -> None:
    """On CUDA Inductor's time per module comes from every launch in order: the kernel it launches for each of three
    identical layers is each layer's at its place (not their common parent's), cuBLAS's kernels the extern call's
    whose aten op launched them, NCCL's in neither."""
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    from fusionlab.inductor.adapter import parse_program
    from fusionlab.profile.cuda import gpu_kernels
    from fusionlab.profile.inductor_times import _attribute_cuda, _launch_name, _owners

    torch.manual_seed(0)
    ex = fl.explore(_Layers(), torch.randn(8, 16))
    view = ex.inductor(cpu_backend="triton")
    kernels = parse_program(view.wrapper_source, ex.captured.aten_nodes)
    calls = parse_program(view.wrapper_source, ex.captured.aten_nodes, per_call=True)
    modules = {node.name: node.module for node in ex.captured.aten_nodes}
    launches = [(_launch_name(0, place, call), module)
                for place, (call, module) in enumerate(zip(calls, _owners(calls, modules)))]
    generated = [(name, module) for (name, extern), module in launches if not extern]
    assert len(generated) == 3 and len({name for name, _ in generated}) == 1 < len(calls) - len(kernels) + 1
    assert [module for _, module in generated] == ["layers.0", "layers.1", "layers.2"]
    assert [module for (_, extern), module in launches if extern] == [f"layers.{i}.linear" for i in range(3)]

    # the GPU's stream for one step: per layer a cuBLAS kernel launched by aten::addmm, then the shared kernel
    def event(ident: int, name: str, device: Any, start: float, parent: Any = None) -> SimpleNamespace:
        span = SimpleNamespace(start=start, end=start + 2.0 + (name == "gemm"), elapsed_us=lambda: 2.0)
        return SimpleNamespace(id=ident, name=name, device_type=device, time_range=span, cpu_parent=parent,
                               is_user_annotation=False, activity_type=None)

    events, clock = [], 0.0
    for layer in range(3):
        op = event(100 + layer, "aten::addmm", DeviceType.CPU, clock)
        events += [op, event(200 + layer, "cudaLaunchKernel", DeviceType.CPU, clock + 0.5, parent=op),
                   event(200 + layer, "gemm", DeviceType.CUDA, clock + 10),
                   event(300 + layer, generated[0][0], DeviceType.CUDA, clock + 20)]
        clock += 40
    events.append(event(400, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", DeviceType.CUDA, clock))
    per_module: dict[str, float] = collections.defaultdict(float)
    total, unattributed = _attribute_cuda(gpu_kernels(events), launches, per_module)
    assert total == pytest.approx(0.015) and unattributed == pytest.approx(0.0)  # 3 x (3 + 2) µs; NCCL apart
    assert dict(per_module) == {**{f"layers.{i}": pytest.approx(0.002) for i in range(3)},
                                **{f"layers.{i}.linear": pytest.approx(0.003) for i in range(3)}}
