"""The columnar step times (``Estimator.step_times``: decode tables, chunk stretches) against the
one-step path (``Estimator.step_time``, which times every operator of the step with ``op_terms``).

The columnar path times once the operators and collectives that read no feature varying between
the columns (``roofline.split_step``/``block_terms``) and evaluates the two-batch half from the
same split; only the order of the per-block sums differs, so the two agree to float rounding.
"""

from __future__ import annotations

import numpy as np
import pytest

from serveplan import Estimator, ParallelConfig, StepBatch, get_hardware, get_model, get_profile
from serveplan.estimator import columns
from serveplan.estimator.overlap import two_batch_group_time, two_batch_layers_time
from serveplan.estimator.roofline import (
    block_terms,
    op_terms,
    split_step,
    tile_quantized_rows,
    tile_quantized_rows_array,
    varying_features,
)
from serveplan.ops.base import FEATURE_INDEX
from serveplan.specs.comm import CommOptions
from serveplan.specs.profile import Phase

KVD = FEATURE_INDEX["kvd"]

# (model, hardware, profile, layout, engine communication): MoE/MLA with DP attention and wide
# EP, with and without two-batch overlap, on measured kernel curves and on constant factors; a
# dense GQA model under fused-attention curves; a model with local-window layers
# (model, hardware, profile, layout, engine communication, weight format): MoE/MLA with DP
# attention and wide EP, with and without two-batch overlap, on measured kernel curves and on
# constant factors; a dense GQA model under fused-attention curves; a model with local-window
# layers; a profile whose decode steps wait for host dispatch (BestServe's, Algorithm 1 per block)
CASES = [
    ("deepseek-v3", "h200", "measured-h200", ParallelConfig(tp=1, dp=64, ep=64), CommOptions.deepep(), "fp8"),
    ("deepseek-v3", "h200", "measured-h200", ParallelConfig(tp=1, dp=16, ep=16), None, "fp8"),
    ("deepseek-v3", "h200", "measured-h200", ParallelConfig(tp=8, dp=1, ep=8), CommOptions.deepep(), "fp8"),
    ("deepseek-v3", "h800", None, ParallelConfig(tp=1, dp=32, ep=32, redundant_experts=32), CommOptions.deepep(),
     "fp8"),
    ("qwen3-30b-a3b", "h100-sxm", "measured-h100-sxm", ParallelConfig(tp=2, dp=2, ep=4), CommOptions.deepep(),
     "fp8"),
    ("llama-3.1-70b", "h100-sxm", "measured-h100-sxm", ParallelConfig(tp=4), None, "fp8"),
    ("gemma-2-9b", "a100-80g", None, ParallelConfig(tp=2), None, None),
    ("codellama-34b", "ascend-910b3", "bestserve-910b3", ParallelConfig(tp=4), None, None),
    ("deepseek-v2-lite", "ascend-910b3", "bestserve-910b3", ParallelConfig(tp=1, dp=4, ep=4), CommOptions.deepep(),
     None),
]


def _estimator(case: tuple) -> Estimator:
    model, hw, prof, par, comm, dtype = case
    profile = get_profile(prof) if prof else get_profile()
    if comm is not None:
        profile = profile.with_(comm=comm)
    return Estimator(get_model(model), get_hardware(hw), profile, par, dtype=dtype)


def _one_by_one(est: Estimator, X: np.ndarray) -> np.ndarray:
    return np.array([est.step_time(X[:, j].copy()) for j in range(X.shape[1])])


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[3].label()}-{'tbo' if c[4] else 'plain'}")
def test_decode_tables_equal_the_one_step_path(case):
    est = _estimator(case)
    rng = np.random.default_rng(7)
    for nd in (1, 2, 3, 37, 64, 511, 1024, 16384, 40000):   # two-batch overlap pays from about 16k
        base = StepBatch(decode_tokens=float(nd), decode_keys=float(nd))
        kvd = np.sort(rng.integers(nd, nd * 9000, size=48)).astype(float)
        got = columns.step_times(est, base, "decode", decode_keys=kvd)
        X = np.repeat(est.features(base)[:, None], len(kvd), axis=1)
        X[KVD] = kvd * est.rank_shares(base)[1]
        want = _one_by_one(est, X)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[3].label()}-{'tbo' if c[4] else 'plain'}")
