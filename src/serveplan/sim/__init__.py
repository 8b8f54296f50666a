"""Serving simulator: a request stream through collocated or disaggregated instances.

Public API::

    from serveplan.sim import simulate, SimulationConfig, SimulationResult, Fleet, Workload, SLO

Engines (``SimulationConfig(engine="vllm", ...)``), offline runs (``rate=None, offline=True``) and
closed loops (``rate=None, concurrency=C``, statistics in ``SimulationResult.closed_loop``).
"""

from serveplan.sim.engine import ClosedLoopStats, Fidelity, SimulationConfig, SimulationResult, simulate
from serveplan.sim.fleet import Batching, Fleet, InstanceConfig, Role, Strategy
from serveplan.sim.metrics import SLO, LatencyStats
from serveplan.sim.request import RequestRecords
from serveplan.sim.serving import EngineSetup, resolve_engine
from serveplan.sim.workload import SCENARIOS, LengthDist, Workload, arrival_times

__all__ = [
    "SCENARIOS", "SLO", "Batching", "ClosedLoopStats", "EngineSetup", "Fidelity", "Fleet", "InstanceConfig",
    "LatencyStats", "LengthDist",
    "RequestRecords", "Role", "SimulationConfig", "SimulationResult", "Strategy", "Workload", "arrival_times",
    "resolve_engine", "simulate",
]
