"""One kernel per aiconfigurator table (calibrate/selection.py): the rules the bundled profiles
and `serveplan calibrate --from aiconfigurator` apply before a fit (synthetic rows)."""

from __future__ import annotations

from serveplan.calibrate import selection as sel
from serveplan.calibrate.importers import MXFP8_KERNEL_SUFFIX, shape_of
from serveplan.calibrate.measurements import Measurement, MeasurementSet


def test_one_fused_moe_kernel_per_format_the_one_timed_on_most_shapes():
    def row(kernel, dt, ver="0.24.0", kind="moe"):
        return Measurement(kind=kind, phase="prefill", flops=1.0, bytes=1.0, time_s=1.0, rows=1,
                           name=f"m=1 n=1 k=1 dtype={dt} kernel={kernel} runtime=vllm-{ver}")

    rows = ([row("a", "fp8")] * 3 + [row("b", "fp8")] * 2 + [row("c", "bf16")] * 2 + [row("d", "fp8", "0.19.0")]
            + [row("c", "bf16", "0.19.0")] * 2                       # a tie: the newer collection
            + [row("modeloptfp8", "fp8_block")] * 5 + [row("triton", "fp8_block", "0.19.0")]   # checkpoint method out
            + [row("compressedtensors", "fp4")] * 2                  # the only fp4 path: kept
            + [row("x", "bf16", kind="gemm")])
    kept = sel.one_moe_path_per_format(MeasurementSet(tuple(rows), {})).rows
    assert sorted(sd_shape(r) for r in kept if r.kind == "moe") == (
        [("bf16", "c", "vllm-0.24.0")] * 2 + [("fp4", "compressedtensors", "vllm-0.24.0")] * 2
        + [("fp8", "a", "vllm-0.24.0")] * 3 + [("fp8_block", "triton", "vllm-0.19.0")])
    assert sum(r.kind == "gemm" for r in kept) == 1


def sd_shape(r):
    return shape_of(r)["dtype"], shape_of(r)["kernel"], shape_of(r)["runtime"]


def test_one_collection_per_gemm_and_attention_table():
    # vLLM's B200 tables hold vLLM 0.22.0 and 0.24.0 collections of every attention table: per
    # kind, phase and format the version with most rows is kept (the newer on a tie); other kinds
    # (collectives, fused MoE) pass through
    def row(kind, phase, ver, **shape):
        name = " ".join(f"{k}={v}" for k, v in {**shape, "runtime": f"vllm-{ver}"}.items())
        return Measurement(kind=kind, phase=phase, flops=1.0, bytes=1.0, time_s=1.0, rows=1, name=name)

    att = dict(batch=1, seq=8, heads=8, kv_heads=8, head_dim=128)
    rows = ([row("attention", "prefill", "0.22.0", kv_dtype="fp8", **att)] * 3
            + [row("attention", "prefill", "0.24.0", kv_dtype="fp8", **att)] * 2        # fewer rows: out
            + [row("attention", "decode", "0.22.0", kv_dtype="fp8", **att)] * 2
            + [row("attention", "decode", "0.24.0", kv_dtype="fp8", **att)] * 2         # a tie: the newer
            + [row("gemm", "prefill", "0.9.0", m=1, n=1, k=1, dtype="bf16")] * 2
            + [row("gemm", "decode", "0.10.0", m=1, n=1, k=1, dtype="bf16")]           # one GEMM table per format
            + [row("moe", "prefill", "0.19.0", m=1, n=1, k=1, dtype="fp8", kernel="a")])
    kept = sel.one_collection_per_table(MeasurementSet(tuple(rows), {})).rows
    got = sorted((r.kind, r.phase, shape_of(r)["runtime"]) for r in kept)
    assert got == ([("attention", "decode", "vllm-0.24.0")] * 2 + [("attention", "prefill", "vllm-0.22.0")] * 3
                   + [("gemm", "prefill", "vllm-0.9.0")] * 2 + [("moe", "prefill", "vllm-0.19.0")])
    # TensorRT-LLM's and SGLang's FP8-KV context tables time a 16-bit and an FP8 kernel: the one
    # computing in the KV format is kept even with fewer rows; a 16-bit KV table keeps its kernel
    ctx = ([row("attention", "prefill", "1.3.0", kv_dtype="fp8", q_dtype="bf16", **att)] * 9
           + [row("attention", "prefill", "1.3.0", kv_dtype="fp8", q_dtype="fp8", **att)]
           + [row("attention", "prefill", "1.3.0", kv_dtype="bf16", q_dtype="bf16", **att)] * 2)
    kept = sel.one_collection_per_table(MeasurementSet(tuple(ctx), {})).rows
    assert sorted((shape_of(r)["kv_dtype"], shape_of(r)["q_dtype"]) for r in kept) == (
        [("bf16", "bf16")] * 2 + [("fp8", "fp8")])


