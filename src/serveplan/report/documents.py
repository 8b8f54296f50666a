"""The JSON documents of ``serveplan optimize --json`` and ``serveplan simulate --json``, built in one
place: the CLI prints them and ``serveplan ui``'s API serves them, so both say the same thing.

Every document is strict JSON (:func:`serveplan.units.json_safe`): a statistic of nothing is ``null``, never NaN or
Infinity, which ``JSON.parse``, jq and web clients refuse."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from serveplan.optimize.goodput import GoodputSettings
from serveplan.optimize.search import SearchResult
from serveplan.report.deploy import LaunchPlan
from serveplan.report.tables import sweep_records
from serveplan.sim import SimulationResult
from serveplan.units import json_safe
from serveplan.validate.answers import simulation_confidence, strategy_bands, strategy_confidence


def optimize_document(results: Sequence[SearchResult], scenarios: Sequence[str], bands: Sequence[Any] = (),
                      launch: LaunchPlan | None = None, command: str | None = None,
                      settings: Sequence[GoodputSettings] = (),
                      settings_of: Sequence[Mapping[str, GoodputSettings]] = ()) -> dict[str, Any]:
    """One search's ``to_dict()`` (several scenarios: ``{"scenarios": [...]}``), with each top
    strategy's goodput band (``--band``), each strategy's confidence (its goodput, TTFT and TPOT
    with the P10-P90 band of comparable validated rows, given the search's ``settings``:
    :mod:`serveplan.validate.answers`; ``settings_of``: per result, the settings of each strategy
    searched under others, as over several hardware types), the best plan's launch files
    (``--deploy``) and the command line that reproduces it."""
    dicts = [res.to_dict() for res in results]
    for d, bs in zip(dicts, bands, strict=False):
        for row, b in zip(d["strategies"], bs, strict=False):
            row["goodput_band"] = b.to_dict()
    for i, (d, res, st) in enumerate(zip(dicts, results, settings, strict=False)):
        own = settings_of[i] if i < len(settings_of) else {}
        kinds: dict[int, Any] = {}
        for row, r in zip(d["strategies"], res.strategies, strict=True):
            s = own.get(r.name, st)
            if id(s) not in kinds:
                kinds[id(s)] = strategy_bands(s)
            row["confidence"] = strategy_confidence(r, kinds[id(s)])
    if launch is not None:
        dicts[0]["deploy"] = launch.to_dict()
    doc: dict[str, Any] = dicts[0] if len(dicts) == 1 else \
        {"scenarios": [dict(d, scenario=name) for name, d in zip(scenarios, dicts, strict=True)]}
    if command is not None:
        doc["command"] = command
    out: dict[str, Any] = json_safe(doc)
    return out


def simulate_document(res: SimulationResult, sweep: Sequence[SimulationResult] = (),
                      bands: dict[str, Any] | None = None) -> dict[str, Any]:
    """A simulation's ``to_dict()`` with the rate sweep (``--rate-sweep``), the band (``--band``) and
    each figure's confidence (``confidence``: the P10-P90 band of comparable validated rows,
    :mod:`serveplan.validate.answers`)."""
    d = res.to_dict()
    d["confidence"] = simulation_confidence(res)
    if sweep:
        d["rate_sweep"] = sweep_records(sweep)
    if bands is not None:
        d["band"] = {k: b.to_dict() for k, b in bands.items()}
    out: dict[str, Any] = json_safe(d)
    return out
