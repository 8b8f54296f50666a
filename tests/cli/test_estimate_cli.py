"""``serveplan estimate``: output contract and one-line errors with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from serveplan.cli import app

runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, list(args))


def test_default_is_todays_engine_and_prints_a_table():
    r = run("estimate")
    assert r.exit_code == 0, r.output
    # Llama-3.1-70B on H100 priced as vLLM runs it, on the smallest TP that fits (as simulate picks it)
    assert "llama-3.1-70b on h100-sxm (2 devices: tp2" in r.output and "as vllm 0.33.0 runs it" in r.output
    assert "attention" in r.output and "TOTAL" in r.output
    bs = run("estimate", "--engine", "bestserve", "-m", "codellama-34b", "-H", "ascend-910b3", "--tp", "4")
    assert bs.exit_code == 0 and "codellama-34b" in bs.output


def test_json_has_the_documented_keys():
    r = run("estimate", "--json", "-n", "64")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["total_s"] > 0
    assert {"name", "dispatch_s", "compute_s", "comm_s"} <= set(d["modules"][0])
    assert {"weights_bytes", "kv_bytes_per_token"} <= set(d["memory"])
    assert d["static"]["ttft_s"] == pytest.approx(d["total_s"])


def test_decode_phase_json():
    r = run("estimate", "--phase", "decode", "--context-len", "2111", "--json")
    d = json.loads(r.output)
    assert d["phase"] == "decode" and d["context_len"] == 2111


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--model", "lama-2-7b"], "did you mean 'llama-2-7b'"),
        (["--hardware", "h10-sxm"], "did you mean 'h100-sxm'"),
        (["--model", "llama-2-7b", "--tp", "3"], "tp=3 must divide num_attention_heads=32"),
        (["--input-len", "0"], "input_len=0"),
        (["--batch", "-2"], "batch=-2"),
        (["--phase", "decode", "--context-len", "0"], "context_len=0"),
        (["--dtype", "fp12"], "unknown dtype 'fp12'"),
        (["--output-len", "0"], "output_len=0"),
        (["--phase", "middle"], "phase='middle'"),
        (["--profile", "nope"], "unknown profile 'nope'"),
    ],
)
def test_bad_input_is_one_line_exit_2(args, needle):
    r = run("estimate", *args)
    assert r.exit_code == 2, r.output
    err = r.stderr if hasattr(r, "stderr") and r.stderr else r.output
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    assert needle in lines[0]
    assert "Traceback" not in r.output


def test_malformed_config_json(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    r = run("estimate", "--model", str(bad))
    assert r.exit_code == 2
    assert "not valid JSON" in (r.stderr or r.output)


def test_config_json_with_unsupported_type(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "gpt2", "hidden_size": 768}))
    r = run("estimate", "--model", str(cfg))
    assert r.exit_code == 2
    assert "model_type='gpt2' is not supported" in (r.stderr or r.output)


def test_config_json_missing_field(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32}))
    r = run("estimate", "--model", str(cfg))
    assert r.exit_code == 2
    assert "'intermediate_size' is missing" in (r.stderr or r.output)


def test_any_hf_config_loads_offline(tmp_path):
    cfg = {"model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
           "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000, "torch_dtype": "bfloat16"}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    r = run("estimate", "--model", str(p), "--hardware", "h100-sxm", "--tp", "1", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["total_s"] > 0


def test_weights_that_do_not_fit_exit_3():
    r = run("estimate", "--model", "llama-3.1-405b", "--hardware", "a100-40g", "--tp", "1")
    assert r.exit_code == 3
    assert "infeasible" in (r.stderr or r.output)


def test_console_script_runs_without_traceback():
    out = subprocess.run([sys.executable, "-m", "serveplan", "estimate", "--tp", "5"], capture_output=True, text=True)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr and out.stderr.startswith("error:")


@pytest.mark.parametrize("args, needle", [
    (["estimate", "--tp", "abc"], "tp='abc' must be an integer"),
    (["simulate", "--bogus"], "No such option: --bogus"),
])
def test_usage_errors_are_one_line_exit_2(args, needle):
    out = subprocess.run([sys.executable, "-m", "serveplan", *args], capture_output=True, text=True)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], out.stderr


def test_unwritable_output_is_one_line_exit_2():
    out = subprocess.run([sys.executable, "-m", "serveplan", "optimize", "--num-requests", "100", "--devices", "4",
                          "--tp", "4", "--out", "/proc/forbidden/x"], capture_output=True, text=True)
    assert out.returncode == 2 and out.stderr.startswith("error: cannot access"), out.stderr


def test_estimate_engine_prices_its_operator_list_and_refuses_an_unknown_engine():
    base = ["estimate", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--tp", "1", "--json"]
    plain = json.loads(runner.invoke(app, [*base, "--engine", "bestserve"]).stdout)   # BestServe's eager list
    r = runner.invoke(app, [*base, "--engine", "sglang"])
    assert r.exit_code == 0, r.output
    fused = json.loads(r.stdout)
    assert fused["total_s"] < plain["total_s"]
    assert "qkv_proj" in {op["name"] for op in fused["ops"]}
    bad = runner.invoke(app, [*base, "--engine", "vlm"])
    assert bad.exit_code == 2
    assert "unknown engine 'vlm'" in bad.output and "vllm" in bad.output
