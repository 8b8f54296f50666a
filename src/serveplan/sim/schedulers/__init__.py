"""Instance schedulers (batching policies), registered by mechanism.

``prefill-first`` (:class:`PrefillFirstScheduler`), ``chunked-prefill``
(:class:`ChunkedPrefillScheduler`, alias ``sarathi``), ``prefill-only`` and ``decode-only``
(disaggregated roles), ``prefill-priority`` (:class:`PrefillPriorityScheduler`, SGLang) and
``inflight-no-evict`` (:class:`InflightNoEvictScheduler`, TensorRT-LLM). Each policy has its
``Options`` (in its engine's own words); :func:`policy_options` reads an engine's, validated.
"""

from serveplan.sim.schedulers.base import (
    ALIASES,
    SCHEDULERS,
    BatchPlan,
    FastPaths,
    InstanceView,
    Options,
    RequestView,
    Scheduler,
    blocks_for,
    canonical_scheduler,
    collocated_schedulers,
    get_scheduler,
    policy_options,
    register_scheduler,
    scheduler_names,
)
from serveplan.sim.schedulers.chunked_prefill import ChunkedPrefillScheduler
from serveplan.sim.schedulers.continuous import PrefillFirstScheduler
from serveplan.sim.schedulers.disaggregated import DecodeOnlyScheduler, PrefillOnlyScheduler
from serveplan.sim.schedulers.inflight import InflightNoEvictScheduler
from serveplan.sim.schedulers.prefill_priority import PrefillPriorityScheduler

__all__ = [
    "ALIASES", "SCHEDULERS", "BatchPlan", "ChunkedPrefillScheduler", "DecodeOnlyScheduler", "FastPaths",
    "InflightNoEvictScheduler", "PrefillPriorityScheduler", "InstanceView", "Options", "PrefillFirstScheduler",
    "PrefillOnlyScheduler", "RequestView", "Scheduler", "blocks_for", "canonical_scheduler", "collocated_schedulers",
    "get_scheduler", "policy_options", "register_scheduler", "scheduler_names",
]
