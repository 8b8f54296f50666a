"""``simulate``: one strategy served by an engine under a request stream (``serveplan simulate``, the
web page's Simulate panel).

:class:`SimulateOptions` is the question; :func:`prepare` builds and checks the simulation config
(and the loads: one open-loop rate with its sweep, offline, or closed loops at several
concurrencies) before any work; :func:`run` answers it (:class:`SimulateResult`), whose
:meth:`~SimulateResult.document` is what ``--json`` prints and the page's API returns.

Defaults: Llama-3.1-70B on H100 under the bundled vLLM release (its scheduler and limits, the
smallest TP that fits with a useful KV cache, one instance), the Azure conversation length mix at
2 requests/s, SLO P90 TTFT 1 s and TPOT 50 ms.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from serveplan.calibrate.bands import Band, require_uncertainty
from serveplan.commands.checks import check_simulate
from serveplan.commands.options import CommandOptions, opt
from serveplan.commands.parsing import parse_concurrency, parse_rates
from serveplan.commands.plan import DEFAULT_DATASET, engine_spec
from serveplan.errors import SpecError, check_int, check_number
from serveplan.estimator.api import resolve_specs
from serveplan.report.documents import simulate_document
from serveplan.report.plots import concurrency_plot, latency_histograms, rate_sweep_plot
from serveplan.report.tables import concurrency_records, sweep_records
from serveplan.sim import SLO, SimulationConfig, SimulationResult, simulate, simulation_config
from serveplan.sim.prefix_cache import KVTiers
from serveplan.sim.sessions import session_workload, with_system_prompt
from serveplan.sim.workload import Workload, build_workload
from serveplan.specs.catalog import get_host, list_hosts
from serveplan.specs.speculative import SpecDecodeConfig
from serveplan.units import json_safe
from serveplan.validate.answers import simulation_confidence
from serveplan.validate.bands import simulation_band

#: the open-loop rate when none is given (requests/s): the default deployment (Llama-3.1-70B, one
#: vLLM instance on H100, Azure conversation mix) serves it within the default SLO with room to
#: spare, so a bare ``serveplan simulate`` shows a healthy system (docs/simulator.md, "Defaults")
DEFAULT_RATE = 2.0
#: streams up to this many requests record the inter-token latency (ITL, over tokens, as ``vllm bench
#: serve`` prints it); it costs about a tenth more time, so longer streams (a day of traffic) leave it out
ITL_MAX_REQUESTS = 1 << 15


@dataclass(frozen=True, slots=True, kw_only=True)
class SimulateOptions(CommandOptions):
    """The question ``serveplan simulate`` answers (module doc)."""

    model: str = opt("llama-3.1-70b", "--model", "-m", help="Catalog id, Hugging Face id or path to a config.json.")
    hardware: str = opt("h100-sxm", "--hardware", "-H", help="Catalog id or hardware YAML path.")
    profile: str | None = opt(None, "--profile", "-p", help="Efficiency profile id or YAML path.")
    engine: str = opt("vllm", "--engine", "-e", help=(
        "Serving engine whose scheduler and defaults apply: vllm (V1), sglang, trtllm, a versioned id (vllm-0.11), "
        "an engine YAML, or bestserve (BestServe's 2024 testbed)."))
    strategy: str | None = opt(None, "--strategy", "-s", help=(
        "Nm (N collocated instances) or PpDd (P prefill, D decode); default 1m (bestserve: 1p1d)."))
    tp: int | None = opt(None, "--tp", help=(
        "Tensor-parallel size of every instance (default: the smallest that fits with a useful KV cache)."))
    prefill_tp: int | None = opt(None, "--prefill-tp", help="TP of prefill instances (disaggregated).")
    decode_tp: int | None = opt(None, "--decode-tp", help="TP of decode instances (disaggregated).")
    pp: int = opt(1, "--pp", help="Pipeline stages per instance.")
    dp: int = opt(1, "--dp", help=(
        "Data-parallel attention ranks per instance: an instance has tp x dp x pp devices (vLLM's "
        "--data-parallel-size); see --enable-dp-attention for SGLang's way of counting."))
    ep: int = opt(1, "--ep", help="Expert-parallel size (MoE).")
    enable_dp_attention: bool = opt(False, "--enable-dp-attention", help=(
        "Count devices as SGLang does (--tp-size 8 --dp-size 8 --enable-dp-attention: 8 devices): --tp is then "
        "all the devices of an instance's stage and --dp splits them into attention ranks (tp/dp each)."))
    dtype: str | None = opt(None, "--dtype", help="Weight format (default: the model's).")
    kv_dtype: str | None = opt(None, "--kv-dtype", help="KV-cache format (default: the engine's for the weights).")
    memory_fraction: float | None = opt(None, "--memory-fraction", help=(
        "The engine's memory fraction (vLLM --gpu-memory-utilization, SGLang --mem-fraction-static, TensorRT-LLM "
        "free_gpu_memory_fraction; default: the engine's)."))
    max_batch: int | None = opt(None, "--max-batch", help="Sequences per step (default: the engine's).")
    prefill_max_batch: int | None = opt(None, "--prefill-max-batch", help=(
        "Prompts per step (default: the engine's; 0: = max batch)."))
    scheduler: str | None = opt(None, "--scheduler", help=(
        "Override the engine's scheduler: prefill-first, chunked-prefill (alias sarathi), prefill-priority, "
        "inflight-no-evict."))
    chunk_size: int | None = opt(None, "--chunk-size", help="Largest prefill chunk, tokens (default: the engine's).")
    token_budget: int | None = opt(None, "--token-budget", help="New tokens per step (default: the engine's).")
    nvlink_domain: int | None = opt(None, "--nvlink-domain", help=(
        "Devices that share one NVLink domain across nodes (GH200 NVL32: 32, GB200 NVL72: 72); collectives and "
        "KV transfers inside it use NVLink."), page=False)
    router: str = opt("round_robin", "--router", help="round_robin or least_outstanding.")
    fidelity: str = opt("iteration", "--fidelity", help="iteration (every step) or bestserve (Algorithms 2-7).",
                        page=False)
    scenario: str | None = opt(None, "--scenario", help=(
        "BestServe scenario: op1 (8192/512), op2 (2048/64), op3 (1024/64), op4 (256/2048)."))
    dataset: str | None = opt(None, "--dataset", help=(
        "Real length mix: azure-conv (the default when no other source is given), azure-code, arxiv-sum, sharegpt, "
        "mlperf-openorca, mlperf-mixtral."))
    input_len: int | None = opt(None, "--input-len", help="Fixed input length, tokens (with --output-len).")
    output_len: int | None = opt(None, "--output-len", help="Fixed output length, tokens.")
    trace: str | None = opt(None, "--trace", help=(
        "CSV/JSONL trace: arrival time, input and output lengths; or a Mooncake JSONL trace (timestamp ms, "
        "input_length, output_length, hash_ids: the prefix cache reuses its blocks)."), page=False)
    length_dist: str | None = opt(None, "--length-dist", help=(
        "'INPUT;OUTPUT' distributions, e.g. 'normal:2048,512;uniform:16,128' (fixed, uniform, normal, lognormal, "
        "empirical)."))
    rate: float | None = opt(None, "--rate", help=(
        f"Arrival rate, requests/s (default {DEFAULT_RATE:g} when neither --offline nor --concurrency)."))
    offline: bool = opt(False, "--offline", help="Queue every request at t=0 and run to completion (offline "
                                                 "throughput).")
    concurrency: str | None = opt(None, "--concurrency", help=(
        "Closed loop: C clients each sending the next request when the last finishes; C[,C...] for a sweep."))
    prefix_hit: float = opt(0.0, "--prefix-hit", help="Share of prompt tokens found in the prefix cache, in [0, 1).")
    sessions: int | None = opt(None, "--sessions", help=(
        "Multi-turn conversations (each turn resends the conversation so far, the oldest turns dropped when it "
        "would outgrow the context; prefix cache on); --rate is then sessions/s."))
    turns: int | None = opt(None, "--turns", help="Turns per conversation (default 4).")
    think_time: float | None = opt(None, "--think-time", help="Seconds between an answer and the session's next "
                                                              "turn (default 0).")
    session_dataset: str | None = opt(None, "--session-dataset", help=(
        "Turn lengths: mooncake-conversation (Kimi chat, Mooncake FAST'25 trace; the default)."), page=False)
    system_prompt_len: int = opt(0, "--system-prompt-len", help="Tokens of a system prompt shared by every request "
                                                                "(prefix cache on).")
    kv_tiers: str | None = opt(None, "--kv-tiers", help=(
        "Spill evicted prefix-cache blocks to cpu or cpu,disk of --host (loaded back when cheaper than recompute)."),
        page=False)
    host: str | None = opt(None, "--host", help="Host of the KV tiers (serveplan hosts; per GPU).", page=False)
    kv_cpu_gb: float | None = opt(None, "--kv-cpu-gb", help="CPU tier GB per GPU (default: the host's).", page=False)
    kv_disk_gb: float | None = opt(None, "--kv-disk-gb", help="Disk tier GB per GPU (default: the host's).",
                                   page=False)
    kv_load: str | None = opt(None, "--kv-load", help=(
        "serial or layerwise loading of lower-tier hits (default: the engine's; sglang layerwise)."), page=False)
    kv_connector: str | None = opt(None, "--kv-connector", help=(
        "lmcache: tiers filled write-through by vLLM's LMCache connector; default: filled by eviction."), page=False)
    arrival: str = opt("poisson", "--arrival", help="poisson or gamma.")
    cv: float = opt(1.0, "--cv", help="Coefficient of variation of gamma inter-arrival gaps.")
    num_requests: int = opt(10000, "--num-requests", "-n", help="Requests to simulate.")
    seed: int = opt(0, "--seed", help="Seed of arrivals (and sampled lengths).")
    slo_ttft: float = opt(1.0, "--slo-ttft", help="TTFT target, seconds (judged for open loops only).")
    slo_tpot: float = opt(0.05, "--slo-tpot", help="TPOT target, seconds (judged for open loops only).")
    percentile: float = opt(90.0, "--percentile", help="SLO percentile.")
    early_stop: bool = opt(False, "--early-stop", help="Stop once the SLO is certainly missed.", page=False)
    rate_sweep: str | None = opt(None, "--rate-sweep", help="Comma-separated rates, requests/s, for the "
                                                            "P90-vs-rate table and plot.")
    out: Path | None = opt(None, "--out", help="Directory for requests.csv, histograms and the rate-sweep plot.",
                           page=False)
    allow_long_context: bool = opt(False, "--allow-long-context", help=(
        "Simulate requests longer than the model's max_position_embeddings (refused otherwise; sessions drop "
        "their oldest turns instead)."), page=False)
    band: int = opt(0, "--band", help=(
        "Simulate again with N profiles sampled from a calibrated profile's uncertainty (seeded by --seed); "
        "report P10/P50/P90 of P90 TTFT, P90 TPOT and throughput."), page=False)
    spec_method: str | None = opt(None, "--spec-method", help=(
        "Speculative decoding: draft (a draft model), eagle (EAGLE head), mtp (multi-token prediction layer), "
        "ngram (prompt lookup) or none."))
    spec_tokens: int | None = opt(None, "--spec-tokens", help="Draft tokens per step K (default: the method's; "
                                                              "0 = off).")
    spec_acceptance: str | None = opt(None, "--spec-acceptance", help=(
        "Acceptance rate per draft position in [0, 1]: one rate or a comma list (default: the method's)."))
    spec_draft_model: str | None = opt(None, "--spec-draft-model", help="Draft model (catalog id) for draft.")

    def __post_init__(self) -> None:
        check_simulate(band=self.band, seed=self.seed)
        for name, v in (("pp", self.pp), ("dp", self.dp), ("ep", self.ep)):
            check_int(name, v, low=1)
        check_number("percentile", self.percentile, low=0, high=100, low_open=True, high_open=True)
        for name, x in (("slo-ttft", self.slo_ttft), ("slo-tpot", self.slo_tpot)):
            check_number(name, x, low=0, low_open=True, unit="seconds")
        if self.memory_fraction is not None:
            check_number("memory-fraction", self.memory_fraction, low=0, high=1, low_open=True)
        if self.enable_dp_attention and self.tp is not None and self.tp % self.dp:
            raise SpecError(f"tp={self.tp} with --enable-dp-attention counts every device of a stage and must be a "
                            f"multiple of dp={self.dp} (SGLang: --tp-size {self.tp} --dp-size {self.dp})")
        if self.offline and self.rate is not None:
            raise SpecError(f"--offline with --rate {self.rate:g}: an offline run queues every request at t=0; "
                            "drop --rate")
        if self.concurrency is not None and self.rate is not None:
            raise SpecError(f"--concurrency with --rate {self.rate:g}: a closed loop sets its own arrivals; "
                            "drop --rate")
        if self.concurrency is not None and self.offline:
            raise SpecError("--offline with --concurrency: choose one load")
        if self.rate_sweep and (self.offline or self.concurrency):
            raise SpecError("--rate-sweep is for open loops; drop --offline/--concurrency or the sweep")

    @property
    def levels(self) -> list[int] | None:
        """Closed-loop client counts (``--concurrency``), or None."""
        return parse_concurrency(self.concurrency) if self.concurrency is not None else None

    @property
    def load_rate(self) -> float | None:
        """The open loop's rate (``DEFAULT_RATE`` unless given); None for offline and closed loops."""
        if self.offline or self.concurrency is not None:
            return None
        return DEFAULT_RATE if self.rate is None else self.rate

    @property
    def layout(self) -> tuple[int | None, int]:
        """``(tp, dp)`` in serveplan's terms (an instance is tp x dp x pp devices)."""
        if self.enable_dp_attention and self.tp is not None:
            return self.tp // self.dp, self.dp
        return self.tp, self.dp


