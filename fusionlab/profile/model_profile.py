"""`ModelProfile`: what `fl.profile` found in a model, as tables, a page, a widget and a trace.

    >>> prof = fl.profile(model, **inputs)
    >>> prof.graphs                       # each Dynamo graph (graph breaks with reason and line), each an Exploration
    >>> prof.modules                      # pandas DataFrame over the module tree
    >>> prof.kernels                      # every kernel: module, group, bytes, time, % of the roofline
    >>> prof.show(); prof.to_html("gpt2.html"); prof.trace("gpt2.json")
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fusionlab.measure.devices import DeviceProfile
from fusionlab.profile.kernels import KernelRecord, kernel_records, modelled_timeline
from fusionlab.profile.modules import MODULE_COLUMNS, fusionlab_columns
from fusionlab.profile.records import GraphBreak, GraphProfile, Spread
from fusionlab.profile.verdict import verdict_of

__all__ = ["ModelProfile"]

_KERNEL_COLUMNS = tuple(KernelRecord.__dataclass_fields__)
_STYLE = """
.fl-profile { font-family: Helvetica, Arial, sans-serif; color: #111827; }
.fl-profile table { border-collapse: collapse; font-size: 12px; }
.fl-profile th, .fl-profile td { border: 1px solid #e5e7eb; padding: 2px 6px; text-align: right; }
.fl-profile td:first-child, .fl-profile th:first-child { text-align: left; }
.fl-profile .fl-note { font-size: 12px; color: #4b5563; }
.fl-profile .fl-scroll { max-height: 420px; overflow: auto; }
"""


@dataclass(frozen=True)
class ModelProfile:
    """A model profiled by `fl.profile`: its graphs, its module tree and its kernels, with the times of eager,
    fusionlab and Inductor. `timing` says where every figure came from (measured, modelled, rounds, threads).
    Example: `fl.profile(model, **inputs).modules.sort_values("eager_ms")`.
    """

    model_name: str
    train: bool
    device: str
    device_profile: DeviceProfile
    graphs: tuple[GraphProfile, ...]
    module_rows: tuple[dict[str, Any], ...]
    kernel_rows: tuple[dict[str, Any], ...]
    eager: Spread
    inductor: Spread | None
    inductor_unattributed: Spread | None
    timing: str
    notes: tuple[str, ...]
    trace_events: dict[str, Any]
    threads: int | None
    rounds: int
    unmatched_ms: float = 0.0  # CUDA: fusionlab's GPU ms per step that matched no launch (in the model's row)

    # ---- tables -----------------------------------------------------------------------------------------

    @property
    def modules(self) -> Any:
        """A pandas DataFrame, one row per module in tree order ("" is the model itself); every figure covers
        the module and what is under it."""
        import pandas as pd

        return pd.DataFrame(list(self.module_rows), columns=list(MODULE_COLUMNS))

    @property
    def kernels(self) -> Any:
        """A pandas DataFrame, one row per launch of fusionlab's programs (kernels and extern calls), in launch
        order, graph by graph."""
        import pandas as pd

        return pd.DataFrame(list(self.kernel_rows), columns=list(_KERNEL_COLUMNS))

    @property
    def breaks(self) -> tuple[GraphBreak, ...]:
        """The graph breaks, in graph order (one per Dynamo graph that a break ended)."""
        seen: dict[int, GraphBreak] = {}
        for graph in self.graphs:
            if graph.ended_by is not None:
                seen.setdefault(graph.index, graph.ended_by)
        return tuple(seen.values())

    @property
    def saved_bytes(self) -> int:
        """Bytes of activations the forward graphs save for the backward graphs (0 in inference)."""
        return sum(g.saved_bytes for g in self.graphs if g.role == "forward")

    def module(self, path: str) -> dict[str, Any]:
        """One module's row ("" for the model)."""
        for row in self.module_rows:
            if row["module"] == path:
                return dict(row)
        raise KeyError(f"no module {path!r} in the profile of {self.model_name}: its modules are "
                       f"{', '.join(repr(r['module']) for r in self.module_rows[:8])}, ...")

    def graph(self, which: int | str) -> GraphProfile:
        """A graph by its place in `graphs` (0, 1, ...) or its name ("graph 0 (forward)")."""
        if isinstance(which, int) and 0 <= which < len(self.graphs):
            return self.graphs[which]
        for graph in self.graphs:
            if graph.name == which:
                return graph
        raise KeyError(f"no graph {which!r}: give a place 0..{len(self.graphs) - 1} or one of "
                       f"{', '.join(g.name for g in self.graphs)}")

    def with_fusion(self, graph: int | str, forbid: Sequence[tuple[str, str]] = (),
                    force: Sequence[tuple[str, str]] = ()) -> ModelProfile:
        """What if one graph fused differently: a new profile whose graph `graph` is re-fused with `forbid` /
        `force` (node names as in its `exploration.decomposed`, see `fused.decisions`), and whose fusionlab
        figures for that graph are modelled on the device profile (labelled "what-if"). Eager's and Inductor's
        figures are the measured ones, unchanged."""
        old = self.graph(graph)
        explored = old.exploration.with_fusion(forbid=forbid, force=force)
        label = f"modelled on {self.device_profile.name} (what-if)"
        records = [replace(r, timing=label) for r in kernel_records(explored, graph=old.name, role=old.role,
                                                                     profile=self.device_profile)]
        _, intervals = modelled_timeline(records, self.device_profile)
        new_graph = replace(old, exploration=explored, kernels=sum(1 for r in records if r.kind != "extern"),
                            externs=sum(1 for r in records if r.kind == "extern"),
                            verdict=verdict_of(intervals, modelled=True, device=self.device_profile.name))
        kernels = [r for row in self.kernel_rows if row["graph"] != old.name for r in [KernelRecord(**row)]]
        position = next(i for i, row in enumerate(self.kernel_rows) if row["graph"] == old.name) if any(
            row["graph"] == old.name for row in self.kernel_rows) else len(kernels)
        kernels[position:position] = records
        timings = {str(row["fusionlab_timing"]) for row in self.module_rows} | {label}
        modules = tuple({**row, **fusionlab_columns(row["module"], kernels, self.unmatched_ms if row["module"] == ""
                                                    else 0.0),
                         "fusionlab_timing": "; ".join(sorted(timings))} for row in self.module_rows)
        return replace(self, graphs=tuple(new_graph if g is old else g for g in self.graphs), module_rows=modules,
                       kernel_rows=tuple(r.row() for r in kernels),
                       notes=self.notes + (f"what-if: {old.name} re-fused with forbid={list(forbid)}, "
                                           f"force={list(force)}; its fusionlab figures are modelled",))

    # ---- text -------------------------------------------------------------------------------------------

    def __repr__(self) -> str:
        mode = "training step" if self.train else "inference"
        kernels = sum(g.kernels for g in self.graphs)
        return (f"ModelProfile({self.model_name}, {mode} on {self.device}: {len(self.graphs)} graphs, "
                f"{len(self.breaks)} graph breaks, {kernels} kernels; eager {self.eager})")

    def as_text(self) -> str:
        """A readable summary: timings, notes, each graph with its verdict and break, the heaviest modules."""
        lines = [repr(self), f"# {self.timing}"]
        lines += [f"# note: {note}" for note in self.notes]
        if self.inductor is not None:
            lines.append(f"Inductor: {self.inductor} over its graphs' calls"
                         + (f", of which {self.inductor_unattributed} not attributed to a module"
                            if self.inductor_unattributed else ""))
        for graph in self.graphs:
            lines.append(f"{graph.name}: {graph.kernels} kernels, {graph.externs} externs; {graph.verdict}")
            if graph.saved_bytes:
                lines.append(f"    saves {graph.saved_bytes:,} bytes of activations for the backward graph")
            if graph.ended_by is not None:
                lines.append(f"    ended by a {graph.ended_by}")
        lines.append("heaviest modules (eager ms, inclusive):")
        rows = sorted((r for r in self.module_rows if r["module"] and r["eager_ms"] is not None),
                      key=lambda r: -r["eager_ms"])[:8]
        lines += [f"    {r['module']:<40} {r['eager_ms']:.4g} ms  {r['kernels']} kernels" for r in rows]
        return "\n".join(lines)

    # ---- views ------------------------------------------------------------------------------------------

    def _summary_html(self) -> str:
        items = "".join(f"<li>{html.escape(g.name)}: {g.kernels} kernels, {g.externs} externs; "
                        f"<b>{html.escape(str(g.verdict))}</b>"
                        + (f"; saves {g.saved_bytes:,} bytes for backward" if g.saved_bytes else "")
                        + (f"<br><span class='fl-note'>ended by a {html.escape(str(g.ended_by))}</span>"
                           if g.ended_by else "") + "</li>" for g in self.graphs)
        notes = "".join(f"<li class='fl-note'>{html.escape(n)}</li>" for n in self.notes)
        inductor = (f"<p>Inductor: {html.escape(str(self.inductor))}</p>" if self.inductor is not None else "")
        return (f"<h3>{html.escape(repr(self))}</h3><p class='fl-note'>{html.escape(self.timing)}</p>"
                f"{inductor}<ul>{items}</ul>" + (f"<ul>{notes}</ul>" if notes else ""))

    def _tables_html(self, kernels: int = 40) -> tuple[str, str]:
        modules = self.modules.to_html(index=False, na_rep="–", float_format=lambda v: f"{v:.4g}")
        frame = self.kernels
        if len(frame) > kernels:
            frame = frame.sort_values("time_us", ascending=False).head(kernels)
        note = f"<p class='fl-note'>the {len(frame)} longest of {len(self.kernel_rows)} launches</p>" if len(
            self.kernel_rows) > kernels else ""
        return (f"<div class='fl-scroll'>{modules}</div>",
                note + f"<div class='fl-scroll'>{frame.to_html(index=False, na_rep='–', float_format=_short)}</div>")

    def _chart_html(self) -> str:
        try:
            from fusionlab.display.modules import icicle
        except ImportError:  # the module view is not in this installation
            return ""
        frame = self.modules
        column = "eager_ms"
        if frame[column].isna().all():
            return ""
        try:
            chart = icicle(frame[["module", column]], value=column, label=f"eager, {self.timing.split(';')[0]}")
        except (ValueError, TypeError):  # nothing positive to draw
            return ""
        return f"<h4>eager time by module</h4>{chart._repr_html_()}"

    def _repr_html_(self) -> str:
        modules, kernels = self._tables_html()
        return (f"<div class='fl-profile'><style>{_STYLE}</style>{self._summary_html()}{self._chart_html()}"
                f"<h4>modules</h4>{modules}<h4>kernels</h4>{kernels}</div>")

    def to_html(self, path: str | Path) -> Path:
        """Write a self-contained page (no kernel, no network needed): summary, time by module, the module and
        kernel tables, each graph's break and verdict."""
        from fusionlab.report import module_graph_html  # the page's graph, folded by module: a click opens a layer

        target = Path(path)
        largest = max(self.graphs, key=lambda g: len(g.exploration.decomposed.graph.nodes), default=None)
        graph = "" if largest is None else f"<h4>{html.escape(largest.name)}, folded by module</h4>" + \
            module_graph_html(largest.exploration)
        page = (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(self.model_name)} profile"
                f"</title></head><body>{self._repr_html_()}{graph}</body></html>")
        target.write_text(page, encoding="utf-8")
        return target

    def trace(self, path: str | Path) -> Path:
        """Write the Chrome/Perfetto trace (open it in ui.perfetto.dev or chrome://tracing)."""
        target = Path(path)
        target.write_text(json.dumps(self.trace_events), encoding="utf-8")
        return target

    def show(self) -> Any:
        """The profile as a widget (`fusionlab.profile.view.ProfileView`): summary and time by module first;
        the tables in tabs; each graph's Explorer built when its button is clicked."""
        from fusionlab.profile.view import ProfileView

        modules, kernels = self._tables_html()
        style = f"<style>{_STYLE}</style>"
        return ProfileView(self, summary=f"<div class='fl-profile'>{style}{self._summary_html()}"
                                         f"{self._chart_html()}</div>",
                           modules=f"<div class='fl-profile'>{style}<h4>modules</h4>{modules}</div>",
                           kernels=f"<div class='fl-profile'>{style}<h4>kernels</h4>{kernels}</div>")


def _short(value: float) -> str:
    return f"{value:.4g}"
