"""One-call estimate used by the CLI and scripts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from serveplan.errors import SpecError, check_int
from serveplan.estimator.batch import StepBatch
from serveplan.estimator.speculative import SpecEstimator
from serveplan.estimator.static import StaticMetrics, static_batch
from serveplan.estimator.step import Estimator, StepEstimate
from serveplan.specs.catalog import get_engine, get_hardware, get_model, get_profile
from serveplan.specs.engine import EngineSpec
from serveplan.specs.hardware import DeviceSpec
from serveplan.specs.model import ModelSpec
from serveplan.specs.parallel import ParallelConfig
from serveplan.specs.profile import EfficiencyProfile, Phase
from serveplan.specs.speculative import SpecDecodeConfig
from serveplan.units import DType

#: Largest batch of one step: 2**31 sequences, past any engine's limit (vLLM max_num_seqs: 1024).
MAX_BATCH = 2**31
#: Largest tokens of one sequence: a 32-bit position index.
MAX_LENGTH = 2**31
#: Largest output of a static batch: its decode steps are evaluated at once (17 features of 8
#: bytes a step: 136 MB at the limit).
MAX_STATIC_OUTPUT = 10**6


@dataclass(frozen=True, slots=True, kw_only=True)
class EstimateResult:
    """A step estimate, and the static-batch metrics when an output length was given."""

    model: str
    hardware: str
    profile: str
    parallel: ParallelConfig
    dtype: str
    batch: int
    input_len: int
    phase: Phase
    context_len: int | None
    step: StepEstimate
    static: StaticMetrics | None
    kv_dtype: str = ""
    spec: SpecDecodeConfig | None = None
    #: KV tokens (full-model equivalents, whole instance) the batch holds at its longest, and
    #: what the instance's cache holds; ``kv_fits`` is False when the batch could not run
    kv_tokens_needed: float = 0.0
    kv_capacity_tokens: int = 0
    kv_fits: bool = True
    #: longest sequence of the step or static batch, and whether it passes the model's
    #: ``max_position_embeddings`` (only with ``allow_long_context``; refused otherwise)
    max_sequence_len: int = 0
    beyond_max_position: bool = False
    #: with an engine, a prefill step's line on the steps that pay the engine's host work
    #: (:meth:`~serveplan.specs.engine.EngineSpec.host_note`; ``None``: none for this model)
    engine_note: str | None = None

    @property
    def total_s(self) -> float:
        return self.step.total_s

    def to_dict(self) -> dict[str, Any]:
        d = {
            "model": self.model, "hardware": self.hardware, "profile": self.profile,
            "tp": self.parallel.tp, "pp": self.parallel.pp, "dp": self.parallel.dp, "ep": self.parallel.ep,
            "dtype": self.dtype, "kv_dtype": self.kv_dtype, "batch": self.batch, "input_len": self.input_len,
            "context_len": self.context_len,
        }
        d.update(self.step.to_dict())
        d["static"] = self.static.to_dict() if self.static else None
        d.update(kv_tokens_needed=self.kv_tokens_needed, kv_capacity_tokens=self.kv_capacity_tokens,
                 kv_fits=self.kv_fits, max_sequence_len=self.max_sequence_len,
                 beyond_max_position=self.beyond_max_position)
        if self.spec is not None:
            d.update(self.spec.to_dict())
        if self.engine_note:
            d["engine_note"] = self.engine_note
        return d


def resolve_specs(model: str | ModelSpec, hardware: str | DeviceSpec,
                  profile: str | EfficiencyProfile | None,
                  engine: str | EngineSpec | None = None) -> tuple[ModelSpec, DeviceSpec, EfficiencyProfile]:
    """Catalog ids or paths to specs (specs pass through). With ``engine``, the profile as that
    engine runs (:meth:`~serveplan.specs.profile.EfficiencyProfile.for_engine`: its kernels' curves
    and its operator list), as ``simulate`` prices its steps."""
    m = get_model(model) if isinstance(model, str) else model
    hw = get_hardware(hardware) if isinstance(hardware, str) else hardware
    if profile is None or isinstance(profile, str):
        pr = get_profile(profile, hw.name)
    else:
        pr = profile
    if engine is not None:
        pr = (get_engine(engine) if isinstance(engine, str) else engine).profile_for(pr)
    return m, hw, pr


def step_time_function(model: str | ModelSpec, hardware: str | DeviceSpec, parallel: ParallelConfig,
                       batch: StepBatch, *, dtype: str | DType | None = None,
                       kv_dtype: str | DType | None = None) -> Callable[[EfficiencyProfile], float]:
    """``profile -> time of the step batch`` on one layout (for bands over sampled profiles)."""
    m = get_model(model) if isinstance(model, str) else model
    hw = get_hardware(hardware) if isinstance(hardware, str) else hardware

    def step_time(profile: EfficiencyProfile) -> float:
        return Estimator(m, hw, profile, parallel, dtype=dtype, kv_dtype=kv_dtype).time(batch)

    return step_time


def estimate(model: str | ModelSpec, hardware: str | DeviceSpec, *, profile: str | EfficiencyProfile | None = None,
             parallel: ParallelConfig | None = None, dtype: str | DType | None = None,
             kv_dtype: str | DType | None = None, batch: int = 1, input_len: int = 2048,
             output_len: int | None = None, phase: Phase | str = Phase.PREFILL,
             context_len: int | None = None, spec: SpecDecodeConfig | None = None,
             allow_long_context: bool = False, engine: str | EngineSpec | None = None,
             memory_utilization: float | None = None) -> EstimateResult:
    """Estimate one step (prefill of ``batch`` x ``input_len``, or a decode step at
    ``context_len``) and, with ``output_len``, the whole static batch.

    ``dtype`` is the weight format and ``kv_dtype`` the KV-cache format (default: see
    :class:`~serveplan.estimator.step.Estimator`); the KV format sets the cache's bytes per token,
    hence the KV capacity, and the bytes attention reads from the cache. An active ``spec``
    (speculative decoding) times decode steps as verify + draft over the expected tokens per step
    and takes the drafter's memory (:class:`~serveplan.estimator.speculative.SpecEstimator`).
    hence the KV capacity, and the bytes attention reads from the cache. The result says whether
    the batch's KV cache fits the instance (``kv_fits``, ``kv_tokens_needed``,
    ``kv_capacity_tokens``); a sequence longer than the model's ``max_position_embeddings`` is
    refused unless ``allow_long_context`` (then flagged: ``beyond_max_position``). ``engine``
    (``"vllm"``, ``"sglang"``, ``"trtllm"``, a versioned id or a spec) prices the step as that engine
    runs it: its own kernels' curves and its fused operator list; ``None`` keeps the profile as it is
    (BestServe's eager operator list). ``memory_utilization``: the share of device memory the engine
    lets weights, activations and KV cache fill (default: the estimator's).

    Raises
    ------
    SpecError
        Unknown names, bad lengths, a layout that does not divide the model.
    InfeasibleError
        The weights do not fit in device memory.
    """
    check_int("batch", batch, low=1, high=MAX_BATCH, why="sequences in one step")
    check_int("input_len", input_len, low=1, high=MAX_LENGTH, why="tokens of one sequence")
    if output_len is not None:
        check_int("output_len", output_len, low=1, high=MAX_STATIC_OUTPUT, why=(
            "the static batch evaluates every decode step, 136 bytes a step"))
    if context_len is not None:
        check_int("context_len", context_len, low=0, high=MAX_LENGTH, why="keys attended by each decode")
    m, hw, pr = resolve_specs(model, hardware, profile, engine)
    kw: dict[str, Any] = {} if memory_utilization is None else {"memory_utilization": memory_utilization}
    if spec is not None and spec.is_active:
        est: Estimator = SpecEstimator(m, hw, pr, parallel or ParallelConfig(), spec=spec, dtype=dtype,
                                       kv_dtype=kv_dtype, **kw)
    else:
        spec = None
        est = Estimator(m, hw, pr, parallel or ParallelConfig(), dtype=dtype, kv_dtype=kv_dtype, **kw)
    est.check_fits()
    try:
        ph = Phase(phase)
    except ValueError:
        raise SpecError(f"phase={phase!r}; expected one of: {', '.join(p.value for p in Phase)}") from None
    if ph is Phase.DECODE and context_len is None:
        context_len = input_len + (output_len or 1) - 1
    # the longest sequence the step (decode: its context plus the new token) or the static batch holds
    longest = max(context_len + 1 if ph is Phase.DECODE and context_len is not None else input_len,
                  input_len + (output_len or 0))
    beyond = longest > m.max_position_embeddings
    if beyond and not allow_long_context:
        raise SpecError(
            f"a sequence of {longest:,} tokens exceeds max_position_embeddings={m.max_position_embeddings:,} of "
            f"{m.name!r}; expected input_len + output_len (or context_len + 1) within the model's context, or "
            "--allow-long-context (allow_long_context=True) to price it anyway")
    if ph is Phase.DECODE:
        assert context_len is not None
        step = est.estimate(StepBatch.decode(batch, context_len))
    else:
        step = est.estimate(StepBatch.prefill(batch, input_len))
    static = None
    if output_len is not None:
        static = static_batch(est, batch, input_len, output_len)
    needed = batch * est.kv_equivalent_tokens(longest)
    capacity = est.kv_capacity_tokens(batch)
    note = None
    if engine is not None and step.phase is Phase.PREFILL:
        note = (get_engine(engine) if isinstance(engine, str) else engine).host_note(moe=m.is_moe)
    return EstimateResult(model=m.name, hardware=hw.name, profile=pr.name, parallel=est.parallel,
                          dtype=est.dtype.value, batch=batch, input_len=input_len, phase=step.phase,
                          context_len=context_len, step=step, static=static, kv_dtype=est.kv_dtype.value, spec=spec,
                          kv_tokens_needed=needed, kv_capacity_tokens=capacity, kv_fits=needed <= capacity,
                          max_sequence_len=longest, beyond_max_position=beyond, engine_note=note)
