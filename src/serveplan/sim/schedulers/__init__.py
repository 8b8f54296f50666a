"""Instance schedulers (batching policies), registered by name.

``vllm`` (:class:`PrefillFirstScheduler`), ``sarathi`` (:class:`ChunkedPrefillScheduler`),
``prefill-only`` and ``decode-only`` (disaggregated roles).
"""

from serveplan.sim.schedulers.base import (
    SCHEDULERS,
    BatchPlan,
    Scheduler,
    blocks_for,
    get_scheduler,
    register_scheduler,
)
from serveplan.sim.schedulers.chunked_prefill import ChunkedPrefillScheduler
from serveplan.sim.schedulers.continuous import PrefillFirstScheduler
from serveplan.sim.schedulers.disaggregated import DecodeOnlyScheduler, PrefillOnlyScheduler

__all__ = [
    "SCHEDULERS", "BatchPlan", "ChunkedPrefillScheduler", "DecodeOnlyScheduler", "PrefillFirstScheduler",
    "PrefillOnlyScheduler", "Scheduler", "blocks_for", "get_scheduler", "register_scheduler",
]
