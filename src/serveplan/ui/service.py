"""The one module through which the web planner calls serveplan.

Each panel of the page is one CLI command: Plan is ``serveplan optimize``, Simulate ``serveplan
simulate``, Step ``serveplan estimate``, Offload ``serveplan offload`` (and ``offload --frontier``).
A request's fields are the command's option names (``slo-ttft``, ``max-batch``); they are turned into
the equivalent argument list and parsed by the command's own option parser, so types, defaults and
messages are the CLI's, and the page can show the command that reproduces its result. The work then
goes through the same library calls as the command, and the answer is the document the command
prints with ``--json`` (:mod:`serveplan.report.documents` builds those the CLI composes).

Work is bounded per request (:data:`LIMITS`): a page cannot start a search over hundreds of devices
or a simulation of millions of requests; the CLI has no such limits.
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any, cast

import numpy as np
import typer.main

from serveplan.cli import app as cli_app
from serveplan.cli import parse_int_list
from serveplan.cli.simulate import load_rate, parse_rates
from serveplan.errors import InfeasibleError, SolverError, SpecError
from serveplan.estimator.api import estimate, resolve_specs
from serveplan.offload import get_host, list_hosts
from serveplan.offload.search import offload_frontier, plan_offload
from serveplan.optimize.goodput import GoodputResult, GoodputSettings
from serveplan.optimize.search import search_many
from serveplan.optimize.space import SearchSpace, search_defaults
from serveplan.report.deploy import launch_plan as deploy_plan
from serveplan.report.documents import optimize_document, simulate_document
from serveplan.sim import SCENARIOS, SLO, Fidelity, simulate, simulation_config
from serveplan.sim.engine import FLEET_OPTIONS
from serveplan.sim.schedulers import collocated_schedulers
from serveplan.sim.workload import build_workload, build_workloads
from serveplan.specs.catalog import get_hardware, get_model, list_hardware, list_models, list_profiles
from serveplan.specs.parallel import ParallelConfig
from serveplan.units import DType

#: Most work one request may start (the CLI is unbounded).
LIMITS = {"devices": 64, "plan_requests": 20_000, "simulate_requests": 50_000, "sweep_rates": 12,
          "batch": 4096, "tokens": 1_048_576}

Progress = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class Panel:
    """One page panel: the CLI command behind it and the options it exposes (in form order)."""
    kind: str
    command: str
    title: str
    fields: tuple[str, ...]
    fixed: tuple[str, ...] = ()               # options always passed (shown in the command)
    ui_defaults: Mapping[str, str] = field(default_factory=dict)  # form values differing from the CLI's


PANELS: dict[str, Panel] = {p.kind: p for p in (
    Panel("plan", "optimize", "Plan",
          ("model", "hardware", "devices", "tp", "pp", "dp", "ep", "max-batch", "schedulers", "scenario",
           "input-len", "output-len", "num-requests", "slo-ttft", "slo-tpot", "percentile", "dtype", "seed",
           "no-collocated", "no-disaggregated"),
          fixed=("--deploy", "deploy/", "--exhaustive")),  # the page ranks every strategy
    Panel("simulate", "simulate", "Simulate",
          ("model", "hardware", "strategy", "tp", "prefill-tp", "decode-tp", "pp", "max-batch", "scheduler",
           "scenario", "input-len", "output-len", "rate", "num-requests", "slo-ttft", "slo-tpot", "percentile",
           "rate-sweep", "seed"),
          ui_defaults={"num-requests": "2000", "rate-sweep": "1,2,2.5,3,3.5,4,4.5"}),
    Panel("step", "estimate", "Step",
          ("model", "hardware", "tp", "pp", "dp", "ep", "dtype", "batch", "input-len", "output-len", "phase",
           "context-len")),
    Panel("offload", "offload", "Offload",
          ("model", "gpu", "host", "input-len", "output-len", "compress", "cpu-attention", "memory-headroom")),
    Panel("frontier", "offload", "Offload frontier",
          ("model", "gpu", "host", "input-len", "output-len", "compress", "cpu-attention", "memory-headroom"),
          fixed=("--frontier",)),
)}


@cache
def _command(name: str) -> Any:
    """The CLI's own command object (its options, defaults, types and parser)."""


    # an app with several commands is a group (typer's, of its own click): it has .commands
    group = cast(Any, typer.main.get_command(cli_app))
    return group.commands[name]


def _option(panel: Panel, name: str) -> Any:
    for p in _command(panel.command).params:
        if f"--{name}" in p.opts:
            return p
    raise KeyError(name)  # pragma: no cover - PANELS names only real options


def _default_text(p: Any) -> str:
    d = p.default
    if d is None or d is False:
        return ""
    return str(getattr(d, "value", d))


