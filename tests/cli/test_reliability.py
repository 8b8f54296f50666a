"""Output that says what it means and runs that lose nothing: closed pipes, the attention kind of
the models list, the estimate's KV capacity and context checks, outputs checked before measuring."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from serveplan.cli import app

runner = CliRunner()
SRC = str(Path(__file__).resolve().parents[2] / "src")


@pytest.mark.parametrize("args", [["models"], ["models", "--json"], ["estimate"], ["hardware"]])
def test_a_closed_pipe_is_not_an_error(args):
    """``serveplan models | head``: the reader closes the pipe; exit 0 and no traceback."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH")) if p))
    p = subprocess.Popen([sys.executable, "-m", "serveplan", *args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env)
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()  # before anything is written: every write meets a closed pipe
    err = p.stderr.read().decode()
    assert p.wait(timeout=60) == 0, err
    assert "Traceback" not in err and "Broken pipe" not in err, err


def test_models_lists_mha_mqa_gqa_and_mla_by_their_names():
    r = runner.invoke(app, ["models", "--json"])
    assert r.exit_code == 0, r.output
    kind = {d["name"]: d["attention"] for d in json.loads(r.output)}
    assert kind["opt-175b"] == kind["gpt3-175b"] == kind["opt-6.7b"] == "mha"  # 96/96 and 32/32 heads
    assert kind["falcon-7b"] == "mqa"  # 71 query heads, 1 KV head
    assert kind["llama-3.1-8b"] == "gqa"  # 32/8
    assert kind["deepseek-v3"] == "mla"


def test_profile_to_a_missing_folder_fails_at_once_before_measuring(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    measured = []
    monkeypatch.setattr("serveplan.calibrate.profile.profile_device", lambda *a, **k: measured.append(1))
    r = runner.invoke(app, ["profile", "--out", "missing/dir/m.csv"])
    assert r.exit_code == 2 and "missing/dir" in r.output and "does not exist" in r.output, r.output
    assert not measured, "measured before checking the output path"


def test_calibrate_to_a_missing_folder_fails_before_fitting(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fitted = []
    monkeypatch.setattr("serveplan.calibrate.fit.calibrate", lambda *a, **k: fitted.append(1))
    r = runner.invoke(app, ["calibrate", "m.csv", "-H", "h100-sxm", "--out", "nope/p.yaml"])
    assert r.exit_code == 2 and "nope" in r.output, r.output
    assert not fitted


@pytest.mark.torch
def test_profile_saves_measurements_as_it_goes(tmp_path, monkeypatch):
    pytest.importorskip("torch", reason="serveplan profile needs torch (pip install 'serveplan[profile]')")
    import serveplan.calibrate.profile as prof

    real = prof.profile_device
    seen: list[list[str]] = []
    results = []

    def spy(cfg, *, progress=True, on_row=None):
        def row(m):
            assert on_row is not None
            on_row(m)
            seen.append((tmp_path / "m.csv.partial").read_text().splitlines())

        results.append(real(cfg, progress=progress, on_row=row))
        return results[-1]

    monkeypatch.setattr(prof, "profile_device", spy)
    r = runner.invoke(app, ["profile", "--quick", "--no-progress", "--out", str(tmp_path / "m.csv")])
    assert r.exit_code == 0, r.output
    # after the k-th measurement the partial file holds k data rows (a comment and a header above)
    assert [len(lines) - 2 for lines in seen] == list(range(1, len(seen) + 1))
    assert (tmp_path / "m.csv").exists() and not (tmp_path / "m.csv.partial").exists()
    # metadata are plain strings in memory too (torch.__version__ is a str subclass that YAML
    # refuses: a profile written from an in-memory set failed before)
    assert all(type(v) is str for v in results[0].metadata.values()), results[0].metadata


def test_estimate_flags_a_batch_whose_kv_cache_does_not_fit():
    ok = json.loads(runner.invoke(app, ["estimate", "--json"]).output)
    assert ok["kv_fits"] is True and ok["kv_tokens_needed"] == 2048 and ok["kv_capacity_tokens"] > 2048
    r = runner.invoke(app, ["estimate", "-b", "4000", "-s", "4000", "--json"])
    d = json.loads(r.stdout)
    assert r.exit_code == 0 and d["kv_fits"] is False
    assert d["kv_tokens_needed"] == 16_000_000 > d["kv_capacity_tokens"]
    table = runner.invoke(app, ["estimate", "-b", "4000", "-s", "4000"])
    assert "DOES NOT FIT" in table.output and "warning:" in table.output


def test_estimate_refuses_a_context_beyond_the_model_unless_allowed():
    cl = ["estimate", "-m", "codellama-34b", "-H", "ascend-910b3", "--engine", "bestserve", "--tp", "4"]
    r = runner.invoke(app, [*cl, "-s", "20000"])  # codellama-34b: max_position_embeddings 16384
    assert r.exit_code == 2 and "max_position_embeddings=16,384" in r.output, r.output
    r = runner.invoke(app, [*cl, "-s", "20000", "--allow-long-context", "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["beyond_max_position"] is True


def test_estimate_total_has_its_own_column_not_the_compute_one():
    out = runner.invoke(app, ["estimate"]).output
    header = next(ln for ln in out.splitlines() if "compute (ms)" in ln)
    total = next(ln for ln in out.splitlines() if "TOTAL" in ln)
    cells = [c.strip() for c in total.split("│")[1:-1]]
    names = [c.strip() for c in header.split("┃")[1:-1]]
    assert names[-1] == "step (ms)"
    assert cells[names.index("compute (ms)")] == "" and cells[-1] != ""
