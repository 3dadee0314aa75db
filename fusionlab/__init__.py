"""fusionlab: see, teach and measure GPU kernel fusion in PyTorch.

    >>> import fusionlab as fl
    >>> ex = fl.explore(lambda x: torch.softmax(x, -1), torch.randn(8, 32))
    >>> ex.fused, ex.verify().ok
"""

from fusionlab.capture import CaptureError, InputMismatch
from fusionlab.dynamo_backend import backend
from fusionlab.explore import Exploration, explore
from fusionlab.fusion.fuse import FusionDecision, FusionError, FusionGroup
from fusionlab.fusion.policy import DefaultFusion, GroupInfo, NoFusion, PointwiseFusion, Policy, Verdict
from fusionlab.profile import ModelProfile, profile
from fusionlab.stages import Captured, Compiled, Decomposed, Fused, Generated
from fusionlab.verify import VerifyReport

__version__ = "0.1.0"

__all__ = [
    "backend", "CaptureError", "Captured", "Compiled", "Decomposed", "DefaultFusion", "Exploration", "Fused",
    "FusionDecision", "FusionError", "FusionGroup", "Generated", "GroupInfo", "InputMismatch", "ModelProfile",
    "NoFusion", "PointwiseFusion", "Policy", "Verdict", "VerifyReport", "explore", "profile",
]
