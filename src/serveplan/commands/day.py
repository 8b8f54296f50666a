"""``day-plan``: plan the fleet over a day of traffic (``serveplan day-plan``, the web page's Day
panel).

The plan question (:class:`~serveplan.commands.plan.PlanOptions`: model, devices, engine, SLO,
length mix) finds the replica: the best strategy within ``--devices`` and its goodput. The traffic
(``--traffic``: a rate file, a bundled trace's arrivals or the ``diurnal`` shape) and the
autoscaler (``--policy``, ``--min-replicas``, scale-up latency, ``--scale-down-delay``) then give
the replicas per interval, and the day is simulated end to end for the autoscaled fleet and for
the fleet provisioned for the peak (:mod:`serveplan.optimize.autoscale`).
:meth:`DayPlanResult.document` is what ``--json`` prints and the page's API returns.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from serveplan.commands import plan
from serveplan.commands.options import opt
from serveplan.errors import SpecError, check_int, check_number
from serveplan.optimize.autoscale import (
    ENGINE_STARTUP_S,
    ENGINE_STARTUP_SOURCE,
    LOAD_HOST,
    DayPlan,
    Policy,
    ScaleUpTime,
    ScalingPolicy,
    day_cost,
    peak_schedule,
    plan_schedule,
    power_curve,
    scale_up_time,
    simulate_day,
)
from serveplan.report.plots import day_plan_plot
from serveplan.sim.clock import Clocks
from serveplan.sim.traffic import RateSeries, load_traffic
from serveplan.specs.catalog import get_host
from serveplan.units import json_safe

#: the most intervals one plan holds (a year at 5-minute intervals)
MAX_INTERVALS = 366 * 288


@dataclass(frozen=True, slots=True, kw_only=True)
class DayOptions(plan.PlanOptions):
    """The question ``serveplan day-plan`` answers (module doc): the plan's options and the day's."""

    traffic: str = opt("diurnal", "--traffic", help=(
        "Rate over time: diurnal (with --peak and --trough), a bundled trace's arrivals (azure-conv-2023, "
        "azure-code-2023: one hour; servegen-m-large-week: a week), or a CSV file of time_s,rate_rps (or "
        "request timestamps, one per line)."))
    peak: float = opt(8.0, "--peak", help="Highest rate of the diurnal shape, requests per second.")
    trough: float = opt(2.0, "--trough", help="Lowest rate of the diurnal shape, requests per second.")
    peak_hour: float = opt(14.0, "--peak-hour", help="Hour of the day (0-24) of the diurnal peak.")
    days: int = opt(1, "--days", help="Days of the diurnal shape.")
    traffic_scale: float = opt(1.0, "--traffic-scale", help="Multiply every rate of the traffic by this factor.")
    interval: float = opt(300.0, "--interval", help="Planning interval, seconds (default 300: 5 minutes).")
    policy: str = opt("scheduled", "--policy", help=(
        "scheduled (the rates are known ahead: replicas start before they are needed) or reactive (an "
        "autoscaler reading the last interval's rate: new replicas serve after the scale-up latency)."))
    min_replicas: int = opt(1, "--min-replicas", help="Fewest replicas at any time.")
    max_replicas: int | None = opt(None, "--max-replicas", help="Most replicas at any time (default: no limit).")
    scale_up: float | None = opt(None, "--scale-up", help=(
        "Seconds from starting a replica to its first request (default: weights per device / --load-bandwidth "
        "plus --startup)."))
    load_bandwidth: float | None = opt(None, "--load-bandwidth", help=(
        "Bytes per second each device reads its weights at (default: the dgx-h100 host's local NVMe, 7e9)."))
    startup: float = opt(ENGINE_STARTUP_S, "--startup", help=(
        "Engine start-up without the weights, seconds (default 58: vLLM, process start to first answer; "
        "vllm-project/vllm#20264)."))
    scale_down_delay: float = opt(300.0, "--scale-down-delay", help=(
        "Seconds the rate must stay low before a replica is removed (the highest count of that window is kept; "
        "Kubernetes HPA's default is 300)."))
    utilization: float = opt(1.0, "--utilization", help=(
        "Share of its goodput each replica is planned at (default 1: up to the goodput; 0.8 leaves 20% headroom)."))
    sim_requests: int = opt(20_000, "--sim-requests", help=(
        "Requests simulated per day (autoscaled and peak each); above it intervals are sampled, each after a "
        "warm-up."))
    sim_replicas: int = opt(4, "--sim-replicas", help="Most replica slots simulated (exchangeable slots count once).")
    sim_warmup: float = opt(60.0, "--sim-warmup", help="Seconds simulated before each sampled window, not counted.")
    no_day_sim: bool = opt(False, "--no-day-sim", help="Plan and cost the day without simulating it.", page=False)

    def __post_init__(self) -> None:
        plan.PlanOptions.__post_init__(self)
        if len(self.hardware_types) > 1:
            raise SpecError(f"hardware={self.hardware!r}: a day plan scales replicas of one device type; expected one "
                            "type (compare types with serveplan optimize --hardware A,B, then plan the day on the "
                            "winner's type)")
        check_number("interval", self.interval, low=1, unit="seconds")
        check_number("traffic-scale", self.traffic_scale, low=0, low_open=True)
        check_number("startup", self.startup, low=0, unit="seconds")
        check_number("scale-down-delay", self.scale_down_delay, low=0, unit="seconds")
        check_number("sim-warmup", self.sim_warmup, low=0, unit="seconds")
        check_number("utilization", self.utilization, low=0, high=1, low_open=True,
                     why="share of a replica's goodput it is planned at")
        check_int("sim-requests", self.sim_requests, low=1000)
        check_int("sim-replicas", self.sim_replicas, low=1)
        if self.scale_up is not None:
            check_number("scale-up", self.scale_up, low=0, unit="seconds")
        if self.load_bandwidth is not None:
            check_number("load-bandwidth", self.load_bandwidth, low=0, low_open=True, unit="bytes per second")
        if self.policy not in tuple(p.value for p in Policy):
            raise SpecError(f"policy={self.policy!r}; expected one of: {', '.join(p.value for p in Policy)}")
        ScalingPolicy(policy=self.policy, min_replicas=self.min_replicas, max_replicas=self.max_replicas,
                      scale_down_delay_s=self.scale_down_delay)
        check_number("peak", self.peak, low=0, low_open=True, unit="requests per second")
        check_number("trough", self.trough, low=0, high=self.peak, unit="requests per second",
                     why="at most the peak")


@dataclass(frozen=True, slots=True, kw_only=True)
class PreparedDay:
    """A checked day plan: the plan's search and the traffic, built before any work."""

    options: DayOptions
    plan: plan.PreparedPlan
    traffic: RateSeries


