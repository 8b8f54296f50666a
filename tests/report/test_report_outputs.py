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


def _many(n: int) -> SimpleNamespace:
    """``n`` ranked strategies whose Pareto set is a dozen points close together."""
    rng = __import__("numpy").random.default_rng(0)
    rows = []
    for i in range(n):
        cand = SimpleNamespace(is_disaggregated=bool(i % 3 == 0), num_devices=8)
        rows.append(SimpleNamespace(name=f"{i % 8 + 1}p{i % 5 + 1}d-tp{2 ** (i % 4)}-b{16 * (i + 1)}", candidate=cand,
                                    goodput_per_device=1.0 - i / (2 * n), goodput_ci=None,
                                    e2e_mean_s=float(5.0 + rng.normal(0, 0.05) + i * 0.01)))
    front = sorted(rows, key=lambda r: r.e2e_mean_s)[:12]
    return SimpleNamespace(strategies=rows, rejected=[], pareto={r.name for r in front}, slo_tolerance=0.1)


def test_plots_stay_readable_for_any_number_of_strategies(tmp_path):
    # 96 strategies made goodput.png 5,876 px wide and the Pareto labels overlap
    import matplotlib.image as mpimg

    from serveplan.report.plots import pyplot
    from serveplan.report.ranking import TOP_BARS, plot_goodput_bars, plot_pareto

    res = _many(96)
    width = mpimg.imread(plot_goodput_bars(res, tmp_path / "g.png")).shape[1]
    assert width <= 1600
    plt = pyplot()
    saved = plt.close
    figs = []
    plt.close = lambda fig=None: figs.append(fig)   # keep the figure to measure its labels
    try:
        plot_pareto(res, tmp_path / "p.png")
        plot_goodput_bars(res, tmp_path / "g2.png")
    finally:
        plt.close = saved
    pareto_fig, bars_fig = figs
    assert len(bars_fig.axes[0].patches) == TOP_BARS
    ax = pareto_fig.axes[0]
    renderer = pareto_fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in ax.texts if t.get_text().isdigit()]
    assert len(boxes) == 12
    for i, a in enumerate(boxes):   # no two point labels overlap
        for b in boxes[i + 1:]:
            assert not a.overlaps(b)
    key = next(t.get_text() for t in ax.texts if t.get_text().startswith("Pareto-optimal"))
    assert all(name in key for name in res.pareto)
    for f in figs:
        saved(f)
