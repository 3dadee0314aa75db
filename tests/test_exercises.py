"""fusionlab.exercises: the checks pass for a correct policy, and say what is wrong otherwise."""

from __future__ import annotations

import re

import pytest
import torch

import fusionlab as fl
from fusionlab import Verdict
from fusionlab.exercises import (
    check_pointwise_only,
    check_policy_shape,
    check_register_budget,
    compare_policies,
    solution,
)


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
    assert check_register_budget(solution(2).policy(6), max_primitives=6)
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


def test_group_labels_count_compute_primitives_not_views() -> None:
    from fusionlab.display.graph import graph_blocks
    from fusionlab.display.tables import groups_table

    def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias)

    ex = fl.explore(layer_norm, torch.randn(4, 16), torch.randn(16), torch.randn(16), policy=Budget(4))
    graph = ex.decomposed.graph
    assert any(graph[n].kind == "view" for g in ex.fused.groups for n in g.nodes), "the case must hold views"
    blocks = graph_blocks(ex.fused, step=len(ex.fused.decisions))
    counts = [int(block.label.split("\n")[1].split()[0]) for block in blocks]
    assert counts == [sum(graph[n].kind in ("pointwise", "reduction") for n in block.members) for block in blocks]
    assert max(counts) <= 4, f"Budget(4) groups are labelled {counts}"
    table = re.sub(r" (style|data-row)='[^']*'", "", groups_table(ex.fused))
    for group in ex.fused.kernels:
        computing = sum(graph[n].kind in ("pointwise", "reduction") for n in group.nodes)
        assert f"<td>{group.name}</td><td>{group.kind}</td><td>{computing}</td>" in table


def test_solutions_are_shown_on_request_and_pass_their_checks() -> None:
    first = solution(1)
    assert first is solution("Pointwise only") and "class PointwiseOnly" in repr(first)
    assert "class PointwiseOnly" in first._repr_html_()
    policy = first.policy()
    assert policy.name == "pointwise-only"
    result = check_pointwise_only(policy)
    assert result, result
    assert solution(2).policy(4).budget == 4
    for wrong in (0, 3, "exercise three", True):
        try:
            solution(wrong)  # type: ignore[arg-type]
        except ValueError as error:
            assert repr(wrong) in str(error) and "'register budget'" in str(error)
        else:
            raise AssertionError(f"solution({wrong!r}) gave a solution")


def test_compare_policies_measures_only_on_a_gpu() -> None:
    table = compare_policies(lambda x: torch.softmax(x, -1), torch.randn(4, 32), policies=["default"])
    assert not any(column.startswith("measured") for column in table.columns)
    assert table["modelled µs on H200"].iloc[0] > 0


@pytest.mark.gpu
def test_compare_policies_measures_on_a_gpu() -> None:
    table = compare_policies(lambda x: torch.softmax(x, -1), torch.randn(1024, 1024, device="cuda"),
                             policies=["none", "default"])
    measured = [column for column in table.columns if column.startswith("measured µs on")]
    assert len(measured) == 1 and (table[measured[0]] > 0).all() and table.verified.all()
