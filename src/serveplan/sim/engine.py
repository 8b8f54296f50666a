"""``simulate(config) -> SimulationResult``: a request stream through a fleet of instances.

Two fidelities:

* ``iteration`` (default): every step of every instance is one batch of known composition,
  timed by the estimator; continuous batching with KV blocks and preemption
  (:mod:`serveplan.sim.instance`, :mod:`serveplan.sim.cluster`).
* ``bestserve``: BestServe's Algorithms 2-7 with the pseudo batch size
  (:mod:`serveplan.sim.bestserve`).

Runs are pure in ``(config)``: arrivals come from ``np.random.default_rng(seed)`` (common random
numbers across rates, :func:`serveplan.sim.workload.arrival_times`) and lengths from the
workload. Estimators and their step-time tables are memoised across calls with the same specs.
"""

from __future__ import annotations

import dataclasses
import math
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from serveplan.errors import SpecError
from serveplan.estimator.batch import StepBatch
from serveplan.estimator.static import decode_times, fom_flops
from serveplan.estimator.step import Estimator
from serveplan.sim import bestserve as bs
from serveplan.sim.cluster import EarlyStop, Strategy, kv_transfer_time, run_collocated, run_disaggregated
from serveplan.sim.instance import Instance, StepClock
from serveplan.sim.metrics import SLO, LatencyStats
from serveplan.sim.request import RequestRecords, RequestState
from serveplan.sim.router import check_router
from serveplan.sim.schedulers import get_scheduler
from serveplan.sim.workload import Workload, arrival_times
from serveplan.specs.hardware import DeviceSpec
from serveplan.specs.model import ModelSpec
from serveplan.specs.parallel import ParallelConfig
from serveplan.specs.profile import EfficiencyProfile
from serveplan.units import DType

FIDELITIES = ("iteration", "bestserve")
COLLOCATED_SCHEDULERS = ("vllm", "sarathi")
#: vLLM's KV block size (tokens per PagedAttention block, vLLM default ``block_size=16``).
BLOCK_SIZE = 16


def _default_workload() -> Workload:
    return Workload.scenario("op2", num_requests=10000)


