"""Optimizer reports: ranked CSV, normalized-goodput bar chart (BestServe Figure 11 style), the
Pareto plot of goodput per device against latency, and the throughput frontier (output tokens/s
per device against tokens/s per user, as aiconfigurator draws it) as CSV and plot. matplotlib is
imported lazily (Agg backend)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from serveplan.report.plots import pyplot, save

COLUMNS = [
    "rank", "name", "strategy", "num_devices", "tp", "decode_tp", "pp", "dp", "ep", "max_batch", "scheduler",
    "goodput_rps", "goodput_per_device", "ttft_p_s", "tpot_p_s", "e2e_mean_s", "throughput_rps",
    "output_tokens_per_s", "binding_slo", "bottleneck", "pareto", "status", "reason",
]


def ranking_rows(result: Any) -> list[dict[str, Any]]:
    rows = []
    for i, r in enumerate(result.strategies, 1):
        d = r.to_dict()
        d["rank"] = i
        d["pareto"] = r.name in result.pareto
        rows.append(d)
    for r in result.rejected:
        d = r.to_dict()
        d["rank"] = ""
        d["pareto"] = False
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


FRONTIER_COLUMNS = ["architecture", "name", "num_devices", "goodput_rps", "tokens_per_s_per_user",
                    "tokens_per_s_per_device", "ttft_p_s", "tpot_p_s", "pareto"]


def write_frontier_csv(result: Any, path: str | Path) -> Path:
    """Every ranked strategy's point on the throughput frontier, its architecture's Pareto set marked."""
    path = Path(path)
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FRONTIER_COLUMNS, extrasaction="ignore")
        w.writeheader()
        for p in result.frontier:
            w.writerow(p.to_dict())
    return path


def plot_throughput_frontier(result: Any, path: str | Path, title: str = "") -> Path:
    """Output tokens/s per device against tokens/s per user: every strategy as a dot, each
    architecture's Pareto frontier as a line (aiconfigurator's chart)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for arch, color in (("collocated", "tab:blue"), ("disaggregated", "tab:orange")):
        pts = [p for p in result.frontier if p.architecture == arch]
        if not pts:
            continue
        ax.scatter([p.tokens_per_s_per_user for p in pts], [p.tokens_per_s_per_device for p in pts], s=14,
                   color=color, alpha=0.35)
        front = sorted((p for p in pts if p.pareto), key=lambda p: p.tokens_per_s_per_user)
        ax.plot([p.tokens_per_s_per_user for p in front], [p.tokens_per_s_per_device for p in front], "o-",
                color=color, label=f"{arch} frontier")
        best = max(front, key=lambda p: p.tokens_per_s_per_device)
        ax.annotate(best.name, (best.tokens_per_s_per_user, best.tokens_per_s_per_device), fontsize=7,
                    xytext=(4, 4), textcoords="offset points")
    ax.set_xlabel("tokens/s per user (1 / TPOT at the SLO percentile)")
    ax.set_ylabel("output tokens/s per device")
    ax.set_title(title or "throughput per device vs speed per user, at each strategy's goodput", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save(fig, path)
