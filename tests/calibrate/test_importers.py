"""Import of aiconfigurator and Vidur kernel tables, and the kernel-curve fit, on small tables
written here in the public layouts (column names as in aiconfigurator-core 0.12.0 and Vidur)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from serveplan.calibrate.importers import (
    MOE_DISTRIBUTION,
    MXFP8_KERNEL_SUFFIX,
    import_aiconfigurator,
    import_vidur,
    shape_of,
)
from serveplan.calibrate.kernel_fit import fit_collective, fit_gemm, fit_kernel_curves, fit_moe_curves, select
from serveplan.calibrate.measurements import Measurement, MeasurementSet
from serveplan.cli import app
from serveplan.errors import SpecError
from serveplan.specs.catalog import get_hardware, get_profile
from serveplan.specs.kernels import CollectiveCurve, GemmCurve, gemm_peak_flops
from serveplan.units import DType

runner = CliRunner()
H100 = get_hardware("h100-sxm")
# curves the synthetic tables are generated from (latencies in ms, as the tables store them)
TRUE_GEMM = GemmCurve(overhead_s=4e-6, compute_max=0.8, rows_half=8.0, weight_half=1e5, memory=0.85)
TRUE_AR = CollectiveCurve(latency_s=1.5e-5, bus_bandwidth=4e11, ramp_bytes=5e6)


def _write(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def _gemm_table() -> list[dict]:
    rows = []
    for m in (1, 4, 16, 64, 256, 1024, 4096):
        for n in (1024, 4096, 8192):
            for k in (1024, 4096):
                W, Q = 2.0 * m * n * k, 2.0 * (m * k + m * n) + 2.0 * k * n
                t = float(TRUE_GEMM.time(float(m), float(n), float(k), W, Q, 989.4e12, 3.35e12))
                rows.append({"framework": "VLLM", "version": "0.24.0", "device": "NVIDIA H100 80GB HBM3",
                             "op_name": "gemm", "kernel_source": "torch.nn.functional.linear",
                             "gemm_dtype": "bfloat16", "m": m, "n": n, "k": k, "latency": t * 1e3})
    return rows


def _nccl_table() -> list[dict]:
    rows = []
    for g in (2, 4, 8):
        for e in range(8, 29):
            elems = 2 ** e
            t = float(TRUE_AR.time("all_reduce", g, elems * 2.0))
            rows.append({"framework": "TRTLLM", "version": "2.27.3", "device": "NVIDIA H100 80GB HBM3",
                         "op_name": "all_reduce", "kernel_source": "NCCL", "nccl_dtype": "half", "num_gpus": g,
                         "message_size": elems, "latency": t * 1e3})
    return rows


def _attention_tables() -> tuple[list[dict], list[dict]]:
    common = {"framework": "VLLM", "version": "0.24.0", "device": "H100", "kernel_source": "fa3", "beam_width": 1,
              "attn_dtype": "bfloat16", "window_size": 0}
    ctx, gen = [], []
    for b in (1, 4):
        for s in (128, 1024, 4096):
            for hq, hkv in ((32, 8), (64, 8), (16, 16), (8, 1)):
                ctx.append({**common, "op_name": "context_attention", "batch_size": b, "isl": s, "num_heads": hq,
                            "num_key_value_heads": hkv, "head_dim": 128, "kv_cache_dtype": "bfloat16", "step": 0,
                            "latency": 1e-3 * (0.01 + b * s * s * hq * 1e-9)})
                gen.append({**common, "op_name": "generation_attention", "batch_size": b * 16, "isl": 1,
                            "num_heads": hq, "num_key_value_heads": hkv, "head_dim": 128, "kv_cache_dtype": "bfloat16",
                            "step": s - 1, "latency": 1e-3 * (0.01 + b * s * hkv * 2e-6)})
    ctx.append({**ctx[0], "window_size": 128})   # sliding window: skipped
    return ctx, gen


@pytest.fixture(scope="module")
def aic_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("aic") / "aiconfigurator_core" / "systems" / "data" / "h100_sxm"
    _write(root / "gemm" / "vllm" / "0.24.0" / "gemm_perf.csv", _gemm_table())
    ctx, gen = _attention_tables()
    _write(root / "attention" / "vllm" / "0.24.0" / "context_attention_perf.csv", ctx)
    _write(root / "attention" / "vllm" / "0.24.0" / "generation_attention_perf.csv", gen)
    _write(root / "comm" / "nccl" / "2.27.3" / "nccl_perf.csv", _nccl_table())
    _write(root / "gemm" / "sglang" / "0.5.14" / "gemm_perf.csv", _gemm_table()[:5])
    return root.parents[3]


def test_aiconfigurator_rows_count_work_and_traffic_as_the_estimator(aic_dir):
    ms = import_aiconfigurator(aic_dir, "h100_sxm", framework="vllm")
    gemms = select(ms, "gemm")
    assert len(gemms) == 7 * 3 * 2                       # the sglang table is left out
    r = next(r for r in gemms if shape_of(r)["m"] == "16" and shape_of(r)["n"] == "4096"
             and shape_of(r)["k"] == "1024")
    assert r.flops == 2 * 16 * 4096 * 1024 and r.bytes == 2 * (16 * 1024 + 16 * 4096) + 2 * 1024 * 4096
    assert r.phase == "decode" and r.rows == 16
    att = select(ms, "attention")
    assert len(att) == 2 * 24                             # the sliding-window row is skipped
    dec = next(r for r in att if r.phase == "decode")
    s = shape_of(dec)
    ctx = int(s["context"])                              # isl + step
    # query read and output written (bf16), K and V of every cached token read
    assert dec.bytes == int(s["batch"]) * (2 * 2 * int(s["heads"]) * 128 + ctx * 2 * 2 * int(s["kv_heads"]) * 128)
    pre = next(r for r in att if r.phase == "prefill")
    assert shape_of(pre)["q_dtype"] == "bf16"          # the context kernel's format (attn_dtype)
    coll = select(ms, "collective")
    assert len(coll) == 3 * 21 and coll[0].bytes == 2 * 2 ** 8      # half elements -> bytes
    assert ms.metadata["system"] == "h100_sxm"
    assert len(import_aiconfigurator(aic_dir, "h100_sxm").rows) == len(ms.rows) + 5


def test_import_errors_are_one_line(aic_dir, tmp_path):
    with pytest.raises(SpecError, match="not found.*found: h100_sxm"):
        import_aiconfigurator(aic_dir, "gb300")
    with pytest.raises(SpecError, match="no aiconfigurator tables"):
        import_aiconfigurator(tmp_path, "h100_sxm")
    with pytest.raises(SpecError, match="does not exist"):
        import_vidur(tmp_path / "missing")


def test_fit_recovers_the_curves_that_generated_the_tables(aic_dir):
    ms = import_aiconfigurator(aic_dir, "h100_sxm", framework="vllm")
    g = fit_gemm(select(ms, "gemm"), H100, "bf16")
    assert g.compute_max == pytest.approx(0.8, rel=0.02)
    assert g.memory == pytest.approx(0.85, rel=0.02)
    assert g.overhead_s == pytest.approx(4e-6, rel=0.1)
    assert set(g.sd) == {"overhead_s", "compute_max", "rows_half", "weight_half", "memory", "tiles_half"}
    rows = [r for r in select(ms, "collective") if shape_of(r)["ranks"] == "8"]
    c = fit_collective(rows, "all_reduce", 8)
    assert c.bus_bandwidth == pytest.approx(4e11, rel=0.02) and c.latency_s == pytest.approx(1.5e-5, rel=0.05)


def test_fit_kernel_curves_reports_held_out_errors(aic_dir):
    ms = import_aiconfigurator(aic_dir, "h100_sxm", framework="vllm")
    curves, held = fit_kernel_curves(ms, H100, source="synthetic", fit_date="2026-01-01")
    assert set(curves.gemm) == {"bf16"} and {"prefill/bf16", "decode/bf16"} <= set(curves.attention)
    assert set(curves.collectives["all_reduce"]) == {2, 4, 8}
    gemm = next(h for h in held if h.what == "gemm bf16")
    assert gemm.median < 0.01 and gemm.train + gemm.test == 42   # noise-free data: the curve is exact
    assert curves.gemm["bf16"].provenance.points == 42


def test_vidur_tables_import(tmp_path):
    base = tmp_path / "data" / "profiling"
    mlp = []
    for tok in (1, 64, 512, 4096):
        row = {"n_head": 32, "n_kv_head": 8, "n_embd": 4096, "n_expanded_embd": 14336, "vocab_size": 128256,
               "use_gated_mlp": True, "num_tokens": tok, "num_tensor_parallel_workers": 2}
        for op in ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj", "mlp_act"):
            row[f"time_stats.{op}.median"] = 0.01 + tok * 1e-4
        mlp.append(row)
    _write(base / "compute" / "h100" / "meta-llama" / "Meta-Llama-3-8B" / "mlp.csv", mlp)
    _write(base / "network" / "h100_dgx" / "all_reduce.csv",
           [{"": i, "time_stats.all_reduce.median": 0.02 + i * 0.01, "rank": 0, "num_workers": 4, "size": 2048 * 2 ** i,
             "collective": "all_reduce", "devices_per_node": 4, "max_devices_per_node": 8} for i in range(6)])
    ms = import_vidur(tmp_path)
    gemms = select(ms, "gemm")
    assert len(gemms) == 4 * 4                          # mlp_act is not a GEMM
    up = next(r for r in gemms if shape_of(r)["op"] == "mlp_up_proj" and r.rows == 512)
    # gate and up projections of one TP rank: k = 4096, n = 2 * 14336 / 2
    assert shape_of(up)["k"] == "4096" and shape_of(up)["n"] == "14336"
    assert up.flops == 2 * 512 * 14336 * 4096 and up.time_s == pytest.approx((0.01 + 512e-4) * 1e-3)
    coll = select(ms, "collective")
    assert len(coll) == 6 and coll[0].bytes == 4096 and shape_of(coll[0])["ranks"] == "4"
    with pytest.raises(SpecError, match="no Vidur rows"):
        import_vidur(tmp_path, gpu="a40")


def test_parquet_tables_read_with_pyarrow(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    root = tmp_path / "h100_sxm"
    rows = _gemm_table()
    (root / "gemm" / "vllm" / "0.24.0").mkdir(parents=True)
    pq.write_table(pa.table({k: [r[k] for r in rows] for k in rows[0]}),
                   root / "gemm" / "vllm" / "0.24.0" / "gemm_perf.parquet")
    ms = import_aiconfigurator(root, "h100_sxm")
    assert len(ms.rows) == len(rows)


def test_cli_calibrate_from_aiconfigurator_writes_a_measured_profile(aic_dir, tmp_path):
    out, csv_out = tmp_path / "p.yaml", tmp_path / "m.csv"
    r = runner.invoke(app, ["calibrate", "--from", "aiconfigurator", str(aic_dir), "-H", "h100-sxm", "--out", str(out),
                            "--measurements-out", str(csv_out), "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["rows"] > 100 and any(h["what"] == "gemm bf16" for h in d["held_out"])
    prof = get_profile(str(out))
    assert prof.kernels is not None and prof.kernels.gemm["bf16"].compute_max == pytest.approx(0.8, rel=0.02)
    assert yaml.safe_load(out.read_text())["hardware"] == "h100-sxm"
    assert csv_out.read_text().count("\n") > 100


@pytest.mark.parametrize(("args", "message"), [
    (["--from", "tensorrt", "DIR", "-H", "h100-sxm"], "expected one of: aiconfigurator, vidur"),
    (["--from", "aiconfigurator", "DIR", "-H", "t4"], "--system is needed"),
    (["--from", "vidur", "DIR", "-H", "h100-sxm"], "does not exist"),
])
def test_cli_calibrate_from_errors_exit_2(args, message, tmp_path):
    args = [str(tmp_path / "nothing") if a == "DIR" else a for a in args]
    r = runner.invoke(app, ["calibrate", *args, "--out", str(tmp_path / "p.yaml")])
    assert r.exit_code == 2 and message in r.output, r.output
    assert not (tmp_path / "p.yaml").exists()


VARIANTS = (("moe_torch_flow_cutlass", "power_law_1.2", 1), ("moe_torch_flow_min_latency", "power_law_1.2", 1),
            ("moe_torch_flow_cutlass", "balanced", 1), ("moe_torch_flow_cutlass", "power_law_1.01", 1),
            ("moe_torch_flow_cutlass", "power_law_1.2", 8))


def test_fused_moe_rows_count_the_estimators_expert_work_and_fit_a_curve(tmp_path):
    # aiconfigurator's moe_perf layout: one MoE layer's fused routed-expert kernel. Rows of the
    # opt-in min-latency kernel, of other routings than MOE_DISTRIBUTION (power law, alpha 1.2:
    # aiconfigurator's own default) and of expert parallelism are left out.
    true = GemmCurve(overhead_s=2e-5, compute_max=0.5, rows_half=64.0, weight_half=1e6, memory=0.6, per_expert=True)
    rows = []
    for tokens in (1, 8, 64, 256, 1024, 4096, 16384):
        for h, inter, E, topk in ((2048, 768, 128, 8), (4096, 1536, 64, 6), (7168, 2048, 256, 8), (5120, 1536, 160, 6)):
            c, eact = tokens * topk, E * (1 - (1 - topk / E) ** tokens)
            W = c * (6 * h * inter + 6 * inter)
            Q = 2.0 * c * (2 * h + 8 * inter) + eact * 1.0 * 3 * h * inter
            t = float(true.time(float(c), 3.0 * inter, float(h), W, Q, 1979e12, 3.35e12, float(E)))
            for src, dist, ep in VARIANTS:
                rows.append({"framework": "TRTLLM", "version": "1.3.0rc20", "device": "NVIDIA H100 80GB HBM3",
                             "op_name": "moe", "kernel_source": src, "moe_dtype": "fp8", "num_tokens": tokens,
                             "hidden_size": h, "inter_size": inter, "topk": topk, "num_experts": E,
                             "moe_tp_size": 1, "moe_ep_size": ep, "distribution": dist, "latency": t * 1e3})
    _write(tmp_path / "h100_sxm" / "moe" / "trtllm" / "1.3.0rc20" / "moe_perf.csv", rows)
    ms = import_aiconfigurator(tmp_path, "h100_sxm", framework="trtllm", kinds=("moe",))
    moe = select(ms, "moe", dtype="fp8")
    assert MOE_DISTRIBUTION == "power_law_1.2"
    assert len(moe) == 7 * 4                                   # only the power-law 1.2, EP-free CUTLASS rows
    # by hand, Qwen3-30B-A3B's layer at 64 tokens: 512 routed rows, W = 512 (6 x 2048 x 768 + 6 x 768),
    # e_act = 128 (1 - (1 - 8/128)^64) = 126.8 experts holding a token
    r = next(r for r in moe if shape_of(r)["tokens"] == "64" and shape_of(r)["k"] == "2048")
    assert r.flops == pytest.approx(512 * (6 * 2048 * 768 + 6 * 768))
    assert r.bytes == pytest.approx(2 * 512 * (2 * 2048 + 8 * 768) + 128 * (1 - (1 - 8 / 128) ** 64) * 3 * 2048 * 768)
    assert (shape_of(r)["m"], shape_of(r)["n"]) == ("512", str(3 * 768))
    curves, held = fit_kernel_curves(ms, H100, source="test", fit_date="2026-11-27")
    assert "fp8" in curves.moe and next(h for h in held if h.what == "moe fp8").median < 0.05
    assert curves.moe["fp8"].per_expert                     # the row terms count each active expert's rows
    assert curves.moe_curve("fp8") is curves.moe["fp8"] and curves.moe_curve("bf16") is None


def test_deepep_expert_rows_count_one_ranks_balanced_work_and_fit_their_own_curve(tmp_path):
    # aiconfigurator's wideep_generation_moe_perf layout (collector/wideep/sglang/collect_deepep_moe.py):
    # num_tokens counts every EP rank's tokens, the latency one rank's E/ep experts, and "uniform"
    # routing is balanced (one row each on c experts while c < E/ep)
    true = GemmCurve(overhead_s=2e-5, compute_max=0.7, rows_half=64.0, weight_half=1e6, memory=0.75, per_expert=True)
    h, inter, E, topk = 7168, 2048, 256, 8
    rows = []
    for ep in (8, 16, 32, 64):
        for tokens in (ep, 2 * ep, 4 * ep, 16 * ep, 64 * ep, 128 * ep):
            c = tokens * topk / ep
            W = c * (6 * h * inter + 6 * inter)
            Q = 2.0 * c * (2 * h + 8 * inter) + min(E / ep, c) * 1.0 * 3 * h * inter
            t = float(true.time(c, 3.0 * inter, float(h), W, Q, 1979e12, 4.8e12, E / ep))
            for dist in ("uniform", "power_law_1.2"):
                rows.append({"framework": "SGLang", "version": "0.5.6.post2", "device": "NVIDIA H200",
                             "op_name": "moe_generation", "kernel_source": "deepepmoe", "moe_dtype": "fp8_block",
                             "num_tokens": tokens, "hidden_size": h, "inter_size": inter, "topk": topk,
                             "num_experts": E, "moe_tp_size": 1, "moe_ep_size": ep, "distribution": dist,
                             "latency": t * 1e3})
    _write(tmp_path / "h200_sxm" / "moe" / "sglang" / "0.5.6.post2" / "wideep_generation_moe_perf.csv", rows)
    ms = import_aiconfigurator(tmp_path, "h200_sxm", framework="sglang", kinds=("moe_ep",))
    assert len(ms.rows) == 4 * 6 and {r.kind for r in ms.rows} == {"moe_ep"} and {r.phase for r in ms.rows} == {
        "decode"}                                                  # the skewed-routing rows are left out
    # by hand, EP 8 at 16 tokens (2 per rank): 16 x 8 / 8 = 16 routed rows on 16 of the 32 local experts
    r = next(r for r in ms.rows if shape_of(r)["ep"] == "8" and shape_of(r)["tokens"] == "16")
    assert r.rows == 16 and r.flops == pytest.approx(16 * (6 * h * inter + 6 * inter))
    assert r.bytes == pytest.approx(2 * 16 * (2 * h + 8 * inter) + 16 * 3 * h * inter)
    # at 128 tokens (16 per rank, 128 routed rows) every local expert holds rows: 32 experts' weights
    r = next(r for r in ms.rows if shape_of(r)["ep"] == "8" and shape_of(r)["tokens"] == "128")
    assert r.bytes == pytest.approx(2 * 128 * (2 * h + 8 * inter) + 32 * 3 * h * inter)
    held: list = []
    curves = fit_moe_curves(ms, get_hardware("h200"), "moe_ep", 0, held, source="test", fit_date="2026-11-27")
    assert set(curves) == {"fp8_block"} and held[0].what == "moe DeepEP fp8_block" and held[0].median < 0.05
    # without a DeepEP table the kind imports nothing
    with pytest.raises(SpecError, match="no GEMM"):
        import_aiconfigurator(tmp_path, "h200_sxm", framework="vllm", kinds=("moe_ep",))


#: (framework, version, device) of the synthetic decode tables, by engine
_DECODE_TABLE = {"trtllm": ("TRTLLM", "1.3.0rc20"), "vllm": ("VLLM", "0.24.0")}


def _decode_table(tmp_path, system, engine, curve_of, heads, batches, contexts, hw):
    """A bf16-KV decode table timed by ``curve_of(g)`` (warm, as a kernel table), imported: the
    measurements and their decode rows. Bytes and FLOPs as ``ops/graph.py`` counts a paged decode."""
    framework, version = _DECODE_TABLE[engine]
    rows = []
    for hq, hkv in heads:
        for b in batches:
            for s in contexts:
                W, Q = b * s * (4 * hq * 128 + 5 * hq), b * 2 * 2 * hq * 128 + b * s * 2 * 2 * hkv * 128
                t = float(curve_of(hq / hkv).time("decode", float(s), float(b * hkv), 128.0, W, Q, hw.peak_flops[
                    DType.BF16], hw.memory_bandwidth, hq / hkv, warm=True))
                rows.append({"framework": framework, "version": version, "device": hw.description,
                             "op_name": "generation_attention", "batch_size": b, "isl": s, "num_heads": hq,
                             "num_key_value_heads": hkv, "head_dim": 128, "kv_cache_dtype": "bfloat16",
                             "step": 0, "latency": t * 1e3})
    _write(tmp_path / system / "attention" / engine / version / "generation_attention_perf.csv", rows)
    ms = import_aiconfigurator(tmp_path, system, framework=engine, kinds=("generation_attention",))
    return ms, [r for r in select(ms, "attention", kv_dtype="bf16") if r.phase == "decode"]


def test_tensorrt_llm_decode_tables_get_one_curve_per_kernel_regime(tmp_path):
    # TensorRT-LLM's decode kernels by query heads per KV head (kernelUtils.cpp): XQA for 2-32, the
    # masked MHA kernel for 1 and above 32. Synthetic table: the MHA kernel streams the cache at a
    # quarter of XQA's rate; one curve over both cannot hold, one per regime recovers each.
    from serveplan.calibrate.kernel_fit import fit_attention, fit_decode_regimes, predict_by_curve
    from serveplan.specs.kernels import AttentionCurve

    xqa = AttentionCurve(overhead_s=6e-6, compute_max=1.0, memory_max=0.8, len_half=30.0, parallel_half=2.0,
                         group_cost_s=1e-6, dim_cost_s=2e-6, sm_count=132, multi_block_tokens=128)
    mha = AttentionCurve(overhead_s=8e-6, compute_max=1.0, memory_max=0.2, len_half=30.0, parallel_half=2.0,
                         sm_count=132, multi_block_tokens=128)
    ms, dec = _decode_table(tmp_path, "h100_sxm", "trtllm", lambda g: xqa if 2 <= g <= 32 else mha,
                            ((32, 32), (16, 16), (32, 8), (64, 8), (32, 4), (64, 1), (128, 2)), (1, 8, 64, 256),
                            (64, 1024, 8192), H100)
    curves = fit_decode_regimes(dec, H100, "bf16")
    assert sorted(curves) == ["decode/bf16", "decode/bf16/g=1", "decode/bf16/g=33-"]
    assert curves["decode/bf16"].multi_block_tokens == 128 and curves["decode/bf16"].sm_count == 132
    t = [r.time_s for r in dec]
    err = [abs(p / m - 1) for p, m in zip(predict_by_curve(curves, dec, H100, "bf16", "decode"), t, strict=True)]
    assert max(err) < 0.02
    # one curve over every row misses: the MHA rows are four times slower at long contexts
    one = predict_by_curve({"decode/bf16": fit_attention(dec, H100, "decode")}, dec, H100, "bf16", "decode")
    assert sorted(abs(p / m - 1) for p, m in zip(one, t, strict=True))[len(t) // 2] > 0.1
    kc, _ = fit_kernel_curves(ms, H100, source="t", fit_date="2026-11-27")
    assert kc.attention_curve("decode", "bf16", 64.0) is kc.attention["decode/bf16/g=33-"]


def test_decode_fit_finds_the_l2_resident_regime_and_the_split_its_rows_show(tmp_path):
    # Synthetic L40S table (142 SMs, 96 MiB L2): an unsplit kernel whose KV streams 2.5x faster while
    # it fits in L2 and whose CTAs saturate sharply. The fit keeps the unsplit curve among the splits
    # it tries, recovers the L2 gain from the rows on both sides of 96 MiB, and serving (not warm)
    # prices the DRAM rate.
    import dataclasses

    from serveplan.calibrate.kernel_fit import fit_split_or_not, predict_attention
    from serveplan.specs.kernels import AttentionCurve

    l40s = get_hardware("l40s")
    truth = AttentionCurve(overhead_s=8e-6, compute_max=1.0, memory_max=0.8, len_half=20.0, parallel_half=40.0,
                           parallel_power=4.0, sm_count=142, cache_bytes=l40s.l2_cache_bytes, cache_gain=2.5)
    _, dec = _decode_table(tmp_path, "l40s", "vllm", lambda g: truth, ((32, 8), (64, 8), (16, 4), (8, 1)),
                           (1, 4, 16, 64, 256), (64, 512, 2048, 8192, 32768), l40s)
    assert min(sum(r.bytes <= l40s.l2_cache_bytes for r in dec), sum(r.bytes > l40s.l2_cache_bytes for r in dec)) > 8
    c = fit_split_or_not(dec, l40s)
    assert c.multi_block_tokens == 0 and c.cache_bytes == l40s.l2_cache_bytes
    assert c.cache_gain == pytest.approx(2.5, rel=0.05) and c.parallel_power > 2.0
    t = [r.time_s for r in dec]
    err = sorted(abs(p / m - 1) for p, m in zip(predict_attention(c, dec, l40s, "decode"), t, strict=True))
    assert err[len(err) // 2] < 0.02
    # without the L2 size no such regime is fitted, and the DRAM-regime rows pull the fit off
    c0 = fit_split_or_not(dec, dataclasses.replace(l40s, l2_cache_bytes=0.0))
    assert c0.cache_bytes == 0.0
    err0 = sorted(abs(p / m - 1) for p, m in zip(predict_attention(c0, dec, l40s, "decode"), t, strict=True))
    assert err0[len(err0) // 2] > 2 * err[len(err) // 2]


def test_prefill_group_term_is_kept_only_where_it_predicts_held_out_groups(tmp_path):
    # Two synthetic H100 prefill tables over the same shapes: one whose kernel gains with the
    # query heads per KV head (group_half 2: a GQA-packing kernel), one whose kernel does not. The
    # choice is made on a split of the rows' own shape groups: the term is kept for the first
    # only, and the first's fit recovers it.
    import dataclasses

    from serveplan.calibrate.kernel_fit import attention_group, fit_attention, group_term_helps
    from serveplan.specs.kernels import AttentionCurve

    common = {"framework": "VLLM", "version": "0.24.0", "device": "H100", "kernel_source": "fa3", "beam_width": 1,
              "attn_dtype": "bfloat16", "window_size": 0, "op_name": "context_attention", "head_dim": 128,
              "kv_cache_dtype": "bfloat16", "step": 0, "latency": 1.0}
    heads = [(h, h // g) for h in (8, 16, 32, 48, 64) for g in (1, 2, 4, 8) if h // g >= 1] + [(40, 5), (24, 3)]
    _write(tmp_path / "h100_sxm" / "attention" / "vllm" / "0.24.0" / "context_attention_perf.csv",
           [{**common, "batch_size": b, "isl": s, "num_heads": hq, "num_key_value_heads": hkv}
            for b in (1, 4, 16) for s in (256, 1024, 4096, 16384) for hq, hkv in heads])
    ms = import_aiconfigurator(tmp_path, "h100_sxm", framework="vllm", kinds=("context_attention",))
    rows = [r for r in select(ms, "attention") if r.phase == "prefill"]
    assert len(set(attention_group(rows, "prefill").tolist())) == len(heads)
    base = dict(overhead_s=8e-6, compute_max=0.7, memory_max=0.8, len_half=300.0, parallel_half=20.0)

    def timed(curve: AttentionCurve) -> list:
        out = []
        for r in rows:
            sh = shape_of(r)
            g = float(sh["heads"]) / float(sh["kv_heads"])
            t = curve.time("prefill", float(sh["seq"]), float(sh["batch"]) * float(sh["heads"]), 128.0, r.flops,
                           r.bytes, 989.4e12, 3.35e12, g)
            out.append(dataclasses.replace(r, time_s=float(t)))
        return out

    packed = timed(AttentionCurve(**base, group_half=2.0))
    flat = timed(AttentionCurve(**base))
    assert group_term_helps(packed, H100) and not group_term_helps(flat, H100)
    assert fit_attention(packed, H100, "prefill").group_half == pytest.approx(2.0, rel=0.05)


#: MoE-only table formats and the bytes the importer must count, derived by hand: gpt-oss's MXFP4
#: experts (``w4a16_mxfp4``: 4-bit values plus one 8-bit scale per 32 = 0.53125 bytes per weight,
#: written ``mxfp4``; H200, 64 tokens, 128 experts of 2880, top-4: 256 routed rows, e_act of 128
#: experts) and Marlin's INT4 MoE (``int4_wo``, the path vLLM and SGLang run for INT4 checkpoints
#: such as Kimi-K2.5's, written ``w4a16`` at DType.W4A16's width 0.5 + 2.5 / 128; 8 tokens, 384
#: experts of 2048 split 8 ways, top-8: 64 routed rows). GEMM tables of these formats are not read.
_MOE_ONLY_CASES = {
    "mxfp4": ({"version": "0.24.0", "kernel_source": "vllm_gptossmxfp4moe_triton", "moe_dtype": "w4a16_mxfp4",
               "num_tokens": 64, "hidden_size": 2880, "inter_size": 2880, "topk": 4, "num_experts": 128,
               "moe_tp_size": 1, "latency": 0.1},
              2 * 256 * (2 * 2880 + 8 * 2880) + 128 * (1 - (1 - 4 / 128) ** 64) * 0.53125 * 3 * 2880 * 2880),
    "w4a16": ({"version": "0.19.0", "kernel_source": "vllm_marlin_int4_moe", "moe_dtype": "int4_wo",
               "num_tokens": 8, "hidden_size": 7168, "inter_size": 2048, "topk": 8, "num_experts": 384,
               "moe_tp_size": 8, "latency": 0.05},
              2 * 64 * (2 * 7168 + 8 * 256) + 384 * (1 - (1 - 8 / 384) ** 8) * (0.5 + 2.5 / 128) * 3 * 7168 * 256),
}


@pytest.mark.parametrize("fmt", sorted(_MOE_ONLY_CASES))
def test_moe_only_formats_are_read_with_their_own_width(tmp_path, fmt):
    fields, nbytes = _MOE_ONLY_CASES[fmt]
    row = {"framework": "VLLM", "device": "NVIDIA H200", "op_name": "moe", "moe_ep_size": 1,
           "distribution": MOE_DISTRIBUTION, **fields}
    _write(tmp_path / "h200_sxm" / "moe" / "vllm" / fields["version"] / "moe_perf.csv", [row])
    (r,) = import_aiconfigurator(tmp_path, "h200_sxm", framework="vllm", kinds=("moe",)).rows
    assert shape_of(r)["dtype"] == fmt and r.time_s == pytest.approx(fields["latency"] * 1e-3)
    assert r.bytes == pytest.approx(nbytes)


def test_mxfp4_experts_on_mxfp8_activations_are_another_kernel_path(tmp_path):
    # Blackwell tables also time the MXFP4 experts with activations quantized to MXFP8
    # (``w4a8_mxfp4_mxfp8``): the same weights and width, another kernel, so the path carries a
    # suffix and the two are never one curve's rows
    base = {"framework": "TRTLLM", "version": "1.3.0rc20", "device": "NVIDIA B200", "op_name": "moe",
            "kernel_source": "moe_torch_flow", "num_tokens": 4, "hidden_size": 2880, "inter_size": 2880,
            "topk": 4, "num_experts": 128, "moe_tp_size": 1, "moe_ep_size": 1,
            "distribution": MOE_DISTRIBUTION}
    _write(tmp_path / "b200_sxm" / "moe" / "trtllm" / "1.3.0rc20" / "moe_perf.csv",
           [{**base, "moe_dtype": "w4a16_mxfp4", "latency": 0.181},
            {**base, "moe_dtype": "w4a8_mxfp4_mxfp8", "latency": 0.052}])
    a16, a8 = import_aiconfigurator(tmp_path, "b200_sxm", framework="trtllm", kinds=("moe",)).rows
    assert shape_of(a16)["dtype"] == shape_of(a8)["dtype"] == "mxfp4" and a16.bytes == a8.bytes
    assert shape_of(a16)["kernel"] == "moe_torch_flow"
    assert shape_of(a8)["kernel"] == "moe_torch_flow" + MXFP8_KERNEL_SUFFIX


def test_moe_curves_whose_ceiling_is_far_below_the_formats_peak_are_fitted():
    # MXFP4 experts on 16-bit activations compute at the BF16 rate, a small fraction of the FP4
    # peak an ``mxfp4`` curve is measured against. Rows timed by such a curve (ceiling 0.06 of the
    # B200's FP4 peak, gpt-oss-like shapes) are fitted within 5% on held-out shape groups; started
    # at a ceiling of 0.8 alone the fit leaves the compute term behind (kernel_fit.MOE_CEILING_STARTS)
    hw = get_hardware("b200")
    true = GemmCurve(overhead_s=2.5e-5, compute_max=0.06, rows_half=20.0, weight_half=1e6, memory=0.5, per_expert=True)
    peak = gemm_peak_flops(hw, "mxfp4")
    rows = []
    for h, inter, E, topk in ((2880, 2880, 128, 4), (2880, 2880, 32, 4), (4096, 1536, 64, 8), (2048, 768, 128, 8),
                              (5120, 2048, 64, 6), (3072, 1024, 256, 8)):
        for tokens in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192):
            c = tokens * topk
            eact = E * (1.0 - (1.0 - topk / E) ** tokens)
            W = c * (6 * h * inter + 6 * inter)
            Q = 2.0 * c * (2 * h + 8 * inter) + eact * 0.53125 * 3 * h * inter
            t = float(true.time(c, 3.0 * inter, float(h), W, Q, peak, hw.memory_bandwidth, float(E)))
            rows.append(Measurement(kind="moe", phase="decode" if tokens <= 64 else "prefill", flops=W, bytes=Q,
                                    time_s=t, rows=c, name=f"m={c} n={3 * inter} k={h} dtype=mxfp4 tokens={tokens} "
                                    f"experts={E} topk={topk} inter={inter} tp=1 kernel=k runtime=trtllm-1.3.0rc20"))
    held: list = []
    curves = fit_moe_curves(MeasurementSet(tuple(rows), {}), hw, "moe", 0, held, source="test", fit_date="2026-11-27")
    assert held[0].median < 0.05 and curves["mxfp4"].compute_max < 0.2
    one_start = fit_gemm(rows, hw, "mxfp4", per_expert=True)
    t = np.array([r.time_s for r in rows])
    d = [float(one_start.time(r.rows, float(shape_of(r)["n"]), float(shape_of(r)["k"]), r.flops, r.bytes, peak,
                              hw.memory_bandwidth, float(shape_of(r)["experts"]))) for r in rows]
    assert np.median(np.abs(np.array(d) / t - 1)) > 0.05
