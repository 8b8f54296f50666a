"""Attention work of local layers: sliding windows (Mistral, Gemma, gpt-oss) and chunked
attention (Llama 4), as features of a step (``kvpw``, ``kvdw``, ``apw``, ``apcw``).

A step is described by batch aggregates (:class:`serveplan.estimator.batch.StepBatch`), not by
its sequences, so the windowed sums are taken for the *mean* sequence of each phase and scaled by
the number of sequences. This is exact when the sequences of a phase share their lengths (the
estimator's and the static batch's case) and an upper bound otherwise for sliding windows, since
keys attended are a concave function of the context (Jensen's inequality).

Per query at absolute position ``p`` (1-based, the query itself included):

* sliding window ``W``: ``min(p, W)`` keys (Mistral 7B paper, arXiv:2310.06825, §2 "Sliding
  Window Attention"; HF ``sliding_window`` counts the keys a token sees);
* chunked attention ``C``: ``((p - 1) mod C) + 1`` keys, those of its own chunk (HF
  ``Llama4TextAttention`` with ``attention_chunk_size``).

Every function works on floats and on numpy arrays alike (the simulator times many steps at once).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def keys_at(position: Any, window: int, chunked: bool) -> Any:
    """Keys one query at 1-based ``position`` attends to on a local layer."""
    p = np.maximum(position, 0.0)
    if chunked:
        return np.where(p > 0, np.mod(p - 1, window) + 1, 0.0)
    return np.minimum(p, float(window))


def prefix_keys(n: Any, window: int, chunked: bool) -> Any:
    """Keys attended by the queries at positions ``1 .. n`` together.

    Sliding: ``n(n+1)/2`` while ``n <= W``, then ``W`` per further query. Chunked: every full
    chunk contributes ``C(C+1)/2``, the partial one ``r(r+1)/2``.
    """
    n = np.maximum(n, 0.0)
    W = float(window)
    if chunked:
        q = np.floor(n / W)
        r = n - q * W
        return q * W * (W + 1) / 2 + r * (r + 1) / 2
    return np.where(n <= W, n * (n + 1) / 2, W * (W + 1) / 2 + (n - W) * W)


def causal_keys(context: Any, new: Any, window: int, chunked: bool) -> Any:
    """Keys attended by ``new`` queries at positions ``context+1 .. context+new``."""
    return prefix_keys(context + new, window, chunked) - prefix_keys(context, window, chunked)


def window_features(prefill_seqs: Any, prefill_tokens: Any, prefill_keys: Any, decode_seqs: Any,
                    decode_keys: Any, window: int, chunked: bool) -> tuple[Any, Any, Any, Any]:
    """``(kvpw, kvdw, apw, apcw)`` of a step on local layers, from the phase aggregates
    (``sp``, ``np``, ``kvp``, ``nd``, ``kvd``; scalars or arrays of many steps)."""
    sp = np.asarray(prefill_seqs, dtype=float)
    nd = np.asarray(decode_seqs, dtype=float)
    sp_safe = np.where(sp > 0, sp, 1.0)
    nd_safe = np.where(nd > 0, nd, 1.0)
    s = prefill_tokens / sp_safe            # mean new tokens per prefill sequence
    end = prefill_keys / sp_safe            # mean context + new
    c = end - s
    W = float(window)
    if chunked:
        first_visible = np.floor(np.maximum(c, 0.0) / W) * W  # start of the chunk of the first query
    else:
        first_visible = np.maximum(c - W + 1, 0.0)           # oldest key the first query sees
    kvpw = np.where(sp > 0, sp * (end - np.minimum(first_visible, end)), 0.0)
    apw = np.where(sp > 0, sp * s * np.minimum(end, W), 0.0)
    apcw = np.where(sp > 0, sp * causal_keys(c, s, window, chunked), 0.0)
    kvdw = np.where(nd > 0, nd * keys_at(decode_keys / nd_safe, window, chunked), 0.0)
    return kvpw, kvdw, apw, apcw
