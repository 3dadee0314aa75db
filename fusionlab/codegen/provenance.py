"""The comment lines that say where a kernel's ops came from: `# module: h.0.attn (model.py:12 in forward)`.

They go above `@triton.jit`, outside the function Triton hashes, so a moved source line never recompiles a kernel.
Only kernels with a module path get them (ops of a model's submodules): a plain function's kernels stay as they were.

    >>> module_comments(graph, group)
    ['# module: h.0.attn.c_attn (modeling_gpt2.py:293 in forward)']
"""

from __future__ import annotations

from fusionlab.fusion.fuse import FusionGroup
from fusionlab.ir import Graph
from fusionlab.names import comment

#: at most this many lines per kernel; a kernel over many modules says how many more
MOST_LINES = 8


def places(graph: Graph, group: FusionGroup) -> list[tuple[str, str]]:
    """(module, source) of the group's compute nodes, in program order, each once."""
    nodes = [graph[name] for name in group.nodes]
    computing = [node for node in nodes if node.kind not in ("view", "input")] or nodes
    return list(dict.fromkeys((node.module, node.source) for node in computing))


def module_comments(graph: Graph, group: FusionGroup) -> list[str]:
    """One `# module: <module> (<source>)` line per distinct place in the group; none when no node has a module."""
    found = places(graph, group)
    if not any(module for module, _ in found):
        return []
    lines = [f"# module: {comment(module or '(top level)')}" + (f" ({comment(source)})" if source else "")
             for module, source in found[:MOST_LINES]]
    if len(found) > MOST_LINES:
        lines.append(f"# module: ... and {len(found) - MOST_LINES} more places")
    return lines
