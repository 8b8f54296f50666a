"""DeepSeek-V3 on two nodes of eight H100s: the optimizer ranks EP and DP-attention layouts
(issue target: at most 2 minutes on 2 cores).

Run: .venv/bin/python benchmarks/bench_optimize_moe.py
Same as: serveplan optimize --model deepseek-v3 --hardware h100-sxm --devices 16 \
    --tp 1,2,4,8,16 --dp 1,2,4,8,16 --ep 1,8,16 --pp 1,2 --scenario op2 --slo-ttft 2 --slo-tpot 0.1
DeepSeek-V3 runs in its released format, block-scaled FP8 (the catalog's default, from the
checkpoint's quantization_config): in bf16 it fits no layout of 16 x 80 GB.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling machine_info module
from machine_info import describe  # noqa: E402
from serveplan import get_hardware, get_model, get_profile
from serveplan.optimize.goodput import GoodputSettings
from serveplan.optimize.search import search
from serveplan.optimize.space import SearchSpace
from serveplan.sim import SLO, Workload


def main() -> None:
    space = SearchSpace(devices=16, tp_sizes=(1, 2, 4, 8, 16), dp_sizes=(1, 2, 4, 8, 16), ep_sizes=(1, 8, 16),
                        pp_sizes=(1, 2), max_batches=(16,), prefill_max_batch=4)
    settings = GoodputSettings(model=get_model("deepseek-v3"), hardware=get_hardware("h100-sxm"),
                               profile=get_profile("default-gpu"), workload=Workload.scenario("op2", num_requests=2000),
                               slo=SLO(ttft_s=2.0, tpot_s=0.1, percentile=90), dtype=None)
    t0 = time.perf_counter()
    res = search(space, settings, jobs=2, progress=False)
    dt = time.perf_counter() - t0
    lines = [f"machine: {describe()}",
             "deepseek-v3 fp8_block on up to 16 x h100-sxm (2 nodes), op2, 2000 requests, SLO P90 2 s / 100 ms",
             f"{res.num_evaluated} strategies, {len(res.pruned)} layouts pruned, {res.num_simulations} simulations, "
             f"{dt:.1f} s (target <= 120 s): {'PASS' if dt <= 120 else 'FAIL'}", "",
             "| rank | strategy | devices | goodput (req/s) | per device | P90 TTFT (s) | P90 TPOT (ms) |",
             "|---|---|---|---|---|---|---|"]
    for i, r in enumerate(res.strategies, 1):
        lines.append(f"| {i} | {r.name} | {r.candidate.num_devices} | {r.goodput_rps:.2f} | "
                     f"{r.goodput_per_device:.3f} | {r.ttft_p:.3f} | {r.tpot_p * 1e3:.1f} |")
    lines += ["", "Rejected: " + (", ".join(f"{r.name} ({r.reason})" for r in res.rejected) or "none"),
              "Pruned: " + "; ".join(f"{p.name} ({p.reason})" for p in res.pruned)]
    text = "\n".join(lines)
    print(text)
    out = Path(__file__).parent / "results" / "optimize-deepseek-v3.md"
    out.write_text(text + "\n")


if __name__ == "__main__":
    main()
