"""Capture: a function or nn.Module plus example inputs -> an aten-level torch.fx graph with types, the writes it
makes to its inputs and buffers, the size conditions it relies on, and the checks every later call must pass.

    >>> result = capture(torch.nn.functional.gelu, (torch.randn(4, 8),), {})
"""

from fusionlab.capture.calls import InputMismatch, check_aliasing, check_inputs, flatten_call
from fusionlab.capture.guards import GuardFailed, check_guards
from fusionlab.capture.result import (
    TENSOR_SLOT,
    AtenNode,
    CaptureError,
    CaptureResult,
    Guard,
    InputSpec,
    Mutation,
    ObjectSlot,
    SymbolBinding,
    fill_template,
    output_values,
    strides_of,
)
from fusionlab.capture.state import StateChanged, StateSource
from fusionlab.capture.trace import capture

__all__ = ["TENSOR_SLOT", "AtenNode", "CaptureError", "CaptureResult", "Guard", "GuardFailed", "InputMismatch",
           "InputSpec", "Mutation", "ObjectSlot", "StateChanged", "StateSource", "SymbolBinding", "capture",
           "check_aliasing", "check_guards", "check_inputs", "fill_template", "flatten_call", "output_values",
           "strides_of"]