@dataclass(frozen=True, slots=True, kw_only=True)
class PreparedSimulation:
    """A checked simulation: its config (the first load) and the loads to run."""

    options: SimulateOptions
    config: SimulationConfig
    levels: tuple[int, ...] = ()         # closed-loop sweep (more than one level)
    rates: tuple[float, ...] = ()        # open-loop rate sweep


def _session_workload(o: SimulateOptions, other: str | None, context: int) -> Workload | None:
    if o.sessions is None:
        for flag, v in (("--turns", o.turns), ("--think-time", o.think_time), ("--session-dataset",
                                                                                o.session_dataset)):
            if v is not None:
                raise SpecError(f"{flag}={v} needs --sessions N (the number of conversations)")
        return None
    if other:
        raise SpecError(f"give one request source; got --sessions and {other}")
    check_int("sessions", o.sessions, low=1, why="conversations")
    turns = 4 if o.turns is None else o.turns
    check_int("turns", turns, low=1, why="turns per conversation")
    think = 0.0 if o.think_time is None else o.think_time
    check_number("think-time", think, low=0, unit="seconds")
    return session_workload(o.sessions, turns, think_s=think, dataset=o.session_dataset,
                            system_prompt_len=o.system_prompt_len, seed=o.seed, arrival=o.arrival, cv=o.cv,
                            max_context=None if o.allow_long_context else context)


