"""Size guards: the conditions on dynamic sizes that tracing relied on, checked on every call.

    >>> check_guards(captured, [torch.randn(8, 6)])   # raises GuardFailed where `if a.shape[0] > 4` was traced at 4
"""

from __future__ import annotations

import traceback
from collections.abc import Sequence
from typing import Any

import sympy
import torch

from fusionlab.capture.result import CaptureResult, Guard, SymbolBinding


class GuardFailed(ValueError):
    """A call's sizes break a condition the captured program relies on."""


def check_guards(captured: CaptureResult, tensors: Sequence[torch.Tensor]) -> None:
    """Every size condition tracing relied on must hold for this call's sizes."""
    if not captured.guards:
        return
    values = {b.symbol: int(tensors[b.input_index].shape[b.dim]) for b in captured.symbols}
    for guard in captured.guards:
        if bool(guard.expr.xreplace(values)):
            continue
        names = {b.symbol: sympy.Symbol(f"{captured.inputs[b.input_index].name}.shape[{b.dim}]")
                 for b in captured.symbols}
        condition = _condition_text(guard.expr.xreplace(names))
        sizes = ", ".join(f"{names[symbol]} = {value}" for symbol, value in values.items())
        where = f" (from {guard.source})" if guard.source else ""
        raise GuardFailed(f"the program was captured under the condition {condition}{where}, which does not hold "
                          f"for this call ({sizes}): the function takes another path at these sizes. Explore again "
                          "with inputs of these sizes")


def guards_of(placeholders: list[torch.fx.Node], plan: dict[sympy.Symbol, Any],
            symbols: tuple[SymbolBinding, ...]) -> tuple[Guard, ...]:
    """The size conditions tracing assumed, over the kept symbols (s0, s1, ...); trivially true ones dropped."""
    if not symbols:
        return ()
    shape_env = None
    for node in placeholders:
        for size in node.meta["val"].shape:
            if isinstance(size, torch.SymInt):
                shape_env = size.node.shape_env
    if shape_env is None:
        return ()
    kept = {b.symbol for b in symbols}
    found: list[Guard] = []
    for guard in shape_env.guards:
        expr = sympy.sympify(guard.expr).xreplace(plan)
        if expr in (sympy.true, True) or not (expr.free_symbols & kept):
            continue
        found.append(Guard(expr, _guard_line(guard)))
    # A symbol specialised to a value (`if a.shape[0] == 4`) is replaced, not guarded: keep it as a guard too.
    for symbol, replacement in getattr(shape_env, "replacements", {}).items():
        renamed = plan.get(symbol)
        if isinstance(renamed, sympy.Symbol) and renamed in kept:
            value = sympy.sympify(replacement).xreplace(plan)
            if value != renamed:
                found.append(Guard(sympy.Eq(renamed, value), ""))
    return tuple(found)


def _guard_line(guard: Any) -> str:
    sloc = getattr(guard, "sloc", None)
    for attribute in ("maybe_user_loc", "framework_loc"):
        location = getattr(sloc, attribute, None)
        if isinstance(location, traceback.FrameSummary):
            return f"{location.filename}:{location.lineno}" + (f" `{location.line.strip()}`" if location.line else "")
        if location:
            return str(location)
    return ""


_RELATIONS = {sympy.Eq: "==", sympy.Ne: "!=", sympy.Lt: "<", sympy.Le: "<=", sympy.Gt: ">", sympy.Ge: ">="}


def _condition_text(expr: sympy.Basic) -> str:
    """`Eq(a.shape[0], 4)` -> `a.shape[0] == 4`."""
    for relation, symbol in _RELATIONS.items():
        if isinstance(expr, relation):
            return f"{expr.args[0]} {symbol} {expr.args[1]}"
    return str(expr)
