"""Serving simulator: a request stream through collocated or disaggregated instances.

Public API::

    from serveplan.sim import simulate, SimulationConfig, SimulationResult, Fleet, Workload, SLO
"""

from serveplan.sim.engine import Fidelity, SimulationConfig, SimulationResult, simulate
from serveplan.sim.fleet import Batching, Fleet, InstanceConfig, Role, Strategy
from serveplan.sim.metrics import SLO, LatencyStats
from serveplan.sim.request import RequestRecords
from serveplan.sim.workload import SCENARIOS, LengthDist, Workload, arrival_times

__all__ = [
    "SCENARIOS", "SLO", "Batching", "Fidelity", "Fleet", "InstanceConfig", "LatencyStats", "LengthDist",
    "RequestRecords", "Role", "SimulationConfig", "SimulationResult", "Strategy", "Workload", "arrival_times",
    "simulate",
]
