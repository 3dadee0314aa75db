"""Reductions in Triton source, as tables: each op's identity, how a loop step accumulates it, and how a tile of it
becomes one value per row. The kernel writer (codegen/kernel.py) looks an op up here; a mean and the variance
around it, fused into one pass, are codegen/welford.py's.

    >>> ROW_REDUCE["amax"].format("acc_m")
    'tl.reduce(acc_m, 1, _maximum)[:, None]'
"""

from __future__ import annotations

import torch

# The value a masked lane holds, leaving the reduction unchanged (floating point; see `identity` for the others).
IDENTITY: dict[str, str] = {"sum": "0", "mean": "0", "prod": "1", "amax": 'float("-inf")', "amin": 'float("inf")',
                            "argmax": 'float("-inf")', "argmin": 'float("inf")'}

# A [XBLOCK, RBLOCK] tile ({0}) reduced along its rows, kept 2-D ([XBLOCK, 1]); a mean divides by the row's size.
ROW_REDUCE: dict[str, str] = {
    "sum": "tl.sum({0}, 1)[:, None]",
    "mean": "(tl.sum({0}, 1)[:, None] / rnumel)",
    "prod": "tl.reduce({0}, 1, _multiply)[:, None]",
    "amax": "tl.reduce({0}, 1, _maximum)[:, None]",
    "amin": "tl.reduce({0}, 1, _minimum)[:, None]",
}

# One step of a looped reduction: the accumulator tile ({0}) combined with the next masked tile of the row ({1}).
ACCUMULATE: dict[str, str] = {
    "sum": "{0} + {1}", "mean": "{0} + {1}", "prod": "{0} * {1}",
    "amax": "_maximum({0}, {1})", "amin": "_minimum({0}, {1})",
}

# Index reductions keep (value, position) pairs; a lane takes a candidate strictly better than its best so far.
ARG_BETTER: dict[str, str] = {"argmax": ">", "argmin": "<"}
EXTREMES = ("amax", "argmax", "amin", "argmin")

# The positions of a persistent row, paired with its values for an index reduction.
ROW_LANES = "tl.broadcast_to(rindex, [XBLOCK, RBLOCK]).to(tl.int64)"


def identity(op: str, dtype: torch.dtype) -> str:
    """The identity of `op` accumulated in `dtype` (a maximum of integers starts at the dtype's minimum)."""
    if dtype == torch.bool and op in EXTREMES:
        return "0" if op in ("amax", "argmax") else "1"
    if not dtype.is_floating_point and op in EXTREMES:
        info = torch.iinfo(dtype)
        return str(info.min if op in ("amax", "argmax") else info.max)
    return IDENTITY[op]


def arg_reduce_lines(op: str, values: str, positions: str, extreme: str, result: str) -> list[str]:
    """A tile of (value, position) pairs reduced to the position of each row's extreme, as [XBLOCK, 1]."""
    return [f"    {extreme}, {result} = tl.reduce(({values}, {positions}), 1, _{op})",
            f"    {result} = {result}[:, None]"]


def arg_update_lines(pad: str, op: str, masked: str, accumulator: str, positions: str) -> list[str]:
    """One loop step of an index reduction: each lane keeps its first extreme value (or its first NaN)."""
    return [
        f"{pad}candidate = {masked}",
        f"{pad}take = (candidate {ARG_BETTER[op]} {accumulator}) | ((candidate != candidate) & "
        f"({accumulator} == {accumulator}))",
        f"{pad}{positions} = tl.where(take, rindex + {positions} * 0, {positions})",
        f"{pad}{accumulator} = tl.where(take, candidate, {accumulator})",
    ]
