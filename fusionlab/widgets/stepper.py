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
from fusionlab.stages import STAGES, Fused
from fusionlab.widgets.base import StaticFallback
from fusionlab.widgets.graph_view import GraphView

__all__ = ["STAGES", "StageStepper", "decision_card"]


def decision_card(fused: Fused, step: int) -> str:
    """The decision at `step` in words (escaped); step -1 is the start: one group per primitive."""
    total = len(fused.decisions)
    if step < 0 or not total:
        text = (f"Before any decision: one group per primitive. The policy {fused.policy_name!r} will consider "
                f"{total} producer -> consumer pairs; press play or move the slider.")
        return f"<div style='{style.NOTE_STYLE}'>{html.escape(text)}</div>"
    decision = fused.decisions[min(step, total - 1)]
    colour = style.FUSED_COLOUR if decision.fused else style.KEPT_APART_COLOUR
    verdict = "fused" if decision.fused else "kept apart"
    saved = f"; saves {decision.bytes_saved:,} bytes of memory traffic" if decision.fused else ""
    groups_left = len([g for g in fused.groups_after(decision.step)])
    return (f"<div style='font-size:12.5px;font-family:{style.FONT}'>"
            f"<b>decision {decision.step + 1} of {total}</b>: <code>{html.escape(decision.producer)}</code> &rarr; "
            f"<code>{html.escape(decision.consumer)}</code>: <b style='color:{colour}'>{verdict}</b>"
            f"{html.escape(saved)}<br><span style='color:#374151'>{html.escape(decision.reason)}</span>"
            f"<br><span style='{style.NOTE_STYLE}'>{groups_left} groups after this step</span></div>")


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
        self.play = ipywidgets.Play(min=-1, max=max(last, -1), step=1, interval=900, value=start,
                                    description="play the decisions")
        self.slider = ipywidgets.IntSlider(min=-1, max=max(last, -1), value=start, description="decision",
                                           continuous_update=True, layout={"width": "420px"})
        ipywidgets.jslink((self.play, "value"), (self.slider, "value"))
        self.card = ipywidgets.HTML()
        self.text = ipywidgets.HTML()
        self.text_box = ipywidgets.Accordion(children=[self.text], titles=("program text",))
        self.text_box.selected_index = None
        rows = [self.stage_slider, ipywidgets.HBox([self.play, self.slider]), self.card, self.graph]
        if show_text:
            rows.append(self.text_box)
        super().__init__(rows, **kwargs)
        self.add_class("fusionlab-stage-stepper")
        self.set_trait("step", start)
        self.set_trait("stage", stage)
        self.stage_slider.observe(lambda change: setattr(self, "stage", change["new"]), names="value")
        self.slider.observe(lambda change: setattr(self, "step", change["new"]), names="value")
        self.observe(lambda _: self.refresh(), names=["stage", "step"])
        self.refresh()

    def stage_object(self, name: str) -> Any:
        if name not in self._stages:
            self._stages[name] = getattr(self.source, name)
        return self._stages[name]

    def refresh(self) -> None:
        if self.stage_slider.value != self.stage:
            self.stage_slider.value = self.stage
        if self.slider.value != self.step:
            self.slider.value = self.step
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
