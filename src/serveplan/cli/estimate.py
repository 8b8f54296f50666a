"""``serveplan estimate``: one step (and optionally a static batch) with its breakdown."""

from __future__ import annotations

import typer
from rich.table import Table

from serveplan.cli.base import console, emit_json, options_command
from serveplan.commands import estimate as command
from serveplan.specs.catalog import get_engine
from serveplan.specs.profile import Phase
from serveplan.units import fmt_bytes, fmt_ms
from serveplan.validate.answers import band_line

_EXTRA = (("json_out", bool, typer.Option(False, "--json", help="Print JSON.")),)


@options_command("estimate", command.EstimateOptions, extra=_EXTRA)
def estimate_cmd(opts: command.EstimateOptions, *, json_out: bool = False) -> None:
    """Time of one forward step per module and operator, memory per device, and (with --output-len)
    the static-batch metrics, priced as the engine runs it (default: Llama-3.1-70B on H100 under
    vLLM, the smallest TP that fits, batch 1, input 2048). BestServe's Table 3: --engine bestserve
    -m codellama-34b -H ascend-910b3 --tp 4. With --op, the time the model gives one operator (e.g.
    `--op gemm --m 16 --n 4096 --k 4096 --dtype fp8`), to compare with a kernel benchmark."""
    out = command.run(opts)
    if json_out:
        emit_json(out.document())
        return
    if out.operator is not None:
        res_op = out.operator
        shape = ", ".join(f"{k_}={v}" for k_, v in res_op.shape.items())
        detail = (f"compute {fmt_ms(res_op.compute_s, 4)} ms, memory {fmt_ms(res_op.memory_s, 4)} ms, "
                  f"{res_op.bound} bound; {res_op.flops / 1e9:,.3f} GFLOP, {res_op.bytes / 1e6:,.3f} MB"
                  if res_op.flops else f"{res_op.bytes / 1e6:,.3f} MB payload")
        console().print(f"{res_op.op} ({shape}) on {out.hardware}: {fmt_ms(res_op.time_s, 4)} ms ({detail}); "
                        f"{res_op.model}")
        return
    res = out.step
    assert res is not None
    engine = opts.engine
    step_band = out.band
    con = console()
    what = (f"{res.phase} step, batch {res.batch}, input {res.input_len}" if res.phase is Phase.PREFILL
            else f"decode step, batch {res.batch}, context {res.context_len}")
    devices = res.parallel.num_devices
    setup = (f"{devices} device{'s' if devices > 1 else ''}: {res.parallel.label()}, {res.dtype} weights, KV "
             f"{res.kv_dtype}, profile {res.profile}, as {get_engine(engine).label} runs it")
    console().print(f"{res.model} on {res.hardware} ({setup}): {what}")
    t = Table()
    for col in ("layers", "module", "dispatch (ms)", "compute (ms)", "communicate (ms)", "step (ms)"):
        t.add_column(col, justify="left" if col == "module" else "right")
    for m in res.step.modules:
        t.add_row(f"{m.count}x", f"{m.name}" + (f" [{m.group}]" if m.group not in ("dense",) else ""),
                  fmt_ms(m.dispatch_s), fmt_ms(m.compute_s), fmt_ms(m.comm_s), "")
    if res.step.pp_comm_s:
        t.add_row("", "pipeline send/recv", "", "", fmt_ms(res.step.pp_comm_s), "")
    # the step time overlaps dispatch with compute and communication (Algorithm 1): its own column
    t.add_row("", "TOTAL step (all layers, Algorithm 1 overlap)", "", "", "",
              fmt_ms(res.step.total_s), style="bold")
    con.print(t)
    mem = res.step.memory
    con.print(
        f"memory per device: weights {fmt_bytes(mem.weights_bytes)}, KV {mem.kv_bytes_per_token / 1e3:.1f} KB/token, "
        f"activations {fmt_bytes(mem.activation_bytes)}; KV capacity {mem.kv_capacity_tokens:,} tokens per instance "
        f"({mem.memory_utilization:.0%} of {fmt_bytes(mem.device_memory_bytes)})"
    )
    if res.engine_note and engine:
        con.print(f"{get_engine(engine).label}: {res.engine_note}")
    fits = "fits" if res.kv_fits else "DOES NOT FIT: the engine would queue or preempt part of the batch"
    con.print(f"KV cache: batch {res.batch} x {res.max_sequence_len:,} tokens needs {res.kv_tokens_needed:,.0f} of "
              f"{res.kv_capacity_tokens:,} tokens: {fits}")
    if not res.kv_fits:
        typer.echo(f"warning: the batch's KV cache ({res.kv_tokens_needed:,.0f} tokens) exceeds the capacity "
                   f"({res.kv_capacity_tokens:,} tokens); the times are for a batch that cannot run at once", err=True)
    if res.beyond_max_position:
        typer.echo(f"warning: sequences of {res.max_sequence_len:,} tokens exceed the model's "
                   "max_position_embeddings (--allow-long-context)", err=True)
    if res.static:
        s = res.static
        con.print(
            f"static batch {s.batch} x ({s.input_len} in, {s.output_len} out): TTFT {fmt_ms(s.ttft_s)} ms, "
            f"ITL {fmt_ms(s.itl_s)} ms, E2E {fmt_ms(s.e2e_s, 1)} ms, throughput {s.throughput_tokens_per_s:,.0f} tok/s "
            f"({s.output_tokens_per_s:,.0f} output tok/s), FOM {s.fom_flops_per_s / 1e12:.1f} TFLOP/s"
        )
    if res.spec is not None:
        sd = res.spec
        con.print(f"speculative decoding: {sd.method.value}, K={sd.k}, {sd.expected_tokens:.3f} expected tokens per "
                  f"verify step; the breakdown is the verify pass ({sd.verify_tokens} tokens per sequence), TOTAL of a "
                  "decode step is (verify + draft) / expected tokens, per generated token")
    if out.confidence is not None:
        shown = {k: b for k, b in out.confidence.items()
                 if res.static or k == ("TTFT" if res.phase is Phase.PREFILL else "TPOT")}
        labels = {"TTFT": "TTFT (prefill step)" if not res.static else "TTFT", "TPOT": "ITL/TPOT"}
        con.print(band_line(shown, labels))
    if step_band is not None:
        con.print(f"step time band from the profile's uncertainty ({step_band.samples} samples): "
                  f"P10 {fmt_ms(step_band.p10)} ms, P50 {fmt_ms(step_band.p50)} ms, P90 {fmt_ms(step_band.p90)} ms")


