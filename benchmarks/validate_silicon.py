"""Predict aiconfigurator's measured serving rows and write the accuracy table of docs/validation/silicon.md.

The development set is NVIDIA aiconfigurator's ``silicon_sample.csv`` (Apache-2.0, inside the
``aiconfigurator-core`` 0.12.0 wheel; loaded and stated by ``silicon_data.py``, which downloads the
wheel once into ``$SERVEPLAN_BENCH_CACHE``). Every aggregated row that serveplan can state (its
model, system and weight format are in the catalog), each measurement once
(:func:`unique_measurements`: the CSV repeats runs across its collections) and without the rows
whose prompts could not have been prefilled at the GPUs' peak (:func:`faster_than_peak`: prefix
cache hits the row does not state), is simulated as it was measured: one instance
with the row's TP/PP/attention-DP/EP layout and weight/KV formats, the row's engine
(``--engine vllm|sglang|trtllm`` with that engine's defaults), fixed ``isl``/``osl`` and a closed loop
at the row's concurrency. Predicted TTFT and TPOT are computed as the benchmark computed the
measured ones: means over every request of a run of 10 C requests that starts with all C clients
sending at once (``--statistic run``, :data:`BENCH_ROUNDS`; aiconfigurator's ``eval/benchmarks``
runners send ``10 C`` requests and average them all). ``--statistic steady`` gives the means over
the steady window instead (warm-up and cool-down excluded,
:func:`serveplan.sim.serving.steady_window`), what ``simulate --concurrency`` reports::

    python benchmarks/validate_silicon.py --aisimulate benchmarks/results/aisimulate_silicon.json
                                                                # every covered row: the docs table
    python benchmarks/validate_silicon.py --sample 60 --no-docs # a quick look
    python benchmarks/validate_silicon.py --models llama-3.1-8b,llama-3.1-70b,qwen3-32b,deepseek-v3 \
        --no-docs --out /tmp/four.json                          # the four models of the first tables
    python benchmarks/validate_silicon.py --report-only benchmarks/results/silicon_validation.json \
        --aisimulate benchmarks/results/aisimulate_silicon.json # rewrite the table from saved results

``--as-deployed ENGINES`` simulates those engines' rows with aiconfigurator's generator settings
(:func:`silicon_data.deployment`) instead of the engine's defaults (``all``, ``none`` or a comma list;
default :data:`AS_DEPLOYED`: vLLM's rows). Nothing else is chosen on these rows: the statistic, the
configuration per engine, the engines' frontend value (``frontend.per_request_us``) and the eager prefill's
MoE host work (``prefill_host_us.moe``) were chosen on H100 rows only, and the table reports H100, H200
and B200 rows apart.
``--held-slot ENGINE@VERSION`` is an experiment (it needs ``--no-docs``): those rows run with a batch
limit of their ``batch_size`` less one (docs/validation/checks.md, check 1;
``silicon_osl_slope.py`` reads the same effect from the measurements alone).

Outputs: ``benchmarks/results/silicon_validation.json`` (every row: measured, predicted, error,
seconds) and the section between ``<!-- silicon-validation:begin -->`` and
``<!-- silicon-validation:end -->`` of ``docs/validation/silicon.md``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from collections import defaultdict
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from silicon_data import (  # noqa: E402
    NotStatable,
    SiliconCase,
    deployment,
    inferencemax_sglang,
    inferencemax_trtllm,
    inferencemax_trtllm_llama,
    load_rows,
    map_row,
    moe_backends,
    overlap_scheduling,
    version_key,
)

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "validation" / "silicon.md"
OUT = ROOT / "benchmarks" / "results" / "silicon_validation.json"
BEGIN, END = "<!-- silicon-validation:begin -->", "<!-- silicon-validation:end -->"
WITHIN = 0.25  # the table's "share within 25%"
#: the command that writes docs/validation/silicon.md's table: every covered row
COMMAND = "python benchmarks/validate_silicon.py --aisimulate benchmarks/results/aisimulate_silicon.json"


def command_of(args: argparse.Namespace) -> str:
    """The command line a docs table was written with: the options that change its rows or figures."""
    parts = ["python benchmarks/validate_silicon.py"]
    for flag, value, default in (("--models", args.models, None), ("--sample", args.sample, None),
                                 ("--profile", args.profile, None), ("--statistic", args.statistic, "run"),
                                 ("--as-deployed", args.as_deployed, ",".join(sorted(AS_DEPLOYED))),
                                 ("--aisimulate", args.aisimulate, None)):
        if value is not None and value != default:
            parts.append(f"{flag} {value}")
    return " ".join(parts)


def covered_cases(sample: int | None = None, models: set[str] | None = None,
                  ) -> tuple[list[SiliconCase], dict[str, int]]:
    """Aggregated single-instance rows serveplan can state, sorted by id (every k-th with ``sample``;
    only rows of ``models`` when given)."""
    cases, skipped = [], defaultdict(int)
    for row in load_rows():
        if row.get("mode") != "agg":
            skipped["disaggregated"] += 1
            continue
        try:
            case = map_row(row)
        except NotStatable as exc:
            skipped[exc.cause] += 1
            continue
        if case.layout is None or case.layout.instances != 1:
            skipped["several instances"] += 1
            continue
        if models is not None and case.model not in models:
            skipped[f"model {case.model} (not selected)"] += 1
            continue
        cases.append(case)
    cases.sort(key=lambda c: c.row_id)
    cases = unique_measurements([c for c in cases if not faster_than_peak(c, skipped)], skipped)
    if sample and sample < len(cases):
        step = len(cases) / sample
        cases = [cases[int(i * step)] for i in range(sample)]
    return cases, dict(skipped)


def implied_prefill_share(case: SiliconCase) -> float:
    """The share of the GPUs' dense peak (the weight format's, datasheet) that the row's prompts
    need if each was prefilled: the closed loop completes ``C`` requests per cycle of ``TTFT +
    (osl - 1) TPOT``, each prefilling ``isl`` tokens at two FLOPs per active non-embedding weight
    (attention left out, so this is a lower bound)."""
    from serveplan import get_hardware, get_model

    model, hw = get_model(case.model), get_hardware(case.hardware)
    cycle = case.ttft_s + (case.osl - 1) * case.tpot_s
    tokens_per_s = case.concurrency * case.isl / cycle
    flops = 2.0 * (model.num_active_parameters() - model.embedding_params()) * tokens_per_s
    return flops / (case.num_devices * hw.flops(case.dtype.compute))


def faster_than_peak(case: SiliconCase, skipped: dict[str, int]) -> bool:
    """A row whose prompts could not have been prefilled at the GPUs' peak
    (:func:`implied_prefill_share` above 1) did not prefill them: the benchmark repeated prompts and
    the engine's prefix cache served them (three TensorRT-LLM 1.3.0rc5 Qwen3-32B NVFP4 rows, 15000
    tokens at 416-448 clients: 2.8x the NVFP4 peak of their GPUs). Counted under ``prefill faster
    than the GPUs' peak``; nothing else in a row is judged."""
    if case.layout is None or implied_prefill_share(case) <= 1.0:
        return False
    skipped["prefill faster than the GPUs' peak"] += 1
    return True


