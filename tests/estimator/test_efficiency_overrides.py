"""Size-dependent GEMM efficiency from a calibrated profile (``matmul_size_curve``)."""

from __future__ import annotations

import math

import pytest

from serveplan import Estimator, ParallelConfig, SpecError, StepBatch, get_hardware, get_model, get_profile
from serveplan.specs.profile import profile_from_dict

CURVE = {"decode": {"rows": [1, 4, 16, 64], "time_over_roofline": [2.0, 4.0, 3.0, 1.5]}}


def _est(curve=None):
    base = get_profile("default-gpu").to_dict()
    if curve:
        base["matmul_size_curve"] = curve
    pr = profile_from_dict(base)
    return Estimator(get_model("llama-2-7b"), get_hardware("a100-80g"), pr, ParallelConfig())


def test_gemm_time_is_ratio_times_peak_roofline():
    est = _est(CURVE)
    res = est.estimate(StepBatch.decode(4, 1024))
    op = next(o for o in res.ops if o.name == "gate_proj")
    hw = est.hardware
    peak = max(op.flops / hw.flops(est.dtype), op.bytes / hw.memory_bandwidth)
    assert op.time_s == pytest.approx(4.0 * peak, rel=1e-12)  # 4 rows -> ratio 4.0 exactly


def test_ratio_interpolates_in_log_rows_and_clamps():
    est = _est(CURVE)
    hw = est.hardware
    for b, ratio in ((2, 3.0), (8, 3.5), (128, 1.5)):  # log-midpoints of (1,4) and (4,16); beyond 64: 1.5
        op = next(o for o in est.estimate(StepBatch.decode(b, 512)).ops if o.name == "down_proj")
        peak = max(op.flops / hw.flops(est.dtype), op.bytes / hw.memory_bandwidth)
        assert op.time_s == pytest.approx(ratio * peak, rel=1e-9)


def test_non_gemm_ops_and_other_phase_keep_the_factors():
    plain, curved = _est(), _est(CURVE)
    b = StepBatch.decode(4, 1024)
    a = {o.name: o.time_s for o in plain.estimate(b).ops}
    c = {o.name: o.time_s for o in curved.estimate(b).ops}
    assert c["input_norm.pow"] == a["input_norm.pow"] and c["decode.attention"] == a["decode.attention"]
    p = StepBatch.prefill(1, 512)  # no prefill curve: unchanged
    assert math.isclose(plain.time(p), curved.time(p), rel_tol=1e-12)


def test_vectorised_decode_matches_single_steps():
    from serveplan.estimator.static import decode_times

    est = _est(CURVE)
    vec = decode_times(est, 8, 100, 5)
    single = [est.step_time(est.features(StepBatch.decode(8, 100 + i))) for i in range(5)]
    assert vec == pytest.approx(single, rel=1e-12)


def test_bad_curve_is_a_spec_error():
    with pytest.raises(SpecError, match="rows must be positive and increasing"):
        _est({"decode": {"rows": [4, 1], "time_over_roofline": [1, 2]}})


def test_attention_factors_apply_to_attention_kernels_only():
    base = get_profile("default-gpu").to_dict()
    base["decode"] = dict(base["decode"], attention_memory=0.35)  # half of the decode MBU 0.7
    pr = profile_from_dict(base)
    plain = _est()
    est = Estimator(get_model("llama-2-7b"), get_hardware("a100-80g"), pr, ParallelConfig())
    b = StepBatch.decode(16, 4096)
    a = {o.name: o for o in plain.estimate(b).ops}
    c = {o.name: o for o in est.estimate(b).ops}
    assert c["decode.attention"].memory_s == pytest.approx(2 * a["decode.attention"].memory_s)
    assert c["gate_proj"].time_s == a["gate_proj"].time_s
    assert pr.to_dict()["decode"]["attention_memory"] == 0.35
