"""One-call estimate used by the CLI and scripts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from serveplan.errors import SpecError
from serveplan.estimator.batch import StepBatch
from serveplan.estimator.speculative import SpecEstimator
from serveplan.estimator.static import StaticMetrics, static_batch
from serveplan.estimator.step import Estimator, StepEstimate
from serveplan.specs.catalog import get_hardware, get_model, get_profile
from serveplan.specs.hardware import DeviceSpec
from serveplan.specs.model import ModelSpec
from serveplan.specs.parallel import ParallelConfig
from serveplan.specs.profile import EfficiencyProfile, Phase
from serveplan.specs.speculative import SpecDecodeConfig
from serveplan.units import DType


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
        if self.spec is not None:
            d.update(self.spec.to_dict())
        return d


def resolve_specs(model: str | ModelSpec, hardware: str | DeviceSpec,
                  profile: str | EfficiencyProfile | None) -> tuple[ModelSpec, DeviceSpec, EfficiencyProfile]:
    """Catalog ids or paths to specs (specs pass through)."""
    m = get_model(model) if isinstance(model, str) else model
    hw = get_hardware(hardware) if isinstance(hardware, str) else hardware
    if profile is None or isinstance(profile, str):
        pr = get_profile(profile, hw.name)
    else:
        pr = profile
    return m, hw, pr


def estimate(model: str | ModelSpec, hardware: str | DeviceSpec, *, profile: str | EfficiencyProfile | None = None,
             parallel: ParallelConfig | None = None, dtype: str | DType | None = None,
             kv_dtype: str | DType | None = None, batch: int = 1, input_len: int = 2048,
             output_len: int | None = None, phase: Phase | str = Phase.PREFILL,
             context_len: int | None = None, spec: SpecDecodeConfig | None = None) -> EstimateResult:
    """Estimate one step (prefill of ``batch`` x ``input_len``, or a decode step at
    ``context_len``) and, with ``output_len``, the whole static batch.

    ``dtype`` is the weight format and ``kv_dtype`` the KV-cache format (default: see
    :class:`~serveplan.estimator.step.Estimator`); the KV format sets the cache's bytes per token,
    hence the KV capacity, and the bytes attention reads from the cache. An active ``spec``
    (speculative decoding) times decode steps as verify + draft over the expected tokens per step
    and takes the drafter's memory (:class:`~serveplan.estimator.speculative.SpecEstimator`).

    Raises
    ------
    SpecError
        Unknown names, bad lengths, a layout that does not divide the model.
    InfeasibleError
        The weights do not fit in device memory.
    """
    m, hw, pr = resolve_specs(model, hardware, profile)
    if spec is not None and spec.is_active:
        est: Estimator = SpecEstimator(m, hw, pr, parallel or ParallelConfig(), spec=spec, dtype=dtype,
                                       kv_dtype=kv_dtype)
    else:
        spec = None
        est = Estimator(m, hw, pr, parallel or ParallelConfig(), dtype=dtype, kv_dtype=kv_dtype)
    est.check_fits()
    try:
        ph = Phase(phase)
    except ValueError:
        raise SpecError(f"phase={phase!r}; expected one of: {', '.join(p.value for p in Phase)}") from None
    if ph is Phase.DECODE:
        if context_len is None:
            context_len = input_len + (output_len or 1) - 1
        step = est.estimate(StepBatch.decode(batch, context_len))
    else:
        step = est.estimate(StepBatch.prefill(batch, input_len))
    static = None
    if output_len is not None:
        if output_len < 1:
            raise SpecError(f"output_len={output_len} must be a positive integer")
        static = static_batch(est, batch, input_len, output_len)
    return EstimateResult(model=m.name, hardware=hw.name, profile=pr.name, parallel=est.parallel,
                          dtype=est.dtype.value, batch=batch, input_len=input_len, phase=step.phase,
                          context_len=context_len, step=step, static=static, kv_dtype=est.kv_dtype.value, spec=spec)
