"""``offload``: FlexGen-style placement of weights, KV cache and activations over GPU, CPU and disk
(``serveplan offload``, the web page's Offload panels): search, evaluate a given policy, or the
latency-throughput frontier.

Default: OPT-30B on FlexGen's T4 machine, 512 + 32 tokens (FlexGen Table 2).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from serveplan.commands.options import CommandOptions, opt
from serveplan.errors import SpecError, check_int, check_number
from serveplan.offload.policy import Overlap, parse_policy
from serveplan.offload.search import OffloadFrontier, OffloadPlan, evaluate_policy, offload_frontier, plan_offload
from serveplan.report.plots import plot_frontier
from serveplan.specs.catalog import get_host, get_model
from serveplan.units import json_safe


@dataclass(frozen=True, slots=True, kw_only=True)
class OffloadOptions(CommandOptions):
    """The question ``serveplan offload`` answers (module doc)."""

    model: str = opt("opt-30b", "--model", "-m", help="Catalog id, Hugging Face id or path to a config.json.")
    gpu: str | None = opt(None, "--gpu", help="GPU id (default: the host's GPU).")
    host: str = opt("flexgen-t4", "--host", help="Host id (flexgen-t4, flexgen-3090, ...) or YAML path.")
    input_len: int = opt(512, "--input-len", "-s", help="Prompt tokens per sequence.")
    output_len: int = opt(32, "--output-len", "-n", help="Generated tokens per sequence.")
    compress: bool | None = opt(None, "--compress", off_flag="--no-compress", help=(
        "4-bit group-wise compression of weights and KV (default: search both; with --policy: off)."))
    cpu_attention: bool | None = opt(None, "--cpu-attention", off_flag="--no-cpu-attention", help=(
        "Decode attention on the CPU for off-GPU cache (default: search both; with --policy: on unless "
        "compressed)."))
    policy: str | None = opt(None, "--policy", help=(
        "Evaluate this FlexGen tuple instead of searching, e.g. 48x3,20,80,0,100,0,100."), page=False)
    max_latency: float | None = opt(None, "--max-latency", help="Upper bound on the block latency, seconds.",
                                    page=False)
    frontier: bool = opt(False, "--frontier", help="The latency-throughput frontier.", page=False)
    overlap: str = opt(Overlap.SERIAL_LOAD.value, "--overlap", help="How the five terms overlap: "
                       + ", ".join(o.value for o in Overlap) + ".", page=False)
    memory_headroom: float | None = opt(None, "--memory-headroom", help=(
        "Fraction of every tier to keep free, e.g. 0.1 (default 0; FlexGen's own search keeps 0.2)."))
    out: Path | None = opt(None, "--out", help="Directory for plan.json / frontier.json and frontier.png.",
                           page=False)
    allow_long_context: bool = opt(False, "--allow-long-context", help=(
        "Plan sequences longer than the model's max_position_embeddings."), page=False)

    def __post_init__(self) -> None:
        if self.max_latency is not None:
            check_number("--max-latency", self.max_latency, low=0, low_open=True, unit="s; inf = no bound",
                         allow_inf=True)
        check_int("--input-len", self.input_len, low=1, high=2**31, why="prompt tokens")
        check_int("--output-len", self.output_len, low=1, high=2**31, why="generated tokens")
        try:
            Overlap(self.overlap)
        except ValueError:
            raise SpecError(f"overlap={self.overlap!r}; expected one of: "
                            f"{', '.join(o.value for o in Overlap)}") from None
        if self.frontier and self.policy:
            raise SpecError("--frontier and --policy are exclusive: the frontier searches policies")
        if self.policy and self.max_latency is not None:
            raise SpecError("--max-latency applies to the search; it cannot be combined with --policy")


@dataclass(frozen=True, slots=True, kw_only=True)
class OffloadOutcome:
    """A plan (searched or evaluated) or the frontier, and the files written."""

    options: OffloadOptions
    plan: OffloadPlan | None = None
    frontier: OffloadFrontier | None = None
    mode: str = "search"
    files: tuple[Path, ...] = field(default_factory=tuple)

    def document(self) -> dict[str, Any]:
        """What ``serveplan offload --json`` prints and the page's API returns."""
        d = (self.frontier or self.plan).to_dict()  # type: ignore[union-attr]
        d["command"] = self.options.command_line("offload")
        out: dict[str, Any] = json_safe(d)
        return out


def prepare(o: OffloadOptions) -> OffloadOptions:
    """Check the names and lengths before any work."""
    spec = get_model(o.model)
    get_host(o.host)
    if o.input_len + o.output_len > spec.max_position_embeddings and not o.allow_long_context:
        raise SpecError(
            f"--input-len + --output-len = {o.input_len + o.output_len:,} tokens exceeds max_position_embeddings="
            f"{spec.max_position_embeddings:,} of {spec.name!r}; expected sequences within the model's context, or "
            "--allow-long-context to plan them anyway")
    return o


def run(o: OffloadOptions) -> OffloadOutcome:
    """Answer the offload question (module doc)."""
    prepare(o)
    max_latency = None if o.max_latency in (None, float("inf")) else o.max_latency
    overlap = Overlap(o.overlap)
    common: dict[str, Any] = {"gpu": o.gpu, "host": o.host, "input_len": o.input_len, "output_len": o.output_len,
                              "overlap": overlap, "memory_headroom": o.memory_headroom}
    files: list[Path] = []
    if o.frontier:
        fr = offload_frontier(o.model, compress=o.compress, cpu_attention=o.cpu_attention, **common)
        if o.out is not None:
            o.out.mkdir(parents=True, exist_ok=True)
            p = o.out / "frontier.json"
            p.write_text(json.dumps(json_safe(fr.to_dict()), indent=2, allow_nan=False))
            files += [p, plot_frontier(fr, o.out / "frontier.png")]
        return OffloadOutcome(options=o, frontier=fr, mode="frontier", files=tuple(files))
    if o.policy:
        pol = parse_policy(o.policy, compress=bool(o.compress), cpu_attention=o.cpu_attention)
        plan = evaluate_policy(o.model, pol, **common)
        mode = "evaluate"
    else:
        plan = plan_offload(o.model, compress=o.compress, cpu_attention=o.cpu_attention, max_latency_s=max_latency,
                            **common)
        mode = "search"
    if o.out is not None:
        o.out.mkdir(parents=True, exist_ok=True)
        p = o.out / "plan.json"
        p.write_text(json.dumps(json_safe(plan.to_dict()), indent=2, allow_nan=False))
        files.append(p)
    return OffloadOutcome(options=o, plan=plan, mode=mode, files=tuple(files))
