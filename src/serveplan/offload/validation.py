"""FlexGen's measured T4 results (Tables 2 and 14-18) and the comparison of this model against them.

The cells are transcribed from FlexGen (Sheng et al., ICML 2023, arXiv:2303.06865), Appendix A.4:
generation throughput (token/s) on the T4 machine (Table 1) with the policy tuple printed next to it.
``docs/validation/offload.md`` is produced from :func:`compare_cells` and :func:`compare_table2`.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import Any

from serveplan.offload.policy import Overlap, parse_policy
from serveplan.offload.search import evaluate_policy, plan_offload
from serveplan.specs.catalog import get_host
from serveplan.specs.host import HostSpec


@dataclass(frozen=True, slots=True, kw_only=True)
class FlexGenCell:
    """One measured FlexGen run: model, lengths, compression, policy tuple and throughput."""

    table: int
    model: str
    input_len: int
    output_len: int
    compress: bool
    policy: str
    throughput_tokens_per_s: float


def _cells() -> tuple[FlexGenCell, ...]:
    # (table, s, n, [(model, FlexGen policy, tok/s), ...] for FlexGen and FlexGen (c))
    raw = [
        (14, 256, 32,
         [("opt-6.7b", "4x1,100,0,100,0,100,0", 53.29), ("opt-30b", "160x2,10,90,0,100,0,100", 16.01),
          ("opt-175b", "64x8,0,50,0,0,0,100", 1.36)],
         [("opt-6.7b", "128x1,100,0,100,0,100,0", 56.72), ("opt-30b", "128x8,0,100,0,100,0,100", 16.86),
          ("opt-175b", "96x3,0,100,0,100,0,100", 2.26)]),
        (15, 512, 32,
         [("opt-6.7b", "2x1,100,0,100,0,100,0", 25.26), ("opt-30b", "48x3,20,80,0,100,0,100", 7.32),
          ("opt-175b", "32x8,0,50,0,0,0,100", 0.69)],
         [("opt-6.7b", "72x1,100,0,100,0,100,0", 29.12), ("opt-30b", "16x20,20,80,0,100,100,0", 8.70),
          ("opt-175b", "48x3,0,100,0,100,0,100", 1.12)]),
        (16, 1024, 32,
         [("opt-6.7b", "1x1,100,0,100,0,100,0", 13.72), ("opt-30b", "20x4,4,96,0,100,0,100", 3.50),
          ("opt-175b", "12x12,0,50,0,0,0,100", 0.35)],
         [("opt-6.7b", "28x1,100,0,100,0,100,0", 13.18), ("opt-30b", "20x12,0,100,0,100,0,100", 3.98),
          ("opt-175b", "12x4,0,100,0,100,0,100", 0.42)]),
        (17, 128, 128,
         [("opt-6.7b", "7x1,100,0,100,0,100,0", 106.404), ("opt-30b", "32x10,25,75,0,100,100,0", 24.634),
          ("opt-175b", "64x8,0,50,0,0,0,100", 2.409)],
         [("opt-6.7b", "196x1,100,0,100,0,100,0", 92.568), ("opt-30b", "128x8,25,75,0,100,0,100", 39.141),
          ("opt-175b", "80x3,0,100,0,100,100,0", 4.264)]),
        (18, 512, 8,
         [("opt-6.7b", "2x1,100,0,100,0,100,0", 16.425), ("opt-30b", "512x8,20,80,0,100,0,100", 3.938),
          ("opt-175b", "32x8,0,50,0,0,0,100", 0.451)],
         [("opt-6.7b", "76x1,100,0,100,0,100,0", 14.244), ("opt-30b", "16x36,25,75,0,100,0,100", 4.019),
          ("opt-175b", "48x3,0,100,0,100,0,100", 0.559)]),
    ]
    out = []
    for table, s, n, plain, comp in raw:
        for rows, c in ((plain, False), (comp, True)):
            for model, pol, tp in rows:
                out.append(FlexGenCell(table=table, model=model, input_len=s, output_len=n, compress=c,
                                       policy=pol, throughput_tokens_per_s=tp))
    return tuple(out)


#: The 30 FlexGen cells of Tables 14-18 (T4 machine; OPT-6.7B/30B/175B; five length settings;
#: FlexGen and FlexGen (c)).
FLEXGEN_T4_CELLS: tuple[FlexGenCell, ...] = _cells()

#: Table 2's six settings (prompt 512 and 1024, output 32) are the cells of Tables 15 and 16.
TABLE2_CELLS: tuple[FlexGenCell, ...] = tuple(c for c in FLEXGEN_T4_CELLS if c.table in (15, 16))


def _setting(c: FlexGenCell) -> tuple[int, int]:
    return (c.input_len, c.output_len)


def compare_cells(cells: tuple[FlexGenCell, ...] = FLEXGEN_T4_CELLS, *, host: str | HostSpec = "flexgen-t4",
                  overlap: Overlap = Overlap.SERIAL_LOAD) -> list[dict[str, Any]]:
    """Evaluate each cell's printed policy and compare with the measured throughput."""
    out = []
    for c in cells:
        pol = parse_policy(c.policy, compress=c.compress)
        plan = evaluate_policy(c.model, pol, host=host, input_len=c.input_len, output_len=c.output_len,
                               overlap=overlap)
        ratio = plan.throughput_tokens_per_s / c.throughput_tokens_per_s
        out.append({
            "table": c.table, "model": c.model, "input_len": c.input_len, "output_len": c.output_len,
            "compress": c.compress, "policy": c.policy, "measured": c.throughput_tokens_per_s,
            "predicted": plan.throughput_tokens_per_s, "error": ratio - 1, "ratio": ratio,
            "fits": plan.fits,
        })
    return out


