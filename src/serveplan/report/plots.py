"""Simulation plots (matplotlib, imported lazily with the non-interactive ``Agg`` backend).

* :func:`latency_histograms`: TTFT and TPOT histograms with P90, P99 and SLO lines (BestServe
  Figures 6 and 8).
* :func:`rate_sweep_plot`: P90 TTFT and TPOT against the arrival rate, with the targets
  (BestServe Figures 7 and 9).
* :func:`plot_frontier`: an offloading latency-throughput frontier (FlexGen Figure 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from serveplan.offload.search import OffloadFrontier
    from serveplan.sim import SimulationResult

#: matplotlib is a dependency of serveplan (every ``--out`` writes plots), so this only shows in an
#: environment where it was removed or failed to install.
INSTALL_HINT = "plots need matplotlib, a dependency of serveplan: pip install 'matplotlib>=3.7'"


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the non-interactive Agg backend (imported on first use)."""
    try:
        import matplotlib
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(INSTALL_HINT) from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig: Any, path: str | Path, *, dpi: int = 120) -> Path:
    """Lay out ``fig``, write it to ``path`` (PNG; missing folders are created) and release it."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=dpi)
    pyplot().close(fig)
    return out


#: Latencies whose largest value reaches this many seconds are drawn in seconds, others in ms: an
#: offline run's TTFT of 800 s reads better than 800,000 ms.
SECONDS_FROM_S = 10.0


def time_unit(values_s: Any) -> tuple[float, str]:
    """``(scale, unit)`` that fits latencies ``values_s`` (seconds): ``(1, "s")`` when the largest
    finite value is at least :data:`SECONDS_FROM_S`, else ``(1e3, "ms")``."""
    v = np.asarray(values_s, dtype=float)
    v = v[np.isfinite(v)]
    return (1.0, "s") if v.size and float(v.max()) >= SECONDS_FROM_S else (1e3, "ms")


def load_label(cfg: Any) -> str:
    """How a simulation's requests arrived: ``offline``, ``concurrency 16``, ``rate 3.5 req/s`` or
    ``trace arrivals``."""
    if getattr(cfg, "offline", False):
        return "offline (every request queued at t=0)"
    if getattr(cfg, "concurrency", None):
        return f"concurrency {cfg.concurrency} (closed loop)"
    if cfg.rate is not None:
        return f"rate {cfg.rate:g} req/s"
    return "trace arrivals"


def latency_histograms(res: SimulationResult, path: str | Path) -> Path:
    """Two panels (TTFT, TPOT) with P90, P99 and SLO vertical lines, each in the unit that fits
    (:func:`time_unit`); an offline run has no arrival rate, so no online SLO line is drawn."""
    plt = pyplot()
    cfg = res.config
    slo = cfg.slo
    offline = bool(getattr(cfg, "offline", False))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, name, values, stats, target in (
        (axes[0], "TTFT", res.requests.ttft, res.ttft_s, slo.ttft_s),
        (axes[1], "TPOT", res.requests.tpot, res.tpot_s, slo.tpot_s),
    ):
        v = np.asarray(values, dtype=float)
        v = v[np.isfinite(v)]
        scale, unit = time_unit(v)
        if v.size:
            ax.hist(v * scale, bins=60, color="#4c72b0", alpha=0.8)
        lines = [(stats.p90, "--", "P90"), (stats.p99, ":", "P99")]
        if not offline:
            lines.append((target, "-", "SLO"))
        for val, style, label in lines:
            if val == val:
                ax.axvline(val * scale, color="#c44e52" if label == "SLO" else "black", linestyle=style,
                           label=f"{label} {val * scale:,.1f} {unit}")
        ax.set_xlabel(f"{name} ({unit})")
        ax.set_ylabel("requests")
        ax.legend()
    fig.suptitle(f"{cfg.model.name} on {cfg.hardware.name}, {cfg.strategy}, {load_label(cfg)}")
    return save(fig, path)


def plain_number(x: float) -> str:
    """A tick value as plain digits: ``20``, ``0.05``, ``2,000``, never ``2x10^1``."""
    if x >= 1000:
        return f"{x:,.0f}"
    return str(np.format_float_positional(x, precision=3, unique=True, fractional=False, trim="-"))


def plain_log_ticks(ax: Any) -> None:
    """Label the log axes of ``ax`` in plain numbers: the ticks matplotlib's log formatters label
    (every decade, and minor ticks over a short range), written ``20`` rather than ``2x10^1``."""
    from matplotlib.ticker import Formatter

    class Plain(Formatter):   # keeps the log formatter's choice of which ticks carry a label
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def set_axis(self, axis: Any) -> None:
            super().set_axis(axis)
            self.inner.set_axis(axis)

        def set_locs(self, locs: Any) -> None:
            super().set_locs(locs)
            self.inner.set_locs(locs)

        def __call__(self, x: float, pos: int | None = None) -> str:
            return plain_number(x) if x > 0 and self.inner(x, pos) else ""

    for axis in (ax.xaxis, ax.yaxis):
        if axis.get_scale() == "log":
            axis.set_major_formatter(Plain(axis.get_major_formatter()))
            axis.set_minor_formatter(Plain(axis.get_minor_formatter()))


def rate_sweep_plot(results: Sequence[SimulationResult], path: str | Path) -> Path:
    """P90 TTFT and TPOT (ms) against arrival rate (req/s), SLO targets dashed."""
    plt = pyplot()
    rs = sorted(results, key=lambda r: r.config.rate or 0.0)
    rates = [r.config.rate or 0.0 for r in rs]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    slo = rs[0].config.slo
    for ax, name, key, target in ((axes[0], "TTFT", "ttft_s", slo.ttft_s), (axes[1], "TPOT", "tpot_s", slo.tpot_s)):
        ax.plot(rates, [getattr(r, key).p90 * 1e3 for r in rs], marker="o", label=f"P{90} {name}")
        ax.axhline(target * 1e3, color="#c44e52", linestyle="--", label=f"SLO {target * 1e3:g} ms")
        over = [rate for r, rate in zip(rs, rates, strict=True) if r.overloaded]
        if over:
            ax.axvspan(min(over), max(rates), color="grey", alpha=0.15, label="overloaded")
        ax.set_yscale("log")
        plain_log_ticks(ax)
        ax.set_xlabel("arrival rate (req/s)")
        ax.set_ylabel(f"P90 {name} (ms)")
        ax.legend()
    cfg = rs[0].config
    fig.suptitle(f"{cfg.model.name} on {cfg.hardware.name}, {cfg.strategy}: P90 latency against arrival rate")
    return save(fig, path)


def plot_frontier(frontier: OffloadFrontier, path: str | Path, *, title: str | None = None) -> Path:
    """Write the frontier (block latency vs generation throughput, log-log) to ``path`` (PNG).

    Returns
    -------
    Path
        The file written.
    """
    plt = pyplot()
    pts = frontier.points
    fig, ax = plt.subplots(figsize=(6, 4))
    for compress, marker, label in ((False, "o", "FP16"), (True, "s", "4-bit compressed")):
        sel = [p for p in pts if p.policy.compress == compress]
        if sel:
            ax.plot([p.latency_s for p in sel], [p.throughput_tokens_per_s for p in sel],
                    marker=marker, linestyle="", label=label)
    ax.plot([p.latency_s for p in pts], [p.throughput_tokens_per_s for p in pts], color="grey",
            linewidth=0.8, zorder=0)
    ax.set_xscale("log")
    ax.set_yscale("log")
    plain_log_ticks(ax)
    ax.set_xlabel("latency of one block (s)")
    ax.set_ylabel("generation throughput (token/s)")
    if pts:
        p0 = pts[0]
        ax.set_title((title or f"{p0.model} on {p0.gpu} + {p0.host}, {p0.input_len}+{p0.output_len} tokens")
                     + "\nlabels: block size (sequences per block); a label that would overlap another is left out",
                     fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    label_points(fig, ax, [(p.latency_s, p.throughput_tokens_per_s, str(p.policy.block_size)) for p in pts])
    return save(fig, path)


def label_points(fig: Any, ax: Any, points: Sequence[tuple[float, float, str]], *, fontsize: float = 7) -> list[Any]:
    """Label points without overlap: each label goes to the first of four offsets around its point
    where it overlaps no label placed before it and no axes edge, else it is left out (a dense
    frontier shows a readable subset). The first and last points are placed first, so the ends of a
    curve always carry their labels. Call once the axes' limits are final. Returns the labels drawn."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    order = list(range(len(points)))
    if len(order) > 1:
        order = [0, len(order) - 1] + order[1:-1]
    placed: list[Any] = []
    drawn = []
    for i in order:
        x, y, text = points[i]
        for dx, dy in ((4, 4), (4, -10), (-10, 4), (-10, -10)):
            t = ax.annotate(text, (x, y), textcoords="offset points", xytext=(dx, dy), fontsize=fontsize)
            box = t.get_window_extent(renderer)
            inside = frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
            if inside and not any(box.overlaps(b) for b in placed):
                placed.append(box.expanded(1.1, 1.2))
                drawn.append(t)
                break
            t.remove()
    return drawn


