"""Source code as HTML: pygments highlighting with inline styles, folded decorators, and diffs with difflib.

Inline styles (no stylesheet) keep the colours in a saved notebook, in an `ipywidgets.HTML` and in the report.
An Inductor kernel opens with ~15 lines of `triton_meta`/`inductor_meta`: `source_panel(..., decorator=...)` folds
them into one line that expands (<details>). `aligned_diff_html` puts lines of the same role side by side (a
load beside a load, a store beside a store), since two compilers' kernels rarely share a line of text.

    >>> html = highlight_html(ex.generated.kernels[0].source)
    >>> html = diff_html(ours, theirs, "fusionlab", "Inductor")
    >>> html = aligned_diff_html(our_kernel, inductor_kernel.body, "fusionlab", "Inductor")
"""

from __future__ import annotations

import difflib
import html
import re

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import CppLexer, PythonLexer, TextLexer

from fusionlab.display import style

__all__ = ["aligned_diff_html", "diff_html", "fold_html", "highlight_html", "kernel_function", "line_role",
           "source_panel", "unified_diff"]

_LEXERS = {"python": PythonLexer, "triton": PythonLexer, "cpp": CppLexer, "extern": PythonLexer, "text": TextLexer}
_BOX = ("margin:0;font-size:11.5px;line-height:1.35;overflow:auto;border:1px solid #e5e7eb;border-radius:4px;"
        "padding:6px;background:#f8f8f8")


def highlight_html(source: str, language: str = "python", max_height: str = "420px") -> str:
    """`source` coloured by pygments (every character escaped), in a scrolling box."""
    lexer = _LEXERS.get(language, TextLexer)()
    formatter = HtmlFormatter(noclasses=True, nowrap=True, style="default")
    body = highlight(source, lexer, formatter)
    return f"<pre class='fusionlab-source' style='{_BOX};max-height:{max_height}'>{body}</pre>"


def fold_html(decorator: str, language: str = "python", what: str = "decorator") -> str:
    """One line, "decorator: 15 lines (show)", that expands into the highlighted `decorator` (static <details>)."""
    if not decorator.strip():
        return ""
    count = len(decorator.rstrip("\n").splitlines())
    return (f"<details class='fusionlab-fold' style='{style.NOTE_STYLE};margin:2px 0'><summary style='cursor:pointer'>"
            f"{html.escape(what)}: {count} line{'s' if count != 1 else ''} (show)</summary>"
            f"{highlight_html(decorator, language, '260px')}</details>")


def source_panel(title: str, source: str, language: str = "python", note: str = "",
                 max_height: str = "420px", decorator: str = "") -> str:
    """A titled, highlighted source box; `title` and `note` are escaped. A `decorator` block (Inductor's
    `@triton_heuristics...`) is folded into one line above the source, which then starts at `@triton.jit`."""
    caption = f"<div style='font-weight:600;font-size:12px;margin:2px 0'>{html.escape(title)}</div>"
    extra = f"<div style='{style.NOTE_STYLE}'>{html.escape(note)}</div>" if note else ""
    return (f"<div class='fusionlab-panel'>{caption}{extra}{fold_html(decorator, language)}"
            f"{highlight_html(source, language, max_height)}</div>")


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


# ---- aligned diffs: lines of the same role side by side ---------------------------------------------------

_ROLES: tuple[tuple[str, re.Pattern[str]], ...] = tuple((role, re.compile(pattern)) for role, pattern in (
    ("signature", r"^\s*(@triton\.jit|def )"),
    ("comment", r"^\s*#"),
    ("loop", r"^\s*(for |while )"),
    ("store", r"tl\.store\(|tl\.atomic_"),
    ("load", r"tl\.load\("),
    ("reduction", r"tl\.(sum|max|min|reduce|argmax|argmin|cumsum|cumprod|xor_sum)\(|triton_helpers\.\w*(max|min|"
                  r"welford|reduce|sum)\w*\(|\b_?\w*(reduce|combine)\w*\("),
    ("index", r"program_id|tl\.arange|numel\b|offset|index|mask|BLOCK|\bEVEN_"),
    ("return", r"^\s*return\b"),
))
_ALIGN_STYLES = {
    "same": "",
    "role": "background:#fef9c3",
    "left": "background:#fee2e2",
    "right": "background:#dcfce7",
}


def line_role(line: str) -> str:
    """What a kernel line does: signature, comment, loop, store, load, reduction, index, return, or compute."""
    for role, pattern in _ROLES:
        if pattern.search(line):
            return role
    return "compute"


