"""Cost-model sizes and terms against hand derivations (FlexGen Appendix A.3)."""

from __future__ import annotations

import numpy as np
import pytest

from serveplan.offload.cost import (
    COMPRESSION_RATIO,
    compressed_bytes,
    cost_terms,
    kv_allocation,
    layer_sizes,
    weight_allocation,
)
from serveplan.offload.policy import Overlap, parse_policy
from serveplan.offload.search import evaluate_policy
from serveplan.ops.graph import attention_flops, build_layer_groups
from serveplan.specs.catalog import get_host, get_model, list_models
from serveplan.specs.model import AttentionKind, LayerType
from serveplan.specs.parallel import ParallelConfig
from serveplan.specs.profile import AttentionImpl, Module

HOST = get_host("flexgen-t4")


def test_compression_format_is_four_bits_plus_fp16_min_and_scale_per_64():
    # 64 values: 64 * 4 bits = 32 bytes, plus FP16 min and scale = 4 bytes -> 36 bytes vs 128 in FP16
    assert compressed_bytes(64) == pytest.approx(36.0)
    assert COMPRESSION_RATIO == pytest.approx(36 / 128)


def test_opt175b_sizes_match_flexgen_formulas():
    z = layer_sizes(get_model("opt-175b"))
    h1, h2 = 12288, 49152
    # A.3: one layer of FP16 weights is 8*h1^2 + 4*h1*h2 bytes = 3.624e9 (biases and layer norms
    # add 2*(4*h1 + h2 + h1 + 4*h1) bytes, 0.005%)
    paper = 8 * h1**2 + 4 * h1 * h2  # 3,623,878,656 bytes
    assert z.weight_bytes == pytest.approx(paper, rel=1e-4)
    assert z.kv_bytes_per_token == 4 * h1  # K and V, FP16
    assert z.act_bytes_per_token == 2 * h1
    assert z.attn_flops_per_key == 4 * h1 and z.attn_decode_flops_per_key == 4 * h1
    # Section 3: OPT-175B weights are "325 GB": the 96 layers' weights are 324 GiB (347.9 GB)
    assert z.num_layers == 96
    assert z.num_layers * z.weight_bytes / 2**30 == pytest.approx(324.0, rel=1e-3)


def test_opt175b_prefill_compute_matches_table8():
    # policy of Table 2 for OPT-175B (32x8); Table 8 measures 2220 s of prefill compute
    t = cost_terms(get_model("opt-175b"), HOST.gpu, HOST, input_len=512, output_len=32,
                   gpu_batch_size=32, num_gpu_batches=8, compress=False, cpu_attention=True)
    h1, h2, s, bls = 12288, 49152, 512, 256
    hand = bls * (8 * s * h1**2 + 4 * s * h1 * h2) / 21.24e12 + 4 * bls * s**2 * h1 / 9.97e12
    comp = t.prefill["comp"].const
    assert comp == pytest.approx(hand, rel=1e-3)
    assert comp * 96 == pytest.approx(2220, rel=0.05)


def test_opt175b_decode_terms_by_hand():
    pol = parse_policy("32x8,0,50,0,0,0,100")
    t = cost_terms(get_model("opt-175b"), HOST.gpu, HOST, input_len=512, output_len=32,
                   gpu_batch_size=32, num_gpu_batches=8, compress=False, cpu_attention=True)
    x = np.array(pol.placement())
    h1, s, n, bls = 12288, 512, 32, 256
    w = t.sizes.weight_bytes
    # A.3 dtoc^g = (4*cd*bls*(s+n/2)*h1 + wd*w + 2*hd*h1*bls) / dtoc_bdw with cd=1, wd=0.5, hd=0
    dtoc = (4 * bls * (s + n / 2) * h1 + 0.5 * w) / 2.0e9
    assert t.decode["dtoc"].at(x) == pytest.approx(dtoc, rel=1e-9)
    # ctog^g = ((wc+wd)*w + 2*(hc+hd)*h1*bls) / ctog_bdw
    assert t.decode["ctog"].at(x) == pytest.approx((w + 2 * h1 * bls) / 13.84e9, rel=1e-9)
    # cpu_comp^g = 4*(cc+cd)*bls*(s+n/2)*h1 / cpu_flops (whole cache attended on the CPU)
    cpu = 4 * bls * (s + n / 2) * h1 / 1.23e10
    assert t.parts["decode_attention_cpu"].at(x) == pytest.approx(cpu, rel=1e-9)
    # disk holds half the weights and all the KV: A.3 nvme_peak
    disk = 0.5 * t.sizes.total_weight_bytes + 4 * (s + n) * h1 * bls * 96
    assert t.memory["disk"].at(x) == pytest.approx(disk, rel=1e-9)


