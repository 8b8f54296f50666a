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
    "plan_serving": "serveplan.commands.plan",
    "InfeasibleError": "serveplan.errors",
    "PlannerError": "serveplan.errors",
    "SolverError": "serveplan.errors",
    "SpecError": "serveplan.errors",
    "EstimateResult": "serveplan.estimator.api",
    "estimate": "serveplan.estimator.api",
    "StepBatch": "serveplan.estimator.batch",
    "OperatorTime": "serveplan.estimator.operators",
    "attention_time": "serveplan.estimator.operators",
    "collective_time": "serveplan.estimator.operators",
    "gemm_time": "serveplan.estimator.operators",
    "SpecEstimator": "serveplan.estimator.speculative",
    "StaticMetrics": "serveplan.estimator.static",
    "static_batch": "serveplan.estimator.static",
    "Estimator": "serveplan.estimator.step",
    "MemoryEstimate": "serveplan.estimator.step",
    "StepEstimate": "serveplan.estimator.step",
    "HostSpec": "serveplan.offload",
    "OffloadFrontier": "serveplan.offload",
    "OffloadPlan": "serveplan.offload",
    "OffloadPolicy": "serveplan.offload",
    "evaluate_policy": "serveplan.offload",
    "get_host": "serveplan.offload",
    "list_hosts": "serveplan.offload",
    "offload_frontier": "serveplan.offload",
    "parse_policy": "serveplan.offload",
    "plan_offload": "serveplan.offload",
    "GoodputResult": "serveplan.optimize",
    "GoodputSettings": "serveplan.optimize",
    "SearchResult": "serveplan.optimize",
    "SearchSpace": "serveplan.optimize",
    "SLO": "serveplan.sim",
    "Fleet": "serveplan.sim",
    "LatencyStats": "serveplan.sim",
    "SimulationConfig": "serveplan.sim",
    "SimulationResult": "serveplan.sim",
    "Strategy": "serveplan.sim",
    "Workload": "serveplan.sim",
    "simulate": "serveplan.sim",
    "get_engine": "serveplan.specs.catalog",
    "get_hardware": "serveplan.specs.catalog",
    "get_model": "serveplan.specs.catalog",
    "get_profile": "serveplan.specs.catalog",
    "list_engines": "serveplan.specs.catalog",
    "list_hardware": "serveplan.specs.catalog",
    "list_models": "serveplan.specs.catalog",
    "list_profiles": "serveplan.specs.catalog",
    "DeviceSpec": "serveplan.specs.hardware",
    "LinkSpec": "serveplan.specs.hardware",
    "model_from_hf_config": "serveplan.specs.hf_config",
    "ModelSpec": "serveplan.specs.model",
    "ParallelConfig": "serveplan.specs.parallel",
    "EfficiencyProfile": "serveplan.specs.profile",
    "Phase": "serveplan.specs.profile",
    "PhaseEfficiency": "serveplan.specs.profile",
    "SpecDecodeConfig": "serveplan.specs.speculative",
    "SpecMethod": "serveplan.specs.speculative",
    "DType": "serveplan.units",
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