@dataclass(frozen=True, slots=True, kw_only=True)
class SimulationConfig:
    """Everything a simulation depends on.

    Parameters
    ----------
    model, hardware, profile:
        Specs (see :mod:`serveplan.specs`).
    strategy:
        :class:`Strategy` or its text (``"2m"``, ``"1p1d"``).
    tp, pp, dp, ep:
        Parallel layout of every instance; ``prefill_tp`` / ``decode_tp`` override ``tp`` for the
        prefill and decode instances of a disaggregated strategy.
    max_batch:
        Sequences per step (decode instances and collocated instances).
    prefill_max_batch:
        New prompts per step (default, or 0: ``max_batch``); the batch limit of prefill instances.
    scheduler:
        Collocated policy: ``vllm`` (prefill first, no mixing) or ``sarathi`` (chunked prefill,
        decode-maximal batching). Disaggregated fleets use the ``prefill-only`` and
        ``decode-only`` roles.
    chunk_size, token_budget:
        Largest prefill chunk (``sarathi``) and new tokens per step (default: ``chunk_size`` for
        ``sarathi``, unlimited otherwise).
    router:
        ``round_robin`` or ``least_outstanding``.
    fidelity:
        ``iteration`` or ``bestserve``.
    rate:
        Arrival rate (requests/s); unused for trace arrivals.
    workload, slo, seed, dtype:
        Request stream, latency targets, arrival seed and weight dtype (default: the model's).
    early_stop:
        Stop as soon as the SLO at ``slo.percentile`` is certain to be missed (iteration
        fidelity; the ``bestserve`` fidelity always runs to the end, it is cheap).
    max_time_s:
        Simulated-time cap of the iteration fidelity (default: ``4 x`` the arrival span plus
        ``20 x`` the zero-load latency of the longest request); requests unfinished by then are
        reported as such and the run as overloaded.
    tau:
        Balancing scalar of the pseudo batch size (``bestserve`` fidelity, eq. 9).
    """

    model: ModelSpec
    hardware: DeviceSpec
    profile: EfficiencyProfile
    strategy: Strategy | str = "1p1d"
    tp: int = 4
    prefill_tp: int | None = None
    decode_tp: int | None = None
    pp: int = 1
    dp: int = 1
    ep: int = 1
    max_batch: int = 16
    prefill_max_batch: int | None = None
    scheduler: str = "vllm"
    chunk_size: int = 512
    token_budget: int | None = None
    router: str = "round_robin"
    fidelity: str = "iteration"
    rate: float | None = 3.5
    workload: Workload = field(default_factory=_default_workload)
    slo: SLO = field(default_factory=SLO)
    seed: int = 0
    dtype: DType | str | None = None
    early_stop: bool = False
    max_time_s: float | None = None
    tau: float = bs.TAU

    def __post_init__(self) -> None:
        object.__setattr__(self, "strategy", Strategy.parse(self.strategy))
        if self.prefill_max_batch == 0:  # 0 reads as "no separate limit"
            object.__setattr__(self, "prefill_max_batch", None)
        for f in ("tp", "pp", "dp", "ep", "max_batch", "chunk_size"):
            _positive_int(f, getattr(self, f))
        for f in ("prefill_tp", "decode_tp", "prefill_max_batch", "token_budget"):
            v = getattr(self, f)
            if v is not None:
                _positive_int(f, v)
        if self.scheduler not in COLLOCATED_SCHEDULERS:
            get_scheduler(self.scheduler)  # unknown name -> SpecError listing the options
            raise SpecError(f"scheduler={self.scheduler!r} is a disaggregation role; expected one of: "
                            f"{', '.join(COLLOCATED_SCHEDULERS)}")
        check_router(self.router)
        if self.fidelity not in FIDELITIES:
            raise SpecError(f"fidelity={self.fidelity!r}; expected one of: {', '.join(FIDELITIES)}")
        if not isinstance(self.workload, Workload):
            raise SpecError(f"workload must be a Workload, got {type(self.workload).__name__}")
        if self.workload.arrival != "trace":
            r = self.rate
            if r is None or isinstance(r, bool) or not isinstance(r, (int, float)) or not (math.isfinite(r) and r > 0):
                raise SpecError(f"rate={r!r} must be a positive number of requests per second")
        if not isinstance(self.slo, SLO):
            raise SpecError(f"slo must be an SLO, got {type(self.slo).__name__}")
        if self.max_time_s is not None and not self.max_time_s > 0:
            raise SpecError(f"max_time_s={self.max_time_s!r} must be positive seconds")
        if not self.tau > 0:
            raise SpecError(f"tau={self.tau!r} must be positive (BestServe eq. 9 default 2.5)")
        if self.fidelity == "bestserve" and self.pp > 1:
            raise SpecError(f"pp={self.pp}: the bestserve fidelity models tensor parallelism only; use fidelity='iteration'")

    def parallel(self, role: str) -> ParallelConfig:
        """Layout of a ``prefill``, ``decode`` or ``collocated`` instance."""
        tp = self.tp
        if role == "prefill" and self.prefill_tp:
            tp = self.prefill_tp
        elif role == "decode" and self.decode_tp:
            tp = self.decode_tp
        return ParallelConfig(tp=tp, pp=self.pp, dp=self.dp, ep=self.ep)

    @property
    def num_devices(self) -> int:
        s = self.strategy
        assert isinstance(s, Strategy)
        if s.is_disaggregated:
            return s.num_prefill * self.parallel("prefill").num_devices + s.num_decode * self.parallel("decode").num_devices
        return s.num_collocated * self.parallel("collocated").num_devices

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.name, "hardware": self.hardware.name, "profile": self.profile.name,
            "strategy": str(self.strategy), "tp": self.tp, "prefill_tp": self.prefill_tp, "decode_tp": self.decode_tp,
            "pp": self.pp, "dp": self.dp, "ep": self.ep, "max_batch": self.max_batch,
            "prefill_max_batch": self.prefill_max_batch, "scheduler": self.scheduler, "chunk_size": self.chunk_size,
            "token_budget": self.token_budget, "router": self.router, "fidelity": self.fidelity, "rate": self.rate,
            "workload": self.workload.describe(), "num_requests": self.workload.num_requests,
            "slo": self.slo.to_dict(), "seed": self.seed,
            "dtype": None if self.dtype is None else DType.parse(self.dtype).value, "early_stop": self.early_stop,
        }


