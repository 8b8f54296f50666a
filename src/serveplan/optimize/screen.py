"""Analytic screening: an upper bound on the goodput of a candidate fleet, before any simulation.

The bound combines, per instance and from the estimator alone (no simulation):

* **SLO floor of a lone request** (``goodput._zero_load``): a lone request already missing a
  target rejects the candidate outright.
* **Prefill roofline under the TTFT target.** A prefill step of ``b`` prompts of the mean input
  length takes ``T_p(b)``; every prompt of that step waits for all of it, so only batches with
  ``T_p(b) <= (1 + tau) TTFT`` can meet the target and the instance serves at most
  ``max_b b / T_p(b)`` requests/s (``b`` up to the prompts per step and the token budget).
* **Decode roofline under the TPOT target.** ``b`` sequences decoding together from the mean
  input to the mean output length take ``sum_k t_d(b, ctx_k)`` (the estimator's decode steps,
  :func:`~serveplan.estimator.static.decode_times`); a request's TPOT is at least that sum over
  ``s_out - 1`` steps, so ``b`` is capped where that mean step exceeds ``(1 + tau) TPOT`` and by
  the max batch and the KV slots; the instance serves at most ``b / sum_k t_d`` requests/s.
* **Collocated instances** do both on the same devices. With ``prefill-first`` a step is either
  prefill or decode: at rate ``lam`` a decode batch of ``b`` advances only ``1 - lam / r_p`` of
  the time, so ``lam(b) = 1 / ((s_out - 1) t(b) / b + 1 / r_p)`` and the TPOT is
  ``t(b) / (1 - lam(b) / r_p)``; the largest ``b`` keeping that within the target bounds the rate.
  With chunked prefill, ``min(r_prefill, r_decode)`` (piggybacked decodes may hide behind prefill
  compute).

A fleet's bound is ``N r`` (``Nm``) or ``min(P r_p, D r_d)`` (``PpDd``). Queueing only lowers
goodput below these rates, so they are upper bounds up to the estimator's own step model; the
search multiplies them by :data:`SLACK` (more where pipeline micro-batches make the
per-step view coarser) before discarding a candidate that cannot beat the best found so far.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from serveplan.estimator.batch import StepBatch
from serveplan.estimator.static import decode_times
from serveplan.sim.clock import Clocks
from serveplan.sim.deployment import RoleSetup
from serveplan.sim.fleet import Fleet, InstanceConfig

if TYPE_CHECKING:
    from serveplan.optimize.goodput import GoodputSettings

#: factor applied to every analytic bound before it discards a candidate: the step model is the
#: simulator's own, so the raw bound is above the simulated goodput by the queueing the bound
#: ignores (measured goodput / raw bound: 0.92 for Qwen3-32B 6p1d-tp1/4 on H200, 0.89-0.90 for nine
#: DeepSeek-V3 TP/DP-attention/EP collocated layouts on H200); 1.1 covers the bisection tolerance
SLACK = 1.1
#: factor for pipeline-parallel instances (the bound treats micro-batches coarsely)
SLACK_PARALLEL = 1.5  # pipeline-parallel instances only


@dataclass(frozen=True, slots=True)
class InstanceBound:
    """Upper bounds (requests/s) of one instance: prefill under TTFT, decode under TPOT."""

    prefill_rps: float
    decode_rps: float
    decode_batch: int
    prefill_first_rps: float = math.inf  # collocated, prefill-first: both phases on one instance
    lone_tpot_s: float = 0.0             # mean decode step of a lone request (the fastest TPOT)


class Screen:
    """Analytic bounds of the candidates of one search (memoised per instance configuration), from
    each candidate's resolved deployment (the simulator's estimators and limits)."""

    def __init__(self, settings: GoodputSettings, clocks: Clocks | None = None) -> None:
        s = self.settings = settings
        self.clocks = clocks if clocks is not None else Clocks()
        lim = 1.0 + s.relaxation
        self.s_in, self.s_out = mean_lengths(s.workload.input_lengths, s.workload.output_lengths)
        self.ttft_lim, self.tpot_lim = lim * s.slo.ttft_s, lim * s.slo.tpot_s
        self._memo: dict[InstanceConfig, InstanceBound] = {}

    def instance(self, inst: InstanceConfig, cand: Fleet | None = None) -> InstanceBound:
        """Prefill and decode bounds of one instance (module doc); ``cand``, a fleet holding it, is
        resolved when the instance was not bounded yet."""
        got = self._memo.get(inst)
        if got is None:
            if cand is None:
                raise KeyError(f"instance {inst} was not bounded yet; give a fleet that holds it")
            self._bound_fleet(cand)
            got = self._memo[inst]
        return got

    def _bound_fleet(self, cand: Fleet) -> None:
        """Bound every instance of ``cand`` not bounded yet, from its resolved deployment."""
        if all(cand.instance(r) in self._memo for r in cand.roles):
            return
        dep = self.settings.deployment(cand, self.clocks)
        for setup in dep.roles:
            if setup.instance not in self._memo:
                self._memo[setup.instance] = self._instance(setup)

    def _instance(self, setup: RoleSetup) -> InstanceBound:
        inst = setup.instance
        par = inst.parallel
        est = setup.estimator
        b_cfg = inst.batching
        pp = par.pp
        s_in, s_out = self.s_in, self.s_out

        def step(batch: StepBatch) -> float:
            return est.stage_time(batch) if pp > 1 else est.time(batch)

        # prefill: the largest admissible batch whose step meets the TTFT target
        budget = b_cfg.step_token_budget
        bp_max = b_cfg.max_prompts if not math.isfinite(budget) else min(b_cfg.max_prompts, int(budget // s_in))
        bp_max = max(1, bp_max)
        r_p = 0.0
        for b in sorted({1, 2, 4, 8, 16, 32, 64, bp_max}):
            if b > bp_max:
                continue
            if b > 1 and est.time(StepBatch.prefill(b, s_in)) > self.ttft_lim:
                break
            r_p = max(r_p, b / max(step(StepBatch.prefill(b, s_in)), 1e-12))
        if s_out <= 1:
            return InstanceBound(prefill_rps=r_p, decode_rps=math.inf, decode_batch=1, prefill_first_rps=r_p)
        # decode: the largest batch whose mean step meets the TPOT target
        slots = max(1, est.memory.kv_capacity_tokens // (s_in + s_out))
        b_hi = max(1, min(b_cfg.max_batch, slots))

        def mean_step(b: int) -> float:
            return float(decode_times(est, b, s_in + 1, s_out - 1).sum()) / (s_out - 1)

        lo = 1
        if mean_step(1) <= self.tpot_lim:
            hi = b_hi
            while lo < hi:  # the mean step grows with the batch: bisect on the largest meeting the target
                mid = (lo + hi + 1) // 2
                if mean_step(mid) <= self.tpot_lim:
                    lo = mid
                else:
                    hi = mid - 1
        r_d = lo / (mean_step(lo) * (s_out - 1)) * pp  # pp micro-batches in flight
        # prefill-first on one instance: decodes advance only between prefills, so at rate lam
        # a batch of b serves lam(b) = 1 / ((s_out - 1) t(b) / b + 1 / r_p) and its TPOT is
        # t(b) / (1 - lam(b) / r_p); the largest b keeping that within the target bounds the rate
        def shared(b: int) -> tuple[float, bool]:
            t = mean_step(b)
            lam = 1.0 / ((s_out - 1) * t / (b * pp) + 1.0 / r_p)
            return lam, t <= self.tpot_lim * (1.0 - lam / r_p)

        lam1, ok1 = shared(1)
        if not ok1:
            r_c = r_p * max(0.0, 1.0 - mean_step(1) / self.tpot_lim)
        else:
            lo_c, hi_c = 1, b_hi
            while lo_c < hi_c:
                mid = (lo_c + hi_c + 1) // 2
                if shared(mid)[1]:
                    lo_c = mid
                else:
                    hi_c = mid - 1
            r_c = shared(lo_c)[0]
        return InstanceBound(prefill_rps=r_p, decode_rps=r_d, decode_batch=lo, prefill_first_rps=r_c,
                             lone_tpot_s=mean_step(1))

    def speed_per_user(self, cand: Fleet) -> float:
        """Upper bound on tokens/s per user (``1 / TPOT``): a lone request's decode, with slack."""
        t = self.instance(cand.last, cand).lone_tpot_s
        return SLACK / t if t > 0 else math.inf

    def fleet(self, cand: Fleet) -> float:
        """Upper bound (requests/s, slack included) on the goodput of ``cand`` (module doc)."""

        def slack(inst: InstanceConfig) -> float:
            p = inst.parallel
            return SLACK_PARALLEL if p.pp > 1 else SLACK

        s = cand.strategy
        self._bound_fleet(cand)
        if cand.is_disaggregated:
            assert cand.prefill is not None and cand.decode is not None
            bp, bd = self.instance(cand.prefill), self.instance(cand.decode)
            return min(s.num_prefill * bp.prefill_rps * slack(cand.prefill),
                       s.num_decode * bd.decode_rps * slack(cand.decode))
        assert cand.collocated is not None
        b = self.instance(cand.collocated)
        if b.decode_rps == math.inf:
            r = b.prefill_rps
        elif cand.collocated.batching.scheduler == "prefill-first":
            r = b.prefill_first_rps
        else:
            r = min(b.prefill_rps, b.decode_rps)
        return s.num_collocated * r * slack(cand.collocated)


def mean_lengths(input_lengths: np.ndarray, output_lengths: np.ndarray) -> tuple[int, int]:
    """Mean input and output lengths, rounded, at least one token."""
    return (max(1, int(round(float(np.mean(input_lengths))))), max(1, int(round(float(np.mean(output_lengths))))))
