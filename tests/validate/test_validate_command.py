"""``serveplan validate``: a subset runs quickly, every row is either predicted or listed with its
reason, the bands are checked with each row's own source left out, and bad filters are refused
with one line naming the option, the value and the choices."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from serveplan.cli import app
from serveplan.commands import validate as command
from serveplan.errors import SpecError
from serveplan.validate.confidence import Query, Residual, band_for
from serveplan.validate.rows import load_rows
from serveplan.validate.suite import Outcome, with_loso_bands

runner = CliRunner()
SMALL = "vllm-blog-2026-04-fp8-kvcache"      # 15 rows: TTFT, ITL and throughput, about 6 s on one core


def _strict(text: str) -> dict:
    def refuse(tok: str) -> float:
        raise ValueError(f"not strict JSON: {tok}")
    return json.loads(text, parse_constant=refuse)


def test_validate_runs_on_a_small_subset():
    res = command.run(command.ValidateOptions.parse({"source": SMALL, "jobs": "1"}))
    rep = res.report
    assert len(rep.outcomes) == 15 and len(rep.mapped) == 15
    kinds = {k for k, _ in rep.table("kind")}
    assert kinds == {"TTFT", "TPOT", "throughput"}
    o = rep.overall()
    assert o.rows == 15 and o.sources == 1 and 0 <= o.median_abs_error < 1
    doc = _strict(json.dumps(res.document(), allow_nan=False))
    assert doc["summary"]["mapped"] == 15 and doc["held_out"].startswith("No value in the predictions is fitted")
    assert "written after residuals of these rows had been seen" in doc["held_out"]   # said, with the rules
    assert doc["command"] == f"serveplan validate --source {SMALL} --jobs 1"


def test_cli_prints_the_tables_and_json(tmp_path):
    r = runner.invoke(app, ["validate", "--source", SMALL, "-j", "1", "--no-progress"])
    assert r.exit_code == 0, r.output
    for needle in ("by kind", "by engine", "by source", "by accelerator", "by model class", "leave one source out",
                   "held out: No value in the predictions"):
        assert needle in r.output
    r = runner.invoke(app, ["validate", "--source", SMALL, "-j", "1", "--json"])
    assert r.exit_code == 0
    doc = _strict(r.output)
    assert {t["group"] for t in doc["tables"]["engine"]} == {"vllm"}
    assert all("band" in row for row in doc["rows"] if row["kind"] != "speedup")


def test_rows_not_mapped_are_counted_and_listed_with_their_reason():
    rows = [r for r in load_rows() if r.source in ("mooncake-docs-vllm-store-a10", "distserve-blog-2024-03")]
    res = command.run(command.ValidateOptions.parse({"source": "mooncake-docs-vllm-store-a10,distserve-blog-2024-03",
                                                     "jobs": "1"}))
    doc = res.document()
    assert doc["summary"]["rows"] == len(rows) == doc["summary"]["mapped"] + doc["summary"]["unmapped"]
    assert len(doc["unmapped"]) == doc["summary"]["unmapped"] > 0
    assert all(u["reason"] for u in doc["unmapped"])
    assert any("not modelled" in u["reason"] for u in doc["unmapped"])


@pytest.mark.parametrize("flag, value, choices", [
    ("--engine", "vlm", "vllm, sglang, trtllm, other"),
    ("--kind", "ttft,latency", "TTFT, TPOT, E2E, throughput, goodput, speedup, power"),
    ("--source", "mlperf-inference-v9", "trtllm-docs-perf-overview-v0.14"),
])
def test_bad_filter_values_are_refused_in_one_line(flag, value, choices):
    r = runner.invoke(app, ["validate", flag, value, "--no-progress"])
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert r.exit_code == 2, r.output
    assert len(lines) == 1 and lines[0].startswith("error: "), r.output
    bad = value.split(",")[-1]
    assert f"{flag[2:]}='{bad}'" in lines[0] and choices in lines[0]


def test_filters_are_case_insensitive_and_writing_needs_every_row(tmp_path):
    o = command.ValidateOptions.parse({"kind": "ttft,Throughput", "engine": "VLLM"})
    assert o.kinds == ("TTFT", "throughput") and o.engines == ("vllm",)
    with pytest.raises(SpecError, match="--write-docs writes the whole validation"):
        command.ValidateOptions.parse({"kind": "TTFT", "write_docs": str(tmp_path / "v.md")})


# ------------------------------------------------------------------------------ leave one source out
def _outcome(source: str, i: int, ratio: float):
    base = load_rows()[0]
    import dataclasses

    row = dataclasses.replace(base, source=source, id=f"r{i}", metric="output_tokens_per_s", value=100.0 * ratio)
    return Outcome(row=row, predicted=100.0, regime="offline", family="NVIDIA Hopper", model_class="dense GQA",
                   context_tokens=1000.0)


def test_the_band_of_a_row_never_uses_its_own_source():
    """Source A is off by e^2; source B is exact. With A's rows left out, A's band is B's (x1.00)
    and misses A's values; a band that used A's own rows would reach e^2 and contain them."""
    outs = [_outcome("A", i, math.e ** 2) for i in range(6)] + [_outcome("B", i, 1.0) for i in range(6)]
    banded = with_loso_bands(outs)
    for o in banded[:6]:
        assert o.band is not None and not o.band.extrapolated
        assert o.band.high == pytest.approx(1.0) and not o.band.contains(o.ratio)
        assert "own source left out" in o.band.basis
    for o in banded[6:]:
        assert o.band is not None and o.band.low == pytest.approx(math.e ** 2)
    # the same rows with their own source kept would cover themselves: the test above would fail
    res = [o.residual() for o in outs]
    kept = band_for(outs[0].query(), res)
    assert kept.contains(outs[0].ratio)


def test_a_source_alone_in_its_group_gets_no_band_when_left_out():
    outs = [_outcome("A", i, 1.3) for i in range(8)]
    assert all(o.band is not None and o.band.extrapolated for o in with_loso_bands(outs))


def test_bands_weigh_each_source_equally():
    res = [Residual(f"A/{i}", "A", "vllm", "NVIDIA Hopper", "dense GQA", "TTFT", "open loop", 1000, 0.0)
           for i in range(50)]
    res += [Residual(f"B/{i}", "B", "vllm", "NVIDIA Hopper", "dense GQA", "TTFT", "open loop", 1000, 1.0)
            for i in range(2)]
    b = band_for(Query("vllm", "NVIDIA Hopper", "dense GQA", "TTFT", "open loop", 500), res)
    assert b.n == 52 and b.sources == 2
    assert b.high == pytest.approx(math.e)     # B's two rows weigh as much as A's fifty


def test_the_goodput_checks_open_loop_latencies_join_their_kinds_coverage():
    # goodput-residuals.json (benchmarks/validate_goodput.py --write-residuals) holds, besides goodput, the TTFT
    # and TPOT statistics that MLPerf Server summaries print at the measured rate (rows with a stated layout);
    # an unfiltered report counts them with its own rows of the same kind, leave one source out
    from serveplan.validate.confidence import RESIDUAL_FILES, bundled_table
    from serveplan.validate.suite import ValidationReport, goodput_coverage
    table = bundled_table(RESIDUAL_FILES[1])
    kinds = {c.kind: c for c in goodput_coverage()}
    for kind in ("goodput", "TTFT", "TPOT"):
        n = sum(r.kind == kind for r in table)
        assert n and kinds[kind].banded + kinds[kind].extrapolated == n, kind
    assert all(r.regime == "open loop" for r in table)
    mine = {c.kind: c for c in ValidationReport(outcomes=(), seconds=0.0, jobs=1).coverage()}
    assert mine["TTFT"] == kinds["TTFT"] and mine["goodput"] == kinds["goodput"]
    filtered = ValidationReport(outcomes=(), seconds=0.0, jobs=1, filters={"kind": ["TTFT"]}).coverage()
    assert filtered == []   # a subset reports its own rows only
