"""Device profiles, the time model and the copy-bandwidth measurement."""

from __future__ import annotations

import time

import pytest
import torch

from fusionlab.measure.devices import (
    PROFILES,
    DeviceProfile,
    get_profile,
    measure_copy_bandwidth,
    model_time,
    profile_names,
)


def test_profiles_are_labelled_and_ordered_by_bandwidth() -> None:
    assert set(profile_names()) == {"H200", "H100", "A100", "L4"}
    assert PROFILES["H200"].memory_bandwidth_bytes_per_s == 4.25e12
    assert PROFILES["H200"].bf16_flops_per_s == 790e12
    assert "measured" in PROFILES["H200"].source
    for name in ("H100", "A100", "L4"):
        assert "datasheet" in PROFILES[name].source
    bandwidths = [PROFILES[n].memory_bandwidth_bytes_per_s for n in ("H200", "H100", "A100", "L4")]
    assert bandwidths == sorted(bandwidths, reverse=True)


def test_get_profile_by_name_or_object() -> None:
    assert get_profile("h100") is PROFILES["H100"]
    custom = DeviceProfile("mine", 1e12, 1e-6, 1e14)
    assert get_profile(custom) is custom
    with pytest.raises(ValueError, match="H200, H100, A100, L4"):
        get_profile("B200")


def test_model_time_is_the_roofline_plus_launches() -> None:
    h200 = PROFILES["H200"]
    assert model_time(4.25e12, 0, 0, "H200") == pytest.approx(1.0)
    assert model_time(0, 10, 0, h200) == pytest.approx(10 * h200.launch_overhead_s)
    memory_bound = model_time(4.25e9, 1, 1e9, h200)
    assert memory_bound == pytest.approx(1e-3 + h200.launch_overhead_s)
    compute_bound = model_time(1e6, 1, 790e12, h200)
    assert compute_bound == pytest.approx(1.0 + h200.launch_overhead_s)
    with pytest.raises(ValueError, match="non-negative"):
        model_time(-1, 0, 0, h200)


def test_cpu_copy_bandwidth_is_measured_once() -> None:
    first = measure_copy_bandwidth("cpu")
    start = time.perf_counter()
    second = measure_copy_bandwidth(torch.device("cpu"))
    assert first == second > 1e8
    assert time.perf_counter() - start < 0.01


def test_unknown_device_is_refused() -> None:
    with pytest.raises(ValueError, match="'cuda' or 'cpu'"):
        measure_copy_bandwidth("meta")


@pytest.mark.gpu
def test_cuda_copy_bandwidth_is_near_the_profile() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device here")
    measured = measure_copy_bandwidth("cuda")
    assert 1e11 < measured < 1e13
    if "H200" in torch.cuda.get_device_name():
        assert measured == pytest.approx(PROFILES["H200"].memory_bandwidth_bytes_per_s, rel=0.15)
