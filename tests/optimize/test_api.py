"""The optimizer from Python without the CLI: the README's example runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import serveplan
from serveplan import SearchSpace, Workload, plan_serving

README = Path(__file__).resolve().parents[2] / "README.md"


def _readme_block(marker: str) -> str:
    """The first ```python block after ``marker`` in the README."""
    text = README.read_text()
    at = text.index(marker)
    m = re.search(r"```python\n(.*?)```", text[at:], re.S)
    assert m, f"no python block after {marker!r}"
    return m.group(1)


def test_readme_search_example_runs_and_ranks(capsys):
    code = _readme_block("A search without the CLI")
    namespace: dict = {}
    exec(compile(code, str(README), "exec"), namespace)
    res = namespace["res"]
    assert res.strategies and res.best.goodput_per_device >= max(r.goodput_per_device for r in res.strategies)
    out = capsys.readouterr().out
    assert res.best.name in out and res.best_collocated.name in out and res.best_disaggregated.name in out


def test_plan_serving_matches_the_search_it_wraps():
    space = SearchSpace(devices=4, tp_sizes=(4,))
    wl = Workload.scenario("op3", num_requests=300)
    res = plan_serving("codellama-34b", "ascend-910b3", engine="bestserve", space=space, workload=wl,
                       slo_ttft=1.5, slo_tpot=0.07, method="exhaustive")
    from serveplan.optimize.goodput import GoodputSettings
    from serveplan.optimize.search import search

    ref = search(space, GoodputSettings(model=serveplan.get_model("codellama-34b"),
                                        hardware=serveplan.get_hardware("ascend-910b3"),
                                        profile=serveplan.get_profile(None, "ascend-910b3"), workload=wl,
                                        slo=serveplan.SLO(ttft_s=1.5, tpot_s=0.07, percentile=90),
                                        engine=serveplan.get_engine("bestserve")),
                 jobs=1, progress=False)
    assert [r.name for r in res.strategies] == [r.name for r in ref.strategies]
    assert [r.goodput_rps for r in res.strategies] == [r.goodput_rps for r in ref.strategies]


def test_plan_serving_rejects_bad_settings_with_a_spec_error():
    with pytest.raises(serveplan.SpecError, match="fidelity='exact'"):
        plan_serving("codellama-34b", "ascend-910b3", fidelity="exact")
