"""Bands in simulate and optimize (--band N): sampled from a calibrated profile's uncertainty."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from serveplan import get_profile
from serveplan.calibrate.bands import sample_profiles
from serveplan.cli import app
from serveplan.errors import SpecError

runner = CliRunner()
UNC = {"prefill.compute": 0.05, "decode.memory": 0.05, "dispatch.attention": 5e-6}
SIM = ["simulate", "-m", "llama-2-7b", "-H", "a100-80g", "-s", "1m", "--tp", "1", "--max-batch", "8",
       "--input-len", "256", "--output-len", "16", "-n", "40", "--rate", "2"]
OPT = ["optimize", "-m", "llama-2-7b", "-H", "a100-80g", "--devices", "2", "--tp", "1", "--max-batch", "8,9",
       "--no-disaggregated", "--input-len", "256", "--output-len", "16", "--num-requests", "40",
       "--slo-ttft", "1", "--slo-tpot", "0.05", "--jobs", "1", "--no-progress"]


def _profile(tmp_path_factory, unc):
    d = get_profile("default-gpu").to_dict()
    d.update(name="calibrated-test", uncertainty=unc)
    path = tmp_path_factory.mktemp("p") / "calibrated.yaml"
    path.write_text(yaml.safe_dump(d))
    return str(path)


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    return _profile(tmp_path_factory, UNC)


@pytest.fixture(scope="module")
def uncertain(tmp_path_factory):
    """Factors known to +-25%: bands wide enough that neighbouring batch sizes overlap."""
    return _profile(tmp_path_factory, {"prefill.compute": 0.15, "decode.memory": 0.18})


def test_simulate_band_reports_p10_p50_p90(calibrated):
    r = runner.invoke(app, [*SIM, "-p", calibrated, "--band", "6"])
    assert r.exit_code == 0, r.output
    assert "band over 6 profiles" in r.output
    for label in ("P90 TTFT", "P90 TPOT", "throughput"):
        assert f"  {label}: " in r.output


def test_simulate_band_json_is_ordered_and_seeded(calibrated):
    outs = [json.loads(runner.invoke(app, [*SIM, "-p", calibrated, "--band", "6", "--json"]).output) for _ in range(2)]
    assert outs[0]["band"] == outs[1]["band"]
    for key in ("ttft_p90_s", "tpot_p90_s", "throughput_rps"):
        b = outs[0]["band"][key]
        assert b["p10"] <= b["p50"] <= b["p90"] and b["samples"] == 6
    assert outs[0]["band"]["tpot_p90_s"]["p90"] > outs[0]["band"]["tpot_p90_s"]["p10"]  # decode MBU varies


@pytest.mark.parametrize("cmd", [SIM, OPT])
def test_band_without_uncertainty_is_a_one_line_spec_error(cmd):
    r = runner.invoke(app, [*cmd, "-p", "default-gpu", "--band", "3"])
    assert r.exit_code == 2
    msg = r.output.strip()
    assert "needs a calibrated profile" in msg and len(msg.splitlines()) == 1, msg


def test_optimize_band_marks_strategies_that_cannot_be_told_apart(uncertain):
    r = runner.invoke(app, [*OPT, "-p", uncertain, "--band", "4", "--band-top", "3", "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)["strategies"]
    banded = [row for row in rows if "goodput_band" in row]
    assert len(banded) == min(3, len(rows)) >= 2
    assert not banded[0]["goodput_band"]["cannot_be_told_apart_from_best"]
    for row in banded:
        b = row["goodput_band"]
        assert b["p10"] <= b["p50"] <= b["p90"] and b["per_device"]["samples"] == 4
    # max batch 8 and 9 of the same layout: the same goodput within the band
    assert any(row["goodput_band"]["cannot_be_told_apart_from_best"] for row in banded[1:])
    text = runner.invoke(app, [*OPT, "-p", uncertain, "--band", "4", "--band-top", "3"]).output
    assert "goodput band of the top" in text and "cannot be told apart from the best" in text


def test_sampled_curve_and_attention_factors():
    prof = get_profile("default-gpu").with_(
        matmul_size_curve={"decode": ((1.0, 64.0), (2.0, 1.5))},
        uncertainty={"decode.matmul_size_curve": 0.1, "decode.attention_memory": 0.05})
    draws = sample_profiles(prof, 30, seed=2)
    scales = [p.matmul_size_curve["decode"][1][0] / 2.0 for p in draws]
    assert all(p.matmul_size_curve["decode"][1][1] == pytest.approx(1.5 * s)
               for p, s in zip(draws, scales, strict=True))
    assert len(set(scales)) == 30 and 0.7 < min(scales) and max(scales) < 1.3
    # attention_memory unset: drawn around the phase's memory factor; memory itself stays fixed
    att = [p.decode.attention_memory for p in draws]
    assert abs(sum(att) / len(att) - prof.decode.memory) < 0.03
    assert all(p.decode.memory == prof.decode.memory for p in draws)


def test_curve_uncertainty_without_a_curve_is_a_spec_error():
    with pytest.raises(SpecError, match="uncertainty key"):
        sample_profiles(get_profile("default-gpu").with_(uncertainty={"prefill.matmul_size_curve": 0.1}), 3)
