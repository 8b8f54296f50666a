"""A device's measured sustained matrix FLOP/s caps the profile's compute factor (DeviceSpec.sustained_flops).

Golden numbers: AMD's max-achievable FLOPs of the MI300X (ROCm blog "Measuring Max-Achievable FLOPs - Part 2",
Table 1: 708 TFLOPs BF16, 1,273 FP8) over its datasheet peaks (1,307.4 and 2,614.9 TFLOPS): 0.5415 and 0.4868, below
default-gpu's assumed prefill compute factor 0.6, so a compute-bound GEMM runs at the sustained rate.
"""

from __future__ import annotations

import dataclasses

import pytest

from serveplan import SpecError, gemm_time, get_hardware, get_profile
from serveplan.specs.hardware import hardware_from_dict


def test_the_mi300x_shares_are_amds_measured_flops_over_the_datasheet_peaks():
    hw = get_hardware("mi300x")
    assert hw.sustained_share("bf16") == pytest.approx(708.0 / 1307.4, rel=1e-12)
    assert hw.sustained_share("fp8") == pytest.approx(1273.0 / 2614.9, rel=1e-12)
    assert get_hardware("h100-sxm").sustained_share("fp8") == 1.0  # none measured: no cap


@pytest.mark.parametrize("dtype, sustained", [("bf16", 708e12), ("fp8", 1273e12)])
def test_a_compute_bound_gemm_runs_at_the_sustained_rate(dtype, sustained):
    hw, pr = get_hardware("mi300x"), get_profile("default-gpu")
    m = n = k = 8192
    op = gemm_time(m, n, k, hardware=hw, profile=pr, dtype=dtype, phase="prefill")
    assert op.compute_s == pytest.approx(2.0 * m * n * k / sustained, rel=1e-9)
    uncapped = gemm_time(m, n, k, hardware=dataclasses.replace(hw, sustained_flops={}), profile=pr, dtype=dtype,
                         phase="prefill")
    assert uncapped.compute_s == pytest.approx(2.0 * m * n * k / (0.6 * hw.flops(dtype)), rel=1e-9)


def test_a_sustained_rate_above_the_peak_or_without_one_is_refused():
    raw = {"name": "x", "peak_flops": {"bf16": 1e15}, "memory_bytes": 8e10, "memory_bandwidth": 3e12,
           "intra_node_link": {"name": "l", "bandwidth": 4e11, "latency_s": 1e-6}}
    with pytest.raises(SpecError, match=r"sustained_flops\[bf16\]"):
        hardware_from_dict({**raw, "sustained_flops": {"bf16": 2e15}})
    with pytest.raises(SpecError, match=r"sustained_flops\[fp8\] has no peak_flops\[fp8\]"):
        hardware_from_dict({**raw, "sustained_flops": {"fp8": 1e15}})
