"""Prediction bands: seeded, ordered, and driven by the stored uncertainty."""

from __future__ import annotations

import pytest

from serveplan import Estimator, StepBatch, get_hardware, get_model, get_profile
from serveplan.calibrate.bands import band, sample_profiles
from serveplan.errors import SpecError


@pytest.fixture(scope="module")
def setup():
    prof = get_profile("default-gpu").with_(uncertainty={"prefill.compute": 0.05, "decode.memory": 0.04,
                                                         "dispatch.attention": 5e-6})
    return get_model("llama-2-7b"), get_hardware("a100-80g"), prof


def test_same_seed_same_band(setup):
    m, hw, prof = setup
    f = lambda p: Estimator(m, hw, p).time(StepBatch.prefill(2, 1024))  # noqa: E731
    assert band(f, prof, samples=40, seed=3) == band(f, prof, samples=40, seed=3)


def test_band_brackets_the_nominal_prediction(setup):
    m, hw, prof = setup
    b = band(lambda p: Estimator(m, hw, p).time(StepBatch.prefill(2, 1024)), prof, samples=100)
    assert b.p10 < b.p50 < b.p90
    assert b.p10 <= b.nominal <= b.p90


def test_a_factor_without_uncertainty_stays_fixed(setup):
    m, hw, prof = setup
    for p in sample_profiles(prof, 20, seed=1):
        assert p.prefill.memory == prof.prefill.memory and p.decode.compute == prof.decode.compute
        assert 0 < p.prefill.compute <= 1


def test_compute_bound_prefill_band_scales_with_mfu_uncertainty(setup):
    m, hw, prof = setup
    f = lambda p: Estimator(m, hw, p).time(StepBatch.prefill(8, 2048))  # noqa: E731
    narrow = band(f, prof.with_(uncertainty={"prefill.compute": 0.01}), samples=200)
    wide = band(f, prof.with_(uncertainty={"prefill.compute": 0.06}), samples=200)
    assert (wide.p90 - wide.p10) > 3 * (narrow.p90 - narrow.p10)


def test_overlap_says_when_two_predictions_cannot_be_told_apart(setup):
    m, hw, prof = setup
    a = band(lambda p: Estimator(m, hw, p).time(StepBatch.prefill(1, 1024)), prof, samples=50)
    b = band(lambda p: Estimator(m, hw, p).time(StepBatch.prefill(1, 1040)), prof, samples=50)
    c = band(lambda p: Estimator(m, hw, p).time(StepBatch.prefill(4, 2048)), prof, samples=50)
    assert a.overlaps(b) and not a.overlaps(c)


def test_profile_without_uncertainty_is_a_spec_error():
    with pytest.raises(SpecError, match="no uncertainty"):
        sample_profiles(get_profile("default-gpu"), 5)


def test_unknown_uncertainty_key_is_a_spec_error():
    with pytest.raises(SpecError, match="uncertainty key"):
        sample_profiles(get_profile("default-gpu").with_(uncertainty={"prefill.mfu": 0.1}), 5)