def test_serial_load_and_perfect_overlap_differ_only_in_how_terms_combine():
    m = get_model("opt-30b")
    pol = parse_policy("48x3,20,80,0,100,0,100")
    a = evaluate_policy(m, pol)
    b = evaluate_policy(m, pol, overlap=Overlap.PERFECT)
    assert a.decode_layer_terms_s == b.decode_layer_terms_s
    d = a.decode_layer_terms_s
    assert a.decode_s == pytest.approx(48 * 31 * (d["ctog"] + max(d["gtoc"], d["dtoc"], d["ctod"], d["comp"])))
    assert b.decode_s == pytest.approx(48 * 31 * max(d.values()))
    assert a.latency_s >= b.latency_s


def test_llama2_70b_gqa_sizes():
    z = layer_sizes(get_model("llama-2-70b"))
    h, kv, ff = 8192, 8 * 128, 28672
    params = h * h + 2 * h * kv + h * h + 3 * h * ff + 2 * h  # Q, K, V, O, gate/up/down, 2 RMSNorms
    assert params == 855_654_400
    assert z.weight_bytes == pytest.approx(2 * params)
    assert z.kv_bytes_per_token == 2 * 2 * kv == 4096  # K and V of 8 KV heads x 128, FP16
    assert z.attn_decode_flops_per_key == 2 * (h + h)  # QK^T and PV over all 64 query heads
    zc = layer_sizes(get_model("llama-2-70b"), compress=True)
    assert zc.kv_bytes_per_token == pytest.approx(4096 * 36 / 128)
    assert zc.weight_bytes == pytest.approx(params * 0.5625)


def test_mixtral_moe_sizes_count_all_experts_for_storage_and_two_for_flops():
    z = layer_sizes(get_model("mixtral-8x7b"))
    h, kv, ff = 4096, 8 * 128, 14336
    attn = 2 * h * h + 2 * h * kv
    expert = 3 * h * ff
    router = h * 8
    assert z.weight_bytes == pytest.approx(2 * (attn + 8 * expert + router + 2 * h))
    assert z.linear_flops_per_token == pytest.approx(2 * (attn + 2 * expert + router + 2 * h))
    assert z.kv_bytes_per_token == 4096
    # the GPU streams the non-expert part plus one expert at a time
    assert z.stream_unit_fp16_bytes == pytest.approx(2 * (attn + expert + router + 2 * h))
    # 32 tokens hit 1-(6/8)^32 of the experts: essentially all of them
    assert z.decode_weight_read_bytes(32) == pytest.approx(z.weight_fp16_bytes, rel=1e-3)
    # one token reads the non-expert part and 2 of 8 experts
    assert z.decode_weight_read_bytes(1) == pytest.approx(2 * (attn + 2 * expert + router + 2 * h))


def test_deepseek_v3_mla_kv_and_average_layer():
    m = get_model("deepseek-v3")
    z = layer_sizes(m)
    assert z.kv_bytes_per_token == 2 * (512 + 64)  # latent c^KV plus the RoPE key, FP16
    h = 7168
    mla = (h * 1536 + 1536 + 1536 * 128 * 192 + h * 576 + 512 + 512 * 128 * 256 + 128 * 128 * h)
    assert mla == 187_107_328
    dense, expert = 3 * h * 18432, 3 * h * 2048
    moe = 257 * expert + h * 256
    total = 61 * (mla + 2 * h) + 3 * dense + 58 * moe
    assert total == 669_173_039_104
    assert z.weight_bytes == pytest.approx(2 * total / 61)  # 21.94 GB per average layer
    # absorbed MLA decode: QK^T over 512+64 and PV over 512 per head, 2 FLOP per MAC
    assert z.attn_decode_flops_per_key == 2 * 128 * (512 + 64) + 2 * 128 * 512


