"""``serveplan offload``: FlexGen-style placement of weights, KV cache and activations over GPU, CPU
and disk (search, evaluate a given policy, or the latency-throughput frontier)."""

from __future__ import annotations

import typer
from rich.table import Table

from serveplan.cli.base import console, emit_json, options_command
from serveplan.commands import offload as command
from serveplan.offload.search import OffloadFrontier, OffloadPlan
from serveplan.units import fmt_bytes

_TIERS = ("gpu", "cpu", "disk")


_EXTRA = (("json_out", bool, typer.Option(False, "--json", help="Print JSON.")),)


@options_command("offload", command.OffloadOptions, extra=_EXTRA)
def offload_cmd(opts: command.OffloadOptions, *, json_out: bool = False) -> None:
    """Where weights, KV cache and activations should live (GPU, CPU, disk), with which GPU batch
    size, block size, compression and CPU attention, and the throughput and latency that follow
    (FlexGen's cost model and LP search). Default: OPT-30B on FlexGen's T4 machine, 512+32 tokens
    (FlexGen Table 2)."""
    out = command.run(opts)
    if json_out:
        emit_json(out.document())
    elif out.frontier is not None:
        _render_frontier(out.frontier, None if opts.max_latency in (None, float("inf")) else opts.max_latency)
    else:
        assert out.plan is not None
        _render_plan(out.plan, out.mode)


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
