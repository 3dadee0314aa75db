"""Checks for the "write your own fusion policy" lesson: run them on your policy, read what passed and why not.

Each check explores a few small workloads with your policy, verifies every fused program against eager
PyTorch, and tests the property the exercise asks for. A result prints (and renders in a notebook) as a list of
passed and failed checks with hints; `bool(result)` is True when all passed.

    >>> result = check_pointwise_only(MyPolicy())
    >>> result                      # in a notebook: a checklist
    >>> assert result, "not yet"

Stuck? `solution(1)` (or `solution("pointwise only")`) shows one solution's source; nothing in a lesson runs it
for you. `solution(2).policy(6)` builds the reference policy, to compare with yours.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from fusionlab.explore import Exploration, explore
from fusionlab.fusion.policy import DefaultFusion, GroupInfo, Verdict
from fusionlab.measure.devices import model_time
from fusionlab.measure.timing import device_of, median_cuda_ms
from fusionlab.measure.workloads import get

__all__ = ["CheckResult", "SOLUTIONS", "Solution", "check_pointwise_only", "check_policy_shape",
           "check_register_budget", "compare_policies", "count_primitives", "exercise_cases", "solution"]

_COMPUTE = ("pointwise", "reduction")


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one exercise: each check with whether it passed and what it found."""

    exercise: str
    checks: tuple[tuple[bool, str], ...]

    @property
    def passed(self) -> bool:
        return all(ok for ok, _ in self.checks)

    def __bool__(self) -> bool:
        return self.passed

    def __repr__(self) -> str:
        lines = [f"{self.exercise}: {'PASSED' if self.passed else 'not yet'}"]
        lines += [f"  [{'x' if ok else ' '}] {message}" for ok, message in self.checks]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        colour = "#16a34a" if self.passed else "#dc2626"
        items = "".join(f"<li style='color:{'#166534' if ok else '#991b1b'}'>{'&#10004;' if ok else '&#10008;'} "
                        f"{html.escape(message)}</li>" for ok, message in self.checks)
        verdict = "passed" if self.passed else "not yet"
        return (f"<div style='font-family:Helvetica,Arial,sans-serif;font-size:13px'><b>{html.escape(self.exercise)}"
                f"</b>: <b style='color:{colour}'>{verdict}</b><ul style='margin:4px 0'>{items}</ul></div>")


def exercise_cases(size: int = 32) -> dict[str, tuple[Callable[..., Any], tuple[torch.Tensor, ...]]]:
    """Small workloads the checks run: pointwise chains and reductions (rows of `size` elements)."""
    cases: dict[str, tuple[Callable[..., Any], tuple[torch.Tensor, ...]]] = {}
    for name in ("gelu_bias", "residual_chain", "softmax", "layer_norm"):
        fn, inputs = get(name).build("cpu")
        cases[name] = (fn, tuple(t[:8, :size] if t.dim() == 2 else t[:size] for t in inputs))
    return cases


def count_primitives(group_nodes: Sequence[Any]) -> int:
    """Pointwise and reduction primitives among `group_nodes` (views and inputs are free)."""
    return sum(1 for node in group_nodes if node.kind in _COMPUTE)


def check_policy_shape(policy: Any) -> CheckResult:
    """The policy object has a name, `can_fuse` returns a Verdict with a reason, `score` returns a number."""
    checks: list[tuple[bool, str]] = []
    checks.append((isinstance(getattr(policy, "name", None), str) and bool(policy.name),
                   "the policy has a `name` (a non-empty string)"))
    ex = explore(*_first_case())
    nodes = [n for n in ex.decomposed.graph.nodes if n.kind in _COMPUTE]
    producer, consumer = GroupInfo((nodes[0],)), GroupInfo((nodes[1],))
    try:
        verdict = policy.can_fuse(producer, consumer)
        checks.append((isinstance(verdict, Verdict), f"can_fuse returns a Verdict (got {type(verdict).__name__})"))
        checks.append((isinstance(verdict, Verdict) and bool(str(verdict.reason).strip()),
                       "the Verdict carries a reason in words (the decision table shows it)"))
    except Exception as error:
        checks.append((False, f"can_fuse raised {type(error).__name__}: {error}"))
    try:
        score = policy.score(producer, consumer)
        checks.append((isinstance(score, (int, float)), f"score returns a number (got {type(score).__name__})"))
    except Exception as error:
        checks.append((False, f"score raised {type(error).__name__}: {error}"))
    return CheckResult("policy shape", tuple(checks))


