"""Every bad input is refused with exit 2 and one line that names the field (option or file key),
the value it got and the range or options expected."""

from __future__ import annotations

import json
import math

import pytest
import yaml
from typer.testing import CliRunner

from serveplan.cli import app

runner = CliRunner()
M, H = "llama-3.2-1b", "h100-sxm"
SIM = ["simulate", "-m", M, "-H", H, "--tp", "1", "-n", "20"]
EST = ["estimate", "-m", M, "-H", H, "--tp", "1"]
OPT = ["optimize", "-m", M, "-H", H, "--devices", "1", "--no-progress", "-j", "1"]
OFF = ["offload", "-m", "opt-6.7b", "-s", "64", "-n", "8"]

# (arguments, what the message must contain: the field with its value, and the expected range)
CLI_CASES = [
    (SIM + ["--seed", "-1"], ["seed=-1", ">= 0"]),
    (SIM + ["--cv", "1e308", "--arrival", "gamma"], ["cv=1e+308", "(0, 100]"]),
    (SIM + ["--cv", "nan", "--arrival", "gamma"], ["cv=nan", "(0, 100]"]),
    (SIM + ["-n", "10000000000"], ["num-requests=10,000,000,000", "1..16,777,216"]),
    (SIM + ["-n", "0"], ["num-requests=0", "1..16,777,216"]),
    (SIM + ["--strategy", "999999999m"], ["num_collocated=999,999,999", "at most 4,096"]),
    (SIM + ["--tp", "100000"], ["tp=100,000", "1..4,096"]),
    (SIM + ["--rate", "nan"], ["rate=nan", "positive"]),
    (SIM + ["--rate", "-1"], ["rate=-1", "positive"]),
    (SIM + ["--prefix-hit", "1.5"], ["prefix_hit=1.5", "[0, 1)"]),
    (SIM + ["--percentile", "150"], ["percentile=150", "(0, 100)"]),
    (SIM + ["--slo-ttft", "0"], ["slo-ttft=0", "positive"]),
    (SIM + ["--band", "-1"], ["band=-1", "0..10,000"]),
    (SIM + ["--scenario", ""], ["scenario=''", "empty"]),
    (SIM + ["--input-len", "200000", "--output-len", "8"], ["200,008 tokens", "max_position_embeddings=131,072"]),
    (SIM + ["--concurrency", "0"], ["concurrency=0", "positive integer"]),
    (EST + ["-s", "1000000"], ["1,000,000 tokens", "max_position_embeddings=131,072", "--allow-long-context"]),
    (EST + ["-b", "0"], ["batch=0", "1..2,147,483,648"]),
    (EST + ["-n", "100000000", "--allow-long-context"], ["output_len=100,000,000", "1..1,000,000"]),
    (EST + ["--seed", "-1"], ["seed=-1", ">= 0"]),
    (EST + ["--band", "--band-samples", "-1"], ["band-samples=-1", "2..100,000"]),
    (EST + ["--tp", "0"], ["tp=0", "1..4,096"]),
    (["estimate", "-H", H, "--op", "gemm", "--m", "0", "--n", "1", "--k", "1"], ["--m=0", "1..1,099,511,627,776"]),
    (["estimate", "-H", H, "--op", "attention", "--heads", "8", "--kv-heads", "16"],
     ["kv_heads=16", "must divide heads=8"]),
    (["estimate", "-H", H, "--op", "allreduce", "--bytes", "nan", "--ranks", "8"], ["--bytes=nan", "positive"]),
    (["estimate", "-H", H, "--op", "allreduce", "--bytes", "1e6", "--ranks", "1"], ["--ranks=1", "2..1,048,576"]),
    (OPT + ["--devices", "100000"], ["devices=100,000", "1..4,096"]),
    (OPT + ["--devices", "4096"], ["4,096", "at most 200,000"]),
    (OPT + ["--seeds", "1000000"], ["seeds=1,000,000", "1..100"]),
    (OPT + ["--seed", "-1"], ["seed=-1", ">= 0"]),
    (OPT + ["--num-requests", "10000000"], ["num-requests=10,000,000", "1..1,000,000"]),
    (OPT + ["--jobs", "0"], ["jobs=0", "1..1,024"]),
    (OPT + ["--relaxation", "2"], ["relaxation=2", "[0, 1)"]),
    (OPT + ["--tolerance", "0"], ["tolerance=0", "(0, 1)"]),
    (["optimize", "-m", "llama-2-7b", "--scenario", "op1", "--no-progress"], ["8,704 tokens",
                                                                            "max_position_embeddings=4,096"]),
    (OFF + ["--max-latency", "nan"], ["--max-latency=nan", "positive"]),
    (OFF + ["--max-latency", "-1"], ["--max-latency=-1", "positive"]),
    (OFF + ["-s", "100000"], ["100,008 tokens", "max_position_embeddings=2,048"]),
    (OFF + ["--memory-headroom", "1.5"], ["memory_headroom=1.5", "[0, 1)"]),
    (OFF + ["--policy", "8x1,150,0,100,0,100,0"], ["wg+wc", "more than 100"]),
    (["profile", "--device", "cuda:-1", "--out", "m.csv"], ["device='cuda:-1'", "cpu, cuda or cuda:N"]),
    (["profile", "--repeats", "0", "--out", "m.csv"], ["repeats=0", "1..10,000"]),
    (["profile", "--threads", "1000000", "--out", "m.csv"], ["threads=1,000,000", "1..1,024"]),
    (["profile", "--out", "missing/dir/m.csv"], ["--out='missing/dir/m.csv'", "does not exist"]),
    (["calibrate", "x.csv", "-H", H, "--out", "missing/dir/p.yaml"], ["--out='missing/dir/p.yaml'", "does not exist"]),
]


