"""Where each captured op came from: the module that called it and the user's source line.

Dynamo's graphs carry both in `node.meta` (`nn_module_stack`, `stack_trace`). A plain capture makes its own: while
fusionlab traces, `ProvenanceMode` (a torch-function mode) sees every torch call the user's code makes, finds the
innermost module method on the Python stack and the nearest frame outside torch, and writes them into the
`fx.traceback` meta that `preserve_node_meta` copies onto every node the call records, in Dynamo's format.
So one reader, `provenance(meta)`, serves both entry points.

    >>> provenance({"nn_module_stack": {"k": ("L['self'].h[0].attn", "Attention")}})
    ('h.0.attn', '')
"""

from __future__ import annotations

import functools
import os
import re
import sys
import sysconfig
import types
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.fx.traceback as fx_traceback
from torch.overrides import TorchFunctionMode

_TORCH = os.path.dirname(os.path.realpath(torch.__file__)) + os.sep
_FUNCTORCH = os.path.join(os.path.dirname(_TORCH.rstrip(os.sep)), "functorch") + os.sep
_CAPTURE = os.path.dirname(os.path.realpath(__file__)) + os.sep  # fusionlab/capture: the tracer's own frames
_STDLIB = tuple({os.path.realpath(sysconfig.get_paths()[key]) + os.sep for key in ("stdlib", "platstdlib")})
_PACKAGES = ("site-packages", "dist-packages")  # installed libraries (transformers) live inside the stdlib folder
_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>[^\n]+)')


@functools.lru_cache(maxsize=4096)
def is_internal(filename: str) -> bool:
    """A frame of torch, functorch, fusionlab's tracer or the standard library: never the user's line."""
    if filename.startswith("<"):  # generated code (fx's "<eval_with_key>", "<frozen ...>"); a notebook cell is user's
        return not filename.startswith("<ipython-input")
    path = os.path.realpath(filename)
    if path.startswith((_TORCH, _FUNCTORCH, _CAPTURE)):
        return True
    return path.startswith(_STDLIB) and not any(f"{os.sep}{folder}{os.sep}" in path for folder in _PACKAGES)


def short_path(filename: str) -> str:
    """The path a reader knows the file by: the part under site-packages, else the basename."""
    path = filename.replace("\\", "/")
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in path:
            return path.rsplit(marker, 1)[1]
    return path.rsplit("/", 1)[-1]


def source_text(filename: str, line: int, function: str) -> str:
    """`("/x/modeling_gpt2.py", 12, "forward")` -> "modeling_gpt2.py:12 in forward"."""
    return f"{short_path(filename)}:{line} in {function}"


def module_path(dynamo_path: str) -> str:
    """Dynamo's module path from the compiled function's locals -> a dotted path from the model root:
    "L['self'].transformer.h[0]._modules['attn']" -> "transformer.h.0.attn"; a global module keeps its name."""
    path = dynamo_path.strip()
    root = re.match(r"^(?P<scope>[LG])\[['\"](?P<name>[^'\"]+)['\"]\]", path)
    prefix = ""
    if root is not None:
        prefix = root["name"] if root["scope"] == "G" else ""
        path = path[root.end():]
    path = re.sub(r"\._modules\[['\"]([^'\"]+)['\"]\]", r".\1", path)
    path = re.sub(r"\[['\"]?([^'\"\]]+)['\"]?\]", r".\1", path)
    path = ".".join(part for part in [prefix, *path.split(".")] if part)
    return path


def provenance(meta: Mapping[str, Any]) -> tuple[str, str]:
    """(module path, source line) from an fx node's meta: the innermost entry of `nn_module_stack` and the frame of
    `stack_trace` nearest the op that is not torch's own; "" for what is missing."""
    module = ""
    stack = meta.get("nn_module_stack") or {}
    if stack:
        entry = list(stack.values())[-1]
        module = module_path(entry[0] if isinstance(entry, tuple) else str(entry))
    source = ""
    for match in reversed(list(_FRAME.finditer(meta.get("stack_trace") or ""))):
        if not is_internal(match["file"]):
            source = source_text(match["file"], int(match["line"]), match["function"].strip())
            break
    return module, source


class ProvenanceMode(TorchFunctionMode):
    """Stamps each torch call made inside `boundary` (the traced function's code) with the module whose method is
    innermost on the stack (`paths`: id(module) -> dotted path) and the nearest frame outside torch."""

    def __init__(self, paths: Mapping[int, str], boundary: types.CodeType) -> None:
        super().__init__()
        self.paths = paths
        self.boundary = boundary
        self.module = ""  # the module of the latest call: a failed trace says where it stopped

    def __torch_function__(self, func: Callable[..., Any], types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        meta = fx_traceback.get_current_meta()
        saved: dict[str, Any] = {key: meta[key] for key in ("nn_module_stack", "stack_trace") if key in meta}
        module, frame = self._where()
        if module is not None:
            meta["nn_module_stack"] = {module: (module, "")}
        if module is not None or frame is not None:  # a call inside the traced function (not the tracer's own)
            self.module = module or ""
        if frame is not None:
            meta["stack_trace"] = (f'  File "{frame.f_code.co_filename}", line {frame.f_lineno}, '
                                   f"in {frame.f_code.co_name}\n")
        try:
            return func(*args, **(kwargs or {}))
        finally:
            for key in ("nn_module_stack", "stack_trace"):
                meta.pop(key, None)
            meta.update(saved)

    def _where(self) -> tuple[str | None, types.FrameType | None]:
        module: str | None = None
        source: types.FrameType | None = None
        frame: types.FrameType | None = sys._getframe(2)
        while frame is not None and frame.f_code is not self.boundary:
            code = frame.f_code
            if module is None and code.co_argcount and code.co_varnames[0] == "self":
                owner = frame.f_locals.get("self")
                if owner is not None and id(owner) in self.paths:
                    module = self.paths[id(owner)]
            if source is None and not is_internal(code.co_filename):
                source = frame
            if module is not None and source is not None:
                break
            frame = frame.f_back
        if frame is None:  # not inside the traced function (a call tracing itself makes): nothing to say
            return None, None
        return module, source


def module_paths(roots: Mapping[str, torch.nn.Module]) -> dict[int, str]:
    """id(module) -> its dotted path under the function's modules (`StateSource.roots`); a module reached twice
    keeps its first path."""
    paths: dict[int, str] = {}
    for root, top in roots.items():
        for name, module in top.named_modules():
            paths.setdefault(id(module), f"{root}.{name}" if root and name else (root or name))
    return paths


class ProvenanceInterpreter(torch.fx.Interpreter):
    """Runs a Dynamo/AOTAutograd graph node by node under `preserve_node_meta`, so each node it records inherits
    that node's module and line; a backward node names the module of the forward op it differentiates
    (`fwd_nn_module_stack`)."""

    def call_function(self, target: Any, args: Any, kwargs: Any) -> Any:
        meta = fx_traceback.get_current_meta()
        if not meta.get("nn_module_stack") and meta.get("fwd_nn_module_stack"):
            meta["nn_module_stack"] = meta["fwd_nn_module_stack"]
        return super().call_function(target, args, kwargs)
