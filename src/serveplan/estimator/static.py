"""Static-batch metrics of the FOM notes (LLM inference FOM notes, §3-5): a batch of ``b`` requests
with ``s`` input and ``n`` output tokens run together from prefill to the last token."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from serveplan.estimator.batch import StepBatch
from serveplan.estimator.step import Estimator
from serveplan.ops.base import FEATURE_INDEX


@dataclass(frozen=True, slots=True)
class StaticMetrics:
    """TTFT, inter-token latency, end-to-end latency, throughput and FOM of one static batch.

    ``itl_s`` is the mean gap between consecutive tokens of one request,
    ``(E2E - TTFT) / (n - 1)``; the notes' printed ITL also divides by the batch size
    (B.4 [note]), which is ``itl_amortized_s`` here. ``throughput_tokens_per_s`` counts input
    and output tokens (notes B.4). ``fom_flops_per_s`` is Option 2 of notes B.5:
    ``(C_prefill + sum_i C_decode(i)) / E2E``.
    """

    batch: int
    input_len: int
    output_len: int
    ttft_s: float
    itl_s: float
    itl_amortized_s: float
    e2e_s: float
    throughput_tokens_per_s: float
    output_tokens_per_s: float
    fom_flops_per_s: float

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def fom_flops(batch: int, input_len: int, output_len: int, num_layers: int, d_model: int, heads: int) -> float:
    """``C_prefill + Total_C_decode`` of notes B.5 Option 2 (closed form, printed there)."""
    B, N, T_in, T_out, d, h = batch, num_layers, input_len, output_len, d_model, heads
    c_prefill = B * N * T_in * (4 * d**2 + 8 * d**2 / h + 2 * d * T_in)
    c_decode = B * N * T_out * (4 * d**2 + 8 * d**2 / h + 2 * d * T_in + d * T_out - d)
    return float(c_prefill + c_decode)


def decode_times(est: Estimator, batch: int, first_context: int, steps: int) -> np.ndarray:
    """Times of ``steps`` decode steps of ``batch`` sequences whose contexts grow from
    ``first_context`` by one per step, evaluated in one vectorised call."""
    if steps <= 0:
        return np.zeros(0)
    x0 = est.features(StepBatch.decode(batch, first_context))
    X = np.repeat(x0[:, None], steps, axis=1)
    share = est.rank_shares(StepBatch.decode(batch, 1))[1]   # the busiest DP-attention rank's
    X[FEATURE_INDEX["kvd"]] = (first_context + np.arange(steps)) * batch * share
    return est.step_times(X, "decode")


def static_batch(est: Estimator, batch: int, input_len: int, output_len: int) -> StaticMetrics:
    """Prefill of ``batch`` prompts, then ``output_len - 1`` decode steps at growing context.

    The first output token comes from the prefill step; decode step ``i`` (1-based) attends
    ``input_len + i`` keys.
    """
    ttft = est.time(StepBatch.prefill(batch, input_len))
    dec = decode_times(est, batch, input_len + 1, output_len - 1)
    e2e = ttft + float(dec.sum())
    itl = float(dec.mean()) if len(dec) else 0.0
    m = est.model
    return StaticMetrics(
        batch=batch, input_len=input_len, output_len=output_len,
        ttft_s=ttft, itl_s=itl, itl_amortized_s=itl / batch, e2e_s=e2e,
        throughput_tokens_per_s=batch * (input_len + output_len) / e2e,
        output_tokens_per_s=batch * output_len / e2e,
        fom_flops_per_s=fom_flops(batch, input_len, output_len, m.num_hidden_layers, m.hidden_size,
                                  m.num_attention_heads) / e2e,
    )
