"""AMD measured GEMM profiles fitted to AITER's tuned-GEMM tables (benchmarks/aiter_profiles.py),
and the AITER table importer on small tables written here in the public layout (the columns of
``ROCm/aiter`` ``aiter/configs/*tuned*gemm*.csv`` at e4048607)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from serveplan.calibrate.importers import import_aiter, shape_of
from serveplan.errors import SpecError
from serveplan.estimator.operators import gemm_time
from serveplan.specs.catalog import get_hardware, get_profile

#: Held-out P90 |relative error| of the curves (benchmarks/results/aiter-kernel-validation.md, seed 0).
P90 = {("mi300x", "fp8_block"): 0.202, ("mi355x", "bf16"): 0.326, ("mi355x", "fp8"): 0.294}


def test_amd_devices_take_the_aiter_profiles() -> None:
    assert get_profile(hardware="mi300x").name == "measured-mi300x"
    assert get_profile(hardware="mi355x").name == "measured-mi355x"
    # the MI325X (same gfx942 die and CU count) borrows the MI300X curves
    assert get_profile(hardware="mi325x").kernels == get_profile("measured-mi300x").kernels
    k300 = get_profile("measured-mi300x").kernels
    k355 = get_profile("measured-mi355x").kernels
    assert k300 is not None and k355 is not None
    # gfx942: only block-scaled FP8 is in the tables; per-tensor FP8 and bf16 keep default-gpu's factors
    assert set(k300.gemm) == {"fp8_block"}
    assert k300.gemm_curve("fp8") is None and k300.gemm_curve("bf16") is None
    assert set(k355.gemm) == {"bf16", "fp8", "fp8_block", "fp4"}
    assert k355.gemm_curve("mxfp4") is k355.gemm["fp4"]
    assert not k300.attention and not k300.collectives   # attention and collectives: default-gpu factors
    for k in (k300, k355):
        for c in k.gemm.values():
            assert c.quant_bytes == 0.0   # AITER times the GEMM on quantized activations
            assert c.provenance is not None and c.provenance.held_out_median is not None


@pytest.mark.parametrize(("hw", "dtype", "m", "n", "k", "us", "tol", "row"), [
    # ROCm/aiter e4048607 aiter/configs/model_configs/a8w8_blockscale_tuned_gemm_qwen36_27b.csv:
    # "gfx942,304,4096,17408,5120,ck,0,0,869.7707,..." and "gfx942,304,128,17408,5120,ck,2,0,58.4366,..."
    ("mi300x", "fp8_block", 4096, 17408, 5120, 869.7707, "median", "qwen36_27b"),
    ("mi300x", "fp8_block", 128, 17408, 5120, 58.4366, "p90", "qwen36_27b"),
    # the same gfx942 rows priced on the MI325X (same CUs and peaks; compute bound at m = 4096)
    ("mi325x", "fp8_block", 4096, 17408, 5120, 869.7707, "median", "qwen36_27b"),
    # aiter/configs/a8w8_tuned_gemm.csv: "gfx950,256,128,28672,8192,torch.float8_e4m3fn,41,0,60.0008,..."
    ("mi355x", "fp8", 128, 28672, 8192, 60.0008, "median", "a8w8_tuned_gemm"),
    # aiter/configs/model_configs/llama70B_bf16_tuned_gemm.csv: "gfx950,256,4096,8192,7168,...,asm,10,1,326.7272,..."
    ("mi355x", "bf16", 4096, 8192, 7168, 326.7272, "p90", "llama70B_bf16_tuned_gemm"),
])
def test_curve_matches_an_aiter_row(hw: str, dtype: str, m: int, n: int, k: int, us: float, tol: str,
                                    row: str) -> None:
    prof = get_profile(hardware=hw)
    curve = prof.kernels.gemm[dtype] if prof.kernels else None
    assert curve is not None and curve.provenance is not None and curve.provenance.held_out_median is not None
    bound = curve.provenance.held_out_median if tol == "median" else P90[("mi300x" if hw == "mi325x" else hw, dtype)]
    t = gemm_time(m, n, k, hardware=get_hardware(hw), profile=prof, dtype=dtype, phase="prefill")
    assert t.model.startswith(f"curve gemm {dtype}")
    assert abs(t.time_s / (us * 1e-6) - 1) <= bound, (row, t.time_s * 1e6, us)


def _write(path: Path, header: list[str], rows: list[list[object]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def test_import_aiter_filters_formats_and_keeps_the_fastest(tmp_path: Path) -> None:
    cfg = tmp_path / "aiter" / "configs"
    a8 = ["gfx", "cu_num", "M", "N", "K", "libtype", "kernelId", "splitK", "us", "kernelName", "tflops", "bw",
          "errRatio"]
    _write(cfg / "model_configs" / "a8w8_blockscale_tuned_gemm_x.csv", a8, [
        ["gfx942", 304, 128, 4096, 4096, "ck", 1, 0, 20.0, "a8w8_blockscale_k", 1, 1, 0.0],
        ["gfx942", 80, 128, 4096, 4096, "ck", 1, 0, 50.0, "a8w8_blockscale_k", 1, 1, 0.0],     # MI308X: other CUs
        ["gfx942", 304, 256, 4096, 4096, "ck", 1, 0, 25.0, "a8w8_blockscale_k", 1, 1, 0.5],    # wrong result
    ])
    _write(cfg / "a8w8_blockscale_tuned_gemm.csv", a8, [
        ["gfx942", 304, 128, 4096, 4096, "ck", 2, 0, 18.0, "a8w8_blockscale_k2", 1, 1, 0.0],   # faster: kept
    ])
    bf = ["gfx", "cu_num", "M", "N", "K", "bias", "dtype", "outdtype", "scaleAB", "bpreshuffle", "libtype", "solidx",
          "splitK", "us"]
    _write(cfg / "model_configs" / "m_bf16_tuned_gemm.csv", bf, [
        ["gfx942", 304, 64, 8192, 8192, "False", "torch.bfloat16", "torch.bfloat16", "False", "False", "asm", 1, 0,
         30.0],
        ["gfx942", 304, 64, 8192, 1024, "True", "torch.bfloat16", "torch.bfloat16", "False", "False", "asm", 1, 0,
         9.0],   # with bias: no curve
    ])
    _write(cfg / "model_configs" / "m_bf16_untuned_gemm.csv", ["M", "N", "K"], [[1, 2, 3]])
    ms = import_aiter(tmp_path, cu_num=304, gfx="gfx942")
    got = sorted((shape_of(r)["dtype"], int(r.rows), round(r.time_s * 1e6, 3), shape_of(r)["table"]) for r in ms.rows)
    assert got == [("bf16", 64, 30.0, "m_bf16_tuned_gemm"), ("fp8_block", 128, 18.0, "a8w8_blockscale_tuned_gemm")]
    fp8 = next(r for r in ms.rows if shape_of(r)["dtype"] == "fp8_block")
    assert fp8.flops == 2 * 128 * 4096 * 4096
    with pytest.raises(SpecError, match="no AITER"):
        import_aiter(tmp_path, cu_num=256, gfx="gfx950")