def unique_measurements(cases: list[SiliconCase], skipped: dict[str, int]) -> list[SiliconCase]:
    """Each measurement once. The CSV holds the same collections more than once (a database dump,
    its file export and the gap-analysis copy), with the engine version spelled differently
    (``nightly-dev`` and ``nightly-dev-20260216-d3bae71e``) and the times printed to different
    digits (0.4233117 s and 0.42331 s). A row with the same model, system, formats, engine, layout,
    lengths and concurrency as a row kept before it (``cases`` in id order) and the same TTFT and
    TPOT to 10 us is that run again: counted under ``duplicate measurement``."""
    seen: set[tuple[Any, ...]] = set()
    kept = []
    for c in cases:
        key = (c.model, c.hardware, c.dtype, c.kv_dtype, c.engine,
               tuple(sorted(c.layout.to_dict().items())) if c.layout else None, c.isl, c.osl, c.concurrency,
               round(c.ttft_s * 1e5), round(c.tpot_s * 1e5))
        if key in seen:
            skipped["duplicate measurement"] += 1
            continue
        seen.add(key)
        kept.append(c)
    return kept


def num_requests(concurrency: int) -> int:
    """Requests per closed-loop run: four rounds of the clients (at least 32), so that the steady
    window (rounds two to four, minus the requests still running at the last send) holds about
    two rounds of requests."""
    return max(4 * concurrency, 32)


#: Requests of one measured run at concurrency ``C``: ``10 C`` (aiconfigurator's
#: ``eval/benchmarks/bench_serving_runner.py``: ``num_prompts = cc * 10``, 0 warm-up requests;
#: ``genai_perf_runner.py``: ``--request-count`` ``10 C``).
BENCH_ROUNDS = 10
#: Warm-up requests of genai-perf's runner at concurrency ``C``: ``2 C`` (``genai_perf_runner.py``
#: ``--warmup-request-count``), sent by the same clients before the ``10 C`` measured ones and left
#: out of the statistics (``--statistic warmed``).
WARMUP_ROUNDS = 2


def run_requests(concurrency: int, statistic: str) -> int:
    """Requests simulated per row: the benchmark's run (``statistic="run"``) or enough for the
    steady window (:func:`num_requests`)."""
    if statistic == "warmed":
        return (WARMUP_ROUNDS + BENCH_ROUNDS) * concurrency
    if statistic == "wave":
        return concurrency
    return BENCH_ROUNDS * concurrency if statistic in ("run", "median") else num_requests(concurrency)


#: Engines whose rows are simulated with aiconfigurator's generator settings (``--as-deployed``): the
#: configuration was chosen per engine on every covered H100 row (docs/validation/harness.md, "vLLM rows
#: as deployed"): vLLM's 138 H100 rows 47.8% -> 28.2% median |TTFT error| as deployed, TensorRT-LLM's
#: 357 44.5% -> 62.8% and SGLang's 84 15.0% -> 83.8% (so those keep their defaults).
AS_DEPLOYED = frozenset({"vllm"})
ENGINES = ("sglang", "trtllm", "vllm")


def _engine_list(engines: frozenset[str]) -> str:
    names = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}
    return " and ".join(names[e] for e in sorted(engines))


def deployed_engines(text: str) -> frozenset[str]:
    """``--as-deployed`` value -> engine families: ``all``, ``none`` or a comma list."""
    if text == "all":
        return frozenset(ENGINES)
    if text == "none":
        return frozenset()
    names = frozenset(t.strip() for t in text.split(",") if t.strip())
    bad = sorted(names - set(ENGINES))
    if bad:
        raise SystemExit(f"--as-deployed: unknown engine {bad[0]!r}; expected all, none or a comma list of "
                         f"{', '.join(ENGINES)}")
    return names


def engine_for(engine: str, version: str) -> str:
    """The bundled engine file a row measured with ``engine`` at ``version`` is simulated with: the
    newest bundled version not newer than the row's, else the oldest bundled one (also for rows that
    name no version: the sample's unversioned rows were measured from 2025-10 to 2026-04, per their
    ``silicon_data_source``, before the newest bundled releases). The user-facing default (the newest release)
    may postdate the measurement, and its defaults may differ (vLLM 0.33 adds a >= 160 GiB tier and
    a 0.92 memory share), so rows are not simulated with defaults their engine did not have."""
    from serveplan.specs.catalog import get_engine, list_engines

    want = version_key(version or "")
    specs = [get_engine(key) for key in list_engines() if key.startswith(f"{engine}-")]
    bundled = sorted((version_key(spec.version), spec.name) for spec in specs if spec.version)
    if not bundled:
        return engine
    older = [key for v, key in bundled if v <= want]
    return older[-1] if older else bundled[0][1]


