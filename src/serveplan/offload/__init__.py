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
    "COMPRESSION_RATIO": "serveplan.offload.cost",
    "CostTerms": "serveplan.offload.cost",
    "LayerSizes": "serveplan.offload.cost",
    "compressed_bytes": "serveplan.offload.cost",
    "cost_terms": "serveplan.offload.cost",
    "layer_sizes": "serveplan.offload.cost",
    "LinearProgram": "serveplan.offload.lp",
    "LPSolution": "serveplan.offload.lp",
    "build_lp": "serveplan.offload.lp",
    "round_placement": "serveplan.offload.lp",
    "solve": "serveplan.offload.lp",
    "OffloadPolicy": "serveplan.offload.policy",
    "Overlap": "serveplan.offload.policy",
    "parse_policy": "serveplan.offload.policy",
    "OffloadFrontier": "serveplan.offload.search",
    "OffloadPlan": "serveplan.offload.search",
    "evaluate_policy": "serveplan.offload.search",
    "offload_frontier": "serveplan.offload.search",
    "plan_offload": "serveplan.offload.search",
    "get_host": "serveplan.specs.catalog",
    "host_from_dict": "serveplan.specs.catalog",
    "list_hosts": "serveplan.specs.catalog",
    "HostSpec": "serveplan.specs.host",
    "RuntimeSpeeds": "serveplan.specs.host",
})

__all__ = [
    "COMPRESSION_RATIO", "CostTerms", "HostSpec", "LPSolution", "LayerSizes", "LinearProgram",
    "OffloadFrontier", "OffloadPlan", "OffloadPolicy", "Overlap", "RuntimeSpeeds", "build_lp",
    "compressed_bytes", "cost_terms", "evaluate_policy", "get_host", "host_from_dict",
    "layer_sizes", "list_hosts", "offload_frontier", "parse_policy", "plan_offload",
    "round_placement", "solve",
]
