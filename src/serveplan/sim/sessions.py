"""Multi-turn sessions, Mooncake traces, the prefix cache's wiring and its report, KV tiers.

Sessions (:func:`session_workload`): ``num_sessions`` conversations of ``turns`` turns. Turn
``k``'s prompt is the conversation so far plus its new input,
``system + sum_{j<k} (new_j + out_j) + new_k`` tokens; the first turn's input, a follow-up's new
input and every output are drawn from a bundled session dataset (quantile tables,
``specs/data/sessions``; ``mooncake-conversation`` from the Mooncake FAST'25 conversation trace,
``benchmarks/build_sessions.py``). Sessions start at the arrival process's times (``rate`` is
then sessions per second), all at t=0 offline, or back to back on ``concurrency`` clients; each
next turn is sent ``think_s`` after the previous answer ends (:class:`SessionLoop`, the closed
loop of :class:`~serveplan.sim.cluster.ClosedLoop` per session). The fleet's router places a
session's first turn; its later turns go to the same instance (session affinity, as the vLLM
production stack's session router and SGLang's cache-aware router keep a conversation where its
cache is).

Mooncake traces (:func:`mooncake_workload`): JSONL rows ``{"timestamp": ms, "input_length",
"output_length", "hash_ids": [...]}``, one hash per 512-token prompt block chaining its prefix
(kvcache-ai/Mooncake ``FAST25-release/README.md``); the hashes give block identity directly.

The cache itself is :class:`~serveplan.sim.kv.PrefixCache`; :func:`attach_prefix_caches` gives
one to every instance that prefills (collocated and prefill instances: in a disaggregated fleet
the prefill pool holds the cache and its tiers; decode instances receive whole caches).

KV tiers (:class:`KVTiers`): CPU memory and disk of a host (:class:`~serveplan.specs.host.HostSpec`,
the offload planner's description, per GPU) take the blocks the GPU evicts. Per device, a block of
``block_size`` tokens is ``block_size x kv_bytes_per_token`` bytes (the device's shard); a CPU hit
loads at the host's ``ctog_cache_bandwidth``, a disk hit reads at ``disk_read_bandwidth`` into CPU
memory and then copies up (``1/disk_read + 1/ctog`` seconds per byte, store and forward, as
LMCache's local-disk backend stages through CPU buffers). By default the lower tiers fill by
eviction (write-back, SGLang HiCache ``write_back``): spilling runs in the background and costs no
step time. ``connector="lmcache"`` models vLLM's LMCache connector instead: write-through of every
prefilled prompt in 256-token chunks, a synchronous GPU-to-CPU copy after each forward pass
(:meth:`~serveplan.sim.kv.PrefixCache._store`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from serveplan.errors import SpecError
from serveplan.estimator.batch import StepBatch
from serveplan.sim.cluster import ClientArrival, ClosedLoop, Stage
from serveplan.sim.events import EventLoop, Priority, Scheduled
from serveplan.sim.kv import BlockChains, PrefixCache, PrefixStats
from serveplan.sim.metrics import LatencyStats
from serveplan.sim.workload import Workload
from serveplan.specs.catalog import get_session_dataset
from serveplan.specs.host import HostSpec

if TYPE_CHECKING:
    from serveplan.sim.clock import StepClock
    from serveplan.sim.instance import Instance
    from serveplan.sim.request import RequestRecords

#: the bundled session dataset used when none is named
DEFAULT_SESSION_DATASET = "mooncake-conversation"
#: tokens per Mooncake trace block (FAST25-release README)
MOONCAKE_BLOCK = 512
TIERS = ("cpu", "disk")
LOADS = ("serial", "layerwise")
#: how the lower tiers fill: ``None`` by eviction (write-back, the module docstring); ``lmcache``
#: write-through of every prefilled prompt in 256-token chunks (LMCache ``chunk_size`` default 256,
#: ``lmcache/v1/config.py``; :meth:`~serveplan.sim.kv.PrefixCache._store`)
CONNECTORS = ("lmcache",)
#: LMCache's default chunk (tokens)
LMCACHE_CHUNK = 256


# ---------------------------------------------------------------------- workloads
def check_session_fields(wl: Workload, n: int) -> None:
    """Validate the session / trace-hash fields of a workload (called by ``Workload``)."""
    if not (isinstance(wl.think_s, (int, float)) and math.isfinite(wl.think_s) and wl.think_s >= 0):
        raise SpecError(f"think_time={wl.think_s!r} must be a non-negative number of seconds")
    L = wl.system_prompt_len
    if isinstance(L, bool) or not isinstance(L, (int, np.integer)) or L < 0:
        raise SpecError(f"system_prompt_len={L!r} must be a non-negative integer number of tokens")
    if L and int(np.min(wl.input_lengths)) <= L:
        raise SpecError(f"system_prompt_len={L} must be shorter than every prompt (shortest "
                        f"{int(np.min(wl.input_lengths))} tokens)")
    if (wl.session is None) != (wl.turn is None):
        raise SpecError("session and turn must be given together (one session id and turn per request)")
    if wl.context_start is not None:
        a = np.asarray(wl.context_start)
        if wl.session is None or a.shape != (n,) or (a.size and (a.min() < 0 or np.any(a > np.asarray(wl.turn)))):
            raise SpecError(f"context_start must hold, per request of a session, its first kept turn ({n} values, "
                            "each at most the request's turn)")
    if wl.session is not None:
        for name in ("session", "turn"):
            a = np.asarray(getattr(wl, name))
            if a.shape != (n,) or not np.issubdtype(a.dtype, np.integer) or (a.size and a.min() < 0):
                raise SpecError(f"{name} must hold one non-negative integer per request ({n})")
    if wl.hash_ids is not None:
        if L or wl.session is not None:
            raise SpecError("a trace's hash_ids already say which prompt blocks are shared; "
                            "drop system_prompt_len and sessions")
        if len(wl.hash_ids) != n:
            raise SpecError(f"hash_ids has {len(wl.hash_ids)} entries but there are {n} requests")
        if isinstance(wl.hash_block, bool) or not isinstance(wl.hash_block, int) or wl.hash_block < 1:
            raise SpecError(f"hash_block={wl.hash_block!r} must be a positive number of tokens")


def digest_session_fields(wl: Workload, h: Any) -> None:
    """Feed the session / trace-hash fields to the workload's content digest ``h``."""
    h.update(f"|{wl.think_s!r}|{wl.system_prompt_len}|{wl.hash_block}".encode())
    for a in (wl.session, wl.turn, wl.context_start):
        if a is not None:
            h.update(np.asarray(a).tobytes())
    if wl.hash_ids is not None:
        h.update(repr(wl.hash_ids).encode())


