"""Measurement files and the calibrate CLI: one-line errors, exit codes, nothing written on failure."""

from __future__ import annotations

import pytest
from calibrate_synthetic import synthetic
from typer.testing import CliRunner

from serveplan.calibrate.measurements import parse_measurements, read_measurements
from serveplan.cli import app
from serveplan.errors import SpecError

runner = CliRunner()
HEADER = "kind,phase,module,name,flops,bytes,launches,time_s\n"


def _calibrate(csv_path, out, *extra):
    return runner.invoke(app, ["calibrate", str(csv_path), "--hardware", "a100-80g", "--model", "llama-2-7b",
                               "--out", str(out), "--dtype", "fp16", "--folds", "0", "--samples", "2",
                               "--prefill-batches", "1,4", "--prefill-lengths", "256,1024",
                               "--decode-batches", "1,64", "--decode-lengths", "512", *extra])


@pytest.fixture(scope="module")
def good_csv(tmp_path_factory):
    path = tmp_path_factory.mktemp("m") / "synthetic.csv"
    synthetic().save(path)
    return path


def test_written_file_reads_back_with_metadata(good_csv):
    ms = read_measurements(good_csv)
    assert ms.metadata["device"] == "synthetic" and len(ms.rows) > 100
    assert {r.kind for r in ms.rows} >= {"gemm", "attention", "elementwise", "launch", "module"}


@pytest.mark.parametrize("text, match", [
    ("kind,phase,flops,bytes\ngemm,prefill,1,1\n", "missing column.*time_s"),
    (HEADER + "gemm,prefill,,x,1e9,1e6,1,-0.5\n", "time_s=-0.5 must be a positive"),
    (HEADER + "gemm,prefill,,x,1e9,1e6,1,abc\n", "'time_s'='abc' must be a number"),
    (HEADER + "matmul,prefill,,x,1e9,1e6,1,0.1\n", "kind='matmul'"),
    (HEADER + "gemm,training,,x,1e9,1e6,1,0.1\n", "phase='training'"),
    ("# device: cpu\n", "no header row"),
    (HEADER, "no measurement rows"),
])
def test_bad_files_are_spec_errors(text, match):
    with pytest.raises(SpecError, match=match):
        parse_measurements(text)


@pytest.mark.parametrize("text", [
    "kind,phase,flops,bytes\ngemm,prefill,1,1\n",                       # missing time_s
    HEADER + "gemm,prefill,,x,1e9,1e6,1,-1\n",                           # negative time
    HEADER + "gemm,prefill,,x,1e9,1e6,1,0.1\ngemm,decode,,x,1e9,1e6,1,0.1\n",   # too few points
])
def test_cli_bad_file_prints_one_line_and_exits_2(tmp_path, text):
    bad = tmp_path / "bad.csv"
    bad.write_text(text)
    out = tmp_path / "p.yaml"
    r = _calibrate(bad, out)
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), r.output
    assert not out.exists()


def test_cli_missing_file_exits_2(tmp_path):
    r = _calibrate(tmp_path / "nope.csv", tmp_path / "p.yaml")
    assert r.exit_code == 2 and "does not exist" in r.output


def test_cli_non_converging_fit_says_so_and_writes_nothing(good_csv, tmp_path):
    out = tmp_path / "p.yaml"
    r = _calibrate(good_csv, out, "--max-nfev", "1")
    assert r.exit_code != 0
    assert "did not converge" in r.output
    assert len([ln for ln in r.output.splitlines() if ln.strip()]) == 1
    assert not out.exists()


def test_cli_calibrate_writes_a_profile_usable_by_estimate_with_a_band(good_csv, tmp_path):
    out = tmp_path / "cal.yaml"
    r = _calibrate(good_csv, out)
    assert r.exit_code == 0, r.output
    assert "held-out" not in r.output          # --folds 0
    assert "prefill MFU" in r.output and out.exists()
    e = runner.invoke(app, ["estimate", "-m", "llama-2-7b", "-H", "a100-80g", "--tp", "1", "-p", str(out),
                            "--band", "--band-samples", "50"])
    assert e.exit_code == 0, e.output
    assert "P10" in e.output and "P90" in e.output
    j = runner.invoke(app, ["estimate", "-m", "llama-2-7b", "-H", "a100-80g", "--tp", "1", "-p", str(out),
                            "--band", "--band-samples", "50", "--json"])
    import json

    d = json.loads(j.output)
    assert d["band"]["p10"] <= d["band"]["p50"] <= d["band"]["p90"]


def test_band_of_an_uncalibrated_profile_is_a_one_line_error():
    r = runner.invoke(app, ["estimate", "-m", "llama-2-7b", "-H", "a100-80g", "--tp", "1", "--band"])
    assert r.exit_code == 2 and "no uncertainty" in r.output


def test_calibrate_matmul_option_writes_the_curve(good_csv, tmp_path):
    out = tmp_path / "curve.yaml"
    r = _calibrate(good_csv, out, "--matmul", "curve")
    assert r.exit_code == 0, r.output
    assert "GEMMs in the profile: size curve" in r.output
    import yaml

    raw = yaml.safe_load(out.read_text())
    assert set(raw["matmul_size_curve"]) == {"prefill", "decode"}
    assert raw["calibration"]["matmul_model"] == "curve"
    bad = _calibrate(good_csv, tmp_path / "x.yaml", "--matmul", "spline")
    assert bad.exit_code == 2 and "matmul" in bad.output
