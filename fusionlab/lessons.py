"""What the course's lessons compute about their own examples, so that a lesson's words can be checked.

- `lesson_device()`: where a lesson runs (CUDA when present: measured kernel times; else the CPU: modelled ones).
- `row_passes(kernel)`: how many times a generated kernel walks each row, and what each pass loads and stores,
  read from the kernel's source (lesson 3's "the looped softmax reads the row three times").
- `copy_kernels(ex)`: the kernels that only copy, the strided view each one makes contiguous and the op that
  needs it (lesson 6's `pointwise_*_copy`).
- `launch_bound_note(report)`: whether a benchmark's modelled kernels are priced by their launches or their bytes.
- `recorded_kernels(workload)`: the per-kernel times measured on the H200 and shipped with fusionlab.

    >>> passes = row_passes(fl.explore(softmax, x, looped_reductions=True).generated.kernels[0])
    >>> passes.reads, passes.writes    # the maximum and the sum of exponentials in one loop, then the outputs
    (2, 1)
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from fusionlab.measure.devices import get_profile
from fusionlab.measure.report import RECORDED_RESULTS, recorded_results

__all__ = ["CopyKernel", "RowPass", "RowPasses", "copy_kernels", "figure", "launch_bound_note", "lesson_device",
           "lesson_size", "recorded_kernels", "row_passes", "times"]

RECORDED_KERNELS = RECORDED_RESULTS.with_name("bench_h200_kernels.csv")
_TIMES = {1: "once", 2: "twice", 3: "three times", 4: "four times", 5: "five times"}


def lesson_device() -> torch.device:
    """CUDA when a GPU is present (kernel times are measured), else the CPU (kernel times are modelled)."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def lesson_size(device: torch.device | str) -> str:
    """The workload size a lesson builds on `device`: "gpu" on CUDA (bandwidth-bound), "cpu" elsewhere."""
    return "gpu" if torch.device(device).type == "cuda" else "cpu"


def figure(value: float | None, unit: str = "ms", scale: float = 1.0) -> str:
    """A profile's figure as the lessons print it: "0.128 ms", or "not measured" where the profile has none."""
    if value is None or value != value:  # None, or NaN from a DataFrame
        return "not measured"
    return f"{value * scale:.3g} {unit}"


def times(count: int) -> str:
    """`count` as the lessons write it: once, twice, three times, ..."""
    return _TIMES.get(count, f"{count} times")


@dataclass(frozen=True)
class RowPass:
    """One walk over the rows: the pointer arguments it loads from and stores to."""

    loads: tuple[str, ...]
    stores: tuple[str, ...]


@dataclass(frozen=True)
class RowPasses:
    """The passes a kernel makes over each row (a loop over the row is one pass; a persistent kernel makes one).

    Example: `row_passes(looped.generated.kernels[0])` of a looped softmax -> 2 passes, reads x twice, writes once.
    """

    kernel: str
    passes: tuple[RowPass, ...]

    @property
    def reads(self) -> int:
        """Passes that load from an input (each reads the row from memory again)."""
        return sum(1 for walk in self.passes if walk.loads)

    @property
    def writes(self) -> int:
        return sum(1 for walk in self.passes if walk.stores)

    def describe(self) -> str:
        inputs = sorted({name for walk in self.passes for name in walk.loads})
        return (f"{self.kernel}: {len(self.passes)} pass{'es' if len(self.passes) != 1 else ''} over each row; "
                f"reads {', '.join(inputs) or 'nothing'} {times(self.reads)}, writes {times(self.writes)}")

    def __repr__(self) -> str:
        return self.describe()


def _pointers(tree: ast.AST, call: str) -> tuple[str, ...]:
    """The `in_*`/`out_*` arguments that `tl.<call>(...)` calls in `tree` address, in order, once each."""
    names: list[str] = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == call
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "tl" and node.args):
            for leaf in ast.walk(node.args[0]):
                if isinstance(leaf, ast.Name) and leaf.id.startswith(("in_", "out_")):
                    name = leaf.id.split("_", 1)[1]
                    if name not in names:
                        names.append(name)
    return tuple(names)


def row_passes(kernel: Any) -> RowPasses:
    """The passes of a generated kernel (a `KernelSource` or its source text) over its rows, from its source."""
    source = getattr(kernel, "source", kernel)
    if not isinstance(source, str):
        raise TypeError(f"row_passes needs a generated kernel (ex.generated.kernels[i]) or its source, got "
                        f"{type(kernel).__name__}")
    function = next((node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.FunctionDef)
                     and any("jit" in ast.unparse(d) for d in node.decorator_list)), None)
    if function is None:
        raise ValueError("row_passes found no @triton.jit function in the source it was given: pass a kernel from "
                         "ex.generated.kernels")
    passes = [RowPass(_pointers(statement, "load"), _pointers(statement, "store"))
              for statement in function.body if isinstance(statement, ast.For)]
    rest = ast.Module(body=[s for s in function.body if not isinstance(s, ast.For)], type_ignores=[])
    outside = RowPass(_pointers(rest, "load"), _pointers(rest, "store"))
    if outside.loads or outside.stores:  # a persistent kernel: the whole row at once, one pass
        passes.append(outside)
    return RowPasses(function.name, tuple(passes))


