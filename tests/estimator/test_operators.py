"""Per-operator API (``serveplan.estimator.operators`` and ``serveplan estimate --op``)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from serveplan import ParallelConfig, get_hardware, get_model, get_profile
from serveplan.cli import app
from serveplan.errors import SpecError
from serveplan.estimator.batch import StepBatch
from serveplan.estimator.operators import attention_time, collective_time, gemm_time
from serveplan.estimator.step import Estimator

runner = CliRunner()
H100 = get_hardware("h100-sxm")
MEASURED = get_profile(None, "h100-sxm")
CONSTANT = get_profile("default-gpu")


def test_gemm_work_and_traffic_are_hand_countable():
    t = gemm_time(16, 4096, 1024, hardware=H100, profile=CONSTANT, dtype="fp8", phase="decode")
    assert t.flops == 2 * 16 * 4096 * 1024
    assert t.bytes == 2 * 16 * (1024 + 4096) + 1 * 1024 * 4096   # bf16 activations, fp8 weight
    # constant factors: max(W / (e_c S_c), Q / (e_m S_m)) with decode MFU 0.5, MBU 0.7 (default-gpu)
    expect = max(t.flops / (0.5 * 1978.9e12), t.bytes / (0.7 * 3.35e12))
    assert t.time_s == pytest.approx(expect, rel=1e-12)
    assert t.bound == "memory"


@pytest.mark.parametrize(("profile", "tp"), [(MEASURED, 2), (CONSTANT, 2), (MEASURED, 1)])
@pytest.mark.parametrize("batch", [StepBatch.prefill(2, 1000), StepBatch.decode(16, 3000)])
def test_operator_times_equal_the_estimators_breakdown_of_a_layer(profile, tp, batch):
    m = get_model("llama-3.1-8b")
    est = Estimator(m, H100, profile, ParallelConfig(tp=tp))
    step = est.estimate(batch)
    ops = {o.name: o for o in step.ops}
    ph = step.phase
    n = int(batch.num_tokens)
    hq, hkv, d, h = m.num_attention_heads // tp, m.num_key_value_heads // tp, m.head_dim, m.hidden_size
    for name, (nn, kk) in {"q_proj": (hq * d, h), "k_proj": (hkv * d, h), "o_proj": (h, hq * d)}.items():
        g = gemm_time(n, nn, kk, hardware=H100, profile=profile, phase=ph)
        assert g.time_s == pytest.approx(ops[name].time_s, rel=1e-9), name
        assert g.flops == pytest.approx(ops[name].flops, rel=1e-12)
    length = 1000 if ph == "prefill" else 3000
    a = attention_time(ph, batch=batch.num_seqs, length=length, heads=hq, kv_heads=hkv, head_dim=d,
                       hardware=H100, profile=profile)
    assert a.time_s == pytest.approx(ops[f"{ph}.attention"].time_s, rel=1e-9)
    comm = [mod.comm_s for mod in step.modules if mod.comm_s > 0]
    if tp > 1:
        c = collective_time("allreduce", n * h * 2, tp, hardware=H100, profile=profile, phase=ph)
        assert comm and all(x == pytest.approx(c.time_s, rel=1e-9) for x in comm)
    else:
        assert not comm


# aiconfigurator-core 0.12.0, systems/data/h100_sxm, vLLM 0.24.0 GEMM/attention tables and NCCL
# 2.27.3 (latency column, ms): measured kernel times the bundled H100 profile was fitted to.
@pytest.mark.parametrize(("fn", "measured_s"), [
    (lambda: gemm_time(4096, 4096, 4096, hardware=H100, profile=MEASURED), 0.16603e-3),
    (lambda: gemm_time(16, 4096, 4096, hardware=H100, profile=MEASURED), 0.015543e-3),
    (lambda: attention_time("prefill", batch=4, length=4096, heads=32, kv_heads=8, head_dim=128,
                            hardware=H100, profile=MEASURED), 1.01102e-3),
    (lambda: attention_time("decode", batch=64, length=4096, heads=32, kv_heads=8, head_dim=128,
                            hardware=H100, profile=MEASURED), 0.35357e-3),
    (lambda: collective_time("allreduce", 2 ** 21, 8, hardware=H100, profile=MEASURED), 0.03855e-3),
    (lambda: collective_time("allreduce", 2 ** 24, 8, hardware=H100, profile=MEASURED), 0.12208e-3),
])
def test_measured_h100_profile_reproduces_table_rows(fn, measured_s):
    assert fn().time_s == pytest.approx(measured_s, rel=0.15)


def test_measured_profile_gemm_is_slower_per_flop_at_few_rows():
    per_flop = [gemm_time(m, 4096, 4096, hardware=H100, profile=MEASURED).time_s / m for m in (1, 16, 256, 4096)]
    assert per_flop == sorted(per_flop, reverse=True)


@pytest.mark.parametrize(("call", "message"), [
    (lambda: gemm_time(0, 4096, 4096, hardware=H100, profile=MEASURED), "m=0"),
    (lambda: gemm_time(1, 4096, 4096, hardware=H100, profile=MEASURED, dtype="fp7"), "fp7"),
    (lambda: attention_time("decode", batch=1, length=10, heads=32, kv_heads=6, head_dim=128,
                            hardware=H100, profile=MEASURED), "multiple of kv_heads"),
    (lambda: attention_time("middle", batch=1, length=10, heads=32, kv_heads=8, head_dim=128,
                            hardware=H100, profile=MEASURED), "phase"),
    (lambda: collective_time("broadcast", 1e6, 8, hardware=H100, profile=MEASURED), "broadcast"),
    (lambda: collective_time("allreduce", -1, 8, hardware=H100, profile=MEASURED), "bytes"),
    (lambda: collective_time("allreduce", 1e6, 1, hardware=H100, profile=MEASURED), "ranks"),
])
def test_bad_shapes_raise_spec_errors(call, message):
    with pytest.raises(SpecError, match=message):
        call()


@pytest.mark.parametrize("args", [
    ["--op", "gemm", "--m", "16", "--n", "4096", "--k", "4096", "--dtype", "fp8"],
    ["--op", "attention", "--phase", "decode", "--batch", "8", "--context-len", "2048", "--heads", "32",
     "--kv-heads", "8", "--kv-dtype", "fp8"],
    ["--op", "attention", "--batch", "2", "--input-len", "1024", "--heads", "16"],
    ["--op", "allreduce", "--bytes", "16777216", "--ranks", "4"],
    ["--op", "alltoall", "--bytes", "1048576", "--ranks", "8"],
])
def test_cli_op_prints_one_operator(args):
    r = runner.invoke(app, ["estimate", "-H", "h100-sxm", *args, "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["profile"] == "measured-h100-sxm" and d["time_s"] > 0 and d["model"].startswith("curve")


@pytest.mark.parametrize(("args", "message"), [
    (["--op", "gemm", "--m", "0", "--n", "8", "--k", "8"], "m=0"),
    (["--op", "gemm", "--m", "16"], "--n, --k"),
    (["--op", "attention", "--heads", "32", "--kv-heads", "5"], "kv_heads=5"),
    (["--op", "attention"], "--heads"),
    (["--op", "allreduce", "--bytes", "100"], "--ranks"),
    (["--op", "allreduce", "--bytes", "100", "--ranks", "1"], "ranks=1"),
    (["--op", "conv2d"], "expected one of"),
])
def test_cli_op_bad_shapes_give_one_line_and_exit_2(args, message):
    r = runner.invoke(app, ["estimate", "-H", "h100-sxm", *args])
    assert r.exit_code == 2
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in r.output
