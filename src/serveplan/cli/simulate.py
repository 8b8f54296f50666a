"""``serveplan simulate``: the simulate command (:mod:`serveplan.commands.simulate`) rendered as tables."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import typer
from rich.table import Table

from serveplan.calibrate.bands import Band
from serveplan.cli.base import console, emit_json, options_command
from serveplan.commands import simulate as command
from serveplan.report.tables import concurrency_records, fit_columns, latency_rows, summary_lines
from serveplan.sim import SimulationConfig, SimulationResult
from serveplan.sim.deployment import resolve
from serveplan.validate.answers import band_line, simulation_bands

#: seconds a run goes before its progress bar appears (shorter runs show none)
PROGRESS_DELAY_S = 3.0

_EXTRA = (
    ("json_out", bool, typer.Option(False, "--json", help="Print JSON.")),
    ("progress", bool | None, typer.Option(None, "--progress/--no-progress", help=(
        "Progress bar on stderr for runs longer than a few seconds (default: when stderr is a terminal)."))),
)


@options_command("simulate", command.SimulateOptions, extra=_EXTRA)
def simulate_cmd(opts: command.SimulateOptions, *, json_out: bool = False, progress: bool | None = None) -> None:
    """Simulate a request stream through a fleet served by an engine (default: vLLM with its defaults for
    the device and the smallest TP that fits; Llama-3.1-70B on H100, the Azure conversation mix at 2 req/s).
    ``--engine bestserve`` is BestServe's Table 4 testbed (1p1d, TP 4, prefill batch 4, decode batch 16)."""
    prep = command.prepare(opts)
    enabled = sys.stderr.isatty() if progress is None else progress
    show = enabled and prep.config.fidelity.value == "iteration" and len(prep.levels) <= 1
    with progress_bar(len(prep.config.workload.input_lengths), show) as update:
        result = command.run(prep, progress=update)
    if json_out:
        emit_json(result.document())
        return
    if result.result is None:
        _print_levels(prep.config, list(result.levels))
    else:
        _print(result.result, list(result.sweep))
        _print_prefix_cache(result.result)
        if result.bands is not None:
            _print_band(result.bands)
    if result.files:
        console().print(f"wrote {', '.join(str(p) for p in result.files)}")


@contextmanager
def progress_bar(total: int, enabled: bool) -> Iterator[Callable[[int], None] | None]:
    """A tqdm bar on stderr counting the ``total`` requests of a run, shown once the run has taken
    :data:`PROGRESS_DELAY_S` (shorter runs show none); yields its update callback (requests finished
    so far; the simulator calls it per chunk or drained instance, never per step), or None."""
    if not enabled:
        yield None
        return
    from tqdm import tqdm

    with tqdm(total=total, unit="req", desc="simulate", file=sys.stderr, delay=PROGRESS_DELAY_S, leave=False,
              dynamic_ncols=True) as bar:
        def update(done: int) -> None:
            if done > bar.n:
                bar.update(done - bar.n)

        yield update


def title(cfg: SimulationConfig, load: str | None = None) -> str:
    """What was simulated: model and formats, devices (every instance's tp x dp x pp), the engine
    and its knobs, the workload and the load."""
    fleet = cfg.fleet
    layout = ", ".join(f"{r.value} {fleet.instance(r).parallel.label()}" for r in fleet.roles) if \
        fleet.is_disaggregated else fleet.first.parallel.label()
    sched = "/".join(fleet.instance(r).batching.scheduler for r in fleet.roles)
    budget = fleet.first.batching.token_budget
    if load is None:
        load = ("offline" if cfg.offline else f"concurrency {cfg.concurrency}" if cfg.concurrency
                else f"rate {cfg.rate:g} {'sessions' if cfg.workload.session is not None else 'req'}/s")
    wl = cfg.workload.describe()
    if cfg.offline or cfg.concurrency:
        wl = wl.rsplit(",", 1)[0]  # the arrival process does not apply
    eng = f"{cfg.engine.label}, " if cfg.engine is not None else ""
    dep = resolve(cfg)
    dtype, kv = dep.weight_dtype.value, dep.kv_dtype.value
    return (f"{cfg.model.name} ({dtype} weights, {kv} KV) on {cfg.num_devices} x {cfg.hardware.name}, {eng}"
            f"{fleet.strategy} ({layout}, max batch {fleet.max_batch}, prefill batch {fleet.max_prompts}, {sched}"
            f"{f', budget {budget}' if budget else ''}, {cfg.fidelity.value}), {wl}, {load}")


