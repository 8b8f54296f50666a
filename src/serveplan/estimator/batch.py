"""Composition of one step (forward pass) and its feature vector.

A step runs some sequences, each with ``new`` tokens computed now on top of ``context`` tokens
already in the KV cache: a prompt is ``(s, 0)``, a decode is ``(1, c)``, a prefill chunk is
``(chunk, prior)``. The estimator only needs the aggregates below (see
:mod:`serveplan.ops.base` for their meaning), so the simulator can keep running sums instead of
building per-sequence lists.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from serveplan.errors import SpecError


@dataclass(frozen=True, slots=True, kw_only=True)
class StepBatch:
    """Aggregates of a step's sequences (per instance, before data-parallel splitting).

    Build with :meth:`prefill`, :meth:`decode` or :meth:`from_sequences`.
    """

    prefill_tokens: float = 0.0      # np
    decode_tokens: float = 0.0       # nd (= decode sequences)
    prefill_seqs: float = 0.0        # sp
    prefill_keys: float = 0.0        # kvp = sum(context + new)
    decode_keys: float = 0.0         # kvd = sum(context + 1)
    prefill_scores: float = 0.0      # ap  = sum(new * (context + new))
    prefill_causal_scores: float = 0.0  # apc = sum(new * (context + (new + 1) / 2))

    @property
    def num_tokens(self) -> float:
        return self.prefill_tokens + self.decode_tokens

    @property
    def num_seqs(self) -> float:
        return self.prefill_seqs + self.decode_tokens

    @property
    def is_prefill(self) -> bool:
        return self.prefill_tokens > 0

    @staticmethod
    def prefill(batch: int, input_len: int, context_len: int = 0) -> StepBatch:
        """``batch`` prompts of ``input_len`` new tokens after ``context_len`` cached ones."""
        _check_positive("batch", batch)
        _check_positive("input_len", input_len)
        if context_len < 0:
            raise SpecError(f"context_len={context_len} must be >= 0")
        b, s, c = float(batch), float(input_len), float(context_len)
        return StepBatch(
            prefill_tokens=b * s, prefill_seqs=b, prefill_keys=b * (c + s),
            prefill_scores=b * s * (c + s), prefill_causal_scores=b * s * (c + (s + 1) / 2),
        )

    @staticmethod
    def decode(batch: int, context_len: int) -> StepBatch:
        """``batch`` decode sequences, each attending ``context_len`` keys (new token included)."""
        _check_positive("batch", batch)
        _check_positive("context_len", context_len)
        b, c = float(batch), float(context_len)
        return StepBatch(decode_tokens=b, decode_keys=b * c)

    @staticmethod
    def from_sequences(seqs: Iterable[tuple[int, int]]) -> StepBatch:
        """From ``(new_tokens, cached_context)`` pairs; ``(1, c>0)`` is a decode."""
        prefill: list[tuple[int, int]] = []
        decode: list[int] = []
        for new, ctx in seqs:
            if new < 1 or ctx < 0:
                raise SpecError(f"sequence (new={new}, context={ctx}) needs new >= 1 and context >= 0")
            if new == 1 and ctx > 0:
                decode.append(ctx)
            else:
                prefill.append((new, ctx))
        return StepBatch.of(prefill, decode)

    @staticmethod
    def of(prefill: Sequence[tuple[int, int]], decode_contexts: Sequence[int]) -> StepBatch:
        """From prefill chunks ``(new_tokens, cached_context)`` and the cached contexts of the
        decodes (each computes one token attending ``context + 1`` keys); no validation (the
        simulator's per-step path)."""
        return StepBatch.from_sums(step_sums(prefill, decode_contexts))

    @staticmethod
    def from_sums(sums: tuple[float, ...]) -> StepBatch:
        """From the aggregates in field order (:func:`step_sums`)."""
        a, b, c, d, e, f, g = sums
        return StepBatch(prefill_tokens=a, decode_tokens=b, prefill_seqs=c, prefill_keys=d, decode_keys=e,
                         prefill_scores=f, prefill_causal_scores=g)

    def sums(self) -> tuple[float, ...]:
        """The aggregates in :data:`SUM_FIELDS` order (the inverse of :meth:`from_sums`)."""
        return (self.prefill_tokens, self.decode_tokens, self.prefill_seqs, self.prefill_keys, self.decode_keys,
                self.prefill_scores, self.prefill_causal_scores)

    def __add__(self, other: StepBatch) -> StepBatch:
        return StepBatch.from_sums(tuple(a + b for a, b in zip(self.sums(), other.sums(), strict=True)))


#: StepBatch fields in the order of :func:`step_sums`
SUM_FIELDS = ("prefill_tokens", "decode_tokens", "prefill_seqs", "prefill_keys", "decode_keys", "prefill_scores",
              "prefill_causal_scores")


def step_sums(prefill: Sequence[tuple[int, int]], decode_contexts: Sequence[int]) -> tuple[float, ...]:
    """The aggregates of a step (:data:`SUM_FIELDS` order) from its prefill chunks ``(new_tokens,
    cached_context)`` and its decodes' cached contexts: the one place they are written. A tuple
    hashes faster than a :class:`StepBatch`, so per-step memos key on it.

    Every term is an integer or a half-integer far below 2^52, so summing in integers first
    gives the same floats as any order of float additions."""
    return step_sums_of(prefill, len(decode_contexts), sum(decode_contexts))


def step_sums_of(prefill: Sequence[tuple[int, int]], nd: int, context_sum: int) -> tuple[float, ...]:
    """:func:`step_sums` of ``nd`` decodes whose cached contexts sum to ``context_sum`` (a caller
    that keeps that sum: the simulator's decode cohort)."""
    kvd = float(context_sum + nd)
    if not prefill:
        return (0.0, float(nd), 0.0, 0.0, kvd, 0.0, 0.0)
    np_ = kvp = ap = 0
    apc = 0.0
    for c, ctx in prefill:
        np_ += c
        kvp += ctx + c
        ap += c * (ctx + c)
        apc += c * (ctx + (c + 1) / 2)
    return (float(np_), float(nd), float(len(prefill)), float(kvp), kvd, float(ap), apc)


def _check_positive(name: str, v: int) -> None:
    if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 1:
        raise SpecError(f"{name}={v!r} must be a positive integer")
