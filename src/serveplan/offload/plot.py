"""Latency-throughput frontier plot (FlexGen Figure 1); matplotlib is imported lazily (Agg)."""

from __future__ import annotations

from pathlib import Path

from serveplan.offload.search import OffloadFrontier


def plot_frontier(frontier: OffloadFrontier, path: str | Path, *, title: str | None = None) -> Path:
    """Write the frontier (block latency vs generation throughput, log-log) to ``path`` (PNG).

    Returns
    -------
    Path
        The file written.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = frontier.points
    fig, ax = plt.subplots(figsize=(6, 4))
    for compress, marker, label in ((False, "o", "FP16"), (True, "s", "4-bit compressed")):
        sel = [p for p in pts if p.policy.compress == compress]
        if sel:
            ax.plot([p.latency_s for p in sel], [p.throughput_tokens_per_s for p in sel],
                    marker=marker, linestyle="", label=label)
    ax.plot([p.latency_s for p in pts], [p.throughput_tokens_per_s for p in pts], color="grey",
            linewidth=0.8, zorder=0)
    for p in pts:
        ax.annotate(str(p.policy.block_size), (p.latency_s, p.throughput_tokens_per_s),
                    textcoords="offset points", xytext=(3, 3), fontsize=7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("latency of one block (s)")
    ax.set_ylabel("generation throughput (token/s)")
    if pts:
        p0 = pts[0]
        ax.set_title(title or f"{p0.model} on {p0.gpu} + {p0.host}, {p0.input_len}+{p0.output_len} tokens",
                     fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
