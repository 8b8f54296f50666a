"""Step times of many steps at once: the columnar face of :class:`~serveplan.estimator.step.Estimator`.

A run of steps that differ only in their context-dependent aggregates (a decode stretch whose
context sum grows by the batch each step, a chunked prompt whose context grows by the chunk) is
timed by one vectorised call: the steps share the feature vector of ``base`` except the
columns given, which enter the features linearly (per data-parallel rank, as
:meth:`Estimator.features` divides them). Fields that change the token counts (and through them
tile quantization or MoE expert activity) cannot vary: time such steps one by one.
"""

from __future__ import annotations

import numpy as np

from serveplan.estimator.batch import StepBatch
from serveplan.estimator.step import Estimator
from serveplan.ops.base import FEATURE_INDEX

#: StepBatch fields that may vary along a column, and their feature.
VARYING = {
    "prefill_keys": FEATURE_INDEX["kvp"],
    "decode_keys": FEATURE_INDEX["kvd"],
    "prefill_scores": FEATURE_INDEX["ap"],
    "prefill_causal_scores": FEATURE_INDEX["apc"],
}


def step_times(est: Estimator, base: StepBatch, phase: str, **columns: np.ndarray) -> np.ndarray:
    """Times (s) of the steps equal to ``base`` but for the ``columns`` (arrays of one length,
    keyed by :class:`StepBatch` field, e.g. ``decode_keys=...``), all of phase ``phase``.

    Raises
    ------
    KeyError
        A column that is not one of :data:`VARYING`.
    """
    x0 = est.features(base)
    k = len(next(iter(columns.values())))
    X = np.repeat(x0[:, None], k, axis=1)
    dp = est.parallel.dp
    for name, col in columns.items():
        X[VARYING[name]] = col / dp
    return est.step_times(X, phase)
