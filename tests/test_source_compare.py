"""SourceCompare against a real Inductor view: our kernel paired with Inductor's over the same aten nodes.

A conv + batch norm + in-place ReLU block, as in ResNet: Inductor's Triton source on a CPU (generated, not run),
compiled once for the module (~10 s on a small CPU).
"""

from __future__ import annotations

import html
import re

import pytest
import torch
from torch import nn

import fusionlab as fl
from fusionlab.display.source import aligned_diff_html, kernel_function, line_role
from fusionlab.inductor import InductorView, pair_for
from fusionlab.widgets import SourceCompare


def text(markup: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", markup))


@pytest.fixture(scope="module")
def resnet_block() -> tuple[fl.Exploration, InductorView]:
    torch.manual_seed(0)
    block = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(inplace=True)).eval()
    ex = fl.explore(block, torch.randn(1, 3, 8, 8))
    return ex, ex.inductor(cpu_backend="triton")


def test_every_group_pairs_with_an_inductor_kernel(resnet_block: tuple[fl.Exploration, InductorView]) -> None:
    ex, view = resnet_block
    compare = SourceCompare(ex.generated, inductor=view)
    for group in ex.fused.groups:
        if group.kind == "view":
            continue
        assert compare.select(group.name)
        assert "no Inductor kernel lists" not in compare.right.value
        pair = compare.pair()
        assert pair is not None and pair.inductor and not pair.reason, group.name
    extern = next(g for g in ex.fused.groups if g.kind == "extern")
    pair = pair_for(ex.fused, view, extern.name)
    assert pair.inductor == ("extern_convolution_0",) and pair.shared == ("convolution",)
    assert all(view.kernel(name).language == "triton" for name in pair.others)  # its layout copies


def test_diff_pairs_our_kernel_with_the_one_over_the_same_nodes(
        resnet_block: tuple[fl.Exploration, InductorView]) -> None:
    ex, view = resnet_block
    compare = SourceCompare(ex.generated, inductor=view)
    kernel = ex.fused.kernels[0]
    compare.select(kernel.name)
    compare.modes.value = "diff"  # as clicked
    assert compare.mode == "diff" and compare.body.children == (compare.single,)
    ((our_label, ours, their_label, theirs),) = compare.diff_pairs()
    inductor = next(k for k in view.kernels if "relu" in k.node_names)
    assert their_label == f"Inductor: {inductor.name}" and theirs == inductor.body
    assert our_label.startswith("fusionlab: ") and ours.startswith("@triton.jit\ndef ")
    assert set(kernel.origins) & set(inductor.node_names) >= {"add_1", "relu"}
    page = compare.single.value
    assert "paired by the aten nodes both cover" in page and "data-status='role'" in page
    loads = [row for row in re.findall(r"<tr data-status='role'>(.*?)</tr>", page) if text(row).count("tl.load") == 2]
    assert loads, "a load of ours sits beside a load of Inductor's"
    assert f"--- {our_label}" in compare.diff_text() and f"+++ {their_label}" in compare.diff_text()


def test_side_by_side_folds_inductors_decorator(resnet_block: tuple[fl.Exploration, InductorView]) -> None:
    ex, view = resnet_block
    compare = SourceCompare(ex.generated, inductor=view)
    compare.select(ex.fused.kernels[0].name)
    right = compare.right.value
    assert re.search(r"decorator: \d+ lines \(show\)</summary>", right)
    after_fold = text(right.split("</details>")[-1])
    assert "@triton.jit\ndef triton_" in after_fold and "triton_meta" not in after_fold
    assert "triton_meta" in text(right.split("</details>")[0])  # inside the fold, one click away
    compare.mode = "Inductor decisions"
    assert "Inductor's fusion decisions on" in compare.single.value


def test_aligned_diff_puts_lines_of_one_role_side_by_side() -> None:
    ours = "def k(x_ptr, y_ptr):\n    a = tl.load(x_ptr + offs, mask=m)\n    b = a * 2\n    tl.store(y_ptr + offs, b)\n"
    theirs = ("def t(in_ptr0, out_ptr0):\n    tmp0 = tl.load(in_ptr0 + (x0), xmask)\n    tmp1 = 2.0\n"
              "    tmp2 = tmp0 * tmp1\n    tl.store(out_ptr0 + (x0), tmp2, xmask)\n")
    assert [line_role(line) for line in ours.splitlines()] == ["signature", "load", "compute", "store"]
    rows = re.findall(r"<tr data-status='(\w+)'>(.*?)</tr>", aligned_diff_html(ours, theirs, "<ours>", "theirs"))
    by_text = [(status, text(row)) for status, row in rows]
    assert any(status == "role" and row.count("tl.store") == 2 for status, row in by_text)
    assert any(status == "role" and row.count("tl.load") == 2 for status, row in by_text)
    assert [status for status, _ in by_text].count("right") == 1  # Inductor has one compute line more
    assert "&lt;ours&gt;" in aligned_diff_html(ours, theirs, "<ours>", "theirs")
    module = "@triton.jit\ndef _erf(x):\n    return x\n\n@triton.jit\ndef k(x):\n    pass\n"
    assert kernel_function(module, "k") == "@triton.jit\ndef k(x):\n    pass\n"
