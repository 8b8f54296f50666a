"""The one-step fast paths of the estimator give the very floats of the general ones.

* ``AttentionCurve.decode_terms`` (plain floats) against ``AttentionCurve.terms`` on the numpy
  scalars a single step passes it, for every bundled decode curve (XQA's multi-block split,
  ``parallel_power`` 1 and above, the per-CTA floors);
* ``roofline.step_block_terms`` (a step's terms but decode attention memoised on its other
  features) against ``op_terms`` on the same step, bit for bit, on hits and misses of the memo,
  for dense GQA under fused-attention curves, a model with local-window layers and an MoE/MLA
  model (where the memo stands aside).
Exact equality is the claim: a serving run's per-request results stay identical to the general
path's (benchmarks/bench_sim_million.py checks whole runs).
"""

from __future__ import annotations

import numpy as np
import pytest

from serveplan import Estimator, ParallelConfig, StepBatch, get_hardware, get_model, get_profile
from serveplan.estimator.roofline import decode_rows, op_terms, step_block_terms
from serveplan.ops.base import FEATURE_INDEX
from serveplan.specs.profile import Phase

KVD, ND = FEATURE_INDEX["kvd"], FEATURE_INDEX["nd"]


def _decode_curves():
    for name in ("measured-h100-sxm", "measured-h200", "measured-b200", "measured-a100-80g", "measured-l40s"):
        prof = get_profile(name)
        for engine, curves in [("", prof.kernels), *prof.engine_kernels.items()]:
            assert curves is not None
            for key, curve in curves.attention.items():
                if key.startswith("decode/"):
                    yield f"{name}:{engine}:{key}", curve


@pytest.mark.parametrize(("name", "curve"), list(_decode_curves()), ids=lambda v: v if isinstance(v, str) else "")
def test_decode_terms_on_floats_equal_terms_on_numpy_scalars(name, curve):
    rng = np.random.default_rng(3)
    seen_split = False
    for _ in range(400):
        seqs = float(rng.integers(1, 600))
        keys = float(seqs * rng.integers(1, 40000))
        heads, head_dim, group = float(rng.choice([1, 2, 4, 8])), 128.0, float(rng.choice([1, 4, 8, 16]))
        flops, nbytes = float(rng.uniform(1e6, 1e12)), float(rng.uniform(1e5, 1e11))
        length = np.float64(keys) / np.maximum(np.float64(seqs), 1e-30)
        pairs = np.float64(seqs) * heads
        want = curve.terms("decode", length, pairs, head_dim, group, np.array([flops]), np.array([nbytes]),
                           989e12, 3.35e12)
        got = curve.decode_terms(float(length), float(pairs), head_dim, group, flops, nbytes, 989e12, 3.35e12)
        assert float(want[0]) == got[0] and float(want[1][0]) == got[1] and float(want[2][0]) == got[2], name
        seen_split |= bool(curve.multi_block_tokens) and curve.blocks(float(length), float(pairs)) > 1
    assert seen_split or not curve.multi_block_tokens   # the split branch was exercised where the curve has one


CASES = [
    # dense GQA under the measured H100 curves (vLLM's serving path), fp8 and bf16
    ("llama-3.1-8b", "h100-sxm", "measured-h100-sxm", ParallelConfig(tp=1), "bf16", True),
    ("llama-3.1-70b", "h100-sxm", "measured-h100-sxm", ParallelConfig(tp=4), "fp8", True),
    # data-parallel attention: the busiest rank's share makes the context sum fractional (the
    # decode rows' products are then taken as BLAS takes them, not summed in integers)
    ("llama-3.1-8b", "h100-sxm", "measured-h100-sxm", ParallelConfig(tp=1, dp=2), "bf16", True),
    # local-window layers: the window features derive from the context sum, so it keys the memo too
    ("gemma-2-9b", "h200", "measured-h200", ParallelConfig(tp=1), "bf16", True),
    # a fused MoE kernel: the memo stands aside (its expert terms are not split out)
    ("qwen3-30b-a3b", "h100-sxm", "measured-h100-sxm", ParallelConfig(tp=2), "fp8", False),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0])
def test_step_block_terms_equal_op_terms_bit_for_bit(case):
    model, hw, prof, par, dtype, memoised = case
    est = Estimator(get_model(model), get_hardware(hw), get_profile(prof), par, dtype=dtype)
    rates = est._rates[Phase.PREFILL]
    assert rates.curves is not None
    assert (decode_rows(est.compiled, rates.curves) is not None) is memoised
    rng = np.random.default_rng(5)
    hits = 0
    for chunk in (512, 1024, 1024, 2048):       # repeated chunks and decode counts: memo hits
        for nd in (1, 37, 37, 120):
            for _ in range(3):
                ctx = float(nd * rng.integers(100, 8000))
                b = StepBatch(prefill_tokens=chunk, prefill_seqs=1, prefill_keys=chunk, prefill_scores=chunk * chunk,
                              prefill_causal_scores=chunk * (chunk + 1) / 2, decode_tokens=float(nd), decode_keys=ctx)
                x = est.features(b)
                r = est._rates_of(x)
                before = len(r.curves.steps) if r.curves is not None else 0
                bc, bm = step_block_terms(est.compiled, r, x.copy())
                *_, bc_ref, bm_ref = op_terms(est.compiled, r, x.copy())
                assert np.array_equal(bc, bc_ref) and np.array_equal(bm, bm_ref)
                hits += r.curves is not None and len(r.curves.steps) == before and memoised
    assert hits >= 10 or not memoised   # 48 steps over 12 (chunk, decode count) pairs


@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0])
def test_time_of_sums_equals_step_time_bit_for_bit(case):
    """``Estimator.time_of_sums`` (a step's other operators kept per aggregates but the decode
    context sum) against ``step_time`` of a fresh estimator, on repeated and new aggregates."""
    model, hw, prof, par, dtype, memoised = case
    make = lambda: Estimator(get_model(model), get_hardware(hw), get_profile(prof), par, dtype=dtype)  # noqa: E731
    est, ref = make(), make()
    rng = np.random.default_rng(9)
    for chunk in (0, 512, 1024, 1024):
        for nd in (0, 1, 37, 37, 120):
            if not chunk and not nd:
                continue
            for _ in range(3):
                ctx = float(nd * rng.integers(100, 8000))
                sums = (float(chunk), float(nd), float(chunk > 0), float(chunk), ctx, float(chunk * chunk),
                        chunk * (chunk + 1) / 2)
                want = ref.step_time(ref.features(StepBatch.from_sums(sums)))
                assert est.time_of_sums(sums) == want
    kept = [e for e in est._by_sums.values() if e is not None]
    assert bool(kept) is (memoised and not est._local_window)
