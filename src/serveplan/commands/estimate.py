"""``estimate``: one forward step per module and operator, or one operator alone (``serveplan
estimate``, the web page's Step panel).

Defaults: a Llama-3.1-70B prefill of 2,048 tokens on H100, priced as the bundled vLLM release runs
it (its kernels, fused operators and host work), on the smallest TP that holds the weights with a
useful KV cache (as ``simulate`` chooses it). ``--engine bestserve`` prices BestServe's eager
operator list (its Table 3: ``--engine bestserve -m codellama-34b -H ascend-910b3 --tp 4``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from serveplan.calibrate.bands import Band, band
from serveplan.commands.options import CommandOptions, opt
from serveplan.errors import SpecError, check_int, check_number
from serveplan.estimator.api import EstimateResult, estimate, resolve_specs, step_time_function
from serveplan.estimator.batch import StepBatch
from serveplan.estimator.operators import (
    COLLECTIVE_NAMES,
    OPERATORS,
    OperatorTime,
    attention_time,
    collective_time,
    gemm_time,
)
from serveplan.sim.serving import default_tp, engine_estimator
from serveplan.specs.catalog import get_engine, get_hardware, get_profile
from serveplan.specs.parallel import ParallelConfig
from serveplan.specs.profile import Phase
from serveplan.specs.speculative import SpecDecodeConfig
from serveplan.units import json_safe
from serveplan.validate.answers import step_bands, step_confidence
from serveplan.validate.confidence import Band as ConfidenceBand

#: options only a step estimate uses (``--op`` refuses them) and only ``--op`` uses (a step refuses them)
STEP_ONLY = ("model", "engine", "tp", "pp", "dp", "ep", "output_len", "band", "spec_method", "spec_tokens",
             "spec_acceptance", "spec_draft_model", "allow_long_context")
OP_ONLY = ("op_m", "op_n", "op_k", "heads", "kv_heads", "head_dim", "op_bytes", "ranks")


@dataclass(frozen=True, slots=True, kw_only=True)
class EstimateOptions(CommandOptions):
    """The question ``serveplan estimate`` answers (module doc)."""

    model: str = opt("llama-3.1-70b", "--model", "-m", help="Catalog id, Hugging Face id or path to a config.json.")
    hardware: str = opt("h100-sxm", "--hardware", "-H", help="Catalog id or hardware YAML path.")
    profile: str | None = opt(None, "--profile", "-p", help="Efficiency profile id or YAML path (default: the "
                                                                "hardware's own, else default-gpu).")
    engine: str = opt("vllm", "--engine", "-e", help=(
        "Price the step as this engine runs it (vllm, sglang, trtllm, a versioned id): its kernels, fused "
        "operators and host work; bestserve: BestServe's eager operator list."))
    tp: int | None = opt(None, "--tp", help="Tensor-parallel size (default: the smallest that fits with a useful "
                                            "KV cache, as simulate chooses it).")
    pp: int = opt(1, "--pp", help="Pipeline stages.")
    dp: int = opt(1, "--dp", help="Data-parallel attention ranks.")
    ep: int = opt(1, "--ep", help="Expert-parallel size (MoE).")
    dtype: str | None = opt(None, "--dtype", help="Weight format: fp32, bf16, fp16, fp8, int8, int4, nvfp4, ...")
    kv_dtype: str | None = opt(None, "--kv-dtype", help=(
        "KV-cache format: fp32, bf16, fp16, fp8, int8, nvfp4 (default: the engine's for the weights)."))
    batch: int = opt(1, "--batch", "-b", help="Sequences in the step.")
    input_len: int = opt(2048, "--input-len", "-s", help="Prompt tokens per sequence.")
    output_len: int | None = opt(None, "--output-len", "-n", help="Output tokens: adds static-batch "
                                                                   "TTFT/ITL/E2E/FOM.")
    phase: str = opt("prefill", "--phase", help="Step to break down: prefill or decode.")
    context_len: int | None = opt(None, "--context-len", help="Keys attended by each decode (default input+output-1).")
    band: bool = opt(False, "--band", help="P10/P50/P90 of the step time from a calibrated profile's uncertainty.",
                     page=False)
    band_samples: int = opt(200, "--band-samples", help="Profiles sampled for --band.", page=False)
    seed: int = opt(0, "--seed", help="Seed of the --band samples.", page=False)
    op: str | None = opt(None, "--op", help=("Time one operator instead of a step: gemm, attention, allreduce, "
                                             "allgather, reducescatter, alltoall, sendrecv."), page=False)
    op_m: int | None = opt(None, "--m", help="--op gemm: rows (tokens) of the activations.", page=False)
    op_n: int | None = opt(None, "--n", help="--op gemm: output columns of the weight.", page=False)
    op_k: int | None = opt(None, "--k", help="--op gemm: inner dimension (input columns).", page=False)
    heads: int | None = opt(None, "--heads", help="--op attention: query heads (on this device).", page=False)
    kv_heads: int | None = opt(None, "--kv-heads", help="--op attention: KV heads (default: --heads).", page=False)
    head_dim: int = opt(128, "--head-dim", help="--op attention: head dimension.", page=False)
    op_bytes: float | None = opt(None, "--bytes", help="--op <collective>: payload bytes per rank.", page=False)
    ranks: int | None = opt(None, "--ranks", help="--op <collective>: devices in the group.", page=False)
    spec_method: str | None = opt(None, "--spec-method", help=(
        "Speculative decoding: draft, eagle, mtp, ngram or none (decode steps verify K+1 tokens per sequence)."),
        page=False)
    spec_tokens: int | None = opt(None, "--spec-tokens", help="Draft tokens per step K (default: the method's).",
                                  page=False)
    spec_acceptance: str | None = opt(None, "--spec-acceptance", help="Acceptance rate per draft position.",
                                      page=False)
    spec_draft_model: str | None = opt(None, "--spec-draft-model", help="Draft model for --spec-method draft.",
                                       page=False)
    allow_long_context: bool = opt(False, "--allow-long-context", help=(
        "Price sequences longer than the model's max_position_embeddings (refused otherwise)."), page=False)

    def __post_init__(self) -> None:
        check_int("band-samples", self.band_samples, low=2, high=100_000, why="profiles sampled for --band")
        check_int("seed", self.seed, low=0)
        if self.phase not in ("prefill", "decode"):
            raise SpecError(f"phase={self.phase!r}; expected one of: prefill, decode")
        defaults = {f.name: f.default for f in self.fields()}
        if self.op is not None:
            used = [f"--{self.field(n).opt.name}" for n in STEP_ONLY if getattr(self, n) != defaults[n]]
            if used:
                raise SpecError(f"--op {self.op} times one operator: {', '.join(used)} would be ignored (they shape a "
                                "model's step); drop them, or drop --op")
        else:
            used = [f"--{self.field(n).opt.name}" for n in OP_ONLY if getattr(self, n) != defaults[n]]
            if used:
                raise SpecError(f"{', '.join(used)} shape one operator and need --op (gemm, attention or a "
                                "collective); drop them or add --op")


@dataclass(frozen=True, slots=True, kw_only=True)
class EstimateOutcome:
    """A step estimate (with its band) or one operator's timing."""

    options: EstimateOptions
    step: EstimateResult | None = None
    band: Band | None = None
    operator: OperatorTime | None = None
    hardware: str = ""
    profile: str = ""
    #: kind -> P10-P90 band of comparable validated rows (:mod:`serveplan.validate.answers`)
    confidence: dict[str, ConfidenceBand] | None = None

    def document(self) -> dict[str, Any]:
        """What ``serveplan estimate --json`` prints and the page's API returns."""
        if self.operator is not None:
            d: dict[str, Any] = {"hardware": self.hardware, "profile": self.profile, **self.operator.to_dict()}
        else:
            assert self.step is not None
            d = self.step.to_dict()
            if self.band is not None:
                d["band"] = self.band.to_dict()
            if self.confidence is not None:
                d["confidence"] = step_confidence(self.step, self.confidence)
        d["command"] = self.options.command_line("estimate")
        out: dict[str, Any] = json_safe(d)
        return out


