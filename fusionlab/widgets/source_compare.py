"""SourceCompare: our Triton kernel for the selected group beside Inductor's kernel over the same aten nodes.

Modes: side by side, a diff, the wrapper programs, and the extern calls (what runs between kernels).
`select(name)` takes a group, a decomposed node or a captured aten node name, as a graph click gives it.

    >>> compare = SourceCompare(ex.generated, inductor=inductor_for(ex))
    >>> compare.select("exp")          # shows the kernel that computes `exp`
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets
import traitlets

from fusionlab.display import style
from fusionlab.display.links import (
    extern_calls,
    find_group,
    inductor_kernels_of,
    kernel_body,
    kernel_of_group,
    wrapper_sections,
)
from fusionlab.display.source import diff_html, source_panel
from fusionlab.stages import Generated
from fusionlab.widgets.base import StaticFallback

__all__ = ["SourceCompare"]

_MODES = ("side by side", "diff", "wrappers", "extern calls")


class SourceCompare(StaticFallback, ipywidgets.VBox):
    """Sources for one fusion group: `group` is its name; `mode` one of side by side, diff, wrappers, extern calls.

    `inductor` is an `InductorView` (or None: our side only, or a string saying why Inductor is missing).
    """

    group = traitlets.Unicode("")
    mode = traitlets.Unicode(_MODES[0])

    def __init__(self, generated: Generated, inductor: Any = None, group: str = "", **kwargs: Any) -> None:
        self.generated = generated
        self.fused = generated.previous
        self.inductor = inductor
        self._sections = wrapper_sections(generated)
        self.header = ipywidgets.HTML()
        self.modes = ipywidgets.ToggleButtons(options=list(_MODES), value=_MODES[0],
                                              style={"button_width": "auto"})
        # Kernels and extern calls only: a model's view-only groups (no kernel of their own) would bury them.
        # A view chosen in the graph still shows here; the picker then stays blank.
        self.picker = ipywidgets.Dropdown(options=[g.name for g in self.fused.groups if g.kind != "view"],
                                          description="group", layout={"width": "auto"}, tooltip="kernels and "
                                          "extern calls; click a view (dashed) in the graph to see its code")
        self.left = ipywidgets.HTML(layout={"width": "50%"})
        self.right = ipywidgets.HTML(layout={"width": "50%"})
        self.single = ipywidgets.HTML(layout={"width": "100%"})
        self.body = ipywidgets.HBox([self.left, self.right], layout={"width": "100%"})
        super().__init__([ipywidgets.HBox([self.picker, self.modes]), self.header, self.body], **kwargs)
        self.add_class("fusionlab-source-compare")
        first = group or next((g.name for g in self.fused.groups if g.is_kernel), self.fused.groups[0].name
                              if self.fused.groups else "")
        self.modes.observe(lambda change: setattr(self, "mode", change["new"]), names="value")
        self.picker.observe(lambda change: change["new"] is None or self.select(change["new"]), names="value")
        self.observe(lambda _: self.refresh(), names=["group", "mode"])
        self.select(first)
        self.refresh()

    # -- selection ------------------------------------------------------------------------------------
    def select(self, name: str | None) -> bool:
        """Show the group holding `name` (group, node or aten node); False when nothing holds it (an input)."""
        group = find_group(self.fused, name)
        if group is None:
            return False
        self.group = group.name
        shown = group.name if group.name in self.picker.options else None
        if self.picker.value != shown:
            self.picker.value = shown
        return True

    # -- content --------------------------------------------------------------------------------------
    def ours(self) -> tuple[str, str, str]:
        """(title, source, language) of our side for the current group."""
        group = find_group(self.fused, self.group)
        if group is None:
            return "fusionlab", "", "text"
        kernel = kernel_of_group(self.generated, group.name)
        if kernel is not None:
            return f"fusionlab: {kernel.name} (Triton)", kernel.source, "python"
        section = self._sections.get(group.name, "")
        what = "extern call: runs in eager PyTorch / cuBLAS" if group.kind == "extern" else "view between kernels"
        return f"fusionlab: {group.name} ({what})", section, "python"

    def theirs(self) -> tuple[str, str, str, str]:
        """(title, source, language, note) of Inductor's kernels covering the same aten nodes."""
        if self.inductor is None or isinstance(self.inductor, str):
            reason = self.inductor if isinstance(self.inductor, str) else "not loaded (pass inductor=...)"
            return "TorchInductor", "", "text", f"Inductor's side is {reason}"
        group = find_group(self.fused, self.group)
        kernels = inductor_kernels_of(group, self.inductor) if group is not None else ()
        if not kernels:
            nodes = ", ".join(group.origins) if group is not None else ""
            return ("TorchInductor", "", "text", f"no Inductor kernel lists the aten nodes {nodes}: "
                    "Inductor may have turned them into views or folded them elsewhere")
        language = "cpp" if kernels[0].language == "cpp" else "python"
        parts = [f"# ---- {k.name} ({k.language}; aten: {', '.join(k.aten_ops)})\n"
                 f"{kernel_body(k.source) if k.language == 'triton' else k.source.rstrip()}" for k in kernels]
        state = "generated, not run" if getattr(self.inductor, "generated_only", False) else "compiled and run"
        names = ", ".join(k.name for k in kernels)
        return f"TorchInductor: {names}", "\n\n".join(parts) + "\n", language, f"Inductor on " \
            f"{self.inductor.device} ({state})"

    def group_summary(self) -> str:
        group = find_group(self.fused, self.group)
        if group is None:
            return ""
        graph = self.fused.previous.graph
        computing = sum(graph[n].kind not in ("view", "input") for n in group.nodes)  # views are index arithmetic
        text = (f"{group.name}: {group.kind}, {computing} primitives from aten nodes "
                f"{', '.join(group.origins)}; reads {group.bytes_read:,} B, writes {group.bytes_written:,} B")
        return f"<div style='{style.NOTE_STYLE}'>{html.escape(text)}</div>"

    def refresh(self) -> None:
        self.header.value = self.group_summary()
        if self.modes.value != self.mode:
            self.modes.value = self.mode
        title, source, language = self.ours()
        other_title, other_source, other_language, note = self.theirs()
        if self.mode == "side by side":
            self.left.value = source_panel(title, source, language)
            self.right.value = source_panel(other_title, other_source, other_language, note)
            self.body.children = (self.left, self.right)
        elif self.mode == "diff":
            self.single.value = diff_html(source, other_source, title, other_title) if other_source else \
                f"<div style='{style.NOTE_STYLE}'>{html.escape(note)}</div>"
            self.left.value = source_panel(title, source, language)
            self.body.children = (self.single,)
        elif self.mode == "wrappers":
            self.left.value = source_panel("fusionlab's wrapper (allocates, launches, calls externs)",
                                           self.generated.wrapper)
            wrapper = getattr(self.inductor, "wrapper_source", "") if self.inductor is not None else ""
            self.right.value = source_panel("TorchInductor's wrapper module", wrapper or "", "python",
                                            "" if wrapper else note)
            self.body.children = (self.left, self.right)
        else:
            ours = "\n".join(extern_calls(self.generated)) or "# no extern calls: every op runs in a kernel"
            theirs = [k for k in getattr(self.inductor, "kernels", ()) if k.language == "extern"]
            other = "\n".join(f"{k.source}  # {k.name}: aten {', '.join(k.aten_ops)}" for k in theirs) or \
                "# no extern calls"
            self.left.value = source_panel("fusionlab's extern calls", ours)
            self.right.value = source_panel("TorchInductor's extern calls", other if self.inductor is not None
                                            and not isinstance(self.inductor, str) else "", "python", note)
            self.body.children = (self.left, self.right)

    def static_html(self) -> str:
        title, source, language = self.ours()
        other_title, other_source, other_language, note = self.theirs()
        return (f"<div>{self.group_summary()}<div style='display:flex;gap:8px'>"
                f"<div style='flex:1;min-width:0'>{source_panel(title, source, language)}</div>"
                f"<div style='flex:1;min-width:0'>{source_panel(other_title, other_source, other_language, note)}"
                "</div></div></div>")

    def __repr__(self) -> str:
        return f"SourceCompare(group={self.group!r}, mode={self.mode!r})"

