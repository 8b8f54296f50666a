"""KV-cache blocks of one instance: the single owner of their accounting.

vLLM PagedAttention accounting (vLLM ``KVCacheManager``: allocate slots, free, usage): the
instance's ``kv_capacity_tokens // block_size`` blocks; a prompt reserves ``ceil(prompt /
block)`` blocks at admission (a transferred cache ``ceil(kv_len / block)``), a decode appends a
block every ``block_size`` tokens, a finished or preempted request frees its blocks at once, and
a request whose cache is still being sent (disaggregated prefill) frees them when the transfer
ends. Memory is never overcommitted (asserted).

Models with local layers (sliding window, chunked attention) hold less than one token's K/V per
token of a long sequence: ``tokens_of(length)`` (from
:meth:`Estimator.kv_equivalent_tokens_fn <serveplan.estimator.step.Estimator.kv_equivalent_tokens_fn>`)
gives the full-model tokens a sequence's cache is worth, and blocks count those, so capacity
follows the windows (vLLM V1's hybrid allocator frees sliding-window blocks that left the window).

Per-request block counts live in one list indexed by request id (a request holds blocks on one
instance at a time), shared with the schedulers, which read it to price preemptions.

With a prefix cache (:class:`~serveplan.sim.prefix_cache.PrefixCache`, :attr:`KVCache.prefix`, seen
through the :class:`Prefix` protocol)
finished requests' full blocks stay cached in the free pool and admissions, growth and frees go
through it.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from typing import Protocol

from serveplan.units import ceil_div


class _Lengths(Protocol):
    """Per-request lengths, indexed by request id."""

    def __getitem__(self, q: int, /) -> float: ...


class _Shared(Protocol):
    """Blocks each request shares with the prefix cache, indexed by request id."""

    def __getitem__(self, q: int, /) -> int: ...


class Prefix(Protocol):
    """What the KV cache and its instance ask of a prefix cache over it
    (:class:`~serveplan.sim.prefix_cache.PrefixCache`, which implements it; the KV cache stays
    the owner of the blocks and calls these hooks)."""

    #: cached GPU blocks no running request pins (counted in :attr:`KVCache.free`)
    evictable: int
    #: blocks of each running request that are cached hits
    shared: list[int]
    #: seconds of lower-tier loads each admitted request's first prefill step pays
    loads: dict[int, float]

    def peek(self, q: int, prompt_len: int) -> int: ...
    def admit(self, q: int, prompt_len: int) -> int: ...
    def release(self, q: int, kv_tokens: int) -> None: ...
    def release_at(self, q: int, own: int, kv_tokens: int, t: float, now: float) -> None: ...
    def release_due(self, now: float) -> None: ...
    def make_room(self) -> None: ...
    def step_with_loads(self, t: float, prefill: Sequence[tuple[int, int]]) -> float: ...


class _Unbounded:
    """An output length no request reaches (``KVCache.decode`` without ``output``)."""

    def __getitem__(self, q: int, /) -> float:
        return math.inf


_UNBOUNDED = _Unbounded()


class _NoneShared:
    """No request shares cached blocks (``KVCache.decode`` without a prefix cache)."""

    def __getitem__(self, q: int, /) -> int:
        return 0


_NONE_SHARED = _NoneShared()


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
    tokens_of:
        Sequence length -> full-model tokens its cache holds (at most the length); None: equal.
    """

    __slots__ = ("block_size", "total", "free", "peak", "blocks", "releases", "_eq", "prefix", "pending")

    def __init__(self, capacity_tokens: int, block_size: int, blocks: list[int],
                 tokens_of: Callable[[int], float] | None = None) -> None:
        self.block_size = block_size
        self._eq = tokens_of
        self.total = capacity_tokens // block_size
        self.free = self.total
        self.peak = 0
        self.blocks = blocks
        #: (time, blocks) of caches still being sent, earliest first (a heap)
        self.releases: list[tuple[float, int]] = []
        #: the prefix cache over these blocks (None: off, every request owns all its blocks)
        self.prefix: Prefix | None = None
        #: blocks appended by decodes not yet written per request (:class:`~serveplan.sim.cohort.DecodeCohort`):
        #: counted in :attr:`free` until written, so the blocks really free are ``free - pending``
        self.pending = 0

    def blocks_for(self, tokens: int) -> int:
        """Blocks holding the cache of a ``tokens``-token sequence.

        With ``tokens_of``, the equivalent tokens of the length rounded up to whole blocks: the
        count then changes only where the plain count does, by at most one block (the
        equivalence grows at most one token per token), so the plain ``ceil(tokens / block)``
        that schedulers price admissions and decode growth with is never below it.
        """
        bs = self.block_size
        if self._eq is not None:
            return ceil_div(math.ceil(self._eq(ceil_div(tokens, bs) * bs) - 1e-9), bs)
        return ceil_div(tokens, bs)

    # ---------------------------------------------------------------- admit
    def allocate(self, q: int, tokens: int) -> int:
        """Reserve the blocks of ``tokens`` for request ``q`` (admission). With the prefix cache,
        returns the prompt tokens its plan counted as cached that were evicted meanwhile."""
        if self.prefix is not None:
            return self.prefix.admit(q, tokens)
        b = -(-tokens // self.block_size) if self._eq is None else self.blocks_for(tokens)  # per admission
        self.free -= b
        self.blocks[q] = b
        assert self.free >= self.pending, "KV blocks overcommitted"
        if self.total - self.free + self.pending > self.peak:
            self.peak = self.total - self.free + self.pending
        return 0

    def try_allocate(self, q: int, tokens: int) -> bool:
        """:meth:`allocate` when the blocks fit now; whether they did."""
        b = -(-tokens // self.block_size) if self._eq is None else self.blocks_for(tokens)
        if b > self.free - self.pending:
            return False
        if self.prefix is not None:
            self.prefix.admit(q, tokens)
            return True
        self.free -= b
        self.blocks[q] = b
        if self.total - self.free + self.pending > self.peak:
            self.peak = self.total - self.free + self.pending
        return True

    # ---------------------------------------------------------------- grow
    def append_tokens(self, decodes: Sequence[int], kv_len: Sequence[int]) -> None:
        """Each request of ``decodes`` writes one KV entry after its ``kv_len`` cached tokens (the
        lengths before the step): a new block where the last one is full. (:meth:`decode` does the
        same and advances the lengths.)"""
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
        if self.prefix is not None and self.prefix.evictable > self.free:
            self.prefix.make_room()

    def decode(self, run: Sequence[int], k: int, kv_len: list[int], generated: list[int],
               output: _Lengths | None = None) -> list[int]:
        """Each request of ``run`` decodes ``k`` tokens (a stretch of ``k`` steps): ``k`` more
        generated tokens and KV entries, and the blocks follow. Returns the requests of ``run``
        (in order) that reached their ``output`` tokens (none without ``output``). One pass: this
        runs per stretch and request, the simulator's innermost loop."""
        lim: _Lengths = _UNBOUNDED if output is None else output
        bs, blocks = self.block_size, self.blocks
        free = self.free
        done = []
        if self._eq is None and self.prefix is None:
            for r in run:
                g = generated[r] + k
                generated[r] = g
                k1 = kv_len[r] + k
                kv_len[r] = k1
                nb = -(-k1 // bs)  # ceil_div(k1, bs), written out: the simulator's innermost loop
                free -= nb - blocks[r]
                blocks[r] = nb
                if g >= lim[r]:
                    done.append(r)
        else:  # windowed attention (blocks_for), or the prefix cache: own blocks, the span less shared hits
            blocks_for = self.blocks_for
            shared: _Shared = _NONE_SHARED if self.prefix is None else self.prefix.shared
            for r in run:
                g = generated[r] + k
                generated[r] = g
                k1 = kv_len[r] + k
                kv_len[r] = k1
                nb = blocks_for(k1) - shared[r]
                free -= nb - blocks[r]
                blocks[r] = nb
                if g >= lim[r]:
                    done.append(r)
        assert free >= 0, "KV blocks overcommitted"
        self.free = free
        if self.prefix is not None and self.prefix.evictable > free:  # the new blocks took cached ones
            self.prefix.make_room()
        return done

    def steps_that_fit(self, run: Sequence[int], kv_len: Sequence[int], k_max: int) -> int:
        """Largest number of decode steps (``1 <= k <= k_max``) of every request of ``run``
        whose new blocks fit (one step is known to fit)."""
        bs, blocks, free = self.block_size, self.blocks, self.free
        if not run or len(run) * ceil_div(k_max, bs) <= free:
            return k_max

        def need(k: int) -> int:
            if self.prefix is not None:
                sh = self.prefix.shared
                return sum(ceil_div(kv_len[q] + k, bs) - sh[q] - blocks[q] for q in run)
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
    def free_request(self, q: int, kv_tokens: int = 0) -> None:
        """Request ``q`` gives back its blocks now (finished or preempted; with the prefix cache
        its ``kv_tokens`` full blocks stay cached)."""
        self.free += self.blocks[q]
        self.blocks[q] = 0
        if self.prefix is not None:
            self.prefix.release(q, kv_tokens)

    def free_at(self, q: int, t: float, now: float, kv_tokens: int = 0) -> None:
        """Request ``q``'s blocks are freed at ``t`` (its cache is being sent until then)."""
        if self.prefix is not None:
            own = self.blocks[q]
            self.blocks[q] = 0
            self.prefix.release_at(q, own, kv_tokens, t, now)
            return
        if t <= now:
            self.free += self.blocks[q]
        else:
            heapq.heappush(self.releases, (t, self.blocks[q]))
        self.blocks[q] = 0

    def release_due(self, now: float) -> None:
        """Free the blocks of transfers finished by ``now``."""
        rel = self.releases
        while rel and rel[0][0] <= now:
            self.free += heapq.heappop(rel)[1]
        if self.prefix is not None:
            self.prefix.release_due(now)

    @property
    def next_release(self) -> float:
        """When the next pending transfer frees its blocks (``inf``: none)."""
        return self.releases[0][0] if self.releases else math.inf

    # ---------------------------------------------------------------- usage
    @property
    def used(self) -> int:
        return self.total - self.free + self.pending
