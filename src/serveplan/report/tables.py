"""Tables of simulation results: plain records (for JSON/CSV) and display rows (ms, req/s)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from serveplan.sim import SimulationResult


def latency_rows(res: SimulationResult) -> list[list[str]]:
    """Rows ``[metric, mean, p50, p90, p99, target]`` in milliseconds."""
    slo = res.config.slo
    rows = []
    for label, stats, target in (("TTFT", res.ttft_s, slo.ttft_s), ("TPOT", res.tpot_s, slo.tpot_s),
                                 ("E2E", res.e2e_s, None), ("queueing", res.queue_s, None)):
        rows.append([label, *(_ms(getattr(stats, k)) for k in ("mean", "p50", "p90", "p99")),
                     _ms(target) if target else ""])
    return rows


def summary_lines(res: SimulationResult) -> list[str]:
    """One-line facts under the latency table."""
    slo = res.config.slo
    lines = [
        f"completed {res.num_completed}/{res.num_requests} requests in {res.makespan_s:,.1f} s simulated; "
        f"throughput {res.throughput_rps:.3f} req/s, {res.output_tokens_per_s:,.0f} output tok/s, "
        f"{res.total_tokens_per_s:,.0f} total tok/s",
        f"SLO (TTFT <= {slo.ttft_s * 1e3:g} ms and TPOT <= {slo.tpot_s * 1e3:g} ms) met by "
        f"{res.slo_attainment:.1%} of requests (TTFT {res.ttft_attainment:.1%}, TPOT {res.tpot_attainment:.1%}); "
        f"SLO-meeting throughput {res.slo_met_throughput_rps:.3f} req/s (not the goodput, the highest rate "
        "meeting the SLO: serveplan optimize); "
        f"FOM {res.fom / 1e12:.1f} TFLOP/s",
    ]
    extra = []
    if res.num_preemptions:
        extra.append(f"{res.num_preemptions} preemptions (KV cache full)")
    if res.bubble_s.size and res.bubble_s.max() > 0:
        extra.append(f"pipeline bubble per request: mean {res.bubble_s.mean() * 1e3:.1f} ms")
    if res.overloaded:
        extra.append("OVERLOADED: arrivals outpace service (the queue grows without bound)")
    if res.stopped_early:
        extra.append(f"stopped early: P{res.config.slo.percentile:g} SLO certainly missed")
    if extra:
        lines.append("; ".join(extra))
    return lines


def sweep_records(results: Sequence[SimulationResult]) -> list[dict[str, Any]]:
    """One record per rate: P90/P99 TTFT and TPOT (s), throughput, attainment, overload."""
    out = []
    for r in results:
        out.append({
            "rate": r.config.rate, "ttft_p90_s": r.ttft_s.p90, "ttft_p99_s": r.ttft_s.p99,
            "tpot_p90_s": r.tpot_s.p90, "tpot_p99_s": r.tpot_s.p99, "throughput_rps": r.throughput_rps,
            "slo_attainment": r.slo_attainment, "overloaded": r.overloaded,
        })
    return out


def _ms(v: float | None) -> str:
    if v is None or v != v:
        return "-"
    return f"{v * 1e3:,.1f}"
