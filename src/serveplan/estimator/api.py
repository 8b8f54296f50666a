"""One-call estimate used by the CLI and scripts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from serveplan.errors import SpecError
from serveplan.estimator.batch import StepBatch
from serveplan.estimator.static import StaticMetrics, static_batch
from serveplan.estimator.step import Estimator, StepEstimate
from serveplan.specs.catalog import get_hardware, get_model, get_profile
from serveplan.specs.hardware import DeviceSpec
from serveplan.specs.model import ModelSpec
from serveplan.specs.parallel import ParallelConfig
from serveplan.specs.profile import EfficiencyProfile
from serveplan.units import DType


@dataclass(frozen=True, slots=True)
class EstimateResult:
    """A step estimate, and the static-batch metrics when an output length was given."""

    model: str
    hardware: str
    profile: str
    parallel: ParallelConfig
    dtype: str
    batch: int
    input_len: int
    phase: str
    context_len: int | None
    step: StepEstimate
    static: StaticMetrics | None
    kv_dtype: str = ""

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
             kv_dtype: str | DType | None = None, batch: int = 1, input_len: int = 2048, output_len: int | None = None,
             phase: str = "prefill", context_len: int | None = None) -> EstimateResult:
    """Estimate one step (prefill of ``batch`` x ``input_len``, or a decode step at
    ``context_len``) and, with ``output_len``, the whole static batch.

    ``dtype`` is the weight format and ``kv_dtype`` the KV-cache format (default: see
    :class:`~serveplan.estimator.step.Estimator`); the KV format sets the cache's bytes per token,
    hence the KV capacity, and the bytes attention reads from the cache.

    Raises
    ------
    SpecError
        Unknown names, bad lengths, a layout that does not divide the model.
    InfeasibleError
        The weights do not fit in device memory.
    """
    m, hw, pr = resolve_specs(model, hardware, profile)
    est = Estimator(m, hw, pr, parallel or ParallelConfig(), dtype=dtype, kv_dtype=kv_dtype)
    est.check_fits()
    if phase not in ("prefill", "decode"):
        raise SpecError(f"phase={phase!r}; expected one of: prefill, decode")
    if phase == "decode":
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
    return EstimateResult(m.name, hw.name, pr.name, est.parallel, est.dtype.value, batch, input_len,
                          step.phase, context_len, step, static, kv_dtype=est.kv_dtype.value)
