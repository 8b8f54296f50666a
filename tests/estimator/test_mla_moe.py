"""MLA and MoE against the modeling notes (Part A), DeepSeek-V3 and Mixtral-8x7B hand checks.

Symbols are those of the notes, A.5 (DeepSeek-V3 column): ``d = 7168``, ``H = 128``,
``d_q^c = 1536``, ``d_kv^c = 512``, ``d_C^h = 128``, ``d_R^h = 64``, ``d_qk^h = 192``,
``d_v^h = 128``. FLOPs are per GPU and per layer, ``2 x`` multiply-accumulates (notes' convention).

Map from the notes' step tables to our operator names:

========================  =========================================================
notes A.5 prefill step    ops (group ``moe``, module ``attention``)
========================  =========================================================
1 Q Down                  ``mla.q_down``
2 Q Up                    ``mla.prefill.q_up`` (W^UQ and W^QR together, width d_qk^h)
3 KV Down                 ``mla.kv_down``
4 K Up                    ``mla.prefill.k_up`` + ``mla.k_rope`` (W^KR, not TP-split)
5 V Up                    ``mla.prefill.v_up``
6 Attention               ``mla.prefill.attention`` (eager: the full S^2 rectangle)
7 Output                  ``o_proj``
========================  =========================================================

========================  =========================================================
notes A.5 decode step     ops
========================  =========================================================
1 Q Down                  ``mla.q_down``
2 Q Up (+ absorb W^UK)    ``mla.decode.q_up`` + ``mla.decode.absorb_uk``
3 KV Down                 ``mla.kv_down`` + ``mla.k_rope`` (c^KV and k^R)
4 Attention (MQA)         ``mla.decode.attention``
5 V Up                    ``mla.decode.v_up``
6 Output                  ``o_proj``
========================  =========================================================

Decode step 2 uses the component form the notes call consistent with the shapes,
``(2*B*d_q^c*H*(d_C^h + d_R^h) + 2*B*H*d_C^h*d_kv^c)/TP`` (notes A.5 decode step 2 [note];
the printed "ignoring RoPE" form with ``d_qk^h + d_R^h = 256`` per head is a typo, A.10 item 6).
The prefill attention row uses Step 6's ``(H/TP)*2*B*S^2*(d_qk^h + d_v^h)``, the summary table's
row lacks the factor ``H`` (A.10 item 5).
"""

from __future__ import annotations

import pytest

from serveplan import DType, Estimator, ParallelConfig, StepBatch, get_hardware, get_model, get_profile
from serveplan.specs.profile import AttentionImpl

# DeepSeek-V3 (notes A.5 table; config.json of deepseek-ai/DeepSeek-V3)
d, H, dqc, dkvc, dC, dR, dqk, dv = 7168, 128, 1536, 512, 128, 64, 192, 128
TP = 8


@pytest.fixture(scope="module")
def ds_tp8() -> Estimator:
    # eager attention: the notes count the whole S x S score rectangle in prefill (step 6)
    prof = get_profile("default-gpu").with_(attention_impl=AttentionImpl.EAGER)
    return Estimator(get_model("deepseek-v3"), get_hardware("h100-sxm"), prof, ParallelConfig(tp=TP))


def _flops(est: Estimator, batch: StepBatch, *names: str) -> float:
    ops = {o.name: o for o in est.estimate(batch).ops if o.group == "moe"}
    return sum(ops[n].flops for n in names)


def test_deepseek_v3_dimensions_match_the_notes():
    m = get_model("deepseek-v3")
    assert (m.hidden_size, m.num_attention_heads, m.q_lora_rank, m.kv_lora_rank) == (d, H, dqc, dkvc)
    assert (m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim) == (dC, dR, dv)
    assert m.qk_nope_head_dim + m.qk_rope_head_dim == dqk


# ---------------------------------------------------------------------------- prefill, TP 8
B, S = 2, 1024  # two prompts of 1024 tokens, no cached context