def _first_case() -> tuple[Callable[..., Any], torch.Tensor, torch.Tensor]:
    fn, inputs = exercise_cases()["gelu_bias"]
    return fn, inputs[0], inputs[1]


def _explore_all(policy: Any) -> tuple[dict[str, Exploration], list[tuple[bool, str]]]:
    explorations, checks = {}, []
    for name, (fn, inputs) in exercise_cases().items():
        try:
            ex = explore(fn, *inputs, policy=policy)
            ex.fused  # noqa: B018 - runs the fusion pass with the student's policy
            explorations[name] = ex
        except Exception as error:
            checks.append((False, f"{name}: fusing with your policy raised {type(error).__name__}: {error}"))
    return explorations, checks


def _verify_all(explorations: dict[str, Exploration]) -> list[tuple[bool, str]]:
    checks = []
    for name, ex in explorations.items():
        try:
            report = ex.verify(seed=0)
            checks.append((bool(report.ok), f"{name}: the fused program matches eager PyTorch ({report!r})"))
        except Exception as error:
            checks.append((False, f"{name}: running the fused program raised {type(error).__name__}: {error}"))
    return checks


def check_pointwise_only(policy: Any) -> CheckResult:
    """Exercise 1: fuse chains of pointwise ops, but never put a reduction in a kernel with anything else."""
    checks = list(check_policy_shape(policy).checks)
    explorations, failures = _explore_all(policy)
    checks += failures
    for name, ex in explorations.items():
        graph = ex.decomposed.graph
        mixed = [g.name for g in ex.fused.kernels
                 if any(graph[n].kind == "reduction" for n in g.nodes) and count_primitives([graph[n] for n in
                                                                                             g.nodes]) > 1]
        checks.append((not mixed, f"{name}: no reduction shares a kernel" + (
            f" (but {', '.join(mixed)} mixes a reduction with other ops: return Verdict(False, ...) when "
            "producer.kind or consumer.kind is 'reduction')" if mixed else "")))
    for name in ("gelu_bias", "residual_chain"):
        if name in explorations:
            kernels = len(explorations[name].fused.kernels)
            checks.append((kernels == 1, f"{name}: its pointwise chain is one kernel (got {kernels}; pointwise "
                                         "producer + pointwise consumer should fuse)"))
    checks += _verify_all(explorations)
    return CheckResult("exercise 1: pointwise only", tuple(checks))


def check_register_budget(policy: Any, max_primitives: int = 6) -> CheckResult:
    """Exercise 2: fuse as the default policy does, but no kernel may hold more than `max_primitives` ops."""
    checks = list(check_policy_shape(policy).checks)
    explorations, failures = _explore_all(policy)
    checks += failures
    for name, ex in explorations.items():
        graph = ex.decomposed.graph
        sizes = [count_primitives([graph[n] for n in g.nodes]) for g in ex.fused.kernels]
        worst = max(sizes, default=0)
        checks.append((worst <= max_primitives, f"{name}: the largest kernel holds {worst} primitives "
                                                f"(budget {max_primitives})"))
        unfused = len(explore(ex.fn, *ex.example_inputs, policy="none").fused.kernels)
        checks.append((len(sizes) < unfused, f"{name}: still fuses: {len(sizes)} kernels against {unfused} "
                                             "unfused"))
    checks += _verify_all(explorations)
    return CheckResult(f"exercise 2: a register budget of {max_primitives} primitives", tuple(checks))