def kernel_function(source: str, name: str) -> str:
    """The function `name` of a kernel module, with the decorators right above it (a module's helpers, such as
    our `_erf` and combine functions, left out); the whole source when there is no `def name(`."""
    lines = source.splitlines()
    start = next((i for i, line in enumerate(lines) if re.match(rf"def {re.escape(name)}\(", line)), None)
    if start is None:
        return source
    first = start
    while first > 0 and (lines[first - 1].startswith(("@", ")")) or lines[first - 1][:1].isspace()):
        first -= 1
    end = next((i for i in range(start + 1, len(lines)) if lines[i].strip() and not lines[i][:1].isspace()),
               len(lines))
    return "\n".join(lines[first:end]).rstrip() + "\n"


def _aligned_rows(left: str, right: str) -> list[tuple[int | None, str, int | None, str, str]]:
    """(left number, left line, right number, right line, status) rows; blank lines left out."""
    a: list[tuple[int | None, str]] = [(n, line) for n, line in enumerate(left.splitlines(), 1) if line.strip()]
    b: list[tuple[int | None, str]] = [(n, line) for n, line in enumerate(right.splitlines(), 1) if line.strip()]
    matcher = difflib.SequenceMatcher(None, [line_role(x) for _, x in a], [line_role(y) for _, y in b],
                                      autojunk=False)
    rows: list[tuple[int | None, str, int | None, str, str]] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            for (n, x), (m, y) in zip(a[i1:i2], b[j1:j2], strict=True):
                rows.append((n, x, m, y, "same" if x.strip() == y.strip() else "role"))
            continue
        for k in range(max(i2 - i1, j2 - j1)):  # roles differ: each side on its own, in the same rows
            n, x = a[i1 + k] if i1 + k < i2 else (None, "")
            m, y = b[j1 + k] if j1 + k < j2 else (None, "")
            rows.append((n, x, m, y, "left" if m is None else "right" if n is None else "differ"))
    return rows


def aligned_diff_html(left: str, right: str, left_label: str, right_label: str, max_height: str = "520px") -> str:
    """Two kernels side by side, aligned by what each line does (difflib over line roles): a load beside a load,
    a store beside a store; identical lines plain, same role shaded yellow, lines with no counterpart red (left)
    or green (right). Labels and code are escaped."""
    cell = "white-space:pre;padding:0 4px;vertical-align:top"
    number = "color:#9ca3af;text-align:right;padding:0 4px;user-select:none"
    body = []
    for n, x, m, y, status in _aligned_rows(left, right):
        left_style = _ALIGN_STYLES["left"] if status in ("left", "differ") else _ALIGN_STYLES.get(status, "")
        right_style = _ALIGN_STYLES["right"] if status in ("right", "differ") else _ALIGN_STYLES.get(status, "")
        body.append(f"<tr data-status='{status}'><td style='{number}'>{n or ''}</td>"
                    f"<td style='{cell};{left_style}'>{html.escape(x)}</td><td style='{number}'>{m or ''}</td>"
                    f"<td style='{cell};{right_style}'>{html.escape(y)}</td></tr>")
    head = (f"<tr><th></th><th style='text-align:left'>{html.escape(left_label)}</th><th></th>"
            f"<th style='text-align:left'>{html.escape(right_label)}</th></tr>")
    legend = (f"<div style='{style.NOTE_STYLE}'>aligned by what each line does: "
              f"<span style='{_ALIGN_STYLES['role']}'>&nbsp;same role&nbsp;</span> "
              f"<span style='{_ALIGN_STYLES['left']}'>&nbsp;only {html.escape(left_label)}&nbsp;</span> "
              f"<span style='{_ALIGN_STYLES['right']}'>&nbsp;only {html.escape(right_label)}&nbsp;</span> "
              "(identical lines plain)</div>")
    return (f"<div class='fusionlab-diff'>{legend}<div style='max-height:{max_height};overflow:auto;"
            "border:1px solid #e5e7eb'><table style='font-family:monospace;font-size:11px;border-collapse:collapse;"
            f"width:100%'>{head}{''.join(body)}</table></div></div>")


def unified_diff(left: str, right: str, left_label: str, right_label: str, context: int = 3) -> str:
    """A unified diff (difflib) of two sources, `context` lines around each change: the text form of a diff."""
    return "".join(difflib.unified_diff(left.splitlines(True), right.splitlines(True), left_label, right_label,
                                        n=context))