@pytest.mark.parametrize(
    "step, names, formula",
    [
        # 1 Q Down: 2*B*S*d*d_q^c = 2*2*1024*7168*1536 = 45,097,156,608
        ("q_down", ("mla.q_down",), 2 * B * S * d * dqc),
        # 2 Q Up: 2*B*S*d_q^c*H*d_qk^h/TP = 2*2*1024*1536*128*192/8 = 19,327,352,832
        ("q_up", ("mla.prefill.q_up",), 2 * B * S * dqc * H * dqk / TP),
        # 3 KV Down: 2*B*S*d*d_kv^c = 2*2*1024*7168*512 = 15,032,385,536
        ("kv_down", ("mla.kv_down",), 2 * B * S * d * dkvc),
        # 4 K Up: 2*B*S*d_kv^c*H*d_C^h/TP + 2*B*S*d*d_R^h = 4,294,967,296 + 1,879,048,192
        ("k_up", ("mla.prefill.k_up", "mla.k_rope"), 2 * B * S * dkvc * H * dC / TP + 2 * B * S * d * dR),
        # 5 V Up: 2*B*S*d_kv^c*H*d_v^h/TP = 4,294,967,296
        ("v_up", ("mla.prefill.v_up",), 2 * B * S * dkvc * H * dv / TP),
        # 6 Attention: (H/TP)*2*B*S^2*(d_qk^h + d_v^h) = 16*2*2*1024^2*320 = 21,474,836,480
        ("attention", ("mla.prefill.attention",), (H / TP) * 2 * B * S**2 * (dqk + dv)),
        # 7 Output: 2*B*S*H*d_v^h*d/TP = 2*2*1024*128*128*7168/8 = 60,129,542,144
        ("output", ("o_proj",), 2 * B * S * H * dv * d / TP),
    ],
)
def test_mla_prefill_step_flops_per_gpu_match_notes(ds_tp8, step, names, formula):
    assert _flops(ds_tp8, StepBatch.prefill(B, S), *names) == pytest.approx(formula, rel=1e-12)


def test_mla_prefill_golden_numbers(ds_tp8):
    # the formulas above evaluated by hand, so a shared mistake in both would still show
    batch = StepBatch.prefill(B, S)
    assert _flops(ds_tp8, batch, "mla.q_down") == 45_097_156_608
    assert _flops(ds_tp8, batch, "mla.prefill.q_up") == 19_327_352_832
    assert _flops(ds_tp8, batch, "mla.prefill.k_up", "mla.k_rope") == 4_294_967_296 + 1_879_048_192
    assert _flops(ds_tp8, batch, "mla.prefill.attention") == 21_474_836_480
    assert _flops(ds_tp8, batch, "o_proj") == 60_129_542_144


def test_mla_prefill_runs_no_decode_path(ds_tp8):
    batch = StepBatch.prefill(B, S)
    for name in ("mla.decode.q_up", "mla.decode.absorb_uk", "mla.decode.attention", "mla.decode.v_up"):
        assert _flops(ds_tp8, batch, name) == 0.0


def test_mla_fused_prefill_counts_the_causal_half():
    # fused (flash) attention skips the masked upper triangle: S*(S+1)/2 score elements per head
    prof = get_profile("default-gpu")  # attention_impl: fused
    est = Estimator(get_model("deepseek-v3"), get_hardware("h100-sxm"), prof, ParallelConfig(tp=TP))
    causal = B * S * (S + 1) / 2
    assert _flops(est, StepBatch.prefill(B, S), "mla.prefill.attention") == pytest.approx(
        (H / TP) * 2 * causal * (dqk + dv), rel=1e-12)


# ---------------------------------------------------------------------------- decode, TP 8
Bd, Sd = 16, 4096  # 16 sequences, history 4096 including the new token (notes' S)


@pytest.mark.parametrize(
    "step, names, formula",
    [
        # 1 Q Down: 2*B*d*d_q^c = 2*16*7168*1536 = 352,321,536
        ("q_down", ("mla.q_down",), 2 * Bd * d * dqc),
        # 2 Q Up + absorb (component form): (2*B*d_q^c*H*(d_C^h + d_R^h) + 2*B*H*d_C^h*d_kv^c)/TP
        #   = (2*16*1536*128*192 + 2*16*128*128*512)/8 = 150,994,944 + 33,554,432
        ("q_up", ("mla.decode.q_up", "mla.decode.absorb_uk"),
         (2 * Bd * dqc * H * (dC + dR) + 2 * Bd * H * dC * dkvc) / TP),
        # 3 KV Down: 2*B*d*(d_kv^c + d_R^h) = 2*16*7168*576 = 132,120,576 (not TP-split)
        ("kv_down", ("mla.kv_down", "mla.k_rope"), 2 * Bd * d * (dkvc + dR)),
        # 4 Attention: (H/TP)*2*B*S*(2*d_kv^c + d_R^h) = 16*2*16*4096*1088 = 2,281,701,376
        ("attention", ("mla.decode.attention",), (H / TP) * 2 * Bd * Sd * (2 * dkvc + dR)),
        # 5 V Up: 2*B*d_kv^c*H*d_v^h/TP = 2*16*512*128*128/8 = 33,554,432
        ("v_up", ("mla.decode.v_up",), 2 * Bd * dkvc * H * dv / TP),
        # 6 Output: 2*B*H*d_v^h*d/TP = 2*16*128*128*7168/8 = 469,762,048
        ("output", ("o_proj",), 2 * Bd * H * dv * d / TP),
    ],
)
def test_mla_decode_step_flops_per_gpu_match_notes(ds_tp8, step, names, formula):
    assert _flops(ds_tp8, StepBatch.decode(Bd, Sd), *names) == pytest.approx(formula, rel=1e-12)


