"""TorchInductor beside fusionlab: its kernels, the aten ops in each, and why it did not fuse.

`adapter` is the one module that touches Inductor's private API; `records` holds the plain data it fills in.

    >>> view = inductor_view(lambda x: torch.softmax(x, -1), (torch.randn(64, 256),))   # doctest: +SKIP
"""

from fusionlab.inductor.adapter import compile_inductor, inductor_view, warm_up_inductor
from fusionlab.inductor.records import InductorDecision, InductorKernel, InductorView

__all__ = [
    "InductorDecision",
    "InductorKernel",
    "InductorView",
    "compile_inductor",
    "inductor_view",
    "warm_up_inductor",
]
