"""``serveplan offload``: FlexGen-style placement of weights, KV cache and activations over GPU, CPU
and disk (search, evaluate a given policy, or the latency-throughput frontier)."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from serveplan.cli import app, console, emit_json, handle_errors
from serveplan.errors import SpecError, check_int, check_number
from serveplan.offload.policy import Overlap, parse_policy
from serveplan.offload.search import (
    OffloadFrontier,
    OffloadPlan,
    evaluate_policy,
    offload_frontier,
    plan_offload,
)
from serveplan.specs.catalog import get_model
from serveplan.units import fmt_bytes

_TIERS = ("gpu", "cpu", "disk")


@app.command("offload")
@handle_errors
def offload_cmd(
    model: str = typer.Option("opt-30b", "--model", "-m", help="Catalog id or path to a HF config.json."),
    gpu: str | None = typer.Option(None, "--gpu", help="GPU id (default: the host's GPU)."),
    host: str = typer.Option("flexgen-t4", "--host", help="Host id (flexgen-t4, flexgen-3090) or YAML path."),
    input_len: int = typer.Option(512, "--input-len", "-s", help="Prompt tokens per sequence."),
    output_len: int = typer.Option(32, "--output-len", "-n", help="Generated tokens per sequence."),
    compress: bool | None = typer.Option(
        None, "--compress/--no-compress",
        help="4-bit group-wise compression of weights and KV (default: search both; with --policy: off)."),
    cpu_attention: bool | None = typer.Option(
        None, "--cpu-attention/--no-cpu-attention",
        help="Decode attention on the CPU for off-GPU cache (default: search both; with --policy: on unless "
             "compressed)."),
    policy: str | None = typer.Option(
        None, "--policy", help="Evaluate this FlexGen tuple instead of searching, e.g. 48x3,20,80,0,100,0,100."),
    max_latency: float | None = typer.Option(None, "--max-latency", help="Upper bound on the block latency (s)."),
    frontier: bool = typer.Option(False, "--frontier", help="Print the latency-throughput frontier."),
    overlap: Overlap = typer.Option(Overlap.SERIAL_LOAD, "--overlap", help="How the five terms overlap."),
    memory_headroom: float | None = typer.Option(
        None, "--memory-headroom",
        help="Fraction of every tier to keep free, e.g. 0.1 (default 0; FlexGen's own search keeps 0.2)."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
    out: Path | None = typer.Option(None, "--out", help="Directory for plan.json / frontier.json and frontier.png."),
    allow_long_context: bool = typer.Option(
        False, "--allow-long-context", help="Plan sequences longer than the model's max_position_embeddings."),
) -> None:
    """Where weights, KV cache and activations should live (GPU, CPU, disk), with which GPU batch
    size, block size, compression and CPU attention, and the throughput and latency that follow
    (FlexGen's cost model and LP search). Default: OPT-30B on FlexGen's T4 machine, 512+32 tokens
    (FlexGen Table 2)."""
    if max_latency is not None:
        check_number("--max-latency", max_latency, low=0, low_open=True, unit="s; inf = no bound", allow_inf=True)
        if max_latency == float("inf"):
            max_latency = None
    check_int("--input-len", input_len, low=1, high=2**31, why="prompt tokens")
    check_int("--output-len", output_len, low=1, high=2**31, why="generated tokens")
    spec = get_model(model)
    if input_len + output_len > spec.max_position_embeddings and not allow_long_context:
        raise SpecError(
            f"--input-len + --output-len = {input_len + output_len:,} tokens exceeds max_position_embeddings="
            f"{spec.max_position_embeddings:,} of {spec.name!r}; expected sequences within the model's context, or "
            "--allow-long-context to plan them anyway")
    if frontier:
        if policy:
            raise SpecError("--frontier and --policy are exclusive: the frontier searches policies")
        fr = offload_frontier(model, gpu=gpu, host=host, input_len=input_len, output_len=output_len,
                              compress=compress, cpu_attention=cpu_attention, overlap=overlap,
                              memory_headroom=memory_headroom)
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            (out / "frontier.json").write_text(json.dumps(fr.to_dict(), indent=2, default=str))
            _plot(fr, out / "frontier.png")
        if json_out:
            emit_json(fr.to_dict())
        else:
            _render_frontier(fr, max_latency)
        return
    if policy:
        if max_latency is not None:
            raise SpecError("--max-latency applies to the search; it cannot be combined with --policy")
        pol = parse_policy(policy, compress=bool(compress), cpu_attention=cpu_attention)
        plan = evaluate_policy(model, pol, gpu=gpu, host=host, input_len=input_len,
                               output_len=output_len, overlap=overlap, memory_headroom=memory_headroom)
        mode = "evaluate"
    else:
        plan = plan_offload(model, gpu=gpu, host=host, input_len=input_len, output_len=output_len,
                            compress=compress, cpu_attention=cpu_attention, max_latency_s=max_latency,
                            overlap=overlap, memory_headroom=memory_headroom)
        mode = "search"
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "plan.json").write_text(json.dumps(plan.to_dict(), indent=2, default=str))
    if json_out:
        emit_json(plan.to_dict())
    else:
        _render_plan(plan, mode)


def _plot(fr: OffloadFrontier, path: Path) -> None:
    try:
        from serveplan.report.plots import plot_frontier
        plot_frontier(fr, path)
    except ImportError as exc:  # pragma: no cover - matplotlib is an optional extra
        typer.echo(f"plot skipped: {exc}", err=True)


def _pct(x: float) -> str:
    return f"{x * 100:.0f}"


def _render_plan(plan: OffloadPlan, mode: str) -> None:
    con = console()
    p = plan.policy
    flags = (("4-bit compression" if p.compress else "FP16")
             + (", CPU attention" if p.cpu_attention else ", GPU attention"))
    con.print(
        f"[bold]{plan.model}[/bold] on {plan.gpu} + host {plan.host}: {plan.input_len} prompt + "
        f"{plan.output_len} generated tokens ({mode}, overlap {plan.overlap.value})"
    )
    con.print(f"policy ({p.label()})  block {p.gpu_batch_size} x {p.num_gpu_batches} = {p.block_size}, {flags}")
    if plan.memory_headroom > 0:
        con.print(f"memory headroom: {plan.memory_headroom:.0%} of every tier kept free "
                  "(capacities below are net of it)")
    t = Table(title="Where each tensor lives (percent, bytes)")
    for col in ("tensor", "GPU %", "CPU %", "disk %", "GPU", "CPU", "disk"):
        t.add_column(col, justify="left" if col == "tensor" else "right")
    for name, fields, key in (("weights", ("wg", "wc", "wd"), "weights"),
                              ("KV cache", ("cg", "cc", "cd"), "kv_cache"),
                              ("activations", ("hg", "hc", "hd"), "activations")):
        b = plan.placement_bytes[key]
        t.add_row(name, *(_pct(getattr(p, f)) for f in fields), *(fmt_bytes(b[tier]) for tier in _TIERS))
    con.print(t)
    con.print(
        f"throughput [bold]{plan.throughput_tokens_per_s:.4g} token/s[/bold] (generated), latency "
        f"{plan.latency_s:.4g} s per block (prefill {plan.prefill_s:.4g} s, decode {plan.decode_s:.4g} s)"
    )
    m = Table(title="Peak memory per tier")
    for col in ("tier", "phase", "peak", "capacity", "used"):
        m.add_column(col, justify="left" if col in ("tier", "phase") else "right")
    for key, peak in plan.peak_memory_bytes.items():
        tier, _, phase = key.partition("_")
        cap = plan.capacity_bytes[key]
        used = f"{peak / cap:.0%}" if cap > 0 else "-"
        m.add_row(tier, phase or "all", fmt_bytes(peak), fmt_bytes(cap), used,
                  style="red" if key in plan.violations_bytes else None)
    con.print(m)
    bt = Table(title="Time per term (FlexGen A.3): seconds per layer and whole block")
    for col in ("term", "prefill / layer (s)", "decode / layer / step (s)", "prefill total (s)", "decode total (s)"):
        bt.add_column(col, justify="left" if col == "term" else "right")
    for term in ("ctog", "gtoc", "dtoc", "ctod", "comp"):
        bt.add_row(term, f"{plan.prefill_layer_terms_s[term]:.4g}", f"{plan.decode_layer_terms_s[term]:.4g}",
                  f"{plan.time_breakdown_s['prefill_' + term]:.4g}", f"{plan.time_breakdown_s['decode_' + term]:.4g}")
    con.print(bt)
    parts = ", ".join(f"{k} {v:.4g} s" for k, v in plan.time_breakdown_s.items()
                      if k.split("_", 1)[1] not in ("ctog", "gtoc", "dtoc", "ctod", "comp") and v > 0)
    if parts:
        con.print(f"compute parts: {parts}")
    if plan.violations_bytes:
        over = ", ".join(f"{k} by {fmt_bytes(v)}" for k, v in plan.violations_bytes.items())
        con.print(f"[red]warning: this policy overflows {over} under this model[/red]")
    if plan.search:
        con.print(f"searched {plan.search['candidates']} batch shapes, solved {plan.search['lps_solved']} LPs "
                  f"in {plan.search['seconds']:.2f} s")


def _render_frontier(fr: OffloadFrontier, max_latency: float | None) -> None:
    con = console()
    p0 = fr.points[0]
    t = Table(title=f"Latency-throughput frontier: {p0.model} on {p0.gpu} + {p0.host}, "
                    f"{p0.input_len}+{p0.output_len} tokens")
    for col in ("latency (s)", "throughput (token/s)", "block", "policy (gbs x #gb, wg, wc, cg, cc, hg, hc)",
                "compress", "CPU attn"):
        t.add_column(col, justify="right" if col in ("latency (s)", "throughput (token/s)", "block") else "left")
    for p in fr.points:
        if max_latency is not None and p.latency_s > max_latency:
            continue
        t.add_row(f"{p.latency_s:.4g}", f"{p.throughput_tokens_per_s:.4g}", str(p.policy.block_size),
                  p.policy.label(), "yes" if p.policy.compress else "no", "yes" if p.policy.cpu_attention else "no")
    con.print(t)
    con.print(f"searched {fr.search['candidates']} batch shapes, solved {fr.search['lps_solved']} LPs "
              f"in {fr.search['seconds']:.2f} s")