def prepare(o: DayOptions) -> PreparedDay:
    """Check ``o``, build the search and read the traffic. Raises :class:`SpecError` before any work."""
    traffic = load_traffic(o.traffic, interval_s=o.interval, peak=o.peak, trough=o.trough, days=o.days,
                           peak_hour=o.peak_hour).scaled(o.traffic_scale)
    if traffic.num_intervals > MAX_INTERVALS:
        raise SpecError(f"traffic has {traffic.num_intervals:,} intervals; expected at most {MAX_INTERVALS:,} "
                        "(a year at 5 minutes): give a longer --interval")
    if traffic.peak_rps <= 0:
        raise SpecError(f"traffic {traffic.name!r} has no requests (every rate is 0)")
    return PreparedDay(options=o, plan=plan.prepare(o), traffic=traffic)


@dataclass(frozen=True, slots=True, kw_only=True)
class DayPlanResult:
    """The answer: the plan's search (the replica) and the day plan."""

    prepared: PreparedDay
    search: plan.PlanResult
    day: DayPlan
    elapsed_s: float = 0.0
    files: tuple[Path, ...] = field(default_factory=tuple)

    @property
    def options(self) -> DayOptions:
        return self.prepared.options

    def document(self) -> dict[str, Any]:
        """What ``serveplan day-plan --json`` prints and the page's API returns."""
        doc: dict[str, Any] = {"command": self.options.command_line("day-plan"), **self.day.to_dict(),
                               "elapsed_s": self.elapsed_s}
        res = self.search.best
        doc["search"] = {"settings": res.settings_summary, "best": res.best.name,
                         "strategies": [r.name for r in res.strategies[:self.options.top]]}
        return json_safe(doc)  # type: ignore[no-any-return]


