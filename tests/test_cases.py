"""Every case of the shared table, under each built-in policy: fused output equals eager on fresh inputs."""

from __future__ import annotations

import pytest
import torch
import torch.utils._pytree as pytree

import fusionlab as fl
from tests.cases import CASES, Case

POLICIES = ("none", "pointwise", "default")


def assert_matches(actual: object, expected: object, case: Case) -> None:
    got, got_spec = pytree.tree_flatten(actual)
    want, want_spec = pytree.tree_flatten(expected)
    assert got_spec == want_spec, f"{case.name}: output structure {got_spec} != eager {want_spec}"
    for index, (a, e) in enumerate(zip(got, want)):
        assert a.dtype == e.dtype, f"{case.name} output {index}: dtype {a.dtype} != eager {e.dtype}"
        assert a.device == e.device, f"{case.name} output {index}: device {a.device} != eager {e.device}"
        torch.testing.assert_close(a, e, equal_nan=True, **case.tolerance(),
                                   msg=lambda m, i=index: f"{case.name} output {i}: {m}")


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_case_matches_eager(case: Case, policy: str, device: str) -> None:
    fn = case.callable_on(device)
    args, kwargs = case.make_inputs(device)
    ex = fl.explore(fn, *args, policy=policy, **kwargs)
    fresh_args, fresh_kwargs = case.make_inputs(device)
    with torch.no_grad():
        expected = fn(*fresh_args, **fresh_kwargs)
    assert_matches(ex(*fresh_args, **fresh_kwargs), expected, case)
    report = ex.verify(seed=0)
    assert report.ok, f"{case.name} under {policy!r}:\n{report.as_text()}\n{ex.generated.as_text()}"
    if case.policy_kernels and policy in case.policy_kernels:
        assert len(ex.fused.kernels) == case.policy_kernels[policy], (
            f"{case.name} under {policy!r}: {len(ex.fused.kernels)} kernels, expected "
            f"{case.policy_kernels[policy]}\n{ex.fused.as_text()}")


def test_table_is_large_enough() -> None:
    assert len(CASES) >= 40
    assert len({c.name for c in CASES}) == len(CASES)
