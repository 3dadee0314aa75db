"""Which of a kernel's launch arguments may differ, in what Triton specialises on, from one call to the next.

After a shape's first launch, a kernel is launched through its compiled launcher with no JIT dispatch, keyed by
Triton's argument specialisation (runtime/direct.py) of the arguments that can change from call to call only. The
program writer (codegen/program.py) lists their positions per kernel (`Program.launch_checks`), asking `LaunchChecks`
of each argument. Listed: inputs and views of them (the caller passes them), strides read at run time (an extern's
result follows its inputs' layout: a convolution of a channels-last input), sizes in a program with symbolic sizes,
and a slice of an extern's result whose layout is not known. Not listed, the same on every call: buffers the program
allocates (CUDA's allocator aligns them to 512 bytes), the results of the extern ops known to allocate theirs
(`FRESH_RESULTS`), views of those at offsets fixed when the program is built, sizes read at run time in a program
without symbolic sizes (the inputs' sizes are checked on every call), and numbers written into the source
(program.py: `_literal`).

    >>> checks = LaunchChecks(graph, wrapper_views, layouts, extern_nodes, allocated, symbolic=False)
    >>> checks.same_address("mm"), checks.same_address("x")  # an aten.mm result, an input
    (True, False)
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from fusionlab.codegen.kernel import KernelArgument
from fusionlab.ir import Dim, Graph

# Extern ops that always allocate their results (no view of an input, no input returned as it is: `dequantize` of a
# float tensor, `unsafe_split` and dropout in eval mode do), so a result's address is aligned on every call
FRESH_RESULTS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::convolution",
                           "aten::_convolution", "aten::convolution_backward", "aten::max_pool2d_with_indices",
                           "aten::max_pool2d_with_indices_backward", "aten::avg_pool2d", "aten::avg_pool2d_backward",
                           "aten::native_layer_norm", "aten::native_layer_norm_backward", "aten::native_batch_norm",
                           "aten::native_batch_norm_backward", "aten::_native_batch_norm_legit_no_training",
                           "aten::embedding_dense_backward", "aten::_softmax", "aten::_log_softmax"})
FRESH_PREFIXES = ("aten::_scaled_dot_product_", "aten::_flash_attention_", "aten::_efficient_attention_")


@dataclass(frozen=True)
class LaunchChecks:
    """What the program writer knows of a program's values that decides whether a launch argument is the same on
    every call: the wrapper's views (`wrapper_views`, with the strides and offsets of those known when the program
    is built, `layouts`), the values extern ops return (`extern_nodes`), the kernels' outputs (`allocated`, buffers
    the program allocates), and whether the program has symbolic sizes."""

    graph: Graph
    wrapper_views: Collection[str]
    layouts: Mapping[str, tuple[tuple[Dim, ...], Dim]]
    extern_nodes: Collection[str]
    allocated: Collection[str]
    symbolic: bool

    def same_on_every_call(self, argument: KernelArgument, aliases: Mapping[str, str]) -> bool:
        """A launch argument that is the same, as Triton specialises it, on every call: a tensor at the same address
        (modulo 16), or a size read at run time in a program without symbolic sizes (the inputs' sizes are checked
        on every call). A stride read at run time is not: an extern's result follows its inputs' layout (a
        convolution of a channels-last input), and inputs' strides are the caller's."""
        if argument.role in ("input", "output"):
            return self.same_address(aliases.get(argument.value, argument.value))
        return argument.role == "extent" and not self.symbolic

    def same_address(self, value: str) -> bool:
        """Whether `value` lies at the same address modulo 16 on every call (CUDA's allocator aligns what it
        allocates to 512 bytes): a buffer the program allocates (a kernel's output, the result of an extern op known
        to allocate its result, `FRESH_RESULTS`), or a view of one whose offset is fixed when the program is built.
        An input, or a view of one, is not: the caller passes it. Nor is a slice of an extern's result whose layout
        is not known (its offset follows the result's strides, which follow the inputs' layout)."""
        node = self.graph[value]
        if value in self.wrapper_views:
            if not node.inputs or not self.same_address(node.inputs[0]):
                return False
            offset = self.layouts[value][1] if value in self.layouts else None
            if isinstance(offset, int):
                return True
            return not self.symbolic and node.op not in ("slice", "select")  # views at offset 0
        if value in self.extern_nodes:
            return _allocates(node.param("target"))
        return value in self.allocated


def _allocates(target: Any) -> bool:
    """Whether extern `target` always allocates its results: an op of `FRESH_RESULTS` whose schema returns no
    alias, with a kernel of its own (an op composed of others may return what one of them returns)."""
    schema = getattr(target, "_schema", None)
    if schema is None or not (schema.name in FRESH_RESULTS or schema.name.startswith(FRESH_PREFIXES)):
        return False
    if torch._C._dispatch_has_kernel_for_dispatch_key(target.name(), "CompositeImplicitAutograd"):
        return False
    return all(r.alias_info is None for r in schema.returns)
