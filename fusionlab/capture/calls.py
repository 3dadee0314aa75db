"""A call's arguments against the capture: the flat graph inputs (state first), the specialised scalars, and the
rank, dtype, device and sizes of every tensor.

    >>> flatten_call(captured, (torch.randn(4, 8),), {})
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sympy
import torch
import torch.utils._pytree as pytree

from fusionlab.capture.guards import check_guards
from fusionlab.capture.result import CaptureResult


def flatten_call(captured: CaptureResult, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    """User arguments -> the graph's tensor inputs (state first), checking the specialised scalars and the modules'
    modes."""
    leaves, spec = pytree.tree_flatten((args, kwargs))
    if spec != captured.input_spec:
        expected_args, expected_kwargs = pytree.tree_unflatten([None] * captured.input_spec.num_leaves,
                                                               captured.input_spec)
        raise TypeError(f"called with {len(args)} positional argument(s) and keywords {sorted(kwargs)} holding "
                        f"{len(leaves)} values; the example inputs were {len(expected_args)} positional argument(s) "
                        f"and keywords {sorted(expected_kwargs)} holding {captured.input_spec.num_leaves} values: pass "
                        "arguments the way the example inputs were passed (or explore again)")
    for position, expected in captured.constant_leaves:
        value = leaves[position]
        same_nan = isinstance(value, float) and isinstance(expected, float) and value != value and expected != expected
        if not same_nan and (type(value) is not type(expected) or value != expected):
            raise ValueError(f"argument {position} was {expected!r} at capture and is {value!r} now: "
                             "Python scalars are specialised into the graph; explore again with the new value")
    tensors = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
    source = captured.state
    if source is not None and (source.roots or source.places):
        source.check()
        named = source.named()
        tensors = [named[spec.name][0].detach() for spec in captured.inputs if spec.kind != "input"] + tensors
    return tensors


class InputMismatch(ValueError):
    """A call's inputs differ from the captured ones in rank, dtype, device or a fixed size."""


def check_aliasing(captured: CaptureResult, tensors: Sequence[torch.Tensor]) -> None:
    """An input the function writes to must not share memory with another input: eager would see the write through
    the other one, the captured program (which reads each input as its own tensor) would not. Inputs that share a
    storage without overlapping (two rows of one matrix), or that are only read, are fine."""
    if not captured.mutations:
        return
    written = {m.input_index for m in captured.mutations}
    spans: dict[int, list[tuple[int, int, int]]] = {}  # storage -> (input, first byte, end byte)
    for index, tensor in enumerate(tensors):
        if tensor.numel() == 0:
            continue
        extent = 1 + sum((int(size) - 1) * abs(int(stride)) for size, stride in zip(tensor.shape, tensor.stride()))
        first = int(tensor.storage_offset()) * tensor.element_size()
        spans.setdefault(tensor.untyped_storage().data_ptr(), []).append(
            (index, first, first + extent * tensor.element_size()))
    for shared in spans.values():
        if len(shared) < 2:
            continue
        for index, first, end in shared:
            if index not in written:
                continue
            for other, other_first, other_end in shared:
                if other != index and first < other_end and other_first < end:
                    name, other_name = captured.inputs[index].name, captured.inputs[other].name
                    raise InputMismatch(
                        f"inputs {name!r} and {other_name!r} share memory, and the function writes to {name!r} in "
                        "place: the captured program reads each input as its own tensor, so it would not see that "
                        f"write through the other. Pass separate tensors ({other_name}.clone())")


def check_inputs(captured: CaptureResult, tensors: Sequence[torch.Tensor]) -> None:
    """Rank, dtype and device must match the capture; fixed sizes must match; symbolic ones must agree."""
    if len(tensors) != len(captured.inputs):
        raise InputMismatch(f"expected {len(captured.inputs)} tensors, got {len(tensors)}")
    values: dict[sympy.Symbol, int] = {}
    for binding in captured.symbols:
        values[binding.symbol] = int(tensors[binding.input_index].shape[binding.dim])
    for spec, tensor in zip(captured.inputs, tensors):
        expected = spec.type
        where = f"input {spec.name!r}"
        if not isinstance(tensor, torch.Tensor):
            raise InputMismatch(f"{where} is a {type(tensor).__name__}, expected a tensor")
        if tensor.dim() != expected.rank:
            raise InputMismatch(f"{where} has rank {tensor.dim()} (shape {tuple(tensor.shape)}); it was captured "
                                f"with rank {expected.rank} ({expected.text()}): explore again for this rank")
        if tensor.dtype != expected.dtype:
            raise InputMismatch(f"{where} is {tensor.dtype}; it was captured as {expected.dtype}: convert it "
                                f"(.to({expected.dtype})) or explore again")
        if torch.device(spec.device).type != tensor.device.type:
            raise InputMismatch(f"{where} is on {tensor.device}; it was captured on {spec.device}: move it or "
                                "explore again with inputs on that device")
        for dim, (size, want) in enumerate(zip(tensor.shape, expected.shape)):
            wanted = int(want.xreplace(values)) if isinstance(want, sympy.Expr) else int(want)
            if size != wanted:
                bound = any(captured.inputs[b.input_index] is spec and b.dim == dim for b in captured.symbols)
                if bound and not isinstance(want, sympy.Expr):
                    check_guards(captured, tensors)  # a dynamic size the function specialised: say where
                hint = ("use dynamic=True to vary the leading dimension" if not captured.symbols
                        else "only leading dimensions are dynamic")
                raise InputMismatch(f"{where} has size {size} in dimension {dim}; it was captured with "
                                    f"{expected.text()} (expecting {wanted}): {hint}, or explore again")
    for value in values.values():
        if value < 2:
            raise InputMismatch(f"a dynamic leading size of {value} is specialised away by tracing (sizes 0 and 1 "
                                "are fixed at capture): explore again with this size")