def test_random_columns_equal_the_one_step_path(case):
    """Columns that vary in every feature (random mixed and decode batches) and in a few
    (a chunked prompt whose context grows beside fixed decodes)."""
    est = _estimator(case)
    rng = np.random.default_rng(11)
    batches = [StepBatch(decode_tokens=float(d), decode_keys=float(d * rng.integers(1, 5000)))
               for d in rng.integers(1, 700, size=24)]
    X = np.stack([est.features(b) for b in batches], axis=1)
    np.testing.assert_allclose(est.step_times(X.copy(), Phase.DECODE), _one_by_one(est, X), rtol=1e-12)
    chunk = 2048
    done = np.arange(0, 6 * chunk, chunk, dtype=float)
    base = StepBatch(prefill_tokens=chunk, prefill_seqs=1, prefill_keys=chunk, prefill_scores=chunk * chunk,
                     prefill_causal_scores=chunk * (chunk + 1) / 2, decode_tokens=40.0, decode_keys=40.0 * 3000)
    got = columns.step_times(est, base, "prefill", prefill_keys=done + chunk, prefill_scores=chunk * (done + chunk),
                             prefill_causal_scores=chunk * done + chunk * (chunk + 1) / 2)
    want = [est.time(StepBatch(prefill_tokens=chunk, prefill_seqs=1, prefill_keys=d + chunk,
                               prefill_scores=chunk * (d + chunk),
                               prefill_causal_scores=chunk * d + chunk * (chunk + 1) / 2,
                               decode_tokens=40.0, decode_keys=40.0 * 3000)) for d in done]
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_block_terms_equal_op_terms_block_sums():
    est = _estimator(CASES[0])
    rates = est._rates[Phase.DECODE]
    base = StepBatch(decode_tokens=300.0, decode_keys=300.0 * 4000)
    X = np.repeat(est.features(base)[:, None], 64, axis=1)
    X[KVD] = np.linspace(1e5, 5e6, 64)
    split = split_step(est.compiled, rates, varying_features(X))
    assert varying_features(X) == (KVD,)
    # only the attention operators read the context (fewer than a tenth of the step's operators)
    assert 0 < len(split.varying[0].ops) < len(est.compiled.ops) / 10
    bc, bm = block_terms(split, X)
    *_, bc_ref, bm_ref = op_terms(est.compiled, rates, X)
    np.testing.assert_allclose(bc, bc_ref, rtol=1e-13)
    np.testing.assert_allclose(bm, bm_ref, rtol=1e-13)


def test_two_batch_group_time_is_the_rule_without_dispatch():
    """Random per-block times of three layer kinds, computation or communication binding."""
    rng = np.random.default_rng(3)
    blocks = (2, 3, 1)
    bc, bm = rng.uniform(0, 1e-3, (6, 50)), rng.uniform(0, 1e-3, (6, 50)) * rng.uniform(0, 3, 50)
    counts = np.array([3.0, 58.0, 1.0])
    want = two_batch_layers_time(list(bc), list(bm), [(0.0,) * b for b in blocks], tuple(counts))[0]
    G = np.zeros((3, 6))
    for gi, (lo, hi) in enumerate(((0, 2), (2, 5), (5, 6))):
        G[gi, lo:hi] = 1.0
    np.testing.assert_allclose(two_batch_group_time(G @ bc, G @ bm, counts), want, rtol=1e-13)


def test_tile_rows_array_is_the_scalar_rule():
    n = np.array([0.0, 1.0, 5.5, 64.0, 127.9, 128.0, 129.0, 1000.0, 4096.0])
    assert tile_quantized_rows_array(n, 128).tolist() == [tile_quantized_rows(float(v), 128) for v in n]
    assert tile_quantized_rows_array(n, 0) is n
