"""The prefix cache of each prefilling instance, its CPU and disk tiers, its wiring and its report.

Block identity (:class:`BlockChains`, built from a workload by :func:`block_chains`): the shared
system prompt, a session's conversation, or the block hashes of a Mooncake trace. The cache
(:class:`PrefixCache`) sits over one instance's :class:`~serveplan.sim.kv.KVCache` (the owner of
its blocks) and keeps finished requests' full blocks for later prompts; :class:`PrefixStats`
records what each request found and :func:`prefix_report` sums it up (:class:`PrefixCacheReport`).

:func:`attach_prefix_caches` gives a cache to every instance that prefills (collocated and prefill
instances: in a disaggregated fleet the prefill pool holds the cache and its tiers; decode
instances receive whole caches).

KV tiers (:class:`KVTiers`): CPU memory and disk of a host (:class:`~serveplan.specs.host.HostSpec`,
the offload planner's description, per GPU) take the blocks the GPU evicts. Per device, a block of
``block_size`` tokens is ``block_size x kv_bytes_per_token`` bytes (the device's shard); a CPU hit
loads at the host's ``ctog_cache_bandwidth``, a disk hit reads at ``disk_read_bandwidth`` into CPU
memory and then copies up (``1/disk_read + 1/ctog`` seconds per byte, store and forward, as
LMCache's local-disk backend stages through CPU buffers). By default the lower tiers fill by
eviction (write-back, SGLang HiCache ``write_back``): spilling runs in the background and costs no
step time. ``connector="lmcache"`` models vLLM's LMCache connector instead: write-through of every
prefilled prompt in 256-token chunks, a synchronous GPU-to-CPU copy after each forward pass
(:meth:`PrefixCache._store`). Whether a hit loads before its step or layer by layer under it is
the engine's (its data file's ``prefix_cache: {tier_load}``, :func:`default_load`) unless
:attr:`KVTiers.load` says.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from serveplan.errors import SpecError
from serveplan.estimator.batch import StepBatch
from serveplan.sim.metrics import LatencyStats
from serveplan.sim.workload import Workload
from serveplan.specs.catalog import get_engine
from serveplan.specs.engine import TIER_LOADS, EngineSpec
from serveplan.specs.host import HostSpec

if TYPE_CHECKING:
    from serveplan.sim.clock import StepClock
    from serveplan.sim.kv import KVCache
    from serveplan.sim.request import RequestRecords

TIERS = ("cpu", "disk")
#: how the lower tiers fill: ``None`` by eviction (write-back, the module docstring); ``lmcache``
#: write-through of every prefilled prompt in 256-token chunks (LMCache ``chunk_size`` default 256,
#: ``lmcache/v1/config.py``; :meth:`PrefixCache._store`)
CONNECTORS = ("lmcache",)
#: LMCache's default chunk (tokens)
LMCACHE_CHUNK = 256


# ---------------------------------------------------------------------- block identity
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


def block_chains(wl: Workload, block_size: int) -> BlockChains:
    """The block identity of ``wl``'s requests for an engine of ``block_size`` tokens per block."""
    if wl.hash_ids is not None and wl.hash_block % block_size:
        raise SpecError(f"kv block size {block_size} must divide the trace's {wl.hash_block}-token hash blocks")
    n = wl.num_requests
    assert n is not None
    session: Sequence[int] | None
    if wl.session is not None:
        sess = np.asarray(wl.session, dtype=np.int64)
        if wl.context_start is not None:   # a conversation whose oldest turns were dropped starts a new chain
            assert wl.turn is not None     # given with the session ids (Workload checks)
            turns = int(np.max(wl.turn)) + 1
            sess = sess * turns + np.asarray(wl.context_start, dtype=np.int64)
        session = sess.tolist()
    elif wl.hash_ids is None:
        session = range(n)  # each request's own blocks (cached, never shared)
    else:
        session = None
    return BlockChains(block_size, session=session, sys_tokens=wl.system_prompt_len, hash_ids=wl.hash_ids,
                       hash_block=wl.hash_block, prompt_len=np.asarray(wl.input_lengths).tolist())


# ---------------------------------------------------------------------- the cache
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


