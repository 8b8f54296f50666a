"""Tables of simulation results: plain records (for JSON/CSV) and display rows (ms, req/s)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from serveplan.sim import SimulationResult


def latency_rows(res: SimulationResult) -> list[list[str]]:
    """Rows ``[metric, mean, p50, p90, p99, target]`` in milliseconds (ITL, over tokens, when the run
    recorded it)."""
    slo = res.config.slo
    rows = []
    itl = [("ITL", res.itl_s, None)] if res.itl_s is not None else []
    for label, stats, target in (("TTFT", res.ttft_s, slo.ttft_s), ("TPOT", res.tpot_s, slo.tpot_s), *itl,
                                 ("E2E", res.e2e_s, None), ("queueing", res.queue_s, None)):
        rows.append([label, *(_ms(getattr(stats, k)) for k in ("mean", "p50", "p90", "p99")),
                     _ms(target) if target else ""])
    return rows


def summary_lines(res: SimulationResult, *, judge_slo: bool = True) -> list[str]:
    """One-line facts under the latency table; ``judge_slo`` False (offline and closed loops, which
    have no arrival rate to hold an online SLO against) leaves the SLO out."""
    slo = res.config.slo
    lines = [
        f"completed {res.num_completed}/{res.num_requests} requests in {res.makespan_s:,.1f} s simulated on "
        f"{res.config.num_devices} devices; throughput {res.throughput_rps:.3f} req/s, "
        f"{res.output_tokens_per_s:,.0f} output tok/s ({res.output_tokens_per_s / res.config.num_devices:,.0f} per "
        f"device), {res.total_tokens_per_s:,.0f} total tok/s; FOM {res.fom / 1e12:.1f} TFLOP/s",
    ]
    if judge_slo:
        lines.append(f"SLO (TTFT <= {slo.ttft_s * 1e3:g} ms and TPOT <= {slo.tpot_s * 1e3:g} ms) met by "
                     f"{res.slo_attainment:.1%} of requests (TTFT {res.ttft_attainment:.1%}, TPOT "
                     f"{res.tpot_attainment:.1%}); SLO-meeting throughput {res.slo_met_throughput_rps:.3f} req/s (not "
                     "the goodput, the highest rate meeting the SLO: serveplan optimize)")
    else:
        lines.append("no SLO judged: an offline run or a closed loop has no arrival rate to hold an online SLO "
                     "against (serveplan optimize finds the highest rate that meets it)")
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


def concurrency_records(results: Sequence[SimulationResult]) -> list[dict[str, Any]]:
    """One record per closed-loop level (``simulate --concurrency C1,C2,...``): steady-window
    latencies (s), tokens/s per user and per device, throughput, Little's law and preemptions."""
    recs = []
    for r in results:
        cl = r.closed_loop
        assert cl is not None
        recs.append({"concurrency": cl.concurrency, "ttft_mean_s": cl.ttft_s.mean, "ttft_p90_s": cl.ttft_s.p90,
                     "tpot_mean_s": cl.tpot_s.mean, "tpot_p90_s": cl.tpot_s.p90,
                     "tokens_per_s_per_user": cl.tokens_per_s_per_user,
                     "output_tokens_per_s_per_device": cl.output_tokens_per_s_per_device,
                     "throughput_rps": cl.throughput_rps, "littles_law": cl.littles_law,
                     "num_measured": cl.num_measured, "preemptions": r.num_preemptions})
    return recs


def fit_columns(width: int, columns: Sequence[tuple[str, int, bool]]) -> list[str]:
    """The columns of a table that fit a terminal ``width`` characters wide: each ``(name,
    min_width, essential)`` takes ``max(len(name), min_width) + 3`` characters (0: about 26, a
    strategy's name); secondary columns are dropped from the right until the rest fit, essential
    ones never (the strategy's name, the answer, is essential)."""
    def need(cols: Sequence[tuple[str, int, bool]]) -> int:
        return sum((max(len(n), w) if w else 26) + 3 for n, w, _ in cols) + 1

    kept = list(columns)
    while need(kept) > width:
        drop = next((c for c in reversed(kept) if not c[2]), None)
        if drop is None:
            break
        kept.remove(drop)
    return [c[0] for c in kept]


def plan_header(summary: dict[str, Any], *, devices: int | str, workload: str) -> str:
    """The line above a ranking saying what was assumed: the model and its formats, the devices and
    profile, the engine with its version and scheduler knobs, the workload and the SLO (several
    hardware types: the summary's ``budget``, e.g. ``8 x h100-sxm, 16 x l40s``)."""
    eng = summary.get("engine") or {}
    space = summary.get("space") or {}
    knobs = []
    if space.get("schedulers"):
        knobs.append("/".join(space["schedulers"]))
    if space.get("max_batches"):
        knobs.append("max batch " + ",".join(map(str, space["max_batches"])))
    if space.get("token_budget"):
        knobs.append(f"budget {space['token_budget']}")
    elif space.get("chunk_sizes") and any(s in ("chunked-prefill", "prefill-priority")
                                          for s in space.get("schedulers", ())):
        knobs.append("chunk " + ",".join(map(str, space["chunk_sizes"])))
    engine = (f"{eng.get('engine')} {eng.get('version')} ({', '.join(knobs)})" if eng
              else f"no engine ({', '.join(knobs)})")
    slo = summary.get("slo") or {}
    tol = summary.get("slo_tolerance") or 0
    fleet = summary.get("budget") or f"{devices} x {summary.get('hardware')}"
    return (f"{summary.get('model')} ({summary.get('weight_dtype', '?')} weights, {summary.get('kv_dtype', '?')} KV) "
            f"on up to {fleet} ({summary.get('profile')}); engine {engine}; {workload}, "
            f"{summary.get('num_requests')} requests per simulation; SLO P{slo.get('percentile', 90):g} TTFT "
            f"{slo.get('ttft_s', 0):g} s / TPOT {slo.get('tpot_s', 0) * 1e3:g} ms"
            + (f" (+{tol:.0%} tolerance)" if tol else " (strict)"))


def _ms(v: float | None) -> str:
    if v is None or v != v:
        return "-"
    return f"{v * 1e3:,.1f}"
