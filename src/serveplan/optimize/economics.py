"""What a strategy costs and draws at its operating point: dollars and joules per token.

For a ranked strategy (:class:`~serveplan.optimize.goodput.GoodputResult`) under its settings:

**Planned rate.** ``R`` = the target rate when one is given (``--target-rate``), else the
strategy's goodput ``G``. A fleet serves at most its goodput within the SLO, so ``R`` is served by
``k = ceil(R / G)`` copies of the fleet, each at ``R / k`` req/s.

**Cost** (a price ``p`` in US dollars per GPU-hour, :mod:`serveplan.specs.prices`), with the
workload's mean input and output lengths ``s_in`` and ``s_out`` (tokens per request)::

    $/hour       = N_devices * p                                  (one fleet)
    $/Mtok out   = $/hour / (3600 * G * s_out) * 1e6               (at the goodput)
    $/Mtok total = $/hour / (3600 * G * (s_in + s_out)) * 1e6      (input + output tokens)
    $/month      = k * $/hour * 730                                (at the planned rate; 730 h a month)

A fleet whose pools run on two device types (a mixed fleet) pays each pool's devices at their
own type's price: ``$/hour = sum over pools of N_pool * p_type``.

**Energy** (:mod:`serveplan.estimator.power`): per role, from the deployment's own estimators
(STYLE.md §10), each instance at ``λ = R / (k * instances)`` req/s:

* prefill (prefill and collocated instances): prompts batched per step ``n_p``, the fixed point
  ``n_p = clip(λ * t_p(n_p), 1, max_prompts)``; busy share ``u_p = λ * t_p(n_p) / n_p``;
* decode (decode and collocated instances): the token rate ``r = λ (s_out - 1)`` at the mean
  context ``s_in + s_out / 2`` is carried by the smallest batch ``n`` with ``n / t_d(n) >= r /
  (1 - u_p)`` (1 at light load; the KV cache and max batch cap it); busy share ``u_d = r t_d(n) / n``;
* each device draws ``P_idle + (P_board - P_idle) (u_p a_p + u_d a_d)`` plus the host's share,
  ``a`` the step's activity (compute, memory and collective time by their weights).

Each pool draws its own type's board, idle and host power. J/token = the fleets' power /
(``R * s_out``) (output tokens) or / (``R * (s_in + s_out)``).
Speculative decoding is priced as plain decoding (the draft's work is not counted).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from serveplan.estimator.batch import StepBatch
from serveplan.estimator.power import average_power_w, host_power_w, step_activity
from serveplan.optimize.goodput import GoodputResult, GoodputSettings
from serveplan.sim.clock import Clocks
from serveplan.sim.deployment import RoleSetup
from serveplan.sim.fleet import Role
from serveplan.specs.hardware import DeviceSpec
from serveplan.specs.prices import HOURS_PER_MONTH, Price

#: objectives of a search: goodput per device (BestServe's, the default), lowest $ per million
#: output tokens at the goodput, lowest joules per output token at the planned rate
OBJECTIVES = ("goodput-per-device", "cost", "energy")
#: fixed-point iterations of the prefill batch (it settles in two or three)
_PREFILL_ITERATIONS = 8


@dataclass(frozen=True, slots=True, kw_only=True)
class RoleEnergy:
    """One role's instances at the planned load: busy shares, step activities, power per device."""

    role: str
    instances: int
    devices_per_instance: int
    rate_rps: float               # requests per second per instance
    busy_prefill: float           # share of time in prefill steps
    busy_decode: float            # share of time in decode steps
    activity_prefill: float       # share of the dynamic power range a prefill step draws
    activity_decode: float
    prefill_batch: float          # prompts per prefill step
    decode_batch: float           # sequences per decode step
    accelerator_w: float          # average power of one accelerator (W)
    host_w: float                 # the server's power per device (W)

    def to_dict(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self.__slots__}


