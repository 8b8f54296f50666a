"""Instance schedulers (batching policies), registered by mechanism.

``prefill-first`` (:class:`PrefillFirstScheduler`, alias ``vllm``), ``chunked-prefill``
(:class:`ChunkedPrefillScheduler`, alias ``sarathi``), ``prefill-only`` and ``decode-only``
(disaggregated roles).
"""

from serveplan.sim.schedulers.base import (
    ALIASES,
    SCHEDULERS,
    BatchPlan,
    FastPaths,
    InstanceView,
    RequestView,
    Scheduler,
    blocks_for,
    canonical_scheduler,
    collocated_schedulers,
    get_scheduler,
    register_scheduler,
    scheduler_names,
)
from serveplan.sim.schedulers.chunked_prefill import ChunkedPrefillScheduler
from serveplan.sim.schedulers.continuous import PrefillFirstScheduler
from serveplan.sim.schedulers.disaggregated import DecodeOnlyScheduler, PrefillOnlyScheduler

__all__ = [
    "ALIASES", "SCHEDULERS", "BatchPlan", "ChunkedPrefillScheduler", "DecodeOnlyScheduler", "FastPaths",
    "InstanceView", "PrefillFirstScheduler", "PrefillOnlyScheduler", "RequestView", "Scheduler", "blocks_for",
    "canonical_scheduler", "collocated_schedulers", "get_scheduler", "register_scheduler", "scheduler_names",
]
