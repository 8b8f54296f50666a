"""The JSON documents of ``serveplan optimize --json`` and ``serveplan simulate --json``, built in one
place: the CLI prints them and ``serveplan ui``'s API serves them, so both say the same thing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from serveplan.optimize.search import SearchResult
from serveplan.report.deploy import Deployment
from serveplan.report.tables import sweep_records
from serveplan.sim import SimulationResult


def optimize_document(results: Sequence[SearchResult], scenarios: Sequence[str], bands: Sequence[Any] = (),
                      deploy: Deployment | None = None) -> dict[str, Any]:
    """One search's ``to_dict()`` (several scenarios: ``{"scenarios": [...]}``), with each top
    strategy's goodput band (``--band``) and the best plan's launch commands (``--deploy``)."""
    dicts = [res.to_dict() for res in results]
    for d, bs in zip(dicts, bands, strict=False):
        for row, b in zip(d["strategies"], bs, strict=False):
            row["goodput_band"] = b.to_dict()
    if deploy is not None:
        dicts[0]["deploy"] = deploy.to_dict()
    if len(dicts) > 1:
        return {"scenarios": [dict(d, scenario=name) for name, d in zip(scenarios, dicts, strict=True)]}
    return dicts[0]


def simulate_document(res: SimulationResult, sweep: Sequence[SimulationResult] = (),
                      bands: dict[str, Any] | None = None) -> dict[str, Any]:
    """A simulation's ``to_dict()`` with the rate sweep (``--rate-sweep``) and the band (``--band``)."""
    d = res.to_dict()
    if sweep:
        d["rate_sweep"] = sweep_records(sweep)
    if bands is not None:
        d["band"] = {k: b.to_dict() for k, b in bands.items()}
    return d
