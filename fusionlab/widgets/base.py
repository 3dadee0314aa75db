"""What every fusionlab widget shares: its front-end files, and a static fallback for saved notebooks.

A widget's output carries its live view *and* static HTML (`static_html()`), so a saved notebook still shows
the graph, the tables and the sources on GitHub or nbviewer, where no kernel runs.

    >>> esm = frontend_source("graph_view.js")     # from the installed wheel, else from the repository
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

__all__ = ["StaticFallback", "frontend_path", "frontend_source"]

_PACKAGE = Path(__file__).resolve().parent.parent


def frontend_path(name: str) -> Path:
    """The front-end file `name`: `fusionlab/_widgets_frontend/` in a wheel, `widgets/` in a checkout."""
    for folder in (_PACKAGE / "_widgets_frontend", _PACKAGE.parent / "widgets"):
        candidate = folder / name
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"fusionlab's widget front end {name!r} is missing: looked in "
                            f"{_PACKAGE / '_widgets_frontend'} and {_PACKAGE.parent / 'widgets'}; "
                            "reinstall fusionlab (pip install 'fusionlab[notebook]')")


def frontend_source(name: str) -> str:
    return frontend_path(name).read_text(encoding="utf-8")


class StaticFallback:
    """Mixin: adds `text/html` (and `image/png` where a widget has one) beside the live widget view."""

    def static_html(self) -> str:  # pragma: no cover - every widget overrides it
        raise NotImplementedError

    def static_png(self) -> bytes | None:
        return None

    def _repr_html_(self) -> str:
        return self.static_html()

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        bundle = super()._repr_mimebundle_(**kwargs)  # type: ignore[misc]
        data, metadata = bundle if isinstance(bundle, tuple) else (bundle, {})
        data = dict(data or {})
        data["text/html"] = self.static_html()
        png = self.static_png()
        if png is not None:
            data["image/png"] = base64.b64encode(png).decode("ascii")
        return data, metadata