def held_slot_rows(text: str) -> frozenset[tuple[str, str]]:
    """``--held-slot`` value -> ``(engine, version)`` pairs: ``none`` or a comma list of ``engine@version``."""
    if text == "none":
        return frozenset()
    out = set()
    for item in (t.strip() for t in text.split(",") if t.strip()):
        engine, sep, version = item.partition("@")
        if not sep or engine not in ENGINES or not version:
            raise SystemExit(f"--held-slot: {item!r} is not ENGINE@VERSION with ENGINE one of {', '.join(ENGINES)} "
                             "(e.g. trtllm@1.0.0rc3), or none")
        out.add((engine, version))
    return frozenset(out)


def launch_script_known(case: SiliconCase, as_launched: bool = True) -> bool:
    """Whether ``case`` runs its launch script's settings: InferenceMAX's TensorRT-LLM Llama-70B
    runs (:func:`silicon_data.inferencemax_trtllm_llama`) always and, with ``as_launched`` (the
    reported configuration since 2026-11-27; ``--as-configured``, an experiment, turns it off as
    before), every other row whose script was read (:func:`silicon_data.inferencemax_trtllm`,
    :func:`silicon_data.inferencemax_sglang`). Such a row draws its client's lengths
    (``--random-range-ratio``, :data:`silicon_data.INFERENCEMAX_RANGE_RATIO`) in any case."""
    if inferencemax_trtllm_llama(case) is not None:
        return True
    return as_launched and (inferencemax_trtllm(case) is not None or inferencemax_sglang(case) is not None)


def row_engine(case: SiliconCase, *, as_deployed: bool = False, held_slot: bool = False,
               as_launched: bool = True, overlap: bool = True) -> tuple[Any, dict[str, int]]:
    """The engine spec and flat fleet settings ``case`` is simulated with: the bundled engine file
    (:func:`engine_for`) with its own defaults, or with ``as_deployed=True`` the configuration
    aiconfigurator's generator writes (:func:`silicon_data.deployment`: max batch, token budget,
    SGLang's prefill cap and mixing, TRT-LLM's memory share). ``held_slot=True`` (an experiment,
    ``--held-slot``): the server's batch limit is the row's ``batch_size`` less one, as if one of
    the slots the clients fill were held by something else, so that every new request waits for a
    completion (docs/validation/checks.md, check 1). Rows whose launch script was
    read (:func:`silicon_data.inferencemax_trtllm_llama`: InferenceMAX's
    TensorRT-LLM Llama-70B runs) take that script's ``max_num_tokens`` and batch waiting instead of
    every other choice; with ``as_launched`` (the default) so does every row whose script was read
    (:func:`silicon_data.inferencemax_trtllm`: budget, batch limit, memory share, batch waiting and
    attention-DP balance, per rank; :func:`silicon_data.inferencemax_sglang`: the scheduler's
    receive interval, chunk and prefill caps, running-request limit). Every row runs the MoE
    backends its launch script forces (:func:`silicon_data.moe_backends`) and the overlap
    scheduling its server ran (:func:`silicon_data.overlap_scheduling`; ``overlap=False``, an
    experiment, ``--no-overlap``: every engine plans each step after the previous one ends)."""
    import dataclasses

    from serveplan.specs.catalog import get_engine

    spec = get_engine(engine_for(case.engine, case.engine_version))
    if backends := moe_backends(case):   # a kernel path the launch script forces (silicon_data.moe_backends)
        spec = dataclasses.replace(spec, moe_backends=backends)
    ran = overlap_scheduling(case) if overlap else False   # silicon_data.overlap_scheduling
    if ran is not None and ran != spec.overlap_scheduling:
        spec = dataclasses.replace(spec, overlap_scheduling=ran)
    held = {"max_batch": max(1, (case.batch_size or case.concurrency) - 1) * case.parallel.dp} if held_slot else {}
    trt = inferencemax_trtllm(case) if as_launched or inferencemax_trtllm_llama(case) is not None else None
    if trt is not None:   # the launch script of these rows is known: it replaces every other choice
        dp = case.parallel.dp   # the script's limits are per attention-DP rank
        (iters, ratio), adp = trt.batch_wait, trt.adp_balance
        balance = ({"enable_balance": False} if adp is None else
                   {"enable_balance": True, "timeout_iters": adp[0], "batching_wait_iters": adp[1]})
        spec = spec.with_scheduler_options(batch_wait_timeout_iters=iters, batch_wait_max_tokens_ratio=ratio,
                                           attention_dp_config=balance)
        if trt.memory_fraction is not None:
            spec = dataclasses.replace(spec, memory_fraction=trt.memory_fraction)
        settings = {"token_budget": trt.max_num_tokens * dp, **held}
        if trt.max_batch is not None:
            settings.setdefault("max_batch", trt.max_batch * dp)
        return spec, settings
    sgl = inferencemax_sglang(case) if as_launched else None
    if sgl is not None:
        spec = spec.with_scheduler_options(scheduler_recv_interval=sgl.recv_interval,
                                           max_prefill_tokens=sgl.max_prefill_tokens)
        return spec, {"max_batch": sgl.max_running, "chunk_size": sgl.chunk_size, "token_budget": sgl.chunk_size,
                      **held}
    if not as_deployed:
        return spec, held
    dep = deployment(case)
    changes: dict[str, Any] = {}
    if spec.scheduler == "prefill-priority":   # SGLang's options (the other policies have none of these)
        opts = {"max_prefill_tokens": dep.max_prefill_tokens, "enable_mixed_chunk": dep.mixed}
        spec = spec.with_scheduler_options(**{k: v for k, v in opts.items() if v is not None})
    if dep.memory_fraction is not None:
        changes["memory_fraction"] = dep.memory_fraction
    if changes:
        spec = dataclasses.replace(spec, **changes)
    settings = {"max_batch": dep.max_batch}
    if dep.token_budget is not None:
        settings["token_budget"] = dep.token_budget
    settings.update(held)
    return spec, settings


