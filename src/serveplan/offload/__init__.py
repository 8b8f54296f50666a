"""Offloading planner: FlexGen's cost model, policy LP and two-level search over GPU, CPU and disk.

``plan_offload`` searches the best policy, ``evaluate_policy`` predicts a given one and
``offload_frontier`` traces the latency-throughput frontier; all return :class:`OffloadPlan` values.
"""

from serveplan.offload.cost import (
    COMPRESSION_RATIO,
    CostTerms,
    LayerSizes,
    compressed_bytes,
    cost_terms,
    layer_sizes,
)
from serveplan.offload.lp import LinearProgram, LPSolution, build_lp, round_placement, solve
from serveplan.offload.policy import OffloadPolicy, Overlap, parse_policy
from serveplan.offload.search import (
    OffloadFrontier,
    OffloadPlan,
    evaluate_policy,
    offload_frontier,
    plan_offload,
)
from serveplan.specs.catalog import get_host, host_from_dict, list_hosts
from serveplan.specs.host import HostSpec, RuntimeSpeeds

__all__ = [
    "COMPRESSION_RATIO", "CostTerms", "HostSpec", "LPSolution", "LayerSizes", "LinearProgram",
    "OffloadFrontier", "OffloadPlan", "OffloadPolicy", "Overlap", "RuntimeSpeeds", "build_lp",
    "compressed_bytes", "cost_terms", "evaluate_policy", "get_host", "host_from_dict",
    "layer_sizes", "list_hosts", "offload_frontier", "parse_policy", "plan_offload",
    "round_placement", "solve",
]
