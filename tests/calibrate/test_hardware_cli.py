"""``serveplan hardware --template`` and ``--new``: a device from datasheet values alone."""

from __future__ import annotations

import yaml
from typer.testing import CliRunner

from serveplan.cli import app
from serveplan.specs.catalog import get_hardware
from serveplan.specs.hardware import hardware_from_dict
from serveplan.units import DType

runner = CliRunner()


def test_template_explains_every_field_and_loads_as_is():
    r = runner.invoke(app, ["hardware", "--template"])
    assert r.exit_code == 0
    raw = yaml.safe_load(r.output)
    hw = hardware_from_dict(raw)
    assert hw.memory_bandwidth == 2.039e12
    for key in ("peak_flops", "memory_bytes", "memory_bandwidth", "devices_per_node", "intra_node_link",
                "inter_node_link", "tile_size"):
        line = next(ln for ln in r.output.splitlines() if ln.startswith(key))
        assert "#" in line, f"{key} has no explanation"


def test_new_device_from_datasheet_values_is_usable(tmp_path):
    out = tmp_path / "x1.yaml"
    r = runner.invoke(app, ["hardware", "--new", "x1", "--out", str(out), "--bf16-tflops", "400", "--fp32-tflops", "50",
                            "--memory-gb", "64", "--bandwidth-gbs", "1600", "--link-gbs", "200"])
    assert r.exit_code == 0, r.output
    hw = get_hardware(str(out))
    assert hw.name == "x1" and hw.flops(DType.BF16) == 400e12 and hw.memory_bandwidth == 1.6e12
    e = runner.invoke(app, ["estimate", "-m", "llama-2-7b", "-H", str(out), "--tp", "1"])
    assert e.exit_code == 0, e.output


def test_new_device_without_required_values_exits_2(tmp_path):
    r = runner.invoke(app, ["hardware", "--new", "x2", "--out", str(tmp_path / "x2.yaml"), "--bf16-tflops", "100"])
    assert r.exit_code == 2 and "--memory-gb" in r.output
    assert not (tmp_path / "x2.yaml").exists()
