"""Colours and small inline styles shared by the graph, the tables and the report.

Everything is inline (no stylesheet to load), so an output saved in a notebook reads the same on GitHub.

    >>> group_colour(0)
    GroupColour(fill='#dbeafe', border='#1d4ed8')
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GroupColour:
    fill: str
    border: str


# Light fills with a darker border of the same hue: readable text on top, distinct side by side.
_PALETTE: tuple[GroupColour, ...] = (
    GroupColour("#dbeafe", "#1d4ed8"),  # blue
    GroupColour("#dcfce7", "#15803d"),  # green
    GroupColour("#fef3c7", "#b45309"),  # amber
    GroupColour("#fce7f3", "#be185d"),  # pink
    GroupColour("#ede9fe", "#6d28d9"),  # violet
    GroupColour("#ccfbf1", "#0f766e"),  # teal
    GroupColour("#ffedd5", "#c2410c"),  # orange
    GroupColour("#e0e7ff", "#4338ca"),  # indigo
    GroupColour("#f7fee7", "#4d7c0f"),  # lime
    GroupColour("#fee2e2", "#b91c1c"),  # red
    GroupColour("#cffafe", "#0e7490"),  # cyan
    GroupColour("#fae8ff", "#a21caf"),  # fuchsia
)

EXTERN_FILL = "#e5e7eb"
EXTERN_BORDER = "#374151"
INPUT_FILL = "#ffffff"
VIEW_BORDER = "#9ca3af"
FUSED_COLOUR = "#16a34a"
KEPT_APART_COLOUR = "#dc2626"
SELECTED_COLOUR = "#f59e0b"

FONT = "Helvetica,Arial,sans-serif"
TABLE_STYLE = "border-collapse:collapse;font-size:12px;font-family:" + FONT
CELL_STYLE = "border:1px solid #d1d5db;padding:2px 6px;text-align:left;vertical-align:top"
HEADER_STYLE = CELL_STYLE + ";background:#f3f4f6;font-weight:600"
HIGHLIGHT_STYLE = ";background:#fef9c3"
NOTE_STYLE = "font-size:12px;color:#4b5563;font-family:" + FONT
WARNING_STYLE = ("border:1px solid #f59e0b;background:#fffbeb;padding:6px 10px;font-size:12px;"
                 "font-family:" + FONT)


def group_colour(index: int) -> GroupColour:
    """The colour of the fusion group at position `index` (the palette repeats after twelve)."""
    return _PALETTE[index % len(_PALETTE)]
