"""Calibration fit: recovers known factors, reports failures, matches the estimator."""

from __future__ import annotations

import numpy as np
import pytest

from serveplan import Estimator, StepBatch, get_hardware, get_model, get_profile
from serveplan.calibrate.fit import FAMILIES, PHASES, StepComposer, calibrate, fit_kernels, profile_yaml
from serveplan.errors import SolverError, SpecError
from serveplan.specs.catalog import get_profile as load_profile
from serveplan.specs.profile import Module

from calibrate_synthetic import TRUE_DECODE, TRUE_DISPATCH, TRUE_LAUNCH, TRUE_PREFILL, synthetic, true_profile

SMALL_GRID_P = [(1, 256), (4, 1024), (8, 2048)]
SMALL_GRID_D = [(1, 512), (16, 1024), (128, 2048), (512, 512)]


def _calibrate(ms, **kw):
    return calibrate(ms, get_hardware("a100-80g"), get_model("llama-2-7b"), base=true_profile(), dtype="fp16",
                     prefill_grid=SMALL_GRID_P, decode_grid=SMALL_GRID_D, folds=0, samples=3, **kw)


def test_calibration_recovers_known_factors_within_5_percent(synthetic_set):
    cal = _calibrate(synthetic_set)
    p = cal.profile
    assert p.prefill.compute == pytest.approx(TRUE_PREFILL[0], rel=0.05)
    assert p.prefill.memory == pytest.approx(TRUE_PREFILL[1], rel=0.05)
    assert p.decode.compute == pytest.approx(TRUE_DECODE[0], rel=0.05)
    assert p.decode.memory == pytest.approx(TRUE_DECODE[1], rel=0.05)
    for m, v in TRUE_DISPATCH.items():
        assert p.dispatch(m) == pytest.approx(v, rel=0.05), m
    assert cal.tied.params["launch_s"] == pytest.approx(TRUE_LAUNCH, rel=0.05)


def test_recovery_holds_for_other_noise_seeds():
    for seed in (1, 2):
        p = _calibrate(synthetic(seed=seed)).profile
        got = [p.prefill.compute, p.prefill.memory, p.decode.compute, p.decode.memory]
        want = [*TRUE_PREFILL, *TRUE_DECODE]
        assert np.allclose(got, want, rtol=0.05), (seed, got)


def test_uncertainty_is_reported_and_small_for_clean_data(synthetic_set):
    p = _calibrate(synthetic_set).profile
    for key in ("prefill.compute", "decode.memory", "dispatch.attention"):
        assert 0 < p.uncertainty[key] < 0.05 * (p.dispatch(Module.ATTENTION) if key.startswith("dispatch") else 1)


def test_family_fit_of_tied_truth_gives_equal_families(synthetic_set):
    f = fit_kernels(synthetic_set, get_hardware("a100-80g"), dtype="fp16", form="family")
    for fam in ("matmul", "stream"):
        assert f.efficiency("decode", fam)[1] == pytest.approx(TRUE_DECODE[1], rel=0.05)


def test_cross_validation_reports_both_forms(synthetic_set):
    cal = calibrate(synthetic_set, get_hardware("a100-80g"), get_model("llama-2-7b"), base=true_profile(),
                    dtype="fp16", prefill_grid=SMALL_GRID_P, decode_grid=SMALL_GRID_D, folds=3, samples=0)
    cv = cal.summary()["cross_validation"]
    assert set(cv["median_abs"]) == {"tied", "family"}
    assert cv["median_abs"]["tied"] < 0.06   # 5% noise: held-out error about the noise level


def test_profile_yaml_round_trips_through_profile_from_dict(synthetic_set, tmp_path):
    cal = _calibrate(synthetic_set)
    path = tmp_path / "cal.yaml"
    path.write_text(profile_yaml(cal, "llama-2-7b"))
    loaded = load_profile(str(path))
    assert loaded.prefill == cal.profile.prefill and loaded.decode == cal.profile.decode
    assert loaded.uncertainty == pytest.approx(dict(cal.profile.uncertainty))
    assert loaded.dispatch(Module.MLP) == pytest.approx(cal.profile.dispatch(Module.MLP))


def test_composer_with_equal_families_reproduces_the_estimator():
    m, hw = get_model("llama-2-7b"), get_hardware("a100-80g")
    prof = true_profile()
    batches = [StepBatch.prefill(2, 512), StepBatch.decode(32, 1024), StepBatch.decode(1, 128)]
    comp = StepComposer(m, hw, prof, batches)
    eff = {(ph, f): (getattr(prof, ph).compute, getattr(prof, ph).memory) for ph in PHASES for f in FAMILIES}
    got = comp.times(eff, prof.dispatch_s)
    est = Estimator(m, hw, prof)
    assert got == pytest.approx([est.time(b) for b in batches], rel=1e-9)


def test_composer_reproduces_eager_attention_with_kappa_rates():
    m, hw = get_model("codellama-34b"), get_hardware("ascend-910b3")
    prof = get_profile("bestserve-910b3")
    batches = [StepBatch.prefill(1, 2048), StepBatch.decode(4, 2111)]
    comp = StepComposer(m, hw, prof, batches)
    eff = {(ph, f): (getattr(prof, ph).compute, getattr(prof, ph).memory) for ph in PHASES for f in FAMILIES}
    est = Estimator(m, hw, prof)
    assert comp.times(eff, prof.dispatch_s) == pytest.approx([est.time(b) for b in batches], rel=1e-9)


def test_a_fit_that_cannot_converge_raises_solver_error(synthetic_set):
    with pytest.raises(SolverError, match="did not converge"):
        fit_kernels(synthetic_set, get_hardware("a100-80g"), dtype="fp16", max_nfev=1)


def test_too_few_points_is_a_spec_error(synthetic_set):
    few = synthetic_set.subset(range(3))
    with pytest.raises(SpecError, match="too few points"):
        fit_kernels(few, get_hardware("a100-80g"), dtype="fp16")