def run(o: DayOptions | PreparedDay, *, progress: bool = False,
        on_progress: Callable[[int, int], None] | None = None) -> DayPlanResult:
    """Answer the day-plan question (module doc)."""
    import time

    t0 = time.perf_counter()
    prep = o if isinstance(o, PreparedDay) else prepare(o)
    opts = prep.options
    searched = plan.run(prep.plan, progress=progress, on_progress=on_progress, launch_files=False)
    best = searched.best.best
    st = prep.plan.settings[0]
    clocks = Clocks()
    su = _scale_up(opts, best, st, clocks)
    policy = ScalingPolicy(policy=opts.policy, min_replicas=opts.min_replicas, max_replicas=opts.max_replicas,
                           scale_up_s=su.total_s, scale_down_delay_s=opts.scale_down_delay,
                           utilization=opts.utilization)
    sched = plan_schedule(prep.traffic, best.goodput_rps, policy)
    peak = peak_schedule(prep.traffic, best.goodput_rps, policy)
    price = prep.plan.prices.find(st.hardware.name, opts.price_tier)
    power = power_curve(best, st, clocks)
    nd = best.candidate.num_devices
    run_a = run_p = None
    if not opts.no_day_sim:
        kw = {"sim_requests": opts.sim_requests, "sim_replicas": opts.sim_replicas, "warmup_s": opts.sim_warmup,
              "seed": opts.seed, "clocks": clocks}
        run_a = simulate_day(sched, best, st, **kw)  # type: ignore[arg-type]
        run_p = simulate_day(peak, best, st, **kw)  # type: ignore[arg-type]
    notes = []
    if price is None:
        notes.append(f"no {opts.price_tier} price for {st.hardware.name}: give one with --price DEVICE=USD")
    if power is None:
        notes.append(f"{st.hardware.name} has no board power: no energy figures")
    if opts.max_replicas is not None and int(sched.needed.max()) >= opts.max_replicas:
        notes.append(f"max-replicas={opts.max_replicas} caps the fleet below what the peak needs")
    day = DayPlan(traffic=prep.traffic, unit=best, policy=policy, scale_up=su, schedule=sched, peak=peak,
                  cost=day_cost(sched, nd, price, power), peak_cost=day_cost(peak, nd, price, power), run=run_a,
                  peak_run=run_p, price=price, percentile=st.slo.percentile, notes=tuple(notes))
    result = DayPlanResult(prepared=prep, search=searched, day=day, elapsed_s=time.perf_counter() - t0)
    if opts.out is not None:
        files = write_reports(result, opts.out)
        result = DayPlanResult(prepared=prep, search=searched, day=day, elapsed_s=result.elapsed_s, files=files)
    return result


def _scale_up(o: DayOptions, best: Any, settings: Any, clocks: Clocks) -> ScaleUpTime:
    """Scale-up latency of the replica (:func:`~serveplan.optimize.autoscale.scale_up_time`): the
    weights per device of its largest shard, from the deployment (STYLE.md §10)."""
    dep = settings.deployment(best.candidate, clocks)
    weights = max(r.estimator.memory.weights_bytes for r in dep.roles)
    if o.load_bandwidth is not None:
        bw, src = float(o.load_bandwidth), "given (--load-bandwidth)"
    else:
        host = get_host(LOAD_HOST)
        bw = host.disk_read_bandwidth
        src = (f"{LOAD_HOST} host's local NVMe read rate per device ({bw / 1e9:g} GB/s; "
               f"specs/data/hosts/{LOAD_HOST}.yaml: assumed PCIe 4.0 x4 U.2 sequential read)")
    return scale_up_time(weights, bw, o.startup,
                         load_source=src,
                         startup_source=("given (--startup)" if o.startup != ENGINE_STARTUP_S else
                                         ENGINE_STARTUP_SOURCE),
                         total_s=o.scale_up)


def write_reports(result: DayPlanResult, out: Path) -> tuple[Path, ...]:
    """``day-plan.csv`` (one row per interval), ``day-plan.png`` and ``day-plan.json`` in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    rows = result.day.intervals()
    p_csv = out / "day-plan.csv"
    with p_csv.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        for r in rows:
            w.writerow({k: "" if v is None else v for k, v in r.items()})
    p_png = day_plan_plot(result.day, out / "day-plan.png")
    p_json = out / "day-plan.json"
    p_json.write_text(json.dumps(result.document(), indent=2, allow_nan=False))
    return (p_csv, p_png, p_json)


__all__ = ["DayOptions", "DayPlanResult", "PreparedDay", "prepare", "run", "write_reports"]
