"""Profiler configuration and the hardware YAML written from measured peaks (no torch needed)."""

from __future__ import annotations

import pytest
import yaml

from serveplan import get_model
from serveplan.calibrate.measurements import Measurement, MeasurementSet
from serveplan.calibrate.profile import ProfileConfig, hardware_yaml_from_measurements, shape_from_model
from serveplan.errors import SpecError
from serveplan.specs.hardware import hardware_from_dict
from serveplan.units import DType


def test_cpu_clock_is_the_default_for_one_cpu_thread_only():
    assert ProfileConfig(threads=1).resolved_clock == "cpu"
    assert ProfileConfig(threads=2).resolved_clock == "wall"
    assert ProfileConfig(device="cuda", threads=None).resolved_clock == "wall"


@pytest.mark.parametrize("changes, match", [
    ({"device": "tpu"}, "device="), ({"threads": 0}, "threads="), ({"dtype": "int4"}, "dtype="),
    ({"clock": "cpu", "threads": 2}, "one CPU thread"), ({"repeats": 0}, "repeats="),
])
def test_bad_profile_config_is_a_spec_error(changes, match):
    with pytest.raises(SpecError, match=match):
        ProfileConfig(**changes)


def test_shapes_of_a_model():
    s = shape_from_model(get_model("llama-3.1-8b"))
    assert (s.hidden_size, s.intermediate_size, s.q_dim, s.kv_dim) == (4096, 14336, 4096, 1024)


def test_hardware_yaml_uses_the_measured_peaks():
    ms = MeasurementSet((Measurement(kind="gemm", phase="prefill", flops=1e9, bytes=1e6, time_s=0.01),),
                        {"device": "cpu", "device_name": "Test CPU", "dtype": "fp32", "threads": "1",
                         "peak_flops_measured": "1.2e11", "peak_bandwidth_measured": "1.5e10", "memory_bytes": "2e10"})
    hw = hardware_from_dict(yaml.safe_load(hardware_yaml_from_measurements(ms, "my-cpu")))
    assert hw.name == "my-cpu" and hw.flops(DType.FP32) == 1.2e11 and hw.memory_bandwidth == 1.5e10


def test_hardware_yaml_needs_the_peak_metadata():
    ms = MeasurementSet((), {"device": "cpu"})
    with pytest.raises(SpecError, match="peak_flops_measured"):
        hardware_yaml_from_measurements(ms, "x")