def compare_policies(fn: Callable[..., Any], *inputs: Any, policies: Sequence[Any] = ("none", "pointwise",
                                                                                      "default"),
                     profile: str = "H200") -> Any:
    """A pandas DataFrame: per policy, kernels, bytes moved, the modelled time on `profile` and, when the inputs
    are on a GPU, the measured time of the fused program there (CUDA events, median)."""
    import pandas

    where = device_of(fn, inputs)
    rows = []
    for policy in policies:
        ex = explore(fn, *inputs, policy=policy)
        launching = [g for g in ex.fused.groups if g.kind in ("pointwise", "reduction", "extern")]
        moved = sum(g.bytes_read + g.bytes_written for g in launching)
        row = {"policy": ex.policy.name, "kernels": len(ex.fused.kernels), "launches": len(launching),
               "bytes moved": moved,
               f"modelled µs on {profile}": model_time(moved, len(launching), 0, profile) * 1e6,
               "verified": bool(ex.verify(seed=0).ok)}
        if where.type == "cuda":  # measured only once verified: a wrong program is never timed
            def run(ex: Exploration = ex) -> Any:
                with torch.no_grad():
                    return ex(*inputs)

            name = torch.cuda.get_device_name(where)
            row[f"measured µs on {name}"] = median_cuda_ms(run) * 1e3 if row["verified"] else float("nan")
        rows.append(row)
    return pandas.DataFrame(rows)


@dataclass(frozen=True)
class Solution:
    """One solution of an exercise: `print(solution(1))` shows its source; `.policy(...)` builds the policy."""

    exercise: str
    source: str

    def __repr__(self) -> str:
        return f"# one solution of {self.exercise} (yours may differ and still pass)\n{self.source}"

    def _repr_html_(self) -> str:
        return (f"<div style='font-size:12px'><b>one solution of {html.escape(self.exercise)}</b> (yours may differ "
                f"and still pass)<pre>{html.escape(self.source)}</pre></div>")

    def policy(self, *arguments: Any) -> Any:
        """The solution's policy object, built from its source (`solution(2).policy(6)`: a budget of 6)."""
        namespace: dict[str, Any] = {"Verdict": Verdict, "DefaultFusion": DefaultFusion, "__name__": "solution"}
        exec(compile(self.source, f"<solution of {self.exercise}>", "exec"), namespace)  # noqa: S102 - our source
        classes = [value for value in namespace.values() if isinstance(value, type) and value.__module__ == "solution"]
        return classes[-1](*arguments)


SOLUTIONS: dict[str, Solution] = {
    "pointwise only": Solution("exercise 1: pointwise only", '''class PointwiseOnly:
    name = "pointwise-only"

    def can_fuse(self, producer, consumer):
        if "extern" in (producer.kind, consumer.kind):
            return Verdict(False, "extern ops run outside kernels")
        if "reduction" in (producer.kind, consumer.kind):
            return Verdict(False, "this policy keeps reductions in kernels of their own")
        return Verdict(True, "pointwise chain: the intermediate stays in registers")

    def score(self, producer, consumer):
        return 1
'''),
    "register budget": Solution("exercise 2: a register budget", '''class Budget:
    def __init__(self, budget=6):
        self.name = f"budget-{budget}"
        self.budget = budget
        self.default = DefaultFusion()

    def can_fuse(self, producer, consumer):
        verdict = self.default.can_fuse(producer, consumer)
        if not verdict.ok:
            return verdict
        size = sum(node.kind in ("pointwise", "reduction") for node in producer.nodes + consumer.nodes)
        if size > self.budget:
            return Verdict(False, f"{size} primitives would pass the budget of {self.budget}")
        return verdict

    def score(self, producer, consumer):
        return self.default.score(producer, consumer)
'''),
}


def solution(exercise: int | str) -> Solution:
    """One solution of exercise 1 or 2 of lesson 5 (by number or name): read it after trying your own."""
    names = list(SOLUTIONS)
    if isinstance(exercise, int) and not isinstance(exercise, bool) and 1 <= exercise <= len(names):
        return SOLUTIONS[names[exercise - 1]]
    if isinstance(exercise, str) and exercise.lower().strip() in SOLUTIONS:
        return SOLUTIONS[exercise.lower().strip()]
    raise ValueError(f"no exercise {exercise!r}: give a number 1..{len(names)} or one of "
                     f"{', '.join(repr(n) for n in names)}")
