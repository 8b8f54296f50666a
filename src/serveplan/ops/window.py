"""Attention work of local layers: sliding windows (Mistral, Gemma, gpt-oss) and chunked
attention (Llama 4), as features of a step (``kvpw``, ``kvdw``, ``apw``, ``apcw``, ``adxw``); and
the score elements of decode sequences with more than one query token (``adx``, speculative
verify), on full and local layers alike (:func:`decode_features`).

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
    (``sp``, ``np``, ``kvp``, the decode sequences ``nd - ndx``, ``kvd``; scalars or arrays of
    many steps). ``kvdw`` is the window of each decode sequence's last query, the keys a decode
    kernel reads."""
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


def decode_features(decode_tokens: Any, decode_extra: Any, decode_keys: Any, window: int = 0,
                    chunked: bool = False) -> tuple[Any, Any]:
    """``(adx, adxw)`` of the decode sequences of a step: ``decode_tokens`` query tokens
    (``nd``), ``decode_extra`` of them beyond the first of each sequence (``ndx``), so ``s = nd -
    ndx`` sequences of ``q = nd / s`` queries each, whose last query sees ``L = kvd / s`` keys
    (``decode_keys`` = ``kvd``); ``window = 0``: no local layers (``adxw = 0``).

    A sequence's queries sit at positions ``L - q + 1 .. L`` (the draft tokens of a speculative
    verify, each seeing the cache and the drafts before it, causal). On a full layer they score
    ``q L - q (q - 1) / 2`` keys, so beyond the ``L`` of one query ``adx = (q - 1) (kvd - nd / 2)``
    over the step. On a local layer the last query's window is read (``kvdw = s * keys_at(L)``)
    and the queries score ``s * causal_keys(L - q, q)``, of which ``adxw`` is the part beyond
    ``kvdw`` (:func:`window_features` of the ``s`` sequences). With one query per sequence
    (``ndx = 0``) ``adx = adxw = 0``.

    >>> float(decode_features(4.0, 3.0, 1003.0)[0])   # 1 sequence, q = 4 at 1000..1003: 4006 - 1003
    3003.0
    """
    nd = np.asarray(decode_tokens, dtype=float)
    ndx = np.asarray(decode_extra, dtype=float)
    seqs = nd - ndx
    multi = (ndx > 0) & (seqs > 0)
    s_safe = np.where(seqs > 0, seqs, 1.0)
    q = np.where(multi, nd / s_safe, 1.0)
    adx = np.where(multi, (q - 1.0) * (decode_keys - nd / 2.0), 0.0)
    if not window:
        return adx, np.zeros_like(adx)
    last = decode_keys / s_safe
    kvdw = seqs * keys_at(last, window, chunked)
    adxw = np.where(multi, seqs * causal_keys(last - q, q, window, chunked) - kvdw, 0.0)
    return adx, adxw
