"""Step times, memoised: one :class:`StepClock` per estimator, and :class:`Clocks`, the cache of
them that a caller owns (a simulation, a goodput search, a search worker).

A clock is a pure function of its estimator, so sharing one between runs changes no result, only
the time spent; who shares is the caller's choice, as a SimPy environment owns its own state:
``simulate(config)`` alone builds a fresh :class:`Clocks`, and ``simulate(config, clocks=c)`` shares
``c`` with every other call given it. Nothing here is a module global.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np

from serveplan.estimator import columns
from serveplan.estimator.batch import StepBatch
from serveplan.estimator.speculative import SpecEstimator
from serveplan.estimator.step import Estimator
from serveplan.specs.hardware import DeviceSpec
from serveplan.specs.model import ModelSpec
from serveplan.specs.parallel import ParallelConfig
from serveplan.specs.profile import EfficiencyProfile
from serveplan.specs.speculative import SpecDecodeConfig
from serveplan.units import DType

_BLK_BITS = 10  # decode-table blocks of 1024 context-sum values
MAX_MEMO_STEPS = 1 << 16  # memoised step times per clock and table (a few MB)
_MAX_ENDS = 1 << 18  # values of memoised one-sequence stretches per clock (2 MB)
_DENSE_MAX = 1 << 22  # context sums below this use one contiguous table per batch size (<= 32 MB each)
#: bytes of decode step-time tables one clock keeps (dense tables and blocks together); past it the
#: tables are dropped and refilled on demand (a pure function of the estimator: same values). A
#: long run at large batches would otherwise keep one table of up to 32 MB per batch size (GBs).
_TABLE_BYTES = 256 << 20
#: decode stretches of at least this many sequences (and at most ``_DIRECT_STEPS`` steps) are timed
#: directly rather than read from a table: a table block of 1,024 context sums holds at most
#: ``1024 / nd`` of a stretch's steps, and wide-EP batches rarely meet the same context sum twice.
#: Below it a block holds at least 8 steps and a run meets the same sums again and again (a 20,000-
#: request vLLM run at 50 sequences: 5.2 s instead of 7.4 s; the default plan 21 s instead of 38 s
#: of CPU; benchmarks/results/sim-scale.md). A table value and a direct one may differ in the last
#: bit (a product of the columnar estimator summed in another order: 3.5e-18 s on 35% of the
#: stretches of 32-127 sequences in the default plan), which moves a plan's figures by ~1e-14.
_DIRECT_ND = 128
_DIRECT_STEPS = 1 << 13
#: a batch size of at least ``_DIRECT_ND`` sequences met in this many direct stretches is read from
#: table blocks after all (filled only where its context sums fall): a long run meets the same
#: batch sizes and context sums again and again, and a block pays for itself after a few dozen
#: reads (1M vLLM requests at rate 20 meet 128-200 sequences in 15% of their stretches; a short
#: goodput run stays direct). On the 100,000-request vLLM benchmark stream both give the same floats.
_TABLE_AFTER = 256
#: step clocks one :class:`Clocks` keeps (least recently used dropped first)
MAX_CLOCKS = 32


class StepClock:
    """Step times of one estimator, memoised (BestServe §3.3.4 caches its oracle the same way).

    * ``time(batch)``: any step, cached by its :class:`StepBatch` aggregates.
    * ``decode_times(nd, kvd0, k)``: ``k`` decode-only steps of ``nd`` sequences whose context
      sum starts at ``kvd0`` and grows by ``nd`` per step, read from lazily filled tables of
      ``Estimator.step_times`` (one table per ``nd``, filled 1024 context-sum values at a time;
      contiguous up to 4M context-sum values, so a stretch is a strided view); stretches of at
      least ``_DIRECT_ND`` sequences are timed directly, one ``step_times`` call each, until their
      batch size has been met ``_TABLE_AFTER`` times (then from table blocks of that size).
    """

    def __init__(self, est: Estimator) -> None:
        self.est = est
        self.pp = est.parallel.pp
        self._cache: dict[StepBatch, float] = {}
        #: step times by their aggregates (a tuple hashes faster than a StepBatch)
        self.by_sums: dict[tuple[float, ...], float] = {}
        self._blocks: dict[tuple[int, int], np.ndarray] = {}
        self._dense: dict[int, tuple[np.ndarray, bytearray]] = {}
        self._ends: dict[tuple[int, int], np.ndarray] = {}
        self._ends_size = 0
        #: direct stretches met per large batch size (``_TABLE_AFTER``)
        self._direct: dict[int, int] = {}
        self._table_bytes = 0  # held by _dense and _blocks (bounded by _TABLE_BYTES)
        #: prefill step time of one fresh prompt, by its length
        self.prefill_times: dict[int, float] = {}
        #: summed batch-1 decode times of a request alone, by (input, output) (the default time cap)
        self.lone_decode: dict[tuple[int, int], float] = {}

    def time_of(self, sums: tuple[float, ...]) -> float:
        """Time of the step with aggregates ``sums`` (:func:`~serveplan.estimator.batch.step_sums`)."""
        t = self.by_sums.get(sums)
        if t is None:
            if len(self.by_sums) >= MAX_MEMO_STEPS:
                self.by_sums.clear()
            est = self.est
            # a miss here is a new step (its decode context sum is new): timed without passing
            # through the by-batch memos, which would miss too (a pure function: same value)
            t = self.by_sums[sums] = (est.time_of_sums(sums) if self.pp == 1 and type(est) is Estimator
                                      else self.time(StepBatch.from_sums(sums)))
        return t

    def time(self, batch: StepBatch) -> float:
        t = self._cache.get(batch)
        if t is None:
            t = self.est.time(batch) if self.pp == 1 else self.est.stage_time(batch)
            if len(self._cache) >= MAX_MEMO_STEPS:
                self._cache.clear()
            self._cache[batch] = t
        return t

    def _fill(self, nd: int, b: int, out: np.ndarray) -> None:
        """Step times of context sums ``[b*1024, (b+1)*1024)`` for ``nd`` decodes into ``out``."""
        size = 1 << _BLK_BITS
        base = StepBatch(decode_tokens=float(nd), decode_keys=float(nd))
        out[:] = columns.step_times(self.est, base, "decode", length=size,
                                    decode_keys=np.arange(size, dtype=float) + (b << _BLK_BITS))

    def _block(self, nd: int, b: int) -> np.ndarray:
        key = (nd, b)
        blk = self._blocks.get(key)
        if blk is None:
            if self._table_bytes + (8 << _BLK_BITS) > _TABLE_BYTES:
                self._drop_tables()
            self._table_bytes += 8 << _BLK_BITS
            blk = self._blocks[key] = np.empty(1 << _BLK_BITS)
            self._fill(nd, b, blk)
        return blk

    def _drop_tables(self) -> None:
        """Forget every decode table (they would pass ``_TABLE_BYTES``); arrays handed out stay
        valid (a stretch holds its own reference), and tables are refilled on demand."""
        self._dense.clear()
        self._blocks.clear()
        self._table_bytes = 0

    def decode_ends(self, nd: int, kvd0: int, k: int) -> np.ndarray:
        """``decode_times(nd, kvd0, k).cumsum()``; memoised for one sequence (a request alone
        repeats the same stretch), at most ``_MAX_ENDS`` values in all."""
        if nd != 1:
            return self.decode_times(nd, kvd0, k).cumsum()
        key = (kvd0, k)
        c = self._ends.get(key)
        if c is None:
            if self._ends_size + k > _MAX_ENDS:
                self._ends.clear()
                self._ends_size = 0
            c = self._ends[key] = self.decode_times(1, kvd0, k).cumsum()
            self._ends_size += k
        return c

    def decode_times(self, nd: int, kvd0: int, k: int) -> np.ndarray:
        large = nd >= _DIRECT_ND
        if large and k <= _DIRECT_STEPS:
            met = self._direct.get(nd, 0)
            if met < _TABLE_AFTER:
                # a large batch reads one table value in ``nd``: its steps are timed directly, in
                # one call (the estimator's cost per call hardly depends on the number of steps)
                self._direct[nd] = met + 1
                base = StepBatch(decode_tokens=float(nd), decode_keys=float(nd))
                return columns.step_times(self.est, base, "decode", length=k,
                                          decode_keys=kvd0 + nd * np.arange(k, dtype=float))
        hi = kvd0 + nd * (k - 1)
        b0, b1 = kvd0 >> _BLK_BITS, hi >> _BLK_BITS
        if hi < _DENSE_MAX and not large:   # a large batch's sums start far from 0: blocks only
            # one contiguous table per batch size (grown on demand): every stretch is a view
            tab = self._dense.get(nd)
            if tab is None or len(tab[0]) <= hi:
                old = len(tab[0]) if tab is not None else 0
                n_blk = max(b1 + 1, 2 * (old >> _BLK_BITS))
                if self._table_bytes + 8 * ((n_blk << _BLK_BITS) - old) > _TABLE_BYTES:
                    self._drop_tables()
                    tab, old, n_blk = None, 0, b1 + 1
                self._table_bytes += 8 * ((n_blk << _BLK_BITS) - old)
                arr = np.empty(n_blk << _BLK_BITS)
                filled = bytearray(n_blk)
                if tab is not None:
                    # only the filled blocks are ever read: copy those (a table's untouched pages
                    # stay unallocated; the whole copy cost a search 8% of its time)
                    filled[: len(tab[1])] = tab[1]
                    for b0_, b1_ in _runs(tab[1]):
                        arr[b0_ << _BLK_BITS: b1_ << _BLK_BITS] = tab[0][b0_ << _BLK_BITS: b1_ << _BLK_BITS]
                tab = self._dense[nd] = (arr, filled)
            arr, filled = tab
            for b in range(b0, b1 + 1):
                if not filled[b]:
                    self._fill(nd, b, arr[b << _BLK_BITS: (b + 1) << _BLK_BITS])
                    filled[b] = 1
            return arr[kvd0: hi + 1: nd]
        off = b0 << _BLK_BITS
        if b0 == b1:
            return self._block(nd, b0)[kvd0 - off: hi - off + 1: nd]
        arr = np.concatenate([self._block(nd, b) for b in range(b0, b1 + 1)])
        return arr[kvd0 - off: hi - off + 1: nd]


def _runs(flags: bytearray) -> list[tuple[int, int]]:
    """The ``[start, end)`` runs of nonzero bytes of ``flags``."""
    out: list[tuple[int, int]] = []
    start = -1
    for i, f in enumerate(flags):
        if f and start < 0:
            start = i
        elif not f and start >= 0:
            out.append((start, i))
            start = -1
    if start >= 0:
        out.append((start, len(flags)))
    return out


def _spec_key(spec: Any) -> Any:
    """A hashable value standing for a spec: the spec itself when hashable, else its repr (a
    frozen dataclass holding dicts); equal specs give equal keys."""
    try:
        hash(spec)
        return spec
    except TypeError:
        return (type(spec).__name__, repr(spec))


class Clocks:
    """The step clocks of one caller, by the value of their estimators' specs (an equal spec built
    again shares the clock; at most :data:`MAX_CLOCKS`, least recently used dropped first), and the
    engine-specific profiles derived for them (one object per profile and graph bound, so equal
    requests meet the same clock)."""

    def __init__(self, max_clocks: int = MAX_CLOCKS) -> None:
        self.max_clocks = max_clocks
        self._clocks: OrderedDict[tuple[Any, ...], StepClock] = OrderedDict()
        self._profiles: dict[tuple[Any, int], EfficiencyProfile] = {}
        #: spec object id -> (the object, its key): a spec's repr is computed once per object
        self._keys: dict[int, tuple[Any, Any]] = {}
        #: the last call's spec objects and clock: a call with the very same objects, as every
        #: simulation of one goodput search makes, skips hashing the specs
        self._last: tuple[Any, Any, Any, tuple[Any, ...], StepClock] | None = None

    def __len__(self) -> int:
        return len(self._clocks)

    def clear(self) -> None:
        """Forget every clock (a cold start, for benchmarks)."""
        self._clocks.clear()
        self._profiles.clear()
        self._keys.clear()
        self._last = None

    def key(self, spec: Any) -> Any:
        """:func:`_spec_key` of ``spec``, memoised by the object (which is held, so its id stays its own)."""
        hit = self._keys.get(id(spec))
        if hit is not None and hit[0] is spec:
            return hit[1]
        if len(self._keys) >= 4 * self.max_clocks:
            self._keys.clear()
        k = _spec_key(spec)
        self._keys[id(spec)] = (spec, k)
        return k

    def graph_profile(self, profile: EfficiencyProfile, graph_tokens: int) -> EfficiencyProfile:
        """``profile`` whose steps above ``graph_tokens`` tokens per rank run without captured graphs
        (:meth:`EfficiencyProfile.with_` ``prefill_graph_tokens``), the same object each time."""
        if graph_tokens == profile.prefill_graph_tokens:
            return profile
        key = (self.key(profile), graph_tokens)
        hit = self._profiles.get(key)
        if hit is None:
            if len(self._profiles) >= self.max_clocks:
                self._profiles.clear()
            hit = self._profiles[key] = profile.with_(prefill_graph_tokens=graph_tokens)
        return hit

    def clock(self, model: ModelSpec, hardware: DeviceSpec, profile: EfficiencyProfile, parallel: ParallelConfig,
              dtype: DType | str | None, *, kv_dtype: DType | str | None = None,
              memory_utilization: float | None = None, spec: SpecDecodeConfig | None = None) -> StepClock:
        """The :class:`StepClock` of one estimator. ``kv_dtype`` and ``memory_utilization`` default
        to the estimator's; an active ``spec`` (speculative decoding) times steps with a
        :class:`~serveplan.estimator.speculative.SpecEstimator`.

        Raises
        ------
        InfeasibleError
            The weights do not fit (``Estimator.check_fits``).
        """
        sp = spec if spec is not None and spec.is_active else None
        last = self._last
        rest = (parallel, dtype, kv_dtype, memory_utilization, sp)
        if (last is not None and last[0] is model and last[1] is hardware and last[2] is profile
                and last[3] == rest):
            return last[4]
        key: tuple[Any, ...] = (self.key(model), self.key(hardware), self.key(profile), parallel,
                                None if dtype is None else DType.parse(dtype),
                                None if kv_dtype is None else DType.parse(kv_dtype), memory_utilization, sp)
        clock = self._clocks.get(key)
        if clock is not None:
            self._clocks.move_to_end(key)
        else:
            kw: dict[str, Any] = {} if memory_utilization is None else {"memory_utilization": memory_utilization}
            if sp is not None:
                est: Estimator = SpecEstimator(model, hardware, profile, parallel, spec=sp, dtype=dtype,
                                               kv_dtype=kv_dtype, **kw)
            else:
                est = Estimator(model, hardware, profile, parallel, dtype=dtype, kv_dtype=kv_dtype, **kw)
            est.check_fits()
            clock = self._clocks[key] = StepClock(est)
            if len(self._clocks) > self.max_clocks:
                self._clocks.popitem(last=False)
        self._last = (model, hardware, profile, rest, clock)
        return clock
