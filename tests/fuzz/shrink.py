"""Shrink a failing program: drop statements and outputs while it still fails the same way.

    >>> smaller = shrink(program, run(program, "explore"))
"""

from __future__ import annotations

import warnings

import torch

from tests.fuzz.oracle import Result, run
from tests.fuzz.program import Program


def runs_in_eager(program: Program) -> bool:
    """Eager runs it at every size and returns tensors (a dropped statement may leave a name undefined)."""
    try:
        function = program.function()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for sizes in program.size_sets:
                outputs = function(*program.make_inputs(sizes))
                if not all(isinstance(o, torch.Tensor) for o in outputs):
                    return False
    except Exception:  # noqa: BLE001 - not a valid program
        return False
    return True


def same_failure(result: Result, failure: Result) -> bool:
    if result.outcome != failure.outcome:
        return False
    if failure.outcome == "crashed":  # the same exception type at the same stage
        return result.signature.split(" @ ")[0] == failure.signature.split(" @ ")[0]
    return result.signature == failure.signature  # wrong: output or input, values or shape/dtype


def shrink(program: Program, failure: Result, budget: int = 80) -> Program:
    """The smallest program found (within `budget` runs) that still fails like `failure`."""
    tries = 0

    def still_fails(candidate: Program) -> bool:
        nonlocal tries
        if tries >= budget or not runs_in_eager(candidate):
            return False
        tries += 1
        return same_failure(run(candidate, failure.runner), failure)

    current = program
    changed = True
    while changed and tries < budget:
        changed = False
        for index in reversed(range(len(current.statements))):
            if index >= len(current.statements):
                continue
            statements = current.statements[:index] + current.statements[index + 1:]
            outputs = tuple(o for o in current.outputs if f"{o} =" not in current.statements[index].text)
            candidate = current.with_statements(statements, outputs or current.outputs)
            if still_fails(candidate):
                current, changed = candidate, True
        for output in current.outputs:
            if len(current.outputs) > 1:
                candidate = current.with_statements(current.statements,
                                                    tuple(o for o in current.outputs if o != output))
                if still_fails(candidate):
                    current, changed = candidate, True
    return current


__all__ = ["runs_in_eager", "same_failure", "shrink"]
