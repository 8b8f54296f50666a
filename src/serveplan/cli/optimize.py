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
from serveplan.optimize.space import SearchSpace, search_defaults, spec_choices
from serveplan.report.deploy import Deployment, deploy_plan
from serveplan.report.documents import optimize_document
from serveplan.report.ranking import (
    PARETO_NOTE,
    plot_goodput_bars,
    plot_pareto,
    plot_throughput_frontier,
    tolerance_note,
    write_csv,
    write_frontier_csv,
)
from serveplan.sim import SLO, Fidelity, Workload
from serveplan.sim.engine import check_context
from serveplan.sim.workload import build_workloads
from serveplan.units import DType

if TYPE_CHECKING:
    from serveplan.validate.bands import GoodputBand


def parse_spec_tokens(text: str | None) -> list[int] | None:
    """``--spec-tokens 0,1,2,3`` as draft lengths (non-negative integers)."""
    if text is None:
        return None
    try:
        out = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise SpecError(f"spec-tokens={text!r} must be comma-separated integers >= 0, e.g. 0,1,2,3") from None
    if not out or any(v < 0 for v in out):
        raise SpecError(f"spec-tokens={text!r}: every draft length K must be an integer >= 0, e.g. 0,1,2,3")
    return out


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
    relaxation: float = typer.Option(0.1, "--slo-tolerance", "--relaxation", help=(
        "Share by which a P-percentile may exceed its target and still meet the SLO (BestServe Algorithm 9 tau, "
        "default 0.1 = 10%); 0 = the strict answer. Shown beside every goodput.")),
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
        "uncertainty (seeded by --seed) and say which cannot be told apart from the best (implies --exhaustive).")),
    band_top: int = typer.Option(5, "--band-top", help="Strategies given a band with --band (best first)."),
    deploy: Path | None = typer.Option(None, "--deploy", help="Print the best plan's vLLM/SGLang launch "
                                       "commands (Dynamo YAML if disaggregated) and write them to this directory."),
    spec_method: str | None = typer.Option(None, "--spec-method", help=(
        "Speculative decoding of the decoding instances: draft, eagle, mtp, ngram or none.")),
    spec_tokens: str | None = typer.Option(None, "--spec-tokens", help=(
        "Draft lengths K to search, comma-separated (0 = plain decoding), e.g. 0,1,2,3; default: the method's K.")),
    spec_acceptance: str | None = typer.Option(None, "--spec-acceptance", help=(
        "Acceptance rate per draft position in [0, 1]: one rate or a comma list (default: the method's).")),
    spec_draft_model: str | None = typer.Option(None, "--spec-draft-model", help=(
        "Draft model (catalog id) for --spec-method draft.")),
    search_knobs: bool = typer.Option(False, "--search-knobs", help=(
        "Search the engine's knobs around its defaults: max batch (max_num_seqs) at 1, 1/4 and 1/16 of the "
        "default, token budget (max_num_batched_tokens) at 1x and 2x, chunked prefill on and off (lists given "
        "explicitly win).")),
    devices_per_node: int | None = typer.Option(None, "--devices-per-node", help=(
        "Devices per node (NVLink domain) of the hardware; instances and KV transfers larger than a node use the "
        "inter-node link.")),
    exhaustive: bool = typer.Option(False, "--exhaustive", help=(
        "Simulate every strategy's goodput (slow; the default composes pool measurements, prunes by analytic "
        "bounds and simulates only the best fleets whole, and runs the branch and bound of --keep 1 instead "
        "where a fleet simulated whole disagrees with its composition).")),
    confirm: int = typer.Option(3, "--confirm", help="Best composed fleets simulated whole to confirm (fast search)."),
    keep: int = typer.Option(0, "--keep", help=(
        "Branch and bound: simulate whole every fleet that can still rank among the best KEEP per device, best "
        "analytic bound first; each other one is ruled out by one run missing the SLO at the rate it must beat. "
        "The best KEEP and every goodput shown are the exhaustive search's. 0: the default (the fast search where "
        "its whole-fleet confirmations agree with its compositions, else the branch and bound with KEEP 1).")),
    frontier: bool = typer.Option(False, "--frontier", help=(
        "Fast search: keep every strategy that may lie on the tokens/s-per-device vs tokens/s-per-user frontier "
        "(prunes less, so slower; default keeps those that may beat the best per device).")),
    target_rate: float | None = typer.Option(None, "--target-rate", help=(
        "Requests/s to reach: answer with the fewest devices whose goodput reaches it.")),
    allow_long_context: bool = typer.Option(
        False, "--allow-long-context", help="Plan for requests longer than the model's max_position_embeddings."),
) -> None:
    """Rank every collocated (Nm) and disaggregated (PpDd) strategy by goodput per device.

    Default: BestServe's testbed (CodeLlama-34B on 8 Ascend 910B3, TP 1-8, op2, SLO 1.5 s / 70 ms)."""
    m, hw, pr = resolve_specs(model, hardware, profile)
    if devices_per_node is not None:
        if devices_per_node < 1:
            raise SpecError(f"devices-per-node={devices_per_node} must be a positive integer")
        hw = hw.with_(devices_per_node=devices_per_node, scale_up_domain=0)
    max_batch, prefill_max_batch, schedulers, chunk_sizes, token_budget = search_defaults(
        engine, hw, max_batch=max_batch, prefill_max_batch=prefill_max_batch, schedulers=schedulers,
        chunk_sizes=chunk_sizes, knobs=search_knobs)
    space = SearchSpace(
        devices=devices, tp_sizes=tuple(parse_int_list(tp, "tp")), pp_sizes=tuple(parse_int_list(pp, "pp")),
        dp_sizes=tuple(parse_int_list(dp, "dp")), ep_sizes=tuple(parse_int_list(ep, "ep")),
        max_batches=tuple(parse_int_list(max_batch, "max-batch")),
        prefill_max_batch=prefill_max_batch or None,
        schedulers=tuple(s.strip() for s in schedulers.split(",") if s.strip()),
        chunk_sizes=tuple(parse_int_list(chunk_sizes, "chunk-sizes")), token_budget=token_budget,
        collocated=not no_collocated, disaggregated=not no_disaggregated, mixed_tp=not same_tp,
        specs=spec_choices(spec_method, parse_spec_tokens(spec_tokens), acceptance=spec_acceptance,
                           draft_model=spec_draft_model),
    )
    check_search(space, num_requests=num_requests, seeds=seeds, seed=seed, jobs=jobs, relaxation=relaxation,
                 tolerance=tolerance, band=band, band_top=band_top)
    if keep < 0:
        raise SpecError(f"keep={keep} must be >= 0 (0: the fast search)")
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
                          progress=progress and not json_out,
                          # bands compare the top strategies, which pruning by bound would drop
                          method="exhaustive" if exhaustive or band else "bounded" if keep > 0 else "auto",
                          confirm=confirm, target_rate=target_rate, frontier=frontier, keep=max(1, keep))
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
            write_frontier_csv(res, out / f"frontier{tag}.csv")
            plot_throughput_frontier(res, out / f"frontier{tag}.png",
                                     f"{m.name} on up to {devices} x {hw.name}, {wl.name}: frontier at goodput")
            (out / f"result{tag}.json").write_text(json.dumps(res.to_dict(), indent=2, default=str))
    if json_out:
        emit_json(optimize_document(results, [wl.name for wl in workloads], bands,
                                    _deploy(results[0], settings[0], deploy, echo=False)))
        return
    for i, (wl, res) in enumerate(zip(workloads, results, strict=True)):
        _print_ranking(m.name, hw.name, pr.name, devices, wl, percentile, slo_ttft, slo_tpot, res, relaxation)
        if bands:
            _print_bands(bands[i], band, tolerance_note(res))
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


