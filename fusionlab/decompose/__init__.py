"""Decomposition: the captured aten graph -> fusionlab's primitive graph.

- `primitives`: the primitive set (pointwise table, reductions, views) and the Triton expression of each;
- `builder`: the `Builder` rules call to append primitives (type promotion and broadcasting made explicit);
- `rules`: the `{aten op: rule}` tables, one per family, combined into `RULES`;
- `matmul_rules`: the products' rules, chosen by the exploration's `matmul=` option;
- `apply`: `decompose()`, which applies a table to every aten node;
- `reference`: the reference interpreter of the primitive IR.

    >>> graph = decompose(capture(torch.sigmoid, (torch.randn(4),), {})).graph
"""

from fusionlab.decompose.apply import DecomposeResult, decompose
from fusionlab.decompose.builder import Builder, Rule, RuleNotApplicable, compute_dtype
from fusionlab.decompose.matmul_rules import decomposition_rules
from fusionlab.decompose.primitives import (
    FLOAT32_OVERRIDES,
    INDEX_VIEWS,
    INTEGER_OVERRIDES,
    POINTWISE,
    REDUCTIONS,
    PointwisePrimitive,
)
from fusionlab.decompose.reference import interpret
from fusionlab.decompose.rules import RULES

__all__ = ["FLOAT32_OVERRIDES", "INDEX_VIEWS", "INTEGER_OVERRIDES", "POINTWISE", "REDUCTIONS", "RULES", "Builder",
           "DecomposeResult", "PointwisePrimitive", "Rule", "RuleNotApplicable", "compute_dtype", "decompose",
           "decomposition_rules", "interpret"]
