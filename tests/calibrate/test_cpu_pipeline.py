"""Reduced calibration pipeline on this CPU (the CI version of benchmarks/calibration/acceptance.py):
micro-benchmarks -> calibrate -> predict steps of a small Hugging Face Llama with random weights."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch", reason="needs torch (pip install torch==2.13.0, the CPU build)")
pytest.importorskip("transformers", reason="needs transformers to run the small Llama model")

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "calibration"


def _acceptance():
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("calibration_acceptance", BENCH / "acceptance.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def summary(tmp_path_factory):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return _acceptance().run(tmp_path_factory.mktemp("cal"), quick=True, threads=1, reuse=False)


def test_reduced_pipeline_predicts_the_model_steps(summary):
    # the reduced sweep profiles one layer shape at few sizes; the full run in
    # benchmarks/calibration/ is the acceptance check (docs/validation.md, "Calibration")
    assert summary["median_abs_error"] <= 0.30, summary
    assert summary["prefill_median_abs_error"] <= 0.25, summary


def test_per_size_matmul_curve_bounds_every_step(summary):
    # constant factors cannot follow MKL's slow 4-16-row fp32 GEMMs (decode batch 8 is ~60%
    # under); the kernel fit's per-size curve, composed on the same op tables, does
    assert summary["curve_max_abs_error"] <= 0.40, summary
    assert summary["curve_median_abs_error"] <= 0.20, summary


def test_reduced_pipeline_is_quick(summary):
    t = summary["timings_s"]
    assert t["profile_s"] + t["calibrate_s"] < 45, t


def test_measurements_record_the_environment(summary):
    md = summary["calibration"]["measurements"]
    assert md["device"] == "cpu" and md["threads"] == "1" and md["torch_version"] == torch.__version__
    assert md["device_name"]
