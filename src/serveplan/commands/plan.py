"""``plan``: rank every collocated and disaggregated strategy within a device budget by goodput per
device (``serveplan optimize``, the web page's Plan panel, :func:`serveplan.plan_serving`).

:class:`PlanOptions` is the question; :func:`prepare` checks it and builds the search (space,
settings per workload) before any work; :func:`run` answers it (:class:`PlanResult`), whose
:meth:`~PlanResult.document` is what ``--json`` prints and the page's API returns.

Defaults: a deployment people run today, Llama-3.1-70B on up to 8 x H100 under the bundled vLLM
release (its scheduler, limits, memory rule, KV format, kernels and host work) with the Azure
conversation trace's length mix, SLO P90 TTFT 1 s and TPOT 50 ms. BestServe's Figure 11 setting is
``--engine bestserve --model codellama-34b --hardware ascend-910b3 --scenario op2 --slo-ttft 1.5
--slo-tpot 0.07``.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from serveplan.calibrate.bands import require_uncertainty
from serveplan.commands.checks import check_search
from serveplan.commands.options import CommandOptions, opt
from serveplan.commands.parsing import parse_int_list, parse_spec_tokens
from serveplan.errors import InfeasibleError, SpecError, check_int, check_number
from serveplan.estimator.api import resolve_specs
from serveplan.optimize.economics import OBJECTIVES
from serveplan.optimize.goodput import GoodputSettings
from serveplan.optimize.search import SearchMethod, SearchResult, merge_results, on_device, search_many
from serveplan.optimize.space import SearchSpace, search_defaults, spec_choices
from serveplan.report.deploy import DEPLOYABLE, LaunchPlan, launch_plan
from serveplan.report.documents import optimize_document
from serveplan.report.ranking import (
    plot_goodput_bars,
    plot_pareto,
    plot_throughput_frontier,
    write_csv,
    write_frontier_csv,
)
from serveplan.sim import SLO, Fidelity, Workload
from serveplan.sim.config import check_context
from serveplan.sim.fleet import DeviceType
from serveplan.sim.workload import build_workloads
from serveplan.specs.catalog import get_engine
from serveplan.specs.engine import EngineSpec
from serveplan.specs.hardware import DeviceSpec
from serveplan.specs.model import ModelSpec
from serveplan.specs.prices import TIERS, PriceTable, price_table
from serveplan.specs.profile import EfficiencyProfile
from serveplan.units import DType, json_safe
from serveplan.validate.bands import GoodputBand, goodput_bands

#: the length mix used when no request source is given: the Azure LLM inference trace's
#: conversation service (2023), a real chat mix (``specs/data/datasets/azure-conv.yaml``)
DEFAULT_DATASET = "azure-conv"
#: search methods of the front ends: the default composes pool measurements (``auto``)
METHOD_DEFAULT = SearchMethod.AUTO


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanOptions(CommandOptions):
    """The question ``serveplan optimize`` answers (module doc)."""

    model: str = opt("llama-3.1-70b", "--model", "-m", help="Catalog id, Hugging Face id or path to a config.json.")
    hardware: str = opt("h100-sxm", "--hardware", "-H", help=(
        "Catalog id or hardware YAML path; several comma-separated (h100-sxm,l40s) rank each type alone and the "
        "disaggregated fleets with prefill on one type and decode on another."))
    profile: str | None = opt(None, "--profile", "-p", help="Efficiency profile id or YAML path (default: the "
                                                                "hardware's measured profile, else default-gpu).")
    devices: str = opt("8", "--devices", help=(
        "Device budget (strategies may use fewer): N of each hardware type, or TYPE=N per type, comma-separated "
        "(h100-sxm=8,l40s=16)."))
    tp: str = opt("1,2,4,8", "--tp", help="Admissible TP sizes, comma-separated.")
    pp: str = opt("1", "--pp", help="Admissible pipeline sizes.")
    dp: str = opt("1", "--dp", help="Admissible data-parallel attention sizes (ranks per instance).")
    ep: str = opt("1", "--ep", help="Admissible expert-parallel sizes (MoE).")
    engine: str = opt("vllm", "--engine", "-e", help=(
        "Serving engine whose scheduler, limits, memory rule, KV format, kernels and host work apply: vllm, "
        "sglang, trtllm, a versioned id (vllm-0.11), an engine YAML, or bestserve (BestServe's 2024 testbed)."))
    kv_dtype: str | None = opt(None, "--kv-dtype", help="KV-cache format (default: the engine's for the weights).")
    memory_fraction: float | None = opt(None, "--memory-fraction", help=(
        "The engine's memory fraction (vLLM --gpu-memory-utilization, SGLang --mem-fraction-static, TensorRT-LLM "
        "free_gpu_memory_fraction; default: the engine's)."))
    max_batch: str | None = opt(None, "--max-batch", help="Maximum batch sizes (sequences per step) per instance "
                                                           "(default: the engine's).")
    prefill_max_batch: int | None = opt(None, "--prefill-max-batch", help=(
        "Prompts per prefill step (0 = no limit; default: the engine's)."))
    schedulers: str | None = opt(None, "--schedulers", help=(
        "Collocated schedulers: prefill-first, chunked-prefill (alias sarathi), prefill-priority, "
        "inflight-no-evict (default: the engine's)."))
    chunk_sizes: str | None = opt(None, "--chunk-sizes", help=(
        "Chunk sizes (token budgets) of chunked schedulers (default: the engine's token budget)."))
    no_collocated: bool = opt(False, "--no-collocated", help="Only disaggregated strategies.")
    no_disaggregated: bool = opt(False, "--no-disaggregated", help="Only collocated strategies.")
    same_tp: bool = opt(False, "--same-tp", help="Prefill and decode instances share one TP size.")
    scenario: str | None = opt(None, "--scenario", help=(
        "BestServe scenario: op1 (8192/512), op2 (2048/64), op3 (1024/64), op4 (256/2048); several comma-separated."))
    dataset: str | None = opt(None, "--dataset", help=(
        "Real length mix: azure-conv (the default when no other source is given), azure-code, arxiv-sum, sharegpt, "
        "mlperf-openorca, mlperf-mixtral."))
    input_len: int | None = opt(None, "--input-len", help="Fixed input length, tokens (with --output-len).")
    output_len: int | None = opt(None, "--output-len", help="Fixed output length, tokens.")
    length_dist: str | None = opt(None, "--length-dist", help=(
        "'INPUT;OUTPUT' length distributions, e.g. 'normal:2048,512;uniform:16,128'."))
    num_requests: int = opt(2000, "--num-requests", help="Requests per simulation.")
    slo_ttft: float = opt(1.0, "--slo-ttft", help="TTFT target, seconds.")
    slo_tpot: float = opt(0.05, "--slo-tpot", help="TPOT target, seconds.")
    percentile: float = opt(90.0, "--percentile", help="SLO percentile.")
    relaxation: float = opt(0.1, "--slo-tolerance", "--relaxation", help=(
        "Share by which a P-percentile may exceed its target and still meet the SLO (BestServe Algorithm 9 tau, "
        "default 0.1 = 10%); 0 = the strict answer."))
    tolerance: float = opt(0.05, "--tolerance", help="Relative width of the final goodput bracket (Algorithm 8 "
                                                      "epsilon).", page=False)
    seeds: int = opt(1, "--seeds", help="Repeat with this many seeds and report a 95 percent confidence interval.",
                     page=False)
    seed: int = opt(0, "--seed", help="Base random seed.")
    fidelity: str = opt("iteration", "--fidelity", help="iteration (exact continuous batching) or bestserve.",
                        page=False)
    dtype: str | None = opt(None, "--dtype", help="Weight format (default: the model's).")
    jobs: int | None = opt(None, "--jobs", "-j", help="Parallel workers (default: all cores).", page=False)
    backend: str = opt("local", "--backend", help="local (processes) or ray.", page=False)
    ray_address: str | None = opt(None, "--ray-address", help=(
        "host:port of a Ray head (default: a local Ray instance of the run's own)."), page=False)
    out: Path | None = opt(None, "--out", help="Directory for ranking.csv, plots and the resumable checkpoint.",
                           page=False)
    band: int = opt(0, "--band", help=(
        "Recompute the goodput of the top strategies with N profiles sampled from a calibrated profile's "
        "uncertainty (seeded by --seed) and say which cannot be told apart from the best (implies --exhaustive)."),
        page=False)
    band_top: int = opt(5, "--band-top", help="Strategies given a band with --band (best first).", page=False)
    deploy: Path | None = opt(None, "--deploy", help=(
        "Write the best plan's launch files (the engine's serve commands, one script per node; TensorRT-LLM's "
        "serve configuration; a Dynamo YAML for disaggregated vLLM) to this directory and print them."), page=False)
    spec_method: str | None = opt(None, "--spec-method", help=(
        "Speculative decoding of the decoding instances: draft, eagle, mtp, ngram or none."))
    spec_tokens: str | None = opt(None, "--spec-tokens", help=(
        "Draft lengths K to search, comma-separated (0 = plain decoding), e.g. 0,1,2,3; default: the method's K."))
    spec_acceptance: str | None = opt(None, "--spec-acceptance", help=(
        "Acceptance rate per draft position in [0, 1]: one rate or a comma list (default: the method's)."))
    spec_draft_model: str | None = opt(None, "--spec-draft-model", help="Draft model (catalog id) for draft.")
    search_knobs: bool = opt(False, "--search-knobs", help=(
        "Search the engine's knobs around its defaults: max batch at 1, 1/4 and 1/16 of the default, token budget "
        "at 1x and 2x, chunked prefill on and off (lists given explicitly win)."), page=False)
    devices_per_node: int | None = opt(None, "--devices-per-node", help=(
        "Devices per node of the hardware; instances and KV transfers larger than a node use the inter-node "
        "link."), page=False)
    nvlink_domain: int | None = opt(None, "--nvlink-domain", help=(
        "Devices that share one NVLink domain across nodes (GH200 NVL32: 32, GB200 NVL72: 72); collectives and "
        "KV transfers inside it use NVLink."), page=False)
    exhaustive: bool = opt(False, "--exhaustive", help=(
        "Simulate every strategy's goodput (slow; the default composes pool measurements, prunes by analytic "
        "bounds and simulates the best fleets whole)."), page=False)
    confirm: int = opt(3, "--confirm", help="Best composed fleets simulated whole to confirm (fast search).",
                       page=False)
    keep: int = opt(0, "--keep", help=(
        "Branch and bound: simulate whole every fleet that can still rank among the best KEEP per device "
        "(0: the default fast search)."), page=False)
    frontier: bool = opt(False, "--frontier", help=(
        "Fast search: keep every strategy that may lie on the tokens/s-per-device vs tokens/s-per-user frontier."),
        page=False)
    target_rate: float | None = opt(None, "--target-rate", help=(
        "Requests/s to reach: answer with the fewest devices whose goodput reaches it."))
    top: int = opt(10, "--top", help="Strategies shown after the best collocated and disaggregated ones.")
    objective: str = opt("goodput-per-device", "--objective", help=(
        "What ranks the strategies: goodput-per-device (default), cost (lowest $ per million output tokens at "
        "the goodput) or energy (lowest joules per output token at the planned rate)."))
    price: str | None = opt(None, "--price", help=(
        "US dollars per GPU-hour replacing the bundled list price, DEVICE=USD (several comma-separated), "
        "e.g. h100-sxm=2.49."))
    prices: Path | None = opt(None, "--prices", help=(
        "A price table YAML (the schema of the bundled specs/data/prices/list-prices.yaml) over the bundled one."),
        page=False)
    price_tier: str = opt("on_demand", "--price-tier", help=(
        "Price tier: on_demand or committed (the provider's reserved or committed-use rate)."))
    allow_long_context: bool = opt(False, "--allow-long-context", help=(
        "Plan for requests longer than the model's max_position_embeddings."), page=False)

    def __post_init__(self) -> None:
        if isinstance(self.devices, int) and not isinstance(self.devices, bool):   # plan_serving(devices=16)
            object.__setattr__(self, "devices", str(self.devices))
        self.budget()   # checks the hardware list and the budget
        check_int("top", self.top, low=1)
        check_int("keep", self.keep, low=0, why="0: the fast search")
        check_int("confirm", self.confirm, low=1)
        for name, v in (("slo-ttft", self.slo_ttft), ("slo-tpot", self.slo_tpot)):
            check_number(name, v, low=0, low_open=True, unit="seconds")
        check_number("percentile", self.percentile, low=0, high=100, low_open=True, high_open=True)
        if self.band < 0 or self.band_top < 1:
            raise SpecError(f"band={self.band} must be >= 0 and band-top={self.band_top} >= 1")
        if self.memory_fraction is not None:
            check_number("memory-fraction", self.memory_fraction, low=0, high=1, low_open=True,
                         why="share of device memory the engine may use")
        for name, n in (("devices-per-node", self.devices_per_node), ("nvlink-domain", self.nvlink_domain)):
            if n is not None:
                check_int(name, n, low=1)
        if self.target_rate is not None:
            check_number("target-rate", self.target_rate, low=0, low_open=True, unit="requests per second")
        if self.objective not in OBJECTIVES:
            raise SpecError(f"objective={self.objective!r}; expected one of: {', '.join(OBJECTIVES)}")
        if self.price_tier not in TIERS:
            raise SpecError(f"price-tier={self.price_tier!r}; expected one of: {', '.join(TIERS)}")

    @property
    def hardware_types(self) -> tuple[str, ...]:
        """The device types of ``--hardware``, in the order given."""
        types = tuple(t.strip() for t in str(self.hardware).split(","))
        if not all(types):
            raise SpecError(f"hardware={self.hardware!r} has an empty entry; expected one or more comma-separated "
                            "catalog ids or YAML paths (h100-sxm,l40s)")
        if len(set(types)) != len(types):
            raise SpecError(f"hardware={self.hardware!r} names a type twice; expected each type once")
        return types

    def budget(self) -> dict[str, int]:
        """The device budget of each hardware type (``--devices N``: ``N`` of each)."""
        types = self.hardware_types
        text = str(self.devices).strip()
        if "=" not in text:
            try:
                n = int(text)
            except ValueError:
                raise SpecError(f"devices={text!r} must be an integer, or TYPE=N per hardware type "
                                f"({','.join(f'{t}=8' for t in types)})") from None
            check_int("devices", n, low=1)
            return dict.fromkeys(types, n)
        out: dict[str, int] = {}
        for item in text.split(","):
            key, _, value = item.partition("=")
            key = key.strip()
            if key not in types:
                raise SpecError(f"devices={text!r}: {key!r} is not a --hardware type; expected TYPE=N for each of: "
                                f"{', '.join(types)}")
            try:
                out[key] = int(value)
            except ValueError:
                raise SpecError(f"devices={text!r}: {key}={value.strip()!r} must be an integer") from None
            check_int(f"devices {key}", out[key], low=1)
        missing = [t for t in types if t not in out]
        if missing:
            raise SpecError(f"devices={text!r} gives no budget for {', '.join(missing)}; expected TYPE=N for each of: "
                            f"{', '.join(types)}")
        return out

    @property
    def budget_text(self) -> str:
        """The budget as the headers say it: ``8`` of one type, ``8 x h100-sxm, 16 x l40s`` of several."""
        b = self.budget()
        if len(b) == 1:
            return str(next(iter(b.values())))
        return ", ".join(f"{n} x {t}" for t, n in b.items())

    @property
    def method(self) -> SearchMethod:
        """The search method these options ask for (bands compare the top strategies, which pruning
        by bound would drop: they imply the exhaustive search)."""
        if self.exhaustive or self.band:
            return SearchMethod.EXHAUSTIVE
        return SearchMethod.BOUNDED if self.keep > 0 else METHOD_DEFAULT


@dataclass(frozen=True, slots=True, kw_only=True)
class PreparedPlan:
    """A checked plan: the search space and one settings value per workload, built before any work."""

    options: PlanOptions
    space: SearchSpace
    settings: tuple[GoodputSettings, ...]
    workloads: tuple[Workload, ...]
    #: the run's price table: the bundled one, ``--prices`` over it, then ``--price``
    prices: PriceTable
    #: several hardware types: one search per type alone and per ordered pair of types (the mixed
    #: fleets); empty for one type (``space`` and ``settings`` are then the search)
    parts: tuple[PlanPart, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanPart:
    """One search of a plan over several hardware types: one type alone, or the disaggregated
    fleets with the prefill pool on one type and the decode pool on another (``space.prefill_device``)."""

    label: str
    space: SearchSpace
    settings: tuple[GoodputSettings, ...]


def engine_spec(name: str, memory_fraction: float | None = None) -> EngineSpec:
    """The engine ``name`` (family, versioned id or YAML), with ``memory_fraction`` replacing its
    memory fraction when given."""
    spec = get_engine(name)
    if memory_fraction is not None:
        spec = dataclasses.replace(spec, memory_fraction=float(memory_fraction))
    return spec


def prepare(o: PlanOptions) -> PreparedPlan:
    """Check ``o`` and build its search (module doc). Raises :class:`SpecError` (bad input) or
    :class:`~serveplan.errors.InfeasibleError` before any simulation.

    Several hardware types (``--hardware h100-sxm,l40s``): one search per type alone, exactly the
    single-type search within that type's budget, and, unless ``--no-disaggregated``, one per
    ordered pair of types over the disaggregated fleets whose prefill pool runs on the first type
    and decode pool on the second (each within its type's budget, the KV transfer over the slower
    NIC, :func:`~serveplan.specs.hardware.kv_link`); :func:`run` ranks them together."""
    types = o.hardware_types
    if len(types) > 1:
        return _prepare_types(o, types)
    m, hw, pr = resolve_specs(o.model, o.hardware, o.profile)
    if o.devices_per_node is not None:
        hw = hw.with_(devices_per_node=o.devices_per_node, scale_up_domain=0)
    if o.nvlink_domain is not None:
        hw = hw.with_(scale_up_domain=o.nvlink_domain)
    eng = engine_spec(o.engine, o.memory_fraction)
    max_batch, prefill_max_batch, schedulers, chunk_sizes, token_budget = search_defaults(
        eng, hw, max_batch=o.max_batch, prefill_max_batch=o.prefill_max_batch, schedulers=o.schedulers,
        chunk_sizes=o.chunk_sizes, knobs=o.search_knobs)
    space = SearchSpace(
        devices=o.budget()[types[0]], tp_sizes=tuple(parse_int_list(o.tp, "tp")),
        pp_sizes=tuple(parse_int_list(o.pp, "pp")),
        dp_sizes=tuple(parse_int_list(o.dp, "dp")), ep_sizes=tuple(parse_int_list(o.ep, "ep")),
        max_batches=tuple(parse_int_list(max_batch, "max-batch")), prefill_max_batch=prefill_max_batch or None,
        schedulers=tuple(s.strip() for s in schedulers.split(",") if s.strip()),
        chunk_sizes=tuple(parse_int_list(chunk_sizes, "chunk-sizes")), token_budget=token_budget,
        collocated=not o.no_collocated, disaggregated=not o.no_disaggregated, mixed_tp=not o.same_tp,
        specs=spec_choices(o.spec_method, parse_spec_tokens(o.spec_tokens), acceptance=o.spec_acceptance,
                           draft_model=o.spec_draft_model),
    )
    check_search(space, num_requests=o.num_requests, seeds=o.seeds, seed=o.seed, jobs=o.jobs,
                 relaxation=o.relaxation, tolerance=o.tolerance, band=o.band, band_top=o.band_top)
    if o.band:
        require_uncertainty(pr)
    given = o.scenario or o.input_len or o.output_len or o.length_dist or o.dataset
    workloads = build_workloads(scenarios=o.scenario, input_len=o.input_len, output_len=o.output_len,
                                length_dist=o.length_dist, dataset=o.dataset or (None if given else DEFAULT_DATASET),
                                num_requests=o.num_requests, seed=o.seed)
    if (o.dataset or o.length_dist or not given) and not o.allow_long_context:
        # a length mix's tail beyond the model's context is cut as chat clients cut what they send
        workloads = [wl.within_context(m.max_position_embeddings) for wl in workloads]
    for wl in workloads:
        check_context(m, wl, o.allow_long_context)
    prices = price_table(prices_file=o.prices, overrides=o.price, tier=o.price_tier)
    if o.objective == "cost":
        prices.get(hw.name, o.price_tier)   # no price, no cost ranking: say so before any simulation
    elif o.objective == "energy" and not hw.board_power_w:
        raise SpecError(f"objective=energy needs the board power of hardware {hw.name!r} (board_power_w in its "
                        "YAML); it has none")
    slo = SLO(ttft_s=o.slo_ttft, tpot_s=o.slo_tpot, percentile=o.percentile)
    settings = tuple(GoodputSettings(model=m, hardware=hw, profile=pr, workload=wl, slo=slo,
                                     dtype=DType.parse(o.dtype) if o.dtype else None, relaxation=o.relaxation,
                                     seeds=o.seeds, seed=o.seed, fidelity=Fidelity.parse(o.fidelity),
                                     rel_tol=o.tolerance, engine=eng,
                                     kv_dtype=DType.parse(o.kv_dtype) if o.kv_dtype else None)
                     for wl in workloads)
    return PreparedPlan(options=o, space=space, settings=settings, workloads=tuple(workloads), prices=prices)


def _prepare_types(o: PlanOptions, types: tuple[str, ...]) -> PreparedPlan:
    """:func:`prepare` of several hardware types: each type's own plan, then the mixed pairs."""
    if o.band:
        raise SpecError(f"band={o.band} with several hardware types ({', '.join(types)}): bands sample one device's "
                        "profile; expected one --hardware type with --band")
    budget = o.budget()
    singles = [prepare(dataclasses.replace(o, hardware=t, devices=str(budget[t]))) for t in types]
    parts = [PlanPart(label=t, space=p.space, settings=p.settings) for t, p in zip(types, singles, strict=True)]
    if not o.no_disaggregated:
        for a, b in itertools.permutations(range(len(types)), 2):
            pre = singles[a].settings[0]
            device = DeviceType(hardware=pre.hardware, profile=pre.profile)
            space = dataclasses.replace(singles[b].space, collocated=False, disaggregated=True,
                                        prefill_device=device, prefill_devices=budget[types[a]])
            parts.append(PlanPart(label=f"prefill on {types[a]}, decode on {types[b]}", space=space,
                                  settings=singles[b].settings))
    first = singles[0]
    return PreparedPlan(options=o, space=first.space, settings=first.settings, workloads=first.workloads,
                        prices=first.prices, parts=tuple(parts))


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanResult:
    """The answer: one ranked search per workload, the bands (``--band``) and the best plan's
    launch files (``--deploy``, or always for the page)."""

    prepared: PreparedPlan
    results: tuple[SearchResult, ...]
    bands: tuple[tuple[GoodputBand, ...], ...] = ()
    launch: LaunchPlan | None = None
    files: tuple[Path, ...] = field(default_factory=tuple)
    #: several hardware types: per workload, the settings each ranked strategy was searched under
    settings_of: tuple[dict[str, GoodputSettings], ...] = ()

    def settings_for(self, workload: int, name: str) -> GoodputSettings:
        """The settings strategy ``name`` of workload ``workload`` was searched under."""
        mine = self.settings_of[workload] if self.settings_of else {}
        return mine.get(name, self.prepared.settings[workload])

    @property
    def options(self) -> PlanOptions:
        return self.prepared.options

    @property
    def best(self) -> SearchResult:
        return self.results[0]

    def document(self) -> dict[str, Any]:
        """What ``serveplan optimize --json`` prints and the page's API returns."""
        return optimize_document(self.results, [wl.name for wl in self.prepared.workloads], self.bands,
                                 self.launch, command=self.options.command_line("optimize"),
                                 settings=self.prepared.settings, settings_of=self.settings_of)