def _tiers(o: SimulateOptions) -> KVTiers | None:
    given = [f for f, v in (("--host", o.host), ("--kv-cpu-gb", o.kv_cpu_gb), ("--kv-disk-gb", o.kv_disk_gb),
                            ("--kv-load", o.kv_load), ("--kv-connector", o.kv_connector)) if v is not None]
    if o.kv_tiers is None:
        if given:
            raise SpecError(f"{', '.join(given)} configure KV tiers: give --kv-tiers cpu or cpu,disk")
        return None
    if o.host is None:
        raise SpecError(f"kv-tiers={o.kv_tiers!r} needs --host (the CPU memory, disk and links per GPU); known: "
                        f"{', '.join(list_hosts())}")
    for flag, v in (("kv-cpu-gb", o.kv_cpu_gb), ("kv-disk-gb", o.kv_disk_gb)):
        if v is not None and not (math.isfinite(v) and v > 0):
            raise SpecError(f"{flag}={v} must be a positive number of GB per GPU")
    return KVTiers(tiers=tuple(x.strip().lower() for x in o.kv_tiers.split(",")), host=get_host(o.host),
                   cpu_bytes=None if o.kv_cpu_gb is None else o.kv_cpu_gb * 1e9,
                   disk_bytes=None if o.kv_disk_gb is None else o.kv_disk_gb * 1e9, load=o.kv_load,
                   connector=None if o.kv_connector is None else o.kv_connector.strip().lower())


