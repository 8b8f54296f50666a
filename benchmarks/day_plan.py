"""``serveplan day-plan`` benchmark: autoscaled against provisioning for the peak, and the time a
day at 5-minute intervals takes to plan (target: at most 30 s on 2 cores).

Cases (each the whole command: the search for the replica, the schedule, the day simulated end to
end for the autoscaled fleet and for the peak's, cost and energy):

1. a day at 5-minute intervals (288), diurnal 8-40 req/s, Llama-3.1-8B replicas on one H100;
2. the same day for the project's default question, Llama-3.1-70B on up to 8 H100 per replica
   (``--num-requests 1000`` for the search);
3. the arrivals of the Azure LLM inference trace 2023, conversation service (the one public
   production trace bundled: one hour, per minute; rates x 10), at 1-minute intervals, scheduled and
   reactive policies;
4. a week of the diurnal shape (2016 intervals) for the week's GPU-hours;
5. a week of a public production trace's arrivals: ServeGen's model m-large on Alibaba Cloud Model
   Studio (``--traffic servegen-m-large-week``, 1,008 windows of 600 s, rates x 0.1 so that one to
   a few Llama-3.1-8B replicas on one H100 each serve it), scheduled and reactive, at full goodput and
   planned at 80% of it (``--utilization 0.8``). Run::

    PYTHONPATH=src python benchmarks/day_plan.py [--jobs 2]

writes ``benchmarks/results/day-plan.md``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling machine_info module
from machine_info import describe, report  # noqa: E402
from serveplan.commands import day  # noqa: E402

SMALL = {"model": "llama-3.1-8b", "devices": "1", "tp": "1", "num-requests": "500"}
CASES = [
    ("8B, diurnal 8-40 req/s, 288 x 5 min, scheduled", {**SMALL, "peak": "40", "trough": "8"}),
    ("8B, diurnal 8-40 req/s, 288 x 5 min, reactive", {**SMALL, "peak": "40", "trough": "8", "policy": "reactive"}),
    ("70B on up to 8 H100, diurnal 8-40 req/s, 288 x 5 min, scheduled",
     {"num-requests": "1000", "peak": "40", "trough": "8"}),
    ("8B, Azure conv 2023 arrivals x10, 58 x 1 min, scheduled",
     {**SMALL, "traffic": "azure-conv-2023", "traffic-scale": "10", "interval": "60"}),
    ("8B, Azure conv 2023 arrivals x10, 58 x 1 min, reactive",
     {**SMALL, "traffic": "azure-conv-2023", "traffic-scale": "10", "interval": "60", "policy": "reactive"}),
    ("8B, a week of diurnal 8-40 req/s, 2016 x 5 min, scheduled", {**SMALL, "peak": "40", "trough": "8", "days": "7"}),
    ("8B, a week of ServeGen m-large arrivals x 0.1, 1008 x 10 min, scheduled",
     {**SMALL, "traffic": "servegen-m-large-week", "traffic-scale": "0.1", "interval": "600"}),
    ("8B, a week of ServeGen m-large arrivals x 0.1, 1008 x 10 min, reactive",
     {**SMALL, "traffic": "servegen-m-large-week", "traffic-scale": "0.1", "interval": "600", "policy": "reactive"}),
    ("8B, a week of ServeGen m-large arrivals x 0.1, 1008 x 10 min, scheduled at 80% of goodput",
     {**SMALL, "traffic": "servegen-m-large-week", "traffic-scale": "0.1", "interval": "600", "utilization": "0.8"}),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    lines = ["# serveplan day-plan: autoscaled against provisioning for the peak", "",
             f"machine: {describe()} (shared with other work: times are upper bounds)", "",
             "Each row is the whole command, in process (`day.run`): the search for the replica, the schedule, the "
             "day simulated end to end for both fleets (default budget 20,000 simulated requests each, "
             "`--sim-requests`), cost and energy. Attainment: share of requests meeting both SLO targets "
             "(P90 TTFT 1 s, TPOT 50 ms, +10% tolerance) in the simulated day.", "",
             "| case | replica | G req/s | GPU-h auto | GPU-h peak | $ auto | $ peak | kWh auto | kWh peak | "
             "attainment auto | attainment peak | simulated | wall s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    notes: list[str] = []
    for name, fields in CASES:
        opts = day.DayOptions.parse({**fields, "jobs": str(args.jobs)})
        t0 = time.perf_counter()
        res = day.run(opts)
        wall = time.perf_counter() - t0
        d = res.day
        a, p = d.cost, d.peak_cost
        ra, rp = d.run, d.peak_run
        assert ra is not None and rp is not None
        lines.append(f"| {name} | {d.unit.name} ({d.unit.candidate.num_devices} dev) | {d.unit.goodput_rps:.2f} | "
                     f"{a.gpu_hours:,.1f} | {p.gpu_hours:,.1f} | {a.usd or 0:,.0f} | {p.usd or 0:,.0f} | "
                     f"{a.kwh or 0:,.0f} | {p.kwh or 0:,.0f} | {100 * ra.attainment:.1f}% | "
                     f"{100 * rp.attainment:.1f}% | {ra.requests_simulated + rp.requests_simulated:,} "
                     f"({'whole day' if ra.mode == 'whole day' else 'sampled'}) | {wall:.1f} |")
        print(lines[-1], flush=True)
        notes.append(f"* {name}: `{opts.command_line('day-plan')}`; autoscaled day: {ra.mode}; peak: {rp.mode}")
    report([*lines, "", *notes], "day-plan.md")


if __name__ == "__main__":
    main()
