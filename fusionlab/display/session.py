"""Results the views share, computed once per exploration: Inductor's view of the same function.

On a CPU the views ask Inductor for Triton source (generated, not run), so that our Triton kernel sits beside
Inductor's Triton kernel rather than its C++; on CUDA Inductor compiles and runs as usual.

    >>> view = inductor_for(ex)          # cached: a second call returns the same object
"""

from __future__ import annotations

import warnings
import weakref
from typing import Any

from fusionlab.inductor.records import InductorView

__all__ = ["inductor_for", "load_inductor"]

_VIEWS: weakref.WeakKeyDictionary[Any, dict[str, InductorView]] = weakref.WeakKeyDictionary()


def inductor_for(exploration: Any, cpu_backend: str = "triton") -> InductorView:
    """Inductor's kernels and decisions for `exploration`'s function (Triton source on a CPU by default)."""
    cached = _VIEWS.setdefault(exploration, {})
    if cpu_backend not in cached:
        with warnings.catch_warnings():
            # Triton source on a CPU is generated, never run (the views say so): Inductor's warning that the
            # kernels will not be executable, printed in red under the cell, is about a choice we made.
            warnings.filterwarnings("ignore", message="Could not find an active CPU backend")
            cached[cpu_backend] = exploration.inductor(cpu_backend="triton" if cpu_backend == "triton" else "cpp")
    return cached[cpu_backend]


def load_inductor(exploration: Any, inductor: Any) -> Any:
    """`inductor`: True (compute it; a CPU gets Triton source, generated not run), False/None, or a view.

    A failure becomes a string saying why, which the views show instead of Inductor's side.
    """
    if inductor is True:
        try:
            return inductor_for(exploration)
        except Exception as error:  # everything else works without Inductor
            return f"unavailable: {type(error).__name__}: {error}"
    if inductor is False:
        return None
    return inductor
