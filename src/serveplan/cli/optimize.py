"""``serveplan optimize``: the plan command (:mod:`serveplan.commands.plan`) rendered as tables."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table

from serveplan.cli.base import console, emit_json, options_command
from serveplan.commands import plan
from serveplan.report.ranking import PARETO_NOTE, tolerance_note
from serveplan.report.tables import fit_columns, plan_header

if TYPE_CHECKING:
    from serveplan.optimize.search import SearchResult
    from serveplan.validate.bands import GoodputBand

_EXTRA = (
    ("json_out", bool, typer.Option(False, "--json", help="Print JSON.")),
    ("progress", bool, typer.Option(True, "--progress/--no-progress", help="Show a progress bar.")),
)


@options_command("optimize", plan.PlanOptions, extra=_EXTRA)
def optimize_cmd(opts: plan.PlanOptions, *, json_out: bool = False, progress: bool = True) -> None:
    """Rank every collocated (Nm) and disaggregated (PpDd) strategy by goodput per device.

    Default: Llama-3.1-70B on up to 8 x H100 under vLLM, the Azure conversation length mix, SLO P90
    TTFT 1 s / TPOT 50 ms. BestServe's Figure 11: --engine bestserve --model codellama-34b
    --hardware ascend-910b3 --scenario op2 --slo-ttft 1.5 --slo-tpot 0.07."""
    result = plan.run(opts, progress=progress and not json_out)
    if json_out:
        emit_json(result.document())
        return
    for i, (wl, res) in enumerate(zip(result.prepared.workloads, result.results, strict=True)):
        _print_ranking(result, wl.name, res)
        _print_confidence(result.settings_for(i, res.best.name), opts.percentile)
        if result.bands:
            _print_bands(list(result.bands[i]), opts.band, tolerance_note(res))
    if result.launch is not None and opts.deploy is not None:
        typer.echo(result.launch.render())


def _print_confidence(settings: Any, pct: float) -> None:
    from serveplan.validate.answers import band_line, strategy_bands

    labels = {"goodput": "goodput", "TTFT": f"P{pct:g} TTFT", "TPOT": f"P{pct:g} TPOT"}
    console().print(band_line(strategy_bands(settings), labels) + " (every strategy; --json gives each one's range)")


def _print_bands(bands: list[GoodputBand], samples: int, tolerance: str) -> None:
    con = console()
    con.print(f"goodput band of the top {len(bands)} strategies ({tolerance}) over {samples} profiles sampled "
              f"from the profile's uncertainty (P10 / P50 / P90):")
    for i, b in enumerate(bands):
        g, d = b.goodput, b.per_device
        note = " (best)" if i == 0 else (" cannot be told apart from the best" if b.indistinguishable else "")
        con.print(f"  {b.name}: {g.p10:.2f} / {g.p50:.2f} / {g.p90:.2f} req/s, per device {d.p10:.3f} / "
                  f"{d.p50:.3f} / {d.p90:.3f}{note}")


def _print_ranking(result: plan.PlanResult, workload: str, res: SearchResult) -> None:
    con = console()
    opts = result.options
    summ = res.settings_summary
    tol = opts.relaxation
    pct = opts.percentile
    con.print(plan_header(summ, devices=opts.budget_text, workload=workload))
    gp = f"goodput req/s (SLO +{tol:.0%})" if tol else "goodput req/s (strict)"
    # cost and energy: essential when they rank, else dropped first on a narrow terminal
    cost, energy = "$/Mtok out", "J/tok out"
    cols = fit_columns(con.width, [
        ("rank", 4, True), ("strategy", 0, True), ("devices", 7, True), (gp, 12, True), ("per device", 10, True),
        (cost, 8, opts.objective == "cost"), (energy, 8, opts.objective == "energy"),
        (f"P{pct:g} TTFT s", 10, False), (f"P{pct:g} TPOT ms", 10, False), ("binds", 5, False),
        ("bottleneck", 24, False)])
    name_width = max([len(r.name) + 4 for r in res.ranking()] + [len(p.name) + 4 for p in res.pruned[:5]] + [12])
    by = {"cost": "$ per million output tokens", "energy": "joules per output token"}.get(
        res.objective, "goodput per device")
    t = Table(title=f"strategies ranked by {by} ({res.num_evaluated} of "
                    f"{summ.get('num_candidates', '?')} settled)", title_justify="left")
    for col in cols:
        t.add_column(col, justify="left" if col in ("strategy", "binds", "bottleneck") else "right",
                     no_wrap=col == "strategy", min_width=name_width if col == "strategy" else None)
    order = {r.name: i for i, r in enumerate(res.strategies, 1)}
    whole = {r.name for r in (res.best_collocated, res.best_disaggregated) if r is not None}
    for r in res.ranking():
        g = f"{r.goodput_rps:.2f}"
        if r.goodput_ci:
            g += f" [{r.goodput_ci[0]:.2f}, {r.goodput_ci[1]:.2f}]"
        mark = {"composed": " (c)", "confirmed": " (w)", "": " (w)"}.get(r.method, "")
        cells = {"rank": str(order[r.name]), "strategy": r.name + (" *" if r.name in res.pareto else "") + mark,
                 "devices": str(r.candidate.num_devices), gp: g, "per device": f"{r.goodput_per_device:.3f}",
                 f"P{pct:g} TTFT s": f"{r.ttft_p:.3f}", f"P{pct:g} TPOT ms": f"{r.tpot_p * 1e3:.1f}",
                 "binds": r.binding, "bottleneck": r.bottleneck}
        ce = res.cost_energy(r.name)
        cells[cost] = "-" if ce["usd_per_mtok_output"] is None else f"{ce['usd_per_mtok_output']:.3f}"
        cells[energy] = "-" if ce["j_per_output_token"] is None else f"{ce['j_per_output_token']:.3f}"
        t.add_row(*(cells[c] for c in cols), style="bold" if r.name in whole else None)
    bounded = sorted((p for p in res.pruned if p.kind == "bound" and p.bound_rps is not None),
                     key=lambda p: -(p.bound_per_device or 0.0))
    shown_bounds = bounded[: max(0, opts.top - len(res.ranking()) + 2)] or bounded[:3]
    for p in shown_bounds:
        cells = {"rank": "-", "strategy": p.name + " (b)", "devices": str(p.num_devices),
                 gp: f"<= {p.bound_rps:.2f}", "per device": f"<= {p.bound_per_device:.3f}", cost: "", energy: "",
                 f"P{pct:g} TTFT s": "", f"P{pct:g} TPOT ms": "", "binds": "", "bottleneck": "pruned by its bound"}
        t.add_row(*(cells[c] for c in cols), style="dim")
    con.print(t)
    con.print("(w) simulated whole, (c) composed from pool measurements, (b) an analytic bound (pruned: below the "
              f"best composition of its architecture when it was settled); {PARETO_NOTE}.")
    _print_frontier(res)
    _print_verdict(res, tolerance_note(res))
    _print_cost_energy(res)
    _print_notes(res)


def _print_cost_energy(res: SearchResult) -> None:
    """The best strategy's cost and energy, and what they assumed (docs/cost-energy.md)."""
    con = console()
    best = res.best
    ce = res.cost_energy(best.name)
    summ = res.settings_summary
    econ = res.economics.get(best.name)
    # the best's own prices (one per device type of a mixed fleet), else the search's
    prices = ([p.to_dict() for p in econ.prices] or ([econ.price.to_dict()] if econ.price else [])) if econ else []
    prices = prices or ([summ["price"]] if summ.get("price") else [])
    if ce["usd_per_hour"] is not None and prices:
        at = ", ".join(f"${p['usd_per_gpu_hour']:g}/GPU-h" + (f" {p['hardware']}" if len(prices) > 1 else "")
                       + f" ({p['tier'].replace('_', '-')}, {p.get('provider') or p.get('read_from') or 'given'}"
                       + (f", {p['date']}" if p.get("date") else "") + ")" for p in prices)
        con.print(f"cost of {best.name}: ${ce['usd_per_hour']:.2f}/h for the fleet at {at};"
                  f" ${ce['usd_per_mtok_output']:.3f} per million output tokens, "
                  f"${ce['usd_per_mtok_total']:.3f} "
                  f"per million input+output tokens at its goodput; ${ce['usd_per_month']:,.0f}/month at "
                  f"{ce['planned_rps']:.3g} req/s ({summ.get('planned_rate', 'the goodput')}).")
    else:
        con.print(f"cost: no {summ.get('price_tier', 'on_demand').replace('_', '-')} price for "
                  f"{summ.get('hardware')} (give one with --price DEVICE=USD or --prices FILE.yaml).")
    if ce["power_w_per_device"] is not None:
        con.print(f"energy of {best.name} at {ce['planned_rps']:.3g} req/s: {ce['power_w_per_device']:.0f} W per "
                  "device "
                  f"(accelerator and its share of the server), {ce['j_per_output_token']:.3f} J per output token, "
                  f"{ce['j_per_token']:.3f} J per input+output token, {ce['kwh_per_month']:,.0f} kWh/month "
                  "(power model: docs/cost-energy.md).")


