"""``serveplan sweep``: a grid of optimize questions, each one search, answered locally or on Ray,
resumable from its output directory; a bad file is one line naming the key and the value."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from serveplan.cli import app
from serveplan.commands import plan
from serveplan.commands.sweep import SweepOptions, prepare, question_key, run

runner = CliRunner()
SRC = Path(__file__).resolve().parents[2] / "src"

def strict(text: str) -> Any:
    """JSON as strict parsers take it: NaN or Infinity fail."""
    def refuse(token: str) -> float:
        raise ValueError(f"not strict JSON: {token}")

    return json.loads(text, parse_constant=refuse)


#: three questions of well under a second each
TINY = """
common:
  model: llama-3.1-8b
  devices: 1
  tp: 1
  num_requests: 100
  input_len: 512
  output_len: 64
grid:
  hardware: [h100-sxm, a100-80g, l40s]
"""


@pytest.fixture()
def tiny(tmp_path: Path) -> Path:
    p = tmp_path / "tiny.yaml"
    p.write_text(TINY)
    return p


def test_the_grid_is_every_combination_and_a_linked_axis_sets_options_together(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("common: {devices: 2, tp: [1, 2]}\ngrid:\n  model: [llama-3.1-8b, qwen3-8b]\n  slo:\n"
                 "    - {slo_ttft: 0.5, slo-tpot: 0.03}\n    - {slo_ttft: 1, slo_tpot: 0.05}\n")
    prep = prepare(SweepOptions(file=str(f)))
    qs = prep.questions
    assert [(q.options.model, q.options.slo_ttft, q.options.slo_tpot) for q in qs] == [
        ("llama-3.1-8b", 0.5, 0.03), ("llama-3.1-8b", 1.0, 0.05), ("qwen3-8b", 0.5, 0.03), ("qwen3-8b", 1.0, 0.05)]
    assert all(q.options.tp == "1,2" and q.options.devices == "2" and q.options.jobs == 1 for q in qs)
    assert prep.axes == ("model", "slo_ttft", "slo_tpot")
    # the key is the question's, not the run's: stable, distinct, equal for equal options
    assert len({q.key for q in qs}) == 4
    assert qs[0].key == question_key(plan.PlanOptions(model="llama-3.1-8b", devices=2, tp="1,2", slo_ttft=0.5,
                                                      slo_tpot=0.03, jobs=1))


def test_a_sweep_answers_every_question_and_a_rerun_resumes(tiny, tmp_path):
    out = tmp_path / "out"
    first = run(SweepOptions(file=str(tiny), jobs=1, out=out))
    rows = first.rows()
    assert first.num_run == 3 and first.num_resumed == 0
    assert [r["hardware"] for r in rows] == ["h100-sxm", "a100-80g", "l40s"]
    assert all(r["status"] == "ok" and r["best"] and r["goodput_per_device"] > 0 and r["usd_per_mtok_output"] > 0
               and r["usd_per_month"] > 0 for r in rows)
    assert len(list((out / "questions").glob("*.json"))) == 3
    csv_lines = (out / "summary.csv").read_text().splitlines()
    assert len(csv_lines) == 4 and csv_lines[0].startswith("question,key,hardware,workload,status,best")
    assert strict((out / "summary.json").read_text())["rows"] == rows
    # a rerun answers nothing new; a question whose answer is gone is answered again, the same
    again = run(SweepOptions(file=str(tiny), jobs=1, out=out))
    assert (again.num_run, again.num_resumed) == (0, 3) and again.rows() == rows
    (out / "questions" / f"{rows[1]['key']}.json").write_text('{"key": "cut sh')   # a write cut short
    third = run(SweepOptions(file=str(tiny), jobs=1, out=out))
    assert (third.num_run, third.num_resumed) == (1, 2) and third.rows() == rows


def test_a_pool_of_workers_gives_the_same_summary_and_the_cli_prints_it(tiny):
    alone = run(SweepOptions(file=str(tiny), jobs=1)).rows()
    r = runner.invoke(app, ["sweep", str(tiny), "--jobs", "2", "--json", "--no-progress"])
    assert r.exit_code == 0, r.output
    assert strict(r.stdout)["rows"] == alone
    table = runner.invoke(app, ["sweep", str(tiny), "--jobs", "1", "--no-progress"], env={"COLUMNS": "200"})
    assert table.exit_code == 0 and alone[0]["best"] in table.stdout and "3 questions: 3 answered" in table.stdout


def test_a_question_without_an_answer_is_a_row_that_says_why(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("common: {devices: 1, tp: 1, num_requests: 100, input_len: 512, output_len: 64, hardware: l4}\n"
                 "grid: {model: [llama-3.1-70b]}\n")
    (row,) = run(SweepOptions(file=str(f), jobs=1)).rows()
    assert row["status"] == "infeasible" and "weights do not fit" in row["reason"] and row["best"] is None


@pytest.mark.parametrize("text, needle", [
    ("grid: {modle: [llama-3.1-8b]}", "grid.modle[0]='llama-3.1-8b': 'modle' is no option (did you mean 'model'?)"),
    ("common: {slo_ttft: 1}\ngrid: {slo_ttft: [1, 2]}", "'slo_ttft' is set in both common and grid.slo_ttft"),
    ("grid: {slo_ttft: [1, -1]}", "grid.slo_ttft[1]: slo-ttft=-1.0 must be"),
    ("grid: {devices: [2, two]}", "grid.devices[1]: devices='two' must be an integer"),
    ("common: {jobs: 4}", "'jobs' is the sweep's own option"),
    ("common: {colour: red}", "common: unknown option 'colour'; expected one of: model, hardware"),
    ("grid: {model: []}", "grid.model=[]; expected a non-empty list"),
    ("grids: {model: [a]}", "unknown key 'grids'; expected: common, grid"),
    ("grid: {model: [llama-3.1-8b, no-such-model]}", "question 2 of 2 (model=no-such-model): "),
    ("grid: {slo: [{slo_ttft: 1}, {slo_ttft: 1}]}", "question 2 (slo_ttft=1.0) is the same question as question 1"),
    ("- a list", "must hold a mapping with the keys common, grid"),
    ("grid: {model: [a", "is not valid YAML"),
    ("# nothing\n", "is empty; expected a mapping with the keys common, grid"),
    ("common: {tp: [1, [2]]}", "common.tp: tp=[1, [2]]; expected a value or a list of values"),
])
def test_a_bad_file_is_one_line_naming_the_key_and_value(tmp_path, text, needle):
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    r = runner.invoke(app, ["sweep", str(f), "--no-progress"])
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in r.output, lines


def test_a_missing_file_or_bad_sweep_option_is_one_line(tmp_path, tiny):
    for args, needle in [([str(tmp_path / "none.yaml")], "does not exist"),
                         (["smal"], "no bundled sweep; bundled: small (did you mean 'small'?)"),
                         ([str(tiny), "--retries", "-1"], "retries=-1"),
                         ([str(tiny), "--ray-address", "127.0.0.1:1"], "needs --backend ray"),
                         ([str(tiny), "--backend", "ray", "--ray-address", "127.0.0.1:1"], "unreachable")]:
        r = runner.invoke(app, ["sweep", *args, "--no-progress"])
        assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1 and needle in r.output, (args, r.output)


@pytest.mark.ray
def test_a_sweep_on_a_local_ray_instance_equals_the_local_run(tiny, tmp_path):
    pytest.importorskip("ray")
    local = run(SweepOptions(file=str(tiny), jobs=1)).rows()
    env = dict(os.environ, PYTHONPATH=str(SRC))
    r = subprocess.run([sys.executable, "-m", "serveplan", "sweep", str(tiny), "--backend", "ray", "--jobs", "2",
                        "--json", "--no-progress", "--out", str(tmp_path / "ray")], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = strict(r.stdout)
    assert doc["backend"] == "ray" and doc["num_run"] == 3 and doc["rows"] == local
