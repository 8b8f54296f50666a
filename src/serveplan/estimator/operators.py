"""Time of one operator: a GEMM, an attention kernel or a collective, as the estimator times it.

Each function builds the operator the way ``ops/graph.py`` builds it inside a layer (same work
and traffic), compiles it with the roofline kernel (:mod:`serveplan.estimator.roofline`) and the
profile's rates for the phase (:func:`~serveplan.estimator.step.profile_rates`), so the answer is
the number the estimator's per-operator breakdown shows for that operator in a step. With a
measured profile the shape-aware curves (:mod:`serveplan.specs.kernels`) apply; with a
constant-factor profile, the phase's MFU and MBU.

>>> from serveplan import get_hardware, get_profile
>>> t = gemm_time(16, 4096, 4096, hardware=get_hardware("h100-sxm"), profile=get_profile(None, "h100-sxm"))
>>> 5e-6 < t.time_s < 1e-4
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from serveplan.errors import SpecError
from serveplan.estimator.collectives import collective_coefficients
from serveplan.estimator.roofline import compile_step, op_terms
from serveplan.estimator.step import profile_rates, resolve_curves
from serveplan.ops.base import (
    APC,
    FEATURE_INDEX,
    FEATURES,
    KVD,
    KVP,
    ND,
    NG,
    NP,
    ONE,
    Collective,
    LayerGroup,
    ModuleBlock,
    N,
    Op,
)
from serveplan.specs.hardware import DeviceSpec
from serveplan.specs.kernels import COLLECTIVE_OPS, bus_factor
from serveplan.specs.profile import EfficiencyProfile, Module, Phase
from serveplan.units import DType

#: Names accepted for the collectives (CLI ``--op``), mapped to :data:`~serveplan.specs.kernels.COLLECTIVE_OPS`.
COLLECTIVE_NAMES = {"allreduce": "all_reduce", "all_reduce": "all_reduce", "allgather": "all_gather",
                    "all_gather": "all_gather", "reducescatter": "reduce_scatter", "reduce_scatter": "reduce_scatter",
                    "alltoall": "all_to_all", "all_to_all": "all_to_all", "sendrecv": "send_recv",
                    "send_recv": "send_recv"}
OPERATORS = ("gemm", "attention", *sorted({k for k in COLLECTIVE_NAMES if "_" not in k}))


@dataclass(frozen=True, slots=True, kw_only=True)
class OperatorTime:
    """Time of one operator with its roofline terms and the model that gave it."""

    op: str
    shape: dict[str, Any]
    flops: float
    bytes: float
    compute_s: float
    memory_s: float
    time_s: float
    bound: str            # compute, memory or communication
    model: str            # "curve ..." or "factors ..."

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.op, "shape": self.shape, "flops": self.flops, "bytes": self.bytes,
                "compute_s": self.compute_s, "memory_s": self.memory_s, "time_s": self.time_s,
                "bound": self.bound, "model": self.model}


def _positive_int(name: str, v: Any) -> int:
    if (isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not math.isfinite(v)
            or v < 1 or v != int(v)):
        raise SpecError(f"{name}={v!r} must be a positive integer")
    return int(v)


def _phase(phase: Phase | str) -> Phase:
    try:
        return Phase(str(phase))
    except ValueError:
        raise SpecError(f"phase={phase!r}; expected one of: prefill, decode") from None


def _time_one(op: Op, x: dict[str, float], phase: Phase, hardware: DeviceSpec, profile: EfficiencyProfile,
              dtype: DType, kv_dtype: DType, heads: tuple[float, float, float] | None,
              ) -> tuple[float, float, float, float, float]:
    group = LayerGroup("operator", 1, (ModuleBlock(op.module, (op,)),))
    compiled = compile_step((group,), hardware, profile.comm_model,
                            attention_heads=heads if profile.kernels is not None else None)
    curves = resolve_curves(compiled, profile, hardware, dtype=dtype, kv_dtype=kv_dtype)
    rates = profile_rates(compiled, profile, phase, peak_flops=hardware.flops(dtype),
                          bandwidth=hardware.memory_bandwidth, curves=curves,
                          compute_cap=hardware.sustained_share(dtype))
    vec = np.zeros(len(FEATURES))
    for k, v in x.items():
        vec[FEATURE_INDEX[k]] = v
    W, Q, comp, mem, t, _, _ = op_terms(compiled, rates, vec)
    return float(W[0]), float(Q[0]), float(comp[0]), float(mem[0]), float(t[0])


def gemm_time(m: int, n: int, k: int, *, hardware: DeviceSpec, profile: EfficiencyProfile,
              dtype: DType | str = DType.BF16, phase: Phase | str = Phase.PREFILL) -> OperatorTime:
    """One ``m x k`` by ``k x n`` GEMM (``m`` token rows, a ``k x n`` weight in ``dtype``).

    Work ``2 m n k`` FLOP; traffic ``a (m k + m n) + w k n`` bytes (activations at 2 bytes, 4 in
    fp32; the weight at its format's width), as ``ops/graph.py`` counts a projection. ``phase``
    selects the constant factors when the profile has no GEMM curve for ``dtype``.

    Raises
    ------
    SpecError
        A non-positive dimension, an unknown dtype or phase.
    """
    m, n, k = _positive_int("m", m), _positive_int("n", n), _positive_int("k", k)
    dt = DType.parse(dtype)
    ph = _phase(phase)
    ab = 4.0 if dt is DType.FP32 else 2.0
    op = Op("gemm", Module.MLP, flops=NG * (2.0 * k * n), bytes=N * (ab * (k + n)) + ONE * (dt.bytes * k * n),
            rows=N, inner=float(k), source="2*m*n*k FLOP; input, output and weight bytes (ops/graph.py _gemm)")
    x = {"one": 1.0, "n": m, "ng": m, ("np" if ph is Phase.PREFILL else "nd"): m}
    W, Q, comp, mem, t = _time_one(op, x, ph, hardware, profile, dt, DType.BF16, None)
    curve = profile.kernels.gemm_curve(dt.value) if profile.kernels is not None else None
    e = profile.efficiency(ph)
    model = (f"curve gemm {dt.value} ({profile.name})" if curve is not None
             else f"factors {ph.value} MFU {e.compute:g} / MBU {e.memory:g} ({profile.name})")
    return OperatorTime(op="gemm", shape={"m": m, "n": n, "k": k, "dtype": dt.value}, flops=W, bytes=Q,
                        compute_s=comp, memory_s=mem, time_s=t, bound="compute" if comp >= mem else "memory",
                        model=model)


def attention_time(phase: Phase | str, *, batch: int, length: int, heads: int, kv_heads: int, head_dim: int,
                   hardware: DeviceSpec, profile: EfficiencyProfile, kv_dtype: DType | str = DType.BF16,
                   ) -> OperatorTime:
    """One fused attention kernel over ``batch`` sequences of one device's heads.

    Prefill: ``length`` is the prompt (causal, no cache); ``(4 d_q + 5 h) s (s+1)/2`` FLOP per
    sequence (QK^T and PV at ``2 d`` each per score, ~5 FLOP of online softmax, FlashAttention-2
    §3.1), reading Q, K, V and writing O. Decode: one new token over a context of ``length``
    cached tokens, reading the KV cache (``2 kv_heads head_dim`` values per token in ``kv_dtype``).

    Raises
    ------
    SpecError
        Non-positive sizes, ``heads`` not a multiple of ``kv_heads``, an unknown phase or format.
    """
    ph = _phase(phase)
    b, s = _positive_int("batch", batch), _positive_int("length", length)
    hq, hkv, d = _positive_int("heads", heads), _positive_int("kv_heads", kv_heads), _positive_int("head_dim", head_dim)
    if hq % hkv:
        raise SpecError(f"heads={hq} must be a multiple of kv_heads={hkv} (grouped-query attention)")
    kv = DType.parse(kv_dtype)
    ab, kvb = 2.0, kv.bytes
    dq, dkv = hq * d, hkv * d
    if ph is Phase.PREFILL:
        op = Op("prefill.attention", Module.ATTENTION, APC * (4 * dq + 5 * hq),
                NP * (2 * ab * dq) + KVP * (2 * kvb * dkv),
                attention=True, source="fused attention, causal (ops/graph.py)")
        x = {"one": 1.0, "n": b * s, "ng": b * s, "np": b * s, "sp": b, "kvp": b * s, "apc": b * s * (s + 1) / 2,
             "ap": b * s * s, "nout": b, "nall": b * s}
    else:
        op = Op("decode.attention", Module.ATTENTION, KVD * (4 * dq + 5 * hq),
                ND * (2 * ab * dq) + KVD * (2 * kvb * dkv),
                attention=True, source="fused attention over the KV cache (ops/graph.py)")
        x = {"one": 1.0, "n": b, "ng": b, "nd": b, "kvd": b * s, "nout": b, "nall": b}
    W, Q, comp, mem, t = _time_one(op, x, ph, hardware, profile, DType.BF16, kv, (float(hq), float(hkv), float(d)))
    curve = profile.kernels.attention_curve(ph.value, kv.value, hq / hkv, d) if profile.kernels is not None else None
    e = profile.efficiency(ph)
    model = (f"curve {ph.value} attention KV {kv.value} ({profile.name})" if curve is not None
             else f"factors {ph.value} attention MFU {e.attn_compute:g} / MBU {e.attn_memory:g} ({profile.name})")
    length_key = "prompt" if ph is Phase.PREFILL else "context"
    return OperatorTime(op="attention", shape={"phase": ph.value, "batch": b, length_key: s, "heads": hq,
                                               "kv_heads": hkv, "head_dim": d, "kv_dtype": kv.value},
                        flops=W, bytes=Q, compute_s=comp, memory_s=mem, time_s=t,
                        bound="compute" if comp >= mem else "memory", model=model)


def collective_time(op: str, nbytes: float, ranks: int, *, hardware: DeviceSpec, profile: EfficiencyProfile,
                    phase: Phase | str = Phase.PREFILL) -> OperatorTime:
    """One collective of ``nbytes`` payload per rank over ``ranks`` devices.

    With a measured curve: ``latency + (f v + sqrt(f v ramp)) / bus_bandwidth``
    (:class:`~serveplan.specs.kernels.CollectiveCurve`). Without: the estimator's ring model on
    the tiers the group spans (:func:`~serveplan.estimator.collectives.collective_coefficients`)
    at the phase's communication efficiency; all-gather and reduce-scatter are timed as an
    all-to-all (``(g-1)/g`` of the payload). Measured curves stand only for groups inside the
    scale-up domain they were measured in.

    Raises
    ------
    SpecError
        Unknown operation, ``nbytes <= 0`` or ``ranks < 2``.
    """
    name = COLLECTIVE_NAMES.get(op.lower())
    if name is None:
        raise SpecError(f"collective {op!r}; expected one of: {', '.join(sorted(set(COLLECTIVE_NAMES)))}")
    if not (isinstance(nbytes, (int, float)) and math.isfinite(nbytes) and nbytes > 0):
        raise SpecError(f"bytes={nbytes!r} must be a positive number of bytes")
    g = _positive_int("ranks", ranks)
    if g < 2:
        raise SpecError(f"ranks={g} must be at least 2 for a collective")
    ph = _phase(phase)
    assert name in COLLECTIVE_OPS
    measured = profile.kernels is not None and g <= hardware.domain_size
    curve = profile.kernels.collective_curve(name, g) if measured and profile.kernels is not None else None
    if curve is not None:
        t = float(curve.time(name, g, nbytes))
        model = f"curve {name} (measured at {curve.link or 'its link'}; {profile.name})"
    else:
        link = hardware.link_for(g)
        kind = {"all_reduce": Collective.ALL_REDUCE, "send_recv": Collective.SEND_RECV}.get(name, Collective.ALL_TO_ALL)
        coef, lat = collective_coefficients(kind, g, np.array([nbytes]), np.array([nbytes / 2.0]), hardware,
                                            profile.comm_model)
        e = profile.efficiency(ph).comm
        t = float(coef[0]) / e + lat
        tiers = link.name if g <= hardware.domain_size else f"{hardware.intra_node_link.name} + {link.name}"
        model = f"per-tier model on {tiers} at {ph.value} comm efficiency {e:g} ({profile.name})"
    return OperatorTime(op=name, shape={"bytes": nbytes, "ranks": g, "bus_factor": bus_factor(name, g)},
                        flops=0.0, bytes=float(nbytes), compute_s=0.0, memory_s=0.0, time_s=t, bound="communication",
                        model=model)
