"""Speed of engine runs (target: offline and closed-loop runs of 10,000 requests at batch 1024 in
at most 2 s on 2 cores).

Llama-3.1-8B on H100 SXM in FP8 with an FP8 KV cache, TP 1, max batch 1024, 10,000 requests of
1024 input and 128 output tokens, under each engine (``vllm``, ``sglang``, ``trtllm``): offline
(everything queued at t=0) and a closed loop of 1024 clients. Reported per run: process CPU
seconds and wall seconds, median of 3 after one warm-up run (estimators and step-time tables are
memoised across runs), and the load average of the machine while it ran (it is shared).

Run::

    python benchmarks/bench_engines.py      # writes benchmarks/results/engines-<date>.txt
"""

from __future__ import annotations

import datetime as dt
import os
import statistics
import sys
import time
from pathlib import Path

from serveplan import get_hardware, get_model, get_profile
from serveplan.sim import SimulationConfig, Workload, simulate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine_info import describe  # noqa: E402

N, BATCH, C = 10_000, 1024, 1024


def run(engine: str, load: str) -> tuple[float, float, int, int]:
    m, h, p = get_model("llama-3.1-8b"), get_hardware("h100-sxm"), get_profile(None, "h100-sxm")
    kw = {"offline": True} if load == "offline" else {"concurrency": C}
    cfg = SimulationConfig(model=m, hardware=h, profile=p, engine=engine, dtype="fp8", kv_dtype="fp8", tp=1,
                           max_batch=BATCH, rate=None, workload=Workload.fixed(1024, 128, num_requests=N), **kw)
    simulate(cfg)  # warm-up: estimator and step-time tables
    cpu, wall = [], []
    for _ in range(3):
        c0, w0 = time.process_time(), time.perf_counter()
        res = simulate(cfg)
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    return statistics.median(cpu), statistics.median(wall), res.num_completed, res.num_steps


def main() -> None:
    lines = [f"# engine runs, {N:,} requests of 1024/128 at batch {BATCH} (closed loop: {C} clients)",
             f"# {describe()}", f"# {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC", "",
             f"{'engine':8s} {'load':8s} {'cpu s':>7s} {'wall s':>7s} {'completed':>9s} {'steps':>7s} {'load avg':>9s}"]
    for engine in ("vllm", "sglang", "trtllm"):
        for load in ("offline", "closed"):
            cpu, wall, done, steps = run(engine, load)
            la = os.getloadavg()[0]
            lines.append(f"{engine:8s} {load:8s} {cpu:7.2f} {wall:7.2f} {done:9d} {steps:7d} {la:9.2f}")
            print(lines[-1], flush=True)
    out = Path(__file__).resolve().parent / "results" / f"engines-{dt.date.today():%Y%m%d}.txt"
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
