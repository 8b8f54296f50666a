"""Optimizer reports: ranked CSV, normalized-goodput bar chart (BestServe Figure 11 style) and the
Pareto plot of goodput per device against latency. matplotlib is imported lazily (Agg backend)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from serveplan.report.plots import pyplot, save

COLUMNS = [
    "rank", "name", "strategy", "num_devices", "tp", "decode_tp", "pp", "dp", "ep", "max_batch", "scheduler",
    "goodput_rps", "goodput_per_device", "ttft_p_s", "tpot_p_s", "e2e_mean_s", "throughput_rps",
    "output_tokens_per_s", "binding_slo", "bottleneck", "pareto", "slo_tolerance", "status", "reason",
]

#: What "Pareto-optimal" is measured against (``serveplan.optimize.search.pareto_front``).
PARETO_NOTE = ("* = Pareto-optimal: no other strategy has both a higher goodput per device and a lower mean "
               "end-to-end latency at its goodput rate")


def tolerance_note(result: Any) -> str:
    """How a goodput was judged: ``"SLO met within +10%"`` (the percentile may exceed each target by
    the tolerance; BestServe Algorithm 9), or ``"SLO met strictly"`` at tolerance 0."""
    tol = getattr(result, "slo_tolerance", None)
    if tol is None:
        return "SLO tolerance unknown"
    return "SLO met strictly (tolerance 0)" if tol == 0 else f"SLO met within +{tol:.0%} (tolerance {tol:g})"


def ranking_rows(result: Any) -> list[dict[str, Any]]:
    rows = []
    for i, r in enumerate(result.strategies, 1):
        d = r.to_dict()
        d["rank"] = i
        d["pareto"] = r.name in result.pareto
        d["slo_tolerance"] = getattr(result, "slo_tolerance", None)
        rows.append(d)
    for r in result.rejected:
        d = r.to_dict()
        d["rank"] = ""
        d["pareto"] = False
        d["slo_tolerance"] = getattr(result, "slo_tolerance", None)
        rows.append(d)
    return rows


def write_csv(result: Any, path: str | Path) -> Path:
    path = Path(path)
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        for row in ranking_rows(result):
            w.writerow(row)
    return path


def plot_goodput_bars(result: Any, path: str | Path, title: str = "") -> Path:
    """Normalized goodput (req/s per device) per strategy, collocated and disaggregated coloured apart."""
    plt = pyplot()
    items = list(result.strategies)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.45 * len(items) + 2), 4.2))
    colors = ["#4C72B0" if not r.candidate.is_disaggregated else "#DD8452" for r in items]
    ax.bar(range(len(items)), [r.goodput_per_device for r in items], color=colors)
    for i, r in enumerate(items):
        if r.goodput_ci:
            lo, hi = (v / r.candidate.num_devices for v in r.goodput_ci)
            ax.plot([i, i], [lo, hi], color="black", lw=1)
    ax.set_xticks(range(len(items)))
    ax.set_xticklabels([r.name for r in items], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("goodput per device (req/s)")
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color="#4C72B0", label="collocated"), Patch(color="#DD8452", label="disaggregated")],
              fontsize=8)
    ax.set_title(title or "Normalized goodput by strategy (best first)")
    return save(fig, path, dpi=130)


def plot_pareto(result: Any, path: str | Path, title: str = "") -> Path:
    """Goodput per device against mean end-to-end latency at the goodput rate; Pareto set joined."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    pts = [(r.e2e_mean_s, r.goodput_per_device, r) for r in result.strategies]
    for lat, thr, r in pts:
        on = r.name in result.pareto
        ax.scatter(lat, thr, c="#C44E52" if on else "#8C8C8C", marker="s" if r.candidate.is_disaggregated else "o",
                   s=36 if on else 18, zorder=3)
        if on:
            ax.annotate(r.name, (lat, thr), fontsize=7, xytext=(4, 3), textcoords="offset points")
    front = sorted((lat, thr) for lat, thr, r in pts if r.name in result.pareto)
    if front:
        ax.plot([p[0] for p in front], [p[1] for p in front], color="#C44E52", lw=1)
    ax.set_xlabel("mean end-to-end latency at goodput (s)")
    ax.set_ylabel("goodput per device (req/s)")
    ax.set_title(title or "Throughput per device against latency (circles collocated, squares disaggregated)",
                 fontsize=9)
    ax.grid(alpha=0.3)
    return save(fig, path, dpi=130)
