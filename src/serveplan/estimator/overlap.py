"""Two-batch overlap: the step split into two micro-batches whose computation and communication
alternate, so one micro-batch's communication runs under the other's computation.

DeepSeek's inference system: "we employ a dual-batch overlap strategy to hide communication
costs and improve overall throughput by splitting a batch of requests into two microbatches.
During the prefilling phase, these two microbatches executed alternately and the communication
cost of one microbatch is hide behind the computation of the other" (deepseek-ai/open-infra-index,
202502OpenSourceWeek/day_6, "Computation-Communication Overlapping"; deepseek-ai/profile-data
shows the traces). SGLang implements it as ``--enable-two-batch-overlap`` for prefill and decode
(``python/sglang/srt/two_batch_overlap.py``; LMSYS blog "Deploying DeepSeek with PD
Disaggregation and Large-scale Expert Parallelism on 96 H100 GPUs", May 2025).

The rule (per layer kind, ``C`` the computation of one micro-batch's layer and ``M`` its
communication, both timed on the half batch, so weights are read once per micro-batch)::

    layer period = max(2 C, 2 M)                  (two streams, each busy with both micro-batches)
    step         = sum over kinds of layers x period + min(C, M)

The compute stream runs ``C`` for micro-batch A, then ``C`` for B while A communicates, and so on,
so in steady state each layer costs whichever stream is busier. The exposed part ``min(C, M)`` is
the fill and drain: the first micro-batch's first computation (nothing to hide it under) when
communication binds, or the last micro-batch's last communication when computation does. The
step is therefore never shorter than its busiest stream (``layers x 2 max(C, M)``), nor than the
un-split computation (splitting only adds weight reads and smaller GEMMs).

The estimator keeps the un-split step where it is shorter (a batch too small for the hidden
communication to pay for the second weight read), as an engine would run it unsplit.

DeepSeek's decode runs a 5-stage pipeline with the attention split in two to balance the stages;
its period is still bounded by the busier stream, which is what this rule charges.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from serveplan.estimator.roofline import layers_time


def two_batch_layers_time(block_compute: Any, block_comm: Any, dispatch: Sequence[Sequence[float]],
                          counts: Sequence[float]) -> tuple[Any, Any, Any]:
    """Step time of two overlapped micro-batches from one micro-batch's block times.

    ``block_compute`` / ``block_comm`` are per block (numbers or arrays, one per step) for ONE
    micro-batch. Returns ``(step, compute_stream, comm_stream)``: the overlapped step time and the
    busy time of each stream over the step (both micro-batches).
    """
    total: Any = 0.0
    exposed: Any = 0.0
    compute_stream: Any = 0.0
    comm_stream: Any = 0.0
    i = 0
    for disp, count in zip(dispatch, counts, strict=True):
        nb = len(disp)
        bc = block_compute[i:i + nb]
        bm = block_comm[i:i + nb]
        i += nb
        c = layers_time(bc, [0.0 * b for b in bm], [disp], [1.0])   # Algorithm 1 without communication
        m: Any = 0.0
        for b in bm:
            m = m + b
        total = total + count * np.maximum(2 * c, 2 * m)
        exposed = np.maximum(exposed, np.minimum(c, m))
        compute_stream = compute_stream + count * 2 * c
        comm_stream = comm_stream + count * 2 * m
    return total + exposed, compute_stream, comm_stream


def two_batch_group_time(group_compute: np.ndarray, group_comm: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """:func:`two_batch_layers_time`'s step where no module waits for its dispatch (decode under
    CUDA graphs), from one micro-batch's per-layer-group sums (groups x steps): then a layer's
    computation ``C`` is the sum of its modules' and ``M`` of their communication, and the step is
    ``sum counts x max(2 C, 2 M) + max over kinds of min(C, M)`` (the same rule, whole arrays)."""
    return np.asarray(counts @ np.maximum(2 * group_compute, 2 * group_comm)
                      + np.minimum(group_compute, group_comm).max(axis=0))
