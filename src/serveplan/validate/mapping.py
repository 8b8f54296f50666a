"""A measured row as the tool would be asked it: the settings its source states, the tool's defaults
for the rest, and the prediction of the same figure in the same unit (:func:`predict`).

No value here is fitted on the rows: each row is mapped by these rules, out of the box. Rules written
after residuals of the rows had been seen say so where they are stated (the ShareGPT table, a rate of
``inf``, ITL, ``--async-scheduling``, copied result blocks; 2026-11).

* **Engine, model, hardware, formats**: the bundled release of the row's engine (``vllm``,
  ``sglang``, ``trtllm``) nearest the version it states (the newest not newer than it, else the
  oldest bundled; without a version, the family's default), the catalog's model and hardware (a name
  the catalog does not resolve is not mapped), the stated weight and KV formats (else the model's
  and the engine's defaults). A source that says FP8 of a model published in block-scaled FP8
  (DeepSeek-V3/R1: 128 x 128 weight scales in the checkpoint's ``quantization_config``) ran the
  published weights (``fp8_block``): the engines load that checkpoint as it is, and none of these
  sources says it was re-quantized per tensor (unless the row's settings say ``per-tensor``).
* **Engine flags** written in the row's settings or its source's notes, as the engines spell them:
  ``--gpu-memory-utilization`` / ``--mem-fraction-static`` (memory fraction), ``--max-num-seqs``
  (max batch), ``--max-num-batched-tokens`` (token budget), ``--chunked-prefill-size`` (chunk),
  ``--enable-chunked-prefill=False`` (prefill-first scheduling), vLLM's ``--async-scheduling`` in the row's
  own settings (overlap scheduling, the release's opt-in; read from 2026-11, after the residuals had
  been seen); MTP with ``N steps`` (speculative
  decoding, K = N, the method's default acceptance); a stated batch of prompt tokens per device
  (``workload.tokens_per_device_batch``) is the step's token budget and chunk per attention-DP
  rank. A ``trtllm-bench throughput`` run that states
  no ``--max_batch_size``/``--max_num_tokens`` (``load.batch_limits: trtllm-bench``) takes the limits
  trtllm-bench's heuristic gives and its default KV share, 0.90 (:mod:`~serveplan.validate.trtllm_bench`,
  the rule ``benchmarks/validate_offline_trtllm.py`` applies).
* **Layout**: the stated TP, PP, attention DP and EP (with the redundant expert copies a source states,
  DeepSeek's EPLB); instances fill the stated devices (``dp``
  equal to ``instances`` means independent replicas); an unstated TP is the tool's default (the
  smallest that fits with a useful KV cache).
* **Requests**: fixed lengths as stated; ``+-15%`` is uniform within 15%; ``length_variance: fixed``
  keeps the stated lengths (vLLM's ``random`` dataset at its default ``--random-range-ratio`` 0.0,
  vllm-project/vllm ``vllm/benchmarks/datasets.py`` ``RandomDataset.DEFAULT_RANGE_RATIO``); otherwise
  SGLang's ``random`` dataset is uniform up to the stated length (its default range ratio); a dataset
  the tool bundles as a length table (``sharegpt``: vLLM's serving-benchmark sample of ShareGPT V3,
  :mod:`serveplan.sim.datasets`) is drawn from that table (seed 0), each length scaled so the means
  are the stated ones (the source's printed totals, in its model's tokens); another dataset named without
  lengths is simulated at the mean lengths the bundled dataset files state, and not mapped when
  they state none. (MLPerf's OpenOrca and Mixtral sets have bundled tables, ``length_table``, which the
  goodput check draws from; their Offline rows here keep the means: loadgen's Offline run issues at
  least 24,576 samples, where 2,000 simulated requests over 8 replicas leave 250 each, and the spread's
  long requests then finish alone at small batches: one H200, TP1 Llama-2-70B fp8 under TensorRT-LLM
  drawing from ``mlperf-openorca`` gives 2,321 output tokens/s with 250 requests against 3,467 with
  3,000, measured 2026-11-30.) (The ShareGPT table replaced fixed mean lengths in 2026-11, after the residuals of
  the ShareGPT rows had been seen: a burst of equal requests ends together, where ShareGPT's spread
  leaves long requests running at small batches at the end, and short outputs report the TPOT of the
  prefills they wait through.) Counts as stated, else 2,000 offline, 1,000 open loop, ``max(8 C, 200)`` in a
  closed loop of ``C`` clients (at most 4,000).
* **Load**: offline (every request queued in the engine at t=0: ``vllm bench throughput``,
  ``trtllm-bench``, ``LLM.generate``); a rate of ``inf`` (a serving benchmark such as ``vllm bench
  serve`` sends every request at t=0 to a running server: ``vllm/benchmarks/serve.py`` ``get_request``
  yields without waiting when the rate is ``inf``, and no ``--max-concurrency`` caps them) is a closed
  loop of as many clients as requests, each sending one: the server's own defaults (the engine's
  online limits, not the offline ones) and its API server's per-request work apply, and every request
  is in the statistics (2026-11, after the residuals had been seen; it had been an offline run); a
  closed loop of the stated
  concurrency, an open loop at the stated rate; a static batch of ``N`` (TensorRT-LLM's
  ``static_batch``) is ``serveplan estimate --batch N --output-len``'s static batch, and a
  decode-only run at a stated batch per device is the estimate of that decode step.
* **Figure**: the same statistic (mean, P50, P90, P99) of the simulated requests (a closed loop's
  steady window); ITL over the simulated tokens, as ``vllm bench serve`` computes it (one gap per
  token after the first, :class:`~serveplan.sim.metrics.GapLog`, over the whole run; 2026-11, after
  the residuals had been seen: it had been read as TPOT); the same rate
  normalised as the unit says (whole system, per
  GPU, per node of 8); a ratio between two hardware is the ratio of two predictions.

A row is not mapped (:class:`Unmappable`, with the reason) when its run is printed, figure for figure,
for another model or accelerator too (``copy_of``: a copied result block, neither copy used; a rule of
2026-11, after the residuals had been seen), when
the tool lacks its model,
hardware, engine or format, when the source does not state what the simulation needs (input
lengths, the concurrency of a peak over a sweep, a production trace, the weight format of an MLPerf
submission: the closed division lets each submitter choose it), for an MLPerf Server result (a goodput
that ``benchmarks/validate_goodput.py`` checks), when its figure is a bound
(``lower bound``, ``up to``) or a ratio between settings the tool does not model (two engine
releases, another engine, an ablation), and a power figure (``benchmarks/validate_energy.py``
checks the energy model against those).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from serveplan.errors import InfeasibleError, SpecError
from serveplan.estimator.api import estimate, resolve_specs
from serveplan.sim import SimulationResult, Workload, simulate, simulation_config
from serveplan.sim.serving import default_tp, engine_estimator
from serveplan.sim.workload import LengthDist
from serveplan.specs.catalog import get_engine, get_hardware, list_datasets, list_engines
from serveplan.specs.engine import EngineSpec
from serveplan.specs.parallel import ParallelConfig
from serveplan.specs.speculative import SpecDecodeConfig
from serveplan.units import DType
from serveplan.validate import trtllm_bench
from serveplan.validate.confidence import accelerator_family, model_class
from serveplan.validate.rows import MODELLED_ENGINES, MeasuredRow, dataset_lengths

#: the most requests one row simulates (the figure is a steady rate or a statistic)
MAX_REQUESTS = 4000
#: a unit that says the figure is not a measurement
_BOUND = re.compile(r"lower bound|upper figure|up to|approx|~", re.I)
#: engine flags read from a row's settings (module doc): flag -> (fleet option, type)
_FLAGS = (
    (re.compile(r"--(?:gpu-memory-utilization|mem-fraction-static)[ =]([0-9.]+)"), "memory_fraction", float),
    (re.compile(r"--(?:max-num-seqs|max-running-requests|max_batch_size)[ =](\d+)"), "max_batch", int),
    (re.compile(r"--(?:max-num-batched-tokens|max_num_tokens)[ =](\d+)"), "token_budget", int),
    (re.compile(r"--chunked-prefill-size[ =](\d+)"), "chunk_size", int),
)
_NO_CHUNKING = re.compile(r"--enable-chunked-prefill[ =]False", re.I)
#: vLLM's opt-in asynchronous scheduling (v0.10-v0.13; the default from v0.14.0): the next step is planned while
#: this one runs (vllm/config/scheduler.py SchedulerConfig.async_scheduling)
_ASYNC = re.compile(r"--async-scheduling\b(?![ =](?:False|false|0)\b)")
_PER_TENSOR = re.compile(r"per[- ]tensor", re.I)
_VERSION = re.compile(r"\s*(?:>=\s*)?v?(\d+(?:\.\d+)+)")
_MTP = re.compile(r"\b(?:MTP|NEXTN)\b.*?(\d+) steps", re.I)
_SPEC_FLAGS = re.compile(r"--speculative[-_](?:algorithm|config)\b")
_HW_RATIO = re.compile(r"x (\S+) vs (\S+) throughput", re.I)


def simulation_key(row: MeasuredRow) -> str:
    """What a row's simulation depends on: every stated setting, not its own figure (metric, statistic,
    value, unit). Rows with one key are predicted from one simulation (the figures of one benchmark run);
    the simulation is seeded, so sharing it changes no prediction."""
    w = row.workload
    prefill_only = row.metric.startswith(("input_", "total_")) and w.get("output_len", w.get("output_len_mean")) is None
    return json.dumps([row.source, row.model, row.hardware, row.num_devices, row.engine, row.engine_version, row.layout,
                       row.dtype, row.kv_dtype, w, row.load, row.settings, prefill_only], sort_keys=True, default=str)


class Unmappable(Exception):
    """A row the tool cannot be asked as its source states it; the message says why."""


@dataclass(frozen=True, slots=True)
class Prediction:
    """The tool's figure for a row, in the row's unit, and what it was predicted as."""

    value: float
    regime: str
    context_tokens: float
    family: str
    model_class: str
    engine: str
    how: str
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class _Setup:
    """A row resolved: specs, formats, layout, requests."""

    engine: EngineSpec
    model: Any
    hardware: Any
    profile: Any
    dtype: str | None
    kv_dtype: str | None
    parallel: ParallelConfig
    instances: int
    options: Mapping[str, Any]
    workload: Workload
    context_tokens: float
    spec: SpecDecodeConfig | None
    notes: tuple[str, ...]

    @property
    def devices(self) -> int:
        return self.instances * self.parallel.num_devices


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, int | float):
        return float(v)
    if isinstance(v, str) and v.strip().lower() == "inf":
        return math.inf
    return None


def _version(text: str | None) -> tuple[int, ...] | None:
    """The release number a stated engine version starts with (``0.5.4.post2`` -> (0, 5, 4),
    ``>=0.25.0`` -> (0, 25, 0)); ``None`` for anything else (a nightly, an internal build, another
    product's version)."""
    m = _VERSION.match(text or "")
    return tuple(int(p) for p in m.group(1).split(".")) if m else None


def _engine(row: MeasuredRow) -> EngineSpec:
    """The bundled release of the row's engine nearest the version it states: the newest not newer
    than it, else the oldest bundled (a later release's defaults did not exist yet); without a
    readable version, the family's default release."""
    if row.engine not in MODELLED_ENGINES:
        raise Unmappable(f"engine {row.engine!r} is not modelled (the tool models {', '.join(MODELLED_ENGINES)})")
    stated = _version(row.engine_version)
    releases = _releases(row.engine)
    if stated is None or not releases:
        return get_engine(row.engine)
    older = [name for v, name in releases if v <= stated]
    return get_engine(older[-1] if older else releases[0][1])


@cache
def _releases(family: str) -> tuple[tuple[tuple[int, ...], str], ...]:
    """The bundled releases of an engine family with a readable version, oldest first."""
    return tuple(sorted((v, name) for name in list_engines() if name.startswith(family + "-")
                        for v in [_version(get_engine(name).version)] if v is not None))


def _format(text: str | None, what: str) -> str | None:
    if text is None:
        return None
    try:
        return DType.parse(text).value
    except (SpecError, ValueError):
        raise Unmappable(f"{what} format {text!r} is not one the tool takes") from None


def _flags(row: MeasuredRow) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pattern, name, kind in _FLAGS:
        m = pattern.search(row.settings)
        if m:
            out[name] = kind(m.group(1))
    if _NO_CHUNKING.search(row.settings):
        out["scheduler"] = "prefill-first"
    return out


def _spec(row: MeasuredRow) -> SpecDecodeConfig | None:
    m = _MTP.search(row.stated)
    if not m or "no speculation" in row.stated.lower():
        if _SPEC_FLAGS.search(row.stated):
            raise Unmappable("speculative decoding stated by engine flags (draft method and tree) the mapping "
                             "does not read")
        return None
    return SpecDecodeConfig.of("mtp", int(m.group(1)))


def _lengths(row: MeasuredRow) -> tuple[float, float, str, tuple[str, ...]]:
    """Input and output length (mean), how they vary (``fixed``, ``uniform15``, ``uniform-to``) and notes."""
    w = row.workload
    inp = _num(w.get("input_len", w.get("input_len_mean")))
    out = _num(w.get("output_len", w.get("output_len_mean")))
    notes: tuple[str, ...] = ()
    ds = w.get("dataset")
    if inp is None and out is None and ds:
        stats = dataset_lengths().get(str(ds))
        if not stats or stats["input_mean"] is None or stats["output_mean"] is None:
            raise Unmappable(f"the request lengths of dataset {ds!r} are not stated in the bundled data")
        inp, out = float(stats["input_mean"]), float(stats["output_mean"])
        notes = (f"{ds} simulated at its stated mean lengths ({inp:g} in, {out:g} out, from {stats['source']})",)
    if inp is None:
        raise Unmappable("the input length is not stated")
    if out is None:
        if (_static_batch(row) or 0) < 0:
            out, notes = 1.0, (*notes, "decode-only: the stated prompt is the context")
        elif row.metric.startswith(("input_", "total_")):
            out, notes = 1.0, (*notes, "prefill-only: one output token")
        else:
            raise Unmappable("the output length is not stated")
    variance = str(w.get("length_variance") or "")
    if ds and str(ds) in list_datasets():
        return inp, out, f"table:{ds}", (*notes, f"lengths drawn from the bundled {ds} table, scaled to means of "
                                                  f"{inp:g} in, {out:g} out")
    if "15%" in variance:
        return inp, out, "uniform15", notes
    if variance == "fixed":
        return inp, out, "fixed", notes
    if ds == "random":
        return inp, out, "uniform-to", (*notes, "SGLang random dataset: lengths uniform up to the stated ones")
    return inp, out, "fixed", notes


def _workload(row: MeasuredRow, n: int) -> tuple[Workload, float, tuple[str, ...]]:
    inp, out, how, notes = _lengths(row)
    if how.startswith("table:"):
        wl = _drawn(how.removeprefix("table:"), n, inp, out)
        return wl, float(np.mean(wl.input_lengths) + np.mean(wl.output_lengths)), notes
    if how == "fixed":
        wl = Workload.fixed(max(1, round(inp)), max(1, round(out)), num_requests=n)
        return wl, inp + out, notes
    if how == "uniform15":
        lo_i, hi_i, lo_o, hi_o = round(0.85 * inp), round(1.15 * inp), round(0.85 * out), round(1.15 * out)
    else:
        lo_i, hi_i, lo_o, hi_o = 1, round(inp), 1, round(out)
    wl = Workload.from_distributions(LengthDist.parse(f"uniform:{lo_i},{hi_i}"),
                                     LengthDist.parse(f"uniform:{lo_o},{hi_o}"), n, seed=0)
    return wl, float(np.mean(wl.input_lengths) + np.mean(wl.output_lengths)), notes


def _drawn(name: str, n: int, mean_in: float, mean_out: float) -> Workload:
    """``n`` requests drawn from the bundled length table ``name`` (seed 0), each length scaled by the
    stated mean over the drawn mean (at least one token): the source's printed totals, counted with
    its model's tokenizer, with the table's spread."""
    return Workload.from_dataset(name, n, seed=0).scaled_to(mean_in, mean_out, name=f"{name} (scaled)")


def _requests(row: MeasuredRow) -> int:
    stated = _num(row.load.get("requests")) or _num(row.workload.get("requests")) or _num(row.workload.get("prompts"))
    if stated:
        return int(min(stated, MAX_REQUESTS))
    kind = row.load.get("kind")
    conc = _num(row.load.get("value"))
    if kind == "concurrency" and conc:
        return int(min(max(8 * conc, 200), MAX_REQUESTS))
    return 2000 if kind == "offline" else 1000


def _layout(row: MeasuredRow, eng: EngineSpec, m: Any, hw: Any, pr: Any, dtype: str | None,
            kv: str | None, longest: int) -> tuple[ParallelConfig, int]:
    lay = dict(row.layout or {})
    if any(isinstance(v, str) for k, v in lay.items() if k != "note"):
        raise Unmappable(f"the layout is stated as text ({', '.join(f'{k}: {v}' for k, v in lay.items())})")
    if (lay.get("prefill_instances") or 0) > 0 and (lay.get("decode_instances") or 0) > 0:
        raise Unmappable("a disaggregated fleet whose instance layouts are not all stated")
    pp, ep = int(lay.get("pp") or 1), int(lay.get("ep") or 1)
    redundant = int(lay.get("redundant_experts") or 0)
    dp, inst = int(lay.get("dp") or 1), lay.get("instances")
    if inst and dp == inst:      # data-parallel replicas, not attention ranks of one instance
        dp = 1
    tp = lay.get("tp")
    if tp is None:
        try:
            tp, _ = default_tp(eng, m, hw, pr, longest_request=longest, pp=pp, dtype=dtype, kv_dtype=kv)
        except InfeasibleError as exc:
            raise Unmappable(f"no default layout: {exc}") from None
    par = ParallelConfig(tp=int(tp), pp=pp, dp=dp, ep=ep, redundant_experts=redundant)
    try:
        par.validate_for(m)
    except SpecError as exc:
        raise Unmappable(f"the stated layout does not fit the model: {exc}") from None
    devices = row.num_devices
    if inst is None:
        inst = max(1, (devices or par.num_devices) // par.num_devices)
    if devices and int(inst) * par.num_devices != devices:
        raise Unmappable(f"the layout ({par.label()} x {inst}) does not account for the {devices} devices stated")
    return par, int(inst)


def _setup(row: MeasuredRow, hardware: str | None = None) -> _Setup:
    eng = _engine(row)
    try:
        m, hw, pr = resolve_specs(row.model, hardware or row.hardware, None)
    except SpecError as exc:
        raise Unmappable(str(exc).split(";")[0]) from None
    dtype, kv = _format(row.dtype, "weight"), _format(row.kv_dtype, "KV-cache")
    if dtype == DType.FP8.value and m.dtype is DType.FP8_BLOCK and not _PER_TENSOR.search(row.settings):
        dtype = DType.FP8_BLOCK.value   # the published block-scaled checkpoint (module docstring)
    wl, context, notes = _workload(row, _requests(row))
    par, inst = _layout(row, eng, m, hw, pr, dtype, kv, int(wl.max_tokens))
    opts = _flags(row)
    per_device = _num(row.workload.get("tokens_per_device_batch"))
    if per_device and "token_budget" not in opts and "chunk_size" not in opts:
        # a stated batch of prompt tokens per device (per attention-DP rank): the instance's step
        # budget and chunk are that times its ranks (SGLang divides --chunked-prefill-size by the
        # DP size, and the simulator splits an instance's budget over its ranks the same way)
        opts["token_budget"] = opts["chunk_size"] = int(per_device) * par.dp
    if row.load.get("batch_limits") == "trtllm-bench":
        opts = _trtllm_bench_limits(row, m, hw, par, dtype, kv, wl) | opts
    if "memory_fraction" in opts:
        eng = dataclasses.replace(eng, memory_fraction=opts.pop("memory_fraction"))
    if eng.engine == "vllm" and not eng.overlap_scheduling and _ASYNC.search(row.stated):
        eng = dataclasses.replace(eng, overlap_scheduling=True)
    return _Setup(engine=eng, model=m, hardware=hw, profile=pr, dtype=dtype, kv_dtype=kv, parallel=par, instances=inst,
                  options=opts, workload=wl, context_tokens=context, spec=_spec(row), notes=notes)


def _trtllm_bench_limits(row: MeasuredRow, m: Any, hw: Any, par: ParallelConfig, dtype: str | None,
                         kv: str | None, wl: Workload) -> dict[str, Any]:
    """The batch limits and KV share ``trtllm-bench throughput`` chooses when given none
    (:mod:`~serveplan.validate.trtllm_bench`), for a row of fixed lengths."""
    isl, osl = set(wl.input_lengths.tolist()), set(wl.output_lengths.tolist())
    if len(isl) != 1 or len(osl) != 1:
        raise Unmappable("trtllm-bench's batch limits are stated for fixed lengths only")
    if dtype not in trtllm_bench.BYTES_PER_ELEM or kv != "fp8":
        raise Unmappable(f"trtllm-bench's batch limits for weights {dtype} and KV cache {kv} (the rule covers "
                         f"{', '.join(trtllm_bench.BYTES_PER_ELEM)} weights with an FP8 KV cache)")
    max_bs, max_tokens = trtllm_bench.bench_settings(m, hw, tp=par.tp, pp=par.pp, dtype=dtype, isl=int(isl.pop()),
                                                     osl=int(osl.pop()), kv_dtype=kv)
    return {"max_batch": max_bs, "token_budget": max_tokens, "memory_fraction": trtllm_bench.KV_FRACTION}


def _static_batch(row: MeasuredRow) -> int | None:
    b = _num(row.load.get("static_batch"))
    if b:
        return int(b)
    per = _num(row.workload.get("batch_per_device")) or _num(row.load.get("per_device"))
    dec = (row.layout or {}).get("decode_instances")
    if per and dec and not (row.layout or {}).get("prefill_instances"):
        return -int(per)          # negative: a decode step at this batch per attention rank
    return None


def _unit_scale(row: MeasuredRow, devices: int) -> float:
    """Factor from the whole system's rate to the row's unit."""
    u = row.unit.lower()
    if "per gpu" in u or "/gpu" in u or row.metric.endswith("_per_gpu"):
        return 1.0 / devices
    node = re.search(r"per node \((\d+) gpus\)", u)
    if node:
        return int(node.group(1)) / devices
    if "per 4-gpu instance" in u:
        return 4.0 / devices
    return 1.0


def _stat(stats: Any, statistic: str | None) -> float:
    key = {"mean": "mean", "p50": "p50", "median": "p50", "p90": "p90", "p99": "p99", None: "mean"}.get(statistic)
    if key is None:
        raise Unmappable(f"statistic {statistic!r} is not one the simulator reports")
    return float(getattr(stats, key))


def _figure(row: MeasuredRow, res: SimulationResult, st: _Setup) -> float:
    """The row's figure from a simulation (whole-system rates scaled to the row's unit)."""
    cl = res.closed_loop
    src = cl if cl is not None else res
    mean_in = float(np.mean(st.workload.input_lengths))
    mean_out = float(np.mean(st.workload.output_lengths))
    rps = src.throughput_rps
    metric = row.metric
    if metric == "itl_s" and res.itl_s is not None:   # over tokens (the whole run; a closed loop's too)
        return _stat(res.itl_s, row.statistic)
    if metric in ("ttft_s", "tpot_s", "itl_s", "e2e_s"):
        stats = {"ttft_s": src.ttft_s, "tpot_s": src.tpot_s, "itl_s": src.tpot_s, "e2e_s": src.e2e_s}[metric]
        return _stat(stats, row.statistic)
    if metric == "tokens_per_s_per_user":
        return 1.0 / src.tpot_s.mean
    rate = {"output": src.output_tokens_per_s, "input": rps * mean_in, "total": rps * (mean_in + mean_out),
            "requests": rps}[metric.split("_")[0]]
    return rate * _unit_scale(row, st.devices)


def _regime(row: MeasuredRow, static: bool) -> str:
    if static:
        return "static batch"
    kind = row.load.get("kind")
    if kind == "offline" or _num(row.load.get("value")) == math.inf:
        return "offline"
    return "closed loop" if kind == "concurrency" else "open loop"


def _simulate(row: MeasuredRow, st: _Setup, sims: dict[str, SimulationResult] | None = None) -> tuple[float, str]:
    load = row.load
    kind, value = load.get("kind"), _num(load.get("value"))
    rate: float | None = None
    offline, conc = False, None
    if kind == "offline":
        offline = True
    elif value == math.inf:   # every request sent at t=0 to a server (module doc, "Load")
        conc = st.workload.num_requests
    elif kind == "concurrency" and value:
        conc = int(value)
    elif kind == "rate" and value:
        rate = value
    elif kind == "server" and row.source.startswith("mlperf-inference"):
        raise Unmappable("an MLPerf Server result: a goodput (the highest loadgen Poisson rate whose P99 TTFT and TPOT "
                         "meet the limits), checked by benchmarks/validate_goodput.py")
    elif kind == "server":
        raise Unmappable("production traffic or a trace replay: the load is not one the source states as numbers")
    else:
        raise Unmappable(f"the load is not stated as a number ({', '.join(f'{k}: {v}' for k, v in load.items())})")
    par = st.parallel
    if par.redundant_experts:
        raise Unmappable("redundant experts in a simulated fleet (simulation_config takes none; the estimate of a "
                         "step does)")
    cfg = simulation_config(
        engine=st.engine, strategy=f"{st.instances}m",
        fleet_options={"tp": par.tp, "pp": par.pp, "dp": par.dp, "ep": par.ep, **st.options},
        model=st.model, hardware=st.hardware, profile=st.profile, rate=rate, workload=st.workload,
        dtype=st.dtype, kv_dtype=st.kv_dtype, offline=offline, concurrency=conc, spec=st.spec,
        allow_long_context=True)
    key = f"{simulation_key(row)}|{st.hardware.name}"
    res = sims.get(key) if sims is not None else None
    if res is None:
        res = simulate(cfg, itl=True)
        if sims is not None:
            sims[key] = res
    load_text = ("offline" if offline else "every request at t=0 to the server" if value == math.inf
                 else f"concurrency {conc}" if conc else f"rate {rate:g}")
    how = (f"simulate {st.instances} x {par.label()} {st.model.name} on {st.hardware.name} ({st.engine.label}), "
           f"{st.workload.num_requests} requests, {load_text}")
    return _figure(row, res, st), how


def _estimate(row: MeasuredRow, st: _Setup, batch: int) -> tuple[float, str]:
    par = st.parallel
    _, util, kv = engine_estimator(st.engine, st.model, st.hardware, st.profile, par, dtype=st.dtype,
                                   kv_dtype=st.kv_dtype)
    mean_in = int(round(float(np.mean(st.workload.input_lengths))))
    mean_out = int(round(float(np.mean(st.workload.output_lengths))))
    if batch < 0:    # a decode step at a batch per attention rank, context = the prompt
        n = -batch * par.dp
        res = estimate(st.model, st.hardware, profile=st.profile, parallel=par, dtype=st.dtype, kv_dtype=kv,
                       batch=n, input_len=mean_in, phase="decode", context_len=mean_in, engine=st.engine,
                       memory_utilization=util, allow_long_context=True)
        rate = n / res.total_s * st.instances
        how = f"estimate a decode step of {n} sequences at context {mean_in} ({par.label()})"
    else:
        res = estimate(st.model, st.hardware, profile=st.profile, parallel=par, dtype=st.dtype, kv_dtype=kv,
                       batch=batch, input_len=mean_in, output_len=mean_out, engine=st.engine,
                       memory_utilization=util, allow_long_context=True)
        assert res.static is not None
        rate = res.static.output_tokens_per_s * st.instances
        how = f"estimate a static batch of {batch} x ({mean_in} in, {mean_out} out) ({par.label()})"
    if row.metric.split("_")[0] != "output":
        raise Unmappable(f"a static batch's {row.metric} is not a figure the estimate gives")
    return rate * _unit_scale(row, st.devices), how


def _one(row: MeasuredRow, hardware: str | None = None,
         sims: dict[str, SimulationResult] | None = None) -> tuple[float, _Setup, str, bool]:
    st = _setup(row, hardware)
    batch = _static_batch(row)
    if batch is not None:
        value, how = _estimate(row, st, batch)
        return value, st, how, True
    value, how = _simulate(row, st, sims)
    return value, st, how, False


def predict(row: MeasuredRow, *, sims: dict[str, SimulationResult] | None = None) -> Prediction:
    """The tool's prediction of ``row`` (module doc). ``sims``: the caller's simulations by
    :func:`simulation_key` (the figures of one run then share one simulation; seeded, so sharing
    changes no prediction); ``None``: nothing kept.

    Raises
    ------
    Unmappable
        The row cannot be asked as its source states it (the message says why).
    """
    if row.copy_of:
        raise Unmappable(f"every printed figure of its run equals one published for another model or accelerator "
                         f"({row.copy_of}): one of the two result blocks is a copy, and which was measured is unknown")
    if row.kind == "power":
        raise Unmappable("a power figure: the energy model is checked against it by benchmarks/validate_energy.py "
                         "(docs/cost-energy.md), which sweeps the input lengths the logs do not state")
    if _BOUND.search(row.unit):
        raise Unmappable(f"the source prints a bound, not a measurement ({row.unit})")
    if row.metric == "speedup":
        return _ratio(row)
    if row.source.startswith("mlperf-") and row.dtype is None:
        raise Unmappable("the weight format is not stated: MLPerf's closed division leaves the numerics to the "
                         "submitter (FP8 and FP4 submissions meet its accuracy targets), so the model's own format "
                         "would be a guess")
    value, st, how, static = _one(row, sims=sims)
    if not (math.isfinite(value) and value > 0):
        raise Unmappable(f"the simulation gives no {row.metric} ({value!r})")
    return Prediction(value=value, regime=_regime(row, static), context_tokens=st.context_tokens,
                      family=accelerator_family(st.hardware.name), model_class=model_class(st.model),
                      engine=st.engine.engine, how=how, notes=st.notes)


def _ratio(row: MeasuredRow) -> Prediction:
    m = _HW_RATIO.search(row.unit)
    if not m:
        raise Unmappable(f"a ratio between settings the tool does not model ({row.unit})")
    try:
        num_hw, den_hw = get_hardware(m.group(1)).name, get_hardware(m.group(2)).name
    except SpecError as exc:
        raise Unmappable(str(exc).split(";")[0]) from None
    base = dataclasses.replace(row, metric="output_tokens_per_s", unit="tok/s")
    a, st, how, static = _one(base, num_hw)
    b, _, _, _ = _one(base, den_hw)
    return Prediction(value=a / b, regime=_regime(row, static), context_tokens=st.context_tokens,
                      family=accelerator_family(st.hardware.name), model_class=model_class(st.model),
                      engine=st.engine.engine, how=f"{how}, divided by the same on {den_hw}", notes=st.notes)
