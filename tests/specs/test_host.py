"""Bundled hosts: every value cited, loadable, validated."""

from __future__ import annotations

from importlib import resources

import pytest
import yaml

from serveplan.errors import SpecError
from serveplan.specs.catalog import get_host, host_from_dict, list_hosts


@pytest.mark.parametrize("name", list_hosts())
def test_every_bundled_value_carries_a_source_comment(name):
    text = resources.files("serveplan.specs").joinpath("data", "hosts", f"{name}.yaml").read_text()
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or stripped.endswith(":") or ":" not in stripped:
            continue
        key = stripped.split(":", 1)[0]
        if key in ("name", "description", "source", "reference_gpu"):
            continue
        assert "#" in line, f"{name}: {key} has no comment citing its source"


@pytest.mark.parametrize("name", list_hosts())
def test_bundled_hosts_load_with_positive_si_values(name):
    h = get_host(name)
    assert h.cpu_memory_bytes > 1e9 and h.disk_bytes > 1e11
    assert h.gpu_capacity_bytes(h.gpu) < h.gpu.memory_bytes


def test_flexgen_t4_is_table1():
    h = get_host("flexgen-t4")
    assert (h.gpu.name, h.gpu.memory_bytes, h.cpu_memory_bytes, h.disk_bytes) == ("t4", 16e9, 208e9, 1.5e12)
    assert (h.disk_read_bandwidth, h.disk_write_bandwidth) == (2e9, 1e9)  # Section 6
    assert h.ctog_bandwidth == pytest.approx(12.89 * 2**30, rel=1e-3)  # FlexGen cost_model.py, GiB/s


def test_flexgen_3090_is_table12():
    h = get_host("flexgen-3090")
    assert (h.gpu.memory_bytes, h.cpu_memory_bytes, h.disk_bytes) == (24e9, 125e9, 1e12)


def _raw():
    raw = yaml.safe_load(resources.files("serveplan.specs").joinpath("data", "hosts", "flexgen-t4.yaml").read_text())
    return raw


def test_numbers_written_without_a_dot_are_read_as_floats():
    raw = _raw()
    raw["cpu_memory_bytes"] = "208e9"  # PyYAML reads this as a string
    assert host_from_dict(raw).cpu_memory_bytes == 208e9


@pytest.mark.parametrize("field, value, expected", [
    ("ctog_bandwidth", 0, "ctog_bandwidth=0 must be a positive number"),
    ("cpu_memory_bytes", "lots", "cpu_memory_bytes='lots' must be a number"),
    ("gpu_reserved_bytes", 20e9, "gpu_reserved_bytes"),
])
def test_bad_values_name_the_field(field, value, expected):
    raw = _raw()
    raw[field] = value
    with pytest.raises(SpecError, match=expected):
        host_from_dict(raw)


def test_missing_field_is_named():
    raw = _raw()
    del raw["disk_read_bandwidth"]
    with pytest.raises(SpecError, match="'disk_read_bandwidth' is missing"):
        host_from_dict(raw)
