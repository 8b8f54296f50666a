"""Reports (report/): tables in the units they print, records in SI, plots written as PNG files."""

from __future__ import annotations

import csv
from types import SimpleNamespace

import pytest

from serveplan import SLO, SimulationConfig, Workload, get_hardware, get_model, get_profile, simulate
from serveplan.report.plots import latency_histograms, rate_sweep_plot
from serveplan.report.ranking import COLUMNS, ranking_rows, write_csv
from serveplan.report.tables import latency_rows, summary_lines, sweep_records

PNG = b"\x89PNG\r\n\x1a\n"


def _run(rate: float):
    return simulate(SimulationConfig(
        model=get_model("codellama-34b"), hardware=get_hardware("ascend-910b3"), profile=get_profile("bestserve-910b3"),
        strategy="2m", tp=4, max_batch=16, rate=rate, workload=Workload.scenario("op3", num_requests=200),
        slo=SLO(ttft_s=1.5, tpot_s=0.07, percentile=90)))


@pytest.fixture(scope="module")
def runs():
    return [_run(0.5), _run(50.0)]


def test_latency_rows_are_the_statistics_in_milliseconds(runs):
    res = runs[0]
    rows = {r[0]: r for r in latency_rows(res)}
    assert list(rows) == ["TTFT", "TPOT", "E2E", "queueing"]
    assert rows["TTFT"][3] == f"{res.ttft_s.p90 * 1e3:,.1f}"
    assert rows["TPOT"][1] == f"{res.tpot_s.mean * 1e3:,.1f}"
    assert rows["TTFT"][5] == "1,500.0" and rows["TPOT"][5] == "70.0"   # the SLO targets
    assert rows["E2E"][5] == ""                                          # no target


def test_summary_says_overloaded_only_when_it_is(runs):
    calm, flooded = runs
    assert flooded.overloaded and not calm.overloaded
    assert any("OVERLOADED" in line for line in summary_lines(flooded))
    assert not any("OVERLOADED" in line for line in summary_lines(calm))
    assert f"completed {calm.num_completed}/{calm.num_requests}" in summary_lines(calm)[0]


def test_sweep_records_stay_in_seconds(runs):
    recs = sweep_records(runs)
    assert [r["rate"] for r in recs] == [0.5, 50.0]
    assert recs[0]["ttft_p90_s"] == runs[0].ttft_s.p90 and recs[1]["overloaded"] is True


def test_plots_are_png_files(runs, tmp_path):
    for path in (latency_histograms(runs[0], tmp_path / "h.png"), rate_sweep_plot(runs, tmp_path / "s.png")):
        assert path.read_bytes()[:8] == PNG


def _strategy(name: str, goodput: float) -> SimpleNamespace:
    return SimpleNamespace(name=name, to_dict=lambda: {"name": name, "goodput_rps": goodput, "status": "ok"})


def test_ranking_csv_ranks_strategies_and_lists_rejected_last(tmp_path):
    result = SimpleNamespace(strategies=[_strategy("2m", 3.0), _strategy("1p1d", 2.0)],
                             rejected=[SimpleNamespace(to_dict=lambda: {"name": "4m", "status": "rejected"})],
                             pareto={"2m"})
    rows = ranking_rows(result)
    assert [(r["rank"], r["name"], r["pareto"]) for r in rows] == [(1, "2m", True), (2, "1p1d", False),
                                                                     ("", "4m", False)]
    with write_csv(result, tmp_path / "r.csv").open() as fh:
        got = list(csv.DictReader(fh))
    assert list(got[0]) == COLUMNS and [r["name"] for r in got] == ["2m", "1p1d", "4m"]
