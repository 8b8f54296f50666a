"""Invariants of the cost model (Hypothesis): slower tiers never make a block faster."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from serveplan.offload.cost import cost_terms
from serveplan.offload.policy import Overlap
from serveplan.specs.catalog import get_host, get_model

HOST = get_host("flexgen-t4")
MODELS = {m: get_model(m) for m in ("opt-30b", "llama-2-70b", "mixtral-8x7b", "deepseek-v3")}


def _simplex(draw, n=3):
    w = np.array([draw(st.floats(0, 1)) for _ in range(n)]) + 1e-9
    return w / w.sum()


@st.composite
def cases(draw):
    x = np.concatenate([_simplex(draw), _simplex(draw), _simplex(draw)])
    return dict(
        model=draw(st.sampled_from(sorted(MODELS))), x=x,
        gbs=draw(st.sampled_from([1, 4, 16, 64])), ngb=draw(st.sampled_from([1, 2, 8])),
        s=draw(st.sampled_from([128, 512, 2048])), n=draw(st.sampled_from([1, 8, 64])),
        compress=draw(st.booleans()), cpu_attention=draw(st.booleans()),
        overlap=draw(st.sampled_from(list(Overlap))), kind=draw(st.integers(0, 2)),
        tier=draw(st.integers(0, 1)), share=draw(st.floats(0.0, 1.0)),
    )


@settings(max_examples=150, deadline=None)
@given(cases())
def test_moving_data_to_a_slower_tier_never_shortens_the_block(c):
    cpu_att = c["cpu_attention"] and not c["compress"]
    t = cost_terms(MODELS[c["model"]], HOST.gpu, HOST, input_len=c["s"], output_len=c["n"],
                   gpu_batch_size=c["gbs"], num_gpu_batches=c["ngb"], compress=c["compress"],
                   cpu_attention=cpu_att, overlap=c["overlap"])
    x = c["x"]
    i = 3 * c["kind"] + c["tier"]  # GPU->CPU or CPU->disk for weights, KV or activations
    y = x.copy()
    moved = x[i] * c["share"]
    y[i] -= moved
    y[i + 1] += moved
    assert sum(t.block_latency(y)) >= sum(t.block_latency(x)) * (1 - 1e-12)
    # and every per-layer term is non-negative
    for phase in (t.prefill, t.decode):
        assert all(a.at(y) >= 0 for a in phase.values())


@settings(max_examples=40, deadline=None)
@given(cases())
def test_longer_outputs_take_longer_and_more_memory(c):
    kw = dict(input_len=c["s"], gpu_batch_size=c["gbs"], num_gpu_batches=c["ngb"],
              compress=c["compress"], cpu_attention=c["cpu_attention"] and not c["compress"])
    m = MODELS[c["model"]]
    a = cost_terms(m, HOST.gpu, HOST, output_len=c["n"], **kw)
    b = cost_terms(m, HOST.gpu, HOST, output_len=c["n"] + 16, **kw)
    x = c["x"]
    assert sum(b.block_latency(x)) > sum(a.block_latency(x))
    for tier in a.memory:
        assert b.memory[tier].at(x) >= a.memory[tier].at(x) * (1 - 1e-12)
