"""Mean and variance in one pass (Welford's algorithm) for looped reductions.

A looped kernel reads its rows once per pass, and a reduction that reads another's result needs a pass after it
(codegen/plan.py: `reduction_passes`). A variance written out, `mean((x - mean(x))**2)` (and `var`,
`std`, column statistics, batch-norm statistics after decomposition), is two reductions where the second depends
on the first, so it costs two passes over the input. Welford's update keeps a running mean and sum of squared
deviations per lane in the same loop; the lanes are combined at the end with the parallel formula (Chan et al.):
mean = sum(n_i mean_i) / n, M2 = sum(M2_i + n_i (mean_i - mean)^2), as plain sums. One pass instead of two:
column_normalize reads its input twice instead of three times (see docs/PERFORMANCE.md). A pair seen only through
layout copies (a channels-last batch norm's statistics, `permute(copy(permute(v)))`) is left as two passes: paired,
ResNet-50's split statistics kernels ran 10% slower on an H200 (Welford's division per element, where the second
pass over a split's short rows reads from L2; eighteenth round).

    >>> partners(graph, group_nodes)      # {first reduction (the mean): second (the sum/mean of squares)}
"""

from __future__ import annotations

from collections.abc import Sequence

from fusionlab.fusion.domain import view_source
from fusionlab.ir import Graph, Node, Ref


def _square_of(node: Node) -> str | None:
    """`s` when `node` is `s * s`."""
    refs = [a for a in node.args if isinstance(a, Ref)]
    if node.kind == "pointwise" and node.op == "mul" and len(node.args) == 2 and len(refs) == 2 \
            and refs[0].name == refs[1].name:
        return refs[0].name
    return None


def partners(graph: Graph, members: Sequence[str]) -> dict[str, str]:
    """Map each `mean(x)` in `members` to a later `sum`/`mean` over the same axes of `(x - mean(x))**2`."""
    inside = set(members)
    found: dict[str, str] = {}
    for name in members:
        second = graph[name]
        if second.kind != "reduction" or second.op not in ("sum", "mean") or not second.type.dtype.is_floating_point:
            continue
        deviation = _square_of(graph[second.inputs[0]])
        if deviation is None or deviation not in inside:
            continue
        sub = graph[deviation]
        refs = [a for a in sub.args if isinstance(a, Ref)]
        if sub.op != "sub" or len(sub.args) != 2 or len(refs) != 2:
            continue
        source, centre = refs[0].name, view_source(graph, refs[1].name)
        first = graph[centre]
        if (centre in inside and first.kind == "reduction" and first.op == "mean" and first.inputs[0] == source
                and first.param("axes") == second.param("axes") and centre not in found
                and second.name not in found.values()):
            found[centre] = second.name
    return found


def loop_lines(pad: str, value: str, mean: str, m2: str, count: str, delta: str) -> list[str]:
    """The update of one loop iteration: masked lanes keep their state."""
    return [
        f"{pad}{count} = {count} + tl.where(mask, 1.0, 0.0)",
        f"{pad}{delta} = {value} - {mean}",
        f"{pad}{mean} = {mean} + tl.where(mask, {delta} / tl.where(mask, {count}, 1.0), 0.0)",
        f"{pad}{m2} = {m2} + tl.where(mask, {delta} * ({value} - {mean}), 0.0)",
    ]


def combine_lines(mean: str, m2: str, count: str, result: str, variance: str, total: str, divide: bool) -> list[str]:
    """Combine the lanes of each row: the row's mean into `result`, its sum (or mean) of squares into `variance`."""
    return [
        f"    {total} = tl.sum({count}, 1)[:, None]",
        f"    {result} = tl.sum({mean} * {count}, 1)[:, None] / {total}",
        f"    {variance} = tl.sum({m2} + {count} * ({mean} - {result}) * ({mean} - {result}), 1)[:, None]"
        + (f" / {total}" if divide else ""),
    ]
