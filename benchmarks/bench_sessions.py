"""Multi-turn simulation speed (issue 21 acceptance 5: 10,000 requests with prefix caching and a
CPU tier in at most 2 s on 2 cores).

Workload: 2,500 sessions x 4 turns from the bundled ``mooncake-conversation`` dataset (mean prompt
about 14,000 tokens), sessions arriving at 0.25/s, 30 s think time; Llama-3.1-8B on one H100 SXM
(engine vllm, TP 1), prefix cache on (sessions) with a 100 GB CPU tier of the dgx-h100 host.
Reference in the same run, interleaved: bench_sim.py's 10,000-request case (CodeLlama-34B on
Ascend 910B3, 2m, op2 at 90% of capacity). Reported: wall and CPU seconds, median of 3 runs
after a warm-up run, and the ratio to the reference (the machine is shared: the ratio is the
comparable figure).

Run: ``python benchmarks/bench_sessions.py`` (writes benchmarks/results/sessions.txt).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from machine_info import describe, report  # noqa: E402
from serveplan.sim import SimulationConfig, Workload, simulate  # noqa: E402
from serveplan.sim.prefix_cache import KVTiers  # noqa: E402
from serveplan.sim.sessions import session_workload  # noqa: E402
from serveplan.specs.catalog import get_hardware, get_host, get_model, get_profile  # noqa: E402

#: bench_sim.py's 2m op2 10k run, median CPU seconds pinned to one core (benchmarks/results/sim-20261125.txt)
REFERENCE_IDLE_S = 0.147


def sessions_config() -> SimulationConfig:
    wl = session_workload(2500, 4, think_s=30.0, seed=0)
    tiers = KVTiers(tiers=("cpu",), host=get_host("dgx-h100"), cpu_bytes=100e9)
    return SimulationConfig(model=get_model("llama-3.1-8b"), hardware=get_hardware("h100-sxm"),
                            profile=get_profile("default-gpu"), engine="vllm", tp=1, rate=0.25, workload=wl,
                            kv_tiers=tiers)


def reference_config() -> SimulationConfig:
    specs = dict(model=get_model("codellama-34b"), hardware=get_hardware("ascend-910b3"),
                 profile=get_profile("bestserve-910b3"))
    common = dict(tp=4, max_batch=16, prefill_max_batch=4, scheduler="prefill-first", fidelity="iteration",
                  strategy="2m")
    cap = simulate(SimulationConfig(**specs, **common, rate=1000.0, max_time_s=1e12,  # type: ignore[arg-type]
                                    workload=Workload.scenario("op2", num_requests=2000))).throughput_rps
    return SimulationConfig(**specs, **common, rate=0.9 * cap,  # type: ignore[arg-type]
                            workload=Workload.scenario("op2", num_requests=10000))


def timed(cfg: SimulationConfig) -> tuple[float, float]:
    w0, c0 = time.perf_counter(), time.process_time()
    simulate(cfg)
    return time.perf_counter() - w0, time.process_time() - c0


def main() -> None:
    sess, ref = sessions_config(), reference_config()
    res = simulate(sess)  # warm-up: estimator tables
    simulate(ref)
    pc = res.prefix_cache
    assert pc is not None
    s_runs, r_runs = [], []
    for _ in range(3):
        s_runs.append(timed(sess))
        r_runs.append(timed(ref))
    sw, sc = statistics.median(w for w, _ in s_runs), statistics.median(c for _, c in s_runs)
    rw, rc = statistics.median(w for w, _ in r_runs), statistics.median(c for _, c in r_runs)
    lines = [
        f"machine: {describe()}",
        f"sessions: {res.num_requests} requests ({res.num_completed} completed), mean prompt "
        f"{sess.workload.input_lengths.mean():,.0f} tokens, hit rate {pc.hit_rate:.1%} (GPU {pc.gpu_tokens:,}, "
        f"CPU {pc.cpu_tokens:,} tokens), {res.num_steps:,} steps",
        f"sessions run: wall {sw:.3f} s, CPU {sc:.3f} s (median of 3; target <= 2 s)",
        f"bench_sim 10k reference (2m op2 at 90% capacity): wall {rw:.3f} s, CPU {rc:.3f} s",
        f"ratio sessions / reference: wall {sw / rw:.2f}, CPU {sc / rc:.2f}",
        f"on an idle core (the reference's {REFERENCE_IDLE_S} CPU s in results/sim-20261125.txt x the CPU ratio): "
        f"{REFERENCE_IDLE_S * sc / rc:.2f} s",
    ]
    report(lines, "sessions.txt")


if __name__ == "__main__":
    main()
