"""fusionlab.lessons: what the lessons say about their examples, computed from the generated code and the graph."""

from __future__ import annotations

import pytest
import torch

import fusionlab as fl
from fusionlab.lessons import copy_kernels, launch_bound_note, recorded_kernels, row_passes, times
from fusionlab.measure.devices import PROFILES
from fusionlab.measure.report import BenchReport, BenchRow


def softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


def test_row_passes_counts_the_loops_of_a_looped_softmax_and_one_pass_of_a_persistent_one() -> None:
    x = torch.randn(4, 64)
    kernel = fl.explore(softmax, x, looped_reductions=True).generated.kernels[0]
    looped = row_passes(kernel)
    loops = kernel.source.count("for roffset in range(")
    assert loops >= 2 and (len(looped.passes), looped.reads, looped.writes) == (loops, loops, 1)
    assert [walk.loads for walk in looped.passes] == [("x",)] * loops
    assert [walk.stores for walk in looped.passes] == [()] * (loops - 1) + [("div",)]
    assert f"reads x {times(loops)}, writes once" in repr(looped)
    persistent = row_passes(fl.explore(softmax, x).generated.kernels[0])
    assert (len(persistent.passes), persistent.reads, persistent.writes) == (1, 1, 1)


def test_row_passes_sees_welfords_shared_loop() -> None:
    def layer_norm(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.layer_norm(x, (x.shape[-1],))

    passes = row_passes(fl.explore(layer_norm, torch.randn(4, 64), looped_reductions=True).generated.kernels[0])
    assert (passes.reads, passes.writes) == (2, 1), passes  # mean and variance in one loop, then the outputs


def test_row_passes_refuses_what_is_not_a_kernel() -> None:
    with pytest.raises(ValueError, match="no @triton.jit function"):
        row_passes("def f(x):\n    return x\n")
    with pytest.raises(TypeError, match="got int"):
        row_passes(3)
    assert times(1) == "once" and times(2) == "twice" and times(7) == "7 times"


def test_copy_kernels_name_the_strided_view_and_the_product_that_needs_it() -> None:
    def heads(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        q4, k4 = (t.reshape(2, 8, 4, 16).transpose(1, 2) for t in (q, k))
        return q4 @ k4.transpose(-2, -1)

    q, k = torch.randn(2, 8, 64), torch.randn(2, 8, 64)
    ex = fl.explore(heads, q, k)
    copies = copy_kernels(ex)
    assert {copy.kernel for copy in copies} == {g.name for g in ex.fused.kernels if g.name.endswith("_copy")}
    assert len(copies) == 2
    for copy in copies:
        assert copy.shape in ((2, 4, 8, 16), (2, 4, 16, 8)) and "bmm" in copy.needed_by  # q, and k transposed
        assert copy.reshaped_to == (8, *copy.shape[2:])
        assert copy.strides != tuple(torch.empty(copy.shape).stride()), "a contiguous view needs no copy"
        assert copy.bytes_moved == 2 * 2 * 4 * 8 * 16 * 4
        assert "cannot be reshaped to that in place" in copy.why
    torch.testing.assert_close(ex(q, k), heads(q, k))
    assert copy_kernels(fl.explore(softmax, torch.randn(4, 8))) == ()


def _row(kernel: str, ms: float) -> BenchRow:
    return BenchRow("fusionlab", kernel, ms, 1, 1000, None, None, "modelled", "H200")


def _report(rows: tuple[BenchRow, ...]) -> BenchReport:
    return BenchReport("w", "cpu", "memory", 1, 0, 1.0, PROFILES["H200"], rows)


def test_launch_bound_note_tells_launches_from_bytes() -> None:
    small = launch_bound_note(_report((_row("a", 0.003), _row("b", 0.0031))))
    assert small.startswith("2 of 2 modelled kernels") and "launch-bound" in small
    big = launch_bound_note(_report((_row("a", 0.08), _row("b", 0.05))))
    assert big.startswith("0 of 2") and "bandwidth-bound" in big
    assert "no modelled kernel times" in launch_bound_note(_report(()))


def test_recorded_kernels_are_the_shipped_h200_figures() -> None:
    table = recorded_kernels("gpt_block")
    assert set(table.variant) == {"fusionlab", "inductor"} and (table.device == "cuda:0").all()
    copies = table[table.kernel.str.contains("copy|clone")]
    assert len(copies[copies.variant == "inductor"]) == 4, "Inductor makes the same four copies"
    with pytest.raises(ValueError, match="no recorded measured kernels for workload 'mine'"):
        recorded_kernels("mine")


def test_the_per_kernel_chart_says_how_many_kernels_it_shows() -> None:
    from fusionlab.display.plots import kernel_figure

    rows = tuple(_row(f"kernel_{i}", 0.001 * (i + 1)) for i in range(15))
    assert "12 of 15 kernels shown" in kernel_figure(rows, top=12).axes[0].get_title(loc="left")
    assert "all 3 kernels" in kernel_figure(rows[:3], top=12).axes[0].get_title(loc="left")
