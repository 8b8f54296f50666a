"""Speed of one uncached step estimate (issue: at most 50 us median).

Run: .venv/bin/python benchmarks/bench_estimator.py
Measures, in one run, the median wall time of ``Estimator.step_time(Estimator.features(batch))``
over distinct batches (nothing cached), for prefill and decode on three architectures, and the
vectorised ``step_times`` per column for comparison (median of 10 calls over 4096 columns). Results are written to
benchmarks/results/estimator.txt with the machine description.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling machine_info module
from machine_info import describe, report  # noqa: E402
from serveplan import Estimator, ParallelConfig, StepBatch, get_hardware, get_model, get_profile
from serveplan.ops.base import FEATURE_INDEX

CASES = [
    ("codellama-34b", "ascend-910b3", "bestserve-910b3", 4),
    ("llama-3.1-70b", "h100-sxm", "default-gpu", 8),
    ("deepseek-v3", "h200", "default-gpu", 8),
]


def machine() -> str:
    return describe()



def bench(est: Estimator, batches: list[StepBatch]) -> float:
    times = []
    for b in batches:
        t0 = time.perf_counter()
        est.step_time(est.features(b))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    lines = [f"machine: {machine()}", "median uncached step estimate (microseconds):"]
    worst = 0.0
    for model, hw, prof, tp in CASES:
        est = Estimator(get_model(model), get_hardware(hw), get_profile(prof), ParallelConfig(tp=tp))
        rng = np.random.default_rng(0)
        pre = [StepBatch.prefill(int(rng.integers(1, 16)), int(rng.integers(1, 8192))) for _ in range(3000)]
        dec = [StepBatch.decode(int(rng.integers(1, 256)), int(rng.integers(1, 32768))) for _ in range(3000)]
        t_pre, t_dec = bench(est, pre) * 1e6, bench(est, dec) * 1e6
        X = np.repeat(est.features(StepBatch.decode(16, 1024))[:, None], 4096, axis=1)
        X[FEATURE_INDEX["kvd"]] = np.arange(4096) + 1024.0
        vec = []
        for _ in range(10):  # median of 10 calls: one call is at the mercy of a busy machine
            t0 = time.perf_counter()
            est.step_times(X)
            vec.append(time.perf_counter() - t0)
        t_vec = statistics.median(vec) / 4096 * 1e6
        worst = max(worst, t_pre, t_dec)
        lines.append(f"  {model:14s} {hw:13s} tp{tp}: prefill {t_pre:6.1f}  decode {t_dec:6.1f}  "
                     f"vectorised decode {t_vec:5.2f} per step")
    lines.append(f"worst median: {worst:.1f} us (target <= 50 us): {'PASS' if worst <= 50 else 'FAIL'}")
    report(lines, "estimator.txt")


if __name__ == "__main__":
    main()
