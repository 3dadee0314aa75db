"""A row's maximum and its sum of exponentials in one pass (online softmax) for looped reductions.

Softmax, log_softmax, logsumexp and cross-entropy decompose to `m = amax(x)` and then `sum(exp(x - m))`: two
reductions where the second depends on the first, so a looped kernel reads each row twice before its output pass.
Rows longer than the persistent limit (a vocabulary: 32k-256k) no longer fit the L2 cache across the passes once
hundreds of rows are in flight (a 256000-token bf16 row is 512 kB), so each pass is a read from memory. The online
update (Milakov and Gimelshein, 2018) keeps a running maximum and a sum rescaled to it per lane, in one loop:
    m' = max(m, x);  s = s * exp(m - m') + exp(x - m')
and combines the lanes at the end: M = max_i m_i, S = sum_i s_i * exp(m_i - M). Lanes that have seen only -inf
(masked lanes, fully masked attention keys) hold m = -inf and s = 0 and add nothing. A row whose maximum is -inf
gets the sum eager computes for it, NaN (exp(-inf - -inf)).

    >>> partners(graph, group_nodes)      # {the amax: the sum of exp(x - amax) over the same axes}
"""

from __future__ import annotations

from collections.abc import Sequence

from fusionlab.fusion.domain import view_source
from fusionlab.ir import Graph, Ref


def partners(graph: Graph, members: Sequence[str]) -> dict[str, str]:
    """Map each `amax(x)` in `members` to a later floating-point `sum` over the same axes of `exp(x - amax(x))`."""
    inside = set(members)
    found: dict[str, str] = {}
    for name in members:
        total = graph[name]
        if total.kind != "reduction" or total.op != "sum" or not total.type.dtype.is_floating_point:
            continue
        exponential = graph[total.inputs[0]]
        if exponential.name not in inside or exponential.kind != "pointwise" or exponential.op != "exp":
            continue
        sub = graph[exponential.inputs[0]]
        refs = [a for a in sub.args if isinstance(a, Ref)]
        if sub.name not in inside or sub.op != "sub" or len(sub.args) != 2 or len(refs) != 2:
            continue
        source, centre = refs[0].name, view_source(graph, refs[1].name)
        first = graph[centre]
        if (centre in inside and first.kind == "reduction" and first.op == "amax" and first.inputs[0] == source
                and first.param("axes") == total.param("axes") and first.type.dtype.is_floating_point
                and centre not in found and total.name not in found.values()):
            found[centre] = total.name
    return found


def loop_lines(pad: str, value: str, masked: str, running_max: str, running_sum: str, new_max: str,
               shift: str) -> list[str]:
    """One loop iteration: masked lanes read -inf, which leaves both the maximum and the sum as they were. A lane
    whose maximum is still -inf shifts by 0 instead (its sum stays 0): no -inf - -inf, no NaN to select away."""
    return [
        f"{pad}{masked} = tl.where(mask, {value}, float(\"-inf\"))",
        f"{pad}{new_max} = _maximum({running_max}, {masked})",
        f"{pad}{shift} = tl.where({new_max} == float(\"-inf\"), 0.0, {new_max})",
        f"{pad}{running_sum} = {running_sum} * tl.exp({running_max} - {shift}) + tl.exp({masked} - {shift})",
        f"{pad}{running_max} = {new_max}",
    ]


def combine_lines(running_max: str, running_sum: str, result: str, total: str, shift: str) -> list[str]:
    """The row's maximum into `result` and its sum of exp(x - maximum) into `total`, both [XBLOCK, 1]; lanes that
    saw only -inf hold a sum of 0."""
    return [
        f"    {result} = tl.reduce({running_max}, 1, _maximum)[:, None]",
        f"    {shift} = tl.where({result} == float(\"-inf\"), 0.0, {result})",
        f"    {total} = tl.sum({running_sum} * tl.exp({running_max} - {shift}), 1)[:, None]",
        f"    {total} = tl.where({result} == float(\"-inf\"), float(\"nan\"), {total})",
    ]
