"""``serveplan estimate``: one step (and optionally a static batch) with its breakdown."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer
from rich.table import Table

from serveplan.cli import app, console, emit_json, handle_errors
from serveplan.errors import check_int
from serveplan.estimator.api import EstimateResult, estimate
from serveplan.specs.catalog import get_engine
from serveplan.specs.parallel import ParallelConfig
from serveplan.specs.profile import Phase
from serveplan.specs.speculative import SpecDecodeConfig
from serveplan.units import fmt_bytes, fmt_ms

if TYPE_CHECKING:
    from serveplan.calibrate.bands import Band

MODEL_HELP = "Catalog id (see `serveplan models`) or path to a Hugging Face config.json."
HW_HELP = "Catalog id (see `serveplan hardware`) or path to a hardware YAML file."
PROFILE_HELP = "Efficiency profile id or YAML path (default: the hardware's own, else default-gpu)."


@app.command("estimate")
@handle_errors
def estimate_cmd(
    model: str = typer.Option("codellama-34b", "--model", "-m", help=MODEL_HELP),
    hardware: str = typer.Option("ascend-910b3", "--hardware", "-H", help=HW_HELP),
    profile: str | None = typer.Option(None, "--profile", "-p", help=PROFILE_HELP),
    engine: str | None = typer.Option(None, "--engine", help=(
        "Price the step as this engine runs it (vllm, sglang, trtllm or a versioned id): its kernels and "
        "fused operators. Default: the profile's operators (BestServe's eager list).")),
    tp: int = typer.Option(4, "--tp", help="Tensor-parallel size."),
    pp: int = typer.Option(1, "--pp", help="Pipeline stages."),
    dp: int = typer.Option(1, "--dp", help="Data-parallel attention ranks."),
    ep: int = typer.Option(1, "--ep", help="Expert-parallel size (MoE)."),
    dtype: str | None = typer.Option(None, "--dtype", help="Weight dtype: fp32, bf16, fp16, fp8, int8, int4."),
    kv_dtype: str | None = typer.Option(
        None, "--kv-dtype",
        help="KV-cache format: fp32, bf16, fp16, fp8, int8, nvfp4 "
             "(default: the weights' 16/32-bit format; bf16 under 8/4-bit weights)."),
    batch: int = typer.Option(1, "--batch", "-b", help="Sequences in the step."),
    input_len: int = typer.Option(2048, "--input-len", "-s", help="Prompt tokens per sequence."),
    output_len: int | None = typer.Option(
        None, "--output-len", "-n", help="Output tokens: adds static-batch TTFT/ITL/E2E/FOM."),
    phase: str = typer.Option("prefill", "--phase", help="Step to break down: prefill or decode."),
    context_len: int | None = typer.Option(
        None, "--context-len", help="Keys attended by each decode (default input+output-1)."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
    band: bool = typer.Option(
        False, "--band", help="P10/P50/P90 of the step time from a calibrated profile's uncertainty."),
    band_samples: int = typer.Option(200, "--band-samples", help="Profiles sampled for --band."),
    seed: int = typer.Option(0, "--seed", help="Seed of the --band samples."),
    op: str | None = typer.Option(None, "--op", help="Time one operator instead of a step: gemm, attention, "
                                                     "allreduce, allgather, reducescatter, alltoall, sendrecv."),
    op_m: int | None = typer.Option(None, "--m", help="--op gemm: rows (tokens) of the activations."),
    op_n: int | None = typer.Option(None, "--n", help="--op gemm: output columns of the weight."),
    op_k: int | None = typer.Option(None, "--k", help="--op gemm: inner dimension (input columns)."),
    heads: int | None = typer.Option(None, "--heads", help="--op attention: query heads (on this device)."),
    kv_heads: int | None = typer.Option(None, "--kv-heads", help="--op attention: KV heads (default: --heads)."),
    head_dim: int = typer.Option(128, "--head-dim", help="--op attention: head dimension."),
    op_bytes: float | None = typer.Option(None, "--bytes", help="--op <collective>: payload bytes per rank."),
    ranks: int | None = typer.Option(None, "--ranks", help="--op <collective>: devices in the group."),
    spec_method: str | None = typer.Option(None, "--spec-method", help=(
        "Speculative decoding: draft, eagle, mtp, ngram or none (decode steps verify K+1 tokens per sequence).")),
    spec_tokens: int | None = typer.Option(None, "--spec-tokens", help="Draft tokens per step K (default: the "
                                                                       "method's; 0 = off)."),
    spec_acceptance: str | None = typer.Option(None, "--spec-acceptance", help=(
        "Acceptance rate per draft position in [0, 1]: one rate or a comma list.")),
    spec_draft_model: str | None = typer.Option(None, "--spec-draft-model",
                                                help="Draft model for --spec-method draft."),
    allow_long_context: bool = typer.Option(
        False, "--allow-long-context",
        help="Price sequences longer than the model's max_position_embeddings (refused otherwise)."),
) -> None:
    """Time of one forward step per module and operator, memory per device, and (with
    --output-len) the static-batch metrics. Default: BestServe Table 3 (CodeLlama-34B, Ascend
    910B3, TP 4, batch 1, input 2048). With --op, the time the model gives one operator
    (e.g. `--op gemm --m 16 --n 4096 --k 4096 --dtype fp8 -H h100-sxm`), to compare with a kernel
    benchmark."""
    if op is not None:
        _operator(op, hardware=hardware, profile=profile, dtype=dtype, phase=phase, m=op_m, n=op_n, k=op_k,
                  batch=batch, input_len=input_len, context_len=context_len, heads=heads, kv_heads=kv_heads,
                  head_dim=head_dim, kv_dtype=kv_dtype, nbytes=op_bytes, ranks=ranks, json_out=json_out)
        return
    check_int("band-samples", band_samples, low=2, high=100_000, why="profiles sampled for --band")
    check_int("seed", seed, low=0)
    res = estimate(model, hardware, profile=profile, parallel=ParallelConfig(tp=tp, pp=pp, dp=dp, ep=ep),
                   dtype=dtype, kv_dtype=kv_dtype, batch=batch, input_len=input_len, output_len=output_len, phase=phase,
                   context_len=context_len, allow_long_context=allow_long_context, engine=engine,
                   spec=SpecDecodeConfig.of(spec_method, spec_tokens, spec_acceptance, spec_draft_model))
    step_band = _step_band(res, model, hardware, profile, band_samples, seed, engine) if band else None
    if json_out:
        d = res.to_dict()
        if step_band is not None:
            d["band"] = step_band.to_dict()
        emit_json(d)
        return
    con = console()
    what = (f"{res.phase} step, batch {res.batch}, input {res.input_len}" if res.phase is Phase.PREFILL
            else f"decode step, batch {res.batch}, context {res.context_len}")
    setup = f"{res.parallel.label()}, {res.dtype}, KV {res.kv_dtype}, profile {res.profile}" + (
        f", as {engine} runs it" if engine else "")
    t = Table(title=f"{res.model} on {res.hardware} ({setup}): {what}")
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
    if step_band is not None:
        con.print(f"step time band from the profile's uncertainty ({step_band.samples} samples): "
                  f"P10 {fmt_ms(step_band.p10)} ms, P50 {fmt_ms(step_band.p50)} ms, P90 {fmt_ms(step_band.p90)} ms")


def _step_band(res: EstimateResult, model: str, hardware: str, profile: str | None, samples: int,
               seed: int, engine: str | None = None) -> Band:
    """Band of the step time of ``res`` over profiles sampled from the profile's uncertainty."""
    from serveplan.calibrate.bands import band
    from serveplan.estimator.api import resolve_specs
    from serveplan.estimator.batch import StepBatch
    from serveplan.estimator.step import Estimator

    m, hw, pr = resolve_specs(model, hardware, profile, engine)
    b = (StepBatch.prefill(res.batch, res.input_len) if res.phase is Phase.PREFILL
         else StepBatch.decode(res.batch, res.context_len or 1))
    return band(lambda p: Estimator(m, hw, p, res.parallel, dtype=res.dtype, kv_dtype=res.kv_dtype).time(b),
                pr, samples=samples, seed=seed)


