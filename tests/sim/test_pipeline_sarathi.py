"""Sarathi §5.3, qualitatively: GPT-3 175B on 8 nodes of 8 A100s (tp=8 x pp=8).

Full prefills mixed into decode micro-batches (best-case Orca) make micro-batch stage times
differ by 10x (a ~2000-token prompt takes ~85 ms per stage, 27 decodes ~8 ms), so the
micro-batches behind a prefill wait at every stage: bubbles. Chunked prefill with decode-maximal
batching (chunk 256, at most 27 sequences) keeps every micro-batch at 8-14 ms per stage. The
paper: median bubble per request 6.29x lower, throughput 1.91x higher. The full-size run
(10,000 requests) is ``benchmarks/bench_pipeline.py``; this one uses 400 requests of the same
distribution to stay fast.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from serveplan import Estimator, ParallelConfig, StepBatch, get_hardware, get_model, get_profile
from serveplan.sim import simulate

_BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_pipeline.py"
_spec = importlib.util.spec_from_file_location("bench_pipeline", _BENCH)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def runs():
    wl = bench.workload(400)
    return {name: simulate(bench.config(wl, **bench.SCHEDULES[name])) for name in ("orca-best", "vllm", "sarathi")}


def test_workload_follows_the_paper():
    wl = bench.workload(2000)
    total = wl.input_lengths + wl.output_lengths
    assert total.min() >= 1024 and total.max() <= 4096
    # P:D = 10 per request, up to rounding of the output length
    ratio = wl.input_lengths / wl.output_lengths
    assert np.median(ratio) == pytest.approx(10, abs=0.1)
    # Zipf(0.4) over ranks 1..3073 puts more mass on short lengths: mean below the midpoint
    assert total.mean() < (1024 + 4096) / 2


def test_micro_batch_stage_times_differ_10x_with_full_prefills():
    est = Estimator(get_model("gpt3-175b"), get_hardware("a100-80g"), get_profile("default-gpu"),
                    ParallelConfig(tp=8, pp=8))
    decodes = est.stage_time(StepBatch.decode(27, 2200))
    full = est.stage_time(StepBatch.decode(26, 2200) + StepBatch.prefill(1, 2000))
    chunk = est.stage_time(StepBatch.decode(26, 2200) + StepBatch.prefill(1, 230, 1000))
    assert full > 8 * decodes
    assert chunk < 2 * decodes


def test_all_requests_finish(runs):
    assert all(r.num_completed == 400 for r in runs.values())


@pytest.mark.parametrize("baseline", ["orca-best", "vllm"])
def test_chunked_prefill_cuts_bubbles_by_a_large_factor(runs, baseline):
    base = float(np.median(runs[baseline].bubble_s))
    sar = float(np.median(runs["sarathi"].bubble_s))
    assert base > 6.29 * sar  # the paper's factor; ours is larger (see docs/validation/parallelism.md)


@pytest.mark.parametrize("baseline", ["orca-best", "vllm"])
def test_chunked_prefill_raises_throughput(runs, baseline):
    assert runs["sarathi"].throughput_rps > 1.5 * runs[baseline].throughput_rps