@dataclass(frozen=True, slots=True, kw_only=True)
class Economics:
    """Cost and energy of one strategy (module doc). Cost fields are None without a price;
    energy fields None when the device has no ``board_power_w``."""

    name: str
    num_devices: int
    goodput_rps: float
    planned_rps: float
    planned_rate: str             # "goodput" or "target rate"
    replicas: int
    mean_input_tokens: float
    mean_output_tokens: float
    price: Price | None = None
    usd_per_hour: float | None = None
    usd_per_mtok_output: float | None = None
    usd_per_mtok_total: float | None = None
    usd_per_month: float | None = None
    power_w_per_device: float | None = None
    fleet_power_w: float | None = None
    j_per_output_token: float | None = None
    j_per_token: float | None = None
    kwh_per_month: float | None = None
    roles: tuple[RoleEnergy, ...] = field(default_factory=tuple)
    #: a mixed fleet's price of each device type (its ``price`` is then None)
    prices: tuple[Price, ...] = ()

    def objective_value(self, objective: str) -> float:
        """The number ``objective`` ranks by, lower first (``inf`` when it cannot be computed)."""
        if objective == "cost":
            v = self.usd_per_mtok_output
        elif objective == "energy":
            v = self.j_per_output_token
        else:
            v = -self.goodput_rps / self.num_devices
        return math.inf if v is None else float(v)

    def to_dict(self) -> dict[str, Any]:
        """Flat figures (SI: W, J; money in US dollars), the price and the roles."""
        d: dict[str, Any] = {f: getattr(self, f) for f in self.__slots__ if f not in ("price", "roles", "prices")}
        d["price"] = None if self.price is None else self.price.to_dict()
        d["roles"] = [r.to_dict() for r in self.roles]
        if self.prices:
            d["prices"] = [p.to_dict() for p in self.prices]
        return d


def planned_rate(goodput_rps: float, target_rate: float | None) -> tuple[float, int, str]:
    """``(R, k, what)``: the planned rate, the fleet copies serving it and where ``R`` came from
    (module doc)."""
    if target_rate is None or goodput_rps <= 0:
        return goodput_rps, 1, "goodput"
    return float(target_rate), max(1, math.ceil(target_rate / goodput_rps - 1e-9)), "target rate"


def cost_figures(num_devices: int, usd_per_gpu_hour: float, goodput_rps: float, mean_in: float,
                 mean_out: float, replicas: int = 1) -> dict[str, float]:
    """``$/hour``, ``$/Mtok`` (output; input + output) at the goodput and ``$/month`` of
    ``replicas`` fleets (module doc)."""
    return fleet_cost_figures(num_devices * usd_per_gpu_hour, goodput_rps, mean_in, mean_out, replicas)


def fleet_cost_figures(per_hour: float, goodput_rps: float, mean_in: float, mean_out: float,
                       replicas: int = 1) -> dict[str, float]:
    """:func:`cost_figures` of a fleet costing ``per_hour`` US dollars an hour (a mixed fleet: the
    sum over its pools)."""
    out_tps = goodput_rps * mean_out
    all_tps = goodput_rps * (mean_in + mean_out)
    return {"usd_per_hour": per_hour,
            "usd_per_mtok_output": per_hour / (3600.0 * out_tps) * 1e6 if out_tps > 0 else math.inf,
            "usd_per_mtok_total": per_hour / (3600.0 * all_tps) * 1e6 if all_tps > 0 else math.inf,
            "usd_per_month": replicas * per_hour * HOURS_PER_MONTH}


