"""What the plots show a reader: axes from 0, ranks that match the ranking table, offline runs
labelled as such in a unit that fits, plain log tick labels, offload labels that do not overlap.
Each check inspects the matplotlib figure the function drew (kept by intercepting ``close``)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from serveplan import SLO
from serveplan.report import plots
from serveplan.report.plots import latency_histograms, plot_frontier, rate_sweep_plot, time_unit
from serveplan.report.ranking import plot_pareto, plot_throughput_frontier


@pytest.fixture
def figures(monkeypatch):
    """The figures the plot functions close, kept open for inspection."""
    plt = plots.pyplot()
    close = plt.close
    kept: list = []
    monkeypatch.setattr(plt, "close", lambda fig=None: kept.append(fig))
    yield kept
    for fig in kept:
        close(fig)


def _strategy(name: str, goodput: float, latency: float, disagg: bool = False) -> SimpleNamespace:
    return SimpleNamespace(name=name, goodput_per_device=goodput, e2e_mean_s=latency, goodput_ci=None,
                           candidate=SimpleNamespace(is_disaggregated=disagg, num_devices=8))


def test_pareto_starts_at_zero_and_numbers_points_with_their_ranking_rank(tmp_path, figures):
    # goodputs within 2% of each other: from 0 the gap stays small
    strategies = [_strategy(f"s{i}", 1.00 - 0.002 * i, 5.0 - 0.3 * (i % 4) + 0.05 * i, disagg=i % 2 == 1)
                  for i in range(10)]
    pareto = {"s0", "s3", "s7"}
    result = SimpleNamespace(strategies=strategies, pareto=pareto, slo_tolerance=0.1, rejected=[])
    plot_pareto(result, tmp_path / "pareto.png")
    ax = figures[-1].axes[0]
    assert ax.get_ylim()[0] == 0.0
    labels = sorted(t.get_text() for t in ax.texts if t.get_text().isdigit())
    assert labels == ["1", "4", "8"]       # s0, s3, s7 are ranks 1, 4 and 8 of the table
    key = next(t.get_text() for t in ax.texts if t.get_text().startswith("Pareto-optimal"))
    assert " 4  s3" in key and " 8  s7" in key and " 1  s0" in key


def test_throughput_frontier_starts_at_zero(tmp_path, figures):
    def point(arch: str, user: float, device: float, pareto: bool = True) -> SimpleNamespace:
        return SimpleNamespace(architecture=arch, name=f"{arch}-{user}", tokens_per_s_per_user=user,
                               tokens_per_s_per_device=device, pareto=pareto)

    frontier = [point("collocated", 20, 1000), point("collocated", 40, 990),
                point("disaggregated", 20, 1020), point("disaggregated", 40, 1010)]   # a 2% gap
    plot_throughput_frontier(SimpleNamespace(frontier=frontier), tmp_path / "frontier.png")
    ax = figures[-1].axes[0]
    low, high = ax.get_ylim()
    assert low == 0.0 and high >= 1020


def _fake_run(ttft_s: np.ndarray, *, offline: bool = False, concurrency: int | None = None,
              rate: float | None = None) -> SimpleNamespace:
    tpot = np.full(len(ttft_s), 0.045)
    stats = SimpleNamespace(p90=float(np.percentile(ttft_s, 90)), p99=float(np.percentile(ttft_s, 99)))
    cfg = SimpleNamespace(offline=offline, concurrency=concurrency, rate=rate, slo=SLO(ttft_s=1.5, tpot_s=0.07),
                          model=SimpleNamespace(name="llama-3.1-8b"), hardware=SimpleNamespace(name="h100-sxm"),
                          strategy="1m")
    return SimpleNamespace(config=cfg, requests=SimpleNamespace(ttft=ttft_s, tpot=tpot), ttft_s=stats,
                           tpot_s=SimpleNamespace(p90=0.045, p99=0.05))


def test_offline_histograms_say_offline_use_seconds_and_draw_no_slo(tmp_path, figures):
    ttft = np.linspace(10.0, 800.0, 300)      # an offline run's queueing: up to 800 s
    latency_histograms(_fake_run(ttft, offline=True), tmp_path / "h.png")
    fig = figures[-1]
    title = fig._suptitle.get_text()
    assert "None" not in title and "offline" in title
    ttft_ax, tpot_ax = fig.axes
    assert ttft_ax.get_xlabel() == "TTFT (s)" and tpot_ax.get_xlabel() == "TPOT (ms)"
    assert ttft_ax.get_xlim()[1] < 1e4          # seconds, not 800,000 ms
    legend = [t.get_text() for ax in fig.axes for t in ax.get_legend().get_texts()]
    assert not any(t.startswith("SLO") for t in legend)
    assert any(t.startswith("P99") and t.endswith(" s") for t in legend)


def test_closed_loop_and_open_loop_histograms_name_their_load(tmp_path, figures):
    latency_histograms(_fake_run(np.linspace(0.05, 0.4, 50), concurrency=16), tmp_path / "c.png")
    latency_histograms(_fake_run(np.linspace(0.05, 0.4, 50), rate=3.5), tmp_path / "r.png")
    closed, open_ = figures[-2:]
    assert "concurrency 16" in closed._suptitle.get_text()
    assert "rate 3.5 req/s" in open_._suptitle.get_text()
    legend = [t.get_text() for t in open_.axes[0].get_legend().get_texts()]
    assert "SLO 1,500.0 ms" in legend            # an online run keeps its SLO line, in ms
    assert time_unit([0.2, 9.9]) == (1e3, "ms") and time_unit([0.2, 12.0]) == (1.0, "s")


def _rendered_labels(fig, axis) -> list[str]:
    fig.canvas.draw()
    return [t.get_text() for t in axis.get_ticklabels(which="both") if t.get_text()]


def test_log_axes_have_plain_tick_labels(tmp_path, figures):
    runs = []
    for rate, ttft_p90 in ((1.0, 0.015), (2.0, 0.022), (3.0, 0.038)):   # 15 to 38 ms: less than a decade
        cfg = SimpleNamespace(rate=rate, slo=SLO(ttft_s=0.03, tpot_s=0.02), model=SimpleNamespace(name="m"),
                              hardware=SimpleNamespace(name="h"), strategy="1m")
        runs.append(SimpleNamespace(config=cfg, ttft_s=SimpleNamespace(p90=ttft_p90),
                                    tpot_s=SimpleNamespace(p90=ttft_p90 / 2), overloaded=False))
    rate_sweep_plot(runs, tmp_path / "sweep.png")
    fig = figures[-1]
    labels = _rendered_labels(fig, fig.axes[0].yaxis)
    assert labels, "the y axis shows some labels"
    assert not any("10^" in t or "times" in t or "$" in t for t in labels), labels
    assert "20" in labels or "30" in labels


def _plan(latency: float, throughput: float, block: int, compress: bool) -> SimpleNamespace:
    return SimpleNamespace(latency_s=latency, throughput_tokens_per_s=throughput, model="opt-175b", gpu="t4",
                           host="flexgen-t4", input_len=512, output_len=32,
                           policy=SimpleNamespace(block_size=block, compress=compress))


def test_offload_frontier_labels_do_not_overlap_and_ticks_are_plain(tmp_path, figures):
    pts = [_plan(10.0 * 1.08 ** i, 5.0 * 1.07 ** i, 32 * (i + 1), i % 2 == 1) for i in range(40)]
    plot_frontier(SimpleNamespace(points=tuple(pts)), tmp_path / "frontier.png")
    fig = figures[-1]
    ax = fig.axes[0]
    renderer = fig.canvas.get_renderer()
    labels = [t for t in ax.texts if t.get_text().isdigit()]
    boxes = [t.get_window_extent(renderer) for t in labels]
    assert 2 <= len(labels) < len(pts)                      # a readable subset, not 40 stacked numbers
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    assert {labels_text for labels_text in (t.get_text() for t in labels)} >= {"32", str(32 * 40)}  # both ends
    for axis in (ax.xaxis, ax.yaxis):
        assert not any("10^" in t or "$" in t for t in _rendered_labels(fig, axis))