def predict(case: SiliconCase, profile_name: str | None = None, *, as_deployed: bool = False,
            statistic: str = "run", frontend_us: float | None = None, held_slot: bool = False,
            fixed_lengths: bool = False, send_delay_ms: float = 0.0,
            round_trip_ms: float = 0.0, dispatch_scale: float = 1.0, as_launched: bool = True,
            overlap: bool = True, prefill_host_us: dict[str, float] | None = None) -> dict[str, Any]:
    """Closed-loop prediction of one row: mean TTFT and TPOT over the benchmark's run (or the
    steady window). ``frontend_us`` replaces the engine file's serial frontend time per request
    (``silicon_variants.py`` compares values on H100 rows). Two experiments on the clients' timing
    (docs/validation/checks.md, check 6): ``send_delay_ms`` delays each
    send after a completion by a uniform draw in ``[0, send_delay_ms]`` (seed 0);
    ``dispatch_scale`` (check 8) multiplies the profile's host dispatch time per module, which
    prefill steps pay (decode steps run under CUDA graphs);
    ``round_trip_ms`` adds a fixed round trip between client and engine, so each client's cycle
    and each TTFT gain that much. ``prefill_host_us`` replaces the engine file's host work per
    module of an uncaptured prefill step (``silicon_variants.py --prefill-host-us`` compares
    values on H100 rows). InferenceMAX rows draw their lengths as their client does
    (:func:`row_workload`) unless ``fixed_lengths`` (an experiment, ``--fixed-lengths``: the
    configuration before 2026-11-27); ``as_launched`` and ``overlap``: :func:`row_engine`."""
    import dataclasses

    from serveplan import get_hardware, get_model, get_profile
    from serveplan.sim import SimulationConfig, simulate

    t0 = time.perf_counter()
    par = case.parallel
    hw = get_hardware(case.hardware)
    profile = get_profile(profile_name, case.hardware)   # default: the hardware's own (measured where bundled)
    if dispatch_scale != 1.0:
        profile = profile.with_(dispatch_s={m: v * dispatch_scale for m, v in profile.dispatch_s.items()})
    spec, settings = row_engine(case, as_deployed=as_deployed, held_slot=held_slot, as_launched=as_launched,
                                overlap=overlap)
    if frontend_us is not None:
        spec = dataclasses.replace(spec, frontend_s=frontend_us * 1e-6)
    if prefill_host_us is not None:
        spec = dataclasses.replace(spec, prefill_host_s={k: v * 1e-6 for k, v in prefill_host_us.items() if v})
    cfg = SimulationConfig(
        model=get_model(case.model), hardware=hw, profile=profile, engine=spec,
        strategy="1m",
        tp=par.tp, pp=par.pp, dp=par.dp, ep=par.ep, dtype=case.dtype, kv_dtype=case.kv_dtype,
        concurrency=None if statistic == "wave" else case.concurrency, rate=None, offline=statistic == "wave",
        workload=row_workload(case, run_requests(case.concurrency, statistic),
                              spread=not fixed_lengths or launch_script_known(case, as_launched)), **settings,
    )
    think: float | np.ndarray = round_trip_ms * 1e-3
    if send_delay_ms > 0:   # one draw per request (the experiment of check 6)
        n = len(cfg.workload.input_lengths)
        think = think + np.random.default_rng(0).uniform(0.0, send_delay_ms * 1e-3, size=n)
    res = simulate(cfg, think_s=think)
    cl = res.closed_loop
    assert cl is not None or statistic == "wave"
    if statistic in ("run", "median", "warmed", "wave"):
        rec = res.requests
        avg = np.nanmedian if statistic == "median" else np.nanmean
        # warmed: the first 2 C requests sent are the warm-up
        skip = WARMUP_ROUNDS * case.concurrency if statistic == "warmed" else 0
        kept = np.argsort(rec.arrival, kind="stable")[skip:]
        ttft, tpot = float(avg(rec.ttft[kept])), float(avg(rec.tpot[kept]))
    else:
        ttft, tpot = cl.ttft_s.mean, cl.tpot_s.mean
    ttft += round_trip_ms * 1e-3
    return {"ttft_s": ttft, "tpot_s": tpot, "seconds": time.perf_counter() - t0,
            "preemptions": res.num_preemptions, "max_batch": res.config.fleet.max_batch,
            "kv_capacity_tokens": sum(res.kv_capacity_tokens.values())}


def row_workload(case: SiliconCase, n: int, *, spread: bool = True) -> Any:
    """The benchmark's ``n`` requests: fixed ``isl``/``osl``, or with ``spread`` and an InferenceMAX
    run (``case.length_ratio < 1``) lengths drawn as its client draws them, uniform integers in
    ``[int(L r), L]``, from a fixed seed (``benchmark_serving.py`` seeds NumPy with 0; the draws are
    not the client's own, only their distribution). Rows of fixed-length clients
    (aiconfigurator's gap-analysis runner) keep ``isl``/``osl`` either way."""
    from serveplan.sim import Workload

    if not spread or case.length_ratio >= 1.0:
        return Workload.fixed(case.isl, case.osl, num_requests=n)
    rng = np.random.default_rng(0)
    r = case.length_ratio
    return Workload(input_lengths=rng.integers(int(case.isl * r), case.isl + 1, size=n),
                    output_lengths=rng.integers(max(int(case.osl * r), 2), case.osl + 1, size=n),
                    name=f"random {case.isl}/{case.osl} ratio {r:g}")


