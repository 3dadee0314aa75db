"""A differential fuzzer: random PyTorch programs through fusionlab, compared to eager.

    >>> from tests.fuzz import generate, run_all
    >>> results = run_all(generate(3))

`python -m tests.fuzz --help` runs many and writes each failure as a shrunk, runnable repro.
"""

from __future__ import annotations

import pytest

from tests.fuzz.generate import generate
from tests.fuzz.oracle import OUTCOMES, Result, is_clear_refusal, run, run_all
from tests.fuzz.program import InputSpec, Program, Statement


def skip_unless_asked(config: pytest.Config) -> None:
    """Fuzz tests run only when `-m` names the marker (`pytest -m fuzz`), not under `-m 'gpu or not gpu'`."""
    if "fuzz" not in (config.option.markexpr or ""):
        pytest.skip("on demand: pytest -m fuzz")


__all__ = ["OUTCOMES", "InputSpec", "Program", "Result", "Statement", "generate", "is_clear_refusal", "run",
           "run_all", "skip_unless_asked"]
