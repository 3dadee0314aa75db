"""TorchInductor beside fusionlab: its kernels, the aten ops in each, and why it did not fuse.

`adapter` is the one module that touches Inductor's private API; `records` holds the plain data it fills in;
`matching` pairs the nodes of Inductor's graph with our captured aten nodes by stated rules; `correspondence`
pairs our fusion groups with Inductor's kernels over the same nodes.

    >>> view = inductor_view(lambda x: torch.softmax(x, -1), (torch.randn(64, 256),))   # doctest: +SKIP
"""

from fusionlab.inductor.adapter import compile_inductor, inductor_view, warm_up_inductor
from fusionlab.inductor.correspondence import KernelPair, group_labels, kernel_pairs, pair_for
from fusionlab.inductor.matching import NodeMatch
from fusionlab.inductor.records import InductorDecision, InductorKernel, InductorOperation, InductorView

__all__ = [
    "InductorDecision",
    "InductorKernel",
    "InductorOperation",
    "InductorView",
    "KernelPair",
    "NodeMatch",
    "group_labels",
    "kernel_pairs",
    "pair_for",
    "compile_inductor",
    "inductor_view",
    "warm_up_inductor",
]
