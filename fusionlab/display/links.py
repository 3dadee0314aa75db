"""What belongs to what, across the stages and beside Inductor: read-only lookups the views share.

A selection is a name: a fusion group, a decomposed node, a captured aten node or a graph input. These
helpers turn it into the group it lives in, that group's Triton kernel and wrapper lines, and the Inductor
kernels that cover the same aten nodes.

    >>> group = find_group(ex.fused, "exp")           # the group holding the primitive `exp`
    >>> kernel_of_group(ex.generated, group.name).source
    >>> inductor_kernels_of(group, ex.inductor())      # Inductor's kernels over the same aten nodes
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fusionlab.codegen.kernel import KernelSource
from fusionlab.fusion.fuse import FusionGroup
from fusionlab.stages import Fused, Generated

__all__ = ["extern_calls", "find_group", "inductor_kernels_of", "kernel_body", "kernel_of_group",
           "wrapper_sections"]


def find_group(fused: Fused, name: str | None) -> FusionGroup | None:
    """The group named `name`, or holding the node `name`, or covering the aten node `name`; else None."""
    if not name:
        return None
    for group in fused.groups:
        if group.name == name:
            return group
    for group in fused.groups:
        if name in group.nodes:
            return group
    covering = [g for g in fused.groups if name in g.origins]
    covering.sort(key=lambda g: (not g.is_kernel, fused.groups.index(g)))
    return covering[0] if covering else None


def kernel_of_group(generated: Generated, group_name: str) -> KernelSource | None:
    """fusionlab's Triton kernel for the group (None for extern and view groups)."""
    for kernel in generated.kernels:
        if kernel.group == group_name:
            return kernel
    return None


def wrapper_sections(generated: Generated) -> dict[str, str]:
    """Each group's lines of the wrapper program: allocation and launch, extern call, or view (as the program
    writer recorded them, without the function body's indent)."""
    lines = generated.wrapper.splitlines()
    return {section.group: "\n".join(line[4:] if line.startswith("    ") else line
                                      for line in lines[section.first - 1:section.last])
            for section in generated.program.sections}


def extern_calls(generated: Generated) -> tuple[str, ...]:
    """The wrapper lines that call extern ops (eager PyTorch / cuBLAS between kernels)."""
    return tuple(line.strip() for line in generated.wrapper.splitlines() if "# extern:" in line)


def inductor_kernels_of(group: FusionGroup, view: Any) -> tuple[Any, ...]:
    """Inductor's kernels that cover any aten node of `group`, most shared nodes first, then launch order."""
    if view is None:
        return ()
    origins = set(group.origins)
    scored = []
    for order, kernel in enumerate(view.kernels):
        shared = len(origins & set(kernel.node_names))
        if shared:
            scored.append((-shared, order, kernel))
    scored.sort(key=lambda item: item[:2])
    return tuple(kernel for _, _, kernel in scored)


def node_names(names: Sequence[str]) -> str:
    """A short, comma-separated list (the first eight, then a count)."""
    shown = ", ".join(names[:8])
    return shown + (f", ... ({len(names) - 8} more)" if len(names) > 8 else "")


def kernel_body(source: str) -> str:
    """A Triton kernel from its decorators on, without the module preamble (imports, helpers) around it."""
    lines = source.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("@")), 0)
    return "\n".join(lines[start:]).rstrip() + "\n"
