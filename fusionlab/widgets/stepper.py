"""StageStepper: a slider over the compiler's stages and another over the fusion decisions, with "play".

At each decision the graph shows the groups built so far and marks the pair just considered (green: fused,
red: kept apart); the card under it gives the reason and the bytes the fusion saves.

    >>> stepper = StageStepper(ex)            # or StageStepper(ex.fused): captured, decomposed, fused only
    >>> stepper.step = 0                      # before decision 0 ... the graph and the card follow
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets
import traitlets

from fusionlab.display import style
from fusionlab.display.graph import resolve_stage
from fusionlab.display.source import highlight_html
from fusionlab.display.tables import decisions_table
from fusionlab.fusion.kinds import KERNEL_GROUP_KINDS, group_kind
from fusionlab.stages import STAGES, Fused
from fusionlab.widgets.base import StaticFallback
from fusionlab.widgets.graph_view import GraphView

__all__ = ["STAGES", "StageStepper", "decision_card", "group_counts"]


def group_counts(fused: Fused, step: int) -> dict[str, int]:
    """How many kernels, extern calls and view-only groups the partition after `step` holds (views launch nothing)."""
    graph = fused.previous.graph
    counts = {"kernels": 0, "extern": 0, "views": 0}
    for members in fused.groups_after(step):
        kind = group_kind(graph[m].kind for m in members)
        counts["kernels" if kind in KERNEL_GROUP_KINDS else "extern" if kind == "extern" else "views"] += 1
    return counts


def _counts_text(counts: dict[str, int]) -> str:
    kernels, extern, views = counts["kernels"], counts["extern"], counts["views"]
    text = f"{kernels} kernel{'s' if kernels != 1 else ''}"
    if extern:
        text += f" and {extern} extern call{'s' if extern != 1 else ''}"
    if views:
        text += f" ({views} view{'s' if views != 1 else ''} between them: no kernel of their own)"
    return text


def decision_card(fused: Fused, step: int) -> str:
    """The decision at `step` in words (escaped); step -1 is the start: one group per primitive.

    Decisions are counted from 1 in the card, as on the slider: `step` k is "decision k+1 of N".
    """
    total = len(fused.decisions)
    if step < 0 or not total:
        text = (f"Before any decision: one group per primitive ({_counts_text(group_counts(fused, -1))}). "
                f"The policy {fused.policy_name!r} will consider {total} producer -> consumer pairs; press play "
                "or move the slider.")
        return f"<div style='{style.NOTE_STYLE}'>{html.escape(text)}</div>"
    decision = fused.decisions[min(step, total - 1)]
    colour = style.FUSED_COLOUR if decision.fused else style.KEPT_APART_COLOUR
    verdict = "fused" if decision.fused else "kept apart"
    saved = f"; saves {decision.bytes_saved:,} bytes of memory traffic" if decision.fused else ""
    after = _counts_text(group_counts(fused, decision.step))
    return (f"<div style='font-size:12.5px;font-family:{style.FONT}'>"
            f"<b>decision {decision.step + 1} of {total}</b>: <code>{html.escape(decision.producer)}</code> &rarr; "
            f"<code>{html.escape(decision.consumer)}</code>: <b style='color:{colour}'>{verdict}</b>"
            f"{html.escape(saved)}<br><span style='color:#374151'>{html.escape(decision.reason)}</span>"
            f"<br><span style='{style.NOTE_STYLE}'>after this step: {html.escape(after)}</span></div>")


PLAY_TOOLTIP = ("▶ play the decisions one by one; ❚❚ pause; ■ stop: back to the start, before any decision; "
                "↻ loop: start again after the last")


class StageStepper(StaticFallback, ipywidgets.VBox):
    """Step through the stages (`stage`) and, at the fused stage, through the decisions (`step`)."""

    stage = traitlets.Unicode("fused")
    step = traitlets.Int(-1)

    def __init__(self, source: Any, graph: GraphView | None = None, stage: str = "fused", step: int | None = None,
                 show_text: bool = True, **kwargs: Any) -> None:
        self.source = source
        captured, decomposed, fused = resolve_stage(source)
        if fused is None:
            raise TypeError("StageStepper needs a Fused stage or an Exploration")
        self.fused = fused
        self._stages: dict[str, Any] = {"captured": captured, "decomposed": decomposed, "fused": fused}
        self._lazy = not isinstance(source, Fused) and hasattr(source, "generated")
        available = list(STAGES if self._lazy else STAGES[:3])
        last = len(fused.decisions) - 1
        start = last if step is None else max(-1, min(step, last))
        self.graph = graph if graph is not None else GraphView(fused, step=start)
        self.stage_slider = ipywidgets.SelectionSlider(options=available, value=stage, description="stage",
                                                       continuous_update=False, layout={"width": "420px"})
        # The slider and the play button count decisions made, from 0 (before any) to N (all): the value is
        # `step + 1`, so the slider reads what the card says ("decision 16 of 17" at 16), and the play
        # widget's stop button, which goes back to `min`, shows the start rather than -1.
        self.play = ipywidgets.Play(min=0, max=last + 1, step=1, interval=900, value=start + 1,
                                    description="play the decisions", tooltip=PLAY_TOOLTIP)
        self.slider = ipywidgets.IntSlider(min=0, max=last + 1, value=start + 1, description="decisions",
                                           continuous_update=True, layout={"width": "420px"},
                                           tooltip="decisions made so far: 0 is the start (one group per "
                                                   "primitive), the last is the final grouping")
        self.buttons_help = ipywidgets.HTML(f"<span style='{style.NOTE_STYLE}'>{html.escape(PLAY_TOOLTIP)}</span>")
        ipywidgets.jslink((self.play, "value"), (self.slider, "value"))
        self.card = ipywidgets.HTML()
        self.text = ipywidgets.HTML()
        self.text_box = ipywidgets.Accordion(children=[self.text], titles=("program text",))
        self.text_box.selected_index = None
        rows = [self.stage_slider, ipywidgets.HBox([self.play, self.slider]), self.buttons_help, self.card,
                self.graph]
        if show_text:
            rows.append(self.text_box)
        super().__init__(rows, **kwargs)
        self.add_class("fusionlab-stage-stepper")
        self.set_trait("step", start)
        self.set_trait("stage", stage)
        self.stage_slider.observe(lambda change: setattr(self, "stage", change["new"]), names="value")
        # jslink keeps the two together in the page; these keep `step` right when either moves alone (a test,
        # or a front end that has not drawn the link yet).
        for control in (self.slider, self.play):
            control.observe(lambda change: setattr(self, "step", change["new"] - 1), names="value")
        self.observe(lambda _: self.refresh(), names=["stage", "step"])
        self.refresh()

    def stage_object(self, name: str) -> Any:
        if name not in self._stages:
            self._stages[name] = getattr(self.source, name)
        return self._stages[name]

    def refresh(self) -> None:
        if self.stage_slider.value != self.stage:
            self.stage_slider.value = self.stage
        for control in (self.slider, self.play):
            if control.value != self.step + 1:
                control.value = self.step + 1
        at_fused = self.stage == "fused"
        self.slider.disabled = self.play.disabled = not at_fused
        if self.stage in ("captured", "decomposed"):
            self.graph.show_stage(self.stage_object(self.stage))
            what = ("the aten graph, as captured" if self.stage == "captured" else
                    "fusionlab's primitives: pointwise, reduction, view (dashed), extern (grey box)")
            self.card.value = f"<div style='{style.NOTE_STYLE}'>{html.escape(what)}</div>"
        elif at_fused:
            self.graph.show_stage(self.fused, step=self.step)
            self.card.value = decision_card(self.fused, self.step)
        else:
            self.graph.show_stage(self.fused)
            what = ("one Triton kernel per coloured group, and the wrapper that launches them" if
                    self.stage == "generated" else "the runnable program (Triton's interpreter on a CPU)")
            self.card.value = f"<div style='{style.NOTE_STYLE}'>{html.escape(what)}</div>"
        self.text.value = highlight_html(self.stage_object(self.stage).as_text(), "python", "360px")

    def static_html(self) -> str:
        table = decisions_table(self.fused, upto=self.step if self.stage == "fused" else None,
                                max_height="260px")
        return f"<div>{self.card.value}{self.graph.static_html()}{table}</div>"

    def __repr__(self) -> str:
        return f"StageStepper(stage={self.stage!r}, step={self.step} of {len(self.fused.decisions)})"