def summarize(records: list[dict[str, Any]]) -> dict[str, float]:
    """Median absolute relative error and the worst factor (max of ratio and 1/ratio)."""
    return {
        "median_abs_error": statistics.median(abs(r["error"]) for r in records),
        "max_factor": max(max(r["ratio"], 1 / r["ratio"]) for r in records),
        "cells": len(records),
    }


def compare_table2(*, host: str | HostSpec = "flexgen-t4",
                   overlap: Overlap = Overlap.SERIAL_LOAD) -> list[dict[str, Any]]:
    """Search mode on Table 2's settings: our chosen policy against FlexGen's, per compression."""
    out = []
    for c in TABLE2_CELLS:
        plan = plan_offload(c.model, host=host, input_len=c.input_len, output_len=c.output_len,
                            compress=c.compress, overlap=overlap)
        paper = evaluate_policy(c.model, parse_policy(c.policy, compress=c.compress), host=host,
                                input_len=c.input_len, output_len=c.output_len, overlap=overlap)
        out.append({
            "model": c.model, "input_len": c.input_len, "output_len": c.output_len,
            "compress": c.compress, "measured": c.throughput_tokens_per_s,
            "paper_policy": c.policy, "paper_policy_predicted": paper.throughput_tokens_per_s,
            "paper_policy_fits": paper.fits,
            "chosen_policy": plan.policy.label(), "cpu_attention": plan.policy.cpu_attention,
            "predicted": plan.throughput_tokens_per_s,
            "error": plan.throughput_tokens_per_s / c.throughput_tokens_per_s - 1,
            "uses_disk": plan.policy.wd > 0 or plan.policy.cd > 0,
            "weights_on_disk": plan.policy.wd, "seconds": plan.search["seconds"] if plan.search else None,
        })
    return out


#: (De)compression rates searched by :func:`fit_runtime`: 8 to 64 GB/s in steps of 2.
DECOMPRESS_GRID = tuple(x * 1e9 for x in range(8, 65, 2))


def fit_runtime(cells: tuple[FlexGenCell, ...], *, host: str | HostSpec = "flexgen-t4",
                memory_efficiency: tuple[float, ...] = (0.6, 0.7, 0.8, 0.9),
                decompress: tuple[float, ...] = DECOMPRESS_GRID,
                overlap: Overlap = Overlap.SERIAL_LOAD) -> tuple[float, float, float]:
    """Grid least-squares (log ratio) fit of ``memory_efficiency`` and one (de)compression rate
    used for both ``decompress_bandwidth`` and ``kv_decompress_bandwidth`` on ``cells``; the other
    constants stay as in the host file. Returns ``(memory_efficiency, weight_rate, kv_rate)``."""
    h = get_host(host) if isinstance(host, str) else host
    pols = [(c, parse_policy(c.policy, compress=c.compress)) for c in cells]

    def loss(hh: HostSpec, subset: list[Any]) -> float:
        total = 0.0
        for c, pol in subset:
            p = evaluate_policy(c.model, pol, host=hh, input_len=c.input_len, output_len=c.output_len,
                                overlap=overlap)
            total += math.log(p.throughput_tokens_per_s / c.throughput_tokens_per_s) ** 2
        return total

    plain = [cp for cp in pols if not cp[0].compress]
    comp = [cp for cp in pols if cp[0].compress]
    best: tuple[float, float, float, float] | None = None
    for e in memory_efficiency:
        base = replace(h.runtime, memory_efficiency=e)
        plain_loss = loss(replace(h, runtime=base), plain)  # FP16 cells ignore the codec rates
        for d in decompress:
            # one rate for weights and KV: the same group-wise kernels (Section 5); fitting two
            # rates separately gains little on these cells and is poorly identified
            hh = replace(h, runtime=replace(base, decompress_bandwidth=d, kv_decompress_bandwidth=d))
            total = plain_loss + loss(hh, comp)
            if best is None or total < best[0]:
                best = (total, e, d, d)
    assert best is not None
    return best[1], best[2], best[3]


def leave_one_setting_out(*, host: str | HostSpec = "flexgen-t4",
                          overlap: Overlap = Overlap.SERIAL_LOAD, **grid: Any) -> dict[str, Any]:
    """Refit on four of the five length settings, predict the fifth; errors of held-out cells."""
    h = get_host(host) if isinstance(host, str) else host
    settings = sorted({_setting(c) for c in FLEXGEN_T4_CELLS})
    held: list[dict[str, Any]] = []
    fits = {}
    for st in settings:
        train = tuple(c for c in FLEXGEN_T4_CELLS if _setting(c) != st)
        test = tuple(c for c in FLEXGEN_T4_CELLS if _setting(c) == st)
        e, dw, dk = fit_runtime(train, host=h, overlap=overlap, **grid)
        fits[f"{st[0]}+{st[1]}"] = {"memory_efficiency": e, "decompress_bandwidth": dw,
                                   "kv_decompress_bandwidth": dk}
        hh = replace(h, runtime=replace(h.runtime, memory_efficiency=e, decompress_bandwidth=dw,
                                        kv_decompress_bandwidth=dk))
        held += compare_cells(test, host=hh, overlap=overlap)
    return {"fits": fits, "held_out": held, **summarize(held)}
