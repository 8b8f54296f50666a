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
    "token_budget", "goodput_rps", "goodput_per_device", "ttft_p_s", "tpot_p_s", "e2e_mean_s", "throughput_rps",
    "output_tokens_per_s", "binding_slo", "bottleneck", "pareto", "slo_tolerance", "status", "method", "reason",
    "engine", "engine_version", "weight_dtype", "kv_dtype",
    # cost and energy (docs/cost-energy.md): US dollars, watts, joules, at the goodput / planned rate
    "planned_rps", "replicas", "usd_per_hour", "usd_per_mtok_output", "usd_per_mtok_total", "usd_per_month",
    "power_w_per_device", "j_per_output_token", "j_per_token", "kwh_per_month",
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
    """Every strategy of a search: the ranked ones, those missing the SLO at any rate, and those
    pruned (a pruned one's goodput is its bound, ``status`` says so); each row names the engine
    and the formats the search assumed."""
    summ = getattr(result, "settings_summary", {}) or {}
    eng = summ.get("engine") or {}
    common = {"slo_tolerance": getattr(result, "slo_tolerance", None), "engine": eng.get("name"),
              "engine_version": eng.get("version"), "weight_dtype": summ.get("weight_dtype"),
              "kv_dtype": summ.get("kv_dtype")}
    rows = []
    cost_energy = getattr(result, "cost_energy", None)
    for i, r in enumerate(result.strategies, 1):
        d = r.to_dict() | common | (cost_energy(r.name) if cost_energy is not None else {})
        d["rank"] = i
        d["pareto"] = r.name in result.pareto
        rows.append(d)
    for r in result.rejected:
        d = r.to_dict() | common
        d["rank"] = ""
        d["pareto"] = False
        rows.append(d)
    for p in getattr(result, "pruned", ()):
        rows.append({"rank": "", "name": p.name, "num_devices": p.num_devices, "pareto": False,
                     "goodput_rps": p.bound_rps, "goodput_per_device": p.bound_per_device,
                     "status": f"pruned ({p.kind}{': goodput is a bound' if p.bound_rps is not None else ''})",
                     "reason": p.reason} | common)
    return rows


def write_csv(result: Any, path: str | Path) -> Path:
    path = Path(path)
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        for row in ranking_rows(result):
            w.writerow(row)
    return path


#: Strategies drawn in ``goodput.png`` (best first; every strategy is in ``ranking.csv``).
TOP_BARS = 30


def plot_goodput_bars(result: Any, path: str | Path, title: str = "", *, top: int = TOP_BARS) -> Path:
    """Normalized goodput (req/s per device) of the ``top`` best strategies, collocated and
    disaggregated coloured apart; the figure's width is bounded whatever the number of strategies
    (all of them are in the CSV)."""
    plt = pyplot()
    everything = list(result.strategies)
    items = everything[:top]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.3 * len(items) + 2), 4.4))
    colors = ["#4C72B0" if not r.candidate.is_disaggregated else "#DD8452" for r in items]
    ax.bar(range(len(items)), [r.goodput_per_device for r in items], color=colors)
    for i, r in enumerate(items):
        if r.goodput_ci:
            lo, hi = (v / r.candidate.num_devices for v in r.goodput_ci)
            ax.plot([i, i], [lo, hi], color="black", lw=1)
    ax.set_xticks(range(len(items)))
    ax.set_xticklabels([r.name for r in items], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel(f"goodput per device (req/s, {_tol_short(result)})")
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color="#4C72B0", label="collocated"), Patch(color="#DD8452", label="disaggregated")],
              fontsize=8)
    shown = (f"best {len(items)} of {len(everything)} strategies (all in ranking.csv)" if len(everything) > len(items)
             else "best first")
    ax.set_title(f"{title or 'Normalized goodput by strategy'}, {shown}", fontsize=9)
    return save(fig, path, dpi=130)


def _tol_short(result: Any) -> str:
    tol = getattr(result, "slo_tolerance", None)
    return "SLO" if tol is None else ("strict SLO" if tol == 0 else f"SLO +{tol:.0%}")