def schema() -> dict[str, Any]:
    """Panels and their fields (the CLI's option names, defaults and help), with the catalogs and limits."""
    panels = {}
    for panel in PANELS.values():
        fields = []
        for name in panel.fields:
            p = _option(panel, name)
            kind = "tristate" if p.secondary_opts else ("switch" if getattr(p, "is_flag", False) else "text")
            fields.append({"name": name, "kind": kind, "default": _default_text(p),
                           "value": panel.ui_defaults.get(name, _default_text(p)), "help": p.help or ""})
        panels[panel.kind] = {"title": panel.title, "command": panel.command, "fields": fields}
    hardware = {}
    for h in list_hardware():
        hw = get_hardware(h)
        hardware[h] = {"peak_flops": {k.value: v for k, v in hw.peak_flops.items()},
                       "memory_bandwidth": hw.memory_bandwidth, "memory_bytes": hw.memory_bytes}
    return {"panels": panels, "limits": LIMITS,
            "choices": {"model": list_models(), "hardware": sorted(hardware), "gpu": sorted(hardware),
                        "host": list_hosts(), "scenario": list(SCENARIOS), "profile": list_profiles(),
                        "phase": ["prefill", "decode"], "scheduler": list(collocated_schedulers()),
                        "dtype": ["bf16", "fp16", "fp8", "int8", "int4", "fp32"]},
            "hardware": hardware}


@dataclass(frozen=True, slots=True)
class Request:
    """A validated request: the panel, the argument list the CLI would get, and the parsed options."""
    kind: str
    argv: tuple[str, ...]
    options: dict[str, Any]

    @property
    def command(self) -> str:
        """The equivalent command line (add ``--json`` for the document the API returns)."""
        return shlex.join(["serveplan", PANELS[self.kind].command, *self.argv, *PANELS[self.kind].fixed])

    @property
    def key(self) -> tuple[str, tuple[str, ...]]:
        """Cache key: the same inputs give the same argument list (defaults left out)."""
        return self.kind, self.argv


def parse(kind: str, values: Mapping[str, Any]) -> Request:
    """Validate ``values`` (option name -> text) for panel ``kind`` with the CLI's own parser.

    Raises
    ------
    SpecError
        An unknown panel or field, a value the CLI would reject (its message, without ``error:``),
        or one above :data:`LIMITS`.
    """
    if kind not in PANELS:
        raise SpecError(f"unknown panel {kind!r}; expected one of: {', '.join(PANELS)}")
    panel = PANELS[kind]
    unknown = sorted(set(values) - set(panel.fields))
    if unknown:
        raise SpecError(f"unknown field {unknown[0]!r} for {panel.title}; expected one of: {', '.join(panel.fields)}")
    argv: list[str] = []
    for name in panel.fields:
        raw = values.get(name)
        text = "" if raw is None else str(raw).strip()
        p = _option(panel, name)
        if p.secondary_opts:  # --x/--no-x: "" (the command's default), on, off
            if text.lower() in ("on", "true", "1", "yes"):
                argv.append(p.opts[0])
            elif text.lower() in ("off", "false", "0", "no"):
                argv.append(p.secondary_opts[0])
            elif text:
                raise SpecError(f"{name}={text!r}; expected one of: on, off (or empty for the default)")
        elif getattr(p, "is_flag", False):
            if text.lower() in ("on", "true", "1", "yes"):
                argv.append(f"--{name}")
        elif text and text != _default_text(p):
            argv += [f"--{name}", text]
    cmd = _command(panel.command)
    try:
        ctx = cmd.make_context(cmd.name, [*argv, *panel.fixed])
    except Exception as exc:  # the CLI library's usage errors: the CLI prints the same line
        if hasattr(exc, "format_message"):
            raise SpecError(" ".join(exc.format_message().split())) from None
        raise
    req = Request(kind, tuple(argv), dict(ctx.params))
    _check_limits(req)
    return req


def _check_limits(req: Request) -> None:
    o = req.options

    def over(name: str, value: float, limit: float) -> None:
        if value > limit:
            raise SpecError(f"{name}={value:g} is above this server's limit of {limit:g}; "
                            f"run `{PANELS[req.kind].command}` from the CLI for larger work")

    if req.kind == "plan":
        over("devices", o["devices"], LIMITS["devices"])
        over("num-requests", o["num_requests"], LIMITS["plan_requests"])
    elif req.kind == "simulate":
        over("num-requests", o["num_requests"], LIMITS["simulate_requests"])
        if o.get("rate_sweep"):
            over("rate-sweep (rates)", len(o["rate_sweep"].split(",")), LIMITS["sweep_rates"])
    elif req.kind == "step":
        over("batch", o["batch"], LIMITS["batch"])
        over("input-len", o["input_len"], LIMITS["tokens"])
    for name in ("input_len", "output_len"):
        if o.get(name):
            over(name.replace("_", "-"), o[name], LIMITS["tokens"])