def test_mla_decode_golden_numbers(ds_tp8):
    batch = StepBatch.decode(Bd, Sd)
    assert _flops(ds_tp8, batch, "mla.decode.q_up", "mla.decode.absorb_uk") == 150_994_944 + 33_554_432
    assert _flops(ds_tp8, batch, "mla.kv_down", "mla.k_rope") == 132_120_576
    assert _flops(ds_tp8, batch, "mla.decode.attention") == 2_281_701_376
    assert _flops(ds_tp8, batch, "o_proj") == 469_762_048


def test_mla_decode_runs_no_prefill_path(ds_tp8):
    batch = StepBatch.decode(Bd, Sd)
    for name in ("mla.prefill.q_up", "mla.prefill.k_up", "mla.prefill.v_up", "mla.prefill.attention"):
        assert _flops(ds_tp8, batch, name) == 0.0


def test_mla_decode_attention_is_the_same_under_both_impls():
    # MQA over the latent cache has no S^2 term, so eager and fused count the same work
    hw, m = get_hardware("h100-sxm"), get_model("deepseek-v3")
    prof = get_profile("default-gpu")
    eager = Estimator(m, hw, prof.with_(attention_impl=AttentionImpl.EAGER), ParallelConfig(tp=TP))
    fused = Estimator(m, hw, prof, ParallelConfig(tp=TP))
    batch = StepBatch.decode(Bd, Sd)
    assert _flops(eager, batch, "mla.decode.attention") == _flops(fused, batch, "mla.decode.attention")


# ---------------------------------------------------------------------------- latent KV cache
def test_latent_cache_is_576_values_per_token_per_layer():
    # c^KV (d_kv^c = 512) plus the decoupled RoPE key k^R (d_R^h = 64), notes A.5 decode step 3
    # (k_t = [c^KV_t; k^R_t], width 576). Prefill step 3 quotes B*S*512 per GPU: it omits k^R,
    # which decode needs (A.10 item 7), so we count it: 576, not 512.
    assert get_model("deepseek-v3").kv_elements_per_token_per_layer() == dkvc + dR == 576


def test_latent_cache_is_replicated_on_every_tp_rank(ds_tp8):
    # no heads in c^KV, so each TP rank stores the whole latent (notes A.5 prefill step 3):
    # per GPU 576 values x 61 layers x 2 B = 70,272 B per token, the same as on one GPU
    assert ds_tp8.memory.kv_bytes_per_token == 576 * 61 * 2 == 70_272
    est1 = Estimator(get_model("deepseek-v3"), get_hardware("h100-sxm"), get_profile("default-gpu"),
                     ParallelConfig(tp=1))
    assert est1.memory.kv_bytes_per_token == ds_tp8.memory.kv_bytes_per_token


def test_latent_cache_write_traffic(ds_tp8):
    # each new token appends 576 values (2 B each) per layer, on every TP rank
    ops = {o.name: o for o in ds_tp8.estimate(StepBatch.prefill(B, S)).ops if o.group == "moe"}
    assert ops["mla.kv_write"].bytes == B * S * 576 * 2


def test_mla_cache_versus_mha_per_gpu():
    # notes A.5 prefill step 3: MHA 2*B*S*d/TP = 2*7168/8 = 1792 values per token per layer and
    # GPU at TP 8, MLA 576 (with k^R): the latent cache is 3.1x smaller even though it is
    # duplicated; at TP 32 the MHA share (448) would undercut it ("larger TP, lower MLA advantage")
    assert 2 * d / 8 / 576 == pytest.approx(3.11, abs=0.01)
    assert 2 * d / 32 < 576