def prepare(o: EstimateOptions) -> EstimateOptions:
    """Check the names and the layout before any work (a step estimate is quick; this lets the page
    refuse bad input before it starts a job)."""
    if o.op is not None:
        get_profile(o.profile, get_hardware(o.hardware).name)
        return o
    m, _, _ = resolve_specs(o.model, o.hardware, o.profile, get_engine(o.engine))
    if o.tp is not None:
        ParallelConfig(tp=o.tp, pp=o.pp, dp=o.dp, ep=o.ep).validate_for(m)
    return o


def run(o: EstimateOptions) -> EstimateOutcome:
    """Answer the estimate question (module doc)."""
    if o.op is not None:
        return _operator(o)
    eng = get_engine(o.engine)
    m, hw, pr = resolve_specs(o.model, o.hardware, o.profile, eng)
    tp = o.tp
    if tp is None:
        tp, _ = default_tp(eng, m, hw, pr, longest_request=o.input_len + (o.output_len or 0), pp=o.pp, dtype=o.dtype,
                           kv_dtype=o.kv_dtype)
    par = ParallelConfig(tp=tp, pp=o.pp, dp=o.dp, ep=o.ep)
    par.validate_for(m)
    # the engine's memory rule and KV format, as simulate resolves them
    _, util, kv = engine_estimator(eng, m, hw, pr, par, dtype=o.dtype, kv_dtype=o.kv_dtype)
    res = estimate(m, hw, profile=o.profile, parallel=par, dtype=o.dtype, kv_dtype=kv, batch=o.batch,
                   input_len=o.input_len, output_len=o.output_len, phase=o.phase, context_len=o.context_len,
                   allow_long_context=o.allow_long_context, engine=eng, memory_utilization=util,
                   spec=SpecDecodeConfig.of(o.spec_method, o.spec_tokens, o.spec_acceptance, o.spec_draft_model))
    step_band = None
    if o.band:
        _, _, pr = resolve_specs(o.model, o.hardware, o.profile, eng)
        b = (StepBatch.prefill(res.batch, res.input_len) if res.phase is Phase.PREFILL
             else StepBatch.decode(res.batch, res.context_len or 1))
        timer = step_time_function(o.model, o.hardware, res.parallel, b, dtype=res.dtype, kv_dtype=res.kv_dtype)
        step_band = band(timer, pr, samples=o.band_samples, seed=o.seed)
    return EstimateOutcome(options=o, step=res, band=step_band, confidence=step_bands(res, m, hw, eng))


