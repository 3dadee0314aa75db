"""fusionlab.report: one self-contained page (no network), every user name escaped; `fusionlab report`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from torch import nn

import fusionlab as fl
from fusionlab import cli, models
from fusionlab.report import exploration_html, load_target, module_graph_html


class Scripted(nn.Module):
    """A module attribute named `<script>`: the page must show it as text, never run it."""

    def __init__(self) -> None:
        super().__init__()
        self.register_parameter("<script>", nn.Parameter(torch.randn(32)))
        self.norm = nn.LayerNorm(32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.norm(x) * getattr(self, "<script>")) @ torch.ones(32, 8)


def _external_references(page: str) -> list[str]:
    """Anything that would make the browser fetch from the network."""
    found = re.findall(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//[^"'\s>]+""", page, flags=re.IGNORECASE)
    found += re.findall(r"url\(\s*['\"]?(?:https?:)?//", page) + re.findall(r"@import", page)
    found += re.findall(r"<link\b", page, flags=re.IGNORECASE)
    return found


def test_page_is_self_contained_and_escapes_a_script_attribute() -> None:
    ex = fl.explore(Scripted(), torch.randn(4, 32))
    page = exploration_html(ex, inductor=True, timings=False)
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert not _external_references(page)
    # Our two script elements (the JSON island and the click filter) are the only ones.
    assert len(re.findall(r"<script\b", page, flags=re.IGNORECASE)) == 2
    assert "&lt;script&gt;" in page
    island = re.search(r"<script type='application/json' id='fl-data'>(.*?)</script>", page, re.DOTALL)
    assert island is not None and "<" not in island.group(1)
    for section in ("Graph: one colour per fusion group", "Groups", "Fusion decisions", "Sources", "TorchInductor",
                    "Timings"):
        assert section in page
    assert "<svg" in page and "triton_" in page  # our kernels and Inductor's


def test_page_with_timings_labels_modelled_figures(tmp_path: Path) -> None:
    ex = fl.explore(lambda x, b: torch.nn.functional.gelu(x + b), torch.randn(8, 32), torch.randn(32))
    path = tmp_path / "gelu.html"
    page = ex.to_html(str(path))
    assert path.read_text(encoding="utf-8") == page
    assert "modelled on H200" in page and "measured on cpu" in page
    assert "interpreter, which is never timed" in page
    assert not _external_references(page)
    assert page.count("<svg") >= 4  # the graph, the aten graph, and the charts


def test_a_failing_part_is_reported_on_the_page() -> None:
    ex = fl.explore(lambda x: torch.softmax(x, -1), torch.randn(4, 16))

    class Failing:
        def __init__(self, ex: fl.Exploration) -> None:
            self.ex = ex

        def __getattr__(self, name: str) -> object:
            return getattr(self.ex, name)

        def benchmark(self, **options: object) -> None:
            raise RuntimeError("no timer")

    page = exploration_html(Failing(ex), inductor="unavailable: no compiler", timings=True)
    assert "the benchmark failed: RuntimeError: no timer" in page and "no compiler" in page
    assert "not requested" in exploration_html(ex, inductor=False, timings=None)


def test_cli_report_writes_the_page(tmp_path: Path) -> None:
    out = tmp_path / "softmax.html"
    assert cli.main(["report", "fusionlab.measure.workloads:softmax", "--out", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    assert "fusionlab: softmax" in page and "<svg" in page and not _external_references(page)


def test_report_targets() -> None:
    assert load_target("softmax").fused.kernels
    assert load_target("fusionlab.measure.workloads:gelu_bias").fused.kernels
    with pytest.raises(ValueError, match="needs example inputs"):
        load_target("torch.nn.functional:gelu")
    with pytest.raises(ValueError, match="no attribute"):
        load_target("fusionlab.measure.workloads:nothing_here")
    with pytest.raises(ValueError, match="MODULE:FUNCTION"):
        load_target("no_such_workload")
    assert cli.main(["report", "fusionlab.measure.workloads:nothing_here", "--out", "unused.html"]) == 2


def test_cli_report_without_timings(tmp_path: Path) -> None:
    out = tmp_path / "gelu.html"
    assert cli.main(["report", "gelu_bias", "--no-timings", "--out", str(out)]) == 0
    assert "not requested" in out.read_text(encoding="utf-8")


def test_the_page_script_binds_the_graph_it_writes() -> None:
    page = exploration_html(fl.explore(lambda x: torch.softmax(x, -1), torch.randn(4, 16)), inductor=False,
                            timings=False)
    assert "<div id='fl-graph'><div class='fusionlab-graph'><svg" in page
    assert 'document.getElementById("fl-graph")' in page and 'closest("g.node, g.cluster")' in page


def test_the_page_says_what_is_slow_and_shows_its_progress(capsys: pytest.CaptureFixture[str]) -> None:
    ex = fl.explore(lambda x: torch.softmax(x, -1), torch.randn(4, 16))
    exploration_html(ex, inductor=False, timings=False)
    err = capsys.readouterr().err
    assert err.index("timings=False skips timing and is fast") < err.index("fusionlab page")
    assert "verify, graph, tables, sources." in err
    assert all(f"{part}]" in err for part in ("verify", "graph", "tables", "sources"))  # the bar names each part
    exploration_html(ex, inductor=False, timings=False, progress=False)
    assert capsys.readouterr().err == ""


def test_a_model_page_is_folded_by_module_and_small() -> None:
    """The zoo's tiny GPT-2 (190 nodes): one folded graph plus each layer pre-drawn open, not every node twice."""
    model, inputs = models.build("gpt2", size="tiny", train=False)
    ex = fl.explore(model, **inputs)
    page = exploration_html(ex, inductor=False, timings=False, progress=False)
    assert len(page) < 500_000  # the full graph and the aten graph alone were 480 kB
    assert "Graph, folded by module" in page and "the captured aten graph" not in page
    views = re.findall(r"<template class='fl-module-view' data-module='([^']+)'>", page)
    assert set(views) == {"transformer.wte", "transformer.wpe", "transformer.h.0", "transformer.h.1",
                          "transformer.ln_f", "lm_head"}
    island = json.loads(re.search(r"<script type='application/json' id='fl-data'>(.*?)</script>", page,
                                  re.DOTALL).group(1))  # type: ignore[union-attr]
    assert "module" in island["kinds"].values() and "cluster" in island["kinds"].values()
    assert "plumbing nodes (views, masks, position ids) hidden" in page
    assert "Time by module" in page and "ms (modelled on H200)" in page
    assert not _external_references(page) and len(re.findall(r"<script\b", page)) == 2
    part = module_graph_html(ex)  # the same view as a part of another page (ModelProfile.to_html)
    assert part.count("<template class='fl-module-view'") == 6 and "id='fl-data'" in part and "<body" not in part
