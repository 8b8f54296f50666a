"""Sarathi §5.3 pipeline experiment: GPT-3 175B on 64 A100s (8-way TP x 8-way PP).

Run: .venv/bin/python benchmarks/bench_pipeline.py [--requests 10000]
Writes benchmarks/results/pipeline-gpt3.txt (the table below, with the machine description).

Setup, following Sarathi §5.3:

* ``gpt3-175b`` on ``a100-80g`` (8 per node, InfiniBand between nodes), profile ``default-gpu``;
  one instance of tp=8 (within a node) x pp=8 (one stage per node).
* 10,000 requests. Total length ``L`` (prompt + output) between 1024 and 4096 tokens from a
  Zipf distribution with theta 0.4 over the ranks ``L - 1023 = 1..3073`` (``P(L) ∝
  (L - 1023)^-0.4``, short lengths most likely; the paper gives only "Zipf, theta = 0.4, 1K-4K",
  this rank order is our reading). P:D = 10: output ``round(L / 11)``, prompt the rest.
* Arrivals: Poisson at 50 requests/s (seed 0), far above capacity, so the instance runs saturated
  like the paper's offline run; throughput = completed requests / (last completion - first arrival).
* At most 27 sequences per micro-batch (paper: maximum batch size 27 with TP+PP; P:D = 10 is
  then the peak-gain ratio ``C/(B-1) = 256/26``), 8 micro-batches in flight.

Schedules:

* ``orca-best``: iteration-level scheduling with full prefills mixed into decode micro-batches,
  no limit on prefill tokens (Sarathi §5.2: best-case Orca = SARATHI with the chunk equal to the
  longest prompt): scheduler ``sarathi`` with ``chunk_size=4096`` and an unlimited token budget.
* ``vllm``: prefill-first iteration-level scheduling that never mixes (vLLM v0).
* ``sarathi``: chunked prefill with decode-maximal batching, chunk 256 (token budget 256 per
  micro-batch including the piggybacked decodes).
* ``tp8-only`` rows: the paper's third deployment, 8 replicas of tp=8 (pp=1), maximum batch 11.

Bubble = per request, the sum over its micro-batches of the time later stages sat idle waiting
for that micro-batch (``SimulationResult.bubble_s``); the paper reports its median.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling machine_info module
from machine_info import describe, report  # noqa: E402
from serveplan import get_hardware, get_model, get_profile
from serveplan.sim import SimulationConfig, Workload, simulate

PAPER = {"bubble_reduction": 6.29, "throughput_gain": 1.91, "tp_only_over_baseline": 1.28,
         "sarathi_over_tp_only": 1.48}  # Sarathi §5.3


def zipf_lengths(n: int, low: int, high: int, theta: float, seed: int) -> np.ndarray:
    """``n`` integers in ``[low, high]`` with ``P(low + r - 1) ∝ r^-theta`` (rank ``r``)."""
    rng = np.random.default_rng(seed)
    ranks = np.arange(1, high - low + 2, dtype=float)
    p = ranks**-theta
    return low + rng.choice(ranks.size, size=n, p=p / p.sum())


def workload(num_requests: int, seed: int = 0) -> Workload:
    total = zipf_lengths(num_requests, 1024, 4096, 0.4, seed)
    out = np.maximum(1, np.rint(total / 11)).astype(np.int64)   # P:D = 10
    return Workload(input_lengths=total - out, output_lengths=out, name="gpt3-zipf0.4-pd10")


SCHEDULES = {
    "orca-best": dict(scheduler="sarathi", chunk_size=4096, token_budget=10**7),
    "vllm": dict(scheduler="prefill-first"),
    "sarathi": dict(scheduler="sarathi", chunk_size=256),
    "orca-best tp8-only": dict(scheduler="sarathi", chunk_size=4096, token_budget=10**7, pp=1, max_batch=11,
                               strategy="8m"),
    "sarathi tp8-only": dict(scheduler="sarathi", chunk_size=256, pp=1, max_batch=11, strategy="8m"),
}


def config(wl: Workload, **changes) -> SimulationConfig:
    kw = dict(model=get_model("gpt3-175b"), hardware=get_hardware("a100-80g"), profile=get_profile("default-gpu"),
              strategy="1m", tp=8, pp=8, max_batch=27, chunk_size=256, rate=50.0, workload=wl, seed=0,
              max_time_s=1e6)
    kw.update(changes)
    return SimulationConfig(**kw)


def machine() -> str:
    return describe()



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=10000)
    args = ap.parse_args()
    wl = workload(args.requests)
    total = wl.input_lengths + wl.output_lengths
    lines = [f"machine: {machine()}",
             f"workload: {args.requests} requests, total length mean {total.mean():.0f} median {np.median(total):.0f} "
             f"(min {total.min()}, max {total.max()}), prompt mean {wl.input_lengths.mean():.0f}, "
             f"output mean {wl.output_lengths.mean():.0f}",
             f"{'schedule':20s} {'done':>6s} {'req/s':>7s} {'out tok/s':>10s} {'bubble p50 s':>13s} "
             f"{'bubble mean s':>14s} {'steps':>8s} {'wall s':>7s}"]
    res = {}
    for name, kw in SCHEDULES.items():
        t0 = time.perf_counter()
        r = simulate(config(wl, **kw))
        res[name] = r
        b = r.bubble_s
        lines.append(f"{name:20s} {r.num_completed:6d} {r.throughput_rps:7.3f} {r.output_tokens_per_s:10.1f} "
                     f"{np.median(b):13.4f} {np.mean(b):14.4f} {r.num_steps:8d} {time.perf_counter() - t0:7.1f}")
    base, vllm, sar = res["orca-best"], res["vllm"], res["sarathi"]
    tp_only = res["orca-best tp8-only"]
    med = lambda r: float(np.median(r.bubble_s))  # noqa: E731
    lines += [
        "",
        f"{'ratio':44s} {'ours':>9s} {'paper':>7s}",
        f"{'median bubble, orca-best / sarathi':44s} {med(base) / med(sar):9.0f} {PAPER['bubble_reduction']:7.2f}",
        f"{'median bubble, vllm / sarathi':44s} {med(vllm) / med(sar):9.0f} {'-':>7s}",
        f"{'throughput, sarathi / orca-best (TP-PP)':44s} {sar.throughput_rps / base.throughput_rps:9.2f} "
        f"{PAPER['throughput_gain']:7.2f}",
        f"{'throughput, sarathi / vllm (TP-PP)':44s} {sar.throughput_rps / vllm.throughput_rps:9.2f} {'-':>7s}",
        f"{'throughput, TP-only (orca) / orca-best TP-PP':44s} {tp_only.throughput_rps / base.throughput_rps:9.2f} "
        f"{PAPER['tp_only_over_baseline']:7.2f}",
        f"{'throughput, sarathi TP-PP / TP-only (orca)':44s} {sar.throughput_rps / tp_only.throughput_rps:9.2f} "
        f"{PAPER['sarathi_over_tp_only']:7.2f}",
    ]
    report(lines, "pipeline-gpt3.txt")


if __name__ == "__main__":
    main()