def _prefill(setup: RoleSetup, rate: float, s_in: int) -> tuple[float, float, float]:
    """``(busy share, activity, prompts per step)`` of one instance's prefill at ``rate`` req/s."""
    clock, est = setup.clock, setup.estimator
    cap = max(1, setup.instance.batching.max_prompts)
    n = 1
    for _ in range(_PREFILL_ITERATIONS):
        t = clock.time(StepBatch.prefill(n, s_in))
        nxt = int(min(cap, max(1, math.ceil(rate * t))))
        if nxt == n:
            break
        n = nxt
    t = clock.time(StepBatch.prefill(n, s_in))
    act = step_activity(est.estimate(StepBatch.prefill(n, s_in))).activity
    return min(1.0, rate * t / n), act, float(n)


def _decode(setup: RoleSetup, rate: float, s_in: int, s_out: int, free: float) -> tuple[float, float, float]:
    """``(busy share, activity, sequences per step)`` of one instance's decode at ``rate`` req/s
    with a share ``free`` of its time left by prefill."""
    if s_out <= 1 or rate <= 0 or free <= 0:
        return 0.0, 0.0, 0.0
    clock, est = setup.clock, setup.estimator
    ctx = s_in + s_out // 2
    tokens = rate * (s_out - 1)                       # decode tokens per second to carry
    n_max = max(1, min(setup.instance.batching.max_batch, setup.kv_capacity_tokens // max(1, s_in + s_out)))

    def t(n: int) -> float:
        return clock.time(StepBatch.decode(n, ctx))

    if tokens * t(1) <= free:
        n = 1
    elif n_max / t(n_max) < tokens / free:
        n = n_max                                     # over capacity: saturated at the largest batch
    else:
        lo, hi = 1, n_max                             # n / t(n) grows with n: smallest n that carries it
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if mid / t(mid) >= tokens / free:
                hi = mid
            else:
                lo = mid
        n = hi
    busy = min(free, tokens * t(n) / n)
    act = step_activity(est.estimate(StepBatch.decode(n, ctx))).activity
    return busy, act, float(n)


def role_energy(setup: RoleSetup, device: DeviceSpec, rate_per_instance: float, s_in: int, s_out: int) -> RoleEnergy:
    """One role's :class:`RoleEnergy` with each instance at ``rate_per_instance`` req/s; the power
    figures are ``device``'s (the settings' device: step-time caches are shared between specs that
    differ only in power, so the estimator's own spec may not carry a run's power limit)."""
    up = ap = npf = 0.0
    if setup.role in (Role.PREFILL, Role.COLLOCATED):
        up, ap, npf = _prefill(setup, rate_per_instance, s_in)
    ud = ad = nd = 0.0
    if setup.role in (Role.DECODE, Role.COLLOCATED):
        ud, ad, nd = _decode(setup, rate_per_instance, s_in, s_out, 1.0 - up)
    busy = up + ud
    activity = (up * ap + ud * ad) / busy if busy > 0 else 0.0
    return RoleEnergy(role=setup.role.value, instances=setup.count, devices_per_instance=setup.num_devices,
                      rate_rps=rate_per_instance, busy_prefill=up, busy_decode=ud, activity_prefill=ap,
                      activity_decode=ad, prefill_batch=npf, decode_batch=nd,
                      accelerator_w=average_power_w(device, busy, activity), host_w=host_power_w(device))


def economics(result: GoodputResult, settings: GoodputSettings, *, price: Price | None = None,
              target_rate: float | None = None, clocks: Clocks | None = None,
              price_of: Callable[[str], Price | None] | None = None) -> Economics:
    """Cost and energy of ``result``'s fleet under ``settings`` (module doc).

    Parameters
    ----------
    price:
        US dollars per GPU-hour of the device (None: no cost figures).
    target_rate:
        The planned rate when given (req/s), else the goodput.
    clocks:
        Step clocks to share (default: fresh ones).
    price_of:
        The price of a device type by hardware id (None: none), for the pools of a mixed fleet.
    """
    cand = result.candidate
    if cand.has_device_types:
        return _mixed_economics(result, settings, price_of=price_of, target_rate=target_rate, clocks=clocks)
    wl = settings.workload
    s_in, s_out = float(np.mean(wl.input_lengths)), float(np.mean(wl.output_lengths))
    rate, k, what = planned_rate(result.goodput_rps, target_rate)
    fig: dict[str, Any] = {}
    if price is not None:
        fig = cost_figures(cand.num_devices, price.usd_per_gpu_hour, result.goodput_rps, s_in, s_out, k)
    out = Economics(name=result.name, num_devices=cand.num_devices, goodput_rps=result.goodput_rps,
                    planned_rps=rate, planned_rate=what, replicas=k, mean_input_tokens=s_in,
                    mean_output_tokens=s_out, price=price, **fig)
    device = settings.hardware
    if not device.board_power_w or rate <= 0:
        return out
    dep = settings.deployment(cand, clocks)
    per_fleet = rate / k
    roles = tuple(role_energy(s, device, per_fleet / s.count, max(1, round(s_in)), max(1, round(s_out)))
                  for s in dep.roles)
    fleet_w = sum(r.instances * r.devices_per_instance * (r.accelerator_w + r.host_w) for r in roles)
    total_w = k * fleet_w
    return Economics(
        name=out.name, num_devices=out.num_devices, goodput_rps=out.goodput_rps, planned_rps=rate,
        planned_rate=what, replicas=k, mean_input_tokens=s_in, mean_output_tokens=s_out, price=price, **fig,
        power_w_per_device=fleet_w / cand.num_devices, fleet_power_w=total_w,
        j_per_output_token=total_w / (rate * s_out), j_per_token=total_w / (rate * (s_in + s_out)),
        kwh_per_month=total_w * HOURS_PER_MONTH / 1000.0, roles=roles)


def _mixed_economics(result: GoodputResult, settings: GoodputSettings, *,
                     price_of: Callable[[str], Price | None] | None, target_rate: float | None,
                     clocks: Clocks | None) -> Economics:
    """:func:`economics` of a fleet whose pools run on their own device types: each pool's devices
    at their type's price and power (module doc)."""
    cand = result.candidate
    wl = settings.workload
    s_in, s_out = float(np.mean(wl.input_lengths)), float(np.mean(wl.output_lengths))
    rate, k, what = planned_rate(result.goodput_rps, target_rate)
    dep = settings.deployment(cand, clocks)
    devices: dict[str, int] = {}
    for st in dep.roles:
        devices[st.hardware.name] = devices.get(st.hardware.name, 0) + st.count * st.num_devices
    found = {name: price_of(name) if price_of is not None else None for name in devices}
    prices = tuple(p for p in found.values() if p is not None)
    fig: dict[str, Any] = {}
    if len(prices) == len(devices):
        per_hour = sum(n * p.usd_per_gpu_hour for n, p in zip(devices.values(), prices, strict=True))
        fig = fleet_cost_figures(per_hour, result.goodput_rps, s_in, s_out, k)
    base = dict(name=result.name, num_devices=cand.num_devices, goodput_rps=result.goodput_rps, planned_rps=rate,
                planned_rate=what, replicas=k, mean_input_tokens=s_in, mean_output_tokens=s_out, price=None,
                prices=prices if fig else (), **fig)
    if rate <= 0 or not all(st.hardware.board_power_w for st in dep.roles):
        return Economics(**base)
    per_fleet = rate / k
    roles = tuple(role_energy(st, st.hardware, per_fleet / st.count, max(1, round(s_in)), max(1, round(s_out)))
                  for st in dep.roles)
    fleet_w = sum(r.instances * r.devices_per_instance * (r.accelerator_w + r.host_w) for r in roles)
    total_w = k * fleet_w
    return Economics(**base, power_w_per_device=fleet_w / cand.num_devices, fleet_power_w=total_w,
                     j_per_output_token=total_w / (rate * s_out), j_per_token=total_w / (rate * (s_in + s_out)),
                     kwh_per_month=total_w * HOURS_PER_MONTH / 1000.0, roles=roles)
