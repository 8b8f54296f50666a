"""DeepSeek-V3 in block FP8 (its checkpoint's format; ``--dtype fp8`` for per-tensor scales) on
64 x H200 (8 nodes): the optimizer ranks collocated, disaggregated and wide-EP (DP-attention)
layouts, with the reasons for the pruned ones (issue target: at most 60 s).

The stack is SGLang-style large-scale EP: DeepEP all-to-alls (FP8 dispatch, node-deduplicated,
two-batch overlap: ``CommOptions.deepep()``) on the measured H200 kernel curves. Workload: 4,096-
token prompts (the prompt length of DeepSeek's published inference profiles,
deepseek-ai/profile-data) and 1,000 output tokens; SLO P90 TTFT 2 s and TPOT 50 ms (20 tokens/s
per user, the speed DeepSeek's service reports).

The search is the CLI's default (``method="auto"``): the fast search (pools composed, the best
confirmed whole), kept where its confirmations agree with their compositions; here they do not
(the stream never fills these pools), so the branch and bound over the exhaustive search ranks the
space (``--keep`` strategies exact, default 1: best analytic bound first, every other fleet ruled
out by one run at the rate it must beat, with that reason). ``--method bounded`` runs the branch
and bound alone, ``--method exhaustive`` simulates every fleet.

Run: PYTHONPATH=src .venv/bin/python benchmarks/bench_optimize_wideep.py [--requests N] [--jobs J]
    [--method auto|bounded|exhaustive|fast] [--keep K] [--dtype fp8_block|fp8]
Same as: serveplan optimize --model deepseek-v3 --hardware h200 --dtype fp8_block --devices 64 \
    --tp 1,8 --dp 1,8,16,32,64 --ep 1,8,16,32,64 ... (the DeepEP options are a profile
    setting: ``comm: deepep`` in a profile YAML).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling machine_info module
from machine_info import describe, report  # noqa: E402
from serveplan import DType, get_hardware, get_model, get_profile
from serveplan.optimize.goodput import GoodputSettings
from serveplan.optimize.search import search
from serveplan.optimize.space import SearchSpace, enumerate_space
from serveplan.sim import SLO, Workload
from serveplan.specs.comm import CommOptions

TARGET_S = 60.0


def _kind(name: str, disaggregated: bool, dp: int, ep: int) -> str:
    wide = dp > 1 and ep >= 16
    if disaggregated:
        return "disaggregated" + (", wide-EP" if wide else "")
    return "collocated" + (", wide-EP" if wide else "")


def _cpu_s() -> float:
    """CPU seconds of this process and of its finished workers (the machine is shared: wall time
    alone says little)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--method", choices=("auto", "bounded", "exhaustive", "fast"), default="auto",
                    help="auto (the CLI default): fast where its confirmations agree with their compositions, "
                         "else bounded; bounded: every fleet that may rank among the best --keep simulated "
                         "whole, the rest ruled out by one run at the rate to beat; exhaustive: every fleet "
                         "simulated; fast: pools composed, the best confirmed")
    ap.add_argument("--keep", type=int, default=1, help="bounded: strategies ranked exactly as exhaustive")
    ap.add_argument("--dtype", choices=("fp8_block", "fp8"), default="fp8_block",
                    help="weight format: fp8_block, the checkpoint's 128 x 128 block-scaled FP8 (DeepSeek-V3 "
                         "report 3.3.2; the catalog's default), or fp8, per-tensor scales (the records before "
                         "2026-11-27 afternoon)")
    args = ap.parse_args()
    dtype = DType.parse(args.dtype)
    model, hw = get_model("deepseek-v3"), get_hardware("h200")
    profile = get_profile("measured-h200").with_(comm=CommOptions.deepep())
    space = SearchSpace(devices=64, tp_sizes=(1, 8), dp_sizes=(1, 8, 16, 32, 64), ep_sizes=(1, 8, 16, 32, 64),
                        max_batches=(1024,), prefill_max_batch=None, schedulers=("chunked-prefill",),
                        chunk_sizes=(8192,))
    workload = Workload.fixed(4096, 1000, num_requests=args.requests)
    settings = GoodputSettings(model=model, hardware=hw, profile=profile, workload=workload,
                               slo=SLO(ttft_s=2.0, tpot_s=0.05, percentile=90), dtype=dtype, engine=None)
    listing = enumerate_space(space, settings, request_tokens=5096)
    kinds = Counter(_kind(c.name, c.is_disaggregated, c.first.parallel.dp, c.first.parallel.ep)
                    for c in listing.candidates)
    print(f"candidates: {len(listing.candidates)} ({', '.join(f'{v} {k}' for k, v in sorted(kinds.items()))}); "
          f"pruned: " + ("; ".join(f"{p.name} ({p.reason})" for p in listing.pruned) or "none"), flush=True)
    t0, c0 = time.perf_counter(), _cpu_s()
    res = search(space, settings, jobs=args.jobs, progress=False, method=args.method,
                 **({"keep": args.keep} if args.method in ("auto", "bounded") else {}))
    dt, cpu = time.perf_counter() - t0, _cpu_s() - c0
    lines = [f"machine: {describe()}",
             f"deepseek-v3 {dtype.value} on up to 64 x h200 (8 nodes), DeepEP + two-batch overlap, prompts 4096 / "
             f"outputs 1000, {args.requests} requests, SLO P90 TTFT 2 s / TPOT 50 ms, {args.jobs} worker(s)",
             f"candidates: {len(listing.candidates)} ({', '.join(f'{v} {k}' for k, v in sorted(kinds.items()))})",
             f"{res.num_evaluated} strategies, {len(res.pruned)} layouts pruned, {res.num_simulations} simulations, "
             f"{dt:.1f} s wall, {cpu:.1f} s CPU (this process and its workers; load average at the end "
             f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; target <= {TARGET_S:.0f} s): "
             f"{'PASS' if dt <= TARGET_S else 'FAIL'}",
             f"method: {args.method}" + (f" -> {res.settings_summary['auto']}" if res.settings_summary.get("auto")
                                         else "")
             + (f" ({res.settings_summary['fast_attempt_simulations']} of the simulations were the fast attempt's)"
                if res.settings_summary.get("fast_attempt_simulations") else ""), "",
             "| rank | strategy | kind | devices | goodput (req/s) | per device | P90 TTFT (s) | P90 TPOT (ms) |",
             "|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(res.strategies[:25], 1):
        c = r.candidate
        lines.append(f"| {i} | {r.name} | {_kind(r.name, c.is_disaggregated, c.first.parallel.dp, c.first.parallel.ep)}"
                     f" | {c.num_devices} | {r.goodput_rps:.2f} | {r.goodput_per_device:.3f} | {r.ttft_p:.3f} | "
                     f"{r.tpot_p * 1e3:.1f} |")
    if len(res.strategies) > 25:
        lines.append(f"| ... | {len(res.strategies) - 25} more | | | | | | |")
    best: dict[str, str] = {}
    for i, r in enumerate(res.strategies, 1):
        c = r.candidate
        k = _kind(r.name, c.is_disaggregated, c.first.parallel.dp, c.first.parallel.ep)
        best.setdefault(k, f"{k}: #{i} {r.name} ({r.goodput_rps:.2f} req/s, {r.goodput_per_device:.3f} per device)")
    lines += ["", "Best of each kind: " + "; ".join(best[k] for k in sorted(best))]
    lines += ["", f"Rejected ({len(res.rejected)}): " + ("; ".join(f"{r.name} ({r.reason})" for r in res.rejected[:20])
                                                         or "none")]
    by_kind: dict[str, list[str]] = {}
    kind_of = {c.name: _kind(c.name, c.is_disaggregated, c.first.parallel.dp, c.first.parallel.ep)
               for c in listing.candidates}
    for p in res.pruned:
        by_kind.setdefault(kind_of.get(p.name, "layout"), []).append(f"- {p.name}: {p.reason}")
    lines += ["", f"Pruned ({len(res.pruned)}), by kind:"]
    for k in sorted(by_kind):
        lines += ["", f"{k} ({len(by_kind[k])}):", *by_kind[k]]
    report(lines, "optimize-wideep-64xh200.md")


if __name__ == "__main__":
    main()
