"""The optimizer at cluster scale (issue 18 acceptance 1-2): three jobs through the CLI, timed.

Run: .venv/bin/python benchmarks/bench_optimize_scale.py [--only qwen,llama,deepseek] [--exhaustive] [--bestserve]

* qwen: Qwen3-32B on 16 x H200, ISL 4000 / OSL 500, P90 TTFT <= 1 s, TPOT <= 20 ms, TP 1-8, max
  batch 16/64/256 (target <= 10 s on 2 cores, best goodput per device >= 98% of the exhaustive
  search's). ``--exhaustive`` also runs ``--exhaustive`` on it in the same run (about 4 minutes on
  2 quiet cores) for the time ratio; otherwise the exhaustive best is read from
  ``results/optimize-scale-exhaustive.json`` (written by a ``--exhaustive`` run).
* llama: Llama-3.1-70B on 16 x H100 SXM, vLLM engine defaults, ISL 4000 / OSL 500, TTFT <= 1 s,
  TPOT <= 30 ms, TP 1-8 (target <= 10 s).
* deepseek: DeepSeek-V3 FP8 on 32 x H200, TP 1-8, DP-attention 1-32, EP 1-32, collocated and
  disaggregated, ISL 4000 / OSL 500, TTFT <= 2 s, TPOT <= 50 ms (target <= 60 s).

``--bestserve`` also ranks BestServe's op1-op4 with both methods (the fast search must find the
exhaustive search's best in each).

Every job runs as its own ``serveplan optimize ... --json --jobs 2`` process; the wall time and the
CPU time of that process and its workers are recorded with the load average, since the machine may
be shared (CPU seconds / 2 is what two idle cores would need at best, CPU seconds at worst).
Writes results/optimize-scale.md (and results/optimize-scale-exhaustive.json with --exhaustive).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling machine_info module
from machine_info import describe, report  # noqa: E402

RESULTS = Path(__file__).parent / "results"
ROOT = Path(__file__).resolve().parents[1]

JOBS = {
    "qwen": (10.0, ["--model", "qwen3-32b", "--hardware", "h200", "--devices", "16", "--tp", "1,2,4,8",
                    "--max-batch", "16,64,256", "--input-len", "4000", "--output-len", "500", "--slo-ttft", "1",
                    "--slo-tpot", "0.02"]),
    "llama": (10.0, ["--model", "llama-3.1-70b", "--hardware", "h100-sxm", "--engine", "vllm", "--devices", "16",
                     "--tp", "1,2,4,8", "--input-len", "4000", "--output-len", "500", "--slo-ttft", "1",
                     "--slo-tpot", "0.03"]),
    "deepseek": (60.0, ["--model", "deepseek-v3", "--hardware", "h200", "--dtype", "fp8", "--devices", "32",
                        "--tp", "1,2,4,8", "--dp", "1,2,4,8,16,32", "--ep", "1,8,16,32", "--input-len", "4000",
                        "--output-len", "500", "--slo-ttft", "2", "--slo-tpot", "0.05"]),
}


def run(args: list[str]) -> tuple[dict, float, float, str]:
    """One CLI run: its JSON, wall seconds, CPU seconds (process and workers), load average."""
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "serveplan", "optimize", *args, "--json", "--no-progress", "--jobs", "2"]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return json.loads(out), wall, cpu, load


def bestserve_rankings() -> list[str]:
    """BestServe's op1-op4 (CodeLlama-34B on 8 x 910B3, 10,000 requests): the fast search's best
    against the exhaustive search's, both in this process (one worker each, CPU seconds)."""
    from serveplan import get_hardware, get_model, get_profile
    from serveplan.optimize.goodput import GoodputSettings
    from serveplan.optimize.search import search_many
    from serveplan.optimize.space import SearchSpace
    from serveplan.sim import SLO, Workload

    m, hw, pr = get_model("codellama-34b"), get_hardware("ascend-910b3"), get_profile("bestserve-910b3")
    space = SearchSpace(devices=8, tp_sizes=(1, 2, 4, 8), max_batches=(16,), prefill_max_batch=4)
    st = [GoodputSettings(model=m, hardware=hw, profile=pr, workload=Workload.scenario(sc, num_requests=10000),
                          slo=SLO(ttft_s=1.5, tpot_s=0.07, percentile=90)) for sc in ("op1", "op2", "op3", "op4")]
    out = {}
    for method in ("exhaustive", "fast"):
        t = time.process_time()
        out[method] = (search_many(space, st, jobs=1, progress=False, method=method), time.process_time() - t)
    lines = ["", "BestServe op1-op4 (codellama-34b, 8 x ascend-910b3, 10,000 requests, one worker): "
             f"exhaustive {out['exhaustive'][1]:.1f} s CPU, fast {out['fast'][1]:.1f} s CPU", "",
             "| scenario | exhaustive best (req/s/device) | fast best (req/s/device, simulated whole) "
             "| disagreements |",
             "|---|---|---|---|"]
    for sc, ex, fa in zip(("op1", "op2", "op3", "op4"), out["exhaustive"][0], out["fast"][0], strict=True):
        dis = "; ".join(fa.settings_summary.get("disagreements", [])) or "none"
        lines.append(f"| {sc} | {ex.best.name} {ex.best.goodput_per_device:.3f} | {fa.best.name} "
                     f"{fa.best.goodput_per_device:.3f} | {dis} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="qwen,llama,deepseek")
    ap.add_argument("--exhaustive", action="store_true", help="also run the exhaustive search on the qwen job")
    ap.add_argument("--bestserve", action="store_true", help="also compare the two methods on op1-op4")
    a = ap.parse_args()
    lines = [f"machine: {describe()}", "",
             "| job | target | wall (s) | CPU (s) | load avg at start | best | per device "
             "| pool measurements | confirmed | simulations |", "|---|---|---|---|---|---|---|---|---|---|"]
    notes = []
    for name in a.only.split(","):
        target, args = JOBS[name]
        d, wall, cpu, load = run(args)
        s = d["settings"]
        best = d["strategies"][0]
        lines.append(f"| {name} | <= {target:g} s | {wall:.1f} | {cpu:.1f} | {load} | {best['name']} | "
                     f"{best['goodput_per_device']:.3f} | {s.get('pool_measurements')} | "
                     f"{len(s.get('confirmed', []))} | {d['num_simulations']} |")
        for dis in s.get("disagreements", []):
            notes.append(f"{name}: confirmation disagrees with its composition: {dis}")
        if name == "qwen":
            ref_path = RESULTS / "optimize-scale-exhaustive.json"
            if a.exhaustive:
                ex, ex_wall, ex_cpu, ex_load = run(args + ["--exhaustive"])
                ref = {"best": ex["strategies"][0]["name"], "per_device": ex["strategies"][0]["goodput_per_device"],
                       "wall_s": ex_wall, "cpu_s": ex_cpu, "load": ex_load, "machine": describe(),
                       "num_simulations": ex["num_simulations"],
                       "per_device_of": {r["name"]: r["goodput_per_device"] for r in ex["strategies"]}}
                ref_path.write_text(json.dumps(ref, indent=1))
            if ref_path.exists():
                ref = json.loads(ref_path.read_text())
                same = ref["per_device_of"].get(best["name"])
                same_txt = "not ranked" if same is None else f"{same:.3f}"
                notes.append(
                    f"qwen: fast best {best['name']} {best['goodput_per_device']:.3f} req/s/device (simulated whole) "
                    f"= {best['goodput_per_device'] / ref['per_device']:.1%} of the exhaustive best {ref['best']} "
                    f"{ref['per_device']:.3f} (target >= 98%); the exhaustive search's own figure for "
                    f"{best['name']}: {same_txt}. Exhaustive: {ref['wall_s']:.0f} s wall, "
                    f"{ref['cpu_s']:.0f} s CPU, {ref['num_simulations']} simulations, load {ref['load']} "
                    f"({ref['machine']}); time ratio exhaustive / fast: {ref['wall_s'] / wall:.0f}x wall, "
                    f"{ref['cpu_s'] / cpu:.0f}x CPU.")
    if a.bestserve:
        notes += bestserve_rankings()
    report(lines + [""] + notes, "optimize-scale.md")


if __name__ == "__main__":
    main()
