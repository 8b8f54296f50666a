"""``serveplan simulate``: a request stream through a serving strategy; latencies and throughput."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from serveplan.cli import app, console, emit_json, handle_errors
from serveplan.commands.checks import check_simulate
from serveplan.errors import SpecError
from serveplan.estimator.api import resolve_specs
from serveplan.sim import SLO, SimulationConfig, SimulationResult, simulate, simulation_config
from serveplan.sim.workload import SCENARIOS, build_workload
from serveplan.specs.speculative import SpecDecodeConfig

if TYPE_CHECKING:
    from serveplan.calibrate.bands import Band


def load_rate(rate: float | None, offline: bool, levels: list[int] | None) -> float | None:
    """The arrival rate of an open loop (3.5 req/s unless given); None for offline and closed
    loops, which set their own arrivals (giving a rate too is an error)."""
    if offline and rate is not None:
        raise SpecError(f"--offline with --rate {rate:g}: an offline run queues every request at t=0; drop --rate")
    if levels and rate is not None:
        raise SpecError(f"--concurrency with --rate {rate:g}: a closed loop sets its own arrivals; drop --rate")
    if levels and offline:
        raise SpecError("--offline with --concurrency: choose one load")
    if rate is None and not (offline or levels):
        return 3.5
    return rate


def _concurrency(text: str) -> list[int]:
    try:
        out = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise SpecError(f"concurrency={text!r} must be comma-separated positive integers, e.g. 1,4,16,64") from None
    if not out or any(c < 1 for c in out):
        bad = next((c for c in out if c < 1), text)
        raise SpecError(f"concurrency={bad!r} must be a positive integer number of clients (e.g. 1,4,16,64)")
    return out


def _concurrency_sweep(cfg: SimulationConfig, levels: list[int], json_out: bool, out: Path | None) -> None:
    """``--concurrency C1,C2,...``: one closed loop per level; table and plot of latency against
    throughput per device."""
    results = [simulate(dataclasses.replace(cfg, concurrency=c)) for c in levels]
    recs = []
    for r in results:
        cl = r.closed_loop
        assert cl is not None
        recs.append({"concurrency": cl.concurrency, "ttft_mean_s": cl.ttft_s.mean, "ttft_p90_s": cl.ttft_s.p90,
                     "tpot_mean_s": cl.tpot_s.mean, "tpot_p90_s": cl.tpot_s.p90,
                     "tokens_per_s_per_user": cl.tokens_per_s_per_user,
                     "output_tokens_per_s_per_device": cl.output_tokens_per_s_per_device,
                     "throughput_rps": cl.throughput_rps, "littles_law": cl.littles_law,
                     "num_measured": cl.num_measured, "preemptions": r.num_preemptions})
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "concurrency_sweep.json").write_text(json.dumps(
            {"config": cfg.to_dict(), "levels": recs}, indent=2, default=float))
        try:
            from serveplan.report.plots import concurrency_plot

            concurrency_plot(recs, out / "concurrency_sweep.png", title=f"{cfg.model.name} on {cfg.hardware.name}")
        except ImportError as exc:
            typer.echo(str(exc), err=True)
    if json_out:
        emit_json({"config": cfg.to_dict(), "concurrency_sweep": recs})
        return
    con = console()
    t = Table(title=f"closed loop: {_title(cfg, 'concurrency ' + ','.join(map(str, levels)))}")
    for col in ("clients", "TTFT mean (ms)", "TTFT P90 (ms)", "TPOT mean (ms)", "tokens/s/user", "tokens/s/GPU",
                "req/s", "preemptions"):
        t.add_column(col, justify="right")
    for d in recs:
        t.add_row(str(d["concurrency"]), f"{d['ttft_mean_s'] * 1e3:,.1f}", f"{d['ttft_p90_s'] * 1e3:,.1f}",
                  f"{d['tpot_mean_s'] * 1e3:,.2f}", f"{d['tokens_per_s_per_user']:,.1f}",
                  f"{d['output_tokens_per_s_per_device']:,.0f}", f"{d['throughput_rps']:.3f}", str(d["preemptions"]))
    con.print(t)
    con.print("statistics over each run's steady window: requests sent after every client's first one and "
              "finished before the last send (warm-up and cool-down excluded)")
    _print_engine(cfg)
    if out is not None:
        con.print(f"wrote {out}/concurrency_sweep.json and concurrency_sweep.png")


def _title(cfg: SimulationConfig, load: str | None = None) -> str:
    fleet = cfg.fleet
    layout = ", ".join(f"{r.value} {fleet.instance(r).parallel.label()}" for r in fleet.roles) if \
        fleet.is_disaggregated else fleet.first.parallel.label()
    sched = "/".join(fleet.instance(r).batching.scheduler for r in fleet.roles)
    budget = fleet.first.batching.token_budget
    if load is None:
        load = ("offline" if cfg.offline else f"concurrency {cfg.concurrency}" if cfg.concurrency
                else f"rate {cfg.rate} {'sessions' if cfg.workload.session is not None else 'req'}/s")
    wl = cfg.workload.describe()
    if cfg.offline or cfg.concurrency:
        wl = wl.rsplit(",", 1)[0]  # the arrival process does not apply
    eng = f"{cfg.engine.label}, " if cfg.engine is not None else ""
    return (f"{cfg.model.name} on {cfg.hardware.name}, {eng}{fleet.strategy} ({layout}, max batch {fleet.max_batch}, "
            f"prefill batch {fleet.max_prompts}, {sched}{f', budget {budget}' if budget else ''}, "
            f"{cfg.fidelity.value}), {wl}, {load}")


def _print_engine(cfg: SimulationConfig) -> None:
    con = console()
    setup = cfg.engine_setup
    if setup is None:
        return
    kv = cfg.effective_kv_dtype
    par = cfg.fleet.first.parallel
    rule = setup.engine.memory_rule(cfg.hardware, tp=par.tp, pp=par.pp)
    block = f"{setup.block_size} token{'s' if setup.block_size != 1 else ''}"
    con.print(f"engine {setup.engine.label} ({setup.engine.mechanism.value}): "
              + "; ".join(setup.notes) + f"; KV block {block}, KV cache "
              f"{(kv.value if kv is not None else 'weights format')}, memory share {setup.memory_utilization:.3f} of "
              f"the datasheet's {cfg.hardware.memory_bytes / 1e9:.0f} GB ({rule})")


def _print_spec(cfg: SimulationConfig) -> None:
    sd = cfg.fleet.spec
    if sd is None:
        return
    rates = ", ".join(f"{a:.3g}" for a in sd.rates)
    draft = f" with {sd.draft_model}" if sd.draft_model else ""
    console().print(f"speculative decoding: {sd.method.value}{draft}, K={sd.k}, acceptance per position {rates}: "
                    f"{sd.expected_tokens:.3f} expected tokens per verify step of {sd.verify_tokens} tokens per "
                    "sequence (decode-only steps; TPOT = step time / expected tokens)")


def parse_rates(text: str) -> list[float]:
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
    engine: str = typer.Option("vllm", "--engine", "-e", help=(
        "Serving engine whose scheduler and defaults apply: vllm (V1), sglang, trtllm, bestserve (the paper's "
        "testbed), a versioned id (vllm-0.11) or an engine YAML.")),
    strategy: str | None = typer.Option(None, "--strategy", "-s", help=(
        "Nm (N collocated) or PpDd (P prefill, D decode); default 1m (bestserve: 1p1d).")),
    tp: int | None = typer.Option(None, "--tp", help=(
        "Tensor-parallel size of every instance (default: the smallest that fits with a useful KV cache).")),
    prefill_tp: int | None = typer.Option(None, "--prefill-tp", help="TP of prefill instances (disaggregated)."),
    decode_tp: int | None = typer.Option(None, "--decode-tp", help="TP of decode instances (disaggregated)."),
    pp: int = typer.Option(1, "--pp", help="Pipeline stages per instance."),
    dp: int = typer.Option(1, "--dp", help="Data-parallel attention ranks per instance."),
    ep: int = typer.Option(1, "--ep", help="Expert-parallel size (MoE)."),
    dtype: str | None = typer.Option(None, "--dtype", help="Weight dtype (default: the model's)."),
    kv_dtype: str | None = typer.Option(None, "--kv-dtype", help=(
        "KV-cache format (default: the engine's; the weights' 16-bit format otherwise).")),
    max_batch: int | None = typer.Option(None, "--max-batch", help="Sequences per step (default: the engine's)."),
    prefill_max_batch: int | None = typer.Option(None, "--prefill-max-batch", help=(
        "Prompts per step (default: the engine's; 0: = max batch).")),
    scheduler: str | None = typer.Option(None, "--scheduler", help=(
        "Override the engine's mechanism: prefill-first (alias vllm), chunked-prefill (alias sarathi), "
        "prefill-priority, inflight-no-evict.")),
    chunk_size: int | None = typer.Option(None, "--chunk-size", help="Largest prefill chunk (default: the engine's)."),
    token_budget: int | None = typer.Option(None, "--token-budget",
                                            help="New tokens per step (default: the engine's)."),
    router: str = typer.Option("round_robin", "--router", help="round_robin or least_outstanding."),
    fidelity: str = typer.Option("iteration", "--fidelity",
                                 help="iteration (every step) or bestserve (Algorithms 2-7)."),
    scenario: str | None = typer.Option(None, "--scenario", help="BestServe scenario: " + ", ".join(
        f"{k} ({a}/{b})" for k, (a, b) in SCENARIOS.items()) + "; default op2."),
    input_len: int | None = typer.Option(None, "--input-len", help="Fixed input length."),
    output_len: int | None = typer.Option(None, "--output-len", help="Fixed output length."),
    trace: str | None = typer.Option(None, "--trace", help=(
        "CSV/JSONL trace: arrival time, input and output lengths; or a Mooncake JSONL trace (timestamp ms, "
        "input_length, output_length, hash_ids: the prefix cache reuses its blocks).")),
    length_dist: str | None = typer.Option(None, "--length-dist", help=(
        "'INPUT;OUTPUT' distributions, e.g. 'normal:2048,512;uniform:16,128' "
        "(fixed, uniform, normal, lognormal, empirical).")),
    dataset: str | None = typer.Option(None, "--dataset", help=(
        "Real length mix: azure-conv, azure-code, arxiv-sum (Azure LLM inference traces 2023, arXiv "
        "summarization; via Vidur).")),
    rate: float | None = typer.Option(None, "--rate", help=(
        "Arrival rate (requests/s); default 3.5 when neither --offline nor --concurrency.")),
    offline: bool = typer.Option(False, "--offline", help=(
        "Queue every request at t=0 and run to completion (offline throughput).")),
    concurrency: str | None = typer.Option(None, "--concurrency", help=(
        "Closed loop: C clients each sending the next request when the last finishes; C[,C...] for a sweep "
        "(table and plot).")),
    prefix_hit: float = typer.Option(0.0, "--prefix-hit", help=(
        "Share of prompt tokens found in the prefix cache, in [0, 1).")),
    sessions: int | None = typer.Option(None, "--sessions", help=(
        "Multi-turn conversations (each turn resends the conversation so far; prefix cache on); --rate is then "
        "sessions/s, --concurrency C runs them back to back on C clients.")),
    turns: int | None = typer.Option(None, "--turns", help="Turns per conversation (default 4)."),
    think_time: float | None = typer.Option(None, "--think-time", help=(
        "Seconds between an answer and the session's next turn (default 0).")),
    session_dataset: str | None = typer.Option(None, "--session-dataset", help=(
        "Turn lengths: mooncake-conversation (Kimi chat, Mooncake FAST'25 trace; the default).")),
    system_prompt_len: int = typer.Option(0, "--system-prompt-len", help=(
        "Tokens of a system prompt shared by every request (prefix cache on).")),
    kv_tiers: str | None = typer.Option(None, "--kv-tiers", help=(
        "Spill evicted prefix-cache blocks to cpu or cpu,disk of --host (loaded back when cheaper than recompute).")),
    host: str | None = typer.Option(None, "--host", help="Host of the KV tiers (serveplan hosts; per GPU)."),
    kv_cpu_gb: float | None = typer.Option(None, "--kv-cpu-gb", help="CPU tier GB per GPU (default: the host's)."),
    kv_disk_gb: float | None = typer.Option(None, "--kv-disk-gb", help="Disk tier GB per GPU (default: the host's)."),
    kv_load: str | None = typer.Option(None, "--kv-load", help=(
        "serial or layerwise loading of lower-tier hits (default: the engine's; sglang layerwise).")),
    kv_connector: str | None = typer.Option(None, "--kv-connector", help=(
        "lmcache: tiers filled write-through by vLLM's LMCache connector (every prompt stored in 256-token "
        "chunks, synchronous copy after each step); default: filled by eviction at no step cost.")),
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
    progress: bool | None = typer.Option(None, "--progress/--no-progress", help=(
        "Progress bar on stderr for runs longer than a few seconds (default: when stderr is a terminal).")),
    allow_long_context: bool = typer.Option(False, "--allow-long-context", help=(
        "Simulate requests longer than the model's max_position_embeddings (refused otherwise).")),
    band: int = typer.Option(0, "--band", help=(
        "Simulate again with N profiles sampled from a calibrated profile's uncertainty (seeded by --seed); "
        "report P10/P50/P90 of P90 TTFT, P90 TPOT and throughput.")),
    spec_method: str | None = typer.Option(None, "--spec-method", help=(
        "Speculative decoding: draft (a draft model), eagle (EAGLE head), mtp (multi-token prediction layer), "
        "ngram (prompt lookup) or none.")),
    spec_tokens: int | None = typer.Option(None, "--spec-tokens", help=(
        "Draft tokens per step K (default: the method's; 0 = off).")),
    spec_acceptance: str | None = typer.Option(None, "--spec-acceptance", help=(
        "Acceptance rate per draft position in [0, 1]: one rate or a comma list (default: the method's "
        "published rate).")),
    spec_draft_model: str | None = typer.Option(None, "--spec-draft-model", help=(
        "Draft model (catalog id) for --spec-method draft.")),
) -> None:
    """Simulate a request stream through a fleet served by an engine (default: vLLM V1 with its
    defaults for the device, the smallest TP that fits; CodeLlama-34B on Ascend 910B3, op2, 3.5
    req/s, 10000 requests). ``--engine bestserve`` is BestServe's Table 4 testbed (1p1d, TP 4,
    prefill batch 4, decode batch 16)."""
    check_simulate(band=band, seed=seed)
    m, hw, pr = resolve_specs(model, hardware, profile)
    from serveplan.cli.sessions import print_prefix_cache, session_options

    other = next((f for f, v in (("--scenario", scenario), ("--input-len", input_len), ("--trace", trace),
                                 ("--length-dist", length_dist), ("--dataset", dataset)) if v), None)
    wl = None if sessions is not None else build_workload(
        scenario=scenario, input_len=input_len, output_len=output_len, trace=trace, length_dist=length_dist,
        num_requests=num_requests, arrival=arrival, cv=cv, seed=seed, dataset=dataset)
    wl, tiers = session_options(wl, sessions=sessions, turns=turns, think_time=think_time,
                                session_dataset=session_dataset, system_prompt_len=system_prompt_len,
                                kv_tiers=kv_tiers, host=host, kv_cpu_gb=kv_cpu_gb, kv_disk_gb=kv_disk_gb,
                                kv_load=kv_load, seed=seed, arrival=arrival, cv=cv, other_source=other,
                                kv_connector=kv_connector)
    assert wl is not None
    levels = _concurrency(concurrency) if concurrency is not None else None
    rate = load_rate(rate, offline, levels)
    cfg = simulation_config(
        engine=engine, strategy=strategy,
        fleet_options={"tp": tp, "prefill_tp": prefill_tp, "decode_tp": decode_tp, "pp": pp, "dp": dp, "ep": ep,
                       "max_batch": max_batch, "prefill_max_batch": prefill_max_batch, "scheduler": scheduler,
                       "chunk_size": chunk_size, "token_budget": token_budget},
        model=m, hardware=hw, profile=pr, router=router, fidelity=fidelity, rate=rate, workload=wl,
        slo=SLO(ttft_s=slo_ttft, tpot_s=slo_tpot, percentile=percentile), seed=seed, dtype=dtype,
        early_stop=early_stop, kv_dtype=kv_dtype, offline=offline,
        concurrency=levels[0] if levels else None, prefix_hit=prefix_hit, allow_long_context=allow_long_context,
        spec=SpecDecodeConfig.of(spec_method, spec_tokens, spec_acceptance, spec_draft_model),
        **({"kv_tiers": tiers} if tiers is not None else {}),
    )
    if levels and len(levels) > 1:
        _concurrency_sweep(cfg, levels, json_out, out)
        return
    sweep_rates = parse_rates(rate_sweep) if rate_sweep else None
    if band < 0:
        raise SpecError(f"band={band} must be a number of sampled profiles >= 0")
    if band:
        from serveplan.calibrate.bands import require_uncertainty

        require_uncertainty(pr)
    res = _simulate_with_progress(cfg, progress)
    bands = None
    if band:
        from serveplan.validate.bands import simulation_band

        bands = simulation_band(cfg, res, band, seed=seed)
    sweep: list[SimulationResult] = []
    if sweep_rates and (offline or levels):
        raise SpecError("--rate-sweep is for open loops; drop --offline/--concurrency or the sweep")
    if (sweep_rates or out is not None) and rate is not None:
        if sweep_rates is None and wl.arrival != "trace":
            sweep_rates = [round(rate * f, 6) for f in (0.25, 0.5, 0.75, 0.9, 1.0, 1.1, 1.25)]
        for r in sweep_rates or []:
            sweep.append(res if r == rate else simulate(dataclasses.replace(cfg, rate=r)))
    if out is not None:
        _write_out(out, res, sweep)
    if json_out:
        from serveplan.report.documents import simulate_document

        emit_json(simulate_document(res, sweep, bands))
        return
    _print(res, sweep, out)
    print_prefix_cache(res)
    if bands is not None:
        _print_band(bands)


#: seconds a run goes before its progress bar appears (shorter runs show none)
PROGRESS_DELAY_S = 3.0


def _simulate_with_progress(cfg: SimulationConfig, enabled: bool | None) -> SimulationResult:
    """``simulate(cfg)`` with a tqdm bar on stderr (requests finished) when ``enabled`` (None: when
    stderr is a terminal), shown once the run has taken ``PROGRESS_DELAY_S``. The simulator calls
    back once per chunk of requests or drained instance, never per step."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled or cfg.fidelity.value != "iteration":
        return simulate(cfg)
    from tqdm import tqdm

    with tqdm(total=cfg.workload.num_requests, unit="req", desc="simulate", file=sys.stderr,
              delay=PROGRESS_DELAY_S, leave=False, dynamic_ncols=True) as bar:
        def update(done: int) -> None:
            if done > bar.n:
                bar.update(done - bar.n)

        return simulate(cfg, progress=update)


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
    t = Table(title=_title(cfg))
    for col in ("latency (ms)", "mean", "P50", "P90", "P99", f"SLO target (at P{cfg.slo.percentile:g}, strict)"):
        t.add_column(col, justify="left" if col.startswith("latency") else "right")
    for row in latency_rows(res):
        t.add_row(*row)
    con.print(t)
    for line in summary_lines(res):
        con.print(line)
    if cfg.offline:
        con.print(f"offline: {res.num_completed} of {res.num_requests} requests in {res.makespan_s:,.2f} s; "
                  f"{res.output_tokens_per_s:,.0f} output tokens/s ({res.output_tokens_per_s / cfg.num_devices:,.0f} "
                  f"per GPU), {res.total_tokens_per_s:,.0f} total tokens/s, {res.throughput_rps:,.2f} requests/s, "
                  f"{res.num_preemptions} preemptions")
    cl = res.closed_loop
    if cl is not None:
        con.print(f"closed loop, {cl.concurrency} clients: {cl.num_measured} requests in the steady window "
                  f"{cl.window_s[0]:.2f}-{cl.window_s[1]:.2f} s (warm-up and cool-down excluded): TTFT mean "
                  f"{cl.ttft_s.mean * 1e3:,.1f} ms, TPOT mean {cl.tpot_s.mean * 1e3:,.2f} ms, "
                  f"{cl.tokens_per_s_per_user:,.1f} tokens/s/user, "
                  f"{cl.output_tokens_per_s_per_device:,.0f} tokens/s/GPU")
    if res.prefill_tokens_saved:
        con.print(f"prefix cache: {cfg.prefix_hit:.0%} of prompt tokens hit, {res.prefill_tokens_saved:,} prefill "
                  "tokens not computed")
    _print_engine(cfg)
    _print_spec(cfg)
    if sweep:
        slo = res.config.slo
        s = Table(title=f"rate sweep (SLO P{slo.percentile:g} TTFT <= {slo.ttft_s * 1e3:g} ms and TPOT <= "
                        f"{slo.tpot_s * 1e3:g} ms, strict; overloaded: the queue grows)")
        for col in ("rate (req/s)", "P90 TTFT (ms)", "P90 TPOT (ms)", "throughput (req/s)",
                    "requests meeting the SLO (strict)", "overloaded (queue grows)"):
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
