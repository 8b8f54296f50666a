"""Peak memory and time of one long simulation: 10^7 requests at a moderate rate (issue 14).

BestServe's testbed (CodeLlama-34B on Ascend 910B3, 2 collocated instances of TP 4, max batch
16, prefill batch 4), op2 (2048/64 tokens) at 3.0 req/s, the run of benchmarks/bench_sim_pair.py
stretched to ``-n`` requests (default 10,000,000). The stream runs windowed
(serveplan.sim.stream): memory follows the requests in flight plus the compact per-request
records (~100 bytes each). Prints wall and CPU time and the process's peak RSS
(``ru_maxrss``) and writes them under benchmarks/results/ with the machine noted.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_memory.py [-n 10000000]
"""

from __future__ import annotations

import argparse
import resource
import time

from machine_info import describe, report
from serveplan import get_hardware, get_model, get_profile
from serveplan.sim import SimulationConfig, Workload, simulate


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=10_000_000)
    ap.add_argument("--rate", type=float, default=3.0)
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args()
    m, h, p = get_model("codellama-34b"), get_hardware("ascend-910b3"), get_profile("bestserve-910b3")
    machine = describe()
    t0, c0 = time.perf_counter(), time.process_time()
    wl = Workload.scenario("op2", num_requests=a.n)
    cfg = SimulationConfig(model=m, hardware=h, profile=p, strategy="2m", tp=4, max_batch=16, prefill_max_batch=4,
                           rate=a.rate, workload=wl)
    res = simulate(cfg)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024   # Linux: KiB
    lines = [
        f"{a.n:,} requests, 2m op2 at {a.rate:g} req/s (BestServe testbed): completed {res.num_completed:,}, "
        f"P90 TTFT {res.ttft_s.p90:.4f} s, P90 TPOT {res.tpot_s.p90 * 1e3:.2f} ms, {res.num_steps:,} steps, "
        f"overloaded {res.overloaded}",
        f"wall {wall:,.1f} s, CPU {cpu:,.1f} s, peak RSS {peak / 2**30:.2f} GiB ({peak / 1e9:.2f} GB)",
    ]
    lines = [f"benchmarks/bench_memory.py -n {a.n} on {machine}", *lines]
    if a.no_write:
        print("\n".join(lines))
    else:
        report(lines, "memory.txt")


if __name__ == "__main__":
    main()