# ---------------------------------------------------------------------- tiers
@dataclass(frozen=True, slots=True, kw_only=True)
class KVTiers:
    """Lower KV-cache tiers of every prefilling instance (module docstring).

    Parameters
    ----------
    tiers:
        ``("cpu",)`` or ``("cpu", "disk")`` (disk blocks come from CPU memory).
    host:
        The host around each GPU (capacities and bandwidths per GPU).
    cpu_bytes, disk_bytes:
        Capacity per GPU given explicitly (bytes); None: the host's (less its headroom).
    load:
        ``serial`` (the load precedes the step) or ``layerwise`` (overlapped layer by layer);
        None: the engine's way (:func:`default_load`).
    connector:
        None: blocks reach the lower tiers when the GPU evicts them, at no step cost (SGLang HiCache
        ``write_back``). ``lmcache``: vLLM's LMCache connector, write-through: every prefilled
        prompt is stored in 256-token chunks by a synchronous GPU-to-CPU copy after the forward
        pass (at the host's ``gtoc_cache_bandwidth``), only those chunks are hit, and a hit is
        loaded from the chunk boundary below vLLM's own GPU hit.
    """

    tiers: tuple[str, ...]
    host: HostSpec
    cpu_bytes: float | None = None
    disk_bytes: float | None = None
    load: str | None = None
    connector: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.host, HostSpec):
            raise SpecError(f"kv tiers: host must be a HostSpec (serveplan hosts lists them), got {self.host!r}")
        t = tuple(self.tiers)
        bad = [x for x in t if x not in TIERS]
        if not t or bad or len(set(t)) != len(t):
            raise SpecError(f"kv_tiers={','.join(t)!r}; expected 'cpu' or 'cpu,disk'")
        if "disk" in t and "cpu" not in t:
            raise SpecError("kv_tiers='disk': evicted blocks reach disk through CPU memory; use 'cpu,disk'")
        object.__setattr__(self, "tiers", tuple(x for x in TIERS if x in t))
        for fname, tier in (("cpu_bytes", "cpu"), ("disk_bytes", "disk")):
            v = getattr(self, fname)
            if v is not None and not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise SpecError(f"kv_{tier}_gb={v / 1e9 if isinstance(v, (int, float)) else v!r} must be a positive "
                                "number of GB per GPU")
        if "cpu" in t and self.capacity_bytes("cpu") <= 0:
            raise SpecError(f"kv_tiers='cpu': host {self.host.name!r} has no CPU memory; give --kv-cpu-gb")
        if "disk" in t and self.capacity_bytes("disk") <= 0:
            raise SpecError(f"kv_tiers='disk': host {self.host.name!r} has no disk (disk_bytes=0); give --kv-disk-gb")
        if self.load is not None and self.load not in TIER_LOADS:
            raise SpecError(f"kv_load={self.load!r}; expected one of: {', '.join(TIER_LOADS)}")
        if self.connector is not None and self.connector not in CONNECTORS:
            raise SpecError(f"kv_connector={self.connector!r}; expected one of: {', '.join(CONNECTORS)}")

    def capacity_bytes(self, tier: str) -> float:
        """Bytes per GPU of ``tier`` (0 when the tier is not used)."""
        if tier not in self.tiers:
            return 0.0
        if tier == "cpu":
            return self.cpu_bytes if self.cpu_bytes is not None else self.host.cpu_capacity_bytes()
        return self.disk_bytes if self.disk_bytes is not None else self.host.disk_capacity_bytes()

    def to_dict(self) -> dict[str, Any]:
        return {"tiers": list(self.tiers), "host": self.host.name, "cpu_bytes": self.capacity_bytes("cpu"),
                "disk_bytes": self.capacity_bytes("disk"), "load": self.load, "connector": self.connector}


def default_load(engine: EngineSpec | str | None) -> str:
    """How ``engine`` loads lower-tier KV: its data file's ``prefix_cache: {tier_load: ...}``
    (:attr:`EngineSpec.prefix_cache_tier_load <serveplan.specs.engine.EngineSpec.prefix_cache_tier_load>`,
    each value cited there: SGLang HiCache layer by layer, vLLM with LMCache and TensorRT-LLM in
    one copy before the step); ``serial`` without an engine. An engine family's name (what
    ``sim/engine.py`` passes) stands for the family's default version; a family that is not
    bundled loads serially."""
    if isinstance(engine, str):
        try:
            engine = get_engine(engine)
        except SpecError:
            return "serial"
    return "serial" if engine is None else engine.prefix_cache_tier_load


# ---------------------------------------------------------------------- wiring
class _Prefilling(Protocol):
    """An instance that takes a prefix cache (:class:`~serveplan.sim.instance.Instance`)."""

    kv: KVCache

    def use_prefix_cache(self, cache: PrefixCache) -> None: ...


