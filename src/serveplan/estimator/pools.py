"""Disaggregated prefill and decode pools that span nodes, reported per node as operators publish them.

DeepSeek's inference system runs prefill on deployment units of 4 nodes (EP32, DP-attention 32)
and decode on units of 18 nodes (EP144, DP-attention 144), and reports "an average throughput
of ~73.7k tokens/s input (including cache hits) during prefilling or ~14.8k tokens/s output
during decoding" per H800 node ("DeepSeek-V3/R1 Inference System Overview",
deepseek-ai/open-infra-index, 202502OpenSourceWeek/day_6). This module gives the same two
figures for any model, device and layout from the step estimator:

* :func:`prefill_pool`: one prefill unit runs steps of ``tokens_per_rank`` new prompt tokens on
  every DP-attention rank; a prompt of ``input_len`` tokens of which ``cache_hit_rate`` are
  already cached (prefix cache) computes only the rest, attending to the whole prompt. Input
  tokens/s per node count cached tokens too, as the published figure does. The KV cache of every
  prompt leaves for the decode pool over the scale-out network (one NIC per GPU): the pool's
  rate is the slower of the steps and that transfer (layer-wise transfer runs under the next
  step, as in Mooncake and SGLang's PD disaggregation, so only its excess over a step shows).
* :func:`decode_pool`: the largest batch per rank whose step time meets ``1 /
  tokens_per_s_per_user`` and whose KV cache fits; output tokens/s per node at that batch. The
  KV cache is what the estimator leaves after weights, activations and registered all-to-all
  buffers (DeepEP, ``CommOptions.buffer``); with speculative decoding (a
  :class:`~serveplan.estimator.speculative.SpecEstimator`, e.g. DeepSeek's MTP) a step's time is
  per emitted token, the drafter's weights and cache are reserved, and each sequence also holds
  its ``K`` lookahead slots.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from serveplan.errors import InfeasibleError, SpecError
from serveplan.estimator.batch import StepBatch
from serveplan.estimator.step import Estimator
from serveplan.specs.comm import A2ABuffer, CommOptions, Overlap


@dataclass(frozen=True, slots=True, kw_only=True)
class PrefillPoolEstimate:
    """One prefill unit at steady state (per-node rates)."""

    layout: str
    nodes: float
    prompts_per_rank: int
    new_tokens_per_prompt: int
    step_s: float
    kv_transfer_s: float                # per step, each GPU's share over its NIC
    input_tokens_per_s_per_node: float  # cached tokens included
    computed_tokens_per_s_per_node: float
    bound: str                          # "compute" (steps) or "kv-transfer"

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True, slots=True, kw_only=True)
class DecodePoolEstimate:
    """One decode unit at the largest batch meeting the per-user rate."""

    layout: str
    nodes: float
    batch_per_rank: int
    step_s: float
    tokens_per_s_per_user: float
    output_tokens_per_s_per_node: float
    bound: str  # "tpot" (the next batch misses the rate), "kv-memory", "a2a-buffer" or "max-batch"

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _nodes(est: Estimator) -> float:
    return est.parallel.num_devices / est.hardware.devices_per_node


def prefill_pool(est: Estimator, *, input_len: int, tokens_per_rank: int, cache_hit_rate: float = 0.0
                 ) -> PrefillPoolEstimate:
    """Per-node prefill rate of one unit (see the module docstring).

    Raises
    ------
    SpecError
        ``input_len`` or ``tokens_per_rank`` below 1, ``cache_hit_rate`` outside [0, 1).
    """
    if input_len < 1 or tokens_per_rank < 1:
        raise SpecError(f"input_len={input_len} and tokens_per_rank={tokens_per_rank} must be >= 1")
    if not 0 <= cache_hit_rate < 1:
        raise SpecError(f"cache_hit_rate={cache_hit_rate} must be in [0, 1)")
    new = max(1, round(input_len * (1 - cache_hit_rate)))
    cached = input_len - new
    per_rank = max(1, tokens_per_rank // new)
    dp = est.parallel.dp
    step = est.time(StepBatch.prefill(per_rank * dp, new, context_len=cached))
    # every prompt's whole KV cache (all layers, cached prefix included) goes to a decode rank
    kv_bytes = per_rank * input_len * est.model.kv_bytes_per_token(est.kv_dtype) / est.parallel.tp
    link = est.hardware.inter_node_link or est.hardware.intra_node_link
    transfer = kv_bytes / link.bandwidth
    period = max(step, transfer)
    nodes = _nodes(est)
    prompts = per_rank * dp / period
    return PrefillPoolEstimate(
        layout=est.parallel.label(), nodes=nodes, prompts_per_rank=per_rank, new_tokens_per_prompt=new,
        step_s=step, kv_transfer_s=transfer, input_tokens_per_s_per_node=prompts * input_len / nodes,
        computed_tokens_per_s_per_node=prompts * new / nodes, bound="compute" if step >= transfer else "kv-transfer")


def decode_pool(est: Estimator, *, context_len: int, tokens_per_s_per_user: float, max_batch_per_rank: int = 1024
                ) -> DecodePoolEstimate:
    """Per-node decode rate of one unit at the largest batch per rank meeting the per-user rate.

    ``context_len`` is the mean KV length a decode step attends to (DeepSeek: 4,989 tokens).
    Besides the rate and the KV cache, a DeepEP low-latency buffer bounds the batch: its kernels
    take at most ``buffer_tokens_per_rank`` tokens per rank per dispatch (DeepEP asserts it;
    ``docs/legacy.md``: the "actual batch size in the decoding engine"), and each of the two
    micro-batches of two-batch overlap dispatches its own half, each sequence ``K + 1`` tokens
    under speculative decoding (:func:`a2a_buffer_batch_limit`).

    Raises
    ------
    InfeasibleError
        Even one sequence per rank misses the rate, or its KV cache does not fit.
    """
    if context_len < 1 or not tokens_per_s_per_user > 0:
        raise SpecError(f"context_len={context_len} must be >= 1 and tokens_per_s_per_user="
                        f"{tokens_per_s_per_user} > 0")
    dp = est.parallel.dp
    target = 1.0 / tokens_per_s_per_user
    lookahead = int(getattr(est, "k", 0))   # speculative draft slots per sequence (SpecEstimator)
    fit = est.memory.kv_capacity_tokens // dp // (context_len + lookahead)
    buf = a2a_buffer_batch_limit(est.comm, lookahead) if est.model.is_moe and est.parallel.ep > 1 else None
    cap = min(max_batch_per_rank, fit, buf if buf is not None else max_batch_per_rank)
    if cap < 1:
        raise InfeasibleError(f"{est.parallel.label()}: one sequence of {context_len} tokens does not fit "
                              f"a rank's KV cache")

    def tpot(b: int) -> float:
        return est.time(StepBatch.decode(b * dp, context_len))

    if tpot(1) > target:
        raise InfeasibleError(f"{est.parallel.label()}: one sequence per rank steps in {tpot(1) * 1e3:.1f} ms, "
                              f"above the {target * 1e3:.1f} ms of {tokens_per_s_per_user:g} tokens/s per user")
    lo, hi = 1, cap
    if tpot(cap) <= target:
        lo = cap
    else:
        while hi - lo > 1:   # step time grows with the batch: bisect the last batch that meets the rate
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if tpot(mid) <= target else (lo, mid)
    b = lo
    step = tpot(b)
    if b < cap:
        bound = "tpot"
    elif cap == fit:
        bound = "kv-memory"
    else:
        bound = "a2a-buffer" if buf is not None and cap == buf else "max-batch"
    return DecodePoolEstimate(layout=est.parallel.label(), nodes=_nodes(est), batch_per_rank=b, step_s=step,
                              tokens_per_s_per_user=1.0 / step,
                              output_tokens_per_s_per_node=b * dp / step / _nodes(est), bound=bound)


def a2a_buffer_batch_limit(comm: CommOptions, draft_tokens: int = 0) -> int | None:
    """Sequences per rank a decode step may hold under a low-latency all-to-all buffer sized for
    ``comm.buffer_tokens_per_rank`` tokens per dispatch: that many tokens per micro-batch (two
    under two-batch overlap), ``draft_tokens + 1`` tokens per sequence. ``None`` without such a
    buffer (``none``, or ``normal`` kernels, which chunk any batch)."""
    if comm.buffer not in (A2ABuffer.LOW_LATENCY, A2ABuffer.AUTO):
        return None
    micro = 2 if comm.overlap is Overlap.TWO_BATCH else 1
    return comm.buffer_tokens_per_rank * micro // (draft_tokens + 1)


def pools_ratio(prefill: PrefillPoolEstimate, decode: DecodePoolEstimate, *, input_len: int,
                output_len: int) -> float:
    """Decode nodes per prefill node that keep both pools busy for requests of ``input_len``
    prompt and ``output_len`` output tokens (requests/s per node of each pool)."""
    rp = prefill.input_tokens_per_s_per_node / input_len
    rd = decode.output_tokens_per_s_per_node / output_len
    return rp / rd if rd > 0 else math.inf
