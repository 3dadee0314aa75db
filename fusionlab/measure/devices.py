"""Device profiles and the roofline time model: how long moving bytes and doing FLOPs should take.

A profile holds the three numbers the model needs. The H200 figures were measured on the project's GPU
machine; the others are derived from vendor datasheets, scaled by the fraction of its datasheet figure the
H200 reached (copy: 4.25 of 4.8 TB/s, 0.885; bf16 matmul: 790 of 989 TFLOP/s, 0.80), and say so in `source`.

    >>> model_time(2 * 2**30, launches=1, flops=0, profile="H200")   # 2 GiB through an H200
    0.000508...
"""

from __future__ import annotations

import functools
import statistics
import time
from dataclasses import dataclass

import torch

__all__ = [
    "DeviceProfile",
    "PROFILES",
    "get_profile",
    "measure_copy_bandwidth",
    "model_time",
    "profile_names",
]

# The fraction of a datasheet figure the H200 reached on the project's machine (see the module docstring).
_BANDWIDTH_EFFICIENCY = 4.25 / 4.8
_MATMUL_EFFICIENCY = 790.0 / 989.0


@dataclass(frozen=True)
class DeviceProfile:
    """What the time model needs to know about one GPU.

    `memory_bandwidth_bytes_per_s` counts bytes read plus bytes written, as a device-to-device copy does.
    `launch_overhead_s` is the gap one more kernel launch adds back to back (a typical measured value,
    not a datasheet figure). Example: `DeviceProfile("H200", 4.25e12, 3e-6, 790e12)`.
    """

    name: str
    memory_bandwidth_bytes_per_s: float
    launch_overhead_s: float
    bf16_flops_per_s: float
    source: str = ""

    def __repr__(self) -> str:
        return (
            f"DeviceProfile({self.name}: {self.memory_bandwidth_bytes_per_s / 1e12:.2f} TB/s, "
            f"{self.bf16_flops_per_s / 1e12:.0f} bf16 TFLOP/s, {self.launch_overhead_s * 1e6:.1f} us/launch)"
        )


def _from_datasheet(name: str, bandwidth: float, bf16_flops: float) -> DeviceProfile:
    return DeviceProfile(
        name=name,
        memory_bandwidth_bytes_per_s=bandwidth * _BANDWIDTH_EFFICIENCY,
        launch_overhead_s=3e-6,
        bf16_flops_per_s=bf16_flops * _MATMUL_EFFICIENCY,
        source=(
            f"datasheet-derived: {bandwidth / 1e12:.3g} TB/s and {bf16_flops / 1e12:.0f} dense bf16 TFLOP/s, "
            "scaled by the fraction the H200 reached"
        ),
    )


PROFILES: dict[str, DeviceProfile] = {
    "H200": DeviceProfile(
        name="H200",
        memory_bandwidth_bytes_per_s=4.25e12,
        launch_overhead_s=3e-6,
        bf16_flops_per_s=790e12,
        source="measured on the project's H200: device-to-device copy and an 8192^3 bf16 matmul",
    ),
    "H100": _from_datasheet("H100", bandwidth=3.35e12, bf16_flops=989e12),
    "A100": _from_datasheet("A100", bandwidth=2.039e12, bf16_flops=312e12),
    "L4": _from_datasheet("L4", bandwidth=0.3e12, bf16_flops=121e12),
}


def profile_names() -> tuple[str, ...]:
    """The names `get_profile` accepts."""
    return tuple(PROFILES)


def get_profile(profile: str | DeviceProfile) -> DeviceProfile:
    """A profile by name (case-insensitive), or the profile itself when one is given."""
    if isinstance(profile, DeviceProfile):
        return profile
    for name, candidate in PROFILES.items():
        if name.lower() == str(profile).lower():
            return candidate
    raise ValueError(
        f"no device profile named {profile!r}: choose one of {', '.join(PROFILES)}, "
        "or pass a DeviceProfile(name, memory_bandwidth_bytes_per_s, launch_overhead_s, bf16_flops_per_s)"
    )


def model_time(bytes_moved: float, launches: int, flops: float, profile: str | DeviceProfile) -> float:
    """Seconds a program should take: max(bytes / bandwidth, flops / peak) + launches * overhead."""
    device = get_profile(profile)
    if bytes_moved < 0 or launches < 0 or flops < 0:
        raise ValueError(
            f"model_time needs non-negative counts, got bytes_moved={bytes_moved}, launches={launches}, "
            f"flops={flops}"
        )
    transfer = bytes_moved / device.memory_bandwidth_bytes_per_s
    arithmetic = flops / device.bf16_flops_per_s
    return max(transfer, arithmetic) + launches * device.launch_overhead_s


def measure_copy_bandwidth(device: str | torch.device = "cuda") -> float:
    """Bytes per second (read plus written) of one large copy on `device`; measured once per process."""
    return _measure_copy_bandwidth(str(torch.device(device)))


@functools.cache
def _measure_copy_bandwidth(device_name: str) -> float:
    device = torch.device(device_name)
    if device.type == "cuda":
        return _measure_cuda_copy(device)
    if device.type == "cpu":
        return _measure_cpu_copy()
    raise ValueError(f"cannot measure copy bandwidth on {device_name!r}: use 'cuda' or 'cpu'")


def _measure_cuda_copy(device: torch.device) -> float:
    from triton.testing import do_bench

    # 1 GiB each way: far past the L2 (60 MB on an H200), so the copy streams from HBM.
    elements = 2**30 // 4
    source = torch.empty(elements, dtype=torch.float32, device=device).uniform_()
    target = torch.empty_like(source)
    with torch.cuda.device(device):
        milliseconds = do_bench(lambda: target.copy_(source), return_mode="median")
    moved = 2 * source.numel() * source.element_size()  # read once, written once
    return moved / (float(milliseconds) / 1e3)


def _measure_cpu_copy() -> float:
    # 128 MiB each way: past any CPU cache.
    elements = 2**27 // 4
    source = torch.rand(elements)
    target = torch.empty_like(source)
    target.copy_(source)
    seconds = []
    for _ in range(7):
        start = time.perf_counter()
        target.copy_(source)
        seconds.append(time.perf_counter() - start)
    moved = 2 * source.numel() * source.element_size()
    return moved / statistics.median(seconds)