def concurrency_plot(levels: Sequence[dict[str, Any]], path: str | Path, *, title: str = "") -> Path:
    """Closed-loop sweep (``simulate --concurrency C1,C2,...``): TTFT, TPOT and tokens/s/user
    against output tokens/s per GPU, one point per concurrency (labelled)."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    x = [d["output_tokens_per_s_per_device"] for d in levels]
    for ax, key, label, scale in ((axes[0], "ttft_mean_s", "mean TTFT (ms)", 1e3),
                                  (axes[1], "tpot_mean_s", "mean TPOT (ms)", 1e3),
                                  (axes[2], "tokens_per_s_per_user", "tokens/s/user", 1.0)):
        y = [d[key] * scale for d in levels]
        ax.plot(x, y, marker="o")
        for xi, yi, d in zip(x, y, levels, strict=True):
            ax.annotate(f"C={d['concurrency']}", (xi, yi), textcoords="offset points", xytext=(4, 4), fontsize=8)
        ax.set_xlabel("output tokens/s per GPU")
        ax.set_ylabel(label)
    fig.suptitle(f"{title}: closed loop at each concurrency" if title else "closed loop at each concurrency")
    return save(fig, path)


def day_plan_plot(day: Any, path: str | Path) -> Path:
    """A day plan (:class:`~serveplan.optimize.autoscale.DayPlan`): devices over time (autoscaled,
    provisioned for the peak) above the rate over time, with the simulated SLO attainment per
    interval on a second axis."""
    plt = pyplot()
    rows = day.intervals()
    hours = np.array([r["start_s"] for r in rows] + [day.traffic.duration_s]) / 3600.0
    nd = day.unit.candidate.num_devices
    prov = np.array([r["devices_provisioned"] for r in rows])
    serving = np.array([r["replicas_serving"] for r in rows]) * nd
    peak = np.full(len(rows), day.peak_cost.peak_replicas * nd)
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    ax1.stairs(prov, hours, label="devices provisioned (autoscaled)", color="C0", linewidth=1.6, baseline=None)
    ax1.stairs(serving, hours, label="devices serving", color="C0", linestyle=":", linewidth=1.2, baseline=None)
    ax1.stairs(peak, hours, label="provisioned for the peak", color="C3", linestyle="--", baseline=None)
    ax1.set_ylabel("devices")
    ax1.set_ylim(bottom=0)
    ax1.legend(loc="upper left", fontsize=8)
    each = f"{nd} device{'s' if nd > 1 else ''} each"
    ax1.set_title(f"{day.unit.name} x N ({each}), {day.policy.policy} policy, {day.traffic.name}", fontsize=9)
    ax2.stairs(day.traffic.rates, hours, color="C2", label="rate", baseline=None)
    ax2.set_ylabel("requests/s")
    ax2.set_xlabel("hours")
    ax2.set_ylim(bottom=0)
    att = np.array([np.nan if r["attainment"] is None else r["attainment"] for r in rows])
    if np.isfinite(att).any():
        ax3 = ax2.twinx()
        ax3.plot((hours[:-1] + hours[1:]) / 2, att * 100, ".", color="C1", markersize=3,
                 label="SLO attainment (autoscaled)")
        ax3.axhline(day.percentile, color="C1", linewidth=0.6, linestyle=":")
        ax3.set_ylabel("attainment %")
        ax3.set_ylim(0, 101)
        ax3.legend(loc="lower right", fontsize=8)
    ax2.legend(loc="upper left", fontsize=8)
    return save(fig, path)