def _quantiles(raw: dict[str, Any], key: str, name: str) -> np.ndarray:
    try:
        q = np.asarray(raw[key], dtype=float)
    except (KeyError, ValueError, TypeError):
        raise SpecError(f"session dataset {name!r}: {key} missing or not numbers; "
                        "rebuild with benchmarks/build_sessions.py") from None
    if q.ndim != 1 or q.size < 2 or np.any(np.diff(q) < 0) or q[0] < 1:
        raise SpecError(f"session dataset {name!r}: {key} must be non-decreasing positive quantiles")
    return q


def session_workload(num_sessions: int, turns: int, *, think_s: float = 0.0, dataset: str | None = None,
                     system_prompt_len: int = 0, seed: int = 0, arrival: str = "poisson",
                     cv: float = 1.0, max_context: int | None = None) -> Workload:
    """``num_sessions`` conversations of ``turns`` turns each (module docstring).

    Lengths are drawn by inverse transform from the dataset's quantile tables (linear
    interpolation), from the same seeded length stream as
    :meth:`Workload.from_distributions`; request ``s * turns + k`` is session ``s``'s turn ``k``.

    ``max_context`` (tokens; the model's context length): a turn whose prompt plus answer would
    exceed it drops the conversation's oldest turns until it fits, as chat clients truncate their
    history (OpenAI's and vLLM's chat front ends send what the client sends; ChatGPT-style clients
    and LangChain's ``trim_messages`` keep the newest messages). Once turns are dropped the prompt
    no longer starts with the earlier prompt, so the prefix cache finds only the system prompt
    until the conversation grows again from its new first turn (``Workload.context_start``). A
    single turn longer than the context keeps the newest tokens of its input. The workload's
    ``dropped_turns`` counts the turns that dropped history.

    Raises
    ------
    SpecError
        ``num_sessions`` or ``turns`` below 1, a negative think time or system prompt, or an
        unknown dataset.
    """
    from serveplan.sim.workload import _LENGTH_STREAM

    for fname, v in (("sessions", num_sessions), ("turns", turns)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise SpecError(f"{fname}={v!r} must be a positive integer")
    if not (isinstance(think_s, (int, float)) and math.isfinite(think_s) and think_s >= 0):
        raise SpecError(f"think_time={think_s!r} must be a non-negative number of seconds")
    if isinstance(system_prompt_len, bool) or not isinstance(system_prompt_len, int) or system_prompt_len < 0:
        raise SpecError(f"system_prompt_len={system_prompt_len!r} must be a non-negative integer number of tokens")
    name = dataset or DEFAULT_SESSION_DATASET
    raw = get_session_dataset(name)
    q_first, q_new, q_out = (_quantiles(raw, k, name) for k in
                             ("first_input_quantiles", "new_input_quantiles", "output_quantiles"))
    rng = np.random.default_rng([int(seed), _LENGTH_STREAM])
    S, T = int(num_sessions), int(turns)

    def draw(q: np.ndarray, size: tuple[int, ...]) -> np.ndarray:
        x = np.interp(rng.random(size), np.linspace(0.0, 1.0, len(q)), q)
        out: np.ndarray = np.maximum(np.rint(x), 1).astype(np.int64)
        return out

    new = draw(q_new, (S, T))
    new[:, 0] = draw(q_first, (S,))
    out = draw(q_out, (S, T))
    start, dropped = _keep_within(new, out, system_prompt_len, max_context)
    # prompt of turn k: system + the kept earlier turns' inputs and answers (from turn start[k]) + this input
    before = np.zeros((S, T + 1), dtype=np.int64)
    before[:, 1:] = np.cumsum(new + out, axis=1)
    k = np.arange(T)
    history = before[:, k] - np.take_along_axis(before, start, axis=1)
    prompt = system_prompt_len + history + new
    label = f"{name}: {S} sessions x {T} turns" + (f", {dropped} turns dropped older turns to fit the "
                                                      f"{max_context:,}-token context" if dropped else "")
    return Workload(input_lengths=prompt.ravel(), output_lengths=out.ravel(), arrival=arrival, cv=cv,
                    name=label, session=np.repeat(np.arange(S, dtype=np.int64), T),
                    turn=np.tile(np.arange(T, dtype=np.int64), S), think_s=float(think_s),
                    system_prompt_len=int(system_prompt_len),
                    context_start=start.ravel() if dropped else None, dropped_turns=int(dropped))


def _keep_within(new: np.ndarray, out: np.ndarray, system: int, max_context: int | None) -> tuple[np.ndarray, int]:
    """Per session and turn, the first turn its prompt keeps so that system prompt, kept history,
    input and answer fit ``max_context`` tokens (the oldest turns dropped first, and never taken
    back: a client that trimmed its history does not restore it); and how many turns dropped
    any. A turn too long on its own is shortened in place (``new``, then ``out``), newest tokens kept."""
    S, T = new.shape
    start = np.zeros((S, T), dtype=np.int64)
    if max_context is None:
        return start, 0
    if system + 2 > max_context:
        raise SpecError(f"system_prompt_len={system} leaves no room in the {max_context:,}-token context")
    before = np.zeros((S, T + 1), dtype=np.int64)
    before[:, 1:] = np.cumsum(new + out, axis=1)
    j = np.zeros(S, dtype=np.int64)
    rows = np.arange(S)
    for k in range(T):
        room = max_context - system
        alone = new[:, k] + out[:, k]
        over = alone > room
        if over.any():   # one turn longer than the context: keep its newest input tokens, then cut the answer
            out[over, k] = np.minimum(out[over, k], room - 1)
            new[over, k] = np.maximum(room - out[over, k], 1)
            before[:, 1:] = np.cumsum(new + out, axis=1)
        need = before[:, k] - before[rows, j] + new[:, k] + out[:, k]
        while True:
            move = (need > room) & (j < k)
            if not move.any():
                break
            j = j + move
            need = before[:, k] - before[rows, j] + new[:, k] + out[:, k]
        start[:, k] = j
    return start, int(np.count_nonzero(start))


def with_system_prompt(wl: Workload, tokens: int) -> Workload:
    """``wl`` with a shared system prompt of ``tokens`` tokens before every prompt."""
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        raise SpecError(f"system_prompt_len={tokens!r} must be a non-negative integer number of tokens")
    if not tokens:
        return wl
    if wl.system_prompt_len:
        raise SpecError("the workload already has a system prompt")
    return Workload(input_lengths=wl.input_lengths + tokens, output_lengths=wl.output_lengths, arrival=wl.arrival,
                    cv=wl.cv, trace_times=wl.trace_times, name=wl.name, session=wl.session, turn=wl.turn,
                    think_s=wl.think_s, hash_ids=wl.hash_ids, hash_block=wl.hash_block, system_prompt_len=tokens)


def mooncake_workload(text: str, *, num_requests: int | None = None, name: str = "mooncake") -> Workload:
    """A Mooncake-format trace (JSONL; module docstring): arrivals in seconds from the first,
    the prompt block hashes kept for the prefix cache."""
    t: list[float] = []
    inp: list[int] = []
    out: list[int] = []
    hashes: list[tuple[int, ...]] = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
            ti, a, b = float(r["timestamp"]), int(r["input_length"]), int(r["output_length"])
            h = tuple(int(x) for x in r["hash_ids"])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            raise SpecError(f"trace {name!r} line {i}: expected a Mooncake row {{\"timestamp\": ms, "
                            "\"input_length\": int, \"output_length\": int, \"hash_ids\": [int, ...]}") from None
        if a < 1 or b < 1 or not math.isfinite(ti):
            raise SpecError(f"trace {name!r} line {i}: input_length={a}, output_length={b} must be positive")
        if len(h) < math.ceil(a / MOONCAKE_BLOCK):
            raise SpecError(f"trace {name!r} line {i}: {len(h)} hash_ids for {a} input tokens; "
                            f"expected one per {MOONCAKE_BLOCK}-token block ({math.ceil(a / MOONCAKE_BLOCK)})")
        t.append(ti / 1000.0)  # milliseconds
        inp.append(a)
        out.append(b)
        hashes.append(h)
    if not t:
        raise SpecError(f"trace {name!r} has no requests")
    order = np.argsort(np.asarray(t), kind="stable")
    if num_requests is not None:
        order = order[:num_requests]
    ts = np.asarray(t)[order]
    return Workload(input_lengths=np.asarray(inp)[order], output_lengths=np.asarray(out)[order], arrival="trace",
                    trace_times=ts - ts[0], name=name, hash_ids=tuple(hashes[i] for i in order.tolist()),
                    hash_block=MOONCAKE_BLOCK)


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
            turns = int(np.max(wl.turn)) + 1
            sess = sess * turns + np.asarray(wl.context_start, dtype=np.int64)
        session = sess.tolist()
    elif wl.hash_ids is None:
        session = range(n)  # each request's own blocks (cached, never shared)
    else:
        session = None
    return BlockChains(block_size, session=session, sys_tokens=wl.system_prompt_len, hash_ids=wl.hash_ids,
                       hash_block=wl.hash_block, prompt_len=np.asarray(wl.input_lengths).tolist())


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
        if self.load is not None and self.load not in LOADS:
            raise SpecError(f"kv_load={self.load!r}; expected one of: {', '.join(LOADS)}")
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


def default_load(engine: str | None) -> str:
    """How an engine loads lower-tier KV: SGLang HiCache layer by layer (``hicache_design.md``:
    loads overlap the forward pass per layer), vLLM with LMCache in one bulk copy before the step
    (LMCache ``use_layerwise`` defaults to false), others serially."""
    return "layerwise" if engine == "sglang" else "serial"


# ---------------------------------------------------------------------- wiring
def attach_prefix_caches(instances: Sequence[Instance], clock: StepClock, chains: BlockChains, stats: PrefixStats,
                         tiers: KVTiers | None, engine: str | None) -> None:
    """Give every instance of ``instances`` (all prefilling, one estimator) its prefix cache."""
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


@dataclass(slots=True)
class SessionLoop(ClosedLoop):
    """Sessions in a closed loop per session: each turn is sent ``think_s`` after the previous
    turn's answer ends. Sessions start at ``starts`` (open), or back to back on ``clients``
    clients when ``starts`` is None."""

    first: Sequence[int] = ()
    next_turn: Sequence[int] = ()
    starts: Sequence[float] | None = None
    _session_next: int = field(default=0, init=False)

    def start(self, stage: Stage, loop: EventLoop) -> list[Scheduled]:
        self._loop, self._stage = loop, stage
        if self.starts is not None:
            self._session_next = len(self.first)
            return [(float(t), Priority.ARRIVAL, ClientArrival(stage, q))
                    for t, q in zip(self.starts, self.first, strict=True)]
        k = min(self.clients, len(self.first))
        self._session_next = k
        return [(self.t0 + i * self.ramp_s / self.clients, Priority.ARRIVAL, ClientArrival(stage, self.first[i]))
                for i in range(k)]

    def on_finish(self, q: int, t: float) -> None:
        nxt = self.next_turn[q]
        assert self._loop is not None and self._stage is not None
        if nxt >= 0:  # the session stays on its instance (session affinity)
            home = self._stage.instances[0].req.p_inst[q]
            self._loop.schedule(t + self.think_s, Priority.ARRIVAL, SessionTurn(self._stage, nxt, home))
        elif self.starts is None and self._session_next < len(self.first):
            q0 = self.first[self._session_next]
            self._session_next += 1
            self._loop.schedule(t + self.think_s, Priority.ARRIVAL, ClientArrival(self._stage, q0))


@dataclass(frozen=True, slots=True)
class SessionTurn:
    """A session's next turn arrives (its arrival time is set now) at the instance that served
    the session's earlier turns, and wakes it."""

    stage: Stage
    q: int
    i: int

    def handle(self, loop: EventLoop) -> list[Scheduled]:
        t = loop.now
        st, q, i = self.stage, self.q, self.i
        st.instances[i].req.arrival[q] = t
        st.deliver(i, t, q)
        st.assign(q, i)
        return list(st.wake(i, t))


def session_loop(wl: Workload, *, starts: Sequence[float] | None, clients: int | None) -> SessionLoop:
    """The :class:`SessionLoop` of a session workload."""
    session = np.asarray(wl.session)
    turn = np.asarray(wl.turn)
    n = len(session)
    order = np.lexsort((turn, session))  # by session, then turn
    nxt = np.full(n, -1, dtype=np.int64)
    same = session[order][1:] == session[order][:-1]
    nxt[order[:-1][same]] = order[1:][same]
    first = order[np.r_[True, ~same]]
    return SessionLoop(ids=range(n), clients=clients or len(first), think_s=wl.think_s, first=first.tolist(),
                       next_turn=nxt.tolist(), starts=None if starts is None else list(starts))


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
