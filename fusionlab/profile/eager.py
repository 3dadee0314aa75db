"""Eager time per module: forward hooks on every module of the model time each call of it.

On a CPU a module's time is the wall time between its forward pre-hook and its forward hook (inclusive of its
children), summed over its calls, over several rounds at a fixed thread count. On CUDA the hooks open a
`torch.profiler.record_function` range named after the module, so the CUDA profiler can give each kernel to the
innermost module that launched it (`fusionlab.profile.cuda`).

    >>> with ModuleClock(model) as clock:
    ...     model(x)
    >>> clock.spans[0]        # (module path, start s, end s, depth)
"""

from __future__ import annotations

import collections
import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

__all__ = ["ModuleClock", "RANGE_PREFIX", "eager_rounds", "fixed_threads"]

#: the profiler range of a module's call is named "module: <path>" ("module: " alone for the model itself)
RANGE_PREFIX = "module: "


class ModuleClock:
    """Hooks on every module of `model` recording each call's (path, start, end, depth); with `ranges=True`,
    also a profiler range per call. Hooks are removed on exit."""

    def __init__(self, model: torch.nn.Module, *, ranges: bool = False) -> None:
        self.model = model
        self.ranges = ranges
        self.spans: list[tuple[str, float, float, int]] = []
        self._open: list[tuple[str, float, Any]] = []
        self._handles: list[Any] = []

    def __enter__(self) -> ModuleClock:
        for path, module in self.model.named_modules():
            self._handles.append(module.register_forward_pre_hook(self._entered(path)))
            self._handles.append(module.register_forward_hook(self._left(path), always_call=True))
        return self

    def __exit__(self, *exception: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        while self._open:  # an exception inside a module: close its ranges
            _, _, scope = self._open.pop()
            if scope is not None:
                scope.__exit__(None, None, None)

    def _entered(self, path: str) -> Callable[..., None]:
        def hook(module: torch.nn.Module, args: Any) -> None:
            scope = None
            if self.ranges:
                scope = torch.profiler.record_function(RANGE_PREFIX + path)
                scope.__enter__()
            self._open.append((path, time.perf_counter(), scope))
        return hook

    def _left(self, path: str) -> Callable[..., None]:
        def hook(module: torch.nn.Module, args: Any, output: Any) -> None:
            end = time.perf_counter()
            while self._open:
                opened, start, scope = self._open.pop()
                if scope is not None:
                    scope.__exit__(None, None, None)
                if opened == path:
                    self.spans.append((path, start, end, len(self._open)))
                    return
        return hook

    def totals_ms(self) -> dict[str, float]:
        """Each module's inclusive milliseconds, summed over its calls."""
        totals: dict[str, float] = collections.defaultdict(float)
        for path, start, end, _ in self.spans:
            totals[path] += (end - start) * 1e3
        return dict(totals)


@contextlib.contextmanager
def fixed_threads(count: int | None) -> Iterator[int]:
    """Run with `count` intra-op threads (None: leave it), restoring the number after."""
    before = torch.get_num_threads()
    if count:
        torch.set_num_threads(count)
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


def eager_rounds(model: torch.nn.Module, step: Callable[[], Any], rounds: int
                 ) -> tuple[list[dict[str, float]], list[float], list[tuple[str, float, float, int]]]:
    """`rounds` timed calls of `step` (after one untimed): each module's ms per round (the model's own, "", is the
    whole step), the whole step's ms per round, and the spans of the median round (for the trace)."""
    step()
    per_round: list[dict[str, float]] = []
    walls: list[float] = []
    spans: list[list[tuple[str, float, float, int]]] = []
    for _ in range(rounds):
        with ModuleClock(model) as clock:
            start = time.perf_counter()
            step()
            walls.append((time.perf_counter() - start) * 1e3)
        totals = clock.totals_ms()
        totals[""] = walls[-1]  # the model's own row is the whole step (a training step's backward too)
        per_round.append(totals)
        spans.append([(path, s - start, e - start, depth) for path, s, e, depth in clock.spans])
    median_round = sorted(range(rounds), key=walls.__getitem__)[rounds // 2]
    return per_round, walls, spans[median_round]