def _print_engine(cfg: SimulationConfig) -> None:
    setup = cfg.engine_setup
    if setup is None:
        return
    kv = cfg.effective_kv_dtype
    par = cfg.fleet.first.parallel
    rule = setup.engine.memory_rule(cfg.hardware, tp=par.tp, pp=par.pp)
    block = f"{setup.block_size} token{'s' if setup.block_size != 1 else ''}"
    console().print(f"engine {setup.engine.label} ({setup.engine.scheduler}): "
                    + "; ".join(setup.notes) + f"; KV block {block}, KV cache "
                    f"{(kv.value if kv is not None else 'weights format')}, memory share "
                    f"{setup.memory_utilization:.3f} of the datasheet's {cfg.hardware.memory_bytes / 1e9:.0f} GB "
                    f"({rule})")


def _print_spec(cfg: SimulationConfig) -> None:
    sd = cfg.fleet.spec
    if sd is None:
        return
    rates = ", ".join(f"{a:.3g}" for a in sd.rates)
    draft = f" with {sd.draft_model}" if sd.draft_model else ""
    console().print(f"speculative decoding: {sd.method.value}{draft}, K={sd.k}, acceptance per position {rates}: "
                    f"{sd.expected_tokens:.3f} expected tokens per verify step of {sd.verify_tokens} tokens per "
                    "sequence (decode-only steps; TPOT = step time / expected tokens)")


def _print_levels(cfg: SimulationConfig, results: list[SimulationResult]) -> None:
    con = console()
    recs = concurrency_records(results)
    levels = ",".join(str(d["concurrency"]) for d in recs)
    con.print(f"closed loop: {title(cfg, 'concurrency ' + levels)}")
    t = Table()
    cols = fit_columns(con.width, [("clients", 7, True), ("TTFT mean ms", 12, True), ("TTFT P90 ms", 11, False),
                                   ("TPOT mean ms", 12, True), ("tok/s/user", 10, True), ("tok/s/GPU", 9, True),
                                   ("req/s", 7, False), ("preemptions", 11, False)])
    for col in cols:
        t.add_column(col, justify="right")
    for d in recs:
        cells = {"clients": str(d["concurrency"]), "TTFT mean ms": f"{d['ttft_mean_s'] * 1e3:,.1f}",
                 "TTFT P90 ms": f"{d['ttft_p90_s'] * 1e3:,.1f}", "TPOT mean ms": f"{d['tpot_mean_s'] * 1e3:,.2f}",
                 "tok/s/user": f"{d['tokens_per_s_per_user']:,.1f}",
                 "tok/s/GPU": f"{d['output_tokens_per_s_per_device']:,.0f}", "req/s": f"{d['throughput_rps']:.3f}",
                 "preemptions": str(d["preemptions"])}
        t.add_row(*(cells[c] for c in cols))
    con.print(t)
    con.print("statistics over each run's steady window: requests sent after every client's first one and "
              "finished before the last send (warm-up and cool-down excluded); no SLO is judged in a closed loop")
    if results:
        con.print(band_line(simulation_bands(results[0])))
    _print_engine(cfg)


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


