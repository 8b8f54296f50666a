"""CPU time of the simulator's decode step times for DeepSeek-V3 FP8 on H200 (measured kernel
curves, DeepEP with two-batch overlap), for comparing two trees (run once per tree, alternating):

    PYTHONPATH=<other checkout>/src .venv/bin/python benchmarks/bench_step_tables.py
    PYTHONPATH=src .venv/bin/python benchmarks/bench_step_tables.py

* fill: one table block, ``columns.step_times`` of 1,024 context sums at a fixed batch size (what
  ``StepClock._fill`` computes), per layout and batch size;
* stretch: ``StepClock.decode_times`` of 200 random wide-EP stretches (batch 32-1,024, 1-64
  steps, contexts of 4-5k tokens), each on a fresh clock as a simulation meets them (a batch
  size's table rarely serves twice).

Minimum CPU time (``time.process_time``) of 3 repetitions; prints one line per measurement. Run
with ``OPENBLAS_NUM_THREADS=1`` on a shared machine (BLAS threads that wait for a core spin and
count as CPU time).
"""

from __future__ import annotations

import time

import numpy as np

from serveplan import Estimator, ParallelConfig, StepBatch, get_hardware, get_model, get_profile
from serveplan.estimator import columns
from serveplan.sim.instance import StepClock
from serveplan.specs.comm import CommOptions

LAYOUTS = (ParallelConfig(tp=1, dp=64, ep=64), ParallelConfig(tp=1, dp=8, ep=8), ParallelConfig(tp=8, ep=8))


def _min_cpu(fn, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        t = time.process_time()
        fn()
        best = min(best, time.process_time() - t)
    return best


def main() -> None:
    model, hw = get_model("deepseek-v3"), get_hardware("h200")
    profile = get_profile("measured-h200").with_(comm=CommOptions.deepep())
    rng = np.random.default_rng(0)
    stretches = [(int(nd), int(nd) * int(rng.integers(4097, 5096)), int(rng.integers(1, 65)))
                 for nd in rng.integers(32, 1025, size=200)]
    for par in LAYOUTS:
        est = Estimator(model, hw, profile, par, dtype="fp8")
        for nd in (1, 64, 1024):
            base = StepBatch(decode_tokens=float(nd), decode_keys=float(nd))
            keys = np.arange(1024, dtype=float) + 4096 * nd

            def fill(est: Estimator = est, base: StepBatch = base, keys: np.ndarray = keys) -> None:
                for _ in range(20):
                    columns.step_times(est, base, "decode", length=1024, decode_keys=keys)

            print(f"fill {par.label()} nd={nd}: {_min_cpu(fill) / 20 * 1e3:.3f} ms", flush=True)

        def run(est: Estimator = est) -> None:
            for nd, kvd0, k in stretches:
                StepClock(est).decode_times(nd, kvd0, k)

        print(f"stretch {par.label()}: {_min_cpu(run, 1) / len(stretches) * 1e3:.3f} ms", flush=True)


if __name__ == "__main__":
    main()
