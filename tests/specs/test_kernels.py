"""Kernel curves (specs/kernels.py) and the bundled measured profiles."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from serveplan import get_hardware
from serveplan.errors import SpecError
from serveplan.specs.catalog import _data_dir, get_profile, list_profiles
from serveplan.specs.kernels import (
    AttentionCurve,
    CollectiveCurve,
    GemmCurve,
    KernelCurves,
    attention_peak_flops,
    bus_factor,
    group_range,
    kernel_curves_from_dict,
)
from serveplan.specs.profile import profile_from_dict

MEASURED = ["measured-h100-sxm", "measured-h200", "measured-b200", "measured-a100-80g", "measured-l40s",
            "measured-gb200", "measured-b300", "measured-gb300", "measured-rtx-pro-6000"]


def test_fp8_kv_attention_is_a_fraction_of_the_fp8_peak():
    # datasheet dense peaks (catalog): H100 SXM BF16 989.4, FP8 1978.9 TFLOPS; A100 has no FP8
    h100, a100 = get_hardware("h100-sxm"), get_hardware("a100-80g")
    assert attention_peak_flops(h100, "fp8") == pytest.approx(1978.9e12)
    assert attention_peak_flops(h100, "bf16") == pytest.approx(989.4e12)
    assert attention_peak_flops(a100, "fp8") == pytest.approx(312e12)


def test_bus_factors_follow_nccl_tests():
    # nccl-tests PERFORMANCE.md: all-reduce 2(n-1)/n, all-gather and reduce-scatter (n-1)/n
    assert bus_factor("all_reduce", 8) == 1.75
    assert bus_factor("all_gather", 4) == 0.75
    assert bus_factor("reduce_scatter", 2) == 0.5
    assert bus_factor("send_recv", 2) == 1.0


def test_gemm_curve_at_large_shapes_approaches_its_ceiling():
    c = GemmCurve(overhead_s=0.0, compute_max=0.8, rows_half=10.0, weight_half=1e5, memory=0.9)
    m, n, k = 1e6, 1e5, 1e4
    t = c.time(m, n, k, 2 * m * n * k, 0.0, 1e15, 1e12)
    assert t == pytest.approx(2 * m * n * k / (1e15 * 0.8), rel=1e-3)


def test_gemm_curve_small_rows_are_memory_bound_and_tile_pads_rows():
    c = GemmCurve(overhead_s=2e-6, compute_max=0.8, rows_half=10.0, weight_half=1e5, memory=0.5, tile_rows=64)
    n = k = 4096
    w = n * k
    t1 = c.time(1, n, k, 2 * w, 2 * w, 1e15, 1e12)
    assert t1 == pytest.approx(2e-6 + 2 * w / (1e12 * 0.5))
    # 65 rows cost the compute of 128 (two tiles of 64), hand-computed
    m = 65.0
    e_c = 0.8 * m / (m + 10.0) * w / (w + 1e5)
    assert c.time(m, n, k, 2 * m * w, 0.0, 1e15, 1e12) == pytest.approx(2e-6 + 2 * m * w * (128 / 65) / (1e15 * e_c))


def test_gemm_row_tiles_grow_in_powers_of_two_up_to_the_tile():
    # tile 256: 33 rows run in a 64-row tile, 129 in one 256-row tile, 257 in two (hand-computed pads)
    c = GemmCurve(overhead_s=0.0, compute_max=0.8, rows_half=0.0, weight_half=0.0, memory=1.0, tile_rows=256)
    n = k = 8192
    for m, rows_run in ((33.0, 64), (129.0, 256), (256.0, 256), (257.0, 512), (1000.0, 1024)):
        _, comp, _ = c.terms(m, n, k, 2 * m * n * k, 0.0, 1e15, 1e12)
        assert comp == pytest.approx(2 * rows_run * n * k / (1e15 * 0.8))


def test_gemm_quantization_pass_adds_its_bytes_and_few_output_tiles_slow_the_kernel():
    base = dict(overhead_s=1e-6, compute_max=0.8, rows_half=0.0, weight_half=0.0, memory=1.0)
    m, n, k = 4096.0, 1024.0, 16384.0
    plain = GemmCurve(**base)
    quant = GemmCurve(**base, quant_bytes=3.0, quant_memory=0.5)
    # bf16 read + fp8 write of the m x k input at half of 1 TB/s, added to the kernel
    assert quant.time(m, n, k, 2 * m * n * k, 0.0, 1e15, 1e12) == pytest.approx(
        plain.time(m, n, k, 2 * m * n * k, 0.0, 1e15, 1e12) + 3.0 * m * k / (1e12 * 0.5))
    # same FLOPs, same n*k: 8 x 8 output tiles of 128 x 128 run at 64 / (64 + 32) of the ceiling
    par = GemmCurve(**base, tile_rows=128, tiles_half=32.0)
    _, comp, _ = par.terms(1024.0, n, k, 2 * 1024.0 * n * k, 0.0, 1e15, 1e12)
    assert comp == pytest.approx(2 * 1024.0 * n * k / (1e15 * 0.8 * 64 / 96))
    _, wide, _ = par.terms(1024.0, k, n, 2 * 1024.0 * n * k, 0.0, 1e15, 1e12)
    assert wide < comp      # a wide weight (n = 16384) fills more SMs than a narrow one


def test_bundled_fp8_curves_charge_the_activation_pass():
    for name in ("measured-h100-sxm", "measured-h200"):
        fp8 = get_profile(name).kernels.gemm["fp8"]
        assert fp8.quant_bytes == 3.0 and 0 < fp8.quant_memory <= 1.5 and fp8.tiles_half > 0
        assert get_profile(name).kernels.gemm["bf16"].quant_bytes == 0.0


def test_fused_input_quantization_drops_the_pass_and_the_separate_kernels_floor():
    # An engine that quantizes a GEMM's input in the kernel before it runs neither the quantization
    # pass nor its launch: by hand, m = 16, k = 8192 at 1 TB/s and quant_memory 0.25 the pass is
    # 3 x 16 x 8192 / 0.25e12 = 1.57 us, and the floor falls from 14 us to the base curve's 5 us.
    base = dict(compute_max=0.8, rows_half=0.0, weight_half=0.0, memory=1.0)
    engine_curve = GemmCurve(**base, overhead_s=14e-6, quant_bytes=3.0, quant_memory=0.25)
    fused = engine_curve.with_fused_input(5e-6)
    m, n, k = 16.0, 1024.0, 8192.0
    args = (m, n, k, 2 * m * n * k, n * k, 1e15, 1e12)
    assert engine_curve.terms(*args)[0] == pytest.approx(14e-6 + 3 * 16 * 8192 / 0.25e12)
    assert fused.terms(*args)[0] == pytest.approx(5e-6)
    assert engine_curve.terms(*args)[1:] == fused.terms(*args)[1:]
    assert GemmCurve(**base, overhead_s=3e-6).with_fused_input(5e-6).overhead_s == 3e-6  # bf16: unchanged
    # the bundled profiles: TensorRT-LLM's own FP8 curve loses its pass only when the engine says so
    p = get_profile("measured-b200")
    assert p.for_engine("trtllm").kernels.gemm["fp8"].quant_bytes == 3.0
    fused_fp8 = p.for_engine("trtllm", fused_input_quantization=True).kernels.gemm["fp8"]
    assert fused_fp8.quant_bytes == 0.0 and fused_fp8.overhead_s <= p.kernels.gemm["fp8"].overhead_s


def test_attention_and_collective_times_grow_with_size():
    a = AttentionCurve(overhead_s=1e-5, compute_max=0.6, memory_max=0.8, len_half=100.0, parallel_half=8.0,
                       head_dim_half=16.0)
    lengths = np.array([16, 256, 4096, 65536], dtype=float)
    for phase in ("prefill", "decode"):
        t = a.time(phase, lengths, 32.0, 128.0, lengths ** 2 * 1e4, lengths * 1e5, 1e15, 3e12)
        assert np.all(np.diff(t) > 0)
    c = CollectiveCurve(latency_s=1e-5, bus_bandwidth=3e11, ramp_bytes=3e6)
    sizes = np.logspace(3, 9, 10)
    assert np.all(np.diff(c.time("all_reduce", 8, sizes)) > 0)
    # ring all-reduce of 1 GB on 8 ranks: 1.75 GB at the bus bandwidth, plus the fill and latency
    assert c.time("all_reduce", 8, 1e9) == pytest.approx(1e-5 + (1.75e9 + np.sqrt(1.75e9 * 3e6)) / 3e11)


def test_xqa_multi_block_split_follows_tensorrt_llm_rule():
    # decoderXQAImplJIT computeMultiBlockCount, by hand with 132 SMs, 128 history tokens per block and
    # kTargetWaveFactor 8 (one wave = 132 CTAs, eight waves = 1,056):
    a = AttentionCurve(overhead_s=0.0, compute_max=1.0, memory_max=0.8, len_half=10.0, parallel_half=1.0,
                       sm_count=132, multi_block_tokens=128)
    # 8 pairs, 4,096 tokens: 32 blocks, 256 CTAs = 0.24 of eight waves: kept
    assert a.blocks(4096.0, 8.0) == 32
    # 64 pairs, 8,192 tokens: 64 blocks, 4,096 CTAs = 3.88 x eight waves -> floor(64 / 3.879) = 16
    assert a.blocks(8192.0, 64.0) == 16
    # 1,024 pairs, 4,096 tokens: 32,768 CTAs = 31.03 x eight waves -> floor(32 / 31.03) = 1
    assert a.blocks(4096.0, 1024.0) == 1
    # short contexts are never split; at most one block per SM
    assert a.blocks(100.0, 1.0) == 1 and a.blocks(1e6, 1.0) == 132
    # the split shortens the length each CTA streams: a long context on few pairs is faster than without it
    b = AttentionCurve(overhead_s=0.0, compute_max=1.0, memory_max=0.8, len_half=10.0, parallel_half=1.0)
    args = ("decode", 8192.0, 1.0, 128.0, 1.0, 1e9, 1e15, 3e12, 8.0)
    assert a.time(*args) < b.time(*args)
    with pytest.raises(SpecError, match="sm_count"):
        AttentionCurve(overhead_s=0.0, compute_max=1.0, memory_max=0.8, len_half=10.0, multi_block_tokens=128)


def test_decode_floors_grow_with_group_head_dim_and_waves():
    a = AttentionCurve(overhead_s=5e-6, compute_max=1.0, memory_max=0.8, len_half=10.0, parallel_half=1.0,
                       group_cost_s=2e-6, dim_cost_s=4e-6, sm_count=132)
    fixed = lambda pairs, d, g: a.terms("decode", 64.0, pairs, d, g, 0.0, 0.0, 1e15, 3e12)[0]  # noqa: E731
    # 8 query heads per KV head of 128: 5 + 2 x 1024 / 4096 + 4 x 64 / 128 = 7.5 us in one wave
    assert fixed(8.0, 128.0, 8.0) == pytest.approx(7.5e-6)
    # 264 CTAs are two waves of 132 SMs: the group term doubles
    assert fixed(264.0, 128.0, 8.0) == pytest.approx(5e-6 + 2 * 0.5e-6 + 2e-6)
    # head dim 64: the dim term is 4 us
    assert fixed(8.0, 64.0, 8.0) == pytest.approx(5e-6 + 2e-6 * 512 / 4096 + 4e-6)


def test_l2_resident_decode_regime_is_for_kernel_benchmarks_only():
    # L40S: 96 MiB of L2 over 864 GB/s of GDDR6. A kernel table that repeats a decode on the same KV
    # finds up to 96 MiB of it in L2 (aiconfigurator's L40S vLLM table: ~1.6 TB/s at 64 MiB, 615 GB/s
    # at 128 MiB); a forward pass reads each layer's KV once per step, after the other layers' weights
    # have passed through L2, so serving prices the DRAM rate.
    l2 = 96 * 2**20
    a = AttentionCurve(overhead_s=0.0, compute_max=1.0, memory_max=0.8, len_half=1e-9, parallel_half=1e-9,
                       cache_bytes=float(l2), cache_gain=2.5)
    t = lambda nbytes, warm: float(a.time("decode", 4096.0, 1e6, 128.0, 0.0, nbytes, 1e15, 864e9,  # noqa: E731
                                          warm=warm))
    cold = 64 * 2**20 / (864e9 * 0.8)
    assert t(64 * 2**20, False) == pytest.approx(cold, rel=1e-6)
    assert t(64 * 2**20, True) == pytest.approx(cold / 2.5, rel=1e-6)
    assert t(128 * 2**20, True) == pytest.approx(t(128 * 2**20, False))   # larger than L2: DRAM either way
    with pytest.raises(SpecError, match="cache_gain"):
        AttentionCurve(overhead_s=0.0, compute_max=1.0, memory_max=0.8, len_half=1.0, cache_gain=0.5)
    assert get_hardware("l40s").l2_cache_bytes == l2 and get_hardware("h100-sxm").l2_cache_bytes == 0


def test_decode_cta_saturation_sharpens_with_its_power():
    # parallel_power 1: ctas / (ctas + half); large powers approach min(1, ctas / half): a kernel whose
    # CTAs each stream at a fixed rate until the DRAM rate binds
    soft = AttentionCurve(overhead_s=0.0, compute_max=1.0, memory_max=1.0, len_half=1e-9, parallel_half=32.0)
    sharp = AttentionCurve(overhead_s=0.0, compute_max=1.0, memory_max=1.0, len_half=1e-9, parallel_half=32.0,
                           parallel_power=8.0)
    rate = lambda c, ctas: 1e9 / float(c.time("decode", 4096.0, ctas, 128.0, 0.0, 1e9, 1e15, 1e12))  # noqa: E731
    assert rate(soft, 32.0) == pytest.approx(0.5e12) and rate(soft, 320.0) == pytest.approx(1e12 * 320 / 352)
    assert rate(sharp, 8.0) == pytest.approx(0.25e12, rel=1e-3)     # 8 of 32: a quarter
    assert rate(sharp, 32.0) == pytest.approx(1e12 / 2 ** (1 / 8))
    assert rate(sharp, 320.0) == pytest.approx(1e12, rel=1e-6)
    with pytest.raises(SpecError, match="parallel_power"):
        AttentionCurve(overhead_s=0.0, compute_max=1.0, memory_max=0.8, len_half=1.0, parallel_power=0.5)


def test_prefill_efficiency_grows_with_the_query_heads_per_kv_head():
    # FlashAttention-class prefill kernels pack a KV head's query heads into one tile (pack_gqa):
    # group_half is the group at half the ceiling; B200/B300's FP8-KV tables run 19-21% slower at
    # g = 1 and 23-27% faster at g = 64 than one curve without it said (docs/validation/kernel-curves.md)
    a = AttentionCurve(overhead_s=0.0, compute_max=0.5, memory_max=1.0, len_half=1e-9, parallel_half=1e-9,
                       group_half=2.0)
    comp = lambda g: float(a.terms("prefill", 4096.0, 1e6, 128.0, g, 1e12, 0.0, 1e15, 1e12)[1])  # noqa: E731
    assert comp(1.0) == pytest.approx(1e12 / (1e15 * 0.5 * 1 / 3))
    assert comp(8.0) == pytest.approx(1e12 / (1e15 * 0.5 * 8 / 10))
    off = AttentionCurve(overhead_s=0.0, compute_max=0.5, memory_max=1.0, len_half=1e-9, parallel_half=1e-9)
    assert float(off.terms("prefill", 4096.0, 1e6, 128.0, 1.0, 1e12, 0.0, 1e15, 1e12)[1]) == pytest.approx(2e-3)


def test_attention_regime_curves_are_picked_by_heads_per_kv_head():
    def curve(t0: float) -> AttentionCurve:
        return AttentionCurve(overhead_s=t0, compute_max=1.0, memory_max=0.8, len_half=10.0)
    kc = KernelCurves(attention={"decode/fp8": curve(1e-6), "decode/fp8/g=1": curve(2e-6),
                                 "decode/fp8/g=33-": curve(3e-6), "prefill/bf16": curve(4e-6)})
    pick = lambda g: kc.attention_curve("decode", "fp8", g).overhead_s  # noqa: E731
    assert [pick(1.0), pick(8.0), pick(32.0), pick(33.0), pick(128.0)] == [2e-6, 1e-6, 1e-6, 3e-6, 3e-6]
    assert kc.attention_curve("decode", "fp8").overhead_s == 1e-6          # no group: the default curve
    assert kc.attention_curve("prefill", "fp8", 8.0).overhead_s == 4e-6     # falls back to bf16
    assert group_range("g=1") == (1.0, 1.0) and group_range("g=2-32") == (2.0, 32.0)
    assert group_range("g=33-") == (33.0, float("inf"))
    assert group_range("g=0") is None and group_range("g=8-2") is None and group_range("x") is None
    raw = kc.to_dict()
    assert sorted(kernel_curves_from_dict(raw).attention) == sorted(kc.attention)


def test_prefill_curves_per_head_size_are_picked_by_the_models_head_dim():
    # attention kernels are instantiated per head size; an unseen size takes the common curve
    def curve(t0: float) -> AttentionCurve:
        return AttentionCurve(overhead_s=t0, compute_max=1.0, memory_max=0.8, len_half=10.0)
    kc = KernelCurves(attention={"prefill/fp8": curve(1e-6), "prefill/fp8/d=128": curve(2e-6),
                                 "prefill/fp8/d=64": curve(3e-6), "decode/fp8": curve(4e-6)})
    assert kc.attention_curve("prefill", "fp8", 8.0, 128.0).overhead_s == 2e-6
    assert kc.attention_curve("prefill", "fp8", 8.0, 64).overhead_s == 3e-6
    assert kc.attention_curve("prefill", "fp8", 8.0, 96.0).overhead_s == 1e-6      # no 96 curve: the common one
    assert kc.attention_curve("prefill", "fp8").overhead_s == 1e-6
    assert kc.attention_curve("decode", "fp8", 8.0, 128.0).overhead_s == 4e-6
    assert sorted(kernel_curves_from_dict(kc.to_dict()).attention) == sorted(kc.attention)


def test_bundled_prefill_curves_differ_by_head_size_where_the_tables_do():
    # L40S, TensorRT-LLM's FP8 context FMHA: head size 128 runs much faster than 256 per FLOP
    # (held out, one common curve missed d=128 rows by +82% and d=256 rows by -25%)
    k = get_profile("measured-l40s").engine_kernels["trtllm"]
    d128, d256 = k.attention["prefill/fp8/d=128"], k.attention["prefill/fp8/d=256"]
    assert d128.compute_max > 1.3 * d256.compute_max


@pytest.mark.parametrize(("raw", "message"), [
    ({"gemm": {"bf16": {"overhead_s": 1e-6, "compute_max": 2.0, "rows_half": 1, "weight_half": 1, "memory": 0.8}}},
     "compute_max"),
    ({"attention": {"prefill/bf16/d=x": {"overhead_s": 0, "compute_max": 1, "memory_max": 1, "len_half": 1}}},
     "head dim"),
    ({"gemm": {"bf16": {"overhead_s": 1e-6, "compute_max": 0.8, "rows_half": 1, "weight_half": 1}}}, "memory"),
    ({"gemm": {"bf16": {"overhead_s": "x", "compute_max": 0.8, "rows_half": 1, "weight_half": 1, "memory": 1}}},
     "numbers"),
    ({"attention": {"sideways/bf16": {"overhead_s": 0, "compute_max": 1, "memory_max": 1, "len_half": 1}}},
     "prefill|decode"),
    ({"attention": {"decode/bf16/g=0": {"overhead_s": 0, "compute_max": 1, "memory_max": 1, "len_half": 1}}},
     "query heads per KV head"),
    ({"collectives": {"broadcast": {}}}, "broadcast"),
    ({"collectives": {"all_reduce": {8: {"latency_s": 1e-5, "bus_bandwidth": 0}}}}, "bus_bandwidth"),
    ({"tables": {}}, "unknown section"),
    ({"gemm": {"bf16": {"overhead_s": 1e-6, "compute_max": 0.8, "rows_half": 1, "weight_half": 1, "memory": 0.8,
                        "speed": 3}}}, "speed"),
])
def test_bad_kernel_sections_name_the_field(raw, message):
    with pytest.raises(SpecError, match=message):
        kernel_curves_from_dict(raw)


@pytest.mark.parametrize("name", MEASURED)
def test_measured_profiles_carry_provenance_and_uncertainty(name):
    assert name in list_profiles()
    p = get_profile(name)
    k = p.kernels
    assert k is not None and p.measured_from
    assert {"bf16"} <= set(k.gemm) and {"prefill/bf16", "decode/bf16"} <= set(k.attention)
    # NCCL tables cover 2-8 ranks; the NVL72 systems' (GB200, GB300) were measured inside one 4-GPU tray
    ranks = {2, 4, 8} if get_hardware(p.hardware).devices_per_node >= 8 else {2, 4}
    assert ranks <= set(k.collectives["all_reduce"])
    curves = [*k.gemm.values(), *k.attention.values(), *(c for by in k.collectives.values() for c in by.values())]
    for c in curves:
        assert c.provenance is not None and c.provenance.points > 0 and c.provenance.fit_date
        assert "aiconfigurator" in c.provenance.source
        assert c.sd and all(v >= 0 for v in c.sd.values())


@pytest.mark.parametrize("name", MEASURED)
def test_measured_profiles_are_small_and_round_trip(name):
    f = _data_dir("profiles").joinpath(f"{name}.yaml")
    text = f.read_text()
    # per engine (vLLM, SGLang, TensorRT-LLM): GEMM and attention curves ~5-6 KB (of which the prefill
    # curves per head size, up to five sizes per KV format, ~3 KB, and three decode regimes per KV
    # format ~2 KB), fused MoE ~1 KB per format
    assert len(text.encode()) < 40 * 1024
    p = get_profile(name)
    again = profile_from_dict(yaml.safe_load(yaml.safe_dump(p.to_dict())), name=name)
    assert again.kernels == p.kernels


def test_measured_profile_ceilings_are_physical():
    # bf16 GEMMs on H100 reach 60-90% of the dense datasheet peak (cuBLAS); fp8 less of its 2x peak
    k = get_profile("measured-h100-sxm").kernels
    assert 0.6 < k.gemm["bf16"].compute_max < 0.95
    assert k.gemm["fp8"].compute_max < k.gemm["bf16"].compute_max
    # NVLink 4: 450 GB/s per direction; on NVSwitch systems NCCL's NVLS all-reduce reduces in the
    # switch and reaches a bus bandwidth somewhat above it (the table: 445 GB/s at 512 MiB, still rising)
    assert 2e11 < k.collectives["all_reduce"][8].bus_bandwidth < 5.5e11
    assert 2e11 < k.collectives["all_gather"][8].bus_bandwidth < 4.5e11


def test_hardware_cli_says_which_default_profile_is_measured_and_from_what():
    import json

    from typer.testing import CliRunner

    from serveplan.cli import app

    r = CliRunner().invoke(app, ["hardware", "--json"])
    assert r.exit_code == 0, r.output
    rows = {row["name"]: row for row in json.loads(r.output)["hardware"]}
    assert rows["h100-sxm"]["profile"] == "measured-h100-sxm"
    assert "aiconfigurator h100_sxm" in rows["h100-sxm"]["profile_measured_from"]
    assert rows["t4"]["profile"] == "default-gpu" and rows["t4"]["profile_measured_from"] == ""


def test_gemm_curve_keys_and_reference_peaks():
    from serveplan.specs.catalog import get_hardware
    from serveplan.specs.kernels import gemm_peak_flops

    b200 = get_hardware("b200")
    # datasheet: B200 FP8 4.5 PFLOP/s dense; FP4 dense is twice FP8 where the file lists no fp4
    assert gemm_peak_flops(b200, "nvfp4") == gemm_peak_flops(b200, "fp4") == 9.0e15
    assert gemm_peak_flops(b200, "fp8_block") == 4.5e15
    k = get_profile("measured-b200").kernels
    assert k.gemm_curve("nvfp4") is k.gemm["fp4"] and k.gemm_curve("fp16") is k.gemm["bf16"]
    assert k.gemm_curve("fp8_block") is k.gemm["fp8"]
    assert k.gemm_curve("w4a16") is None       # weight-only formats keep the factors
    assert get_profile("measured-h100-sxm").kernels.gemm_curve("nvfp4") is None   # no FP4 on Hopper


def test_engine_kernels_swap_gemm_and_attention_but_keep_collectives():
    p = get_profile("measured-h200")
    assert {"trtllm", "sglang"} <= set(p.engine_kernels)
    t = p.for_engine("trtllm")
    assert t.kernels.gemm == p.engine_kernels["trtllm"].gemm
    assert t.kernels.attention == p.engine_kernels["trtllm"].attention
    assert t.kernels.collectives == p.kernels.collectives
    assert p.for_engine("vllm") is p and get_profile("default-gpu").for_engine("trtllm").kernels is None


def test_engine_estimator_uses_the_engines_own_kernels():
    from serveplan import ParallelConfig, get_hardware, get_model
    from serveplan.estimator.batch import StepBatch
    from serveplan.sim.serving import engine_estimator
    from serveplan.specs.catalog import get_engine

    m, hw, p = get_model("llama-3.1-8b"), get_hardware("h200"), get_profile(None, "h200")
    times = {}
    for eng in ("vllm-0.11", "trtllm-1.2"):
        est, _, _ = engine_estimator(get_engine(eng), m, hw, p, ParallelConfig(tp=1), dtype="fp8", kv_dtype="fp8")
        times[eng] = {o.name: o.time_s for o in est.estimate(StepBatch.decode(64, 4096)).ops}
    # aiconfigurator's tables: TRT-LLM's decode attention over an fp8 cache is faster than vLLM's
    assert times["trtllm-1.2"]["decode.attention"] < times["vllm-0.11"]["decode.attention"]


def test_simulation_config_of_an_engine_takes_its_kernels():
    from serveplan import get_hardware, get_model
    from serveplan.sim import SimulationConfig

    p = get_profile(None, "h200")
    cfg = SimulationConfig(model=get_model("llama-3.1-8b"), hardware=get_hardware("h200"), profile=p,
                           engine="trtllm", tp=1, rate=1.0)
    # TensorRT-LLM's own GEMM curves, with its fused input quantization (no separate pass)
    assert cfg.profile.kernels.gemm == p.for_engine("trtllm", fused_input_quantization=True).kernels.gemm
    assert cfg.profile.kernels.gemm["bf16"] == p.engine_kernels["trtllm"].gemm["bf16"]
    plain = SimulationConfig(model=get_model("llama-3.1-8b"), hardware=get_hardware("h200"), profile=p,
                             strategy="1m", tp=1, rate=1.0)
    assert plain.profile is p


def test_deepep_decode_steps_price_the_experts_by_their_own_curve():
    # DeepSeek-V3 in block FP8 on H200 with DP-attention 8 and EP 8 behind DeepEP: a decode step of
    # 256 sequences routes 256 x 8 / 8 = 256 rows to one rank's 32 experts, timed by the profile's
    # DeepEP curve (fitted to SGLang's DeepEP expert table, which measures 0.384 ms for this layer:
    # aiconfigurator-core 0.12.0 h200_sxm wideep_generation_moe_perf, 256 tokens, EP 8, uniform);
    # a prefill step, and the same layout without DeepEP, keep vLLM's fused-MoE curve
    import dataclasses

    from serveplan import Estimator, ParallelConfig, StepBatch, get_model
    from serveplan.specs.comm import A2ABuffer, CommOptions
    from serveplan.specs.kernels import gemm_peak_flops

    prof, hw, model = get_profile("measured-h200"), get_hardware("h200"), get_model("deepseek-v3")
    deepep, fused = prof.kernels.moe_curve("fp8_block", deepep=True), prof.kernels.moe_curve("fp8_block")
    assert deepep is prof.kernels.moe_deepep["fp8_block"] and fused is not None and deepep != fused
    assert deepep.provenance is not None and deepep.provenance.held_out_median < 0.10
    assert prof.kernels.moe_curve("bf16", deepep=True) is prof.kernels.moe_curve("bf16")   # no DeepEP bf16 table
    par = ParallelConfig(tp=1, dp=8, ep=8)

    def experts(profile, batch):
        ops = {o.name: o for o in Estimator(model, hw, profile, par, dtype="fp8_block").estimate(batch).ops
               if o.module == "moe"}
        parts = [ops[n] for n in ("experts.gate_up", "experts.silu_mul", "experts.down")]
        return parts[0], sum(o.flops for o in parts), sum(o.bytes for o in parts)

    def priced(curve, rows, W, Q):
        fixed, comp, mem = curve.terms(rows, 3 * 2048.0, 7168.0, W, Q, gemm_peak_flops(hw, "fp8_block"),
                                       hw.memory_bandwidth, 256 / 8)     # one rank's 32 experts
        return fixed + max(comp, mem)

    with_deepep = prof.with_(comm=CommOptions.deepep())
    gate_up, W, Q = experts(with_deepep, StepBatch.decode(256, 2048))
    assert gate_up.time_s == pytest.approx(priced(deepep, 256.0, W, Q), rel=1e-9)
    assert gate_up.time_s == pytest.approx(0.384e-3, rel=0.10)
    plain, W, Q = experts(prof, StepBatch.decode(256, 2048))
    # (the fused curve is fitted to skewed routing, DeepEP's to uniform: they give another price)
    assert plain.time_s == pytest.approx(priced(fused, 256.0, W, Q), rel=1e-9)
    assert plain.time_s != pytest.approx(gate_up.time_s, rel=0.01)
    assert experts(with_deepep, StepBatch.prefill(8, 1024))[0].time_s == experts(prof, StepBatch.prefill(8, 1024))[
        0].time_s
    # DeepEP without its buffers in the memory model (an MTP draft sharing the main model's) runs the
    # same kernels
    no_buffers = prof.with_(comm=dataclasses.replace(CommOptions.deepep(), buffer=A2ABuffer.NONE))
    assert experts(no_buffers, StepBatch.decode(256, 2048))[0].time_s == gate_up.time_s


def test_fused_moe_curve_prices_the_routed_experts_as_one_kernel():
    # Qwen3-30B-A3B NVFP4 on one B200 under TensorRT-LLM's kernels: 512 decode tokens route
    # 512 x 8 = 4,096 rows through experts of intermediate 768 and hidden 2,048; the curve's time
    # (hand-assembled from its terms) sits on experts.gate_up, the activation and down read 0
    from serveplan import Estimator, ParallelConfig, StepBatch, get_model

    prof = get_profile("measured-b200").for_engine("trtllm")
    curve = prof.kernels.moe_curve("nvfp4")
    assert curve is not None and curve.provenance is not None and curve.provenance.held_out_median < 0.25
    hw = get_hardware("b200")
    est = Estimator(get_model("qwen3-30b-a3b"), hw, prof, ParallelConfig(tp=1), dtype="nvfp4", kv_dtype="fp8")
    ops = {o.name: o for o in est.estimate(StepBatch.of((), [1000] * 512)).ops if o.module == "moe"}
    W = sum(ops[n].flops for n in ("experts.gate_up", "experts.silu_mul", "experts.down"))
    Q = sum(ops[n].bytes for n in ("experts.gate_up", "experts.silu_mul", "experts.down"))
    assert ops["experts.down"].flops == pytest.approx(4096 * 2 * 768 * 2048)
    fixed, comp, mem = curve.terms(4096.0, 3 * 768.0, 2048.0, W, Q, 9.0e15, hw.memory_bandwidth, 128.0)
    assert ops["experts.gate_up"].time_s == pytest.approx(fixed + max(comp, mem), rel=1e-9)
    assert ops["experts.silu_mul"].time_s == 0.0 and ops["experts.down"].time_s == 0.0
    # vLLM's own fused-MoE curve (its tables) gives another time for the same experts
    vllm = get_profile("measured-b200").kernels.moe_curve("nvfp4")
    assert vllm is not None and vllm != curve
    ov = {o.name: o for o in Estimator(get_model("qwen3-30b-a3b"), hw, get_profile("measured-b200"),
                                       ParallelConfig(tp=1), dtype="nvfp4", kv_dtype="fp8")
          .estimate(StepBatch.of((), [1000] * 512)).ops if o.module == "moe"}
    fixed, comp, mem = vllm.terms(4096.0, 3 * 768.0, 2048.0, W, Q, 9.0e15, hw.memory_bandwidth, 128.0)
    assert ov["experts.gate_up"].time_s == pytest.approx(fixed + max(comp, mem), rel=1e-9)
    # a format the GPU's tables do not time as a fused MoE (A100: vLLM's table holds bf16 experts
    # only): the three operators keep their own times
    plain = Estimator(get_model("qwen3-30b-a3b"), get_hardware("a100-80g"), get_profile("measured-a100-80g"),
                      ParallelConfig(tp=1), dtype="fp8")
    assert get_profile("measured-a100-80g").kernels.moe_curve("fp8") is None
    assert all(o.time_s > 0 for o in plain.estimate(StepBatch.of((), [1000] * 512)).ops
               if o.name.startswith("experts."))


def test_a_per_expert_moe_curve_computes_at_the_efficiency_of_each_experts_rows():
    # Hand derivation: 1,024 tokens routed top-4 over 128 experts (gpt-oss-120b's layer) are
    # m = 4,096 rows; e_act = 128 (1 - (1 - 1/128)^4096) = 128 (1 - 1.1e-14) experts hold rows, 32
    # each. A per-expert curve computes them at c_max 32 / (32 + m_half), the layer-wide form at
    # c_max 4096 / (4096 + m_half); with 16-row tiles 20 rows per expert pad to 32 (efficiency 20 / 32)
    base = dict(overhead_s=1e-5, compute_max=0.5, rows_half=64.0, weight_half=0.0, memory=0.6)
    flops, peak, bw = 4096 * 6 * 2880 * 2880.0, 1e15, 4.8e12
    per = GemmCurve(**base, per_expert=True)
    _, comp, _ = per.terms(4096.0, 3 * 2880.0, 2880.0, flops, 1.0, peak, bw, 128.0)
    assert comp == pytest.approx(flops / (peak * 0.5 * 32 / (32 + 64)), rel=1e-9)
    _, layer, _ = GemmCurve(**base).terms(4096.0, 3 * 2880.0, 2880.0, flops, 1.0, peak, bw, 128.0)
    assert layer == pytest.approx(flops / (peak * 0.5 * 4096 / (4096 + 64)), rel=1e-9)
    assert comp / layer == pytest.approx((4096 / 4160) / (32 / 96), rel=1e-9)       # 2.95x
    # experts=None (a dense GEMM) or one expert per device: the layer's rows
    assert per.terms(4096.0, 3 * 2880.0, 2880.0, flops, 1.0, peak, bw)[1] == pytest.approx(layer, rel=1e-12)
    assert per.terms(4096.0, 3 * 2880.0, 2880.0, flops, 1.0, peak, bw, 1.0)[1] == pytest.approx(layer, rel=1e-12)
    # 640 rows over 32 experts: e_act = 32 (1 - (31/32)^640) = 32.0, 20 rows each, padded to 32
    tiled = GemmCurve(**base, tile_rows=16, per_expert=True)
    f2 = 640 * 6 * 2880 * 2880.0
    _, c2, _ = tiled.terms(640.0, 3 * 2880.0, 2880.0, f2, 1.0, peak, bw, 32.0)
    e = -32 * np.expm1(640 * np.log1p(-1 / 32))
    r = 640 / e
    assert c2 == pytest.approx(f2 / (peak * 0.5 * r / (r + 64) * r / 32), rel=1e-9)
    # the field is read from and written to a profile's kernels section; a non-boolean is refused
    from serveplan.specs.kernels import KernelCurves, kernel_curves_from_dict
    raw = KernelCurves(moe={"mxfp4": per}).to_dict()
    assert raw["moe"]["mxfp4"]["per_expert"] is True
    assert kernel_curves_from_dict(raw).moe["mxfp4"] == per
    raw["moe"]["mxfp4"]["per_expert"] = "yes"
    with pytest.raises(SpecError, match="moe.mxfp4"):
        kernel_curves_from_dict(raw)


def test_int4_moe_steps_price_the_experts_by_the_marlin_curve():
    # Kimi-K2.5 (weight-only INT4 experts, served as w4a16) at TP 8 on H200: a decode step of 8
    # sequences prices its routed experts by the profile's w4a16 fused-MoE curve, fitted to vLLM
    # 0.24's compressed-tensors Marlin MoE table, which measures 110.5 us for Kimi-K2's layer at TP 8
    # and 8 tokens (aiconfigurator-core 0.12.0 h200_sxm moe_perf, int4_wo, balanced); before the
    # curve the experts took the phase factors and were priced at a fraction of that
    from serveplan import Estimator, ParallelConfig, StepBatch, get_model

    prof, hw, model = get_profile("measured-h200"), get_hardware("h200"), get_model("kimi-k2.5")
    curve = prof.kernels.moe_curve("w4a16")
    assert curve is not None and curve.provenance is not None
    ops = {o.name: o for o in Estimator(model, hw, prof.for_engine("vllm"), ParallelConfig(tp=8),
                                        dtype="w4a16").estimate(StepBatch.decode(8, 2048)).ops if o.module == "moe"}
    experts = sum(ops[n].time_s for n in ("experts.gate_up", "experts.silu_mul", "experts.down"))
    assert experts == pytest.approx(110.5e-6, rel=0.25)


def test_an_engine_file_may_run_marlins_mxfp4_moe_and_the_experts_take_its_curve():
    # vLLM with VLLM_MXFP4_USE_MARLIN=1 runs gpt-oss's MXFP4 experts through Marlin's W4A16 MoE
    # (engine file: moe_backends: {mxfp4: marlin}); the H200 profile holds that backend's curve
    # (moe["mxfp4@marlin"], fitted to vLLM 0.24's Marlin MXFP4 MoE table), whose compute ceiling is
    # about half the default Triton path's: at its largest shapes the tables measure 200-219 TFLOP/s
    # for Marlin against 406-457 for Triton (aiconfigurator-core 0.12.0 h200_sxm moe_perf, power law
    # 1.2, 8,192-16,384 tokens). So an 8,192-token prefill's experts take 1.6-2.6x as long; a
    # decode step of 8 sequences, bound by the weights' bytes, far less
    import dataclasses

    from serveplan import Estimator, ParallelConfig, StepBatch, get_engine, get_model
    from serveplan.specs.engine import engine_from_dict

    prof, hw, model = get_profile("measured-h200"), get_hardware("h200"), get_model("gpt-oss-120b")
    assert "mxfp4@marlin" in prof.kernels.moe and prof.kernels.moe["mxfp4@marlin"].provenance is not None
    vllm = get_engine("vllm")
    marlin = dataclasses.replace(vllm, moe_backends={"mxfp4": "marlin"})
    assert marlin.profile_for(prof).kernels.moe_curve("mxfp4") is prof.kernels.moe["mxfp4@marlin"]
    assert vllm.profile_for(prof).kernels.moe_curve("mxfp4") is prof.kernels.moe["mxfp4"]

    def experts(spec, batch):
        est = Estimator(model, hw, spec.profile_for(prof), ParallelConfig(tp=1), dtype="mxfp4")
        return sum(o.time_s for o in est.estimate(batch).ops if o.name.startswith("experts."))

    prefill = experts(marlin, StepBatch.prefill(1, 8192)) / experts(vllm, StepBatch.prefill(1, 8192))
    decode = experts(marlin, StepBatch.decode(8, 2048)) / experts(vllm, StepBatch.decode(8, 2048))
    assert 1.6 < prefill < 2.6 and decode < 1.5
    # the engine file's key, checked; a backend the profile has no curve for names the ones it has
    from importlib import resources

    import yaml

    raw = yaml.safe_load((resources.files("serveplan.specs.data.engines") / "vllm-0.33.yaml").read_text())
    assert engine_from_dict({**raw, "moe_backends": {"MXFP4": "marlin"}}, name="v").moe_backends == {"mxfp4": "marlin"}
    for bad, needle in (({"mxfp4": 1}, "moe_backends must map weight formats"), (["marlin"], "moe_backends must map"),
                        ({"fp5": "marlin"}, "fp5")):
        with pytest.raises(SpecError, match=needle):
            engine_from_dict({**raw, "moe_backends": bad}, name="v")
    with pytest.raises(SpecError, match=r"mxfp4='cutlass' has no fused-MoE curve .*expected one of: marlin"):
        dataclasses.replace(vllm, moe_backends={"mxfp4": "cutlass"}).profile_for(prof)
