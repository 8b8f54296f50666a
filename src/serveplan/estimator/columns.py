"""Step times of many steps at once: the columnar face of :class:`~serveplan.estimator.step.Estimator`.

A run of steps that differ only in their context-dependent aggregates (a decode stretch whose
context sum grows by the batch each step, a chunked prompt whose context grows by the chunk) is
timed by one vectorised call: the steps share the feature vector of ``base`` except the columns
given, which enter the features linearly (per data-parallel rank, the busiest one's share, as :meth:`Estimator.features`
takes them). Fields that change the token counts (and through them tile quantization or MoE
expert activity) cannot vary: time such steps one by one.
"""

from __future__ import annotations

import numpy as np

from serveplan.estimator.batch import StepBatch
from serveplan.estimator.step import Estimator
from serveplan.ops.base import FEATURE_INDEX

_KVP, _KVD, _AP, _APC = FEATURE_INDEX["kvp"], FEATURE_INDEX["kvd"], FEATURE_INDEX["ap"], FEATURE_INDEX["apc"]


def step_times(est: Estimator, base: StepBatch, phase: str, *, length: int | None = None,
               prefill_keys: np.ndarray | None = None, decode_keys: np.ndarray | None = None,
               prefill_scores: np.ndarray | None = None,
               prefill_causal_scores: np.ndarray | None = None) -> np.ndarray:
    """Times (s) of the steps of phase ``phase`` equal to ``base`` but for the :class:`StepBatch`
    fields given as arrays (each step's value of the field; ``length``: their common length,
    read from them when omitted)."""
    if length is None:
        given = [c for c in (prefill_keys, decode_keys, prefill_scores, prefill_causal_scores) if c is not None]
        length = len(given[0])
    X = np.repeat(est.features(base)[:, None], length, axis=1)
    fp, fd = est.rank_shares(base)   # the busiest DP-attention rank's shares, as features() takes them
    if prefill_keys is not None:
        X[_KVP] = prefill_keys * fp
    if prefill_scores is not None:
        X[_AP] = prefill_scores * fp
    if prefill_causal_scores is not None:
        X[_APC] = prefill_causal_scores * fp
    if decode_keys is not None:
        X[_KVD] = decode_keys * fd
    return est.step_times(X, phase)