def _print(res: SimulationResult, sweep: list[SimulationResult]) -> None:
    con = console()
    cfg = res.config
    online = not (cfg.offline or cfg.concurrency)
    con.print(title(cfg))
    t = Table()
    heads = ["latency (ms)", "mean", "P50", "P90", "P99"]
    if online:
        heads.append(f"SLO (P{cfg.slo.percentile:g})")
    heads.append("P10-P90 band")
    for col in heads:
        t.add_column(col, justify="left" if col.startswith("latency") else "right")
    bands = simulation_bands(res)
    kinds = {"TTFT": "TTFT", "TPOT": "TPOT", "E2E": "E2E"}
    for row in latency_rows(res):
        band = bands[kinds[row[0]]].factors() if row[0] in kinds else ""
        t.add_row(*row[:len(heads) - 1], band)
    con.print(t)
    for line in summary_lines(res, judge_slo=online):
        con.print(line)
    con.print(band_line(bands))
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
    if res.prefill_tokens_saved and res.prefix_cache is None:
        con.print(f"prefix cache: {cfg.prefix_hit:.0%} of prompt tokens hit, {res.prefill_tokens_saved:,} prefill "
                  "tokens not computed")
    _print_engine(cfg)
    _print_spec(cfg)
    if sweep:
        slo = res.config.slo
        s = Table(title=f"rate sweep (SLO P{slo.percentile:g} TTFT <= {slo.ttft_s * 1e3:g} ms and TPOT <= "
                        f"{slo.tpot_s * 1e3:g} ms, strict; overloaded: the queue grows)", title_justify="left")
        for col in ("rate req/s", "P90 TTFT ms", "P90 TPOT ms", "req/s", "SLO met", "overloaded"):
            s.add_column(col, justify="right")
        for r in sorted(sweep, key=lambda r: r.config.rate or 0):
            s.add_row(f"{r.config.rate:g}", f"{r.ttft_s.p90 * 1e3:,.1f}", f"{r.tpot_s.p90 * 1e3:,.1f}",
                      f"{r.throughput_rps:.3f}", f"{r.slo_attainment:.1%}", "yes" if r.overloaded else "no")
        con.print(s)


def _print_prefix_cache(res: SimulationResult) -> None:
    """Hit rate, hits per tier and the TTFT of requests with and without a cached prefix."""
    pc = res.prefix_cache
    if pc is None:
        return
    con = console()
    t = Table(title=f"prefix cache: {pc.hit_rate:.1%} of {pc.prompt_tokens:,} prompt tokens hit", title_justify="left")
    for col in ("", "tokens", "share of prompt"):
        t.add_column(col, justify="left" if not col else "right")

    def share(x: int) -> str:
        return f"{x / pc.prompt_tokens:.1%}" if pc.prompt_tokens else "-"

    for label, v in (("cached on GPU", pc.gpu_tokens), ("loaded from CPU", pc.cpu_tokens),
                     ("loaded from disk", pc.disk_tokens), ("computed", pc.prompt_tokens - pc.hit_tokens)):
        t.add_row(label, f"{v:,}", share(v))
    con.print(t)

    def ms(x: float) -> str:
        return "-" if not math.isfinite(x) else f"{x * 1e3:,.1f}"

    s = Table(title="TTFT by prefix (ms)", title_justify="left")
    for col in ("requests", "count", "mean", "P50", "P90", "P99"):
        s.add_column(col, justify="left" if col == "requests" else "right")
    for label, st in (("with a cached prefix", pc.ttft_hit_s), ("all computed", pc.ttft_miss_s),
                      ("KV load (lower-tier hits)", pc.load_s)):
        s.add_row(label, f"{st.count:,}", ms(st.mean), ms(st.p50), ms(st.p90), ms(st.p99))
    con.print(s)
    sp = pc.ttft_split_s
    if sp:
        con.print(f"mean TTFT {sum(sp.values()) * 1e3:,.1f} ms = queueing {sp['queue'] * 1e3:,.1f} + KV load "
                  f"{sp['kv_load'] * 1e3:,.1f} + prefill {sp['prefill'] * 1e3:,.1f} ms")
    con.print(f"per request: {pc.cached_tokens:,.0f} prompt tokens cached, {pc.computed_tokens:,.0f} computed; "
              f"blocks spilled to CPU {pc.spilled_cpu_blocks:,}, to disk {pc.spilled_disk_blocks:,}, "
              f"dropped {pc.dropped_blocks:,}")