def attach_prefix_caches(instances: Sequence[_Prefilling], clock: StepClock, chains: BlockChains, stats: PrefixStats,
                         tiers: KVTiers | None, engine: EngineSpec | str | None) -> None:
    """Give every instance of ``instances`` (all prefilling, one estimator) its prefix cache;
    ``engine`` (:func:`default_load`) says how lower-tier hits load unless ``tiers.load`` does."""
    est = clock.est
    bs = chains.block_size
    block_bytes = bs * est.memory.kv_bytes_per_token  # per device: each GPU holds its shard
    cpu_blocks = disk_blocks = 0
    cpu_s = disk_s = 0.0
    layers = 0
    chunk_blocks = 1
    store_s = 0.0
    if tiers is not None and block_bytes > 0:
        host = tiers.host
        cpu_blocks = int(tiers.capacity_bytes("cpu") // block_bytes)
        disk_blocks = int(tiers.capacity_bytes("disk") // block_bytes)
        cpu_s = block_bytes / host.ctog_cache_bandwidth
        disk_s = block_bytes / host.disk_read_bandwidth + cpu_s
        if (tiers.load or default_load(engine)) == "layerwise":
            layers = max(est.model.num_hidden_layers // est.parallel.pp, 1)
        if tiers.connector == "lmcache":
            chunk_blocks = max(LMCACHE_CHUNK // bs, 1)
            store_s = block_bytes / host.gtoc_cache_bandwidth
    memo: dict[tuple[int, int], float] = {}

    def recompute(blocks: int, context: int) -> float:
        key = (blocks, context)
        t = memo.get(key)
        if t is None:
            if len(memo) >= 1 << 16:
                memo.clear()
            t = memo[key] = clock.time(StepBatch.of(((blocks * bs, context * bs),), ()))
        return t

    for inst in instances:
        inst.use_prefix_cache(PrefixCache(inst.kv, chains, stats, cpu_blocks=cpu_blocks, disk_blocks=disk_blocks,
                                          cpu_block_s=cpu_s, disk_block_s=disk_s, recompute=recompute,
                                          layers=layers, chunk_blocks=chunk_blocks, store_block_s=store_s))


# ---------------------------------------------------------------------- report
@dataclass(frozen=True, slots=True, kw_only=True)
class PrefixCacheReport:
    """What the prefix cache did over the completed requests.

    ``hit_rate`` is cached prompt tokens over prompt tokens (each request counted at its first
    admission); ``gpu``/``cpu``/``disk`` split the cached tokens by the tier they came from.
    ``ttft_hit_s``/``ttft_miss_s`` are the TTFT of requests with and without a cached prefix;
    ``load_s`` the KV load time per request with a lower-tier hit; ``cached_tokens`` and
    ``computed_tokens`` the mean prompt tokens per request found cached and prefilled.
    ``ttft_split_s`` splits the mean TTFT into queueing (arrival to the first step computing for
    the request), KV load of lower-tier hits, and the prefill steps (the rest).
    """

    num_requests: int
    prompt_tokens: int
    hit_tokens: int
    gpu_tokens: int
    cpu_tokens: int
    disk_tokens: int
    hit_rate: float
    cached_tokens: float
    computed_tokens: float
    ttft_hit_s: LatencyStats
    ttft_miss_s: LatencyStats
    load_s: LatencyStats
    spilled_cpu_blocks: int
    spilled_disk_blocks: int
    dropped_blocks: int
    ttft_split_s: dict[str, float] = field(default_factory=dict)
    tiers: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"num_requests": self.num_requests, "prompt_tokens": self.prompt_tokens,
                "hit_tokens": self.hit_tokens, "hit_rate": self.hit_rate,
                "hit_tokens_by_tier": {"gpu": self.gpu_tokens, "cpu": self.cpu_tokens, "disk": self.disk_tokens},
                "cached_tokens_per_request": self.cached_tokens, "computed_tokens_per_request": self.computed_tokens,
                "ttft_hit_s": self.ttft_hit_s.to_dict(), "ttft_miss_s": self.ttft_miss_s.to_dict(),
                "load_s": self.load_s.to_dict(), "spilled_cpu_blocks": self.spilled_cpu_blocks,
                "spilled_disk_blocks": self.spilled_disk_blocks, "dropped_blocks": self.dropped_blocks,
                "ttft_split_s": dict(self.ttft_split_s), "tiers": self.tiers}


def prefix_report(stats: PrefixStats, rec: RequestRecords, tiers: KVTiers | None) -> PrefixCacheReport:
    """:class:`PrefixCacheReport` of a run's records (completed requests)."""
    done = np.isfinite(rec.finish)
    hit = np.asarray(stats.hit_tokens, dtype=np.int64)
    hit = np.where(hit < 0, 0, hit)
    cpu = np.asarray(stats.cpu_tokens, dtype=np.int64)
    disk = np.asarray(stats.disk_tokens, dtype=np.int64)
    load = np.asarray(stats.load_s, dtype=float)
    inp = rec.input_len
    prompt = int(inp[done].sum())
    h = int(hit[done].sum())
    c = int(cpu[done].sum())
    d = int(disk[done].sum())
    m = int(done.sum())
    with_hit = done & (hit > 0)
    split: dict[str, float] = {}
    if m:
        ttft, queue, ld = float(rec.ttft[done].mean()), float(rec.queue[done].mean()), float(load[done].mean())
        split = {"queue": queue, "kv_load": ld, "prefill": ttft - queue - ld}
    return PrefixCacheReport(
        num_requests=m, prompt_tokens=prompt, hit_tokens=h, gpu_tokens=h - c - d, cpu_tokens=c, disk_tokens=d,
        hit_rate=h / prompt if prompt else 0.0, cached_tokens=h / m if m else 0.0,
        computed_tokens=(prompt - h) / m if m else 0.0,
        ttft_hit_s=LatencyStats.of(rec.ttft[with_hit]), ttft_miss_s=LatencyStats.of(rec.ttft[done & (hit == 0)]),
        load_s=LatencyStats.of(load[done & (load > 0)]), spilled_cpu_blocks=stats.spilled_cpu,
        spilled_disk_blocks=stats.spilled_disk, dropped_blocks=stats.dropped, ttft_split_s=split,
        tiers=None if tiers is None else tiers.to_dict())