def _print_bands(bands: list[GoodputBand], samples: int, tolerance: str) -> None:
    con = console()
    con.print(f"goodput band of the top {len(bands)} strategies ({tolerance}) over {samples} profiles sampled "
              f"from the profile's uncertainty (P10 / P50 / P90):")
    for i, b in enumerate(bands):
        g, d = b.goodput, b.per_device
        note = " (best)" if i == 0 else (" cannot be told apart from the best" if b.indistinguishable else "")
        con.print(f"  {b.name}: {g.p10:.2f} / {g.p50:.2f} / {g.p90:.2f} req/s, per device {d.p10:.3f} / "
                  f"{d.p50:.3f} / {d.p90:.3f}{note}")


def _print_ranking(model: str, hardware: str, profile: str, devices: int, wl: Workload, percentile: float,
                   slo_ttft: float, slo_tpot: float, res: SearchResult, tolerance: float = 0.1) -> None:
    con = console()
    lim = 1.0 + tolerance
    tol = (f"tolerance {tolerance:.0%}: met when P{percentile:g} TTFT <= {lim * slo_ttft:.4g} s and TPOT <= "
           f"{lim * slo_tpot * 1e3:.4g} ms" if tolerance else "tolerance 0 (strict)")
    t = Table(title=(f"{model} on up to {devices} x {hardware} ({profile}), {wl.name}, SLO P{percentile:g} "
                     f"TTFT {slo_ttft:g} s / TPOT {slo_tpot * 1e3:g} ms, {tol}, {wl.num_requests} requests per "
                     "simulation"))
    gp = f"goodput (req/s, SLO +{tolerance:.0%})" if tolerance else "goodput (req/s, strict SLO)"
    for col in ("rank", "strategy", "devices", gp, "per device", f"P{percentile:g} TTFT (s)",
                f"P{percentile:g} TPOT (ms)", "binds", "bottleneck"):
        t.add_column(col, justify="left" if col in ("strategy", "binds", "bottleneck") else "right")
    for i, r in enumerate(res.strategies, 1):
        g = f"{r.goodput_rps:.2f}"
        if r.goodput_ci:
            g += f" [{r.goodput_ci[0]:.2f}, {r.goodput_ci[1]:.2f}]"
        mark = {"composed": " (c)", "confirmed": " (w)"}.get(r.method, "")
        t.add_row(str(i), r.name + (" *" if r.name in res.pareto else "") + mark, str(r.candidate.num_devices), g,
                  f"{r.goodput_per_device:.3f}", f"{r.ttft_p:.3f}", f"{r.tpot_p * 1e3:.1f}", r.binding, r.bottleneck)
    con.print(t)
    _print_frontier(res)
    best = res.best
    coll = next((r for r in res.strategies if not r.candidate.is_disaggregated), None)
    dis = next((r for r in res.strategies if r.candidate.is_disaggregated), None)
    legend = " (w) = simulated whole, (c) = composed from pool measurements." if best.method else ""
    target = res.settings_summary.get("target_rate")
    if target is not None:
        con.print(f"fewest devices reaching {target:g} req/s: {best.candidate.num_devices} ({best.name}, goodput "
                  f"{best.goodput_rps:.2f} req/s, {best.goodput_per_device:.3f} per device; {tolerance_note(res)})."
                  f"{legend}")
    else:
        con.print(f"best: {best.name} with {best.goodput_per_device:.3f} req/s per device ({best.goodput_rps:.2f} "
                  f"req/s on {best.candidate.num_devices} devices; {tolerance_note(res)}).{legend}")
    con.print(PARETO_NOTE + ".")
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
    layouts = [p for p in res.pruned if p.kind != "bound"]
    bounded = [p for p in res.pruned if p.kind == "bound"]
    if layouts:
        con.print(f"{len(layouts)} layouts pruned before simulation: "
                  + "; ".join(f"{p.name} ({p.reason})" for p in layouts[:6])
                  + (" ..." if len(layouts) > 6 else ""))
    if bounded and res.settings_summary.get("method") == "bounded":
        con.print(f"{len(bounded)} strategies ruled out by one run at the rate they had to beat, e.g. "
                  + "; ".join(f"{p.name} ({p.reason})" for p in bounded[:2]))
    elif bounded:
        con.print(f"{len(bounded)} strategies pruned by their analytic bound, e.g. "
                  + "; ".join(f"{p.name} ({p.reason})" for p in bounded[:2]))
    summ = res.settings_summary
    if summ.get("auto"):
        con.print(f"search method {summ['auto']}")
    if summ.get("method") == "bounded":
        probe = summ.get("fast_attempt_simulations")
        con.print(f"branch and bound: the best {summ.get('keep', 1)} and every goodput shown are the exhaustive "
                  f"search's; {res.num_simulations} simulations"
                  + (f" ({probe} of them the fast attempt's)" if probe else "") + f", {res.elapsed_s:.1f} s "
                  f"(--exhaustive ranks every strategy)")
    if summ.get("method") == "fast":
        confirmed = summ.get("confirmed", [])
        con.print(f"fast search: {summ.get('pool_measurements', 0)} pool measurements composed "
                  f"{sum(1 for r in res.strategies if r.method)} strategies; {len(confirmed)} confirmed by whole-fleet "
                  f"simulation ({', '.join(confirmed)}); {res.num_simulations} simulations, {res.elapsed_s:.1f} s "
                  f"(--exhaustive simulates every strategy)")
        for d in summ.get("disagreements", []):
            con.print(f"confirmation disagrees with the composition beyond the tolerance: {d}")
    else:
        con.print(f"{res.num_evaluated} strategies evaluated ({res.num_resumed} resumed from checkpoint), "
                  f"{res.num_simulations} simulations, {res.elapsed_s:.1f} s")


def _print_frontier(res: SearchResult) -> None:
    front = [p for p in res.frontier if p.pareto]
    if not front:
        return
    t = Table(title="frontier: output tokens/s per device vs tokens/s per user (1 / P TPOT), at each goodput")
    for col in ("architecture", "strategy", "devices", "tokens/s/user", "tokens/s/device", "goodput (req/s)"):
        t.add_column(col, justify="left" if col in ("architecture", "strategy") else "right")
    for p in front:
        t.add_row(p.architecture, p.name, str(p.num_devices), f"{p.tokens_per_s_per_user:.1f}",
                  f"{p.tokens_per_s_per_device:.1f}", f"{p.goodput_rps:.2f}")
    console().print(t)
