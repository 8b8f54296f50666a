"""Closed sets of the optimizer are str enums: comparisons with the plain strings, JSON records,
checkpoints written before the enums and the errors naming the choices stay as they were."""

from __future__ import annotations

import json

import pytest

from serveplan.errors import SpecError
from serveplan.optimize.goodput import GoodputMethod, GoodputResult, GoodputStatus, SloCheck, max_goodput
from serveplan.optimize.search import METHODS, SearchMethod, _Options
from serveplan.sim import Fleet


def _result(method: object) -> GoodputResult:
    return GoodputResult(candidate=Fleet.build("1m", tp=2, max_batch=8), goodput_rps=1.5, goodput_per_device=0.75,
                         status=GoodputStatus.OK, method=method)  # type: ignore[arg-type]


def test_the_enums_are_their_strings():
    assert METHODS == ("exhaustive", "fast", "bounded", "auto")
    assert [m.value for m in GoodputMethod] == ["", "composed", "confirmed", "bound", "cut"]
    assert [c.value for c in SloCheck] == ["both", "ttft", "tpot"]
    for member in (*SearchMethod, *GoodputMethod, *SloCheck):
        assert member == member.value and str(member) == member.value and f"{member}" == member.value
        assert json.dumps(member) == json.dumps(member.value)
    assert not GoodputMethod.WHOLE and GoodputMethod.CUT   # "" is falsy, as the string was
    assert {"composed": "(c)"}.get(GoodputMethod.COMPOSED) == "(c)"


@pytest.mark.parametrize("method", ["", "composed", "confirmed", "bound", "cut"])
def test_goodput_method_records_round_trip_as_plain_strings(method):
    r = _result(method)   # a plain string is accepted and stored as the enum
    assert r.method is GoodputMethod(method) and r.method == method
    d = r.to_dict()
    assert type(d["method"]) is str and d["method"] == method
    back = GoodputResult.from_dict(json.loads(json.dumps(d)))
    assert back.method is GoodputMethod(method) and back.to_dict() == d


def test_a_checkpoint_record_without_a_method_or_with_null_reads_as_simulated_whole():
    d = _result("").to_dict()
    del d["method"]
    assert GoodputResult.from_dict(d).method is GoodputMethod.WHOLE
    assert GoodputResult.from_dict(d | {"method": None}).method is GoodputMethod.WHOLE


def test_unknown_values_are_refused_naming_the_choices():
    with pytest.raises(SpecError, match="method='quick'; expected one of: exhaustive, fast, bounded, auto"):
        _Options.of({"method": "quick"})
    assert _Options.of({"method": "fast"}).method is SearchMethod.FAST
    with pytest.raises(SpecError, match="check='e2e'; expected one of: both, ttft, tpot"):
        max_goodput(Fleet.build("1m"), None, check="e2e")  # type: ignore[arg-type]  # refused before use
    with pytest.raises(ValueError):
        _result("guessed")


def test_checkpoint_records_with_former_knob_names_still_load(tmp_path):
    """A checkpoint line whose knobs carry a former name (``max_num_seqs``, ``max_prompts``,
    ``step_token_budget``) resumes as the same fleet as one written with today's names."""
    from serveplan.optimize.search import _append_checkpoint, _load_checkpoint

    r = GoodputResult(candidate=Fleet.build("2m", tp=2, max_batch=32, prefill_max_batch=4, token_budget=2048,
                                            scheduler="prefill-first"),
                      goodput_rps=3.0, goodput_per_device=0.75, status=GoodputStatus.OK, method="confirmed")
    path = tmp_path / "checkpoint.jsonl"
    _append_checkpoint(path, "fp", r)
    rec = json.loads(path.read_text())
    res = rec["result"]
    res["max_num_seqs"], res["max_prompts"], res["step_token_budget"] = (res.pop("max_batch"),
                                                                          res.pop("prefill_max_batch"),
                                                                          res.pop("token_budget"))
    old = tmp_path / "old.jsonl"
    old.write_text(json.dumps(rec) + "\n")
    back = _load_checkpoint(old, "fp")[r.name]
    assert back.candidate == r.candidate and back.method is GoodputMethod.CONFIRMED
    assert back.to_dict() == _load_checkpoint(path, "fp")[r.name].to_dict()