def plot_pareto(result: Any, path: str | Path, title: str = "") -> Path:
    """Goodput per device against mean end-to-end latency at the goodput rate; the Pareto set
    joined. Only the Pareto-optimal points are labelled, by their rank in the ranking table
    (``ranking.csv``: the 1-based position in ``result.strategies``), with a key beside the axes
    naming each, so labels never collide however many strategies there are. The goodput axis
    starts at 0, so a small gap between strategies looks small."""
    plt = pyplot()
    pts = [(r.e2e_mean_s, r.goodput_per_device, r) for r in result.strategies]
    ranks = {r.name: k for k, r in enumerate(result.strategies, 1)}
    front = sorted((lat, thr, r.name) for lat, thr, r in pts if r.name in result.pareto)
    fig, ax = plt.subplots(figsize=(8.6 if front else 6.4, 4.6))
    for lat, thr, r in pts:
        on = r.name in result.pareto
        ax.scatter(lat, thr, c="#C44E52" if on else "#8C8C8C", marker="s" if r.candidate.is_disaggregated else "o",
                   s=36 if on else 18, zorder=3)
    if front:
        ax.plot([p[0] for p in front], [p[1] for p in front], color="#C44E52", lw=1)
    ax.set_ylim(bottom=0)   # from 0: a 2% gap in goodput must not fill the height
    if front:
        _place_labels(fig, ax, [(lat, thr, str(ranks[name])) for lat, thr, name in front])
        key = "\n".join(f"{ranks[name]:>{len(str(len(ranks)))}}  {name}"
                        for name in sorted((n for _, _, n in front), key=ranks.__getitem__))
        ax.text(1.02, 1.0, "Pareto-optimal (rank)\n" + key, transform=ax.transAxes, va="top", ha="left", fontsize=7,
                family="monospace")
    ax.set_xlabel("mean end-to-end latency at goodput (s)")
    ax.set_ylabel(f"goodput per device (req/s, {_tol_short(result)})")
    ax.set_title(title or ("Throughput per device against latency (circles collocated, squares disaggregated)\n"
                           "Pareto-optimal: no other strategy is both faster and serves more per device"), fontsize=8)
    ax.grid(alpha=0.3)
    return save(fig, path, dpi=130)


def _place_labels(fig: Any, ax: Any, points: list[tuple[float, float, str]]) -> None:
    """Label each point with its text at the first offset (rings of eight directions, growing)
    where the label overlaps no label placed before it; a label away from its point gets a leader
    line. Greedy, in display coordinates, once the axes' limits are final."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    placed: list[Any] = []
    dirs = [(1, 1), (-1, 1), (1, -1), (-1, -1), (0, 1), (0, -1), (1, 0), (-1, 0)]
    style = {"textcoords": "offset points", "fontsize": 7, "color": "#C44E52", "ha": "center", "va": "center"}
    for x, y, text in points:
        chosen = (96.0, 96.0)   # nowhere free within reach: the outermost ring, up and to the right
        for radius in (5, 10, 16, 24, 34, 46, 60, 76, 96):
            free = None
            for dx, dy in dirs:
                t = ax.annotate(text, (x, y), xytext=(dx * radius, dy * radius), **style)
                box = t.get_window_extent(renderer).expanded(1.15, 1.15)
                t.remove()
                if not any(box.overlaps(b) for b in placed):
                    free = (dx * radius, dy * radius)
                    break
            if free is not None:
                chosen = free
                break
        lead = {"arrowprops": {"arrowstyle": "-", "color": "#C44E52", "lw": 0.5}} if max(map(abs, chosen)) > 10 else {}
        t = ax.annotate(text, (x, y), xytext=chosen, **style, **lead)
        placed.append(t.get_window_extent(renderer).expanded(1.15, 1.15))


FRONTIER_COLUMNS = ["architecture", "name", "num_devices", "goodput_rps", "tokens_per_s_per_user",
                    "tokens_per_s_per_device", "ttft_p_s", "tpot_p_s", "pareto",
                    "usd_per_mtok_output", "j_per_output_token", "power_w_per_device"]


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
    ax.set_ylim(bottom=0)   # from 0: a 2% gap between frontiers must not fill the height
    ax.set_xlabel("tokens/s per user (1 / TPOT at the SLO percentile)")
    ax.set_ylabel("output tokens/s per device")
    ax.set_title(title or "throughput per device vs speed per user, at each strategy's goodput", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save(fig, path)