def test_cpu_attention_moves_no_kv_while_gpu_attention_uploads_it():
    m = get_model("opt-30b")
    kw = dict(input_len=512, output_len=32, gpu_batch_size=48, num_gpu_batches=3, compress=False)
    cpu = cost_terms(m, HOST.gpu, HOST, cpu_attention=True, **kw)
    gpu = cost_terms(m, HOST.gpu, HOST, cpu_attention=False, **kw)
    x = np.array(parse_policy("48x3,20,80,0,100,0,100").placement())
    kv_avg = 4 * 7168 * (512 + 16) * 144
    assert gpu.decode["ctog"].at(x) - cpu.decode["ctog"].at(x) == pytest.approx(kv_avg / 13.84e9, rel=1e-9)
    assert cpu.parts["decode_attention_cpu"].at(x) > 0 == gpu.parts["decode_attention_cpu"].at(x)


def test_compression_shrinks_transfers_and_adds_codec_time():
    m = get_model("opt-175b")
    kw = dict(input_len=512, output_len=32, gpu_batch_size=48, num_gpu_batches=3, cpu_attention=False)
    fp = cost_terms(m, HOST.gpu, HOST, compress=False, **kw)
    q = cost_terms(m, HOST.gpu, HOST, compress=True, **kw)
    x = np.array(parse_policy("48x3,0,100,0,100,0,100").placement())
    assert q.decode["ctog"].at(x) == pytest.approx(fp.decode["ctog"].at(x) * COMPRESSION_RATIO, rel=0.01)
    codec = q.parts["decode_codec"].at(x)
    wf, kvf = q.sizes.weight_fp16_bytes, 4 * 12288 * (512 + 16 + 1) * 144
    assert codec == pytest.approx(wf / 24e9 + kvf / 24e9, rel=1e-9)
    assert fp.parts["decode_codec"].at(x) == 0


def test_weight_allocation_places_whole_tensors_by_size_midpoint():
    # flex_opt.py init_weight_list: per sub-layer list (attention q, k, v, out; MLP fc1, fc2), a
    # tensor goes to disk if its cumulative-size midpoint is below wd, to the CPU if below wd + wc
    z = layer_sizes(get_model("opt-30b"))
    assert z.weight_tensor_groups[0] == (7168.0 ** 2,) * 4 and len(z.weight_tensor_groups[1]) == 2
    g, c, d = weight_allocation(z, 0.0, 0.80)  # Table 15's 48x3, 20, 80: only attention out on the GPU
    assert (g, c, d) == pytest.approx((1 / 12, 11 / 12, 0.0))
    assert weight_allocation(z, 0.0, 0.75) == pytest.approx((5 / 12, 7 / 12, 0.0))  # fc2 midpoint at 75%
    assert weight_allocation(z, 0.50, 0.50) == pytest.approx((0.0, 0.5, 0.5))  # OPT-175B's 0, 50
    assert weight_allocation(z, 0.0, 0.10) == pytest.approx((1.0, 0.0, 0.0))  # below every midpoint
    moe = layer_sizes(get_model("mixtral-8x7b"))
    assert moe.weight_tensor_groups == () and weight_allocation(moe, 0.1, 0.2) == pytest.approx((0.7, 0.2, 0.1))


def test_kv_allocation_rounds_each_share_down_to_whole_sequences():
    # pytorch_backend.py TorchMixedDevice.init_cache_one_gpu_batch
    assert kv_allocation(4, False, 0.85, 0.15, 0.0) == pytest.approx((0.75, 0.25, 0.0))
    assert kv_allocation(12, False, 0.09, 0.91, 0.0) == pytest.approx((1 / 12, 11 / 12, 0.0))
    assert kv_allocation(8, False, 0.30, 0.30, 0.40) == pytest.approx((2 / 8, 2 / 8, 4 / 8))
    assert kv_allocation(1, False, 0.6, 0.4, 0.0) == pytest.approx((0.0, 1.0, 0.0))
    assert kv_allocation(4, True, 0.85, 0.15, 0.0) == pytest.approx((0.85, 0.15, 0.0))  # priced as given


