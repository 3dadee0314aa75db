"""Source code as HTML: pygments highlighting with inline styles, and side-by-side diffs with difflib.

Inline styles (no stylesheet) keep the colours in a saved notebook, in an `ipywidgets.HTML` and in the report.

    >>> html = highlight_html(ex.generated.kernels[0].source)
    >>> html = diff_html(ours, theirs, "fusionlab", "Inductor")
"""

from __future__ import annotations

import difflib
import html
import re

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import CppLexer, PythonLexer, TextLexer

from fusionlab.display import style

__all__ = ["diff_html", "highlight_html", "source_panel"]

_LEXERS = {"python": PythonLexer, "triton": PythonLexer, "cpp": CppLexer, "extern": PythonLexer, "text": TextLexer}
_BOX = ("margin:0;font-size:11.5px;line-height:1.35;overflow:auto;border:1px solid #e5e7eb;border-radius:4px;"
        "padding:6px;background:#f8f8f8")


def highlight_html(source: str, language: str = "python", max_height: str = "420px") -> str:
    """`source` coloured by pygments (every character escaped), in a scrolling box."""
    lexer = _LEXERS.get(language, TextLexer)()
    formatter = HtmlFormatter(noclasses=True, nowrap=True, style="default")
    body = highlight(source, lexer, formatter)
    return f"<pre class='fusionlab-source' style='{_BOX};max-height:{max_height}'>{body}</pre>"


def source_panel(title: str, source: str, language: str = "python", note: str = "",
                 max_height: str = "420px") -> str:
    """A titled, highlighted source box; `title` and `note` are escaped."""
    caption = f"<div style='font-weight:600;font-size:12px;margin:2px 0'>{html.escape(title)}</div>"
    extra = f"<div style='{style.NOTE_STYLE}'>{html.escape(note)}</div>" if note else ""
    return f"<div class='fusionlab-panel'>{caption}{extra}{highlight_html(source, language, max_height)}</div>"


_DIFF_STYLES = {
    "diff_header": "background:#f3f4f6;color:#6b7280;padding:0 4px;text-align:right",
    "diff_next": "background:#f3f4f6",
    "diff_add": "background:#dcfce7",
    "diff_chg": "background:#fef9c3",
    "diff_sub": "background:#fee2e2",
}


def diff_html(left: str, right: str, left_label: str, right_label: str, context: bool = False,
              wrap: int = 70, max_height: str = "520px") -> str:
    """Two sources side by side, changed lines marked (difflib), labels escaped, styles inline."""
    differ = difflib.HtmlDiff(tabsize=4, wrapcolumn=wrap)
    table = differ.make_table(left.splitlines(), right.splitlines(), html.escape(left_label),
                              html.escape(right_label), context=context, numlines=3)
    for name, css in _DIFF_STYLES.items():
        table = table.replace(f'class="{name}"', f'style="{css}"')
    table = re.sub(r'<table class="diff"[^>]*>',
                   "<table style='font-family:monospace;font-size:11px;border-collapse:collapse'>", table)
    table = table.replace("<td nowrap=\"nowrap\">", "<td style='white-space:pre;padding:0 4px'>")
    table = re.sub(r'<a href="#difflib_[^"]*">([^<]*)</a>', r"\1", table)  # in-page jumps: not in a notebook
    legend = (f"<div style='{style.NOTE_STYLE}'><span style='{_DIFF_STYLES['diff_add']}'>&nbsp;added&nbsp;</span> "
              f"<span style='{_DIFF_STYLES['diff_chg']}'>&nbsp;changed&nbsp;</span> "
              f"<span style='{_DIFF_STYLES['diff_sub']}'>&nbsp;removed&nbsp;</span></div>")
    return (f"<div class='fusionlab-diff'>{legend}<div style='max-height:{max_height};overflow:auto;"
            f"border:1px solid #e5e7eb'>{table}</div></div>")
