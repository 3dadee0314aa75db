"""The tensors a function reads besides its arguments (a module's parameters and buffers, the modules and tensors a
closure refers to), swapped for the traced stand-ins during capture and read afresh on every call.

    >>> StateSource(torch.nn.Linear(2, 3)).named()["weight"][1]
    'parameter'
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import torch


class StateSource:
    """The tensors a function reads besides its arguments: a module's parameters and buffers, and the modules and
    tensors a closure refers to (`lambda h: block(h)[0]`). They are graph inputs, read afresh on every call."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.roots: dict[str, torch.nn.Module] = {}
        self.places: dict[str, tuple[Any, str]] = {}  # closure tensor -> (its cell or globals dict, key)
        if isinstance(fn, torch.nn.Module):
            self.roots[""] = fn
        else:
            owner = getattr(fn, "__self__", None)
            if isinstance(owner, torch.nn.Module):
                self.roots["self"] = owner
            self._closure(fn)
        self.fingerprint = self.modes()

    def _closure(self, fn: Callable[..., Any]) -> None:
        function = getattr(fn, "__func__", fn)
        if not inspect.isfunction(function):
            return
        cells = dict(zip(function.__code__.co_freevars, function.__closure__ or ()))
        for name, cell in cells.items():
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if isinstance(value, torch.nn.Module):
                self.roots[name] = value
            elif isinstance(value, torch.Tensor):
                self.places[name] = (cell, "cell_contents")
        for name in _global_names(function.__code__):
            value = function.__globals__.get(name)
            if isinstance(value, torch.nn.Module):
                self.roots.setdefault(name, value)
            elif isinstance(value, torch.Tensor) and name not in self.places:
                self.places[name] = (function.__globals__, name)

    def closure_tensor(self, name: str) -> torch.Tensor:
        container, key = self.places[name]
        return container[key] if isinstance(container, dict) else getattr(container, key)  # type: ignore[no-any-return]

    def set_closure_tensor(self, name: str, value: torch.Tensor) -> None:
        container, key = self.places[name]
        if isinstance(container, dict):
            container[key] = value
        else:
            setattr(container, key, value)

    def _modules(self) -> dict[str, torch.nn.Module]:
        return {_join(root, name): module for root, top in self.roots.items()
                for name, module in top.named_modules(remove_duplicate=False)}

    def named(self) -> dict[str, tuple[torch.Tensor, str]]:
        """Every state tensor by its dotted name, with its kind ("parameter", "buffer" or "closure")."""
        found: dict[str, tuple[torch.Tensor, str]] = {}
        for root, module in self.roots.items():
            for name, param in module.named_parameters():
                found[_join(root, name)] = (param, "parameter")
            for name, buffer in module.named_buffers():
                found[_join(root, name)] = (buffer, "buffer")
        for name in self.places:
            found[name] = (self.closure_tensor(name), "closure")
        return found

    def modes(self) -> tuple[tuple[str, Any], ...]:
        """What changes a module's program without changing its tensors: `training` and plain attributes
        (`eps`, `momentum`, `p`, ...)."""
        items: list[tuple[str, Any]] = []
        for path, module in self._modules().items():
            items.append((f"{path or type(module).__name__}.training", module.training))
            for key, value in vars(module).items():
                if not key.startswith("_") and isinstance(value, (bool, int, float, str, type(None))):
                    items.append((f"{path or type(module).__name__}.{key}", value))
        return tuple(items)

    def check(self) -> None:
        """Refuse a call after a module's mode or attributes changed: the captured program would be stale."""
        if not self.roots:
            return
        now = self.modes()
        if now == self.fingerprint:
            return
        before = dict(self.fingerprint)
        changed = [(k, before.get(k, "<absent>"), v) for k, v in now if before.get(k, "<absent>") != v
                   and not (v != v and before.get(k) != before.get(k))]
        changed += [(k, v, "<absent>") for k, v in self.fingerprint if k not in dict(now)]
        if not changed:
            return
        key, old, new = changed[0]
        raise StateChanged(f"{key} was {old!r} when the program was captured and is {new!r} now "
                           f"({len(changed)} change(s)): the captured graph would compute the old behaviour. "
                           "Explore again after changing a module's mode (model.train()/model.eval()) or attributes")


class StateChanged(ValueError):
    """A module's mode or a plain attribute changed after capture."""


def _join(root: str, name: str) -> str:
    return f"{root}.{name}" if root and name else (root or name)


def _global_names(code: Any) -> set[str]:
    """Names a function's code (and the code nested in it) reads as globals."""
    names = set(code.co_names)
    for constant in code.co_consts:
        if inspect.iscode(constant):
            names |= _global_names(constant)
    return names


@contextlib.contextmanager
def substituted(source: StateSource, values: dict[str, torch.Tensor]) -> Iterator[None]:
    """Inside the trace, every module the function reads (its own, or one a closure refers to) holds the traced
    stand-ins for its parameters and buffers, and closure tensors are swapped likewise."""
    with contextlib.ExitStack() as stack:
        for root, module in source.roots.items():
            prefix = f"{root}." if root else ""
            own = {k[len(prefix):]: v for k, v in values.items()
                   if (k.startswith(prefix) if prefix else k not in source.places)}
            # tie_weights: a parameter shared by two modules (GPT-2's lm_head and wte) is named once and swapped in both
            stack.enter_context(torch.nn.utils.stateless._reparametrize_module(module, own, tie_weights=True))
        saved = {name: source.closure_tensor(name) for name in source.places}
        try:
            for name in source.places:
                source.set_closure_tensor(name, values[name])
            yield
        finally:
            for name, tensor in saved.items():
                source.set_closure_tensor(name, tensor)