# ---------------------------------------------------------------------------- parameters
def test_deepseek_v3_total_and_active_parameters():
    m = get_model("deepseek-v3")
    # attention (notes A.5 shapes): W^DQ 7168*1536 + q-norm 1536 = 11,011,584;
    #   W^UQ, W^QR 1536*128*192 = 37,748,736; W^DKV, W^KR 7168*576 + kv-norm 512 = 4,129,280;
    #   W^UK, W^UV 512*128*256 = 16,777,216; W_O 16384*7168 = 117,440,512  -> 187,107,328
    assert m.attention_params() == 187_107_328
    # one expert: 3*7168*2048 = 44,040,192; MoE layer: (256 + 1)*44,040,192 + router 7168*256
    assert m.expert_params() == 44_040_192
    assert m.moe_mlp_params() == 257 * 44_040_192 + 7168 * 256 == 11_320_164_352
    # 61 layers x (187,107,328 + norms 14,336) + 3 dense MLPs x 3*7168*18432 (396,361,728)
    # + 58 MoE layers x 11,320,164,352 + embedding and head 2*129280*7168 + final norm 7168
    total = 61 * 187_121_664 + 3 * 396_361_728 + 58 * 11_320_164_352 + 1_853_365_248
    assert m.num_parameters() == total == 671_026_404_352          # "671B" (DeepSeek-V3 report)
    # active: MoE layers keep 8 routed + 1 shared expert and the router
    active = total - 58 * (11_320_164_352 - (9 * 44_040_192 + 7168 * 256))
    assert m.num_active_parameters() == active == 37_552_282_624    # "37B activated"


def test_mixtral_total_and_active_parameters():
    m = get_model("mixtral-8x7b")
    # attention: q, o 4096*4096 each, k, v 4096*1024 each = 41,943,040; norms 2*4096
    # expert 3*4096*14336 = 176,160,768; MoE layer 8 experts + router 4096*8
    per_layer = 41_943_040 + 8_192 + 8 * 176_160_768 + 32_768        # 1,451,270,144
    emb = 2 * 32_000 * 4_096 + 4_096                                  # untied head + final norm
    assert m.num_parameters() == 32 * per_layer + emb == 46_702_792_704   # "46.7B"
    active_layer = 41_943_040 + 8_192 + 2 * 176_160_768 + 32_768      # top-2: 394,305,536
    assert m.num_active_parameters() == 32 * active_layer + emb == 12_879_925_248  # "12.9B"


# ---------------------------------------------------------------------------- weights per device
H100 = "h100-sxm"


def _est(model: str, par: ParallelConfig, dtype: DType | None = None) -> Estimator:
    return Estimator(get_model(model), get_hardware(H100), get_profile("default-gpu"), par, dtype=dtype)


def test_mixtral_weights_per_device_dp_attention_ep8():
    # tp=1, dp=8, ep=8: attention and norms whole on every device, one expert per device,
    # router replicated: 41,943,040 + 8,192 + 176,160,768 + 32,768 = 218,144,768 per layer;
    # x32 = 6,980,632,576, + embeddings 262,148,096 (not split at tp=1) = 7,242,780,672
    # -> x 2 B (bf16) = 14,485,561,344 B
    est = _est("mixtral-8x7b", ParallelConfig(tp=1, dp=8, ep=8))
    assert est.memory.weights_bytes == 2 * (32 * 218_144_768 + 262_148_096) == 14_485_561_344


def test_mixtral_weights_per_device_tp8_ep8():
    # tp=8, ep=8: q and o split (2*4096*4096/8 = 4,194,304), 8 KV heads -> one per device
    # (2*4096*128 = 1,048,576); one whole expert per device (expert split tp*dp/ep = 1)
    # per layer 5,242,880 + 8,192 + 176,160,768 + 32,768 = 181,444,608; x32 = 5,806,227,456
    # embeddings /8 = 32,768,512 -> 5,838,995,968 params x 2 B = 11,677,991,936 B
    est = _est("mixtral-8x7b", ParallelConfig(tp=8, ep=8))
    assert est.memory.weights_bytes == 2 * (32 * 181_444_608 + 32_768_512) == 11_677_991_936


def test_deepseek_weights_per_device_dp_attention_ep8():
    # tp=1, dp=8, ep=8: attention (187,107,328) + norms (14,336) whole on each device; the 3
    # dense MLPs (396,361,728 each) replicated; MoE: 256/8 = 32 routed experts x 44,040,192
    # + shared expert 44,040,192 + router 1,835,008 = 1,455,161,344 per layer;
    # 61*187,121,664 + 3*396,361,728 + 58*1,455,161,344 + 1,853,365,248 = 98,856,229,888
    params = 61 * 187_121_664 + 3 * 396_361_728 + 58 * 1_455_161_344 + 1_853_365_248
    assert params == 98_856_229_888
    # in BF16, 2 bytes per parameter (the catalog's default is the checkpoint's block FP8)
    assert _est("deepseek-v3", ParallelConfig(tp=1, dp=8, ep=8), DType.BF16).memory.weights_bytes == 2 * params
    # 98.9e9 params do not fit an 80 GB H100 even in FP8: DeepSeek-V3 needs 16 of them
    assert _est("deepseek-v3", ParallelConfig(tp=1, dp=8, ep=8), DType.FP8).memory.weights_bytes > 80e9