def _positive_int(name: str, v: Any) -> None:
    if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
        raise SpecError(f"{name}={v!r} must be a positive integer")


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class SimulationResult:
    """Latencies, throughput and SLO attainment of one simulation.

    Latency statistics are over completed requests; rates are per second of simulated time from
    the first arrival to the last completion. ``fom`` is the FOM of the modeling notes (B.5
    Option 2): the useful FLOPs of the completed requests (prefill plus every decode step, closed
    form) per second of that span. ``bubble_s`` is the pipeline-bubble time of each request
    (zeros when ``pp == 1``).
    """

    config: SimulationConfig
    num_requests: int
    num_completed: int
    ttft_s: LatencyStats
    tpot_s: LatencyStats
    e2e_s: LatencyStats
    queue_s: LatencyStats
    throughput_rps: float
    output_tokens_per_s: float
    total_tokens_per_s: float
    slo_attainment: float
    ttft_attainment: float
    tpot_attainment: float
    overloaded: bool
    stopped_early: bool
    makespan_s: float
    fom: float
    num_preemptions: int
    kv_limited: bool
    kv_capacity_tokens: dict[str, int]
    num_steps: int
    requests: RequestRecords

    @property
    def bubble_s(self) -> np.ndarray:
        return self.requests.bubble

    @property
    def goodput_rps(self) -> float:
        """Completed requests meeting both targets, per second."""
        return self.slo_attainment * self.num_requests / self.makespan_s if self.makespan_s > 0 else 0.0

    def to_dict(self, *, include_requests: bool = False) -> dict[str, Any]:
        d: dict[str, Any] = {
            "config": self.config.to_dict(),
            "num_requests": self.num_requests, "num_completed": self.num_completed,
            "ttft_s": self.ttft_s.to_dict(), "tpot_s": self.tpot_s.to_dict(), "e2e_s": self.e2e_s.to_dict(),
            "queue_s": self.queue_s.to_dict(),
            "throughput_rps": self.throughput_rps, "output_tokens_per_s": self.output_tokens_per_s,
            "total_tokens_per_s": self.total_tokens_per_s, "goodput_rps": self.goodput_rps,
            "slo_attainment": self.slo_attainment, "ttft_attainment": self.ttft_attainment,
            "tpot_attainment": self.tpot_attainment, "overloaded": self.overloaded,
            "stopped_early": self.stopped_early, "makespan_s": self.makespan_s, "fom_flops_per_s": self.fom,
            "num_preemptions": self.num_preemptions, "kv_limited": self.kv_limited,
            "kv_capacity_tokens": dict(self.kv_capacity_tokens), "num_steps": self.num_steps,
            "bubble_s": LatencyStats.of(self.requests.bubble).to_dict(),
        }
        if include_requests:
            d["requests"] = self.requests.to_dict()
        return d


# ---------------------------------------------------------------------- estimator memo
_CLOCKS: OrderedDict[tuple[Any, ...], tuple[tuple[Any, ...], StepClock]] = OrderedDict()
_MAX_CLOCKS = 32


