"""Serving simulator: a request stream through collocated or disaggregated instances.

Public API::

    from serveplan.sim import simulate, SimulationConfig, SimulationResult, Workload, Strategy, SLO, LatencyStats
"""

from serveplan.sim.cluster import Strategy
from serveplan.sim.engine import SimulationConfig, SimulationResult, simulate
from serveplan.sim.metrics import SLO, LatencyStats
from serveplan.sim.request import RequestRecords
from serveplan.sim.workload import SCENARIOS, LengthDist, Workload, arrival_times

__all__ = [
    "SCENARIOS", "SLO", "LatencyStats", "LengthDist", "RequestRecords", "SimulationConfig", "SimulationResult",
    "Strategy", "Workload", "arrival_times", "simulate",
]
