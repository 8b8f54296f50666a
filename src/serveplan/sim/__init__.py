"""Serving simulator: a request stream through collocated or disaggregated instances.

Public API::

    from serveplan.sim import simulate, SimulationConfig, SimulationResult, Fleet, Workload, SLO

Engines (``SimulationConfig(engine="vllm", ...)``), offline runs (``rate=None, offline=True``) and
closed loops (``rate=None, concurrency=C``, statistics in ``SimulationResult.closed_loop``).
Multi-turn sessions (``session_workload``), a shared system prompt (``with_system_prompt``) and
Mooncake traces run the prefix cache (``SimulationResult.prefix_cache``); ``KVTiers`` adds CPU and
disk tiers.
"""

import typing

from serveplan.lazy import lazy_exports as _lazy_exports

if typing.TYPE_CHECKING:
    from serveplan.sim.config import Fidelity, SimulationConfig, simulation_config
    from serveplan.sim.engine import ClosedLoopStats, SimulationResult, simulate
    from serveplan.sim.fleet import Batching, Fleet, InstanceConfig, Role, Strategy
    from serveplan.sim.metrics import SLO, LatencyStats
    from serveplan.sim.prefix_cache import KVTiers, PrefixCacheReport
    from serveplan.sim.request import RequestRecords
    from serveplan.sim.serving import EngineSetup, resolve_engine
    from serveplan.sim.sessions import session_workload, with_system_prompt
    from serveplan.sim.workload import SCENARIOS, LengthDist, Workload, arrival_times

__getattr__, __dir__ = _lazy_exports(__name__, {
    "serveplan.sim.config": ("Fidelity", "SimulationConfig", "simulation_config"),
    "serveplan.sim.engine": ("ClosedLoopStats", "SimulationResult", "simulate"),
    "serveplan.sim.fleet": ("Batching", "Fleet", "InstanceConfig", "Role", "Strategy"),
    "serveplan.sim.metrics": ("SLO", "LatencyStats"),
    "serveplan.sim.prefix_cache": ("KVTiers", "PrefixCacheReport"),
    "serveplan.sim.request": ("RequestRecords",),
    "serveplan.sim.serving": ("EngineSetup", "resolve_engine"),
    "serveplan.sim.sessions": ("session_workload", "with_system_prompt"),
    "serveplan.sim.workload": ("SCENARIOS", "LengthDist", "Workload", "arrival_times"),
})

__all__ = [
    "SCENARIOS", "SLO", "Batching", "ClosedLoopStats", "EngineSetup", "Fidelity", "Fleet", "InstanceConfig",
    "KVTiers", "LatencyStats", "LengthDist", "PrefixCacheReport",
    "RequestRecords", "Role", "SimulationConfig", "SimulationResult", "Strategy", "Workload", "arrival_times",
    "resolve_engine", "session_workload", "simulate", "simulation_config", "with_system_prompt",
]
