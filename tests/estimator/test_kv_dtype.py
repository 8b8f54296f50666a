"""The KV-cache format is separate from the weights' format: capacity and attention traffic."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from serveplan import DType, Estimator, ParallelConfig, SpecError, get_hardware, get_model, get_profile
from serveplan.cli import app
from serveplan.estimator.api import estimate
from serveplan.estimator.batch import StepBatch


def _est(**kw):
    return Estimator(get_model("llama-3.1-8b"), get_hardware("h100-sxm"), get_profile("default-gpu"),
                     ParallelConfig(tp=1), **kw)


def test_fp8_kv_halves_bytes_per_token_and_keeps_weights():
    bf16 = _est(dtype="bf16")
    fp8 = _est(dtype="bf16", kv_dtype="fp8")
    # Llama-3.1-8B: 32 layers x 2 (K, V) x 8 KV heads x 128 = 65,536 values/token -> 131,072 B in bf16
    assert bf16.memory.kv_bytes_per_token == 131_072
    assert fp8.memory.kv_bytes_per_token == 65_536
    assert fp8.memory.weights_bytes == bf16.memory.weights_bytes


def test_fp8_kv_doubles_capacity():
    bf16, fp8 = _est(dtype="fp8"), _est(dtype="fp8", kv_dtype="fp8")
    assert bf16.kv_dtype is DType.BF16  # default under 8-bit weights: vLLM "auto" keeps 16-bit KV
    # same free memory divided by half the bytes per token (floor of each division)
    assert fp8.memory.kv_capacity_tokens == pytest.approx(2 * bf16.memory.kv_capacity_tokens, abs=2)


def test_fp8_kv_makes_long_context_decode_faster():
    b = StepBatch.decode(64, 32_768)
    t16 = _est(dtype="fp8").time(b)
    t8 = _est(dtype="fp8", kv_dtype="fp8").time(b)
    # 64 x 32k keys x 131 KB = 275 GB of bf16 KV read per step dominates the 8 GB of weights
    assert t8 < 0.7 * t16


def test_weight_only_format_is_not_a_kv_format():
    with pytest.raises(SpecError, match="kv_dtype='w4a16' is not a KV-cache format"):
        _est(kv_dtype="w4a16")


def test_estimate_api_and_cli_report_kv_dtype():
    res = estimate("llama-3.1-8b", "h100-sxm", parallel=ParallelConfig(tp=1), dtype="fp8", kv_dtype="fp8")
    assert res.kv_dtype == "fp8" and res.to_dict()["kv_dtype"] == "fp8"
    r = CliRunner().invoke(app, ["estimate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--tp", "1",
                                 "--dtype", "fp8", "--kv-dtype", "fp8", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["kv_dtype"] == "fp8" and d["memory"]["kv_bytes_per_token"] == 65_536


def test_cli_bad_kv_dtype_is_one_line_exit_2():
    r = CliRunner().invoke(app, ["estimate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--tp", "1",
                                 "--kv-dtype", "fp5"])
    assert r.exit_code == 2
    assert "unknown dtype 'fp5'" in r.output
