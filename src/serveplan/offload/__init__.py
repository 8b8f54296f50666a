"""Offloading planner: FlexGen's cost model, policy LP and two-level search over GPU, CPU and disk.

``plan_offload`` searches the best policy, ``evaluate_policy`` predicts a given one and
``offload_frontier`` traces the latency-throughput frontier; all return :class:`OffloadPlan` values.
"""

import typing

from serveplan.lazy import lazy_exports as _lazy_exports

if typing.TYPE_CHECKING:
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

__getattr__, __dir__ = _lazy_exports(__name__, {
    "serveplan.offload.cost": ("COMPRESSION_RATIO", "CostTerms", "LayerSizes", "compressed_bytes", "cost_terms",
        "layer_sizes"),
    "serveplan.offload.lp": ("LinearProgram", "LPSolution", "build_lp", "round_placement", "solve"),
    "serveplan.offload.policy": ("OffloadPolicy", "Overlap", "parse_policy"),
    "serveplan.offload.search": ("OffloadFrontier", "OffloadPlan", "evaluate_policy", "offload_frontier",
        "plan_offload"),
    "serveplan.specs.catalog": ("get_host", "host_from_dict", "list_hosts"),
    "serveplan.specs.host": ("HostSpec", "RuntimeSpeeds"),
})

__all__ = [
    "COMPRESSION_RATIO", "CostTerms", "HostSpec", "LPSolution", "LayerSizes", "LinearProgram",
    "OffloadFrontier", "OffloadPlan", "OffloadPolicy", "Overlap", "RuntimeSpeeds", "build_lp",
    "compressed_bytes", "cost_terms", "evaluate_policy", "get_host", "host_from_dict",
    "layer_sizes", "list_hosts", "offload_frontier", "parse_policy", "plan_offload",
    "round_placement", "solve",
]