def step_clock(model: ModelSpec, hardware: DeviceSpec, profile: EfficiencyProfile, parallel: ParallelConfig,
               dtype: DType | str | None) -> StepClock:
    """The memoised :class:`StepClock` of one estimator (specs compared by identity)."""
    key = (id(model), id(hardware), id(profile), parallel, None if dtype is None else DType.parse(dtype))
    hit = _CLOCKS.get(key)
    if hit is not None and hit[0][0] is model and hit[0][1] is hardware and hit[0][2] is profile:
        _CLOCKS.move_to_end(key)
        return hit[1]
    est = Estimator(model, hardware, profile, parallel, dtype=dtype)
    est.check_fits()
    clock = StepClock(est)
    _CLOCKS[key] = ((model, hardware, profile), clock)
    if len(_CLOCKS) > _MAX_CLOCKS:
        _CLOCKS.popitem(last=False)
    return clock


# ---------------------------------------------------------------------- simulate
def simulate(config: SimulationConfig) -> SimulationResult:
    """Simulate ``config.workload`` through ``config.strategy`` and summarise what users see.

    Raises
    ------
    SpecError
        A layout that does not divide the model, or an instance whose KV cache cannot hold one
        request (``max_batch`` / ``tp`` too small for the workload's longest request).
    InfeasibleError
        The weights do not fit in device memory.

    Examples
    --------
    >>> from serveplan import get_model, get_hardware, get_profile
    >>> from serveplan.sim import SimulationConfig, Workload, simulate
    >>> cfg = SimulationConfig(model=get_model("codellama-34b"), hardware=get_hardware("ascend-910b3"),
    ...                        profile=get_profile("bestserve-910b3"), strategy="2m", rate=1.0,
    ...                        workload=Workload.scenario("op3", num_requests=200))
    >>> simulate(cfg).num_completed
    200
    """
    cfg = config
    wl = cfg.workload
    strat = cfg.strategy
    assert isinstance(strat, Strategy)
    arrival = arrival_times(wl, cfg.rate, cfg.seed)
    roles = ("prefill", "decode") if strat.is_disaggregated else ("collocated",)
    clocks = {role: step_clock(cfg.model, cfg.hardware, cfg.profile, cfg.parallel(role), cfg.dtype) for role in roles}
    _check_kv(cfg, clocks, wl)
    cap = cfg.max_time_s if cfg.max_time_s is not None else _default_cap(cfg, clocks, arrival, wl)
    req = RequestState(arrival, wl.input_lengths, wl.output_lengths)
    if cfg.fidelity == "bestserve":
        stopped, insts = _run_bestserve(cfg, clocks, req), []
    else:
        insts, stopped = _run_iteration(cfg, clocks, req, cap)
    return _result(cfg, req, insts, clocks, stopped)