def _operator(op: str, *, hardware: str, profile: str | None, dtype: str | None, phase: str, m: int | None,
              n: int | None, k: int | None, batch: int, input_len: int, context_len: int | None, heads: int | None,
              kv_heads: int | None, head_dim: int, kv_dtype: str | None, nbytes: float | None, ranks: int | None,
              json_out: bool) -> None:
    """``estimate --op``: one operator's time (:mod:`serveplan.estimator.operators`)."""
    from serveplan.errors import SpecError, check_number
    from serveplan.estimator.operators import COLLECTIVE_NAMES, OPERATORS, attention_time, collective_time, gemm_time
    from serveplan.specs.catalog import get_hardware, get_profile

    for flag, v in (("--m", m), ("--n", n), ("--k", k), ("--heads", heads), ("--kv-heads", kv_heads),
                    ("--head-dim", head_dim)):
        if v is not None:
            check_int(flag, v, low=1, high=2**40, why="a tensor dimension")
    if heads is not None and kv_heads is not None and (kv_heads > heads or heads % kv_heads):
        raise SpecError(f"kv_heads={kv_heads} must divide heads={heads} (--kv-heads, --heads: grouped-query attention)")
    if ranks is not None:
        check_int("--ranks", ranks, low=2, high=2**20, why="devices in a collective group")
    if nbytes is not None:
        check_number("--bytes", nbytes, low=0, low_open=True, unit="payload bytes per rank")
    hw = get_hardware(hardware)
    pr = get_profile(profile, hw.name)
    name = op.lower()
    if name == "gemm":
        if m is None or n is None or k is None:
            missing = [f for f, v in (("--m", m), ("--n", n), ("--k", k)) if v is None]
            raise SpecError(f"--op gemm needs {', '.join(missing)} (the GEMM is m x k by k x n)")
        res = gemm_time(m, n, k, hardware=hw, profile=pr, dtype=dtype or "bf16", phase=phase)
    elif name == "attention":
        if heads is None:
            raise SpecError("--op attention needs --heads (query heads on the device; also --kv-heads, --head-dim)")
        length = input_len if phase == "prefill" else (context_len if context_len is not None else input_len)
        res = attention_time(phase, batch=batch, length=length, heads=heads, kv_heads=kv_heads or heads,
                             head_dim=head_dim, hardware=hw, profile=pr, kv_dtype=kv_dtype or "bf16")
    elif name in COLLECTIVE_NAMES:
        if nbytes is None or ranks is None:
            missing = [f for f, v in (("--bytes", nbytes), ("--ranks", ranks)) if v is None]
            raise SpecError(f"--op {op} needs {', '.join(missing)}")
        res = collective_time(name, nbytes, ranks, hardware=hw, profile=pr, phase=phase)
    else:
        raise SpecError(f"--op {op!r}; expected one of: {', '.join(OPERATORS)}")
    if json_out:
        emit_json({"hardware": hw.name, "profile": pr.name, **res.to_dict()})
        return
    shape = ", ".join(f"{k_}={v}" for k_, v in res.shape.items())
    detail = (f"compute {fmt_ms(res.compute_s, 4)} ms, memory {fmt_ms(res.memory_s, 4)} ms, {res.bound} bound; "
              f"{res.flops / 1e9:,.3f} GFLOP, {res.bytes / 1e6:,.3f} MB" if res.flops
              else f"{res.bytes / 1e6:,.3f} MB payload")
    console().print(f"{res.op} ({shape}) on {hw.name}: {fmt_ms(res.time_s, 4)} ms ({detail}); {res.model}")