def run(o: PlanOptions | PreparedPlan, *, progress: bool = False,
        on_progress: Callable[[int, int], None] | None = None, launch_files: bool = True) -> PlanResult:
    """Answer the plan question: the search, then bands, report files and launch files. The best
    plan's launch files are in the result whenever its engine is a release (``launch_files``);
    ``--deploy`` also writes them. ``progress`` draws a bar on stderr; ``on_progress(done,
    total)`` is called per strategy settled."""
    prep = o if isinstance(o, PreparedPlan) else prepare(o)
    opts = prep.options
    kwargs: dict[str, Any] = dict(jobs=opts.jobs, backend=opts.backend, ray_address=opts.ray_address,
                                  out_dir=opts.out, progress=progress, on_progress=on_progress, method=opts.method,
                                  confirm=opts.confirm, target_rate=opts.target_rate, frontier=opts.frontier,
                                  keep=max(1, opts.keep), top=opts.top, objective=opts.objective, prices=prep.prices,
                                  price_tier=opts.price_tier)
    if prep.parts:
        results, settings_of = _search_parts(prep, kwargs)
    else:
        results = search_many(prep.space, list(prep.settings), **kwargs)
        settings_of = [{} for _ in results]
    bands: tuple[tuple[GoodputBand, ...], ...] = ()
    if opts.band:
        bands = tuple(tuple(goodput_bands(list(res.strategies[:opts.band_top]), st, opts.band, seed=opts.seed))
                      for res, st in zip(results, prep.settings, strict=True))
    files: list[Path] = []
    if opts.out is not None:
        files += _write_reports(prep, results)
    launch = None
    eng = prep.settings[0].engine
    best = results[0].best
    if opts.deploy is not None or (launch_files and isinstance(eng, EngineSpec) and eng.engine in DEPLOYABLE
                                   and not best.candidate.is_mixed):
        launch = launch_plan(best.candidate, settings_of[0].get(best.name, prep.settings[0]))
        if opts.deploy is not None:
            files += launch.write(opts.deploy)
    return PlanResult(prepared=prep, results=tuple(results), bands=bands, launch=launch, files=tuple(files),
                      settings_of=tuple(settings_of))


