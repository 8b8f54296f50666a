"""A confidence next to every answer: simulate, estimate and optimize carry each TTFT, TPOT,
throughput and goodput with the P10-P90 band of comparable validated rows, or say
``extrapolated: no comparable validation`` and why (a new accelerator, an unseen model class, a
context beyond the validated ones)."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
from typer.testing import CliRunner

from serveplan.cli import app
from serveplan.commands import estimate, plan, simulate
from serveplan.validate.confidence import (
    EXTRAPOLATED,
    MIN_ROWS,
    Band,
    Query,
    Residual,
    accelerator_family,
    band_for,
    bundled_residuals,
)
from serveplan.validate.rows import load_rows

runner = CliRunner()
BAND_KEYS = {"p10", "p90", "n", "sources", "basis"}


def _strict(text: str) -> dict:
    def refuse(tok: str) -> float:
        raise ValueError(f"not strict JSON: {tok}")
    return json.loads(text, parse_constant=refuse)


def _check_entry(entry: dict) -> None:
    b = entry["band"]
    assert set(b) == BAND_KEYS
    if b["p10"] is None:
        assert b["basis"].startswith(EXTRAPOLATED) and b["n"] == 0
    else:
        assert b["p10"] <= b["p90"] and b["basis"]


def test_simulate_json_carries_a_band_for_every_figure():
    r = runner.invoke(app, ["simulate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "-e", "trtllm", "--tp", "1",
                            "--dtype", "fp8", "--offline", "--input-len", "1000", "--output-len", "1000", "-n", "200",
                            "--json"])
    assert r.exit_code == 0, r.output
    conf = _strict(r.output)["confidence"]
    for key in ("ttft_mean_s", "ttft_p90_s", "tpot_p90_s", "e2e_p99_s", "throughput_rps", "output_tokens_per_s"):
        _check_entry(conf[key])
    # TensorRT-LLM offline throughput of a dense model on Hopper is validated (the overview's rows)
    tput = conf["output_tokens_per_s"]["band"]
    assert tput["n"] >= MIN_ROWS and tput["p10"] < conf["output_tokens_per_s"]["value"] * 1.5


def test_simulate_table_shows_the_band_column_and_line():
    r = runner.invoke(app, ["simulate", "-m", "llama-3.2-1b", "-H", "h100-sxm", "--tp", "1", "-n", "40"])
    assert r.exit_code == 0, r.output
    assert "P10-P90 band" in r.output and "confidence (P10-P90 of measured / predicted" in r.output


def test_an_open_loop_that_keeps_up_has_its_throughput_set_by_the_arrival_rate():
    res = simulate.run(simulate.SimulateOptions.parse({"model": "llama-3.2-1b", "tp": "1", "num_requests": "40"}))
    conf = res.document()["confidence"]
    assert conf["throughput_rps"]["band"]["basis"].startswith("set by the arrival rate")


def test_closed_loop_sweep_json_carries_bands_per_level():
    r = runner.invoke(app, ["simulate", "-m", "llama-3.2-1b", "-H", "h100-sxm", "--tp", "1", "-n", "20",
                            "--concurrency", "1,2", "--json"])
    assert r.exit_code == 0, r.output
    conf = _strict(r.output)["confidence"]
    assert len(conf) == 2 and all("ttft_mean_s" in c for c in conf)


def test_an_unseen_accelerator_says_extrapolated():
    res = simulate.run(simulate.SimulateOptions.parse({"model": "llama-3.2-1b", "hardware": "mi355x", "tp": "1",
                                                       "num_requests": "30", "offline": "on"}))
    conf = res.document()["confidence"]
    for key in ("ttft_p90_s", "tpot_p90_s", "output_tokens_per_s"):
        b = conf[key]["band"]
        assert b["p10"] is None and b["p90"] is None and b["n"] == 0
        assert b["basis"].startswith(EXTRAPOLATED) and "new accelerator family" in b["basis"]
    assert accelerator_family("my-own-npu") == "unknown"


def test_an_unseen_model_class_and_a_long_context_say_extrapolated():
    hybrid = band_for(Query("vllm", "NVIDIA Hopper", "MoE hybrid", "throughput", "offline", 1000), bundled_residuals())
    assert hybrid.extrapolated and "unseen model class" in hybrid.basis
    res = [Residual(f"s{i % 2}/{i}", f"s{i % 2}", "vllm", "NVIDIA Hopper", "dense GQA", "TTFT", "open loop", 2048,
                    0.1 * i) for i in range(8)]
    ok = band_for(Query("vllm", "NVIDIA Hopper", "dense GQA", "TTFT", "open loop", 2000), res)
    assert not ok.extrapolated and ok.n == 8
    long = band_for(Query("vllm", "NVIDIA Hopper", "dense GQA", "TTFT", "open loop", 100_000), res)
    assert long.extrapolated and "context 100,000 tokens beyond the validated 2,048" in long.basis


def test_estimate_json_carries_bands_of_the_step_and_the_static_batch():
    r = runner.invoke(app, ["estimate", "-m", "llama-3.1-8b", "-H", "h200", "-e", "trtllm", "--dtype", "fp8",
                            "--tp", "1", "--batch", "64", "--input-len", "128", "--output-len", "128", "--json"])
    assert r.exit_code == 0, r.output
    conf = _strict(r.output)["confidence"]
    assert set(conf) == {"step_s", "static_ttft_s", "static_itl_s", "static_e2e_s", "static_output_tokens_per_s",
                         "static_throughput_tokens_per_s"}
    for entry in conf.values():
        _check_entry(entry)
    assert conf["static_output_tokens_per_s"]["band"]["n"] >= MIN_ROWS      # TensorRT-LLM's static-batch rows
    out = estimate.run(estimate.EstimateOptions.parse({"model": "llama-3.2-1b", "tp": "1"}))
    assert set(out.document()["confidence"]) == {"step_s"}


def test_optimize_json_carries_goodput_ttft_and_tpot_bands_per_strategy():
    res = plan.run(plan.PlanOptions.parse({"model": "llama-3.2-1b", "devices": "1", "tp": "1", "num_requests": "100",
                                           "jobs": "1", "no_disaggregated": "on"}), launch_files=False)
    doc = _strict(json.dumps(res.document(), allow_nan=False))
    assert doc["strategies"]
    for row in doc["strategies"]:
        assert set(row["confidence"]) == {"goodput_rps", "goodput_per_device", "ttft_p_s", "tpot_p_s"}
        for entry in row["confidence"].values():
            _check_entry(entry)


def test_band_values_are_strict_json_when_extrapolated():
    b = Band(None, None, 0, 0, f"{EXTRAPOLATED} (test)")
    assert b.of(1.0) == {"p10": None, "p90": None, "n": 0, "sources": 0, "basis": f"{EXTRAPOLATED} (test)"}
    assert Band(0.5, 2.0, 7, 2, "x").of(float("nan"))["p10"] is None
    assert b.factors() == "extrapolated" and Band(0.81, 1.3, 7, 2, "x").factors() == "x0.81-1.30 (n=7)"


def test_the_bundled_residual_table_matches_the_bundled_rows():
    keys = {r.key: r for r in load_rows()}
    table = bundled_residuals()
    assert table, "src/serveplan/validate/data/residuals.json is missing: serveplan validate --write-residuals"
    for res in table:
        parts = res.key.split("/")
        row = keys["/".join(parts[:2])]
        if res.kind == "goodput":   # goodput-residuals.json: the goodput check's SLO-bounded highest rates
            assert row.load.get("kind") == "server" or row.metric.startswith("goodput_rps")
        elif len(parts) == 3:       # goodput-residuals.json: a latency its Server summary prints at that rate
            assert row.load.get("kind") == "server" and f"{parts[2]}_s" in row.also
            assert res.kind == parts[2].split("_")[0].upper() and res.regime == "open loop"
        else:
            assert row.kind == res.kind
        assert res.source == (row.group or row.source)   # the publisher group


def test_goodput_bands_come_from_the_goodput_checks_residuals():
    # benchmarks/validate_goodput.py --write-residuals: MLPerf Server results (TensorRT-LLM and vLLM, Llama-2-70B
    # and Mixtral-8x7B; mean prompt + output 516 and 572 tokens) and the DistServe blog row
    goodput = [r for r in bundled_residuals() if r.kind == "goodput"]
    assert len(goodput) >= 60 and len({r.source for r in goodput}) >= 4
    assert {r.regime for r in goodput} == {"open loop"}
    near = band_for(Query("trtllm", "NVIDIA Hopper", "dense GQA", "goodput", "open loop", 500), bundled_residuals())
    assert not near.extrapolated and near.n >= MIN_ROWS and near.sources >= 3
    assert near.low < 1.0 < near.high
    # a vLLM question on Hopper borrows the other engines' rows of its family and model class (ladder step 3)
    vllm = band_for(Query("vllm", "NVIDIA Hopper", "dense GQA", "goodput", "open loop", 500), bundled_residuals())
    assert not vllm.extrapolated and "vllm" not in vllm.basis
    # beyond the validated contexts, and on a family with no goodput row, it says so
    far = band_for(Query("trtllm", "NVIDIA Hopper", "dense GQA", "goodput", "open loop", 4000), bundled_residuals())
    assert far.extrapolated and "beyond the validated 516" in far.basis
    assert band_for(Query("trtllm", "NVIDIA Ampere", "MoE MLA", "goodput", "open loop", 500),
                    bundled_residuals()).extrapolated


@pytest.mark.parametrize("hw, family", [("h100-sxm", "NVIDIA Hopper"), ("gb200", "NVIDIA Blackwell"),
                                        ("mi300x", "AMD CDNA3"), ("mi355x", "AMD CDNA4")])
def test_accelerator_families(hw, family):
    assert accelerator_family(hw) == family


def test_a_publishers_pages_are_one_source_for_bands_and_counts():
    """GPUStack's performance-lab pages (one lab, one harness) share ``source.group``: a row's
    leave-one-source-out band leaves every page of the group out, and the accuracy tables count
    the group once."""
    import dataclasses

    from serveplan.validate.rows import load_rows
    from serveplan.validate.suite import Outcome, Stats, with_loso_bands

    rows = load_rows()
    gp = [r for r in rows if r.source.startswith("gpustack-perflab-")]
    assert gp and {r.group for r in gp} == {"gpustack-perflab"}
    assert all(r.group == "" for r in rows if r.source.startswith("mlperf-"))   # rounds are separate campaigns
    trt = {r.group for r in rows if r.source.startswith("trtllm-docs-perf-overview-")}
    assert trt == {"trtllm-docs-perf-overview"}
    other = next(r for r in rows if r.source.startswith("vllm-blog") and r.kind == "TPOT")
    # two pages of the group and one other source, five TPOT rows each, same comparable group
    picks = [r for r in gp if r.kind == "TPOT" and r.hardware == "h100-sxm"]
    pages = sorted({r.source for r in picks})[:2]
    made = []
    for src in pages:
        mine = [p for p in picks if p.source == src][:5]
        made += [dataclasses.replace(r, id=f"{r.id}-{i}") for i, r in enumerate(mine)]
    made += [dataclasses.replace(other, id=f"x{i}", hardware="h100-sxm", engine="vllm") for i in range(5)]
    outs = [Outcome(row=r, predicted=r.value * 1.1, regime="offline", family="NVIDIA Hopper", model_class="dense",
                    context_tokens=1000.0) for r in made]
    banded = with_loso_bands(outs)
    first = next(o for o in banded if o.row.source == pages[0])
    assert first.band is not None and first.band.sources == 1    # only the other publisher's rows remain
    assert Stats.of(outs).sources == 2                            # the group counts once


def test_the_residual_table_round_trips_one_row_per_line(tmp_path, monkeypatch):
    import json

    from serveplan.validate import confidence

    res = [Residual("A/1", "A", "vllm", "NVIDIA Hopper", "dense GQA", "TTFT", "open loop", 1000.0, -0.25),
           Residual("B/2", "B", "sglang", "AMD CDNA3", "MoE MLA", "throughput", "offline", 4096.0, 0.5)]
    text = confidence.residuals_text(confidence.residuals_document(res, command="serveplan validate"))
    doc = json.loads(text)                     # strict JSON
    assert doc["fields"] == list(confidence.RESIDUAL_FIELDS) and len(doc["rows"]) == 2
    assert sum(line.startswith("  [") for line in text.splitlines()) == 2   # one residual per line
    rows = [confidence.Residual(*r) for r in doc["rows"]]
    assert rows == res


def test_a_latency_band_never_leaves_its_regime_but_a_rate_band_may():
    # hand-made table: 8 burst ("offline") TTFT rows off by e^3 from two sources, none in an open loop.
    # An open-loop TTFT gets no band (a burst's TTFT is its queue, not the prompt's own time); an
    # open-loop throughput from the same kind of table takes the offline rows (ladder step 2)
    burst = [Residual(f"s{i % 2}/{i}", f"s{i % 2}", "vllm", "NVIDIA Hopper", "dense GQA", "TTFT", "offline", 2048, 3.0)
             for i in range(8)]
    b = band_for(Query("vllm", "NVIDIA Hopper", "dense GQA", "TTFT", "open loop", 1000), burst)
    assert b.extrapolated and "no TTFT validated in open loop for dense GQA on NVIDIA Hopper" in b.basis
    assert "within its regime" in b.basis
    same = band_for(Query("vllm", "NVIDIA Hopper", "dense GQA", "TTFT", "offline", 1000), burst)
    assert not same.extrapolated and same.low == pytest.approx(math.e ** 3)
    rates = [dataclasses.replace(r, kind="throughput") for r in burst]
    tp = band_for(Query("vllm", "NVIDIA Hopper", "dense GQA", "throughput", "open loop", 1000), rates)
    assert not tp.extrapolated and tp.n == 8