def error_text(exc: BaseException) -> tuple[str, int]:
    """What the CLI prints after ``error:`` for a planner error, and its exit code (cli.handle_errors)."""
    if isinstance(exc, InfeasibleError):
        return f"infeasible: {exc}", 3
    if isinstance(exc, SolverError):
        return f"solver: {exc}", 4
    return str(exc), 2


# ---------------------------------------------------------------------------------------------- work
@dataclass(frozen=True, slots=True)
class Prepared:
    """Everything a run needs, built (and so validated) before any work starts."""
    request: Request
    args: tuple[Any, ...]


def prepare(req: Request) -> Prepared:
    """Build the configurations the command would build (specs, space, workloads, settings).

    Raises
    ------
    SpecError
        With the CLI's message (unknown model, a layout that does not divide the model, ...).
    """
    return Prepared(req, _PREPARE[req.kind](req.options))


def run(prep: Prepared, progress: Progress | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Do the work: ``(document, extra)`` where ``document`` is what the command prints with
    ``--json`` and ``extra`` what only the page draws (per-request latencies, the roofline)."""
    return _RUN[prep.request.kind](prep.args, progress)


def _prepare_plan(o: dict[str, Any]) -> tuple[Any, ...]:
    # the body of `serveplan optimize` up to the search (cli/optimize.py), for the options the page has
    m, hw, pr = resolve_specs(o["model"], o["hardware"], o["profile"])
    max_batch, prefill_max_batch, schedulers, chunk_sizes, token_budget = search_defaults(
        o.get("engine"), hw, max_batch=o["max_batch"], prefill_max_batch=o["prefill_max_batch"],
        schedulers=o["schedulers"], chunk_sizes=o["chunk_sizes"])
    space = SearchSpace(
        devices=o["devices"], tp_sizes=tuple(parse_int_list(o["tp"], "tp")),
        pp_sizes=tuple(parse_int_list(o["pp"], "pp")), dp_sizes=tuple(parse_int_list(o["dp"], "dp")),
        ep_sizes=tuple(parse_int_list(o["ep"], "ep")),
        max_batches=tuple(parse_int_list(max_batch, "max-batch")),
        prefill_max_batch=prefill_max_batch or None,
        schedulers=tuple(s.strip() for s in schedulers.split(",") if s.strip()),
        chunk_sizes=tuple(parse_int_list(chunk_sizes, "chunk-sizes")), token_budget=token_budget,
        collocated=not o["no_collocated"], disaggregated=not o["no_disaggregated"], mixed_tp=not o["same_tp"],
    )
    if o["slo_ttft"] <= 0 or o["slo_tpot"] <= 0:
        raise SpecError(f"SLO targets must be positive seconds; got slo-ttft={o['slo_ttft']}, "
                        f"slo-tpot={o['slo_tpot']}")
    if not 0 < o["percentile"] < 100:
        raise SpecError(f"percentile={o['percentile']} must be in (0, 100)")
    workloads = build_workloads(scenarios=o["scenario"], input_len=o["input_len"], output_len=o["output_len"],
                                num_requests=o["num_requests"])
    slo = SLO(ttft_s=o["slo_ttft"], tpot_s=o["slo_tpot"], percentile=o["percentile"])
    settings = [GoodputSettings(model=m, hardware=hw, profile=pr, workload=wl, slo=slo,
                                dtype=DType.parse(o["dtype"]) if o["dtype"] else None,
                                relaxation=o["relaxation"], seeds=o["seeds"], seed=o["seed"],
                                fidelity=Fidelity.parse(o["fidelity"]), rel_tol=o["tolerance"],
                                engine=o.get("engine"),
                                kv_dtype=DType.parse(o["kv_dtype"]) if o.get("kv_dtype") else None)
                for wl in workloads]
    return space, settings, [wl.name for wl in workloads]


def _run_plan(args: tuple[Any, ...], progress: Progress | None) -> tuple[dict[str, Any], dict[str, Any]]:
    space, settings, names = args
    results = search_many(space, settings, progress=False, on_progress=progress, method="exhaustive")
    deployment = deploy_plan(results[0].best.candidate, settings[0])
    return optimize_document(results, names, (), deployment), {}


def deploy_for(prep: Prepared, row: Mapping[str, Any]) -> dict[str, Any]:
    """Launch commands of another strategy of a plan (a row of its ``strategies``)."""
    cand = GoodputResult.from_dict(dict(row)).candidate
    return deploy_plan(cand, prep.args[1][0]).to_dict()


def _prepare_simulate(o: dict[str, Any]) -> tuple[Any, ...]:
    # the body of `serveplan simulate` up to the simulation (cli/simulate.py)
    m, hw, pr = resolve_specs(o["model"], o["hardware"], o["profile"])
    wl = build_workload(scenario=o["scenario"], input_len=o["input_len"], output_len=o["output_len"],
                        trace=o["trace"], length_dist=o["length_dist"], num_requests=o["num_requests"],
                        arrival=o["arrival"], cv=o["cv"], seed=o["seed"], dataset=o.get("dataset"))
    if o.get("offline") or o.get("concurrency"):
        raise SpecError("the Simulate panel runs open-loop rates; use `serveplan simulate --offline` or "
                        "`--concurrency` for offline and closed-loop runs")
    cfg = simulation_config(
        engine=o.get("engine"), strategy=o["strategy"], fleet_options={k: o[k] for k in FLEET_OPTIONS},
        model=m, hardware=hw, profile=pr, router=o["router"], fidelity=o["fidelity"],
        rate=load_rate(o["rate"], False, None), workload=wl,
        slo=SLO(ttft_s=o["slo_ttft"], tpot_s=o["slo_tpot"], percentile=o["percentile"]),
        seed=o["seed"], dtype=o["dtype"], early_stop=o["early_stop"], kv_dtype=o.get("kv_dtype"),
        prefix_hit=o.get("prefix_hit") or 0.0,
    )
    rates = parse_rates(o["rate_sweep"]) if o["rate_sweep"] else []
    return cfg, rates


def _run_simulate(args: tuple[Any, ...], progress: Progress | None) -> tuple[dict[str, Any], dict[str, Any]]:
    cfg, rates = args
    total = 1 + sum(1 for r in rates if r != cfg.rate)
    res = simulate(cfg)
    done = 1
    if progress:
        progress(done, total)
    sweep = []
    for r in rates:
        if r == cfg.rate:
            sweep.append(res)
            continue
        sweep.append(simulate(dataclasses.replace(cfg, rate=r)))
        done += 1
        if progress:
            progress(done, total)
    req = res.requests
    extra = {"requests": {"ttft_s": _finite(req.ttft), "tpot_s": _finite(req.tpot[req.output_len > 1])}}
    return simulate_document(res, sweep), extra


def _finite(a: Any) -> list[float]:
    return [float(v) for v in a[np.isfinite(a)]]


def _prepare_step(o: dict[str, Any]) -> tuple[Any, ...]:
    m, _, _ = resolve_specs(o["model"], o["hardware"], o["profile"])  # unknown names fail before the run
    par = ParallelConfig(tp=o["tp"], pp=o["pp"], dp=o["dp"], ep=o["ep"])
    par.validate_for(m)
    return (o, par)


def _run_step(args: tuple[Any, ...], progress: Progress | None) -> tuple[dict[str, Any], dict[str, Any]]:
    # `serveplan estimate` (cli/estimate.py) without --band
    o, par = args
    res = estimate(o["model"], o["hardware"], profile=o["profile"], parallel=par, dtype=o["dtype"],
                   batch=o["batch"], input_len=o["input_len"], output_len=o["output_len"], phase=o["phase"],
                   context_len=o["context_len"])
    _, hw, _ = resolve_specs(o["model"], o["hardware"], o["profile"])
    dtype = DType.parse(res.dtype)
    return res.to_dict(), {"roofline": {"peak_flops": hw.flops(dtype), "memory_bandwidth": hw.memory_bandwidth,
                                        "dtype": dtype.value}}


def _prepare_offload(o: dict[str, Any]) -> tuple[Any, ...]:
    if o["max_latency"] is not None and not o["max_latency"] > 0:
        raise SpecError(f"--max-latency={o['max_latency']!r} must be a positive number of seconds")
    get_model(o["model"])
    get_host(o["host"])
    return (o,)


def _run_offload(args: tuple[Any, ...], progress: Progress | None) -> tuple[dict[str, Any], dict[str, Any]]:
    # `serveplan offload` (cli/offload.py), the search or the frontier
    (o,) = args
    common = {"gpu": o["gpu"], "host": o["host"], "input_len": o["input_len"], "output_len": o["output_len"],
              "compress": o["compress"], "cpu_attention": o["cpu_attention"], "overlap": o["overlap"],
              "memory_headroom": o["memory_headroom"]}
    if o["frontier"]:
        return offload_frontier(o["model"], **common).to_dict(), {}
    return plan_offload(o["model"], max_latency_s=o["max_latency"], **common).to_dict(), {}


_PREPARE: dict[str, Callable[[dict[str, Any]], tuple[Any, ...]]] = {
    "plan": _prepare_plan, "simulate": _prepare_simulate, "step": _prepare_step, "offload": _prepare_offload,
    "frontier": _prepare_offload,
}
_RUN: dict[str, Callable[[tuple[Any, ...], Progress | None], tuple[dict[str, Any], dict[str, Any]]]] = {
    "plan": _run_plan, "simulate": _run_simulate, "step": _run_step, "offload": _run_offload,
    "frontier": _run_offload,
}