@dataclass(frozen=True)
class CopyKernel:
    """A kernel that only copies: a strided view (`shape`, `strides`) that `needed_by` reads as `reshaped_to`."""

    kernel: str
    aten_node: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    reshaped_to: tuple[int, ...]
    needed_by: str
    bytes_moved: int

    @property
    def why(self) -> str:
        return (f"{self.needed_by} reads it as {list(self.reshaped_to)}; a view of {list(self.shape)} with strides "
                f"{list(self.strides)} cannot be reshaped to that in place, so aten's reshape copies it (eager "
                "PyTorch makes this copy too)")


_VIEW_TARGETS = ("view", "_unsafe_view", "reshape", "expand", "transpose", "permute", "t", "alias")


def _op_name(node: torch.fx.Node) -> str:
    return str(getattr(node.target, "__name__", node.target)).split(".")[0]


def _consumer(node: torch.fx.Node) -> tuple[str, tuple[int, ...]]:
    """The first user of `node` past views (the op that needed the copy) and the shape the first view gave it."""
    frontier = list(node.users)
    reshaped: tuple[int, ...] = ()
    while frontier:
        user = frontier.pop(0)
        if user.op == "call_function" and _op_name(user) in _VIEW_TARGETS:
            value = user.meta.get("val")
            if not reshaped and value is not None:
                reshaped = tuple(int(s) for s in value.shape)
            frontier.extend(user.users)
            continue
        name = _op_name(user)
        return (user.name if user.name == name else f"{user.name} ({name})"), reshaped
    return "the output", reshaped


def copy_kernels(ex: Any) -> tuple[CopyKernel, ...]:
    """Every kernel of `ex` whose primitives are all copies, with the view it makes contiguous and who needs it."""
    graph = ex.decomposed.graph
    aten = {node.name: node for node in ex.captured.graph_module.graph.nodes}
    found = []
    for group in ex.fused.kernels:
        computing = [graph[n] for n in group.nodes if graph[n].kind not in ("view", "input")]
        origins = {n.origin for n in computing}  # (a permute the copy reads through is in the kernel too)
        if not computing or any(n.op != "copy" for n in computing) or len(origins) != 1:
            continue
        node = aten.get(origins.pop())
        if node is None or not node.args or not isinstance(node.args[0], torch.fx.Node):
            continue
        value = node.args[0].meta.get("val")
        shape = tuple(int(s) for s in value.shape) if value is not None else ()
        strides = tuple(int(s) for s in value.stride()) if value is not None else ()
        needed_by, reshaped = _consumer(node)
        found.append(CopyKernel(group.name, node.name, shape, strides, reshaped or shape, needed_by,
                                group.bytes_read + group.bytes_written))
    return tuple(found)


def launch_bound_note(report: Any) -> str:
    """Whether fusionlab's modelled kernels in `report` are priced by launches (small sizes) or by bytes."""
    profile = get_profile(report.profile)
    kernels = [row for row in report.rows if row.variant == "fusionlab" and row.kernel and row.timing == "modelled"
               and row.median_ms]
    if not kernels:
        return "no modelled kernel times in this report (on a GPU every kernel time is measured)"
    launch_ms = profile.launch_overhead_s * 1e3
    share = sum(min(launch_ms, row.median_ms) for row in kernels) / sum(row.median_ms for row in kernels)
    bound = [row for row in kernels if launch_ms >= 0.5 * row.median_ms]
    verdict = ("launch-bound: every kernel costs about one launch whatever it moves, so the bars are alike; "
               "a GPU-sized input (or the recorded H200 run) shows the bytes" if share > 0.5 else
               "bandwidth-bound: the bars follow the bytes each kernel moves")
    return (f"{len(bound)} of {len(kernels)} modelled kernels spend at least half their time launching "
            f"({profile.launch_overhead_s * 1e6:.1f} µs each on {profile.name}); launches are {share:.0%} of the "
            f"modelled kernel time: {verdict}")


def recorded_kernels(workload: str, variants: Sequence[str] = ("fusionlab", "inductor"),
                     timing: str = "measured") -> Any:
    """A pandas DataFrame of the per-kernel times shipped with fusionlab (measured on the H200) for `workload`."""
    import pandas

    rows = [row for row in recorded_results(workload, RECORDED_KERNELS)
            if row.get("variant") in variants and row.get("timing") == timing]
    if not rows:
        raise ValueError(f"no recorded {timing} kernels for workload {workload!r} in {RECORDED_KERNELS.name}: "
                         "the named workloads of `fusionlab bench` have them")
    table = pandas.DataFrame(rows)
    for column in ("median_ms", "bytes", "achieved_gbps", "pct_of_copy_bw"):
        table[column] = pandas.to_numeric(table[column], errors="coerce")
    table["median_us"] = table.pop("median_ms") * 1e3
    return table[["variant", "kernel", "median_us", "bytes", "achieved_gbps", "pct_of_copy_bw", "device"]]
