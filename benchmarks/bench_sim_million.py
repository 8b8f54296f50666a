"""One million vLLM requests in a minute (issue 45, acceptance 1), checked against a base tree.

Three parts, each in its own process (the tree under test is the one on ``PYTHONPATH``):

* ``time``: the 1M job through the CLI in a subprocess, its wall time and peak RSS
  (``resource.getrusage(RUSAGE_CHILDREN)``); target <= 60 s and < 2 GB::

      serveplan simulate -m llama-3.1-8b -H h100-sxm --engine vllm --rate 20 --input-len 1024
          --output-len 256 --num-requests 1000000

* ``identity``: per-request TTFT, TPOT, first-token and finish times of the same stream's first
  10,000 requests (and of the other engine paths: SGLang, TensorRT-LLM, ``1p1d``, a closed loop
  of 64 clients, and a 40,000-request windowed run), under the base tree and this one, compared
  exactly (the largest relative difference is printed);
* ``pair``: CPU time (``time.process_time``) of 20,000-request runs of those paths under both
  trees, and the ratio.

Usage (the base tree is a plain copy of an older commit's ``src``, e.g. ``git archive 345ae7b src
| tar -x -C /tmp/sim-base``)::

    PYTHONPATH=src .venv/bin/python benchmarks/bench_sim_million.py --base /tmp/sim-base/src \
        [--skip-time] [--out benchmarks/results/sim-million-<date>.md]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
#: the 1M job's options (the CLI's, minus ``--num-requests``)
BASE_ARGS = ("-m", "llama-3.1-8b", "-H", "h100-sxm", "--rate", "20", "--input-len", "1024", "--output-len", "256")
#: the paths compared: name -> (engine, extra SimulateOptions fields)
CASES: dict[str, tuple[str, dict[str, object]]] = {
    "vllm": ("vllm", {}),
    "sglang": ("sglang", {}),
    "trtllm": ("trtllm", {}),
    "vllm-1p1d": ("vllm", {"strategy": "1p1d"}),
    "vllm-closed64": ("vllm", {"concurrency": "64", "rate": None}),
    "sglang-closed64": ("sglang", {"concurrency": "64", "rate": None}),
    "trtllm-closed64": ("trtllm", {"concurrency": "64", "rate": None}),
    "trtllm-1p1d": ("trtllm", {"strategy": "1p1d"}),
}
#: per-request fields compared
FIELDS = ("ttft", "tpot", "first_token", "finish")


def _options(engine: str, extra: dict[str, object], n: int) -> object:
    from serveplan.commands.simulate import SimulateOptions

    kw: dict[str, object] = {"model": "llama-3.1-8b", "hardware": "h100-sxm", "engine": engine, "rate": 20.0,
                             "input_len": 1024, "output_len": 256, "num_requests": n}
    kw.update(extra)
    return SimulateOptions(**kw)  # type: ignore[arg-type]


def child_dump(case: str, n: int, path: str) -> None:
    """Run ``case`` with ``n`` requests in this process; save its per-request fields and CPU time."""
    from serveplan.commands.simulate import prepare
    from serveplan.sim import simulate

    engine, extra = CASES[case]
    cfg = prepare(_options(engine, extra, n)).config  # type: ignore[arg-type]
    t = time.process_time()
    res = simulate(cfg)
    cpu = time.process_time() - t
    rec = res.requests
    np.savez(path, cpu=cpu, **{f: np.asarray(rec[f]) for f in FIELDS})


def _run_child(src: str, case: str, n: int, path: str) -> float:
    env = dict(os.environ, PYTHONPATH=src)
    subprocess.run([sys.executable, __file__, "--child", case, str(n), path], env=env, check=True)
    return float(np.load(path)["cpu"])


def _max_rel(a: np.ndarray, b: np.ndarray) -> float:
    """Largest relative difference of two arrays (NaN matching NaN); inf when the NaNs differ."""
    na, nb = np.isnan(a), np.isnan(b)
    if a.shape != b.shape or not np.array_equal(na, nb):
        return float("inf")
    x, y = a[~na], b[~na]
    if not len(x):
        return 0.0
    return float(np.max(np.abs(x - y) / np.maximum(np.abs(y), 1e-300)))


def identity(base: str, tmp: Path, cases: list[tuple[str, int, int]]) -> list[str]:
    """Compare the first ``prefix`` requests of each ``(case, n, prefix)`` run under both trees."""
    lines = ["| case | requests | compared | exact | max relative difference |", "|---|---|---|---|---|"]
    for case, n, prefix in cases:
        pa, pb = str(tmp / f"old-{case}-{n}.npz"), str(tmp / f"new-{case}-{n}.npz")
        _run_child(base, case, n, pa)
        _run_child(str(ROOT / "src"), case, n, pb)
        a, b = np.load(pa), np.load(pb)
        exact = all(np.array_equal(a[f][:prefix], b[f][:prefix], equal_nan=True) for f in FIELDS)
        worst = max(_max_rel(a[f][:prefix], b[f][:prefix]) for f in FIELDS)
        lines.append(f"| {case} | {n} | {prefix} | {'yes' if exact else 'NO'} | {worst:.3g} |")
        print(lines[-1], flush=True)
    return lines


def pair(base: str, tmp: Path, n: int, repeats: int, cases: list[str]) -> list[str]:
    """CPU seconds of each case under both trees (minimum of ``repeats``, alternating)."""
    lines = [f"| case ({n} requests) | base CPU s | new CPU s | speed-up |", "|---|---|---|---|"]
    for case in cases:
        old, new = [], []
        for i in range(repeats):
            old.append(_run_child(base, case, n, str(tmp / f"po-{case}-{i}.npz")))
            new.append(_run_child(str(ROOT / "src"), case, n, str(tmp / f"pn-{case}-{i}.npz")))
        lines.append(f"| {case} | {min(old):.2f} | {min(new):.2f} | {min(old) / min(new):.1f}x |")
        print(lines[-1], flush=True)
    return lines


def time_million(n: int) -> list[str]:
    """Wall time and peak RSS of the CLI job with ``n`` requests (this tree), in a subprocess."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    cmd = [sys.executable, "-m", "serveplan", "simulate", *BASE_ARGS[:4], "--engine", "vllm", *BASE_ARGS[4:],
           "--num-requests", str(n)]
    t = time.perf_counter()
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - t
    rss_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # kilobytes on Linux
    done = next((ln for ln in out.stdout.splitlines() if ln.startswith("completed")), "")
    lines = [f"`{' '.join(cmd[1:])}`", "", f"- wall time: {wall:.1f} s (target <= 60 s)",
             f"- peak RSS: {rss_kb / 1024:.0f} MiB (target < 2048 MiB)", f"- {done}"]
    print("\n".join(lines), flush=True)
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", help="src directory of the base tree (e.g. /tmp/sim-base/src)")
    ap.add_argument("--child", nargs=3, metavar=("CASE", "N", "PATH"), help=argparse.SUPPRESS)
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--skip-time", action="store_true")
    ap.add_argument("--skip-pair", action="store_true")
    ap.add_argument("--pair-requests", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--cases", help="comma-separated cases to compare (default: all)")
    ap.add_argument("--skip-window", action="store_true", help="skip the windowed 40,000-request identity check")
    a = ap.parse_args()
    if a.child:
        child_dump(a.child[0], int(a.child[1]), a.child[2])
        return
    body = [f"# Simulator: 1M requests (issue 45) — {_dt.date.today()}", "",
            f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} shared vCPUs "
            "(other workers running); each figure from one run.", ""]
    if not a.skip_time:
        body += ["## 1M vLLM job", "", *time_million(a.requests), ""]
    if a.base:
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            cases = a.cases.split(",") if a.cases else list(CASES)
            checks = [(c, 10_000, 10_000) for c in cases] + ([] if a.skip_window else [("vllm", 40_000, 10_000)])
            body += ["## Identity with the base tree (per-request ttft, tpot, first token, finish)", "",
                     *identity(a.base, tmp, checks), ""]
            if not a.skip_pair:
                body += ["## Paired CPU time, base vs new", "",
                         *pair(a.base, tmp, a.pair_requests, a.repeats, cases), ""]
    if a.out:
        a.out.write_text("\n".join(body) + "\n")


if __name__ == "__main__":
    main()