def _operator(o: EstimateOptions) -> EstimateOutcome:
    """``estimate --op``: one operator's time (:mod:`serveplan.estimator.operators`)."""
    for flag, v in (("--m", o.op_m), ("--n", o.op_n), ("--k", o.op_k), ("--heads", o.heads),
                    ("--kv-heads", o.kv_heads), ("--head-dim", o.head_dim)):
        if v is not None:
            check_int(flag, v, low=1, high=2**40, why="a tensor dimension")
    if o.heads is not None and o.kv_heads is not None and (o.kv_heads > o.heads or o.heads % o.kv_heads):
        raise SpecError(f"kv_heads={o.kv_heads} must divide heads={o.heads} (--kv-heads, --heads: grouped-query "
                        "attention)")
    if o.ranks is not None:
        check_int("--ranks", o.ranks, low=2, high=2**20, why="devices in a collective group")
    if o.op_bytes is not None:
        check_number("--bytes", o.op_bytes, low=0, low_open=True, unit="payload bytes per rank")
    hw = get_hardware(o.hardware)
    pr = get_profile(o.profile, hw.name)
    name = o.op.lower() if o.op else ""
    res: OperatorTime
    if name == "gemm":
        if o.op_m is None or o.op_n is None or o.op_k is None:
            missing = [f for f, v in (("--m", o.op_m), ("--n", o.op_n), ("--k", o.op_k)) if v is None]
            raise SpecError(f"--op gemm needs {', '.join(missing)} (the GEMM is m x k by k x n)")
        res = gemm_time(o.op_m, o.op_n, o.op_k, hardware=hw, profile=pr, dtype=o.dtype or "bf16", phase=o.phase)
    elif name == "attention":
        if o.heads is None:
            raise SpecError("--op attention needs --heads (query heads on the device; also --kv-heads, --head-dim)")
        length = o.input_len if o.phase == "prefill" else (o.context_len if o.context_len is not None
                                                          else o.input_len)
        res = attention_time(o.phase, batch=o.batch, length=length, heads=o.heads, kv_heads=o.kv_heads or o.heads,
                             head_dim=o.head_dim, hardware=hw, profile=pr, kv_dtype=o.kv_dtype or "bf16")
    elif name in COLLECTIVE_NAMES:
        if o.op_bytes is None or o.ranks is None:
            missing = [f for f, v in (("--bytes", o.op_bytes), ("--ranks", o.ranks)) if v is None]
            raise SpecError(f"--op {o.op} needs {', '.join(missing)}")
        res = collective_time(name, o.op_bytes, o.ranks, hardware=hw, profile=pr, phase=o.phase)
    else:
        raise SpecError(f"--op {o.op!r}; expected one of: {', '.join(OPERATORS)}")
    return EstimateOutcome(options=o, operator=res, hardware=hw.name, profile=pr.name)