def _predict_row(args: tuple[SiliconCase, str | None, bool, str, bool, bool, float, float, float, bool, bool]
                 ) -> tuple[str, dict[str, Any]]:
    (case, profile_name, as_deployed, statistic, held_slot, fixed, delay_ms, round_trip_ms, dispatch_scale,
     as_launched, overlap) = args
    try:
        return case.row_id, predict(case, profile_name, as_deployed=as_deployed, statistic=statistic,
                                    held_slot=held_slot, fixed_lengths=fixed, send_delay_ms=delay_ms,
                                    round_trip_ms=round_trip_ms, dispatch_scale=dispatch_scale,
                                    as_launched=as_launched, overlap=overlap)
    except Exception as exc:  # a row the simulator rejects is reported, not fatal
        return case.row_id, {"error": f"{type(exc).__name__}: {exc}"[:300]}


def rel_err(pred: float, meas: float) -> float:
    return (pred - meas) / meas


def summarise(errs: Iterable[float]) -> tuple[int, float, float]:
    a = np.abs(np.asarray(list(errs), dtype=float))
    if a.size == 0:
        return 0, math.nan, math.nan
    return int(a.size), float(np.median(a)), float(np.mean(a <= WITHIN))


#: ``dTTFT/d(osl) / (TPOT/C)`` of a row's output-length set (``silicon_osl_slope.py``) above which the
#: diagnosis names a wait for a completion (1: every new request waits for one; 0: none).
COMPLETION_WAIT_RATIO = 0.4


def osl_slopes(cases: Iterable[SiliconCase]) -> dict[str, float]:
    """Row id -> the measured output-length slope ratio of its set (rows in sets of at least three
    output lengths; :func:`silicon_osl_slope.slope_ratio`)."""
    from silicon_osl_slope import set_ratios

    return {c.row_id: ratio for rows, ratio in set_ratios(cases) for c in rows}


def diagnose(case: SiliconCase, p: dict[str, Any], osl_slope: float | None = None) -> str:
    """A short reading of why a row is off, from the regime it runs in (and, where its set of output
    lengths gives one, the measured output-length slope :func:`osl_slopes`)."""
    e_ttft, e_tpot = rel_err(p["ttft_s"], case.ttft_s), rel_err(p["tpot_s"], case.tpot_s)
    bits = []
    if abs(e_ttft) >= abs(e_tpot):
        if e_ttft < 0 and osl_slope is not None and osl_slope > COMPLETION_WAIT_RATIO:
            bits.append(f"TTFT under-predicted: the measured TTFT of this configuration grows by {osl_slope:.2f} x "
                        f"TPOT / C per output token (silicon_osl_slope.py), as when each new request waits for "
                        f"the next completion (a batch slot held); the engine's scheduler admits it at once")
        elif case.concurrency > 1 and e_ttft < 0:
            bits.append("TTFT under-predicted: measured TTFT includes queueing and prompt interleaving at "
                        f"concurrency {case.concurrency} that the engine's scheduler spreads over more steps")
        elif e_ttft < 0:
            bits.append("lone-prompt prefill faster than measured: per-request overheads (tokenisation, "
                        "HTTP, scheduling) are not modelled")
        else:
            bits.append("TTFT over-predicted: prefill waits behind steps the engine overlaps or runs faster")
    else:
        if e_tpot < 0:
            bits.append("TPOT under-predicted: decode steps carry per-step host and launch overheads "
                        "that the roofline with default efficiencies does not see")
        else:
            bits.append("TPOT over-predicted: the default efficiencies are too pessimistic for this "
                        "kernel set (e.g. FP8/FP4 attention and GEMMs)")
    from serveplan import get_hardware

    par = case.parallel
    per_node = get_hardware(case.hardware).devices_per_node
    if par.tp * par.dp > per_node:
        bits.append(f"TP {par.tp} x DP {par.dp} spans {par.tp * par.dp // per_node} nodes: the model sends every "
                    "layer's all-reduce over the inter-node links")
    fits = p.get("kv_capacity_tokens", 0) // max(case.isl + case.osl, 1)
    if fits < case.concurrency:
        bits.append(f"the simulated KV cache holds only {fits} requests of {case.isl + case.osl} tokens for "
                    f"{case.concurrency} clients, so requests queue for memory: the memory model of this layout "
                    "(weights, MLA cache on every TP rank, engine reserve) leaves less room than the engine had")
    if p.get("preemptions"):
        bits.append(f"{p['preemptions']} preemptions in the simulated run (KV cache full)")
    return "; ".join(bits)


