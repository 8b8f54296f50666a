"""Simulator CPU time of four BestServe-testbed runs (10,000 requests each), for comparing two trees.

Run it once per tree, alternating, on a quiet machine, and compare the sums as a ratio:

    PYTHONPATH=<old checkout>/src .venv/bin/python benchmarks/bench_sim_pair.py
    PYTHONPATH=src .venv/bin/python benchmarks/bench_sim_pair.py

Each run is the minimum CPU time (``time.process_time``) of 5 warm repetitions: 2m op2 at 3.0
req/s, 1p1d op2 at 1.6, 2m op4 at 0.3, 2m op1 at 0.5 (CodeLlama-34B, Ascend 910B3, TP 4, max batch
16, prefill batch 4). Results recorded in benchmarks/results/sim-pair-20261125.txt.

The repetitions share one step-time memo, as a caller that runs many simulations does: trees whose
``simulate`` takes the caller's :class:`~serveplan.sim.clock.Clocks` get one for the whole run
(the memo belongs to the caller); older trees kept it in a module-level cache, which the
repetitions shared the same way.
"""

from __future__ import annotations

import time

from serveplan import get_hardware, get_model, get_profile
from serveplan.sim import SimulationConfig, Workload, simulate

try:  # the caller's step-time memo (trees without it kept one per process)
    from serveplan.sim.clock import Clocks
except ImportError:  # pragma: no cover - an older tree
    Clocks = None

RUNS = (("2m", "op2", 3.0), ("1p1d", "op2", 1.6), ("2m", "op4", 0.3), ("2m", "op1", 0.5))


def cpu_times(cfgs: list[SimulationConfig], *, repeats: int) -> list[float]:
    """Minimum CPU time (``time.process_time``) of ``repeats`` warm runs of each configuration
    (one untimed run of each first)."""
    shared = {"clocks": Clocks()} if Clocks is not None else {}
    for c in cfgs:
        simulate(c, **shared)
    ts = []
    for c in cfgs:
        xs = []
        for _ in range(repeats):
            t = time.process_time()
            simulate(c, **shared)
            xs.append(time.process_time() - t)
        ts.append(min(xs))
    return ts


def main() -> None:
    m, h, p = get_model("codellama-34b"), get_hardware("ascend-910b3"), get_profile("bestserve-910b3")
    cfgs = [SimulationConfig(model=m, hardware=h, profile=p, strategy=s, tp=4, max_batch=16, prefill_max_batch=4,
                             rate=r, workload=Workload.scenario(sc, num_requests=10000)) for s, sc, r in RUNS]
    ts = cpu_times(cfgs, repeats=5)
    print(" ".join(f"{t:.4f}" for t in ts), f"sum {sum(ts):.4f}")


if __name__ == "__main__":
    main()
