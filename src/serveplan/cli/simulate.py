"""``serveplan simulate``: a request stream through a serving strategy; latencies and throughput."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from serveplan.cli import app, console, emit_json, handle_errors
from serveplan.errors import SpecError
from serveplan.estimator.api import resolve_specs
from serveplan.sim import SLO, Fleet, SimulationConfig, SimulationResult, simulate
from serveplan.sim.workload import SCENARIOS, build_workload

if TYPE_CHECKING:
    from serveplan.calibrate.bands import Band


def _rates(text: str) -> list[float]:
    try:
        out = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise SpecError(f"rate-sweep={text!r} must be comma-separated rates, e.g. 0.5,1,2") from None
    if not out or any(not r > 0 for r in out):
        raise SpecError(f"rate-sweep={text!r}: every rate must be a positive number of requests per second")
    return out


@app.command("simulate")
@handle_errors
def simulate_cmd(
    model: str = typer.Option("codellama-34b", "--model", "-m", help="Catalog id or path to a HF config.json."),
    hardware: str = typer.Option("ascend-910b3", "--hardware", "-H", help="Catalog id or hardware YAML path."),
    profile: str | None = typer.Option(None, "--profile", "-p", help="Efficiency profile id or YAML path."),
    strategy: str = typer.Option("1p1d", "--strategy", "-s", help="Nm (N collocated) or PpDd (P prefill, D decode)."),
    tp: int = typer.Option(4, "--tp", help="Tensor-parallel size of every instance."),
    prefill_tp: int | None = typer.Option(None, "--prefill-tp", help="TP of prefill instances (disaggregated)."),
    decode_tp: int | None = typer.Option(None, "--decode-tp", help="TP of decode instances (disaggregated)."),
    pp: int = typer.Option(1, "--pp", help="Pipeline stages per instance."),
    dp: int = typer.Option(1, "--dp", help="Data-parallel attention ranks per instance."),
    ep: int = typer.Option(1, "--ep", help="Expert-parallel size (MoE)."),
    dtype: str | None = typer.Option(None, "--dtype", help="Weight dtype (default: the model's)."),
    max_batch: int = typer.Option(16, "--max-batch", help="Sequences per step (decode and collocated instances)."),
    prefill_max_batch: int | None = typer.Option(4, "--prefill-max-batch",
                                                 help="Prompts per prefill step (0: = max batch)."),
    scheduler: str = typer.Option("prefill-first", "--scheduler", help=(
        "Collocated scheduler: prefill-first (alias vllm) or chunked-prefill (alias sarathi).")),
    chunk_size: int = typer.Option(512, "--chunk-size", help="Prefill chunk (chunked-prefill)."),
    token_budget: int | None = typer.Option(None, "--token-budget",
                                            help="New tokens per step (chunked-prefill default: chunk size)."),
    router: str = typer.Option("round_robin", "--router", help="round_robin or least_outstanding."),
    fidelity: str = typer.Option("iteration", "--fidelity",
                                 help="iteration (every step) or bestserve (Algorithms 2-7)."),
    scenario: str | None = typer.Option(None, "--scenario", help="BestServe scenario: " + ", ".join(
        f"{k} ({a}/{b})" for k, (a, b) in SCENARIOS.items()) + "; default op2."),
    input_len: int | None = typer.Option(None, "--input-len", help="Fixed input length."),
    output_len: int | None = typer.Option(None, "--output-len", help="Fixed output length."),
    trace: str | None = typer.Option(None, "--trace", help="CSV/JSONL trace: arrival time, input and output lengths."),
    length_dist: str | None = typer.Option(None, "--length-dist", help=(
        "'INPUT;OUTPUT' distributions, e.g. 'normal:2048,512;uniform:16,128' "
        "(fixed, uniform, normal, lognormal, empirical).")),
    rate: float = typer.Option(3.5, "--rate", help="Arrival rate (requests/s)."),
    arrival: str = typer.Option("poisson", "--arrival", help="poisson or gamma."),
    cv: float = typer.Option(1.0, "--cv", help="Coefficient of variation of gamma inter-arrival gaps."),
    num_requests: int = typer.Option(10000, "--num-requests", "-n", help="Requests to simulate."),
    seed: int = typer.Option(0, "--seed", help="Seed of arrivals (and sampled lengths)."),
    slo_ttft: float = typer.Option(1.5, "--slo-ttft", help="TTFT target (s)."),
    slo_tpot: float = typer.Option(0.07, "--slo-tpot", help="TPOT target (s)."),
    percentile: float = typer.Option(90.0, "--percentile", help="SLO percentile."),
    early_stop: bool = typer.Option(False, "--early-stop", help="Stop once the SLO is certainly missed."),
    rate_sweep: str | None = typer.Option(None, "--rate-sweep",
                                          help="Comma-separated rates for the P90-vs-rate table/plot."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
    out: Path | None = typer.Option(None, "--out",
                                    help="Directory for requests.csv, histograms and the rate-sweep plot."),
    band: int = typer.Option(0, "--band", help=(
        "Simulate again with N profiles sampled from a calibrated profile's uncertainty (seeded by --seed); "
        "report P10/P50/P90 of P90 TTFT, P90 TPOT and throughput.")),
) -> None:
    """Simulate a request stream through a fleet (default: BestServe Table 4, 1p1d, CodeLlama-34B
    on Ascend 910B3, TP 4, prefill batch 4, decode batch 16, op2, 3.5 req/s, 10000 requests)."""
    m, hw, pr = resolve_specs(model, hardware, profile)
    wl = build_workload(scenario=scenario, input_len=input_len, output_len=output_len, trace=trace,
                        length_dist=length_dist, num_requests=num_requests, arrival=arrival, cv=cv, seed=seed)
    fleet = Fleet.build(strategy, tp=tp, prefill_tp=prefill_tp, decode_tp=decode_tp, pp=pp, dp=dp, ep=ep,
                        max_batch=max_batch, prefill_max_batch=prefill_max_batch, scheduler=scheduler,
                        chunk_size=chunk_size, token_budget=token_budget)
    cfg = SimulationConfig(
        model=m, hardware=hw, profile=pr, fleet=fleet, router=router, fidelity=fidelity, rate=rate, workload=wl,
        slo=SLO(ttft_s=slo_ttft, tpot_s=slo_tpot, percentile=percentile), seed=seed, dtype=dtype,
        early_stop=early_stop,
    )
    sweep_rates = _rates(rate_sweep) if rate_sweep else None
    if band < 0:
        raise SpecError(f"band={band} must be a number of sampled profiles >= 0")
    if band:
        from serveplan.calibrate.bands import require_uncertainty

        require_uncertainty(pr)
    res = simulate(cfg)
    bands = None
    if band:
        from serveplan.calibrate.bands import simulation_band

        bands = simulation_band(cfg, res, band, seed=seed)
    sweep: list[SimulationResult] = []
    if sweep_rates or out is not None:
        if sweep_rates is None and wl.arrival != "trace":
            sweep_rates = [round(rate * f, 6) for f in (0.25, 0.5, 0.75, 0.9, 1.0, 1.1, 1.25)]
        for r in sweep_rates or []:
            sweep.append(res if r == rate else simulate(dataclasses.replace(cfg, rate=r)))
    if out is not None:
        _write_out(out, res, sweep)
    if json_out:
        d = res.to_dict()
        if sweep:
            from serveplan.report.tables import sweep_records

            d["rate_sweep"] = sweep_records(sweep)
        if bands is not None:
            d["band"] = {k: b.to_dict() for k, b in bands.items()}
        emit_json(d)
        return
    _print(res, sweep, out)
    if bands is not None:
        _print_band(bands)


def _print_band(bands: dict[str, Band]) -> None:
    con = console()
    n = next(iter(bands.values())).samples
    con.print(f"band over {n} profiles sampled from the profile's uncertainty (P10 / P50 / P90):")
    for key, label, scale, unit in (("ttft_p90_s", "P90 TTFT", 1e3, "ms"), ("tpot_p90_s", "P90 TPOT", 1e3, "ms"),
                                    ("throughput_rps", "throughput", 1.0, "req/s")):
        b = bands[key]

        def f(v: float, scale: float = scale) -> str:
            return f"{v * scale:,.1f}" if scale != 1.0 else f"{v:.3f}"

        con.print(f"  {label}: {f(b.p10)} / {f(b.p50)} / {f(b.p90)} {unit} (nominal {f(b.nominal)})")


def _print(res: SimulationResult, sweep: list[SimulationResult], out: Path | None) -> None:
    from serveplan.report.tables import latency_rows, summary_lines

    con = console()
    cfg = res.config
    fleet = cfg.fleet
    layout = ", ".join(f"{r.value} {fleet.instance(r).parallel.label()}" for r in fleet.roles) if \
        fleet.is_disaggregated else fleet.first.parallel.label()
    sched = "/".join(fleet.instance(r).batching.scheduler for r in fleet.roles)
    title = (f"{cfg.model.name} on {cfg.hardware.name}, {fleet.strategy} ({layout}, max batch {fleet.max_batch}, "
             f"prefill batch {fleet.max_prompts}, {sched}, {cfg.fidelity.value}), {cfg.workload.describe()}, "
             f"rate {cfg.rate} req/s")
    t = Table(title=title)
    for col in ("latency (ms)", "mean", "P50", "P90", "P99", "SLO"):
        t.add_column(col, justify="left" if col.startswith("latency") else "right")
    for row in latency_rows(res):
        t.add_row(*row)
    con.print(t)
    for line in summary_lines(res):
        con.print(line)
    if sweep:
        s = Table(title="rate sweep")
        for col in ("rate (req/s)", "P90 TTFT (ms)", "P90 TPOT (ms)", "throughput (req/s)", "SLO met", "overloaded"):
            s.add_column(col, justify="right")
        for r in sorted(sweep, key=lambda r: r.config.rate or 0):
            s.add_row(f"{r.config.rate:g}", f"{r.ttft_s.p90 * 1e3:,.1f}", f"{r.tpot_s.p90 * 1e3:,.1f}",
                      f"{r.throughput_rps:.3f}", f"{r.slo_attainment:.1%}", "yes" if r.overloaded else "no")
        con.print(s)
    if out is not None:
        con.print(f"wrote {out}/requests.csv, summary.json and plots")


def _write_out(out: Path, res: SimulationResult, sweep: list[SimulationResult]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    res.requests.write_csv(out / "requests.csv")
    summary = res.to_dict()
    from serveplan.report.tables import sweep_records

    if sweep:
        summary["rate_sweep"] = sweep_records(sweep)
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=float))
    try:
        from serveplan.report.plots import latency_histograms, rate_sweep_plot

        latency_histograms(res, out / "latency_histograms.png")
        if sweep:
            rate_sweep_plot(sweep, out / "p90_vs_rate.png")
    except ImportError as exc:
        typer.echo(str(exc), err=True)
