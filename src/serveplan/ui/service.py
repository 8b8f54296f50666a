"""The one module through which the web planner calls serveplan: the page is a front end over the
command layer (:mod:`serveplan.commands`), as the CLI is.

Each panel is one command: Plan is ``plan`` (``serveplan optimize``), Day plan ``day-plan``, Simulate ``simulate``, Step
``estimate``, Offload ``offload`` (and ``offload --frontier``). A request's fields are the command's
option names (``slo-ttft``, ``max-batch``), parsed by the command's own options value
(:meth:`~serveplan.commands.options.CommandOptions.parse`), so types, defaults, checks and messages
are the CLI's, and the page shows the command line that reproduces its result. The answer is the
document the command prints with ``--json``.

Work is bounded per request (:data:`LIMITS`): a page cannot start a search over hundreds of devices
or a simulation of millions of requests; the CLI has no such limits.
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from serveplan.commands import day, estimate, offload, plan, simulate
from serveplan.commands.options import CommandOptions
from serveplan.errors import InfeasibleError, SolverError, SpecError
from serveplan.offload import list_hosts
from serveplan.optimize.goodput import GoodputResult
from serveplan.report.deploy import launch_plan
from serveplan.sim import SCENARIOS
from serveplan.sim.schedulers import collocated_schedulers
from serveplan.specs.catalog import (
    get_hardware,
    list_datasets,
    list_engines,
    list_hardware,
    list_models,
    list_profiles,
    list_traffic,
)
from serveplan.units import DType

#: Most work one request may start (the CLI is unbounded).
LIMITS = {"devices": 64, "plan_requests": 20_000, "simulate_requests": 50_000, "day_requests": 50_000,
          "sweep_rates": 12, "concurrency_levels": 8, "batch": 4096, "tokens": 1_048_576}

Progress = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class Panel:
    """One page panel: the command behind it, its options value and the options it shows (in form
    order: every option of the command the page offers, see ``Opt.page``)."""
    kind: str
    command: str
    title: str
    options: type[CommandOptions]
    fixed: Mapping[str, Any] = field(default_factory=dict)        # options always set (shown in the command)
    ui_defaults: Mapping[str, str] = field(default_factory=dict)  # form values differing from the CLI's

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(f.opt.name for f in self.options.fields() if f.opt.page and f.opt.name not in self.fixed)

    @property
    def fixed_argv(self) -> list[str]:
        """The command-line flags of the fixed options."""
        return self.options.parse(self.fixed).argv()


PANELS: dict[str, Panel] = {p.kind: p for p in (
    Panel("plan", "optimize", "Plan", plan.PlanOptions),
    Panel("day", "day-plan", "Day plan", day.DayOptions),
    Panel("simulate", "simulate", "Simulate", simulate.SimulateOptions,
          ui_defaults={"num-requests": "2000", "rate-sweep": "1,2,3,4,5,6"}),
    Panel("step", "estimate", "Step", estimate.EstimateOptions),
    Panel("offload", "offload", "Offload", offload.OffloadOptions),
    Panel("frontier", "offload", "Offload frontier", offload.OffloadOptions, fixed={"frontier": True}),
)}

#: units shown beside the fields whose help does not end in them
_UNITS = {"slo-ttft": "s", "slo-tpot": "s", "rate": "req/s", "target-rate": "req/s", "think-time": "s",
          "peak": "req/s", "trough": "req/s", "interval": "s", "scale-up": "s", "startup": "s",
          "scale-down-delay": "s", "sim-warmup": "s", "load-bandwidth": "bytes/s", "peak-hour": "h",
          "input-len": "tokens", "output-len": "tokens", "context-len": "tokens", "system-prompt-len": "tokens",
          "chunk-size": "tokens", "token-budget": "tokens", "chunk-sizes": "tokens", "percentile": "%",
          "memory-headroom": "share", "memory-fraction": "share", "prefix-hit": "share", "rate-sweep": "req/s"}


def _default_text(v: Any) -> str:
    if v is None or v is False:
        return ""
    if v is True:
        return "on"
    return str(getattr(v, "value", v))


def schema() -> dict[str, Any]:
    """Panels and their fields (the commands' option names, defaults, help and units), with the
    catalogs and limits."""
    panels = {}
    for panel in PANELS.values():
        fields = []
        for name in panel.fields:
            f = panel.options.field(name)
            kind = "tristate" if f.is_switch and f.opt.off_flag else ("switch" if f.is_switch else "text")
            fields.append({"name": name, "kind": kind, "default": _default_text(f.default),
                           "value": panel.ui_defaults.get(name, _default_text(f.default)), "help": f.opt.help,
                           "unit": _UNITS.get(name, "")})
        panels[panel.kind] = {"title": panel.title, "command": panel.command, "fields": fields}
    hardware = {}
    for h in list_hardware():
        hw = get_hardware(h)
        hardware[h] = {"peak_flops": {k.value: v for k, v in hw.peak_flops.items()},
                       "memory_bandwidth": hw.memory_bandwidth, "memory_bytes": hw.memory_bytes}
    return {"panels": panels, "limits": LIMITS,
            "choices": {"model": list_models(), "hardware": sorted(hardware), "gpu": sorted(hardware),
                        "host": list_hosts(), "scenario": list(SCENARIOS), "profile": list_profiles(),
                        "engine": list_engines(), "dataset": list_datasets(),
                        "traffic": ["diurnal", *list_traffic()], "policy": ["scheduled", "reactive"],
                        "phase": ["prefill", "decode"], "scheduler": list(collocated_schedulers()),
                        "schedulers": list(collocated_schedulers()),
                        "dtype": ["bf16", "fp16", "fp8", "fp8_block", "nvfp4", "mxfp4", "int8", "int4", "fp32"],
                        "kv-dtype": ["bf16", "fp16", "fp8", "int8", "nvfp4"],
                        "spec-method": ["draft", "eagle", "mtp", "ngram"]},
            "hardware": hardware}


@dataclass(frozen=True, slots=True)
class Request:
    """A validated request: the panel, its options value and the argument list the CLI would get."""
    kind: str
    options: CommandOptions

    @property
    def argv(self) -> tuple[str, ...]:
        return tuple(self.options.argv())

    @property
    def command(self) -> str:
        """The equivalent command line (add ``--json`` for the document the API returns)."""
        return shlex.join(["serveplan", PANELS[self.kind].command, *self.argv])

    @property
    def key(self) -> tuple[str, tuple[str, ...]]:
        """Cache key: the same inputs give the same argument list (defaults left out)."""
        return self.kind, self.argv


def parse(kind: str, values: Mapping[str, Any]) -> Request:
    """Validate ``values`` (option name -> text) for panel ``kind`` with the command's own options.

    Raises
    ------
    SpecError
        An unknown panel or field, a value the command rejects (its message), or one above
        :data:`LIMITS`.
    """
    if kind not in PANELS:
        raise SpecError(f"unknown panel {kind!r}; expected one of: {', '.join(PANELS)}")
    panel = PANELS[kind]
    unknown = sorted(set(values) - set(panel.fields))
    if unknown:
        raise SpecError(f"unknown field {unknown[0]!r} for {panel.title}; expected one of: {', '.join(panel.fields)}")
    opts = panel.options.parse({**{k: v for k, v in values.items()}, **panel.fixed})
    req = Request(kind, opts)
    _check_limits(req)
    return req


def _check_limits(req: Request) -> None:
    o: Any = req.options

    def over(name: str, value: float, limit: float) -> None:
        if value > limit:
            raise SpecError(f"{name}={value:g} is above this server's limit of {limit:g}; "
                            f"run `{PANELS[req.kind].command}` from the CLI for larger work")

    if req.kind in ("plan", "day"):
        over("devices", sum(o.budget().values()), LIMITS["devices"])
        over("num-requests", o.num_requests, LIMITS["plan_requests"])
    if req.kind == "day":
        over("sim-requests", o.sim_requests, LIMITS["day_requests"])
    elif req.kind == "simulate":
        over("num-requests", o.num_requests, LIMITS["simulate_requests"])
        if o.rate_sweep:
            over("rate-sweep (rates)", len(o.rate_sweep.split(",")), LIMITS["sweep_rates"])
        if o.concurrency:
            over("concurrency (levels)", len(o.concurrency.split(",")), LIMITS["concurrency_levels"])
    elif req.kind == "step":
        over("batch", o.batch, LIMITS["batch"])
    for name in ("input_len", "output_len"):
        v = getattr(o, name, None)
        if v:
            over(name.replace("_", "-"), v, LIMITS["tokens"])


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
    work: Any


def prepare(req: Request) -> Prepared:
    """Build what the command would build before any work (specs, space, workloads, config).

    Raises
    ------
    SpecError
        With the command's message (unknown model, a layout that does not divide the model, ...).
    """
    o: Any = req.options
    work: Any
    if req.kind == "plan":
        work = plan.prepare(o)
    elif req.kind == "day":
        work = day.prepare(o)
    elif req.kind == "simulate":
        work = simulate.prepare(o)
    elif req.kind == "step":
        work = estimate.prepare(o)
    else:
        work = offload.prepare(o)
    return Prepared(req, work)


def run(prep: Prepared, progress: Progress | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Do the work: ``(document, extra)`` where ``document`` is what the command prints with
    ``--json`` and ``extra`` what only the page draws (per-request latencies, the roofline)."""
    kind = prep.request.kind
    if kind == "plan":
        res = plan.run(prep.work, on_progress=progress)
        return res.document(), {}
    if kind == "day":
        return day.run(prep.work, on_progress=progress).document(), {}
    if kind == "simulate":
        sim = simulate.run(prep.work, on_progress=progress)
        extra: dict[str, Any] = {}
        if sim.result is not None:
            req = sim.result.requests
            extra = {"requests": {"ttft_s": _finite(req.ttft), "tpot_s": _finite(req.tpot[req.output_len > 1])}}
        return sim.document(), extra
    if kind == "step":
        out = estimate.run(prep.work)
        doc = out.document()
        hw = get_hardware(prep.work.hardware)
        extra = {}
        if out.step is not None:
            dtype = DType.parse(out.step.dtype)
            extra = {"roofline": {"peak_flops": hw.flops(dtype), "memory_bandwidth": hw.memory_bandwidth,
                                  "dtype": dtype.value}}
        return doc, extra
    return offload.run(prep.work).document(), {}


def deploy_for(prep: Prepared, row: Mapping[str, Any]) -> dict[str, Any]:
    """Launch files of another strategy of a plan (a row of its ``strategies``)."""
    cand = GoodputResult.from_dict(dict(row)).candidate
    doc: dict[str, Any] = launch_plan(cand, prep.work.settings[0]).to_dict()
    return doc


def _finite(a: Any) -> list[float]:
    return [float(v) for v in a[np.isfinite(a)]]


__all__ = ["LIMITS", "PANELS", "Panel", "Prepared", "Request", "dataclasses", "deploy_for", "error_text", "parse",
           "prepare", "run", "schema"]
