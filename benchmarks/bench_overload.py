"""Overload is an answer, not a hang: a simulation at ten times a fleet's capacity must finish in
seconds (target <= 10 s per run), reporting ``overloaded``. The behaviour itself is tested in
tests/sim/test_overload.py; the wall time is measured here, where a loaded machine cannot fail it.

Run: .venv/bin/python benchmarks/bench_overload.py
For each (strategy, scenario) of the test: the saturated throughput (requests arriving 1000/s),
then 10,000 requests at ten times it, timed. Writes benchmarks/results/overload.txt with the
machine description.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling machine_info module
from machine_info import describe, report  # noqa: E402
from serveplan import SimulationConfig, Workload, get_hardware, get_model, get_profile, simulate

CASES = [("2m", "op2"), ("1p1d", "op3"), ("2m", "op4")]
TARGET_S = 10.0


def main() -> None:
    bed = dict(model=get_model("codellama-34b"), hardware=get_hardware("ascend-910b3"),
               profile=get_profile("bestserve-910b3"))
    lines = [f"machine: {describe()}",
             "10,000 requests at 10x the saturated throughput (CodeLlama-34B, Ascend 910B3, BestServe profile):"]
    worst = 0.0
    for strategy, scenario in CASES:
        cap = simulate(SimulationConfig(**bed, strategy=strategy, rate=1000.0, max_time_s=1e9,
                                        workload=Workload.scenario(scenario, num_requests=2000))).throughput_rps
        wl = Workload.scenario(scenario, num_requests=10000)
        t0 = time.perf_counter()
        res = simulate(SimulationConfig(**bed, strategy=strategy, rate=10 * cap, workload=wl))
        wall = time.perf_counter() - t0
        worst = max(worst, wall)
        lines.append(f"  {strategy:5s} {scenario}: capacity {cap:.3f} req/s, run at {10 * cap:.2f} req/s took "
                     f"{wall:.2f} s, overloaded={res.overloaded}, completed {res.num_completed}")
    lines.append(f"slowest: {worst:.2f} s (target <= {TARGET_S:g} s): {'PASS' if worst <= TARGET_S else 'FAIL'}")
    report(lines, "overload.txt")


if __name__ == "__main__":
    main()
