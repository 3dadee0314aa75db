"""SourceCompare: our Triton kernel for the selected group beside Inductor's kernel over the same aten nodes.

Modes: side by side, a diff, the wrapper programs, the extern calls (what runs between kernels), and Inductor's
fusion decisions on the group's aten nodes, in our names. Inductor's kernels show from `@triton.jit` on, their
`triton_meta`/`inductor_meta` decorator folded into one line that expands. The diff pairs our kernel with the
Inductor kernel(s) over the same aten nodes (`fusionlab.inductor.correspondence.pair_for`) and aligns the lines
of each pair by what they do; where nothing pairs, it says why.
`select(name)` takes a group, a decomposed node or a captured aten node name, as a graph click gives it.

    >>> compare = SourceCompare(ex.generated, inductor=inductor_for(ex))
    >>> compare.select("exp")          # shows the kernel that computes `exp`
    >>> print(compare.diff_text())     # the same pairs as unified diffs
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets
import traitlets

from fusionlab.display import style
from fusionlab.display.links import extern_calls, find_group, kernel_of_group, wrapper_sections
from fusionlab.display.source import aligned_diff_html, kernel_function, source_panel, unified_diff
from fusionlab.inductor.correspondence import KernelPair, group_labels, pair_for
from fusionlab.inductor.records import InductorKernel, InductorView
from fusionlab.stages import Generated
from fusionlab.widgets.base import StaticFallback

__all__ = ["SourceCompare"]

_MODES = ("side by side", "diff", "wrappers", "extern calls", "Inductor decisions")


class SourceCompare(StaticFallback, ipywidgets.VBox):
    """Sources for one fusion group: `group` is its name; `mode` one of side by side, diff, wrappers, extern calls,
    Inductor decisions.

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

    def _view(self) -> InductorView | None:
        return self.inductor if isinstance(self.inductor, InductorView) else None

    def _missing(self) -> str:
        reason = self.inductor if isinstance(self.inductor, str) else "not loaded (pass inductor=...)"
        return f"Inductor's side is {reason}"

    def pair(self) -> KernelPair | None:
        """Our current group and the Inductor kernels over the same aten nodes (None without Inductor's view)."""
        view, group = self._view(), find_group(self.fused, self.group)
        if view is None or group is None:
            return None
        return pair_for(self.fused, view, group.name)

    def their_kernels(self) -> tuple[InductorKernel, ...]:
        """Inductor's kernels paired with the current group: like kinds first, then the others over its nodes."""
        view, pair = self._view(), self.pair()
        if view is None or pair is None:
            return ()
        return tuple(view.kernel(name) for name in pair.inductor + pair.others)

    def theirs(self) -> tuple[str, str, str, str]:
        """(title, full source, language, note) of Inductor's kernels covering the same aten nodes."""
        view, pair = self._view(), self.pair()
        if view is None:
            return "TorchInductor", "", "text", self._missing()
        kernels = self.their_kernels()
        if pair is None or not kernels:
            return "TorchInductor", "", "text", pair.reason if pair is not None else "no group selected"
        language = "cpp" if kernels[0].language == "cpp" else "python"
        parts = [f"# ---- {k.name} ({k.language}; aten: {', '.join(k.aten_ops)})\n{k.source.rstrip()}"
                 for k in kernels]
        names = ", ".join(k.name for k in kernels)
        return f"TorchInductor: {names}", "\n\n".join(parts) + "\n", language, self._state_note(pair)

    def _state_note(self, pair: KernelPair) -> str:
        view = self._view()
        state = "generated, not run" if view is not None and view.generated_only else "compiled and run"
        note = f"Inductor on {view.device if view else '?'} ({state}); shares the aten nodes {', '.join(pair.shared)}"
        if not pair.inductor:
            note += f". {pair.reason}"
        return note

    def _theirs_html(self) -> str:
        """Inductor's side: one panel per kernel, its decorator folded, its body first."""
        view, pair = self._view(), self.pair()
        if view is None or pair is None or not self.their_kernels():
            _, _, _, note = self.theirs()
            return source_panel("TorchInductor", "", "text", note)
        caption = (f"<div style='font-weight:600;font-size:12px;margin:2px 0'>TorchInductor: "
                   f"{html.escape(', '.join(k.name for k in self.their_kernels()))}</div>"
                   f"<div style='{style.NOTE_STYLE}'>{html.escape(self._state_note(pair))}</div>")
        panels = []
        for kernel in self.their_kernels():
            title = f"{kernel.name} ({kernel.language}; our nodes: {', '.join(kernel.node_names) or 'none'})"
            language = "cpp" if kernel.language == "cpp" else "python"
            panels.append(source_panel(title, kernel.body, language, decorator=kernel.decorator))
        return caption + "".join(panels)

    def diff_pairs(self) -> tuple[tuple[str, str, str, str], ...]:
        """(our label, our kernel, Inductor's label, its kernel body) for each Inductor kernel paired with ours."""
        view, pair = self._view(), self.pair()
        group = find_group(self.fused, self.group)
        if view is None or pair is None or group is None:
            return ()
        ours = kernel_of_group(self.generated, group.name)
        our_label, our_text = (f"fusionlab: {ours.name}", kernel_function(ours.source, ours.name)) if ours else \
            (f"fusionlab: {group.name} ({group.kind})", self._sections.get(group.name, ""))
        return tuple((our_label, our_text, f"Inductor: {view.kernel(name).name}", view.kernel(name).body)
                     for name in pair.inductor)

    def diff_text(self) -> str:
        """Each pair as a unified diff (difflib, three lines of context), or why there is none."""
        pairs = self.diff_pairs()
        if not pairs:
            pair = self.pair()
            return f"# no diff: {pair.reason if pair is not None else self._missing()}\n"
        return "\n".join(unified_diff(ours, theirs, left, right) for left, ours, right, theirs in pairs)

    def _diff_html(self) -> str:
        pairs = self.diff_pairs()
        if not pairs:
            pair = self.pair()
            why = pair.reason if pair is not None else self._missing()
            return f"<div style='{style.NOTE_STYLE}'>{html.escape('No pair to diff: ' + why)}</div>"
        pair = self.pair()
        shared = ", ".join(pair.shared) if pair is not None else ""
        head = f"<div style='{style.NOTE_STYLE}'>paired by the aten nodes both cover: {html.escape(shared)}</div>"
        return head + "".join(aligned_diff_html(ours, theirs, left, right) for left, ours, right, theirs in pairs)

    def _decisions_html(self) -> str:
        view, group = self._view(), find_group(self.fused, self.group)
        if view is None or group is None:
            return f"<div style='{style.NOTE_STYLE}'>{html.escape(self._missing())}</div>"
        labels = group_labels(self.fused)
        origins = set(group.origins)
        lines = [view.describe(d, labels) for d in view.decisions
                 if origins & set(view.our_nodes_of(d.node1, d.graph)[0] + view.our_nodes_of(d.node2, d.graph)[0])]
        if not lines:
            lines = [f"Inductor made no decision on the aten nodes {', '.join(group.origins)}"
                     + ("" if view.operations else " (this torch records no scheduler operations)")]
        items = "".join(f"<li>{html.escape(line)}</li>" for line in lines)
        return (f"<div style='font-size:12px'><b>Inductor's fusion decisions on {html.escape(group.name)}'s aten "
                f"nodes</b>, in our names (Inductor's own opN in brackets)<ul>{items}</ul></div>")

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
        if self.mode == "side by side":
            self.left.value = source_panel(title, source, language)
            self.right.value = self._theirs_html()
            self.body.children = (self.left, self.right)
        elif self.mode == "diff":
            self.single.value = self._diff_html()
            self.left.value = source_panel(title, source, language)
            self.body.children = (self.single,)
        elif self.mode == "Inductor decisions":
            self.single.value = self._decisions_html()
            self.body.children = (self.single,)
        elif self.mode == "wrappers":
            self.left.value = source_panel("fusionlab's wrapper (allocates, launches, calls externs)",
                                           self.generated.wrapper)
            wrapper = getattr(self.inductor, "wrapper_source", "") if self.inductor is not None else ""
            self.right.value = source_panel("TorchInductor's wrapper module", wrapper or "", "python",
                                            "" if wrapper else self._missing())
            self.body.children = (self.left, self.right)
        else:
            ours = "\n".join(extern_calls(self.generated)) or "# no extern calls: every op runs in a kernel"
            theirs = [k for k in getattr(self.inductor, "kernels", ()) if k.language == "extern"]
            other = "\n".join(f"{k.source}  # {k.name}: aten {', '.join(k.aten_ops)}" for k in theirs) or \
                "# no extern calls"
            view = self._view()
            self.left.value = source_panel("fusionlab's extern calls", ours)
            self.right.value = source_panel("TorchInductor's extern calls", other if view is not None else "",
                                            "python", "" if view is not None else self._missing())
            self.body.children = (self.left, self.right)

    def static_html(self) -> str:
        title, source, language = self.ours()
        return (f"<div>{self.group_summary()}<div style='display:flex;gap:8px'>"
                f"<div style='flex:1;min-width:0'>{source_panel(title, source, language)}</div>"
                f"<div style='flex:1;min-width:0'>{self._theirs_html()}</div></div></div>")

    def __repr__(self) -> str:
        return f"SourceCompare(group={self.group!r}, mode={self.mode!r})"

