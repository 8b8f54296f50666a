"""The goodput check's residual table (benchmarks/validate_goodput.py --write-residuals) and its
leave-one-source-out band coverage."""

from __future__ import annotations

import json
import math

from bench_modules import load


def _row(source: str, i: int, measured: float, predicted: float, model: str = "llama-2-70b") -> dict:
    return {"source": source, "row_id": f"r{i}", "engine": "trtllm", "hardware": "h100-sxm", "model": model,
            "input_len": 222, "output_len": 294, "measured_rps": measured,
            "predictions": {"512": {"pred_rps": predicted, "ratio": predicted / measured}}}


def test_residuals_are_log_ratios_in_the_bands_terms_and_skip_zero_predictions() -> None:
    vg = load("validate_goodput")
    doc = {"input_lens": [512], "rows": [_row("A", 1, 10.0, 8.0), _row("A", 2, 10.0, 0.0),
                                         {**_row("B", 3, 5.0, 5.0), "predictions": {"512": {"error": "x"}}}]}
    res = vg.residuals(doc)
    assert [r.key for r in res] == ["A/r1"]          # a zero prediction and a failed one have no ratio
    r = res[0]
    assert r.log_ratio == math.log(10.0 / 8.0) and r.kind == "goodput" and r.regime == "open loop"
    assert (r.family, r.model_class, r.context_tokens) == ("NVIDIA Hopper", "dense GQA", 516.0)


def test_band_coverage_leaves_each_rows_source_out(tmp_path) -> None:
    vg = load("validate_goodput")
    # sources A and B: five rows each, measured/predicted 0.8..1.2; source C: one row far outside
    rows = [_row(s, i, 10.0, 10.0 / f) for s in "AB" for i, f in enumerate((0.8, 0.9, 1.0, 1.1, 1.2))]
    rows.append(_row("C", 9, 10.0, 10.0 / 3.0))
    cov = vg.band_coverage(vg.residuals({"input_lens": [512], "rows": rows}))
    assert cov["rows"] == 11 and cov["banded"] == 11
    # C's row is judged by A's and B's bands (x0.8-1.2 or so): outside; A's by B's and C's: inside
    assert cov["per_row"]["C/r9"]["inside"] is False
    assert cov["per_row"]["A/r2"]["inside"] is True
    assert cov["coverage"] == cov["inside"] / 11
    # the written table is the format the confidence bands read
    doc = {"input_lens": [512], "rows": rows, "command": "x"}
    path = tmp_path / "goodput-residuals.json"
    vg._write_residuals(doc, path)
    from serveplan.validate.confidence import read_residuals
    assert len(read_residuals(path)) == 11 and json.loads(path.read_text())["fields"][0] == "key"
    assert doc["band_coverage"]["rows"] == 11


def test_latencies_at_the_measured_rate_are_open_loop_residuals_of_their_kind() -> None:
    # a row that states its Server latencies and got them predicted at the measured rate gives one residual per
    # statistic (kind TTFT or TPOT, the row's other terms); a statistic predicted as 0 or missing gives none
    vg = load("validate_goodput")
    row = {**_row("A", 1, 10.0, 8.0), "latency": {"ttft_p99_s": 0.6, "tpot_mean_s": 0.1, "tpot_p99_s": 0.12},
           "latency_predicted": {"ttft_p99_s": 0.3, "tpot_mean_s": 0.05}}
    res = {r.key: r for r in vg.residuals({"input_lens": [512], "rows": [row]})}
    assert set(res) == {"A/r1", "A/r1/ttft_p99", "A/r1/tpot_mean"}
    t = res["A/r1/ttft_p99"]
    assert (t.kind, t.regime, t.context_tokens) == ("TTFT", "open loop", 516.0)
    assert t.log_ratio == math.log(0.6 / 0.3) and res["A/r1/tpot_mean"].kind == "TPOT"
    # the latencies were predicted at the primary input length only
    assert [r.key for r in vg.residuals({"input_lens": [256, 512], "rows": [row]}, 512)] == ["A/r1"]
    cov = vg.band_coverage(list(res.values()))
    assert set(cov["per_kind"]) == {"goodput", "TTFT", "TPOT"} and cov["rows"] == 1
