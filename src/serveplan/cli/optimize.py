"""``serveplan optimize``: goodput of every strategy within a device budget, ranked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from serveplan.cli import app, console, emit_json, handle_errors, parse_int_list
from serveplan.cli.checks import check_search
from serveplan.errors import SpecError
from serveplan.estimator.api import resolve_specs
from serveplan.optimize.goodput import GoodputSettings
from serveplan.optimize.search import SearchResult, search_many
from serveplan.optimize.space import SearchSpace, search_defaults
from serveplan.report.deploy import Deployment, deploy_plan
from serveplan.report.documents import optimize_document
from serveplan.report.ranking import plot_goodput_bars, plot_pareto, write_csv
from serveplan.sim import SLO, Fidelity, Workload
from serveplan.sim.engine import check_context
from serveplan.sim.workload import build_workloads
from serveplan.units import DType

if TYPE_CHECKING:
    from serveplan.validate.bands import GoodputBand


@app.command("optimize")
@handle_errors
def optimize_cmd(
    model: str = typer.Option("codellama-34b", "--model", "-m", help="Catalog id or path to a HF config.json."),
    hardware: str = typer.Option("ascend-910b3", "--hardware", "-H", help="Catalog id or hardware YAML path."),
    profile: str | None = typer.Option(None, "--profile", "-p", help="Efficiency profile id or YAML path."),
    devices: int = typer.Option(8, "--devices", help="Device budget (strategies may use fewer)."),
    tp: str = typer.Option("1,2,4,8", "--tp", help="Admissible TP sizes, comma-separated."),
    pp: str = typer.Option("1", "--pp", help="Admissible pipeline sizes."),
    dp: str = typer.Option("1", "--dp", help="Admissible data-parallel attention sizes."),
    ep: str = typer.Option("1", "--ep", help="Admissible expert-parallel sizes (MoE)."),
    engine: str | None = typer.Option(None, "--engine", "-e", help=(
        "Serving engine (vllm, sglang, trtllm, bestserve): its memory rule, KV format and block size apply, and "
        "its scheduler and limits replace the defaults of --schedulers, --max-batch, --prefill-max-batch and "
        "--chunk-sizes (default: BestServe's testbed).")),
    kv_dtype: str | None = typer.Option(None, "--kv-dtype", help=(
        "KV-cache format (default: the engine's, else the weights' 16-bit format).")),
    max_batch: str | None = typer.Option(None, "--max-batch", help=(
        "Maximum batch sizes (decode slots) per instance (default 16, or the engine's).")),
    prefill_max_batch: int | None = typer.Option(None, "--prefill-max-batch", help=(
        "Prompts per prefill step (0 = no limit; default 4, or the engine's).")),
    schedulers: str | None = typer.Option(None, "--schedulers", help=(
        "Collocated schedulers: prefill-first (alias vllm), chunked-prefill (alias sarathi), prefill-priority, "
        "inflight-no-evict (default prefill-first, or the engine's).")),
    chunk_sizes: str | None = typer.Option(None, "--chunk-sizes", help=(
        "Chunk sizes (token budgets) of chunked schedulers (default 512, or the engine's budget).")),
    no_collocated: bool = typer.Option(False, "--no-collocated", help="Only disaggregated strategies."),
    no_disaggregated: bool = typer.Option(False, "--no-disaggregated", help="Only collocated strategies."),
    same_tp: bool = typer.Option(False, "--same-tp", help="Prefill and decode instances share one TP size."),
    scenario: str | None = typer.Option(None, "--scenario", help=(
        "op1 (8192/512), op2 (2048/64), op3 (1024/64), op4 (256/2048); several comma-separated (default op2).")),
    input_len: int | None = typer.Option(None, "--input-len", help="Fixed input length (instead of --scenario)."),
    output_len: int | None = typer.Option(None, "--output-len", help="Fixed output length."),
    num_requests: int = typer.Option(2000, "--num-requests", help="Requests per simulation."),
    slo_ttft: float = typer.Option(1.5, "--slo-ttft", help="TTFT target (s)."),
    slo_tpot: float = typer.Option(0.07, "--slo-tpot", help="TPOT target (s)."),
    percentile: float = typer.Option(90.0, "--percentile", help="SLO percentile."),
    relaxation: float = typer.Option(0.1, "--relaxation", help="BestServe Algorithm 9 tau (0 = hard check)."),
    tolerance: float = typer.Option(0.05, "--tolerance",
                                    help="Relative width of the final goodput bracket (Algorithm 8 epsilon)."),
    seeds: int = typer.Option(1, "--seeds",
                              help="Repeat with this many seeds and report a 95 percent confidence interval."),
    seed: int = typer.Option(0, "--seed", help="Base random seed."),
    fidelity: str = typer.Option("iteration", "--fidelity", help="iteration (exact continuous batching) or bestserve."),
    dtype: str | None = typer.Option(None, "--dtype", help="Weight dtype."),
    jobs: int | None = typer.Option(None, "--jobs", "-j", help="Parallel workers (default: all cores)."),
    backend: str = typer.Option("local", "--backend", help="local (processes) or ray."),
    ray_address: str | None = typer.Option(None, "--ray-address", help="host:port of a Ray head (default: local Ray)."),
    out: Path | None = typer.Option(None, "--out",
                                    help="Directory for ranking.csv, plots and the resumable checkpoint."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
    band: int = typer.Option(0, "--band", help=(
        "Recompute the goodput of the top strategies with N profiles sampled from a calibrated profile's "
        "uncertainty (seeded by --seed) and say which cannot be told apart from the best.")),
    band_top: int = typer.Option(5, "--band-top", help="Strategies given a band with --band (best first)."),
    deploy: Path | None = typer.Option(None, "--deploy", help="Print the best plan's vLLM/SGLang launch "
                                       "commands (Dynamo YAML if disaggregated) and write them to this directory."),
    allow_long_context: bool = typer.Option(
        False, "--allow-long-context", help="Plan for requests longer than the model's max_position_embeddings."),
) -> None:
    """Rank every collocated (Nm) and disaggregated (PpDd) strategy by goodput per device.

    Default: BestServe's testbed (CodeLlama-34B on 8 Ascend 910B3, TP 1-8, op2, SLO 1.5 s / 70 ms)."""
    m, hw, pr = resolve_specs(model, hardware, profile)
    max_batch, prefill_max_batch, schedulers, chunk_sizes = search_defaults(
        engine, hw, max_batch=max_batch, prefill_max_batch=prefill_max_batch, schedulers=schedulers,
        chunk_sizes=chunk_sizes)
    space = SearchSpace(
        devices=devices, tp_sizes=tuple(parse_int_list(tp, "tp")), pp_sizes=tuple(parse_int_list(pp, "pp")),
        dp_sizes=tuple(parse_int_list(dp, "dp")), ep_sizes=tuple(parse_int_list(ep, "ep")),
        max_batches=tuple(parse_int_list(max_batch, "max-batch")),
        prefill_max_batch=prefill_max_batch or None,
        schedulers=tuple(s.strip() for s in schedulers.split(",") if s.strip()),
        chunk_sizes=tuple(parse_int_list(chunk_sizes, "chunk-sizes")),
        collocated=not no_collocated, disaggregated=not no_disaggregated, mixed_tp=not same_tp,
    )
    check_search(space, num_requests=num_requests, seeds=seeds, seed=seed, jobs=jobs, relaxation=relaxation,
                 tolerance=tolerance, band=band, band_top=band_top)
    if slo_ttft <= 0 or slo_tpot <= 0:
        raise SpecError(f"SLO targets must be positive seconds; got slo-ttft={slo_ttft}, slo-tpot={slo_tpot}")
    if not 0 < percentile < 100:
        raise SpecError(f"percentile={percentile} must be in (0, 100)")
    if band < 0 or band_top < 1:
        raise SpecError(f"band={band} must be >= 0 and band-top={band_top} >= 1")
    if band:
        from serveplan.calibrate.bands import require_uncertainty

        require_uncertainty(pr)
    workloads = build_workloads(scenarios=scenario, input_len=input_len, output_len=output_len,
                                num_requests=num_requests)
    for wl in workloads:
        check_context(m, wl, allow_long_context)
    slo = SLO(ttft_s=slo_ttft, tpot_s=slo_tpot, percentile=percentile)
    settings = [GoodputSettings(model=m, hardware=hw, profile=pr, workload=wl, slo=slo,
                                dtype=DType.parse(dtype) if dtype else None, relaxation=relaxation, seeds=seeds,
                                seed=seed, fidelity=Fidelity.parse(fidelity), rel_tol=tolerance, engine=engine,
                                kv_dtype=DType.parse(kv_dtype) if kv_dtype else None) for wl in workloads]
    results = search_many(space, settings, jobs=jobs, backend=backend, ray_address=ray_address, out_dir=out,
                          progress=progress and not json_out)
    multi = len(results) > 1
    bands: list[list[GoodputBand]] = []
    if band:
        from serveplan.validate.bands import goodput_bands

        bands = [goodput_bands(list(res.strategies[:band_top]), st, band, seed=seed)
                 for res, st in zip(results, settings, strict=True)]
    if out is not None:
        for wl, res in zip(workloads, results, strict=True):
            tag = f"-{wl.name}" if multi else ""
            write_csv(res, out / f"ranking{tag}.csv")
            plot_goodput_bars(res, out / f"goodput{tag}.png", f"{m.name} on up to {devices} x {hw.name}, {wl.name}")
            plot_pareto(res, out / f"pareto{tag}.png")
            (out / f"result{tag}.json").write_text(json.dumps(res.to_dict(), indent=2, default=str))
    if json_out:
        emit_json(optimize_document(results, [wl.name for wl in workloads], bands,
                                    _deploy(results[0], settings[0], deploy, echo=False)))
        return
    for i, (wl, res) in enumerate(zip(workloads, results, strict=True)):
        _print_ranking(m.name, hw.name, pr.name, devices, wl, percentile, slo_ttft, slo_tpot, res)
        if bands:
            _print_bands(bands[i], band)
    _deploy(results[0], settings[0], deploy, echo=True)