def _print_verdict(res: SearchResult, tol: str) -> None:
    con = console()
    best = res.best
    target = res.settings_summary.get("target_rate")
    if res.objective in ("cost", "energy"):
        ce = res.cost_energy(best.name)
        what = (f"${ce['usd_per_mtok_output']:.3f} per million output tokens" if res.objective == "cost"
                else f"{ce['j_per_output_token']:.3f} J per output token")
        reach = f" among the fleets reaching {target:g} req/s" if target is not None else ""
        con.print(f"lowest {res.objective}{reach}: {best.name} at {what} ({best.goodput_per_device:.3f} req/s per "
                  f"device, {best.goodput_rps:.2f} req/s on {best.candidate.num_devices} devices; {tol}).")
    elif target is not None:
        con.print(f"fewest devices reaching {target:g} req/s: {best.candidate.num_devices} ({best.name}, goodput "
                  f"{best.goodput_rps:.2f} req/s, {best.goodput_per_device:.3f} per device; {tol}).")
    else:
        con.print(f"best: {best.name} with {best.goodput_per_device:.3f} req/s per device ({best.goodput_rps:.2f} "
                  f"req/s on {best.candidate.num_devices} devices; {tol}).")
    coll, dis = res.best_collocated, res.best_disaggregated
    if coll and dis:
        lead = "collocated" if coll.goodput_per_device >= dis.goodput_per_device else "disaggregated"
        con.print(f"best collocated {coll.name}: {coll.goodput_per_device:.3f}/device; best disaggregated "
                  f"{dis.name}: {dis.goodput_per_device:.3f}/device (both simulated whole) -> {lead} wins here.")
    elif coll or dis:
        other = "disaggregated" if coll else "collocated"
        asked = res.settings_summary.get("architectures", ["collocated", "disaggregated"])
        why = "not asked for" if other not in asked else "none meets the SLO at any rate"
        con.print(f"no {other} strategy to compare ({why}).")


