"""The confidence of the figures ``simulate``, ``optimize`` and ``estimate`` print: each TTFT, TPOT,
E2E, throughput and goodput with its P10-P90 band from the bundled residual table
(:func:`~serveplan.validate.confidence.band_for`), or ``extrapolated`` and why.

Each builder returns ``{figure: {"value": v, "band": {"p10", "p90", "n", "sources", "basis"}}}``
(the figure names are the result's own keys: ``ttft_p90_s``, ``throughput_rps``, ...), which the
JSON documents carry under ``confidence`` and the CLI and the web page render.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from serveplan.estimator.api import EstimateResult
from serveplan.specs.engine import EngineSpec
from serveplan.specs.hardware import DeviceSpec
from serveplan.specs.model import ModelSpec
from serveplan.specs.profile import Phase
from serveplan.validate.confidence import (
    Band,
    Query,
    Residual,
    accelerator_family,
    band_for,
    bundled_residuals,
    model_class,
)

if TYPE_CHECKING:  # annotations only: estimate's bands need neither the simulator nor the optimizer
    from serveplan.optimize.goodput import GoodputResult, GoodputSettings
    from serveplan.sim import SimulationResult, Workload
    from serveplan.sim.metrics import LatencyStats

#: the basis of a throughput an open loop fixes
ARRIVAL_RATE = "set by the arrival rate: an open loop that keeps up delivers what arrives"
_STATS = ("mean", "p50", "p90", "p99")


def _engine_name(engine: str | EngineSpec | None) -> str:
    if engine is None:
        return "none"
    return engine.engine if isinstance(engine, EngineSpec) else engine.split("-")[0]


def query(*, engine: str | EngineSpec | None, hardware: DeviceSpec, model: ModelSpec, kind: str, regime: str,
          context_tokens: float) -> Query:
    """What a prediction is, in the terms of the residual table."""
    return Query(engine=_engine_name(engine), family=accelerator_family(hardware.name), model_class=model_class(model),
                 kind=kind, regime=regime, context_tokens=context_tokens)


def _context(workload: Workload) -> float:
    return float(np.mean(workload.input_lengths) + np.mean(workload.output_lengths))


def _entry(value: float | None, band: Band) -> dict[str, Any]:
    return {"value": value, "band": band.of(value)}


def _latency(out: dict[str, Any], name: str, stats: LatencyStats, band: Band) -> None:
    for s in _STATS:
        out[f"{name}_{s}_s"] = _entry(float(getattr(stats, s)), band)


def simulation_bands(res: SimulationResult, residuals: Sequence[Residual] | None = None) -> dict[str, Band]:
    """The band of each kind of figure of a simulation: ``TTFT``, ``TPOT``, ``E2E``, ``throughput``."""
    table = bundled_residuals() if residuals is None else residuals
    cfg = res.config
    regime = "offline" if cfg.offline else "closed loop" if cfg.concurrency else "open loop"
    ctx = _context(cfg.workload)
    out = {k: band_for(query(engine=cfg.engine, hardware=cfg.hardware, model=cfg.model, kind=k, regime=regime,
                             context_tokens=ctx), table) for k in ("TTFT", "TPOT", "E2E", "throughput")}
    if regime == "open loop" and not res.overloaded:
        out["throughput"] = Band.exact(ARRIVAL_RATE)
    return out


def simulation_confidence(res: SimulationResult, residuals: Sequence[Residual] | None = None) -> dict[str, Any]:
    """Every TTFT, TPOT, E2E statistic and throughput of a simulation (a closed loop's steady
    window when it is one) with its band (module doc)."""
    bands = simulation_bands(res, residuals)
    src: Any = res.closed_loop if res.closed_loop is not None else res
    out: dict[str, Any] = {}
    _latency(out, "ttft", src.ttft_s, bands["TTFT"])
    _latency(out, "tpot", src.tpot_s, bands["TPOT"])
    _latency(out, "e2e", src.e2e_s, bands["E2E"])
    out["throughput_rps"] = _entry(src.throughput_rps, bands["throughput"])
    out["output_tokens_per_s"] = _entry(src.output_tokens_per_s, bands["throughput"])
    if res.closed_loop is None:
        out["total_tokens_per_s"] = _entry(res.total_tokens_per_s, bands["throughput"])
    return out


def strategy_bands(settings: GoodputSettings, residuals: Sequence[Residual] | None = None) -> dict[str, Band]:
    """The bands of a plan's figures (``goodput``, ``TTFT`` and ``TPOT`` at the goodput rate): one
    question, so one band per kind for every strategy."""
    table = bundled_residuals() if residuals is None else residuals
    ctx = _context(settings.workload)
    return {k: band_for(query(engine=settings.engine, hardware=settings.hardware, model=settings.model, kind=k,
                              regime="open loop", context_tokens=ctx), table) for k in ("goodput", "TTFT", "TPOT")}


def strategy_confidence(result: GoodputResult, bands: Mapping[str, Band]) -> dict[str, Any]:
    """A strategy's goodput (and per device), and its TTFT and TPOT at that rate, with their bands."""
    return {"goodput_rps": _entry(result.goodput_rps, bands["goodput"]),
            "goodput_per_device": _entry(result.goodput_per_device, bands["goodput"]),
            "ttft_p_s": _entry(result.ttft_p, bands["TTFT"]), "tpot_p_s": _entry(result.tpot_p, bands["TPOT"])}


def step_bands(res: EstimateResult, model: ModelSpec, hardware: DeviceSpec, engine: str | EngineSpec | None,
               residuals: Sequence[Residual] | None = None) -> dict[str, Band]:
    """The bands of a step estimate: a prefill step is a static batch's TTFT, a decode step its
    TPOT; with an output length, the static batch's TTFT, TPOT (ITL), E2E and throughput."""
    table = bundled_residuals() if residuals is None else residuals
    ctx = float(res.input_len + (res.static.output_len if res.static else 0))
    if res.phase is Phase.DECODE and res.context_len is not None:
        ctx = max(ctx, float(res.context_len + 1))
    kinds = ("TTFT", "TPOT", "E2E", "throughput")
    return {k: band_for(query(engine=engine, hardware=hardware, model=model, kind=k, regime="static batch",
                              context_tokens=ctx), table) for k in kinds}


def step_confidence(res: EstimateResult, bands: Mapping[str, Band]) -> dict[str, Any]:
    """The step time (as TTFT or TPOT) and the static batch's figures with their bands."""
    out = {"step_s": _entry(res.total_s, bands["TTFT" if res.phase is Phase.PREFILL else "TPOT"])}
    st = res.static
    if st is not None:
        out |= {"static_ttft_s": _entry(st.ttft_s, bands["TTFT"]), "static_itl_s": _entry(st.itl_s, bands["TPOT"]),
                "static_e2e_s": _entry(st.e2e_s, bands["E2E"]),
                "static_output_tokens_per_s": _entry(st.output_tokens_per_s, bands["throughput"]),
                "static_throughput_tokens_per_s": _entry(st.throughput_tokens_per_s, bands["throughput"])}
    return out


def band_line(bands: Mapping[str, Band], labels: Mapping[str, str] | None = None) -> str:
    """One line for a terminal: each kind's band factors and basis."""
    parts = []
    for kind, b in bands.items():
        name = (labels or {}).get(kind, kind)
        parts.append(f"{name} {b.basis}" if b.extrapolated or b.n == 0 else f"{name} {b.factors()}: {b.basis}")
    return "confidence (P10-P90 of measured / predicted on comparable validated rows): " + "; ".join(parts)
