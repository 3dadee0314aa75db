"""Whole-model profiling: `profile(model, *inputs)` -> `ModelProfile` (Dynamo graphs and their breaks, the module
tree, per-module and per-kernel times of eager, fusionlab and Inductor, a Perfetto trace).

Modules: `run` (the verb), `model_profile` (the result), `records` (spreads, verdicts, graphs), `kernels` (each
launch, measured or modelled), `modules` (the module table), `eager` (module hooks), `inductor_times`, `cuda` (the
CUDA profiler's events), `verdict` (host- or GPU-bound), `timeline` (the trace).
"""

from fusionlab.profile.model_profile import ModelProfile
from fusionlab.profile.records import GraphBreak, GraphProfile, Spread, Verdict
from fusionlab.profile.run import profile

__all__ = ["GraphBreak", "GraphProfile", "ModelProfile", "Spread", "Verdict", "profile"]
