"""The decoding requests of one instance, advanced together without touching each of them.

Under continuous batching the common step is "every running request decodes one token"
(vLLM's decode-maximal batching, Sarathi §4.2; a step that also prefills new prompts decodes
them all too), so between two changes of the running set every decoding request gains the same
number of tokens. :class:`DecodeCohort` keeps that number once, as a step counter ``T``, instead
of writing ``k`` more generated tokens, KV entries and blocks into every request after every
stretch of ``k`` steps (:meth:`~serveplan.sim.kv.KVCache.decode`, the simulator's innermost loop).

A member ``r`` joined (or was last written) at ``t0[r]``; its true values are its stored ones plus
``T - t0[r]``: ``kv_len = c_r + T`` with ``c_r = kv_len[r] - t0[r]`` fixed while it is a member,
and it has its last token at ``T = F_r = out[r] - gen[r] + t0[r]``. The aggregates a step needs
are kept as members come and go:

* the context sum of the decodes, ``sum(c_r) + n T`` (the step's ``decode_keys`` less ``n``);
* the fewest tokens any member has left, ``min(F_r) - T`` (a heap);
* the KV blocks ``k`` more steps append: vLLM PagedAttention adds a block whenever a sequence's
  length passes a multiple of the block size ``b`` (``ceil(len / b)`` blocks), so a member whose
  length is ``rho`` past a multiple gains ``ceil((rho + k) / b) - ceil(rho / b)`` blocks; members
  are counted by ``c_r mod b`` (``rho = (c_r + T) mod b``), which ``T`` does not change;
* the output tokens the members still owe, ``sum(F_r) - n T`` (SGLang's reserve for the running
  requests, ``PrefillAdder``, counts each at most ``clip``: exact from the sum while the largest
  ``F_r`` joined since the cohort formed is within ``clip`` of ``T``, else one pass over members);
* the blocks the members still append before their last token (TensorRT-LLM's
  GUARANTEED_NO_EVICT reservation): a member's last step leaves ``inp + out - 1`` tokens cached
  (``kv_len = inp + gen - 1`` throughout), so ``sum(ceil((inp_r + out_r - 1) / b))`` less the
  members' blocks (``u_sum`` holds the difference with their written blocks; less
  :attr:`KVCache.pending`, the blocks not yet written).

Blocks the lag owes are :attr:`KVCache.pending` (free blocks a policy sees exclude them). Every
reader of a member's lengths writes the lag first (:meth:`flush`, or :meth:`leave` for one); all
integer arithmetic, so the written values are those the per-step updates would have given.
Requests join one at a time (:meth:`join`, O(1): a prompt done, a transferred cache admitted), and
the cohort outlives :meth:`Instance.run_until <serveplan.sim.instance.Instance.run_until>`: the
fleet writes it out (:meth:`Instance.settle <serveplan.sim.instance.Instance.settle>`) when a run
ends and before a window's requests are renumbered.
Used only with one pipeline stage, no prefix cache, full attention and plain decoding (each
decode one token per step); :attr:`Instance._lazy <serveplan.sim.instance.Instance>`.
"""

from __future__ import annotations

import heapq

from serveplan.sim.kv import KVCache
from serveplan.sim.request import RequestState


