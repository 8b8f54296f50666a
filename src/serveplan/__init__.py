"""serveplan: predict TTFT, TPOT, throughput and goodput of LLM serving strategies, and rank them.

The public API is re-exported here; see the subpackages for the layers
(specs -> ops -> estimator -> calibrate -> sim -> optimize/offload -> validate -> report -> commands ->
ui/cli).
"""

import typing

from serveplan.lazy import lazy_exports as _lazy_exports

if typing.TYPE_CHECKING:
    from serveplan.commands.plan import plan_serving
    from serveplan.errors import InfeasibleError, PlannerError, SolverError, SpecError
    from serveplan.estimator.api import EstimateResult, estimate
    from serveplan.estimator.batch import StepBatch
    from serveplan.estimator.operators import OperatorTime, attention_time, collective_time, gemm_time
    from serveplan.estimator.speculative import SpecEstimator
    from serveplan.estimator.static import StaticMetrics, static_batch
    from serveplan.estimator.step import Estimator, MemoryEstimate, StepEstimate
    from serveplan.offload import (
        HostSpec,
        OffloadFrontier,
        OffloadPlan,
        OffloadPolicy,
        evaluate_policy,
        get_host,
        list_hosts,
        offload_frontier,
        parse_policy,
        plan_offload,
    )
    from serveplan.optimize import GoodputResult, GoodputSettings, SearchResult, SearchSpace
    from serveplan.sim import SLO, Fleet, LatencyStats, SimulationConfig, SimulationResult, Strategy, Workload, simulate
    from serveplan.specs.catalog import (
        get_engine,
        get_hardware,
        get_model,
        get_profile,
        list_engines,
        list_hardware,
        list_models,
        list_profiles,
    )
    from serveplan.specs.hardware import DeviceSpec, LinkSpec
    from serveplan.specs.hf_config import model_from_hf_config
    from serveplan.specs.model import ModelSpec
    from serveplan.specs.parallel import ParallelConfig
    from serveplan.specs.profile import EfficiencyProfile, Phase, PhaseEfficiency
    from serveplan.specs.speculative import SpecDecodeConfig, SpecMethod
    from serveplan.units import DType

__getattr__, __dir__ = _lazy_exports(__name__, {
    "serveplan.commands.plan": ("plan_serving",),
    "serveplan.errors": ("InfeasibleError", "PlannerError", "SolverError", "SpecError"),
    "serveplan.estimator.api": ("EstimateResult", "estimate"),
    "serveplan.estimator.batch": ("StepBatch",),
    "serveplan.estimator.operators": ("OperatorTime", "attention_time", "collective_time", "gemm_time"),
    "serveplan.estimator.speculative": ("SpecEstimator",),
    "serveplan.estimator.static": ("StaticMetrics", "static_batch"),
    "serveplan.estimator.step": ("Estimator", "MemoryEstimate", "StepEstimate"),
    "serveplan.offload": ("HostSpec", "OffloadFrontier", "OffloadPlan", "OffloadPolicy", "evaluate_policy",
        "get_host", "list_hosts", "offload_frontier", "parse_policy", "plan_offload"),
    "serveplan.optimize": ("GoodputResult", "GoodputSettings", "SearchResult", "SearchSpace"),
    "serveplan.sim": ("SLO", "Fleet", "LatencyStats", "SimulationConfig", "SimulationResult", "Strategy", "Workload",
        "simulate"),
    "serveplan.specs.catalog": ("get_engine", "get_hardware", "get_model", "get_profile", "list_engines",
        "list_hardware", "list_models", "list_profiles"),
    "serveplan.specs.hardware": ("DeviceSpec", "LinkSpec"),
    "serveplan.specs.hf_config": ("model_from_hf_config",),
    "serveplan.specs.model": ("ModelSpec",),
    "serveplan.specs.parallel": ("ParallelConfig",),
    "serveplan.specs.profile": ("EfficiencyProfile", "Phase", "PhaseEfficiency"),
    "serveplan.specs.speculative": ("SpecDecodeConfig", "SpecMethod"),
    "serveplan.units": ("DType",),
})

__version__ = "0.1.0"

__all__ = [
    "DType", "DeviceSpec", "EfficiencyProfile", "EstimateResult", "Estimator", "InfeasibleError",
    "LinkSpec", "MemoryEstimate", "ModelSpec", "ParallelConfig", "PhaseEfficiency", "PlannerError",
    "SolverError", "SpecError", "StaticMetrics", "StepBatch", "StepEstimate", "estimate",
    "get_engine", "get_hardware", "get_model", "get_profile", "list_engines", "list_hardware", "list_models",
    "list_profiles",
    "model_from_hf_config", "static_batch",
]
__all__ += ["Fleet", "LatencyStats", "SLO", "SimulationConfig", "SimulationResult", "Strategy", "Workload", "simulate"]
__all__ += ["GoodputResult", "GoodputSettings", "SearchResult", "SearchSpace", "plan_serving"]
__all__ += ["HostSpec", "OffloadFrontier", "OffloadPlan", "OffloadPolicy", "evaluate_policy", "get_host",
            "list_hosts", "offload_frontier", "parse_policy", "plan_offload"]
__all__ += ["Phase"]
__all__ += ["OperatorTime", "attention_time", "collective_time", "gemm_time"]
__all__ += ["SpecDecodeConfig", "SpecEstimator", "SpecMethod"]