def _deploy(res: SearchResult, settings: GoodputSettings, out: Path | None, *, echo: bool) -> Deployment | None:
    """--deploy: write the best plan's launch files to ``out`` and print them (``echo``)."""
    if out is None:
        return None
    deployment = deploy_plan(res.best.candidate, settings)
    deployment.write(out)
    if echo:
        typer.echo(deployment.render())
    return deployment


def _print_bands(bands: list[GoodputBand], samples: int) -> None:
    con = console()
    con.print(f"goodput band of the top {len(bands)} strategies over {samples} profiles sampled from the "
              f"profile's uncertainty (P10 / P50 / P90):")
    for i, b in enumerate(bands):
        g, d = b.goodput, b.per_device
        note = " (best)" if i == 0 else (" cannot be told apart from the best" if b.indistinguishable else "")
        con.print(f"  {b.name}: {g.p10:.2f} / {g.p50:.2f} / {g.p90:.2f} req/s, per device {d.p10:.3f} / "
                  f"{d.p50:.3f} / {d.p90:.3f}{note}")


def _print_ranking(model: str, hardware: str, profile: str, devices: int, wl: Workload, percentile: float,
                   slo_ttft: float, slo_tpot: float, res: SearchResult) -> None:
    con = console()
    t = Table(title=(f"{model} on up to {devices} x {hardware} ({profile}), {wl.name}, SLO P{percentile:g} "
                     f"TTFT {slo_ttft:g} s / TPOT {slo_tpot * 1e3:g} ms, {wl.num_requests} requests per simulation"))
    for col in ("rank", "strategy", "devices", "goodput (req/s)", "per device", f"P{percentile:g} TTFT (s)",
                f"P{percentile:g} TPOT (ms)", "binds", "bottleneck"):
        t.add_column(col, justify="left" if col in ("strategy", "binds", "bottleneck") else "right")
    for i, r in enumerate(res.strategies, 1):
        g = f"{r.goodput_rps:.2f}"
        if r.goodput_ci:
            g += f" [{r.goodput_ci[0]:.2f}, {r.goodput_ci[1]:.2f}]"
        t.add_row(str(i), r.name + (" *" if r.name in res.pareto else ""), str(r.candidate.num_devices), g,
                  f"{r.goodput_per_device:.3f}", f"{r.ttft_p:.3f}", f"{r.tpot_p * 1e3:.1f}", r.binding, r.bottleneck)
    con.print(t)
    best = res.best
    coll = next((r for r in res.strategies if not r.candidate.is_disaggregated), None)
    dis = next((r for r in res.strategies if r.candidate.is_disaggregated), None)
    con.print(f"best: {best.name} with {best.goodput_per_device:.3f} req/s per device "
              f"({best.goodput_rps:.2f} req/s on {best.candidate.num_devices} devices). * = Pareto-optimal.")
    if coll and dis:
        lead = "collocated" if coll.goodput_per_device >= dis.goodput_per_device else "disaggregated"
        con.print(f"best collocated {coll.name}: {coll.goodput_per_device:.3f}/device; best disaggregated "
                  f"{dis.name}: {dis.goodput_per_device:.3f}/device -> {lead} wins here.")
    capped = [r for r in res.strategies if r.reason]
    if capped:
        con.print(f"{len(capped)} strategies capped at their analytic capacity (the stream is too short to load "
                  f"them; raise --num-requests): " + "; ".join(r.name for r in capped[:6])
                  + (" ..." if len(capped) > 6 else ""))
    if res.rejected:
        con.print(f"{len(res.rejected)} strategies miss the SLO even at 0.1 req/s: "
                  + "; ".join(f"{r.name} ({r.reason})" for r in res.rejected[:3])
                  + (" ..." if len(res.rejected) > 3 else ""))
    if res.pruned:
        con.print(f"{len(res.pruned)} layouts pruned before simulation: "
                  + "; ".join(f"{p.name} ({p.reason})" for p in res.pruned[:6])
                  + (" ..." if len(res.pruned) > 6 else ""))
    con.print(f"{res.num_evaluated} strategies evaluated ({res.num_resumed} resumed from checkpoint), "
              f"{res.num_simulations} simulations, {res.elapsed_s:.1f} s")