def _check(args: list[str], needles: list[str]) -> None:
    r = runner.invoke(app, args)
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert r.exit_code == 2, r.output
    assert len(lines) == 1 and lines[0].startswith("error: "), r.output
    assert "Traceback" not in r.output
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"


@pytest.mark.parametrize("args, needles", CLI_CASES, ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_cli_value_is_refused_naming_field_value_and_range(args, needles, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _check(args, needles)


# ------------------------------------------------------------------------------------------- files
CONFIG = {"model_type": "llama", "hidden_size": 512, "intermediate_size": 1376, "num_hidden_layers": 4,
          "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 32000, "max_position_embeddings": 4096}


def _with(base: dict, **changes) -> dict:
    d = json.loads(json.dumps(base))
    for k, v in changes.items():
        if v is _DROP:
            d.pop(k, None)
        else:
            d[k] = v
    return d


_DROP = object()
CONFIG_CASES = [
    (_with(CONFIG, hidden_size=math.nan), ["'hidden_size'=nan", "positive integer"]),
    (_with(CONFIG, num_hidden_layers=math.inf), ["'num_hidden_layers'=inf", "positive integer"]),
    (_with(CONFIG, num_key_value_heads=0), ["num_key_value_heads=0", "positive integer"]),
    (_with(CONFIG, num_key_value_heads=16), ["num_key_value_heads=16", "<= num_attention_heads=8"]),
    (_with(CONFIG, num_key_value_heads=3), ["num_key_value_heads=3", "must divide num_attention_heads=8"]),
    (_with(CONFIG, num_attention_heads=7, num_key_value_heads=7), ["num_attention_heads=7",
                                                                    "must divide hidden_size=512"]),
    (_with(CONFIG, head_dim=0), ["'head_dim'=0", "positive integer"]),
    (_with(CONFIG, max_position_embeddings=0), ["max_position_embeddings=0", "positive integer"]),
    (_with(CONFIG, vocab_size=10**12), ["vocab_size=1,000,000,000,000", "<= 16,777,216"]),
    (_with(CONFIG, intermediate_size=[1]), ["'intermediate_size'=[1]", "positive integer"]),
    (_with(CONFIG, vocab_size=_DROP), ["'vocab_size' is missing"]),
]


@pytest.mark.parametrize("cfg, needles", CONFIG_CASES, ids=lambda v: None if isinstance(v, list) else str(v)[-60:])
def test_config_json_field_is_refused_naming_field_value_and_range(cfg, needles, tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    _check(["estimate", "-m", str(p), "-H", H, "--tp", "1", "-s", "128"], needles)


def test_binary_config_json_is_refused(tmp_path):
    p = tmp_path / "config.json"
    p.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff")
    _check(["estimate", "-m", str(p), "-H", H, "--tp", "1"], ["is not valid JSON"])


def _bundled(kind: str, name: str) -> dict:
    from importlib import resources

    return yaml.safe_load((resources.files("serveplan") / "specs" / "data" / kind / f"{name}.yaml").read_text())


HW_CASES = [
    (("memory_bandwidth",), math.inf, ["memory_bandwidth=inf", "positive number, finite"]),
    (("memory_bytes",), 0, ["memory_bytes=0", "positive number"]),
    (("peak_flops", "bf16"), -1, ["peak_flops[bf16]=-1", "positive number"]),
    (("intra_node_link", "bandwidth"), math.inf, ["bandwidth=inf", "positive number"]),
    (("intra_node_link", "latency_s"), math.nan, ["latency_s=nan", ">= 0"]),
    (("devices_per_node",), 1.5, ["devices_per_node=1.5", "integer"]),
    (("tile_size",), -1, ["tile_size=-1", ">= 0"]),
    (("name",), "", ["name=''", "non-empty name"]),
]


@pytest.mark.parametrize("path, value, needles", HW_CASES, ids=lambda v: str(v)[:40])
def test_hardware_yaml_field_is_refused_naming_field_value_and_range(path, value, needles, tmp_path):
    hw = _bundled("hardware", H)
    d = hw
    for k in path[:-1]:
        d = d[k]
    d[path[-1]] = value
    p = tmp_path / "hw.yaml"
    p.write_text(yaml.safe_dump(hw))
    _check(["estimate", "-m", M, "-H", str(p), "--tp", "1", "-s", "128"], needles)


PROFILE_CASES = [
    (("prefill", "compute"), 2.0, ["prefill.compute=2", "(0, 1]"]),
    (("decode", "memory"), math.nan, ["decode.memory=nan", "(0, 1]"]),
    (("dispatch_s", "attention"), -1e-3, ["dispatch_s[attention]=-0.001", ">= 0"]),
    (("kappa_update",), math.inf, ["kappa_update=inf", ">= 0"]),
    (("expert_imbalance",), 0.5, ["expert_imbalance=0.5", ">= 1"]),
]


@pytest.mark.parametrize("path, value, needles", PROFILE_CASES, ids=lambda v: str(v)[:40])
def test_profile_yaml_field_is_refused_naming_field_value_and_range(path, value, needles, tmp_path):
    pr = _bundled("profiles", "default-gpu")
    d = pr
    for k in path[:-1]:
        d = d[k]
    d[path[-1]] = value
    p = tmp_path / "prof.yaml"
    p.write_text(yaml.safe_dump(pr))
    _check(EST + ["-p", str(p), "-s", "128"], needles)


HOST_CASES = [
    (("ctog_bandwidth",), math.inf, ["ctog_bandwidth=inf", "positive number"]),
    (("disk_bytes",), -1, ["disk_bytes=-1", ">= 0"]),
    (("runtime", "memory_efficiency"), 1.5, ["memory_efficiency=1.5", "(0, 1]"]),
    (("runtime", "mm_decode_flops"), "fast", ["mm_decode_flops='fast'", "must be a number"]),
]


@pytest.mark.parametrize("path, value, needles", HOST_CASES, ids=lambda v: str(v)[:40])
def test_host_yaml_field_is_refused_naming_field_value_and_range(path, value, needles, tmp_path):
    host = _bundled("hosts", "flexgen-t4")
    d = host
    for k in path[:-1]:
        d = d[k]
    d[path[-1]] = value
    p = tmp_path / "host.yaml"
    p.write_text(yaml.safe_dump(host))
    _check(OFF + ["--host", str(p)], needles)


TRACE_CASES = [
    ("arrival_s,input_len,output_len\n0,128,8\n0.5,,8\n", ["row 2", "input_len is missing"]),
    ('{"arrival_s": 0, "input_len": 128, "output_len": 8}\n{"arrival_s": 1, "input_len": 64}\n',
     ["row 2", "output_len is missing"]),
    ("arrival_s,input_len,output_len\n0,128,8\nnan,64,8\n", ["row 2", "arrival_s='nan'", "finite time"]),
    ("arrival_s,input_len,output_len\n0,128,8\n1,-5,8\n", ["row 2", "input_len='-5'", "positive integer"]),
    ('{"arrival_s": 0, "input_len": 128, "output_len": Infinity}\n', ["row 1", "output_len=inf", "positive integer"]),
    ("arrival_s,input_len,output_len\n0,128.5,8\n", ["row 1", "input_len='128.5'", "positive integer"]),
]


@pytest.mark.parametrize("text, needles", TRACE_CASES, ids=lambda v: str(v)[-30:])
def test_trace_row_is_refused_naming_row_column_value_and_range(text, needles, tmp_path):
    p = tmp_path / ("trace.jsonl" if text.startswith("{") else "trace.csv")
    p.write_text(text)
    _check(["simulate", "-m", M, "-H", H, "--tp", "1", "--trace", str(p)], needles)


def test_binary_trace_is_refused(tmp_path):
    p = tmp_path / "trace.csv"
    p.write_bytes(b"\x00\xff\xfe garbage")
    _check(["simulate", "-m", M, "-H", H, "--tp", "1", "--trace", str(p)], ["not text"])
