"""Prediction bands from a calibrated profile's parameter uncertainty.

A calibrated profile stores one standard deviation per fitted value in ``uncertainty``
(``"prefill.compute"``, ``"decode.memory"``, ``"decode.attention_memory"``, ``"dispatch.attention"``,
...; ``"decode.matmul_size_curve"`` is the relative standard deviation of the level of that
phase's GEMM size curve, drawn as one factor on all its ratios). :func:`band` draws
profiles with those values perturbed (independent normal draws, truncated to the valid range;
correlations between factors are not stored), evaluates any prediction on each, and returns
the percentiles. With a fixed ``seed`` the band is reproducible. Bands of simulations and of
goodput, which run the simulator, are in :mod:`serveplan.validate.bands`.

Example
-------
>>> from serveplan import Estimator, StepBatch, get_model, get_hardware, get_profile
>>> from serveplan.calibrate.bands import band
>>> prof = get_profile("default-gpu").with_(uncertainty={"prefill.compute": 0.05})
>>> m, hw = get_model("llama-2-7b"), get_hardware("a100-80g")
>>> b = band(lambda p: Estimator(m, hw, p).time(StepBatch.prefill(1, 512)), prof, samples=50)
>>> b.p10 <= b.p50 <= b.p90
True
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from serveplan.errors import SpecError
from serveplan.specs.profile import PHASES, EfficiencyProfile, Module, PhaseEfficiency

#: Efficiencies are drawn inside (EFF_FLOOR, 1]. assumed: below 0.1% a factor is meaningless.
EFF_FLOOR = 1e-3
#: Per-phase values of a profile that ``uncertainty`` may list.
PHASE_KEYS = ("compute", "memory", "comm", "attention_compute", "attention_memory")


@dataclass(frozen=True, slots=True)
class Band:
    """Percentiles of a prediction over sampled profiles, plus the nominal value."""

    p10: float
    p50: float
    p90: float
    nominal: float
    samples: int

    def to_dict(self) -> dict[str, float]:
        return {"p10": self.p10, "p50": self.p50, "p90": self.p90, "nominal": self.nominal, "samples": self.samples}

    def overlaps(self, other: Band) -> bool:
        """True when the P10-P90 intervals overlap: the two predictions cannot be told apart."""
        return self.p10 <= other.p90 and other.p10 <= self.p90


def sample_profiles(profile: EfficiencyProfile, samples: int, *, seed: int = 0) -> list[EfficiencyProfile]:
    """``samples`` copies of ``profile`` with every value listed in ``uncertainty`` drawn from
    a normal distribution around it (truncated: efficiencies in (0, 1], dispatch >= 0).

    Raises
    ------
    SpecError
        The profile has no uncertainty (not a calibrated profile), or a key is unknown.
    """
    if samples < 1:
        raise SpecError(f"samples={samples} must be >= 1")
    unc = {k: float(v) for k, v in profile.uncertainty.items() if float(v) > 0}
    if not unc:
        raise SpecError(f"profile {profile.name!r} has no uncertainty; calibrate it with serveplan calibrate "
                        f"to get prediction bands")
    rng = np.random.default_rng(seed)
    keys = sorted(unc)
    for k in keys:
        head, _, tail = k.partition(".")
        ok = (head in PHASES and tail in PHASE_KEYS + ("matmul_size_curve",)) or (
            head == "dispatch" and tail in {m.value for m in Module})
        if tail == "matmul_size_curve" and head not in profile.matmul_size_curve:
            ok = False
        if not ok:
            raise SpecError(f"profile {profile.name!r}: uncertainty key {k!r}; expected "
                            f"prefill|decode.{'|'.join(PHASE_KEYS)}, prefill|decode.matmul_size_curve "
                            f"(with a curve) or dispatch.<module>")
    out = []
    for _ in range(samples):
        phases: dict[str, dict[str, Any]] = {}
        for ph in PHASES:
            e = profile.efficiency(ph)
            phases[ph] = dict(compute=e.compute, memory=e.memory, comm=e.comm,
                              attention_compute=e.attention_compute, attention_memory=e.attention_memory)
        dispatch = dict(profile.dispatch_s)
        curve = dict(profile.matmul_size_curve)
        for k in keys:
            head, _, tail = k.partition(".")
            if head == "dispatch":
                m = Module(tail)
                dispatch[m] = max(0.0, rng.normal(profile.dispatch(m), unc[k]))
            elif tail == "matmul_size_curve":
                scale = max(EFF_FLOOR, rng.normal(1.0, unc[k]))
                rows, ratios = curve[head]
                curve[head] = (rows, tuple(r * scale for r in ratios))
            else:
                centre = phases[head][tail]
                if centre is None:   # attention factor not set: it follows compute / memory
                    e = getattr(profile, head)
                    centre = e.attn_compute if tail == "attention_compute" else e.attn_memory
                phases[head][tail] = float(np.clip(rng.normal(centre, unc[k]), EFF_FLOOR, 1.0))
        out.append(profile.with_(prefill=PhaseEfficiency(**phases["prefill"]),
                                 decode=PhaseEfficiency(**phases["decode"]), dispatch_s=dispatch,
                                 matmul_size_curve=curve))
    return out


def band(predict: Callable[[EfficiencyProfile], float], profile: EfficiencyProfile, *, samples: int = 200,
         seed: int = 0) -> Band:
    """P10/P50/P90 of ``predict(profile)`` over profiles sampled from the uncertainty."""
    values = np.array([predict(p) for p in sample_profiles(profile, samples, seed=seed)], dtype=float)
    p10, p50, p90 = np.percentile(values, [10, 50, 90])
    return Band(float(p10), float(p50), float(p90), float(predict(profile)), samples)


def band_of(values: np.ndarray | list[float], nominal: float) -> Band:
    """P10/P50/P90 of sampled ``values`` (NaN ignored) with the ``nominal`` prediction."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return Band(float("nan"), float("nan"), float("nan"), float(nominal), 0)
    p10, p50, p90 = np.percentile(v, [10, 50, 90])
    return Band(float(p10), float(p50), float(p90), float(nominal), int(v.size))


def require_uncertainty(profile: EfficiencyProfile) -> None:
    """One-line :class:`SpecError` unless ``profile`` carries an uncertainty to sample."""
    if not any(float(v) > 0 for v in profile.uncertainty.values()):
        raise SpecError(f"--band needs a calibrated profile: profile {profile.name!r} has no uncertainty "
                        f"(write one with serveplan calibrate and pass it with --profile)")