def _print_notes(res: SearchResult) -> None:
    con = console()
    capped = [r for r in res.strategies if r.reason]
    if capped:
        con.print(f"{len(capped)} strategies capped or noted: "
                  + "; ".join(f"{r.name} ({r.reason})" for r in capped[:2]) + (" ..." if len(capped) > 2 else ""))
    if res.rejected:
        con.print(f"{len(res.rejected)} strategies miss the SLO even at 0.1 req/s: "
                  + "; ".join(f"{r.name} ({r.reason})" for r in res.rejected[:3])
                  + (" ..." if len(res.rejected) > 3 else ""))
    layouts = [p for p in res.pruned if p.kind != "bound"]
    if layouts:
        con.print(f"{len(layouts)} layouts pruned before simulation: "
                  + "; ".join(f"{p.name} ({p.reason})" for p in layouts[:4]) + (" ..." if len(layouts) > 4 else ""))
    bounded = [p for p in res.pruned if p.kind == "bound"]
    summ = res.settings_summary
    if bounded:
        how = "ruled out by one run at the rate they had to beat" if summ.get("method") == "bounded" else \
            "pruned by their analytic bound"
        con.print(f"{len(bounded)} strategies {how} (all in --json and ranking.csv).")
    held = summ.get("nonstationary_rejections")
    if held:
        con.print(f"rates rejected because latency kept growing over the stream (the SLO held only on its lightly "
                  f"loaded start): {held}")
    if summ.get("auto"):
        con.print(f"search method {summ['auto']}")
    if summ.get("method") == "fast":
        confirmed = summ.get("confirmed", [])
        con.print(f"fast search: {summ.get('pool_measurements', 0)} pool measurements composed "
                  f"{sum(1 for r in res.strategies if r.method)} strategies; {len(confirmed)} simulated whole; "
                  f"{res.num_simulations} simulations, {res.elapsed_s:.1f} s (--exhaustive simulates every strategy)")
        for d in summ.get("disagreements", []):
            con.print(f"confirmation disagrees with the composition beyond the tolerance: {d}")
    elif summ.get("method") == "bounded":
        probe = summ.get("fast_attempt_simulations")
        con.print(f"branch and bound: the best {summ.get('keep', 1)} of each architecture and every goodput shown "
                  f"are the exhaustive search's; {res.num_simulations} simulations"
                  + (f" ({probe} of them the fast attempt's)" if probe else "") + f", {res.elapsed_s:.1f} s")
    else:
        con.print(f"{res.num_evaluated} strategies evaluated ({res.num_resumed} resumed from checkpoint), "
                  f"{res.num_simulations} simulations, {res.elapsed_s:.1f} s")


def _print_frontier(res: SearchResult) -> None:
    front = [p for p in res.frontier if p.pareto]
    if not front:
        return
    con = console()
    cols = fit_columns(con.width, [("architecture", 13, False), ("strategy", 0, True), ("devices", 7, False),
                                   ("tok/s/user", 10, True), ("tok/s/device", 12, True), ("goodput req/s", 13, False),
                                   ("$/Mtok out", 10, False), ("J/tok out", 9, False)])
    t = Table(title="frontier: output tokens/s per device vs tokens/s per user (1 / P TPOT), at each goodput",
              title_justify="left")
    for col in cols:
        t.add_column(col, justify="left" if col in ("architecture", "strategy") else "right",
                     no_wrap=col == "strategy")
    for p in front:
        cells: dict[str, Any] = {"architecture": p.architecture, "strategy": p.name, "devices": str(p.num_devices),
                                 "tok/s/user": f"{p.tokens_per_s_per_user:.1f}",
                                 "tok/s/device": f"{p.tokens_per_s_per_device:.1f}",
                                 "goodput req/s": f"{p.goodput_rps:.2f}",
                                 "$/Mtok out": "-" if p.usd_per_mtok_output is None else f"{p.usd_per_mtok_output:.3f}",
                                 "J/tok out": "-" if p.j_per_output_token is None else f"{p.j_per_output_token:.3f}"}
        t.add_row(*(cells[c] for c in cols))
    con.print(t)
