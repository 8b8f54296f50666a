"""Simulator speed (target: 10,000 requests in at most 1 s on one core).

Iteration fidelity, CodeLlama-34B on Ascend 910B3 (profile ``bestserve-910b3``), TP 4, max batch
16, prefill batch 4, scheduler ``vllm``, op1..op4, 10,000 requests, strategies ``2m`` and
``1p1d``, each at 90% of its capacity. Capacity is the simulator's saturated throughput: the
completion rate of 2,000 requests arriving at 1,000 req/s. Reported per run, in CPU seconds of
the process pinned to one core (what the run costs on an idle core, whatever else the machine
runs): the first run with empty estimator caches (cold) and the median of 5 runs (warm), plus the
wall-clock median. Then the optimizer's 0.1 req/s floor probe (early stop, requests mostly alone) and
the time against the number of requests (1k, 10k, 100k).

Run on one core::

    .venv/bin/python benchmarks/bench_sim.py            # writes benchmarks/results/sim-<date>.{txt,json}
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import datetime as _dt  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from serveplan import get_hardware, get_model, get_profile  # noqa: E402
from serveplan.sim import (  # noqa: E402
    SLO,
    SimulationConfig,
    Workload,
    engine,  # noqa: E402
    simulate,
)

RESULTS = Path(__file__).parent / "results"
SPECS = dict(model=get_model("codellama-34b"), hardware=get_hardware("ascend-910b3"),
             profile=get_profile("bestserve-910b3"))
COMMON = dict(tp=4, max_batch=16, prefill_max_batch=4, scheduler="prefill-first", fidelity="iteration")


def machine() -> dict[str, str]:
    try:
        cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()[:15]
    except OSError:
        cpu = [platform.processor()]
    return {"python": sys.version.split()[0], "numpy": np.__version__, "platform": platform.platform(),
            "lscpu": "\n".join(cpu), "affinity": str(sorted(os.sched_getaffinity(0))),
            "loadavg": " ".join(f"{x:.2f}" for x in os.getloadavg())}


def capacity(strategy: str, scenario: str) -> float:
    res = simulate(SimulationConfig(**SPECS, **COMMON, strategy=strategy, rate=1000.0, max_time_s=1e12,
                                    workload=Workload.scenario(scenario, num_requests=2000)))
    return res.throughput_rps


def timed(cfg: SimulationConfig) -> tuple[float, object]:
    """CPU seconds of the run (wall time on an idle core; unaffected by other processes)."""
    t0 = time.process_time()
    res = simulate(cfg)
    return time.process_time() - t0, res


def wall(cfg: SimulationConfig) -> float:
    t0 = time.perf_counter()
    simulate(cfg)
    return time.perf_counter() - t0


def main() -> None:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core
    rows = []
    for strategy in ("2m", "1p1d"):
        for scenario in ("op1", "op2", "op3", "op4"):
            cap = capacity(strategy, scenario)
            rate = round(0.9 * cap, 4)
            cfg = SimulationConfig(**SPECS, **COMMON, strategy=strategy, rate=rate,
                                   workload=Workload.scenario(scenario, num_requests=10000))
            engine._CLOCKS.clear()  # cold: no memoised step times
            cold, res = timed(cfg)
            warm = [timed(cfg)[0] for _ in range(5)]
            walls = [wall(cfg) for _ in range(3)]
            rows.append({
                "strategy": strategy, "scenario": scenario, "capacity_rps": cap, "rate_rps": rate,
                "cold_s": cold, "median_s": statistics.median(warm), "max_s": max(warm),
                "wall_median_s": statistics.median(walls),
                "num_steps": res.num_steps, "ttft_p90_s": res.ttft_s.p90, "tpot_p90_s": res.tpot_s.p90,
                "throughput_rps": res.throughput_rps, "overloaded": res.overloaded,
            })
            print(f"{strategy:5s} {scenario}: rate {rate:.3f} (cap {cap:.3f}) cold {cold:.3f}s "
                  f"median {statistics.median(warm):.3f}s steps {res.num_steps}", flush=True)
    # informational: the chunked-prefill scheduler (mixed steps are timed a stretch at a time)
    chunked = []
    for scenario in ("op1", "op2", "op3", "op4"):
        r0 = next(r for r in rows if r["strategy"] == "2m" and r["scenario"] == scenario)
        cfg = SimulationConfig(**SPECS, **dict(COMMON, scheduler="sarathi"), strategy="2m", rate=r0["rate_rps"],
                               workload=Workload.scenario(scenario, num_requests=10000))
        timed(cfg)
        ts = [timed(cfg)[0] for _ in range(3)]
        chunked.append({"strategy": "2m", "scenario": scenario, "scheduler": "sarathi", "rate_rps": r0["rate_rps"],
                        "median_s": statistics.median(ts)})
        print(f"sarathi 2m {scenario}: {statistics.median(ts):.3f}s", flush=True)
    # the optimizer's 0.1 req/s floor probe (early stop on, BestServe SLO relaxed by 10%): requests mostly alone
    floor = []
    slo = SLO(ttft_s=1.1 * 1.5, tpot_s=1.1 * 0.07, percentile=90)
    for strategy in ("2m", "1p1d"):
        for scenario in ("op1", "op2", "op3", "op4"):
            cfg = SimulationConfig(**SPECS, **COMMON, strategy=strategy, rate=0.1, slo=slo, early_stop=True,
                                   workload=Workload.scenario(scenario, num_requests=10000))
            timed(cfg)
            ts = [timed(cfg)[0] for _ in range(3)]
            floor.append({"strategy": strategy, "scenario": scenario, "rate_rps": 0.1,
                          "median_s": statistics.median(ts)})
            print(f"0.1 req/s {strategy} {scenario}: {statistics.median(ts):.3f}s", flush=True)
    scaling = []
    for strategy, scenario in (("2m", "op2"), ("1p1d", "op4")):
        cap = next(r["capacity_rps"] for r in rows if r["strategy"] == strategy and r["scenario"] == scenario)
        for n in (1000, 10000, 100000):
            cfg = SimulationConfig(**SPECS, **COMMON, strategy=strategy, rate=round(0.9 * cap, 4),
                                   workload=Workload.scenario(scenario, num_requests=n))
            timed(cfg)  # warm the step-time memo
            ts = [timed(cfg)[0] for _ in range(3 if n < 100000 else 1)]
            scaling.append({"strategy": strategy, "scenario": scenario, "num_requests": n,
                            "median_s": statistics.median(ts), "per_request_us": statistics.median(ts) / n * 1e6})
            print(f"scaling {strategy} {scenario} n={n}: {statistics.median(ts):.3f}s", flush=True)
    info = machine()
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"sim-{stamp}.json").write_text(json.dumps({"machine": info, "runs": rows, "sarathi": chunked,
                                                           "floor": floor, "scaling": scaling},
                                                          indent=2))
    lines = [f"# serveplan simulate speed, {stamp} (UTC)", "",
             "iteration fidelity, codellama-34b / ascend-910b3 / bestserve-910b3, tp 4, max batch 16, "
             "prefill batch 4, vllm, 10,000 requests at 90% of capacity", "",
             "CPU seconds of one process pinned to one core (cold: empty step-time memo; median of 5 warm "
             "runs); wall: median wall-clock of 3 warm runs on the shared machine", "",
             f"{'strategy':8s} {'scen':5s} {'rate':>8s} {'capacity':>9s} {'cold s':>7s} {'median s':>9s} "
             f"{'wall s':>7s} {'steps':>9s} {'P90 TTFT s':>10s} {'P90 TPOT ms':>11s}"]
    for r in rows:
        lines.append(f"{r['strategy']:8s} {r['scenario']:5s} {r['rate_rps']:8.3f} {r['capacity_rps']:9.3f} "
                     f"{r['cold_s']:7.3f} {r['median_s']:9.3f} {r['wall_median_s']:7.3f} {r['num_steps']:9d} "
                     f"{r['ttft_p90_s']:10.3f} "
                     f"{r['tpot_p90_s'] * 1e3:11.1f}")
    lines += ["", "scheduler sarathi (chunk 512), 2m, same rates "
              "(warm, median of 3 CPU seconds; not part of the 1 s target):"]
    for c in chunked:
        lines.append(f"  {c['scenario']}: {c['median_s']:.3f} s")
    lines += ["", "0.1 req/s with early stop (the optimizer's floor probe, SLO 1.65 s / 77 ms; warm, median of 3 CPU "
              "seconds):"]
    for f in floor:
        lines.append(f"  {f['strategy']:5s} {f['scenario']}: {f['median_s']:.3f} s")
    lines += ["", "time against number of requests (warm, median CPU seconds):"]
    for s in scaling:
        lines.append(f"  {s['strategy']:5s} {s['scenario']} n={s['num_requests']:>6d}: {s['median_s']:.3f} s "
                     f"({s['per_request_us']:.1f} us/request)")
    lines += ["", f"python {info['python']}, numpy {info['numpy']}, {info['platform']}, pinned to cores "
              f"{info['affinity']}; load average {info['loadavg']} (the machine is shared: other processes "
              "compete for the same cores, so these are upper bounds)", "", "lscpu | head -15:", info["lscpu"]]
    (RESULTS / f"sim-{stamp}.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
