"""`fusionlab profile MODULE:FUNCTION`: find the model a shell names, profile it, write the page and the trace.

FUNCTION takes no arguments and returns `(model, inputs)`: `inputs` a tuple or list (positional) or a dict
(keywords), as `fusionlab.models.build` returns them. MODULE is imported as `fusionlab report` imports it (the
current folder first on the path).

    $ fusionlab profile mypackage.models:tiny_gpt2 --out gpt2.html --trace gpt2.json
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import torch

__all__ = ["load_model", "main"]


def load_model(target: str) -> tuple[torch.nn.Module, tuple[Any, ...], dict[str, Any]]:
    """`MODULE:FUNCTION` -> (model, positional inputs, keyword inputs)."""
    module_name, colon, attribute = target.partition(":")
    if not colon or not module_name or not attribute:
        raise ValueError(f"{target!r} is not MODULE:FUNCTION: name a function of no arguments that returns "
                         "(model, inputs), for example mypackage.models:tiny_gpt2")
    sys.path.insert(0, str(Path.cwd()))
    try:
        value: Any = importlib.import_module(module_name)
    finally:
        sys.path.pop(0)
    for part in attribute.split("."):
        if not hasattr(value, part):
            raise ValueError(f"module {module_name!r} has no attribute {attribute!r}")
        value = getattr(value, part)
    made = value() if callable(value) and not isinstance(value, torch.nn.Module) else value
    if not (isinstance(made, (tuple, list)) and len(made) == 2 and isinstance(made[0], torch.nn.Module)):
        raise ValueError(f"{target} returned {type(made).__name__}: it must return (model, inputs), an nn.Module "
                         "and its inputs as a tuple (positional) or a dict (keywords)")
    model, inputs = made
    if isinstance(inputs, dict):
        return model, (), dict(inputs)
    if isinstance(inputs, (tuple, list)):
        return model, tuple(inputs), {}
    return model, (inputs,), {}


def main(target: str, *, out: str | None = "profile.html", trace: str | None = None, train: bool = False,
         rounds: int = 5, inductor: bool = True) -> int:
    """Profile the model `target` names; print the summary; write the page (`out`) and the trace (`trace`)."""
    from fusionlab.profile.run import profile

    try:
        model, args, kwargs = load_model(target)
    except (ValueError, ImportError) as error:
        print(f"fusionlab profile: {error}", file=sys.stderr)
        return 2
    result = profile(model, *args, train=train, rounds=rounds, inductor=inductor, **kwargs)
    print(result.as_text())
    if out:
        print(f"wrote {result.to_html(out)}")
    if trace:
        print(f"wrote {result.trace(trace)} (open it in ui.perfetto.dev or chrome://tracing)")
    return 0
