"""fusionlab.exercises: the checks pass for a correct policy, and say what is wrong otherwise."""

from __future__ import annotations

import torch

import fusionlab as fl
from fusionlab import Verdict
from fusionlab.exercises import check_pointwise_only, check_policy_shape, check_register_budget, compare_policies


class Budget:
    def __init__(self, budget: int) -> None:
        self.name = f"budget-{budget}"
        self.budget = budget
        self.default = fl.DefaultFusion()

    def can_fuse(self, producer: fl.GroupInfo, consumer: fl.GroupInfo) -> Verdict:
        verdict = self.default.can_fuse(producer, consumer)
        size = sum(n.kind in ("pointwise", "reduction") for n in producer.nodes + consumer.nodes)
        if verdict.ok and size > self.budget:
            return Verdict(False, f"{size} primitives would pass the budget")
        return verdict

    def score(self, producer: fl.GroupInfo, consumer: fl.GroupInfo) -> int:
        return self.default.score(producer, consumer)


class Stub:
    name = "stub"

    def can_fuse(self, producer: fl.GroupInfo, consumer: fl.GroupInfo) -> Verdict:
        return Verdict(False, "")

    def score(self, producer: fl.GroupInfo, consumer: fl.GroupInfo) -> str:
        return "high"


def test_builtin_pointwise_policy_passes_exercise_one() -> None:
    result = check_pointwise_only(fl.PointwiseFusion())
    assert result, result
    assert "PASSED" in repr(result) and "passed" in result._repr_html_()


def test_default_policy_fails_exercise_one_with_a_hint() -> None:
    result = check_pointwise_only(fl.DefaultFusion())
    assert not result
    failed = [message for ok, message in result.checks if not ok]
    assert any("softmax" in m and "reduction" in m for m in failed)


def test_register_budget() -> None:
    assert check_register_budget(Budget(6), max_primitives=6)
    too_big = check_register_budget(fl.DefaultFusion(), max_primitives=3)
    assert not too_big and any("budget 3" in m for ok, m in too_big.checks if not ok)


def test_policy_shape_reports_each_problem() -> None:
    result = check_policy_shape(Stub())
    failed = [message for ok, message in result.checks if not ok]
    assert any("reason" in m for m in failed) and any("score" in m for m in failed)
    assert "&#10008;" in result._repr_html_()


def test_compare_policies_table() -> None:
    table = compare_policies(lambda x: torch.softmax(x, -1), torch.randn(8, 64), policies=["none", "default"])
    assert list(table.policy) == ["none", "default"]
    assert table.kernels.iloc[0] > table.kernels.iloc[1] and table["bytes moved"].iloc[0] > table["bytes moved"].iloc[1]
    assert table.verified.all()
