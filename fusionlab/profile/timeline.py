"""A trace for Perfetto (ui.perfetto.dev) and chrome://tracing: kernels on a timeline, each annotated with its
fusion group and module, the host's launches beside them.

The file is Chrome's trace-event JSON (`{"traceEvents": [...]}`, times in µs). On CUDA it is the CUDA profiler's
own trace (`torch.profiler ... export_chrome_trace`) with our annotations added to each of our kernels' events;
on a CPU it is the time model's timeline (labelled "modelled" in every process name and event), beside the
eager module calls measured on the CPU.

    >>> trace = modelled_trace(graphs, eager_spans, profile="H200")
    >>> json.dumps(trace)["traceEvents"][0]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fusionlab.measure.devices import DeviceProfile, get_profile
from fusionlab.profile.kernels import KernelRecord, modelled_timeline

__all__ = ["annotate_trace", "kernel_args", "modelled_trace"]

_FUSIONLAB, _EAGER = 1, 2
_HOST, _GPU = 1, 2


def kernel_args(record: KernelRecord) -> dict[str, Any]:
    """What a kernel's trace event says about it."""
    return {"kernel": record.kernel, "group": record.group, "module": record.module, "modules": record.modules,
            "kind": record.kind, "bytes": record.bytes, "flops": record.flops, "graph": record.graph,
            "timing": record.timing}


def _name(pid: int, tid: int | None, name: str) -> dict[str, Any]:
    if tid is None:
        return {"ph": "M", "pid": pid, "name": "process_name", "args": {"name": name}}
    return {"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": name}}


def modelled_trace(graphs: Sequence[tuple[str, Sequence[KernelRecord]]],
                   eager_spans: Sequence[tuple[str, float, float, int]] = (), *,
                   profile: str | DeviceProfile = "H200", model_name: str = "model",
                   eager_note: str = "measured on the CPU") -> dict[str, Any]:
    """The time model's timeline of each graph's kernels, one graph after the other, and the eager module calls
    of one measured round (`eager_spans`: path, start s, end s, depth)."""
    device = get_profile(profile)
    label = f"modelled on {device.name}"
    events: list[dict[str, Any]] = [
        _name(_FUSIONLAB, None, f"fusionlab ({label}: bytes and launches, not measured)"),
        _name(_FUSIONLAB, _HOST, "host: kernel launches"),
        _name(_FUSIONLAB, _GPU, "GPU: kernels"),
    ]
    clock = 0.0
    for graph, records in graphs:
        host, kernels = modelled_timeline(list(records), device, start_us=clock)
        end = max([clock] + [e for _, e in kernels] + [e for _, e in host])
        events.append({"ph": "X", "pid": _FUSIONLAB, "tid": _HOST, "name": graph, "cat": "graph", "ts": clock,
                       "dur": end - clock, "args": {"timing": label}})
        for record, (launch_start, launch_end), (start, finish) in zip(records, host, kernels):
            events.append({"ph": "X", "pid": _FUSIONLAB, "tid": _HOST, "name": f"launch {record.kernel}",
                           "cat": "launch", "ts": launch_start, "dur": launch_end - launch_start,
                           "args": {"kernel": record.kernel, "module": record.module, "timing": label}})
            events.append({"ph": "X", "pid": _FUSIONLAB, "tid": _GPU, "name": record.kernel, "cat": "kernel",
                           "ts": start, "dur": finish - start, "args": kernel_args(record)})
        clock = end
    if eager_spans:
        events += [_name(_EAGER, None, f"eager ({eager_note}, median round)"), _name(_EAGER, _HOST, "modules")]
        for path, start, end, depth in eager_spans:
            events.append({"ph": "X", "pid": _EAGER, "tid": _HOST, "name": path or model_name, "cat": "module",
                           "ts": start * 1e6, "dur": (end - start) * 1e6, "args": {"module": path, "depth": depth}})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"fusionlab": f"fusionlab's kernels {label}; eager {eager_note}"}}


def annotate_trace(trace: dict[str, Any], records: Sequence[KernelRecord]) -> dict[str, Any]:
    """The CUDA profiler's trace with our kernels' events annotated (by kernel name; a name two graphs share is
    annotated with both graphs' names)."""
    by_name: dict[str, list[KernelRecord]] = {}
    for record in records:
        by_name.setdefault(record.kernel, []).append(record)
    for event in trace.get("traceEvents", []):
        found = by_name.get(str(event.get("name", "")))
        if not found or event.get("cat") not in ("kernel", "Kernel", None):
            continue
        args = kernel_args(found[0])
        if len(found) > 1:
            args["graph"] = " or ".join(sorted({r.graph for r in found}))
        event.setdefault("args", {}).update(args)
    trace.setdefault("otherData", {})["fusionlab"] = "measured by the CUDA profiler; our kernels annotated"
    return trace