def prepare(o: SimulateOptions) -> PreparedSimulation:
    """Check ``o`` and build its simulation config (module doc)."""
    m, hw, pr = resolve_specs(o.model, o.hardware, o.profile)
    if o.nvlink_domain is not None:
        check_int("nvlink-domain", o.nvlink_domain, low=1)
        hw = hw.with_(scale_up_domain=o.nvlink_domain)
    if o.band:
        require_uncertainty(pr)
    other = next((f for f, v in (("--scenario", o.scenario), ("--input-len", o.input_len), ("--trace", o.trace),
                                 ("--length-dist", o.length_dist), ("--dataset", o.dataset)) if v), None)
    wl = _session_workload(o, other, m.max_position_embeddings)
    if wl is None:
        wl = build_workload(scenario=o.scenario, input_len=o.input_len, output_len=o.output_len, trace=o.trace,
                            length_dist=o.length_dist, num_requests=o.num_requests, arrival=o.arrival, cv=o.cv,
                            seed=o.seed, dataset=o.dataset or (None if other else DEFAULT_DATASET))
        check_number("system-prompt-len", o.system_prompt_len, low=0, unit="tokens")
        if o.system_prompt_len:
            wl = with_system_prompt(wl, o.system_prompt_len)
        if (o.dataset or o.length_dist or not other) and not o.allow_long_context:
            # a length mix's tail beyond the model's context is cut as chat clients cut what they send
            wl = wl.within_context(m.max_position_embeddings)
    tiers = _tiers(o)
    levels = o.levels
    tp, dp = o.layout
    cfg = simulation_config(
        engine=engine_spec(o.engine, o.memory_fraction), strategy=o.strategy,
        fleet_options={"tp": tp, "prefill_tp": o.prefill_tp, "decode_tp": o.decode_tp, "pp": o.pp, "dp": dp,
                       "ep": o.ep, "max_batch": o.max_batch, "prefill_max_batch": o.prefill_max_batch,
                       "scheduler": o.scheduler, "chunk_size": o.chunk_size, "token_budget": o.token_budget},
        model=m, hardware=hw, profile=pr, router=o.router, fidelity=o.fidelity, rate=o.load_rate, workload=wl,
        slo=SLO(ttft_s=o.slo_ttft, tpot_s=o.slo_tpot, percentile=o.percentile), seed=o.seed, dtype=o.dtype,
        early_stop=o.early_stop, kv_dtype=o.kv_dtype, offline=o.offline,
        concurrency=levels[0] if levels else None, prefix_hit=o.prefix_hit, allow_long_context=o.allow_long_context,
        spec=SpecDecodeConfig.of(o.spec_method, o.spec_tokens, o.spec_acceptance, o.spec_draft_model),
        **({"kv_tiers": tiers} if tiers is not None else {}),
    )
    rates: list[float] = []
    if o.rate_sweep:
        rates = parse_rates(o.rate_sweep)
    elif o.out is not None and cfg.rate is not None and wl.arrival != "trace" and wl.session is None:
        rates = [round(cfg.rate * f, 6) for f in (0.25, 0.5, 0.75, 0.9, 1.0, 1.1, 1.25)]
    return PreparedSimulation(options=o, config=cfg, levels=tuple(levels or ()), rates=tuple(rates))