class DecodeCohort:
    """Decoding requests of one instance with their common lag (module doc)."""

    __slots__ = ("req", "kv", "bs", "T", "t0", "c_sum", "hist", "heap", "dirty", "sums", "f_sum", "f_hi", "u_sum",
                 "odd")

    def __init__(self, req: RequestState, kv: KVCache, sums: bool = True) -> None:
        self.req = req
        self.kv = kv
        #: keep the owed-output and future-block sums (:meth:`left_sum`, :meth:`future_blocks`;
        #: off for a policy that reads neither: two sums less per join and leave)
        self.sums = sums
        self.bs = kv.block_size
        #: decode steps every member took so far (members' stored values lag by ``T - t0``)
        self.T = 0
        #: member -> ``T`` when its stored values were last written
        self.t0: dict[int, int] = {}
        #: ``sum(kv_len[r] - t0[r])`` over members
        self.c_sum = 0
        #: members by ``(kv_len[r] - t0[r]) mod block_size``
        self.hist = [0] * self.bs
        #: ``(F_r, r)``: the step count at which member ``r`` has its last token (stale entries skipped)
        self.heap: list[tuple[int, int]] = []
        #: some member's stored values lag
        self.dirty = False
        self._reset_sums()

    def _reset_sums(self) -> None:
        """The sums of an empty cohort (besides :attr:`c_sum` and :attr:`hist`)."""
        #: ``sum(F_r)`` over members, and the largest ``F_r`` joined since the cohort formed
        self.f_sum = 0
        self.f_hi = -1
        #: ``sum(ceil((inp_r + out_r - 1) / b) - blocks_r)`` over members, their written blocks
        self.u_sum = 0
        #: members whose stored state breaks ``kv_len = inp + gen - 1``, ``blocks = ceil(kv_len / b)``
        #: (none in the simulator's own paths; their future blocks are then summed member by member)
        self.odd: set[int] = set()

    def __len__(self) -> int:
        return len(self.t0)

    @property
    def context_sum(self) -> int:
        """Sum of the members' KV lengths."""
        return self.c_sum + len(self.t0) * self.T

    def join(self, q: int) -> None:
        """``q`` (running, its prompt done, its stored values true) decodes with the cohort from now."""
        R, T, bs = self.req, self.T, self.bs
        k, g, o = R.kv_len[q], R.gen[q], R.out[q]
        c = k - T
        self.t0[q] = T
        self.c_sum += c
        self.hist[c % bs] += 1
        f = o - g + T
        heapq.heappush(self.heap, (f, q))
        if self.sums:
            self.f_sum += f
            if f > self.f_hi:
                self.f_hi = f
            i, b = R.inp[q], self.kv.blocks[q]
            self.u_sum += -(-(i + o - 1) // bs) - b
            if k != i + g - 1 or b != -(-k // bs):
                self.odd.add(q)

    def form(self, run: list[int]) -> None:
        """The requests of ``run`` (none a member) join."""
        for q in run:
            self.join(q)

    def tokens_left(self) -> int:
        """The fewest tokens any member has left (members exist)."""
        heap, t0, R = self.heap, self.t0, self.req
        while True:
            f, q = heap[0]
            t = t0.get(q)
            if t is not None and f == R.out[q] - R.gen[q] + t:
                return f - self.T
            heapq.heappop(heap)   # left the cohort (or rejoined later with another count)

    def left_sum(self, clip: int) -> int:
        """``sum(min(out_r - gen_r, clip))`` over members (their true counts, ``F_r - T`` each)."""
        assert self.sums, "cohort built without its sums"
        T = self.T
        if self.f_hi - T <= clip:   # no member owes more than ``clip``
            return self.f_sum - len(self.t0) * T
        R = self.req
        out, gen = R.out, R.gen
        return sum(min(out[q] - gen[q] + t - T, clip) for q, t in self.t0.items())

    def future_blocks(self) -> int | None:
        """``sum(max(ceil((inp_r + out_r - 1) / b) - blocks_r, 0))`` over members (their true
        blocks); None when a member's stored state is not the regular one (:attr:`odd`)."""
        assert self.sums, "cohort built without its sums"
        if self.odd:
            return None
        return self.u_sum - self.kv.pending

    def grow(self, k: int) -> int:
        """Blocks the members append in their next ``k = a b + e`` steps (``0 <= e < b``): a member
        ``rho`` tokens past a multiple of ``b`` gains ``ceil((rho + k) / b) - ceil(rho / b)``, that is
        ``a`` plus one when ``rho == 0 < e`` or ``rho + e > b``; members with ``rho`` in a range are
        a circular slice of :attr:`hist` (``rho = (p + T) mod b``)."""
        bs, hist = self.bs, self.hist
        a, e = divmod(k, bs)
        total = len(self.t0) * a
        if e:
            p0 = -self.T % bs                  # rho == 0
            total += hist[p0]
            if e > 1:                          # rho in [b - e + 1, b - 1]
                lo = (p0 + bs - e + 1) % bs
                hi = lo + e - 1
                total += sum(hist[lo:hi]) if hi <= bs else sum(hist[lo:]) + sum(hist[: hi - bs])
        return total

    def advance(self, k: int, order: list[int]) -> list[int]:
        """Every member decodes ``k`` tokens (at most :meth:`tokens_left`); returns those that
        reached their last token, written and out of the cohort, in the order of ``order``."""
        self.kv.pending += self.grow(k)
        T = self.T = self.T + k
        self.dirty = True
        heap = self.heap
        done: list[int] = []
        if not heap or heap[0][0] > T:
            return done
        t0, out, gen = self.t0, self.req.out, self.req.gen
        while heap and heap[0][0] <= T:
            f, q = heapq.heappop(heap)
            t = t0.get(q)
            if t is not None and f == out[q] - gen[q] + t:
                self.leave(q)
                done.append(q)
        n = len(done)
        if n == len(order):   # order is every member: all of them finished
            return list(order)
        if n > 4:
            pos = {q: j for j, q in enumerate(order)}
            done.sort(key=pos.__getitem__)
        elif n > 1:
            done.sort(key=order.index)
        return done

    def leave(self, q: int) -> None:
        """Member ``q`` leaves (finished), its lag of ``T - t0`` steps written into its lengths
        and blocks first."""
        T, bs, R, kv = self.T, self.bs, self.req, self.kv
        t = self.t0.pop(q)
        k1 = R.kv_len[q]
        c = k1 - t                      # its c_r (the sums hold it until now)
        self.c_sum -= c
        self.hist[c % bs] -= 1
        d = T - t
        if d:
            R.gen[q] += d
            k1 += d
            R.kv_len[q] = k1
            nb = -(-k1 // bs)
            grown = nb - kv.blocks[q]
            kv.blocks[q] = nb
            kv.free -= grown
            kv.pending -= grown
            self.u_sum -= grown
        if self.sums:
            o = R.out[q]
            self.f_sum -= o - R.gen[q] + T
            self.u_sum -= -(-(R.inp[q] + o - 1) // bs) - kv.blocks[q]
            if self.odd:
                self.odd.discard(q)

    def flush(self) -> None:
        """Write every member's lag (members stay)."""
        if not self.dirty:
            return
        T, bs, kv = self.T, self.bs, self.kv
        gen, kvl, blocks = self.req.gen, self.req.kv_len, kv.blocks
        grown = 0
        for q, t in self.t0.items():   # leave's write, inlined: this runs per member
            d = T - t
            if d:
                gen[q] += d
                k1 = kvl[q] + d
                kvl[q] = k1
                nb = -(-k1 // bs)
                grown += nb - blocks[q]
                blocks[q] = nb
        kv.free -= grown
        kv.pending -= grown
        self.u_sum -= grown
        self.t0 = dict.fromkeys(self.t0, T)
        assert kv.pending == 0, "cohort blocks out of step"
        self.dirty = False

    def disband(self) -> None:
        """Write every member's lag and dissolve the cohort."""
        self.flush()
        self.t0 = {}
        self.c_sum = 0
        self.hist = [0] * self.bs
        self.heap = []
        self._reset_sums()
