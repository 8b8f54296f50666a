"""Simulation plots (matplotlib, imported lazily with the non-interactive ``Agg`` backend).

* :func:`latency_histograms`: TTFT and TPOT histograms with P90, P99 and SLO lines (BestServe
  Figures 6 and 8).
* :func:`rate_sweep_plot`: P90 TTFT and TPOT against the arrival rate, with the targets
  (BestServe Figures 7 and 9).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from serveplan.sim import SimulationResult

INSTALL_HINT = "plots need matplotlib: pip install 'serveplan[plot]'"


def _plt() -> Any:
    try:
        import matplotlib
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(INSTALL_HINT) from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def latency_histograms(res: SimulationResult, path: str | Path) -> Path:
    """Two panels (TTFT, TPOT, in ms) with P90, P99 and SLO vertical lines."""
    plt = _plt()
    slo = res.config.slo
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, name, values, stats, target in (
        (axes[0], "TTFT", res.requests.ttft, res.ttft_s, slo.ttft_s),
        (axes[1], "TPOT", res.requests.tpot, res.tpot_s, slo.tpot_s),
    ):
        v = np.asarray(values, dtype=float)
        v = v[np.isfinite(v)] * 1e3
        if v.size:
            ax.hist(v, bins=60, color="#4c72b0", alpha=0.8)
        for val, style, label in ((stats.p90, "--", "P90"), (stats.p99, ":", "P99"), (target, "-", "SLO")):
            if val == val:
                ax.axvline(val * 1e3, color="#c44e52" if label == "SLO" else "black", linestyle=style,
                           label=f"{label} {val * 1e3:,.1f} ms")
        ax.set_xlabel(f"{name} (ms)")
        ax.set_ylabel("requests")
        ax.legend()
    cfg = res.config
    fig.suptitle(f"{cfg.model.name} on {cfg.hardware.name}, {cfg.strategy}, rate {cfg.rate} req/s")
    fig.tight_layout()
    p = Path(path)
    fig.savefig(p, dpi=120)
    plt.close(fig)
    return p


def rate_sweep_plot(results: Sequence[SimulationResult], path: str | Path) -> Path:
    """P90 TTFT and TPOT (ms) against arrival rate (req/s), SLO targets dashed."""
    plt = _plt()
    rs = sorted(results, key=lambda r: r.config.rate or 0.0)
    rates = [r.config.rate for r in rs]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    slo = rs[0].config.slo
    for ax, name, key, target in ((axes[0], "TTFT", "ttft_s", slo.ttft_s), (axes[1], "TPOT", "tpot_s", slo.tpot_s)):
        ax.plot(rates, [getattr(r, key).p90 * 1e3 for r in rs], marker="o", label=f"P{90} {name}")
        ax.axhline(target * 1e3, color="#c44e52", linestyle="--", label=f"SLO {target * 1e3:g} ms")
        over = [r.config.rate for r in rs if r.overloaded]
        if over:
            ax.axvspan(min(over), max(rates), color="grey", alpha=0.15, label="overloaded")
        ax.set_yscale("log")
        ax.set_xlabel("arrival rate (req/s)")
        ax.set_ylabel(f"P90 {name} (ms)")
        ax.legend()
    cfg = rs[0].config
    fig.suptitle(f"{cfg.model.name} on {cfg.hardware.name}, {cfg.strategy}: P90 latency against arrival rate")
    fig.tight_layout()
    p = Path(path)
    fig.savefig(p, dpi=120)
    plt.close(fig)
    return p


def concurrency_plot(levels: Sequence[dict[str, Any]], path: str | Path, *, title: str = "") -> Path:
    """Closed-loop sweep (``simulate --concurrency C1,C2,...``): TTFT, TPOT and tokens/s/user
    against output tokens/s per GPU, one point per concurrency (labelled)."""
    plt = _plt()
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
    fig.tight_layout()
    p = Path(path)
    fig.savefig(p, dpi=120)
    plt.close(fig)
    return p