@dataclass(frozen=True, slots=True, kw_only=True)
class SimulateResult:
    """The answer: the simulation (the first load), the rate sweep or the closed-loop sweep, and
    the band (``--band``)."""

    prepared: PreparedSimulation
    result: SimulationResult | None                      # None for a closed-loop sweep
    sweep: tuple[SimulationResult, ...] = ()
    levels: tuple[SimulationResult, ...] = ()            # one closed loop per --concurrency level
    bands: dict[str, Band] | None = None
    files: tuple[Path, ...] = field(default_factory=tuple)

    @property
    def options(self) -> SimulateOptions:
        return self.prepared.options

    def document(self) -> dict[str, Any]:
        """What ``serveplan simulate --json`` prints and the page's API returns."""
        cmd = self.options.command_line("simulate")
        if self.result is None:
            doc = json_safe({"config": self.prepared.config.to_dict(),
                             "concurrency_sweep": concurrency_records(self.levels),
                             "confidence": [simulation_confidence(r) for r in self.levels], "command": cmd})
            return dict(doc)
        return simulate_document(self.result, self.sweep, self.bands) | {"command": cmd}


def run(o: SimulateOptions | PreparedSimulation, *, progress: Callable[[int], None] | None = None,
        on_progress: Callable[[int, int], None] | None = None) -> SimulateResult:
    """Answer the simulate question (module doc). ``progress(done)`` is called with the requests
    finished of the first simulation; ``on_progress(done, total)`` once per simulation run."""
    prep = o if isinstance(o, PreparedSimulation) else prepare(o)
    opts, cfg = prep.options, prep.config
    if len(prep.levels) > 1:
        results = []
        for i, c in enumerate(prep.levels):
            results.append(simulate(dataclasses.replace(cfg, concurrency=c)))
            if on_progress:
                on_progress(i + 1, len(prep.levels))
        files = _write_levels(opts.out, cfg, results) if opts.out is not None else []
        return SimulateResult(prepared=prep, result=None, levels=tuple(results), files=tuple(files))
    total = 1 + sum(1 for r in prep.rates if r != cfg.rate)
    res = simulate(cfg, progress=progress, itl=len(cfg.workload.input_lengths) <= ITL_MAX_REQUESTS)
    done = 1
    if on_progress:
        on_progress(done, total)
    bands = simulation_band(cfg, res, opts.band, seed=opts.seed) if opts.band else None
    sweep: list[SimulationResult] = []
    for r in prep.rates:
        if r == cfg.rate:
            sweep.append(res)
            continue
        sweep.append(simulate(dataclasses.replace(cfg, rate=r)))
        done += 1
        if on_progress:
            on_progress(done, total)
    files = _write_out(opts.out, res, sweep) if opts.out is not None else []
    return SimulateResult(prepared=prep, result=res, sweep=tuple(sweep), bands=bands, files=tuple(files))


def _write_out(out: Path, res: SimulationResult, sweep: list[SimulationResult]) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = [res.requests.write_csv(out / "requests.csv")]
    summary = res.to_dict()
    if sweep:
        summary["rate_sweep"] = sweep_records(sweep)
    p = out / "summary.json"
    p.write_text(json.dumps(json_safe(summary), indent=2, allow_nan=False))
    written.append(p)
    written.append(latency_histograms(res, out / "latency_histograms.png"))
    if sweep:
        written.append(rate_sweep_plot(sweep, out / "p90_vs_rate.png"))
    return written


def _write_levels(out: Path, cfg: SimulationConfig, results: list[SimulationResult]) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    recs = concurrency_records(results)
    p = out / "concurrency_sweep.json"
    p.write_text(json.dumps(json_safe({"config": cfg.to_dict(), "levels": recs}), indent=2, allow_nan=False))
    return [p, concurrency_plot(recs, out / "concurrency_sweep.png", title=f"{cfg.model.name} on {cfg.hardware.name}")]