def table(rows: list[dict[str, Any]], keys: tuple[str, ...], *, aisim: dict[str, Any] | None) -> list[str]:
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[tuple(r[k] for k in keys)].append(r)
    head = [*keys, "rows", "TTFT median abs err", "TTFT within 25%", "TPOT median abs err", "TPOT within 25%"]
    if aisim is not None:
        head += ["AISimulate rows", "AISimulate TTFT median abs err", "AISimulate TPOT median abs err"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for k in sorted(groups):
        g = groups[k]
        n, mt, wt = summarise(r["ttft_err"] for r in g)
        _, mp, wp = summarise(r["tpot_err"] for r in g)
        cells = [*k, str(n), f"{mt:.0%}", f"{wt:.0%}", f"{mp:.0%}", f"{wp:.0%}"]
        if aisim is not None:
            a = [aisim[r["row_id"]] for r in g if r["row_id"] in aisim and "ttft_s" in aisim[r["row_id"]]]
            ids = [r for r in g if r["row_id"] in aisim and "ttft_s" in aisim[r["row_id"]]]
            na, at, _ = summarise(rel_err(x["ttft_s"], r["ttft_meas_s"]) for x, r in zip(a, ids, strict=True))
            _, ap, _ = summarise(rel_err(x["tpot_s"], r["tpot_meas_s"]) for x, r in zip(a, ids, strict=True))
            cells += [str(na), "-" if not na else f"{at:.0%}", "-" if not na else f"{ap:.0%}"]
        out.append("| " + " | ".join(cells) + " |")
    return out


def report(rows: list[dict[str, Any]], failures: dict[str, str], skipped: dict[str, int], *,
           aisim: dict[str, Any] | None, overhead_s: float, seconds: float, jobs: int,
           statistic: str = "run", deployed: frozenset[str] = AS_DEPLOYED, command: str = COMMAND) -> str:
    n_all, mt, wt = summarise(r["ttft_err"] for r in rows)
    _, mp, wp = summarise(r["tpot_err"] for r in rows)
    models = sorted({r["model"] for r in rows})
    systems = sorted({r["system"] for r in rows})
    engines = sorted({r["engine"] for r in rows})
    lines = [
        BEGIN,
        "## Serving accuracy on aiconfigurator's silicon rows",
        "",
        "Development set: NVIDIA aiconfigurator's `silicon_sample.csv` (Apache-2.0, `aiconfigurator-core` 0.12.0",
        "wheel), aggregated rows that serveplan can state (model, system and weight format in the catalog; one",
        "instance). Each row is simulated as measured: closed loop at the row's concurrency, the row's engine with",
        "its defaults (`specs/data/engines`)"
        + (f" except {_engine_list(deployed)} rows, simulated with the settings aiconfigurator's generator writes "
           "for its benchmarks (`silicon_data.deployment`: max batch = the row's batch size, token budget = batch "
           "+ isl + 1,500; `generator/rule_plugin/benchmark/*.rule`), the configuration chosen per engine on H100 "
           "rows only" if deployed else "")
        + ", layout, weight and KV formats (`benchmarks/silicon_data.py`), the overlap scheduling its server ran "
        "(`silicon_data.overlap_scheduling`: TensorRT-LLM and SGLang by default, vLLM from v0.14 and in every "
        "InferenceMAX vLLM script; not aiconfigurator's vLLM 0.12.0 rows), each GPU's bundled efficiency "
        "profile. Lengths are the client's: aiconfigurator's gap-analysis rows fixed input/output lengths, "
        "InferenceMAX's runs drawn as its client's `--random-range-ratio 0.8` draws them (uniform in [0.8 L, L]). "
        "Rows whose launch script was read run as that script launched them: InferenceMAX's TensorRT-LLM "
        "Llama-70B rows (`silicon_data.inferencemax_trtllm_llama`: InferenceX `benchmarks/70b_*_trt_slurm.sh` at "
        "9596d23d7 of 2025-10-29, `--max_num_tokens 16384`, batch waiting of 20 steps / 0.9 of the budget for "
        "1k/1k below TP 8), its TensorRT-LLM DeepSeek-R1 and gpt-oss rows (`silicon_data.inferencemax_trtllm`: "
        "budget, batch limit, memory share, batch waiting, attention-DP balance) and its SGLang DeepSeek-R1 and "
        "Qwen3.5 rows on B200/B300 (`silicon_data.inferencemax_sglang`: receive interval, chunk and prefill caps, "
        "running-request limit). "
        + (f"Predicted TTFT/TPOT are computed as the benchmark computes them: means over every request of a run of "
           f"{BENCH_ROUNDS} x C requests in which all C clients send their first request at once (aiconfigurator's "
           "`eval/benchmarks` runners: `num_prompts = 10 C`, no warm-up excluded), so the first round's queue of C "
           "prompts is in the mean as it is in the measurement."
           if statistic == "run" else
           "Predicted TTFT/TPOT are means over the steady window (requests sent after the first round and "
           "finished before the last send)."),
        "**Four choices were made on H100 rows only, nothing else on these rows**: the serving "
        "frontend's serial work per request (`frontend.per_request_us` in the engine files: vLLM 1,000 us, SGLang "
        "and TensorRT-LLM 0), among 0, 250, 1,000 and 4,000 us (`benchmarks/silicon_variants.py --system "
        "h100-sxm --sample 90 --frontend-us 0,250,1000,4000`); per engine whether its rows run with the "
        "engine's defaults or as aiconfigurator's generator deploys them (`--as-deployed`, docs/validation/harness.md "
        "\"vLLM rows as deployed\"); the host work of an eager prefill step's MoE layer "
        "(`prefill_host_us.moe` in the TensorRT-LLM and SGLang 0.5 engine files: 750 us, among 500, 750, 1,000 "
        "and 1,500 us, docs/validation/host-work.md \"Eager prefill steps\"); and the host work of a vLLM step "
        "too large for its captured graphs per MoE layer (`prefill_host_us.moe` in the vLLM engine files: 500 us, "
        "among 250, 500, 750 and 1,000 us, with and without eager attention/MLP host times, on H100 vLLM rows: "
        "`benchmarks/silicon_variants.py --system h100-sxm --engines vllm --sample 222 --prefill-host-us ...`, "
        "docs/validation/host-work.md \"Uncaptured vLLM steps\"); H200, B200, B300 and GB200 rows are held out and "
        "reported apart. The first three were chosen with the harness before 2026-11-27 (fixed lengths, engines "
        "without overlap scheduling, launched rows with their engine's defaults) and kept, the fourth with the "
        "harness of 2026-11-28"
        + (f"; a per-step overhead of {overhead_s * 1e6:.0f} us is set (`--step-overhead-us`)." if overhead_s else "."),
        "",
        f"Command: `{command}`"
        f" ({seconds:.0f} s for {n_all} rows with {jobs} processes on {platform.node() or 'this machine'};"
        f" {seconds / max(n_all, 1) * jobs:.2f} s per row and process).",
        "",
        f"**All rows: {n_all} rows ({len(models)} models: {', '.join(models)}; {len(systems)} systems; "
        f"{len(engines)} engines): TTFT median |error| {mt:.1%} ({wt:.0%} within 25%), TPOT median |error| "
        f"{mp:.1%} ({wp:.0%} within 25%).**",
        "",
        "By engine, system and weight format:",
        "",
        *table(rows, ("engine", "system", "dtype"), aisim=aisim),
        "",
        "By engine:",
        "",
        *table(rows, ("engine",), aisim=aisim),
        "",
        "By system (H100 rows are where the frontend and MoE host values were chosen; the others are held out):",
        "",
        *table(rows, ("system",), aisim=aisim),
        "",
    ]
    if aisim is not None:
        both = [r for r in rows if r["row_id"] in aisim and "ttft_s" in aisim[r["row_id"]]]
        err_a = [r for r in rows if r["row_id"] in aisim and "error" in aisim[r["row_id"]]]
        if both:
            _, at, awt = summarise(rel_err(aisim[r["row_id"]]["ttft_s"], r["ttft_meas_s"]) for r in both)
            _, ap, awp = summarise(rel_err(aisim[r["row_id"]]["tpot_s"], r["tpot_meas_s"]) for r in both)
            _, st, swt = summarise(r["ttft_err"] for r in both)
            _, sp, swp = summarise(r["tpot_err"] for r in both)
            t_a = float(np.mean([aisim[r["row_id"]]["seconds"] for r in both]))
            t_s = float(np.mean([r["seconds"] for r in both]))
            lines += [
                "### Beside NVIDIA AISimulate on the same rows",
                "",
                f"AISimulate 0.13 development wheel (`benchmarks/aisimulate_silicon.py`, its own virtual environment; "
                f"its bundled timing data, not the rows' engine versions), on {len(both)} rows (a deterministic "
                f"sample of the covered rows; {len(err_a)} more it refused):",
                "",
                "| predictor | TTFT median abs err | TTFT within 25% | TPOT median abs err | TPOT within 25% "
                "| seconds per row |",
                "|---|---|---|---|---|---|",
                f"| serveplan | {st:.0%} | {swt:.0%} | {sp:.0%} | {swp:.0%} | {t_s:.2f} |",
                f"| AISimulate | {at:.0%} | {awt:.0%} | {ap:.0%} | {awp:.0%} | {t_a:.2f} |",
                "",
                "AISimulate's wheel bundles the same `silicon_sample.csv` and aiconfigurator's measured kernel tables",
                "for these GPUs, so its figures here are not a held-out test. serveplan's profiles are fitted to",
                "aiconfigurator's per-kernel tables, never to these rows; the four choices made on rows (above)",
                "were made on H100 rows only.",
                "",
            ]
    worst = sorted(rows, key=lambda r: -max(abs(r["ttft_err"]), abs(r["tpot_err"])))[:12]
    lines += [
        "### Largest errors",
        "",
        "| row | C | measured TTFT / TPOT (ms) | predicted (ms) | error | reading |",
        "|---|---|---|---|---|---|",
    ]
    for r in worst:
        lines.append(
            f"| `{r['row_id']}` | {r['concurrency']} | "
            f"{r['ttft_meas_s'] * 1e3:.1f} / {r['tpot_meas_s'] * 1e3:.2f} | "
            f"{r['ttft_pred_s'] * 1e3:.1f} / {r['tpot_pred_s'] * 1e3:.2f} | "
            f"{r['ttft_err']:+.0%} / {r['tpot_err']:+.0%} | {r['diagnosis']} |")
    lines += ["", "Rows not covered, by cause: "
              + ", ".join(f"{k} {v}" for k, v in sorted(skipped.items(), key=lambda kv: -kv[1])) + "."]
    if failures:
        lines += ["", f"{len(failures)} covered rows the simulator rejected: "
                  + "; ".join(f"`{k}`: {v}" for k, v in list(failures.items())[:5])]
    lines += ["", END]
    return "\n".join(lines)


def write_docs(section: str) -> None:
    text = DOC.read_text()
    if BEGIN in text and END in text:
        pre, rest = text.split(BEGIN, 1)
        _, post = rest.split(END, 1)
        text = pre + section + post
    else:
        text = text.rstrip() + "\n\n" + section + "\n"
    DOC.write_text(text)


def _report_only(args: argparse.Namespace) -> int:
    """Rewrite the docs section from a results file (``--out`` of an earlier run)."""
    saved = json.loads(args.report_only.read_text())
    aisim = json.loads(args.aisimulate.read_text()) if args.aisimulate else None
    rows = saved["rows"]
    section = report(rows, saved["failures"], saved["skipped"], aisim=aisim,
                     overhead_s=saved.get("step_overhead_s", 0.0), seconds=saved["seconds"],
                     jobs=saved["jobs"], statistic=saved.get("statistic", "steady"),
                     deployed=frozenset(saved.get("as_deployed") or ()), command=saved.get("command", COMMAND))
    return _publish(section, rows, args.no_docs, "")


def _publish(section: str, rows: list[dict[str, Any]], no_docs: bool, tail: str, lead: str = "") -> int:
    """Write the docs section (unless ``no_docs``) and print the headline figures."""
    if not no_docs:
        write_docs(section)
    n, mt, wt = summarise(r["ttft_err"] for r in rows)
    _, mp, wp = summarise(r["tpot_err"] for r in rows)
    print(f"{n} rows{lead}: TTFT median |err| {mt:.1%} ({wt:.0%} within 25%), "
          f"TPOT median |err| {mp:.1%} ({wp:.0%} within 25%){tail}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sample", type=int, default=None, help="every k-th covered row, this many in all")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="worker processes")
    ap.add_argument("--aisimulate", type=Path, default=None, help="results of benchmarks/aisimulate_silicon.py")
    ap.add_argument("--no-docs", action="store_true", help="do not rewrite docs/validation/silicon.md")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--profile", default=None,
                    help="efficiency profile for every row (default: each hardware's own; "
                         "default-gpu = assumed factors)")
    ap.add_argument("--as-deployed", default=",".join(sorted(AS_DEPLOYED)), metavar="ENGINES",
                    help="these engines' rows (all, none or a comma list) with the configuration aiconfigurator's "
                         "generator writes (max batch = the row's batch_size, token budget batch + isl + 1500, "
                         "...) instead of the engine's defaults (default: %(default)s, chosen on H100 rows)")
    ap.add_argument("--held-slot", default="none", metavar="ENGINE@VERSION",
                    help="experiment: these engine versions' rows (comma list, e.g. trtllm@1.0.0rc3) with a batch "
                         "limit of the row's batch_size less one (default: none)")
    ap.add_argument("--fixed-lengths", action="store_true",
                    help="experiment: InferenceMAX rows with fixed lengths instead of their client's length "
                         "spread (uniform in [0.8 L, L]; the configuration before 2026-11-27)")
    ap.add_argument("--as-configured", action="store_true",
                    help="experiment: rows whose launch script was read (InferenceMAX's TensorRT-LLM "
                         "DeepSeek-R1 and gpt-oss, SGLang DeepSeek-R1 and Qwen3.5 runs) with the engine's "
                         "defaults instead of that script's settings (the configuration before 2026-11-27)")
    ap.add_argument("--no-overlap", action="store_true",
                    help="experiment: every engine plans each step after the previous one ends (no overlap "
                         "scheduling; the configuration before 2026-11-27)")
    ap.add_argument("--send-delay-ms", type=float, default=0.0, metavar="MS",
                    help="experiment: each send after a completion waits a uniform draw in [0, MS] ms (seed 0)")
    ap.add_argument("--dispatch-scale", type=float, default=1.0, metavar="K",
                    help="experiment: the profile's host dispatch time per module times K (prefill steps pay it)")
    ap.add_argument("--round-trip-ms", type=float, default=0.0, metavar="MS",
                    help="experiment: a fixed client-engine round trip of MS ms (each cycle and each TTFT gain it)")
    ap.add_argument("--statistic", choices=("steady", "run", "median", "warmed", "wave"), default="run",
                    help="steady: means over the steady window; run: means over every request of a run of "
                         f"{BENCH_ROUNDS} x C requests that starts with all C clients at once; median: that "
                         "run's medians (an experiment); warmed: genai-perf's run, 2 C warm-up requests before "
                         "the 10 C measured (an experiment); wave: the C requests sent together as one offline run "
                         "(an experiment)")
    ap.add_argument("--models", default=None,
                    help="comma-separated catalog ids: only these models' rows (default: every covered row)")
    ap.add_argument("--report-only", type=Path, default=None, metavar="JSON",
                    help="write the docs table from the results file of an earlier run instead of simulating")
    args = ap.parse_args(argv)
    if args.report_only is not None:
        return _report_only(args)
    deployed = deployed_engines(args.as_deployed)
    held = held_slot_rows(args.held_slot)
    timing = (args.send_delay_ms, args.round_trip_ms)
    if not (math.isfinite(args.dispatch_scale) and args.dispatch_scale > 0):
        raise SystemExit(f"--dispatch-scale: expected a positive factor, got {args.dispatch_scale}")
    if not all(math.isfinite(v) and v >= 0 for v in timing):
        raise SystemExit(f"--send-delay-ms / --round-trip-ms: expected non-negative milliseconds, got {timing}")
    experiment = (held or args.fixed_lengths or args.as_configured or args.no_overlap or any(timing)
                  or args.statistic in ("median", "warmed", "wave") or args.dispatch_scale != 1.0)
    if experiment and not args.no_docs:
        raise SystemExit("--held-slot, --fixed-lengths, --as-configured, --no-overlap, --send-delay-ms, "
                         "--round-trip-ms, --dispatch-scale and --statistic median, warmed or wave are experiments, "
                         "not the reported configuration: add --no-docs (and --out)")
    cases, skipped = covered_cases(args.sample, set(args.models.split(",")) if args.models else None)
    command = command_of(args)
    overhead = 0.0
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        results = dict(pool.map(_predict_row, [(c, args.profile, c.engine in deployed, args.statistic,
                                                (c.engine, c.engine_version) in held, args.fixed_lengths,
                                                args.send_delay_ms, args.round_trip_ms, args.dispatch_scale,
                                                not args.as_configured, not args.no_overlap)
                                               for c in cases], chunksize=4))
    seconds = time.perf_counter() - t0
    rows, failures = [], {}
    slopes = osl_slopes(cases)
    for c in cases:
        p = results[c.row_id]
        if "error" in p:
            failures[c.row_id] = p["error"]
            continue
        r = {"row_id": c.row_id, "model": c.model, "system": c.hardware, "engine": c.engine,
             "engine_version": c.engine_version, "dtype": c.dtype.value, "kv_dtype": c.kv_dtype.value,
             "tp": c.parallel.tp, "pp": c.parallel.pp, "dp": c.parallel.dp, "ep": c.parallel.ep,
             "isl": c.isl, "osl": c.osl, "concurrency": c.concurrency,
             "ttft_meas_s": c.ttft_s, "tpot_meas_s": c.tpot_s, "ttft_pred_s": p["ttft_s"], "tpot_pred_s": p["tpot_s"],
             "ttft_err": rel_err(p["ttft_s"], c.ttft_s), "tpot_err": rel_err(p["tpot_s"], c.tpot_s),
             "seconds": p["seconds"], "preemptions": p["preemptions"]}
        r["diagnosis"] = diagnose(c, p, slopes.get(c.row_id))
        r["kv_capacity_tokens"] = p["kv_capacity_tokens"]
        rows.append(r)
    aisim = json.loads(args.aisimulate.read_text()) if args.aisimulate else None
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"rows": rows, "failures": failures, "skipped": skipped, "seconds": seconds,
                                    "jobs": args.jobs, "step_overhead_s": overhead, "statistic": args.statistic,
                                    "as_deployed": sorted(deployed), "held_slot": sorted(f"{e}@{v}" for e, v in held),
                                    "command": command}))
    section = report(rows, failures, skipped, aisim=aisim, overhead_s=overhead, seconds=seconds, jobs=args.jobs,
                     statistic=args.statistic, deployed=deployed, command=command)
    return _publish(section, rows, args.no_docs, f"; {len(failures)} failed", f" in {seconds:.0f} s")


if __name__ == "__main__":
    raise SystemExit(main())
