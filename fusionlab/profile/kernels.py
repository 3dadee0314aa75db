"""Every kernel of a profiled graph: its group, module, bytes and FLOPs, its time and its share of the roofline.

On CUDA a kernel's time is measured (the CUDA profiler's kernel events, by our kernel names); on a CPU, where the
kernels run under Triton's interpreter, it is the time model's (`fusionlab.measure.devices.model_time`: bytes
and FLOPs on a GPU profile), and the row says "modelled". The modelled timeline issues one launch per kernel
(the profile's launch overhead on the host) and starts a kernel when both its launch and the previous kernel are
done, as one CUDA stream does.

    >>> rows = kernel_records(graph_profile_exploration, graph="graph 0 (inference)", profile="H200")
    >>> rows[0].time_us, rows[0].timing
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from fusionlab.measure.devices import DeviceProfile, get_profile
from fusionlab.measure.timing import node_flops

__all__ = ["KernelRecord", "kernel_records", "launched", "modelled_timeline"]


@dataclass(frozen=True)
class KernelRecord:
    """One launch of a graph's program: a generated kernel or an extern call (cuBLAS's mm, say).

    `ideal_us` is the roofline time (bytes over bandwidth or FLOPs over peak, whichever is longer) on the device
    profile; `roofline_pct` is ideal over time. `timing` says where `time_us` came from: "measured (CUDA profiler)"
    or "modelled on H200". Example: `KernelRecord("graph 0 (inference)", "inference", "pointwise_3_add_gelu", ...)`.
    """

    graph: str
    role: str
    kernel: str
    group: str
    kind: str
    module: str
    modules: str
    bytes: int
    flops: int
    ideal_us: float
    time_us: float | None
    roofline_pct: float | None
    timing: str

    def row(self) -> dict[str, Any]:
        return asdict(self)


def launched(ex: Any) -> list[tuple[Any, str]]:
    """The groups a call launches, in program order, with the name their launch has (the kernel's, else the
    group's)."""
    kernel_names = {kernel.group: kernel.name for kernel in ex.generated.kernels}
    return [(group, kernel_names.get(group.name, group.name)) for group in ex.fused.groups
            if group.is_kernel or group.kind == "extern"]


def kernel_records(ex: Any, *, graph: str, role: str, profile: str | DeviceProfile = "H200",
                   measured_us: Mapping[str, float] | None = None) -> list[KernelRecord]:
    """The launches of one exploration's program as records. `measured_us` (kernel name -> µs per call, from the
    CUDA profiler) replaces the modelled time where it has the kernel; without it every time is modelled."""
    device = get_profile(profile)
    flops_by_node = node_flops(ex.captured.graph_module)
    records = []
    for group, name in launched(ex):
        moved = group.bytes_read + group.bytes_written
        flops = sum(flops_by_node.get(origin, 0) for origin in group.origins)
        ideal = max(moved / device.memory_bandwidth_bytes_per_s, flops / device.bf16_flops_per_s) * 1e6
        if measured_us is not None:
            time = measured_us.get(name)
            timing = "measured (CUDA profiler)" if time is not None else "not measured (no profiler event)"
        else:
            time = ideal + device.launch_overhead_s * 1e6  # a kernel's share of the model's launch cost
            timing = f"modelled on {device.name}"
        records.append(KernelRecord(
            graph=graph, role=role, kernel=name, group=group.name, kind=str(group.kind), module=group.module,
            modules=", ".join(group.modules), bytes=moved, flops=flops, ideal_us=ideal, time_us=time,
            roofline_pct=100 * ideal / time if time else None, timing=timing))
    return records


def modelled_timeline(records: list[KernelRecord], profile: str | DeviceProfile = "H200", *, start_us: float = 0.0
                      ) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """One stream's timeline of `records` on the device profile: (host launch intervals, kernel intervals) in µs.

    The host issues launches back to back, each taking the profile's launch overhead; a kernel starts when its
    launch is issued and the previous kernel has finished, and runs for its roofline time."""
    device = get_profile(profile)
    launch = device.launch_overhead_s * 1e6
    host: list[tuple[float, float]] = []
    kernels: list[tuple[float, float]] = []
    issued = previous_end = start_us
    for record in records:
        host.append((issued, issued + launch))
        issued += launch
        begin = max(issued, previous_end)
        previous_end = begin + record.ideal_us
        kernels.append((begin, previous_end))
    return host, kernels
