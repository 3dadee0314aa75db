"""Evaluating an FX node that depends on no input, at capture: a mask built from sizes alone (aranges, comparisons,
`where` of constants, expands) has the same value at every call of a program built for these sizes.

The caller says which nodes may run: `step(node)` returns the function to call with the node's evaluated arguments,
or raises `NotConstant`. Dynamo's graphs (capture/masks.py) allow a list of torch functions and tensor methods; aten
graphs (decompose/attention.py) any pure, deterministic aten op.

    >>> evaluate(mask_node, {}, step)          # doctest: +SKIP
    tensor([[False, ...]])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["NotConstant", "evaluate"]


class NotConstant(Exception):
    """The value reads an input, a symbolic size, or a node the caller's rule does not run."""


def evaluate(value: Any, memo: dict[torch.fx.Node, Any], step: Callable[[torch.fx.Node], Callable[..., Any]]) -> Any:
    """`value` (a node, or a structure of nodes and constants) computed from constants alone; raises NotConstant
    where it reads anything else. `memo` keeps each node's value."""
    if isinstance(value, (list, tuple)):
        return type(value)(evaluate(v, memo, step) for v in value)
    if isinstance(value, slice):
        return slice(evaluate(value.start, memo, step), evaluate(value.stop, memo, step),
                     evaluate(value.step, memo, step))
    if isinstance(value, dict):
        return {key: evaluate(v, memo, step) for key, v in value.items()}
    if not isinstance(value, torch.fx.Node):
        if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            raise NotConstant
        return value
    if value in memo:
        return memo[value]
    run = step(value)
    memo[value] = run(*evaluate(value.args, memo, step), **evaluate(dict(value.kwargs), memo, step))
    return memo[value]
