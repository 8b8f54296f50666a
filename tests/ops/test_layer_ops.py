"""Operator tables (ops/): the linear feature algebra and the layer op lists against hand counts."""

from __future__ import annotations

import pytest

from serveplan import ParallelConfig, get_model, get_profile
from serveplan.ops.base import FEATURES, ONE, Lin, N, feature
from serveplan.ops.graph import build_layer_groups
from serveplan.units import DType


def _groups(model: str, tp: int = 1) -> dict:
    prof = get_profile("default-gpu")
    groups = build_layer_groups(get_model(model), ParallelConfig(tp=tp), dtype=DType.FP16, kv_dtype=DType.FP16,
                                attention_impl=prof.attention_impl, include_lm_head=True)
    return {g.name: g for g in groups}


def _ops(group) -> list:
    return [op for blk in group.blocks for op in blk.ops]


def test_linear_forms_add_scale_and_evaluate():
    f = N * 2.0 + ONE * 5.0
    assert f.evaluate(one=1, n=3) == 11.0            # 2 n + 5 (features not given count as 0)
    assert (f / 2).evaluate(one=1, n=3) == 5.5
    assert (f + f).evaluate(one=1, n=1) == 14.0
    assert f.evaluate(n=3) == 6.0
    assert Lin().evaluate(n=7) == 0.0
    assert set(FEATURES) >= {"one", "n", "np", "nd", "kvd"}
    with pytest.raises(KeyError):
        feature("tokens")


def test_llama2_7b_gemms_are_two_flops_per_weight_per_token():
    # q, k, v, o: 4 h^2 weights (MHA, 32 KV heads); gate, up, down: 3 h ff; 2 FLOP per weight per row
    h, ff = 4096, 11008
    gemms = [op for op in _ops(_groups("llama-2-7b")["dense"]) if op.rows is not None]
    flops_per_token = sum(op.flops.evaluate(n=1, ng=1) for op in gemms)
    assert flops_per_token == 2 * (4 * h * h + 3 * h * ff)   # 404,750,336
    # FP16 weights are read once per step, whatever the batch: 2 bytes per weight
    assert sum(op.bytes.get("one", 0.0) for op in gemms) == 2 * (4 * h * h + 3 * h * ff)


def test_tensor_parallelism_splits_the_gemms_evenly():
    one = sum(op.flops.evaluate(n=1, ng=1) for op in _ops(_groups("llama-2-7b")["dense"]) if op.rows is not None)
    two = sum(op.flops.evaluate(n=1, ng=1) for op in _ops(_groups("llama-2-7b", tp=2)["dense"])
              if op.rows is not None)
    assert two == pytest.approx(one / 2, rel=1e-12)


def test_decode_attention_work_grows_with_cached_keys_not_new_tokens():
    attn = [op for op in _ops(_groups("llama-2-7b")["dense"]) if op.attention]
    assert attn
    decode = sum(op.flops.evaluate(nd=8, kvd=8 * 1000) for op in attn)
    longer = sum(op.flops.evaluate(nd=8, kvd=8 * 2000) for op in attn)
    assert longer == pytest.approx(2 * decode, rel=1e-12)


@pytest.mark.parametrize("model", ["llama-2-7b", "mixtral-8x7b", "deepseek-v3", "opt-6.7b"])
def test_every_op_cites_its_source(model):
    for g in _groups(model).values():
        for op in _ops(g):
            assert op.source, (g.name, op.name)