def test_deepseek_weights_per_device_tp8_ep8():
    # tp=8, ep=8: latent projections replicated (W^DQ + q-norm 11,011,584, W^DKV/W^KR + kv-norm
    # 4,129,280 = 15,140,864), the rest of attention split: (187,107,328 - 15,140,864)/8
    # = 21,495,808 -> 36,636,672 + norms 14,336; dense MLP /8 = 49,545,216;
    # MoE: 32 experts x 44,040,192 + shared/8 5,505,024 + router 1,835,008 = 1,416,626,176;
    # embeddings /8 = 231,670,656
    params = 61 * 36_651_008 + 3 * 49_545_216 + 58 * 1_416_626_176 + 231_670_656
    assert params == 84_780_336_000
    assert _est("deepseek-v3", ParallelConfig(tp=8, ep=8), DType.BF16).memory.weights_bytes == 2 * params


def test_deepseek_on_two_h100_nodes_fits_in_fp8_with_ep16():
    # 16 devices, dp=16 attention, ep=16: 16 routed experts per device;
    # 61*187,121,664 + 3*396,361,728 + 58*(16*44,040,192 + 44,040,192 + 1,835,008)
    # + 1,853,365,248 = 57,986,931,712 params -> 58.0 GB in FP8, below 0.9 x 80 GB
    params = 61 * 187_121_664 + 3 * 396_361_728 + 58 * (17 * 44_040_192 + 1_835_008) + 1_853_365_248
    est = _est("deepseek-v3", ParallelConfig(tp=1, dp=16, ep=16), DType.FP8)
    assert est.memory.weights_bytes == params == 57_986_931_712
    est.check_fits()


# ---------------------------------------------------------------------------- EP/DP estimates run
@pytest.mark.parametrize("model", ["mixtral-8x7b", "deepseek-v3"])
@pytest.mark.parametrize("par", [ParallelConfig(tp=1, dp=8, ep=8), ParallelConfig(tp=8, ep=8)])
def test_moe_estimates_run_with_ep_and_dp_attention(model, par):
    est = _est(model, par)
    for batch in (StepBatch.prefill(8, 1024), StepBatch.decode(64, 2048)):
        e = est.estimate(batch)
        assert e.total_s > 0
        comms = [m for m in e.modules if m.name == "moe"]
        assert comms and all(m.comm_s > 0 for m in comms)  # the two all-to-alls


def test_dp_attention_splits_attention_work_over_ranks():
    # dp=8: each rank runs attention for 1/8 of the sequences, with all heads (tp=1)
    m = "mixtral-8x7b"
    dp8 = _est(m, ParallelConfig(tp=1, dp=8, ep=8))
    one = _est(m, ParallelConfig(tp=1))
    batch = StepBatch.prefill(8, 1024)

    def attn(est):
        return sum(o.flops for o in est.estimate(batch).ops if o.module == "attention")

    assert attn(dp8) == pytest.approx(attn(one) / 8, rel=1e-12)


def test_ep_spreads_routed_tokens_over_expert_devices():
    # Mixtral prefill of 8 x 1024 tokens, top-2 of 8 experts, ep=8 at uniform routing:
    # each device pushes 8192*2/8 = 2048 tokens through one expert: gate+up 2*2*4096*14336 FLOP each
    est = _est("mixtral-8x7b", ParallelConfig(tp=1, dp=8, ep=8))
    ops = {o.name: o for o in est.estimate(StepBatch.prefill(8, 1024)).ops if o.group == "moe"}
    assert ops["experts.gate_up"].flops == 2048 * 2 * 2 * 4096 * 14336
    assert ops["experts.down"].flops == 2048 * 2 * 14336 * 4096


def test_expert_imbalance_scales_the_busiest_device():
    prof = get_profile("default-gpu")
    m, hw, par = get_model("mixtral-8x7b"), get_hardware(H100), ParallelConfig(tp=1, dp=8, ep=8)
    even = Estimator(m, hw, prof, par)
    skew = Estimator(m, hw, prof.with_(expert_imbalance=1.5), par)
    batch = StepBatch.prefill(8, 1024)

    def gate(est):
        return next(o.flops for o in est.estimate(batch).ops if o.name == "experts.gate_up")

    assert gate(skew) == pytest.approx(1.5 * gate(even))