def _search_parts(prep: PreparedPlan,
                  kwargs: dict[str, Any]) -> tuple[list[SearchResult], list[dict[str, GoodputSettings]]]:
    """The searches of a plan over several hardware types (:func:`_prepare_types`), ranked
    together per workload (:func:`~serveplan.optimize.search.merge_results`), and per workload the
    settings each ranked strategy was searched under (its launch files and confidence use them). A part
    with nothing that fits or meets the SLO is noted; only when every part fails is the plan
    infeasible."""
    o = prep.options
    done: list[tuple[PlanPart, list[SearchResult] | None, str]] = []
    for part in prep.parts:
        try:
            found = search_many(part.space, list(part.settings), **kwargs)
        except InfeasibleError as exc:
            done.append((part, None, str(exc)))
            continue
        if part.space.prefill_device is None:   # one type alone: its fleets named with their type
            found = [on_device(res, DeviceType(hardware=st.hardware, profile=st.profile))
                     for res, st in zip(found, part.settings, strict=True)]
        done.append((part, found, ""))
    if all(res is None for _, res, _ in done):
        raise InfeasibleError("no search over " + ", ".join(o.hardware_types) + " found a strategy: "
                              + "; ".join(f"{p.label}: {why}" for p, _, why in done))
    settings_of: list[dict[str, GoodputSettings]] = []
    merged = []
    for i in range(len(prep.workloads)):
        parts = []
        searches = []
        mine: dict[str, GoodputSettings] = {}
        settings_of.append(mine)
        for part, res, why in done:
            if res is None:
                searches.append({"search": part.label, "best": None, "note": why})
                continue
            parts.append(res[i])
            mine |= {r.name: part.settings[i] for r in res[i].strategies}
            summ = res[i].settings_summary
            searches.append({"search": part.label, "best": res[i].best.name,
                             "num_candidates": summ.get("num_candidates"), "method": summ.get("method")})
        profiles = dict.fromkeys(p.settings[i].profile.name for p in prep.parts)
        summary = {"hardware": " + ".join(o.hardware_types), "profile": " + ".join(profiles), "devices": o.budget(),
                   "budget": o.budget_text, "searches": searches}
        merged.append(merge_results(parts, target_rate=o.target_rate, summary=summary))
    return merged, settings_of


