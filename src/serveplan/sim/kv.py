"""KV-cache blocks of one instance: the single owner of their accounting.

vLLM PagedAttention accounting (vLLM ``KVCacheManager``: allocate slots, free, usage): the
instance's ``kv_capacity_tokens // block_size`` blocks; a prompt reserves ``ceil(prompt /
block)`` blocks at admission (a transferred cache ``ceil(kv_len / block)``), a decode appends a
block every ``block_size`` tokens, a finished or preempted request frees its blocks at once, and
a request whose cache is still being sent (disaggregated prefill) frees them when the transfer
ends. Memory is never overcommitted (asserted).

Models with local layers (sliding window, chunked attention) hold less than one token's K/V per
token of a long sequence: ``tokens_of(length)`` (from
:meth:`Estimator.kv_equivalent_tokens <serveplan.estimator.step.Estimator.kv_equivalent_tokens>`)
gives the full-model tokens a sequence's cache is worth, and blocks count those, so capacity
follows the windows (vLLM V1's hybrid allocator frees sliding-window blocks that left the window).

Per-request block counts live in one list indexed by request id (a request holds blocks on one
instance at a time), shared with the schedulers, which read it to price preemptions.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence

from serveplan.units import ceil_div


class KVCache:
    """Blocks of one instance: admit, grow, free, peak.

    Parameters
    ----------
    capacity_tokens:
        KV tokens the instance holds (:attr:`MemoryEstimate.kv_capacity_tokens`).
    block_size:
        Tokens per block.
    blocks:
        Per-request block counts (shared list, indexed by request id).
    """

    __slots__ = ("block_size", "total", "free", "peak", "blocks", "_releases", "_eq")

    def __init__(self, capacity_tokens: int, block_size: int, blocks: list[int],
                 tokens_of: Callable[[int], float] | None = None) -> None:
        self.block_size = block_size
        self._eq = tokens_of  # sequence length -> full-model tokens its cache holds (<= length)
        self.total = capacity_tokens // block_size
        self.free = self.total
        self.peak = 0
        self.blocks = blocks
        self._releases: list[tuple[float, int]] = []  # (time, blocks) of caches still being sent

    def blocks_for(self, tokens: int) -> int:
        """Blocks holding the cache of a ``tokens``-token sequence."""
        if self._eq is not None:
            return ceil_div(math.ceil(self._eq(tokens) - 1e-9), self.block_size)  # float -> whole tokens
        return ceil_div(tokens, self.block_size)

    # ---------------------------------------------------------------- admit
    def allocate(self, q: int, tokens: int) -> None:
        """Reserve the blocks of ``tokens`` for request ``q`` (admission)."""
        b = self.blocks_for(tokens)
        self.free -= b
        self.blocks[q] = b
        assert self.free >= 0, "KV blocks overcommitted"
        self._track_peak()

    def fits(self, tokens: int) -> bool:
        """Whether ``tokens`` more tokens' blocks fit now."""
        return self.blocks_for(tokens) <= self.free

    # ---------------------------------------------------------------- grow
    def append_tokens(self, decodes: Sequence[int], kv_len: Sequence[int]) -> None:
        """Each request of ``decodes`` writes one KV entry after its ``kv_len`` cached tokens:
        a new block where the last one is full."""
        bs, blocks = self.block_size, self.blocks
        if self._eq is not None:
            for q in decodes:
                nb = self.blocks_for(kv_len[q] + 1)
                self.free -= nb - blocks[q]
                blocks[q] = nb
            assert self.free >= 0, "KV blocks overcommitted"
            return
        for q in decodes:
            if kv_len[q] % bs == 0:
                blocks[q] += 1
                self.free -= 1
        assert self.free >= 0, "KV blocks overcommitted"

    def grow_to(self, run: Sequence[int], kv_len: Sequence[int]) -> None:
        """The requests of ``run`` now hold ``kv_len`` tokens each (after a stretch of steps)."""
        bs, blocks = self.block_size, self.blocks
        free = self.free
        for r in run:
            nb = (kv_len[r] + bs - 1) // bs if self._eq is None else self.blocks_for(kv_len[r])
            free -= nb - blocks[r]
            blocks[r] = nb
        assert free >= 0, "KV blocks overcommitted"
        self.free = free

    def steps_that_fit(self, run: Sequence[int], kv_len: Sequence[int], k_max: int) -> int:
        """Largest number of decode steps (``1 <= k <= k_max``) of every request of ``run``
        whose new blocks fit (one step is known to fit)."""
        bs, blocks, free = self.block_size, self.blocks, self.free
        if not run or len(run) * ceil_div(k_max, bs) <= free:
            return k_max

        def need(k: int) -> int:
            if self._eq is not None:
                return sum(self.blocks_for(kv_len[q] + k) - blocks[q] for q in run)
            return sum(ceil_div(kv_len[q] + k, bs) - blocks[q] for q in run)

        lo, hi = 1, k_max
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if need(mid) <= free:
                lo = mid
            else:
                hi = mid - 1
        return lo

    # ---------------------------------------------------------------- free
    def free_request(self, q: int) -> None:
        """Request ``q`` gives back its blocks now (finished or preempted)."""
        self.free += self.blocks[q]
        self.blocks[q] = 0

    def free_at(self, q: int, t: float, now: float) -> None:
        """Request ``q``'s blocks are freed at ``t`` (its cache is being sent until then)."""
        if t <= now:
            self.free += self.blocks[q]
        else:
            heapq.heappush(self._releases, (t, self.blocks[q]))
        self.blocks[q] = 0

    def release_due(self, now: float) -> None:
        """Free the blocks of transfers finished by ``now``."""
        rel = self._releases
        while rel and rel[0][0] <= now:
            self.free += heapq.heappop(rel)[1]

    @property
    def next_release(self) -> float:
        """When the next pending transfer frees its blocks (``inf``: none)."""
        return self._releases[0][0] if self._releases else math.inf

    # ---------------------------------------------------------------- usage
    def _track_peak(self) -> None:
        used = self.total - self.free
        if used > self.peak:
            self.peak = used

    @property
    def used(self) -> int:
        return self.total - self.free
