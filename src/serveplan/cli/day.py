"""``serveplan day-plan``: the day-plan command (:mod:`serveplan.commands.day`) rendered as tables."""

from __future__ import annotations

from typing import Any

import typer
from rich.table import Table

from serveplan.cli.base import console, emit_json, options_command
from serveplan.commands import day

_EXTRA = (
    ("json_out", bool, typer.Option(False, "--json", help="Print JSON.")),
    ("progress", bool, typer.Option(True, "--progress/--no-progress", help="Show a progress bar.")),
)


@options_command("day-plan", day.DayOptions, extra=_EXTRA)
def day_plan_cmd(opts: day.DayOptions, *, json_out: bool = False, progress: bool = True) -> None:
    """Plan the fleet over a day of traffic: replicas per interval under the SLO, with scale-up
    latency, minimum replicas and a scale-down delay; GPU-hours, dollars, joules and the simulated
    SLO attainment of the autoscaled day against provisioning for the peak."""
    result = day.run(opts, progress=progress and not json_out)
    if json_out:
        emit_json(result.document())
        return
    _print(result)


def _money(x: float | None) -> str:
    return "-" if x is None else f"${x:,.2f}"


def _pct(x: float | None) -> str:
    return "-" if x is None or x != x else f"{100 * x:.2f}%"


def _print(result: day.DayPlanResult) -> None:
    con = console()
    d = result.day
    tr, unit, su, pol = d.traffic, d.unit, d.scale_up, d.policy
    nd = unit.candidate.num_devices
    con.print(f"traffic: {tr.name} ({tr.num_intervals} intervals of {tr.interval_s:g} s, mean {tr.mean_rps:.2f} "
              f"req/s, peak {tr.peak_rps:.2f} req/s)")
    con.print(f"replica: {unit.name} on {nd} devices, goodput {unit.goodput_rps:.2f} req/s under the SLO (the best "
              f"strategy within --devices)")
    how = "given" if su.given else (f"{su.weights_bytes_per_device / 1e9:.1f} GB per device / "
                                    f"{su.load_bandwidth / 1e9:g} GB/s = {su.load_s:.1f} s + start-up "
                                    f"{su.startup_s:g} s")
    con.print(f"scale-up latency {su.total_s:.1f} s ({how}); weights: {su.load_source}; start-up: {su.startup_source}")
    con.print(f"policy {pol.policy}, min {pol.min_replicas} replica(s), scale-down delay {pol.scale_down_delay_s:g} s")
    rows = d.intervals()
    step = max(1, len(rows) // 24)
    t = Table(title=f"replicas over the day (every {step} interval(s) shown; all in --json and --out CSV)",
              title_justify="left")
    for col in ("hour", "rate req/s", "needed", "serving", "devices", "attainment"):
        t.add_column(col, justify="right")
    for r in rows[::step]:
        t.add_row(f"{r['start_s'] / 3600:.2f}", f"{r['rate_rps']:.2f}", str(r["replicas_needed"]),
                  f"{r['replicas_serving']:.2f}", f"{r['devices_provisioned']:.1f}", _pct(r["attainment"]))
    con.print(t)
    s = Table(title=f"the day: autoscaled against provisioning for the peak (SLO P{d.percentile:g})",
              title_justify="left")
    for col in ("fleet", "peak replicas", "GPU-hours", "cost", "energy kWh", "SLO attainment", "simulated"):
        s.add_column(col, justify="left" if col in ("fleet", "simulated") else "right")
    for name, c, run in (("autoscaled", d.cost, d.run), ("peak", d.peak_cost, d.peak_run)):
        s.add_row(name, str(c.peak_replicas), f"{c.gpu_hours:,.1f}", _money(c.usd),
                  "-" if c.kwh is None else f"{c.kwh:,.1f}", _pct(None if run is None else run.attainment),
                  "-" if run is None else f"{run.requests_simulated:,} requests, {run.mode}")
    con.print(s)
    _verdict(d)
    for n in d.notes:
        con.print(f"note: {n}")
    if d.price is not None:
        con.print(f"price: {d.price.label}; energy: the power model (docs/cost-energy.md); day plan: docs/day-plan.md")
    for f in result.files:
        con.print(f"wrote {f}")


def _verdict(d: Any) -> None:
    con = console()
    a, p = d.cost, d.peak_cost
    saved = 1 - a.gpu_hours / p.gpu_hours if p.gpu_hours > 0 else 0.0
    line = f"autoscaling uses {saved:.1%} fewer GPU-hours than provisioning for the peak"
    if d.run is not None:
        met = d.run.attainment >= d.percentile / 100
        line += (f"; simulated attainment {_pct(d.run.attainment)} ({'meets' if met else 'misses'} the "
                 f"P{d.percentile:g} SLO over the day)")
    con.print(line + ".")
