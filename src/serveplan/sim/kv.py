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
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Protocol

from serveplan.units import ceil_div


class _Lengths(Protocol):
    """Per-request lengths, indexed by request id."""

    def __getitem__(self, q: int, /) -> float: ...


class _Shared(Protocol):
    """Blocks each request shares with the prefix cache, indexed by request id."""

    def __getitem__(self, q: int, /) -> int: ...


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

    __slots__ = ("block_size", "total", "free", "peak", "blocks", "releases", "_eq", "prefix")

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
        self.prefix: PrefixCache | None = None

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
        assert self.free >= 0, "KV blocks overcommitted"
        if self.total - self.free > self.peak:
            self.peak = self.total - self.free
        return 0

    def try_allocate(self, q: int, tokens: int) -> bool:
        """:meth:`allocate` when the blocks fit now; whether they did."""
        b = -(-tokens // self.block_size) if self._eq is None else self.blocks_for(tokens)
        if b > self.free:
            return False
        if self.prefix is not None:
            self.prefix.admit(q, tokens)
            return True
        self.free -= b
        self.blocks[q] = b
        if self.total - self.free > self.peak:
            self.peak = self.total - self.free
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
        return self.total - self.free


# ---------------------------------------------------------------------- prefix cache and KV tiers
class BlockChains:
    """Which cached blocks a request's tokens are: a chain of *nodes* per request.

    A node is a run of blocks with one identity (``key``): the shared system prompt, one
    session's conversation (every turn resends the conversation so far, so its ``j``-th full
    block is the same in every later turn: a vLLM block hash chains the tokens before it, vLLM
    ``docs/design/prefix_caching.md`` v0.11), or one block of a Mooncake trace (its ``hash_ids``
    already chain the prefix, FAST'25 trace README). A request's chain is
    ``((key, first_block, blocks), ...)`` with ``blocks = -1`` for a node that grows with the
    conversation (the session node). Blocks are engine blocks of ``block_size`` tokens; only
    full blocks are cached (vLLM hashes full blocks only).

    Parameters
    ----------
    block_size:
        Engine tokens per block.
    session:
        Node key of each request's own content (a session id, or a unique id per request); None:
        requests have no own node (only the trace's hash ids).
    sys_tokens:
        Tokens of the system prompt shared by every request (``0``: none).
    hash_ids, hash_block:
        Per request, the trace's block hashes, each of ``hash_block`` tokens.
    prompt_len:
        Prompt tokens per request (bounds the last hashed block).
    """

    def __init__(self, block_size: int, *, session: Sequence[int] | None = None, sys_tokens: int = 0,
                 hash_ids: Sequence[Sequence[int]] | None = None, hash_block: int = 512,
                 prompt_len: Sequence[int] = ()) -> None:
        self.block_size = block_size
        self.session = session
        self.sys_blocks = sys_tokens // block_size
        self.hash_ids = hash_ids
        self.hash_block = hash_block
        self.prompt_len = prompt_len
        self._memo: dict[int, tuple[tuple[int, int, int], ...]] = {}

    def of(self, q: int) -> tuple[tuple[int, int, int], ...]:
        c = self._memo.get(q)
        if c is None:
            c = self._memo[q] = self._build(q)
        return c

    def _build(self, q: int) -> tuple[tuple[int, int, int], ...]:
        bs = self.block_size
        out: list[tuple[int, int, int]] = []
        start = 0
        if self.hash_ids is not None:
            per = self.hash_block // bs
            n_tok = self.prompt_len[q]
            for i, h in enumerate(self.hash_ids[q]):
                # a trace block of hash_block tokens is per engine blocks; the last one may be partial
                blocks = min(per, (n_tok - i * self.hash_block) // bs)
                if blocks <= 0:
                    break
                out.append((HASH_KEY_BASE + int(h), start, blocks))
                start += blocks
                if blocks < per:
                    break
            return tuple(out)
        if self.sys_blocks:
            out.append((SYS_KEY, 0, self.sys_blocks))
            start = self.sys_blocks
        if self.session is not None:
            out.append((int(self.session[q]), start, -1))
        return tuple(out)


#: node key of the shared system prompt (session keys are >= 0)
SYS_KEY = -1
#: trace hash ids are offset so they never meet session keys
HASH_KEY_BASE = 1 << 40


class PrefixStats:
    """Per-request outcome of the prefix cache, filled at each request's first admission."""

    def __init__(self, n: int) -> None:
        #: prompt tokens found cached (any tier); -1: not admitted yet
        self.hit_tokens = [-1] * n
        #: of which loaded from CPU memory / disk
        self.cpu_tokens = [0] * n
        self.disk_tokens = [0] * n
        #: seconds of KV load charged to the request's first prefill step
        self.load_s = [0.0] * n
        #: seconds of synchronous KV store (write-through connector) charged to the same step
        self.store_s = [0.0] * n
        #: blocks spilled from GPU to CPU and from CPU to disk, blocks dropped for good
        self.spilled_cpu = 0
        self.spilled_disk = 0
        self.dropped = 0


class PrefixCache:
    """Block-level prefix cache of one instance's KV, with LRU eviction and optional CPU and disk tiers.

    Model (vLLM V1 ``KVCacheManager`` / ``BlockPool``, v0.11; SGLang ``RadixCache``, v0.5.23):

    * A finished (or preempted) request leaves its full blocks cached: they stay in the free
      pool, counted in :attr:`KVCache.free`, until an allocation needs them (lazy eviction).
    * A new request reuses the longest cached prefix of its chain (:class:`BlockChains`), at most
      ``(prompt - 1) // block`` blocks (vLLM recomputes the last prompt token to get logits).
      Reused blocks are shared while a request runs: a node in use is pinned (reference count).
    * Eviction takes unreferenced blocks least recently used first, tail blocks first: vLLM frees
      a request's blocks in reverse order so the tail is evicted first
      (``single_type_kv_cache_manager.py`` ``free``; ``block_pool.py`` ``FreeKVCacheBlockQueue``),
      SGLang evicts the least recently used *leaf* of its radix tree (``radix_cache.py``
      ``evict``). Both trim a chain from its tail, which is what a node's prefix counts keep:
      each node holds GPU blocks ``[0, g)``, CPU blocks ``[g, c)`` and disk blocks ``[c, d)``.
    * Tiers (write-back: a block is written to the lower tier when evicted from the upper,
      SGLang HiCache ``--hicache-write-policy write_back``; tiers hold exclusive copies): an
      evicted GPU block spills to CPU memory, an evicted CPU block to disk, a disk block is
      dropped. A hit in a lower tier is loaded back when that is faster than recomputing the
      blocks (``recompute``), else the prefix stops at the first block not on the GPU.
    * Write-through connector (``store_block_s > 0``, LMCache through vLLM's KV connector): every
      prefilled prompt is stored in ``chunk_blocks``-block chunks as it is computed, and only
      those chunks can be hit in the lower tiers (:meth:`_store`, :meth:`_decide`).

    ``free``/``blocks``: a running request's ``blocks[q]`` counts only its own blocks (not the
    shared hits, ``shared[q]``), so freeing a request returns exactly ``blocks[q]``.
    """

    def __init__(self, kv: KVCache, chains: BlockChains, stats: PrefixStats, *, cpu_blocks: int = 0,
                 disk_blocks: int = 0, cpu_block_s: float = 0.0, disk_block_s: float = 0.0,
                 recompute: Callable[[int, int], float] | None = None, layers: int = 0,
                 chunk_blocks: int = 1, store_block_s: float = 0.0) -> None:
        self.kv = kv
        self.layers = layers
        self.bs = kv.block_size
        self.chains = chains
        self.stats = stats
        self.cpu_cap = cpu_blocks
        self.disk_cap = disk_blocks
        self.cpu_block_s = cpu_block_s
        self.disk_block_s = disk_block_s
        self.recompute = recompute
        #: node key -> [g, c, d, refs] (prefix ends of the GPU, CPU and disk ranges; pins)
        self.nodes: dict[int, list[int]] = {}
        self.gpu_lru: OrderedDict[int, None] = OrderedDict()   # unpinned nodes with GPU blocks
        self.cpu_lru: OrderedDict[int, None] = OrderedDict()   # nodes with CPU blocks
        self.disk_lru: OrderedDict[int, None] = OrderedDict()  # nodes with disk blocks
        self.evictable = 0   # cached GPU blocks of unpinned nodes (part of kv.free)
        self.cpu_used = 0
        self.disk_used = 0
        self.shared = [0] * len(kv.blocks)  # blocks of each running request that are cached hits
        self._pins: dict[int, int] = {}       # request -> nodes of its chain it pins
        self._planned: dict[int, int] = {}    # request -> hit blocks its plan assumed
        self._pending: list[tuple[float, int, int, int]] = []  # (t, seq, request, kv tokens)
        self._seq = 0
        #: seconds of KV load per admitted request, until its first prefill step takes it
        self.loads: dict[int, float] = {}
        #: write-through connector: store chunk in blocks, seconds to store a block (0: no connector,
        #: tiers fill by eviction) and, per node, the prefix of its blocks stored in the lower tier
        self.chunk_blocks = chunk_blocks
        self.store_block_s = store_block_s
        self.stored: dict[int, int] | None = {} if store_block_s > 0 else None

    # ---------------------------------------------------------------- lookup
    def _walk(self, q: int, limit: int) -> tuple[int, int, int, int]:
        """Longest cached prefix of ``q``'s chain, at most ``limit`` blocks: (hit blocks, of
        which on CPU, on disk, GPU-only prefix)."""
        nodes = self.nodes
        stored = self.stored
        hit = cpu = disk = 0
        gpu_prefix = -1
        for key, start, cap in self.chains.of(q):
            if start >= limit:
                break
            e = limit - start if cap < 0 or cap > limit - start else cap
            node = nodes.get(key)
            if node is None:
                break
            g, c, d = node[0], node[1], node[2]
            tg = g if g < e else e
            el = e
            if stored is not None:  # write-through: only the stored prompt chunks are in the lower tier
                sk = stored.get(key, 0)
                el = tg if sk < tg else (sk if sk < e else e)
            tc = (c if c < el else el) - tg
            td = (d if d < el else el) - tg - tc
            if gpu_prefix < 0 and tg < e:
                gpu_prefix = hit + tg
            hit += tg + tc + td
            cpu += tc
            disk += td
            if tg + tc + td < e:
                break
        if gpu_prefix < 0:
            gpu_prefix = hit
        return hit, cpu, disk, gpu_prefix

    def _decide(self, q: int, limit: int) -> tuple[int, int, int, float]:
        """Hit blocks, CPU and disk blocks to load and their load time: the lower tiers are used
        when loading is faster than recomputing those blocks (the scheduler's choice)."""
        hit, cpu, disk, gpu_prefix = self._walk(q, limit)
        if not (cpu or disk):
            return hit, 0, 0, 0.0
        recopy = 0
        cb = self.chunk_blocks
        if cb > 1:
            # LMCache retrieves whole chunks (vllm_v1_adapter.py ``start_load_kv``): the hit ends on a
            # chunk boundary (the rest is recomputed), and the load starts at the chunk boundary below
            # vLLM's own GPU hit (``masked_token_count = vllm_cached // chunk * chunk``): the part of
            # the GPU hit in that chunk is copied again
            cut = hit - hit // cb * cb
            if hit - cut <= gpu_prefix:
                return gpu_prefix, 0, 0, 0.0
            hit -= cut
            d_cut = cut if cut < disk else disk
            disk -= d_cut
            cpu -= cut - d_cut
            recopy = gpu_prefix - gpu_prefix // cb * cb
        load = (cpu + recopy) * self.cpu_block_s + disk * self.disk_block_s
        rec = self.recompute(hit - gpu_prefix, gpu_prefix) if self.recompute is not None else math.inf
        if load < rec:
            return hit, cpu, disk, load
        return gpu_prefix, 0, 0, 0.0

    def peek(self, q: int, prompt_len: int) -> int:
        """Prompt tokens of ``q`` found cached now (it joins the queue); its plan assumes them."""
        hit = self._decide(q, (prompt_len - 1) // self.bs)[0]
        self._planned[q] = hit
        return hit * self.bs

    # ---------------------------------------------------------------- admit
    def admit(self, q: int, prompt_len: int) -> int:
        """Allocate ``q``'s prompt (its blocks fit: ``blocks_for(prompt) <= free`` was checked).
        Reuses at most the hit its plan assumed (:meth:`peek`); returns the prompt tokens the
        plan counted as cached that must now be computed (evicted meanwhile)."""
        kv, bs = self.kv, self.bs
        planned = self._planned.pop(q, 0)
        hit, cpu, disk, load = self._decide(q, min((prompt_len - 1) // bs, planned)) if planned else (0, 0, 0, 0.0)
        nodes = self.nodes
        free = kv.free
        pinned = 0
        loaded = cpu + disk
        if hit:
            for key, start, cap in self.chains.of(q):
                if start >= hit:
                    break
                used = hit - start if cap < 0 or cap > hit - start else cap
                node = nodes[key]
                g = node[0]
                if node[3] == 0:
                    if g > used:  # blocks past this request's use are not pinned: evict them first
                        self._spill(0, key, node, g - used)
                        g = used
                    if g:
                        free -= g
                        self.evictable -= g
                        self.gpu_lru.pop(key, None)
                if used > g:  # loaded from the lower tiers (exclusive copies move up)
                    self._raise_gpu(key, node, used)
                node[3] += 1
                pinned += 1
                if key in self.cpu_lru:
                    self.cpu_lru.move_to_end(key)
                if key in self.disk_lru:
                    self.disk_lru.move_to_end(key)
        self._pins[q] = pinned
        own = kv.blocks_for(prompt_len) - hit
        free -= own + loaded
        kv.free = free
        kv.blocks[q] = own
        self.shared[q] = hit
        assert free >= 0, "KV blocks overcommitted"
        if kv.total - free > kv.peak:
            kv.peak = kv.total - free
        st = self.stats
        if st.hit_tokens[q] < 0:
            st.hit_tokens[q] = hit * bs
            st.cpu_tokens[q] = cpu * bs
            st.disk_tokens[q] = disk * bs
            st.load_s[q] = load
            if self.stored is not None:
                store = self._store(q, prompt_len)
                st.store_s[q] = store
                load += store
        if load:
            self.loads[q] = load
        self.make_room()
        return (planned - hit) * bs if planned > hit else 0

    def _store(self, q: int, prompt_len: int) -> float:
        """Write-through: ``q``'s prompt is stored in whole chunks as it is prefilled; returns the
        seconds of the synchronous GPU-to-CPU copy of the chunks not stored before.

        LMCache through vLLM's KV connector (``vllm_v1_adapter.py``, LMCache 0.3): ``wait_for_save``
        runs after each forward pass and blocks until the step's new KV is copied to CPU memory;
        only whole chunks are saved (a partial last chunk, when ``save_unfull_chunk`` keeps it, has
        a key no longer prompt matches), decode tokens are not (``save_decode_cache`` false), and
        chunks already stored are skipped (``skip_leading_tokens``). The copy is charged to the
        request's first prefill step (the sum over its prefill chunks is the same)."""
        stored = self.stored
        assert stored is not None
        cb = self.chunk_blocks
        end = prompt_len // self.bs // cb * cb   # blocks of the prompt in whole chunks
        before = 0                               # stored prefix of the chain before this request
        chain = self.chains.of(q)
        for key, start, cap in chain:
            s = stored.get(key, 0)
            if cap >= 0 and s >= cap:
                before = start + cap
                continue
            before = start + s
            break
        for key, start, cap in chain:
            if start >= end:
                break
            want = end - start if cap < 0 or cap > end - start else cap
            if stored.get(key, 0) < want:
                stored[key] = want
        new = end - before
        return new * self.store_block_s if new > 0 else 0.0

    def step_with_loads(self, t: float, prefill: Sequence[tuple[int, int]]) -> float:
        """Time of a step of compute time ``t`` whose prompts first load their lower-tier hits.

        Serial (``layers == 0``): the load precedes the step (a bulk copy before the forward,
        LMCache's default ``use_layerwise: false`` through vLLM's KV connector,
        ``start_load_kv`` before the model runs). Layer by layer (``layers = n``): layer ``i``'s
        load overlaps layer ``i - 1``'s compute (vLLM connector ``wait_for_layer_load``; SGLang
        HiCache loads layer by layer), a two-stage pipeline over ``n`` layers of load ``l = L/n``
        and compute ``c = t/n``: ``l + c + (n - 1) max(l, c)``."""
        loads = self.loads
        load = 0.0
        for q, _ in prefill:
            x = loads.pop(q, None)
            if x is not None:
                load += x
        if not load:
            return t
        n = self.layers
        if n <= 0:
            return t + load
        lo, co = load / n, t / n
        return lo + co + (n - 1) * (lo if lo > co else co)

    # ---------------------------------------------------------------- release
    def release(self, q: int, kv_tokens: int) -> None:
        """``q`` stops running with ``kv_tokens`` in its cache: its own blocks return to the pool,
        its full blocks stay cached (:attr:`KVCache.free` already counts ``blocks[q]`` back)."""
        kv = self.kv
        nodes = self.nodes
        limit = kv_tokens // self.bs
        pins = self._pins.pop(q, 0)
        self.shared[q] = 0
        self.loads.pop(q, None)  # preempted before its first prefill step: nothing was loaded
        free = kv.free
        i = 0
        for key, start, cap in self.chains.of(q):
            if start >= limit and i >= pins:
                break
            e = 0 if start >= limit else (limit - start if cap < 0 or cap > limit - start else cap)
            node = nodes.get(key)
            if node is None:
                node = nodes[key] = [0, 0, 0, 0]
            g, refs = node[0], node[3]
            add = 0
            if e > g:
                add = e - g
                self._raise_gpu(key, node, e)
            if i < pins:
                refs -= 1
                node[3] = refs
                if refs == 0:
                    free += g
                    self.evictable += g + add
                    if g + add:
                        self.gpu_lru[key] = None
                else:
                    free -= add
            elif refs:
                free -= add
            elif g + add:
                self.evictable += add
                self.gpu_lru[key] = None
                self.gpu_lru.move_to_end(key)
            i += 1
        kv.free = free
        assert free >= 0, "KV blocks overcommitted"
        self.make_room()

    def release_at(self, q: int, own: int, kv_tokens: int, t: float, now: float) -> None:
        """``q``'s cache is sent until ``t`` (disaggregated prefill): released then."""
        if t <= now:
            self.kv.free += own
            self.release(q, kv_tokens)
            return
        self._seq += 1
        heapq.heappush(self._pending, (t, self._seq, q, kv_tokens))
        heapq.heappush(self.kv.releases, (t, own))

    def release_due(self, now: float) -> None:
        p = self._pending
        while p and p[0][0] <= now:
            _, _, q, n = heapq.heappop(p)
            self.release(q, n)

    # ---------------------------------------------------------------- eviction
    def _raise_gpu(self, key: int, node: list[int], e: int) -> None:
        """A node's first ``e`` blocks (more than it holds on the GPU) now on the GPU: the blocks
        found in CPU memory or on disk move up (tiers hold exclusive copies)."""
        g, c, d = node[0], node[1], node[2]
        self.cpu_used -= max(0, min(c, e) - g)
        self.disk_used -= max(0, min(d, e) - max(c, g))
        node[0] = e
        node[1] = max(c, e)
        node[2] = max(d, e)
        self._retier(key, node)

    def _retier(self, key: int, node: list[int]) -> None:
        """Keep the tier LRU lists in step with a node's ranges; forget empty nodes."""
        g, c, d, refs = node
        if c <= g:
            self.cpu_lru.pop(key, None)
        if d <= c:
            self.disk_lru.pop(key, None)
        if g == 0 and d == 0 and refs == 0:
            self.gpu_lru.pop(key, None)
            del self.nodes[key]

    def _spill(self, tier: int, key: int, node: list[int], k: int) -> None:
        """Move the last ``k`` blocks of ``node``'s ``tier`` (0 GPU, unpinned; 1 CPU; 2 disk) down
        one tier, or drop them when the next tier has no capacity (disk has none below it). The
        ranges are cumulative prefix ends, so a move only lowers ``node[tier]``; a drop lowers the
        ends below it too, to the same block."""
        end = node[tier] - k
        node[tier] = end
        if tier == 0:
            self.evictable -= k
            if not end:
                self.gpu_lru.pop(key, None)
            cap = self.cpu_cap
        elif tier == 1:
            self.cpu_used -= k
            cap = self.disk_cap
        else:
            self.disk_used -= k
            cap = 0
        st = self.stats
        if not cap:
            st.dropped += k
            if tier < 2:
                node[2] = end
                if tier == 0:
                    node[1] = end
        elif tier == 0:
            self.cpu_used += k
            st.spilled_cpu += k
            if key not in self.cpu_lru:
                self.cpu_lru[key] = None
        else:
            self.disk_used += k
            st.spilled_disk += k
            if key not in self.disk_lru:
                self.disk_lru[key] = None
        self._retier(key, node)

    def make_room(self) -> None:
        """Evict cached GPU blocks until the free pool has no more cached blocks than free
        blocks (an allocation takes empty blocks first), then the CPU and disk overflows."""
        kv = self.kv
        while self.evictable > kv.free:
            key = next(iter(self.gpu_lru))
            node = self.nodes[key]
            self._spill(0, key, node, min(node[0], self.evictable - kv.free))
        while self.cpu_used > self.cpu_cap:
            key = next(iter(self.cpu_lru))
            node = self.nodes[key]
            self._spill(1, key, node, min(node[1] - node[0], self.cpu_used - self.cpu_cap))
        while self.disk_used > self.disk_cap:
            key = next(iter(self.disk_lru))
            node = self.nodes[key]
            self._spill(2, key, node, min(node[2] - node[1], self.disk_used - self.disk_cap))