def _check_kv(cfg: SimulationConfig, clocks: dict[str, StepClock], wl: Workload) -> None:
    if cfg.fidelity == "bestserve":
        return  # the paper's simulator is memory-insensitive (§12)
    longest = int(np.max(wl.input_lengths + wl.output_lengths - 1))
    for role, clock in clocks.items():
        cap = clock.est.memory.kv_capacity_tokens // BLOCK_SIZE * BLOCK_SIZE
        need = -(-(wl.input_lengths.max() if role == "prefill" else longest) // BLOCK_SIZE) * BLOCK_SIZE
        if cap < need:
            field_name = "prefill_max_batch" if role == "prefill" else "max_batch"
            raise SpecError(
                f"{field_name}={cfg.prefill_max_batch if role == 'prefill' else cfg.max_batch}: a {role} instance "
                f"({cfg.parallel(role).label()}) holds {clock.est.memory.kv_capacity_tokens} KV tokens, fewer than "
                f"one request needs ({need} tokens); use a larger tp/pp or shorter requests")


def _default_cap(cfg: SimulationConfig, clocks: dict[str, StepClock], arrival: np.ndarray, wl: Workload) -> float:
    """4x the arrival span plus 20x the zero-load latency of the longest request."""
    s_in = int(wl.input_lengths.max())
    s_out = int(wl.output_lengths.max())
    est_p = clocks.get("prefill", clocks.get("collocated")).est  # type: ignore[union-attr]
    clock_d = clocks.get("decode", clocks.get("collocated"))
    assert clock_d is not None
    lone = est_p.time(StepBatch.prefill(1, s_in)) * max(cfg.pp, 1)
    if s_out > 1:
        memo = clock_d.lone_decode
        d = memo.get((s_in, s_out))
        if d is None:
            if len(memo) >= 1024:  # bound: one entry per distinct longest (input, output) of a workload
                memo.clear()
            d = memo[(s_in, s_out)] = float(decode_times(clock_d.est, 1, s_in + 1, s_out - 1).sum())
        lone += d
    span = float(arrival[-1] - arrival[0]) if len(arrival) else 0.0
    return float(arrival[0]) + 4.0 * span + 20.0 * lone


def _run_iteration(cfg: SimulationConfig, clocks: dict[str, StepClock], req: RequestState,
                   cap: float) -> tuple[list[Instance], bool]:
    strat = cfg.strategy
    assert isinstance(strat, Strategy)
    stop = EarlyStop(req, cfg.slo) if cfg.early_stop else None
    pmb = cfg.prefill_max_batch or cfg.max_batch

    def instance(i: int, role: str, sched: str, max_batch: int, budget: float, handoff: Any = None) -> Instance:
        return Instance(i, role, clocks[role], get_scheduler(sched)(), req, max_batch=max_batch,
                        prefill_max_batch=pmb, token_budget=budget, chunk_size=cfg.chunk_size,
                        block_size=BLOCK_SIZE, handoff=handoff)

    if strat.is_disaggregated:
        budget = float(cfg.token_budget) if cfg.token_budget else math.inf
        est_p, est_d = clocks["prefill"].est, clocks["decode"].est
        inp = req.inp

        by_len: dict[int, float] = {}  # transfer time by prompt length

        def transfer(q: int) -> float:
            t = by_len.get(inp[q])
            if t is None:
                t = by_len[inp[q]] = kv_transfer_time(est_p, est_d, inp[q])
            return t

        run = run_disaggregated(
            lambda i, h: instance(i, "prefill", "prefill-only", pmb, budget, h),
            lambda i: instance(strat.num_prefill + i, "decode", "decode-only", cfg.max_batch, budget),
            strat.num_prefill, strat.num_decode, req, transfer, cfg.router, cap, stop)
    else:
        if cfg.scheduler == "sarathi":
            budget = float(cfg.token_budget or cfg.chunk_size)
        else:
            budget = float(cfg.token_budget) if cfg.token_budget else math.inf
        run = run_collocated(lambda i: instance(i, "collocated", cfg.scheduler, cfg.max_batch, budget),
                             strat.num_collocated, req, cfg.router, cap, stop)
    return run.instances, run.stopped_early


def _run_bestserve(cfg: SimulationConfig, clocks: dict[str, StepClock], req: RequestState) -> bool:
    strat = cfg.strategy
    assert isinstance(strat, Strategy)
    A = np.asarray(req.arrival)
    inp = np.asarray(req.inp)
    out = np.asarray(req.out)
    oracle_p = bs.Oracle(clocks.get("prefill", clocks.get("collocated")).est)  # type: ignore[union-attr]
    oracle_d = bs.Oracle(clocks.get("decode", clocks.get("collocated")).est)  # type: ignore[union-attr]
    res = bs.run_bestserve(
        A, inp, out, disaggregated=strat.is_disaggregated, n_prefill=strat.num_prefill,
        n_decode=strat.num_decode, n_collocated=strat.num_collocated,
        prefill_b_max=cfg.prefill_max_batch or cfg.max_batch, decode_b_max=cfg.max_batch,
        oracle_p=oracle_p, oracle_d=oracle_d, tau=cfg.tau)
    req.first_token = res["first_token"].tolist()
    req.finish = res["finish"].tolist()
    req.p_inst = res["prefill_instance"].tolist()
    req.d_inst = res["decode_instance"].tolist()
    req.start = res["start"].tolist()
    req.decode_arrival = res["decode_arrival"].tolist()
    req.decode_start = res["decode_start"].tolist()
    return False


def _result(cfg: SimulationConfig, req: RequestState, insts: list[Instance], clocks: dict[str, StepClock],
            stopped: bool) -> SimulationResult:
    rec = req.records()
    done = np.isfinite(rec.finish)
    n = req.n
    n_done = int(done.sum())
    t0 = float(rec.arrival.min()) if n else 0.0
    t_end = float(np.max(rec.finish[done])) if n_done else t0
    span = max(t_end - t0, 1e-12)
    out_tok = float(rec.output_len[done].sum())
    all_tok = out_tok + float(rec.input_len[done].sum())
    slo = cfg.slo
    with np.errstate(invalid="ignore"):
        ok_ttft = np.isfinite(rec.ttft) & (rec.ttft <= slo.ttft_s) & done
        ok_tpot = np.isfinite(rec.tpot) & (rec.tpot <= slo.tpot_s) & done
    m = cfg.model
    fom = 0.0
    if n_done:
        # distinct (input, output) pairs in lexicographic order, as one int64 key each (token
        # counts are far below 2^32)
        keys, counts = np.unique((rec.input_len[done] << 32) | rec.output_len[done], return_counts=True)
        for key, c in zip(keys.tolist(), counts.tolist()):
            fom += c * fom_flops(1, key >> 32, key & 0xFFFFFFFF, m.num_hidden_layers, m.hidden_size,
                                 m.num_attention_heads)
        fom /= span
    # overload: the backlog when the last request arrives is a large share of the stream, or
    # requests were still unfinished at the simulated-time cap
    t_last = float(rec.arrival.max()) if n else 0.0
    with np.errstate(invalid="ignore"):
        backlog = int(np.count_nonzero(~(rec.finish <= t_last)))
    strat = cfg.strategy
    assert isinstance(strat, Strategy)
    slots = cfg.max_batch * strat.num_instances * cfg.pp
    overloaded = (not stopped and n_done < n) or backlog > max(0.1 * n, 2 * slots)
    return SimulationResult(
        config=cfg, num_requests=n, num_completed=n_done,
        ttft_s=LatencyStats.of(rec.ttft[done]), tpot_s=LatencyStats.of(rec.tpot[done]),
        e2e_s=LatencyStats.of(rec.e2e[done]), queue_s=LatencyStats.of(rec.queue[done]),
        throughput_rps=n_done / span if n_done else 0.0,
        output_tokens_per_s=out_tok / span if n_done else 0.0,
        total_tokens_per_s=all_tok / span if n_done else 0.0,
        slo_attainment=float(np.count_nonzero(ok_ttft & ok_tpot)) / n if n else 0.0,
        ttft_attainment=float(np.count_nonzero(ok_ttft)) / n if n else 0.0,
        tpot_attainment=float(np.count_nonzero(ok_tpot)) / n if n else 0.0,
        overloaded=bool(overloaded), stopped_early=bool(stopped), makespan_s=span, fom=fom,
        num_preemptions=int(sum(i.num_preemptions for i in insts)),
        kv_limited=bool(sum(i.num_preemptions for i in insts)) or any(
            i.peak_blocks >= i.total_blocks - i.max_batch for i in insts),
        kv_capacity_tokens={role: int(c.est.memory.kv_capacity_tokens) for role, c in clocks.items()},
        num_steps=int(sum(i.num_steps for i in insts)), requests=rec,
    )


def replace(config: SimulationConfig, **changes: Any) -> SimulationConfig:
    """``dataclasses.replace`` for configs (e.g. another rate)."""
    return dataclasses.replace(config, **changes)
