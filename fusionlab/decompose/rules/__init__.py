"""The decomposition rule table: `{aten op: rule}`, one named table per family combined into `RULES`. A rule receives
the Builder and the op's arguments (tensors as `Ref`s) and returns the value (or values) the op produces, built from
primitives; an op with no rule, or whose rule raises `RuleNotApplicable`, runs as an extern op.

    >>> aten.silu in RULES
    True

A new rule goes in its family's table (pointwise, copies, activations, reductions, normalization, views, factories,
indexing); a new family is a module with its own table, added to the union below. Products are chosen per
exploration (`decompose/matmul_rules.py`).
"""

from __future__ import annotations

from typing import Any

from fusionlab.decompose.builder import Rule
from fusionlab.decompose.rules.activations import ACTIVATION_RULES
from fusionlab.decompose.rules.copies import COPY_RULES
from fusionlab.decompose.rules.factories import FACTORY_RULES
from fusionlab.decompose.rules.indexing import INDEXING_RULES
from fusionlab.decompose.rules.normalization import NORMALIZATION_RULES
from fusionlab.decompose.rules.pointwise import POINTWISE_RULES
from fusionlab.decompose.rules.reductions import REDUCTION_RULES
from fusionlab.decompose.rules.views import VIEW_RULES

RULES: dict[Any, Rule] = (POINTWISE_RULES | COPY_RULES | ACTIVATION_RULES | REDUCTION_RULES | NORMALIZATION_RULES
                          | VIEW_RULES | FACTORY_RULES | INDEXING_RULES)

__all__ = ["ACTIVATION_RULES", "COPY_RULES", "FACTORY_RULES", "INDEXING_RULES", "NORMALIZATION_RULES",
           "POINTWISE_RULES", "REDUCTION_RULES", "RULES", "VIEW_RULES"]