def test_mxfp4_experts_take_the_path_on_the_engines_default_activations():
    # TensorRT-LLM and SGLang run MXFP4 experts on MXFP8 activations on Blackwell, vLLM on BF16
    # (selection.MXFP8_ACTIVATION_ENGINES): that path is kept even where the other one was timed on
    # more shapes; a table without it (Hopper) keeps its 16-bit path
    def row(kernel, runtime):
        return Measurement(kind="moe", phase="decode", flops=1.0, bytes=1.0, time_s=1.0, rows=1,
                           name=f"m=1 n=1 k=1 dtype=mxfp4 kernel={kernel} runtime={runtime}")

    a8 = "moe_torch_flow" + MXFP8_KERNEL_SUFFIX
    for runtime, rows, want in (
            ("trtllm-1.3.0rc20", [row("moe_torch_flow", "trtllm-1.3.0rc20")] * 3 + [row(a8, "trtllm-1.3.0rc20")],
             a8),
            ("sglang-0.5.14", [row("fi", "sglang-0.5.14")] * 3 + [row("fi" + MXFP8_KERNEL_SUFFIX, "sglang-0.5.14")],
             "fi" + MXFP8_KERNEL_SUFFIX),
            ("vllm-0.24.0", [row("fi_bf16", "vllm-0.24.0")] + [row("fi" + MXFP8_KERNEL_SUFFIX, "vllm-0.24.0")] * 3,
             "fi_bf16"),
            ("trtllm-1.3.0rc20", [row("moe_torch_flow", "trtllm-1.3.0rc20")] * 2, "moe_torch_flow")):
        kept = sel.one_moe_path_per_format(MeasurementSet(tuple(rows), {})).rows
        assert {shape_of(r)["kernel"] for r in kept} == {want}, runtime


def test_weight_only_int4_experts_take_the_checkpoint_tools_method():
    # INT4 MoE checkpoints run through their tool's method (compressed-tensors WNA16 Marlin), so for
    # w4a16 that path is kept even where a bare kernel path was timed on more shapes
    # (selection.CHECKPOINT_FORMATS); other formats still leave the tool's method out
    def row(kernel, dt, ver):
        return Measurement(kind="moe", phase="decode", flops=1.0, bytes=1.0, time_s=1.0, rows=1,
                           name=f"m=1 n=1 k=1 dtype={dt} kernel={kernel} runtime=vllm-{ver}")

    rows = ([row("vllm_marlin_int4_moe", "w4a16", "0.19.0")] * 5
            + [row("vllm_compressedtensorswna16marlinmoe", "w4a16", "0.24.0")]
            + [row("vllm_modeloptfp8moe", "fp8", "0.24.0")] * 5 + [row("vllm_fused_moe", "fp8", "0.19.0")])
    kept = sel.one_moe_path_per_format(MeasurementSet(tuple(rows), {})).rows
    assert sorted(sd_shape(r) for r in kept) == [("fp8", "vllm_fused_moe", "vllm-0.19.0"),
                                                 ("w4a16", "vllm_compressedtensorswna16marlinmoe", "vllm-0.24.0")]


def test_an_opt_in_moe_backend_is_cut_to_its_own_rows_and_keyed_apart():
    # vLLM's Marlin MXFP4 MoE (selection.MOE_BACKENDS["marlin"]): the rows whose kernel path names
    # Marlin, newest collection only, renamed mxfp4@marlin so that their curve does not replace the
    # format's default path; a table without it gives nothing
    def row(kernel, dt, ver, kv="bf16"):
        return Measurement(kind="moe", phase="decode", flops=1.0, bytes=1.0, time_s=1.0, rows=1,
                           name=f"m=1 n=1 k=1 dtype={dt} kv_dtype={kv} kernel={kernel} runtime=vllm-{ver}")

    rows = ([row("vllm_gptossmxfp4moe_triton", "mxfp4", "0.24.0")] * 3
            + [row("vllm_compressedtensorsw4a4mxfp4moe_marlin", "mxfp4", "0.24.0")] * 2
            + [row("vllm_mxfp4_marlin_old", "mxfp4", "0.19.0")]
            + [row("vllm_compressedtensorswna16marlinmoe", "w4a16", "0.24.0")])
    got = sel.moe_backend_rows(MeasurementSet(tuple(rows), {}), "marlin").rows
    assert len(got) == 2
    assert {(shape_of(r)["dtype"], shape_of(r)["kv_dtype"], shape_of(r)["runtime"]) for r in got} == {
        ("mxfp4@marlin", "bf16", "vllm-0.24.0")}
    assert sel.moe_backend_rows(MeasurementSet(tuple(rows[:3]), {}), "marlin").rows == ()