def test_tied_token_matrix_is_held_twice_as_flexgen_loads_it():
    # FlexGen's InputEmbed and OutputEmbed each load decoder.embed_tokens.weight (flex_opt.py), so a
    # tied (V, h) matrix is stored twice. OPT-6.7B: 6,658,473,984 parameters + 50,272 * 4,096 =
    # 6,864,388,096 values held, FP16 -> 13,728,776,192 bytes (hand count).
    opt = layer_sizes(get_model("opt-6.7b"))
    assert get_model("opt-6.7b").num_parameters() == 6_658_473_984
    assert opt.total_weight_bytes == 2 * (6_658_473_984 + 50_272 * 4_096) == 13_728_776_192
    # an untied LM head is already a parameter of its own: nothing is added (Llama-2-70B)
    llama = get_model("llama-2-70b")
    assert not llama.tie_word_embeddings
    assert layer_sizes(llama).total_weight_bytes == 2 * llama.num_parameters()


def test_prompt_logits_bound_the_prefill_working_set():
    # FlexGen's opt_output_embed computes F.linear(hidden, w_token) for every prompt position before
    # keeping the last one: gbs * s * (h1 + V) FP16 values live at once. OPT-6.7B, gbs 4, s 512:
    # 4 * 512 * (4096 + 50272) * 2 = 222,691,328 bytes, larger than A.3's largest term
    # (mlp1^p = 2 * gbs * s * (h1 + h2) = 83,886,080 bytes).
    t = cost_terms(get_model("opt-6.7b"), HOST.gpu, HOST, input_len=512, output_len=32,
                   gpu_batch_size=4, num_gpu_batches=1, compress=False, cpu_attention=False)
    x = np.array([1, 0, 0, 1, 0, 0, 1, 0, 0], dtype=float)
    work_p = [w.at(x) for w in t.memory["gpu_prefill"].work]
    assert max(work_p) == pytest.approx(222_691_328)
    assert 2 * 4 * 512 * (4096 + 16384) == 83_886_080 in [round(w) for w in work_p]
    # decode: one position's logits, 4 * (4096 + 50272) * 2 bytes, a term among the others
    work_g = [round(w.at(x)) for w in t.memory["gpu_decode"].work]
    assert 4 * (4096 + 50272) * 2 in work_g


@pytest.mark.parametrize("name", [m for m in list_models() if LayerType.LINEAR not in get_model(m).layer_kinds])
def test_attention_flops_are_the_operator_lists(name):
    """The cost model's attention FLOPs per key are the operator builder's (ops/graph.py), not a
    second derivation: the builder's eager attention operators carry exactly that matrix-product
    work per score element (prefill) and per cached key (decode), plus BestServe's element-wise
    scaling, masking and softmax (1 + 1 + 3 FLOP per element and head) on GQA layers."""
    m = get_model(name)
    af = attention_flops(m)
    z = layer_sizes(m)
    assert (z.attn_flops_per_key, z.attn_decode_flops_per_key) == (af.prefill, af.decode)
    groups = build_layer_groups(m, ParallelConfig(), dtype=m.dtype, kv_dtype=m.default_kv_dtype(),
                                attention_impl=AttentionImpl.EAGER, include_lm_head=False)
    block = next(b for g in groups for b in g.blocks if b.kind is Module.ATTENTION)
    # a local (sliding-window) layer writes the same work on the windowed features apw and kvdw
    per_element = sum(op.flops.get("ap", 0.0) + op.flops.get("apw", 0.0) for op in block.ops if op.attention)
    per_key = sum(op.flops.get("kvd", 0.0) + op.flops.get("kvdw", 0.0) for op in block.ops if op.attention)
    elementwise = 0.0 if m.attention is AttentionKind.MLA else 5.0 * m.num_attention_heads
    assert per_element == pytest.approx(af.prefill + elementwise, rel=1e-12)
    assert per_key == pytest.approx(af.decode + elementwise, rel=1e-12)


def test_attention_flops_by_hand():
    # Llama-2-7B: 32 heads of 128, QK^T and PV 2*4096 each per (query, key)
    assert attention_flops(get_model("llama-2-7b")).prefill == 4 * 4096
    # DeepSeek-V3: 128 heads; prefill 2*(128+64) + 2*128 per head; decode absorbed 2*(512+64) + 2*512
    ds = attention_flops(get_model("deepseek-v3"))
    assert (ds.prefill, ds.decode) == (128 * 2 * (192 + 128), 128 * 2 * (2 * 512 + 64))
    assert attention_flops(get_model("llama-2-7b"), tp=4).decode == 4 * 4096 / 4