def _write_reports(prep: PreparedPlan, results: list[SearchResult]) -> list[Path]:
    o = prep.options
    assert o.out is not None
    out = o.out
    multi = len(results) > 1
    written = []
    m, hw = prep.settings[0].model, prep.settings[0].hardware
    for wl, res in zip(prep.workloads, results, strict=True):
        tag = f"-{wl.name}" if multi else ""
        title = (f"{m.name} on up to {o.budget_text} x {hw.name}, {wl.name}" if not prep.parts
                 else f"{m.name} on up to {o.budget_text}, {wl.name}")
        written += [write_csv(res, out / f"ranking{tag}.csv"),
                    plot_goodput_bars(res, out / f"goodput{tag}.png", title),
                    plot_pareto(res, out / f"pareto{tag}.png"),
                    write_frontier_csv(res, out / f"frontier{tag}.csv"),
                    plot_throughput_frontier(res, out / f"frontier{tag}.png", f"{title}: frontier at goodput")]
        p = out / f"result{tag}.json"
        p.write_text(json.dumps(json_safe(res.to_dict()), indent=2, allow_nan=False))
        written.append(p)
    return written


def plan_serving(model: str | ModelSpec = "llama-3.1-70b", hardware: str | DeviceSpec = "h100-sxm", *,
                 engine: str = "vllm", space: SearchSpace | None = None, workload: Workload | None = None,
                 slo: SLO | None = None, profile: str | EfficiencyProfile | None = None,
                 method: str | SearchMethod = METHOD_DEFAULT, jobs: int | None = 1, progress: bool = False,
                 out_dir: str | Path | None = None, **options: Any) -> SearchResult:
    """Rank every fleet by goodput per device under the SLO: the plan ``serveplan optimize`` and
    the web page give for the same question (the same options, defaults and method).

    Parameters
    ----------
    model, hardware, profile:
        Catalog ids, Hugging Face ids or paths, or specs; ``profile`` defaults to the hardware's.
    engine:
        The serving engine (default: today's vLLM; ``"bestserve"``: BestServe's testbed).
    space, workload, slo:
        Given objects replace what the options would build (the search space from the engine's
        limits, the Azure conversation mix, P90 TTFT 1 s / TPOT 50 ms).
    method:
        ``"auto"`` (the CLI's: pools composed, the best of each architecture simulated whole, the
        branch and bound where a composition disagrees), ``"fast"``, ``"bounded"`` or
        ``"exhaustive"``.
    options:
        Any other option of ``serveplan optimize`` by field name (``devices=16``, ``tp="2,4"``,
        ``num_requests=1000``, ``slo_ttft=0.5``, ``dtype="fp8"``, ``target_rate=20``, ...).

    Raises
    ------
    SpecError
        Unknown names or options, or settings out of range.
    InfeasibleError
        Nothing fits the devices, or no fleet meets the SLO at any rate.

    Examples
    --------
    >>> from serveplan import plan_serving
    >>> res = plan_serving("llama-3.1-8b", devices=2, tp="1", num_requests=200)
    >>> res.best.name
    '1m-tp1-b1024-chunked8192'
    """
    names = {"model": model if isinstance(model, str) else "llama-3.1-70b",
             "hardware": hardware if isinstance(hardware, str) else "h100-sxm",
             "profile": profile if isinstance(profile, str) else None}
    opts = PlanOptions.parse({**names, "engine": engine, "jobs": jobs, "out": out_dir, **options})
    prep = prepare(opts)
    if prep.parts:   # several hardware types: each alone and the mixed pairs, ranked together
        if space is not None or workload is not None or slo is not None or not all(
                isinstance(x, str) or x is None for x in (model, hardware, profile)):
            raise SpecError(f"hardware={opts.hardware!r} names several types: give the model, hardware and profile "
                            "as ids and the space, workload and SLO as options (one search per type is built from "
                            "them); expected space=None, workload=None, slo=None")
        return _search_parts(prep, dict(jobs=opts.jobs, backend=opts.backend, ray_address=opts.ray_address,
                                        out_dir=opts.out, progress=progress, method=method, confirm=opts.confirm,
                                        target_rate=opts.target_rate, frontier=opts.frontier, keep=max(1, opts.keep),
                                        top=opts.top, objective=opts.objective, prices=prep.prices,
                                        price_tier=opts.price_tier))[0][0]
    st = prep.settings
    swap: dict[str, Any] = {}
    if not isinstance(model, str):
        swap["model"] = model
    if not isinstance(hardware, str):
        swap["hardware"] = hardware
    if profile is not None and not isinstance(profile, str):
        swap["profile"] = profile
    if workload is not None:
        swap["workload"] = workload
    if slo is not None:
        swap["slo"] = slo
    if swap:
        st = tuple(dataclasses.replace(s, **swap) for s in st[:1])
    results = search_many(space if space is not None else prep.space, list(st), jobs=opts.jobs, backend=opts.backend,
                          ray_address=opts.ray_address, out_dir=opts.out, progress=progress, method=method,
                          confirm=opts.confirm, target_rate=opts.target_rate, frontier=opts.frontier,
                          keep=max(1, opts.keep), top=opts.top, objective=opts.objective, prices=prep.prices,
                          price_tier=opts.price_tier)
    return results[0]
