"""Speed of the optimizer on BestServe's testbed (issue target: op1-op4, 10,000 requests per
simulation, iteration mode, at most 30 s in total on 2 cores).

Run: .venv/bin/python benchmarks/bench_optimize.py [--jobs 2] [--num-requests 10000]
Writes benchmarks/results/optimize.txt (timings, simulation counts, machine) and
benchmarks/results/optimize-ranking.md (the ranked strategies per scenario, used in
docs/validation/optimizer.md).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling machine_info module
from machine_info import describe  # noqa: E402
from serveplan import get_hardware, get_model, get_profile
from serveplan.optimize.goodput import GoodputSettings
from serveplan.optimize.search import search_many
from serveplan.optimize.space import SearchSpace
from serveplan.sim import SLO, Workload

RESULTS = Path(__file__).parent / "results"


def machine() -> str:
    return describe()



def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--num-requests", type=int, default=10000)
    args = ap.parse_args()
    m, hw, pr = get_model("codellama-34b"), get_hardware("ascend-910b3"), get_profile("bestserve-910b3")
    space = SearchSpace(devices=8, tp_sizes=(1, 2, 4, 8), max_batches=(16,), prefill_max_batch=4)
    lines = [f"machine: {machine()}", f"jobs={args.jobs}, {args.num_requests} requests per simulation, "
             f"iteration mode, SLO P90 TTFT 1.5 s / TPOT 70 ms, relaxation 0.1"]
    ranking = ["# Ranked strategies, CodeLlama-34B on up to 8 Ascend 910B3 (bestserve-910b3)", ""]
    scenarios = ("op1", "op2", "op3", "op4")
    settings = [GoodputSettings(model=m, hardware=hw, profile=pr,
                                workload=Workload.scenario(sc, num_requests=args.num_requests),
                                slo=SLO(ttft_s=1.5, tpot_s=0.07, percentile=90)) for sc in scenarios]
    t0 = time.perf_counter()
    results = search_many(space, settings, jobs=args.jobs, progress=False)
    total_t = time.perf_counter() - t0
    total_sims = sum(r.num_simulations for r in results)
    total_evals = sum(r.num_evaluated for r in results)
    for sc, res in zip(scenarios, results, strict=True):
        lines.append(f"{sc}: {res.num_evaluated} strategies, {res.num_simulations} simulations, "
                     f"best {res.best.name} {res.best.goodput_per_device:.3f} req/s/device")
        ranking += [f"## {sc}", "", "| rank | strategy | devices | goodput (req/s) | per device | P90 TTFT (s) | "
                    "P90 TPOT (ms) | binds |", "|---|---|---|---|---|---|---|---|"]
        for i, r in enumerate(res.strategies, 1):
            ranking.append(f"| {i} | {r.name} | {r.candidate.num_devices} | {r.goodput_rps:.2f} | "
                           f"{r.goodput_per_device:.3f} | {r.ttft_p:.3f} | {r.tpot_p * 1e3:.1f} | {r.binding} |")
        rej = ", ".join(r.name for r in res.rejected)
        ranking += ["", f"Miss the SLO even at 0.1 req/s: {rej or 'none'}.", ""]
    lines.append(f"total: {total_t:.2f} s wall for {total_evals} strategies and {total_sims} simulations, "
                 f"one shared pool of {args.jobs} workers (target <= 30 s): {'PASS' if total_t <= 30 else 'FAIL'}")
    text = "\n".join(lines)
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "optimize.txt").write_text(text + "\n")
    (RESULTS / "optimize-ranking.md").write_text("\n".join(ranking) + "\n")


if __name__ == "__main__":
    main()
