"""The roofline kernel: operator times and layer times, written once.

Both the estimator (:class:`serveplan.estimator.step.Estimator`) and calibration's step composer
(:class:`serveplan.calibrate.fit.StepComposer`) time steps with the functions below, so a change
of the timing model lands in both.

Pipeline (all pure):

1. :func:`compile_step` turns a model's layer groups (:func:`serveplan.ops.graph.build_layer_groups`)
   into a :class:`CompiledStep`: the operators' work, traffic and GEMM rows as matrices over the
   batch features (:mod:`serveplan.ops.base`), block selectors and the collectives' coefficients.
2. :func:`phase_rates` fixes the rates of one phase (:class:`PhaseRates`): per operator the
   inverse compute and memory rates, from the efficiency of its :class:`OpFamily`, the device
   peaks and the ``kappa`` rates, plus the GEMM size curve and the dispatch times.
3. :func:`op_terms` evaluates one feature vector (or a matrix of them, one column per step):
   per operator ``W``, ``Q``, the compute and memory terms and ``max`` of both (BestServe eq. 3/5),
   and per module block the compute and communication times.
4. :func:`layers_time` applies BestServe Algorithm 1 (dispatch/compute overlap) per layer kind and
   multiplies by the layer counts.

Columns that differ in a few features only (a decode stretch: its context sum) are timed by
:func:`split_step` and :func:`block_terms`: the operators and collectives that read none of the
varying features are timed once, the others per column (the same terms as :func:`op_terms`, the
per-block sums taken in another order).

Shape-aware efficiency
----------------------
Efficiency enters in two places: :func:`phase_rates` gives every operator an inverse compute rate
``1 / (e_c S_c)`` and memory rate ``1 / (e_m S_m)`` from its family's factors, and
:func:`op_terms` replaces the terms of the operators a curve covers: a GEMM under a size curve
takes ``ratio(rows) * max(W/S_c, Q/S_m)`` (:class:`SizeCurve`, the profile's
``matmul_size_curve``); with a measured profile (``kernels:``) GEMMs, fused GQA attention and
collectives take the measured curves of :mod:`serveplan.specs.kernels`, resolved once per
estimator for its weight and KV formats (:class:`CurveRates`). A new curve follows the same path:
a selection of operators (a column of :class:`CompiledStep` like ``is_gemm`` or ``attn_phase``)
and a function of the batch features evaluated in :func:`op_terms`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np

from serveplan.estimator.collectives import collective_coefficients
from serveplan.ops.base import FEATURE_INDEX, FEATURES, Collective, LayerGroup, Lin, Op, Rate
from serveplan.specs.hardware import DeviceSpec
from serveplan.specs.kernels import AttentionCurve, CollectiveCurve, GemmCurve, KernelCurves
from serveplan.specs.profile import CommModel, Module

_NF = len(FEATURES)
_N = FEATURE_INDEX["n"]
_SP, _KVP, _ND, _KVD = (FEATURE_INDEX[f] for f in ("sp", "kvp", "nd", "kvd"))
_NDX, _ADX = FEATURE_INDEX["ndx"], FEATURE_INDEX["adx"]

#: Order of the rates in :attr:`CompiledStep.rate` (0 = adapted roofline, then BestServe eq. 12's kappas).
RATES: tuple[Rate, ...] = (Rate.ROOFLINE, Rate.KAPPA_UPDATE, Rate.KAPPA_REPEAT_KV, Rate.KAPPA_UPCAST)


class OpFamily(str, Enum):
    """Kernel family of an operator: the unit efficiency factors are kept per.

    Read from the flags the op tables set (never the op's name): ``Op.attention`` marks attention
    kernels, ``Op.rows`` matrix multiplications; everything else streams memory (norms,
    element-wise, copies).
    """

    MATMUL = "matmul"
    ATTENTION = "attention"
    STREAM = "stream"


FAMILIES: tuple[OpFamily, ...] = tuple(OpFamily)
_FAMILY_INDEX = {f: i for i, f in enumerate(FAMILIES)}


def kernel_family(op: Op) -> OpFamily:
    """Kernel family of an operator (see :class:`OpFamily`)."""
    if op.attention:
        return OpFamily.ATTENTION
    return OpFamily.MATMUL if op.rows is not None else OpFamily.STREAM


#: Fixed cost of one GEMM in token rows, as a fraction of the tile (tile quantization model).
#: Derived from Sarathi §4.2 (Insight 1): on LLaMA-13B/A6000, 256-token chunks run at 12.5% below
#: the throughput of 512-token ones. With a GEMM time affine in its rows, ``T(M) = c (M + n0)``,
#: ``[256/(256 + n0)] / [512/(512 + n0)] = 0.875`` gives ``n0 = 85.3 = (2/3) * 128``. Cross-check:
#: the expected idle tail of the last wave (half a wave, NVIDIA "Matrix Multiplication Background"
#: User's Guide §3.2) of LLaMA-13B's GEMMs with 128x128 tiles on the A6000's 84 SMs is ~97 rows.
#: Other devices: assumed to scale with their tile.
TILE_FIXED_ROWS_FRACTION = 2.0 / 3.0


def tile_quantized_rows(n: float, tile: int) -> float:
    """Token rows a GEMM of ``n`` tokens costs under tile quantization (feature ``ng``).

    A GEMM's row dimension is processed in tiles of ``tile`` rows, so its time follows the padded
    count ``ceil(n / tile) * tile`` (Sarathi §4.4; NVIDIA "Matrix Multiplication Background" §3.1),
    plus a fixed cost of ``n0`` rows per GEMM (:data:`TILE_FIXED_ROWS_FRACTION`):
    ``T(n) = c * (ceil(n/tile)*tile + n0)``. The profile's compute efficiency is taken to hold for
    tile-aligned work, so the penalty relative to unquantized work is
    ``(ceil(n/tile)*tile + n0) / (n + n0)``, and the rows charged are ``n`` times that. A multiple
    of the tile costs exactly ``n``; ``tile = 0`` (unknown or switched off) returns ``n``.

    >>> round(tile_quantized_rows(257, 128) / 257, 3)   # (384 + 85.3) / (257 + 85.3)
    1.371
    """
    if not tile or n <= 0:
        return n
    n0 = TILE_FIXED_ROWS_FRACTION * tile
    padded = math.ceil(n / tile) * tile
    return n * (padded + n0) / (n + n0)


def tile_quantized_rows_array(n: np.ndarray, tile: int) -> np.ndarray:
    """:func:`tile_quantized_rows` of every element of ``n`` (the same arithmetic, elementwise)."""
    if not tile:
        return n
    n0 = TILE_FIXED_ROWS_FRACTION * tile
    padded = np.ceil(n / tile) * tile
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(n > 0, n * (padded + n0) / (n + n0), n)


def feature_vector(lin: Lin) -> np.ndarray:
    """Coefficients of a linear form as a vector over :data:`~serveplan.ops.base.FEATURES`."""
    v = np.zeros(_NF)
    for k, c in lin.items():
        v[FEATURE_INDEX[k]] = c
    return v


# ------------------------------------------------------------------------------ size curve
@dataclass(frozen=True, slots=True, kw_only=True)
class SizeCurve:
    """GEMM time over its peak roofline time ``max(W / S_c, Q / S_m)`` as a function of its rows.

    Points ``(rows, ratio)``, interpolated linearly in ``log rows`` and held constant outside
    them (the profile's ``matmul_size_curve`` of one phase).
    """

    log_rows: np.ndarray
    ratios: np.ndarray

    @classmethod
    def from_points(cls, rows: Sequence[float] | np.ndarray, ratios: Sequence[float] | np.ndarray) -> SizeCurve:
        return cls(log_rows=np.log(np.asarray(rows, dtype=float)), ratios=np.asarray(ratios, dtype=float))

    def ratio(self, rows: Any) -> Any:
        """Time over peak roofline time of a GEMM of ``rows`` rows (scalar or array)."""
        return np.interp(np.log(np.maximum(rows, 1.0)), self.log_rows, self.ratios)


# ------------------------------------------------------------------------------ compilation
@dataclass(frozen=True, slots=True, kw_only=True)
class CompiledStep:
    """A model's layer groups as matrices over the batch features (one device of a stage).

    Blocks (one module of one layer kind) are numbered across groups in execution order;
    ``blocks[i] = (group index, module)``. Operators likewise (``ops``, ``op_block``).
    """

    group_names: tuple[str, ...]
    counts: tuple[float, ...]            # layers of each group
    blocks: tuple[tuple[int, Module], ...]
    ops: tuple[Op, ...]
    op_block: np.ndarray                 # (ops,) block of each op
    F: np.ndarray                        # (ops, features) FLOP
    B: np.ndarray                        # (ops, features) bytes
    R: np.ndarray                        # (ops, features) GEMM rows (zero for other ops)
    rate: np.ndarray                     # (ops,) index into RATES
    family: np.ndarray                   # (ops,) index into FAMILIES
    is_gemm: np.ndarray                  # (ops,) bool: the size curve applies
    S: np.ndarray                        # (blocks, ops) 0/1: op -> block
    C: np.ndarray                        # (collectives, features) seconds at comm efficiency 1
    C_lat: np.ndarray                    # (collectives,) latency seconds when the step has tokens
    SC: np.ndarray                       # (blocks, collectives) 0/1: collective -> block
    # measured kernel curves (specs/kernels.py) read these:
    weight_elems: np.ndarray             # (ops,) weight elements k*n of a GEMM (W per row / 2), else 0
    inner: np.ndarray                    # (ops,) k of a GEMM (Op.inner; sqrt(k*n) where not given), else 0
    attn_phase: np.ndarray               # (ops,) 1: fused prefill attention, 2: fused decode attention, else 0
    attn_heads: tuple[float, float, float]  # per-device query heads, KV heads, head dim (0: curves off)
    comm_volume: np.ndarray              # (collectives, features) payload bytes per device
    comm_kind: tuple[Collective, ...]
    comm_group: tuple[int, ...]
    comm_scale: np.ndarray | None = None  # (collectives,) 1: the row holds its own efficiency, 0: take e_+
    #: (ops,) part of a fused routed-expert kernel: 1 ``experts.gate_up``, 2 ``experts.silu_mul``,
    #: 3 ``experts.down``, else 0 (a measured fused-MoE curve covers the three together)
    expert_part: np.ndarray | None = None

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)


def compile_step(groups: Sequence[LayerGroup], hardware: DeviceSpec, comm_model: CommModel, *,
                 attention_heads: tuple[float, float, float] | None = None,
                 scale_up_latency: Mapping[Collective, float] | None = None) -> CompiledStep:
    """Stack every group's operators and collectives into the matrices of a :class:`CompiledStep`.

    ``attention_heads`` = (query heads, KV heads per device, head dim) of a fused GQA attention
    kernel lets measured attention curves apply to it (:class:`CurveRates`); ``None`` leaves the
    attention ops on their family factors (eager attention, MLA). Collectives are timed per
    tier (:mod:`serveplan.estimator.collectives`); ``scale_up_latency`` gives the measured
    start-up latency of the scale-up tier by collective where a profile has it.
    """
    names: list[str] = []
    counts: list[float] = []
    blocks: list[tuple[int, Module]] = []
    ops: list[Op] = []
    op_block: list[int] = []
    comm_rows: list[np.ndarray] = []
    comm_lat: list[float] = []
    comm_block: list[int] = []
    comm_vol: list[np.ndarray] = []
    comm_kind: list[Collective] = []
    comm_group: list[int] = []
    comm_own: list[bool] = []
    for gi, g in enumerate(groups):
        names.append(g.name)
        counts.append(float(g.count))
        for block in g.blocks:
            bi = len(blocks)
            blocks.append((gi, block.kind))
            for op in block.ops:
                ops.append(op)
                op_block.append(bi)
            for c in block.comms:
                # the tiers are those the group spans (Comm.group_size); for the MoE
                # all-to-alls that is the whole stage, decided in ops.graph._comms
                row, lat = collective_coefficients(c.kind, c.group_size, feature_vector(c.volume),
                                                   feature_vector(c.values), hardware, comm_model,
                                                   copies=c.copies, dedup_nodes=c.dedup_nodes,
                                                   scale_up_latency=scale_up_latency)
                if c.efficiency > 0:   # the collective's library brings its own achieved bandwidth
                    row = row / c.efficiency
                comm_own.append(c.efficiency > 0)
                comm_rows.append(row)
                comm_lat.append(lat)
                comm_block.append(bi)
                comm_vol.append(feature_vector(c.volume))
                comm_kind.append(c.kind)
                comm_group.append(c.group_size)
    nb, no, nc = len(blocks), len(ops), len(comm_rows)
    S = np.zeros((nb, no))
    S[np.array(op_block, dtype=int), np.arange(no)] = 1.0
    SC = np.zeros((nb, nc))
    if nc:
        SC[np.array(comm_block), np.arange(nc)] = 1.0

    def matrix(rows: list[np.ndarray]) -> np.ndarray:
        return np.array(rows) if rows else np.zeros((0, _NF))

    F = matrix([feature_vector(o.flops) for o in ops])
    is_gemm = np.array([o.rows is not None for o in ops], dtype=bool)
    R = matrix([feature_vector(o.rows) if o.rows is not None else np.zeros(_NF) for o in ops])
    # a GEMM's work is 2*k*n per row (its rows are one feature: n, ng under tile quantization, nout...)
    with np.errstate(divide="ignore", invalid="ignore"):
        weight = np.where(is_gemm, F.sum(axis=1) / (2.0 * R.sum(axis=1)), 0.0) if no else np.zeros(0)
    inner = np.array([(o.inner or math.sqrt(w)) if g else 0.0 for o, w, g in zip(ops, weight, is_gemm, strict=True)])
    attn_phase = np.zeros(no, dtype=int)
    if attention_heads is not None:
        # fused prefill attention works over causal score elements only; fused decode attention
        # over cached keys and the extra score elements of several queries per sequence (adx)
        only = {1: ({FEATURE_INDEX["apc"]}, set()), 2: ({_KVD}, {_ADX})}
        for i, o in enumerate(ops):
            nz = set(np.flatnonzero(F[i]).tolist())
            if o.attention and o.rate is Rate.ROOFLINE:
                attn_phase[i] = next((ph for ph, (must, may) in only.items() if must <= nz <= must | may), 0)
    return CompiledStep(
        group_names=tuple(names), counts=tuple(counts), blocks=tuple(blocks), ops=tuple(ops),
        op_block=np.array(op_block, dtype=int),
        F=F,
        B=matrix([feature_vector(o.bytes) for o in ops]),
        R=R,
        rate=np.array([RATES.index(o.rate) for o in ops], dtype=int),
        family=np.array([_FAMILY_INDEX[kernel_family(o)] for o in ops], dtype=int),
        is_gemm=is_gemm,
        S=S, C=matrix(comm_rows), C_lat=np.array(comm_lat), SC=SC,
        weight_elems=weight, inner=inner, attn_phase=attn_phase, attn_heads=attention_heads or (0.0, 0.0, 0.0),
        comm_volume=matrix(comm_vol), comm_kind=tuple(comm_kind), comm_group=tuple(comm_group),
        comm_scale=np.array(comm_own, dtype=bool) if any(comm_own) else None,
        expert_part=np.array([_EXPERT_PART.get(o.name, 0) for o in ops], dtype=int),
    )


#: Operators of the routed experts (``ops/graph.py`` ``_moe_ops``) that one fused MoE kernel runs.
_EXPERT_PART = {"experts.gate_up": 1, "experts.silu_mul": 2, "experts.down": 3}


# ------------------------------------------------------------------------------ rates
@dataclass(frozen=True, slots=True, kw_only=True)
class PhaseRates:
    """Everything :func:`op_terms` and :func:`layers_time` need for one phase."""

    inv_compute: np.ndarray              # (ops,) seconds per FLOP (0: the op's time is its traffic)
    inv_memory: np.ndarray               # (ops,) seconds per byte
    inv_comm: float                      # 1 / e_+
    peak_inv: tuple[float, float]        # (1 / S_c, 1 / S_m): the size curve's reference roofline
    size_curve: SizeCurve | None
    dispatch: tuple[tuple[float, ...], ...]  # per group, per block: host dispatch seconds
    comm_efficiency: float
    curves: CurveRates | None = None     # measured shape-aware curves (replace the factors they cover)


#: curve terms one :class:`CurveRates` memoises (:func:`_curve_terms`; a few MB at most)
_CURVE_MEMO = 1 << 14

_COLLECTIVE_OP = {Collective.ALL_REDUCE: "all_reduce", Collective.ALL_TO_ALL: "all_to_all",
                  Collective.SEND_RECV: "send_recv"}


@dataclass(frozen=True, slots=True, kw_only=True)
class CurveRates:
    """The measured curves (:mod:`serveplan.specs.kernels`) one estimator uses, resolved for its
    weight and KV formats: GEMMs, fused prefill and decode attention, and each collective.

    A curve's time replaces the roofline terms of the operators it covers: the compute term
    becomes ``t0 + W pad / (S_c e_c(shape))`` and the memory term ``t0 + Q / (S_m e_m(shape))``,
    so ``max`` of both is the curve's time and the breakdown still says which one binds.
    Collectives with a curve take ``latency + (f v + sqrt(f v ramp)) / B`` of their payload ``v``
    (the profile's ``e_+`` no longer applies to them).
    """

    gemm: GemmCurve | None
    prefill_attention: AttentionCurve | None
    decode_attention: AttentionCurve | None
    collectives: tuple[CollectiveCurve | None, ...]   # one per collective of the step
    peak_flops: float
    attention_peak_flops: float
    bandwidth: float
    # the operators each curve covers, precomputed for op_terms
    gemm_index: np.ndarray
    gemm_rows: np.ndarray               # (gemms, features)
    gemm_weight: np.ndarray             # (gemms,) weight elements
    gemm_inner: np.ndarray              # (gemms,) k
    prefill_index: np.ndarray
    decode_index: np.ndarray
    comm_index: tuple[int, ...]
    # the fused MoE kernel: its curve, the aligned indices of each MoE block's gate-up, activation
    # and down operators, and (expert intermediate size per device, hidden size, experts per device)
    moe: GemmCurve | None = None
    moe_parts: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    moe_dims: tuple[float, float, float] = (0.0, 0.0, 1.0)
    #: the covered rows' terms of one step (a feature vector), by the exact values they are computed
    #: from (:func:`_curve_terms`): a pure function of those values, so a hit is the same floats
    memo: dict[tuple[Any, ...], tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, init=False,
                                                                       compare=False, repr=False)
    #: :func:`step_block_terms`: per step (its features but the decodes' context sum, by their
    #: bytes) the time of every operator and the blocks' collective times
    steps: dict[bytes, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, init=False, compare=False,
                                                              repr=False)
    #: facts about the step these curves were resolved for, computed once (:func:`decode_rows`)
    checks: dict[str, Any] = field(default_factory=dict, init=False, compare=False, repr=False)

    @staticmethod
    def expert_parts(step: CompiledStep) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Indices of each MoE block's ``experts.gate_up``, ``experts.silu_mul`` and
        ``experts.down`` (aligned: one entry per block), or ``None`` without a complete set."""
        if step.expert_part is None:
            return None
        parts = tuple(np.flatnonzero(step.expert_part == p) for p in (1, 2, 3))
        if not len(parts[0]) or not len(parts[0]) == len(parts[1]) == len(parts[2]):
            return None
        return parts[0], parts[1], parts[2]

    @classmethod
    def resolve(cls, step: CompiledStep, curves: KernelCurves, *, dtype: str, kv_dtype: str,
                peak_flops: float, attention_peak_flops: float, bandwidth: float,
                max_ranks: int | None = None, moe_dims: tuple[float, float, float] | None = None,
                deepep: bool = False) -> CurveRates:
        """``max_ranks``: the largest group a collective curve stands for (the scale-up domain
        the NCCL tables were measured in); larger groups keep the per-tier model. ``moe_dims``:
        (expert intermediate size per device, hidden size, routed experts per device) of a MoE
        model, for a fused-MoE curve.
        ``deepep``: the experts run behind DeepEP (:meth:`KernelCurves.moe_curve`)."""
        on = step.attn_heads[0] > 0
        group = step.attn_heads[0] / step.attn_heads[1] if on else None
        gi = np.flatnonzero(step.is_gemm)
        coll = tuple(curves.collective_curve(_COLLECTIVE_OP[k], g) if max_ranks is None or g <= max_ranks else None
                     for k, g in zip(step.comm_kind, step.comm_group, strict=True))
        moe = curves.moe_curve(dtype, deepep=deepep) if moe_dims is not None else None
        parts = cls.expert_parts(step) if moe is not None else None
        return cls(
            gemm=curves.gemm_curve(dtype),
            prefill_attention=curves.attention_curve("prefill", kv_dtype, group, step.attn_heads[2]) if on else None,
            decode_attention=curves.attention_curve("decode", kv_dtype, group, step.attn_heads[2]) if on else None,
            collectives=coll,
            peak_flops=peak_flops, attention_peak_flops=attention_peak_flops, bandwidth=bandwidth,
            gemm_index=gi, gemm_rows=step.R[gi], gemm_weight=step.weight_elems[gi],
            gemm_inner=step.inner[gi],
            prefill_index=np.flatnonzero(step.attn_phase == 1), decode_index=np.flatnonzero(step.attn_phase == 2),
            comm_index=tuple(i for i, cc in enumerate(coll) if cc is not None),
            moe=moe if parts is not None else None, moe_parts=parts, moe_dims=moe_dims or (0.0, 0.0, 1.0),
        )


def dispatch_times(step: CompiledStep, dispatch: Callable[[Module], float]) -> tuple[tuple[float, ...], ...]:
    """Per group, per block, the host dispatch time of its module."""
    out: list[list[float]] = [[] for _ in step.counts]
    for gi, kind in step.blocks:
        out[gi].append(dispatch(kind))
    return tuple(tuple(d) for d in out)


def phase_rates(step: CompiledStep, *, efficiency: Mapping[OpFamily, tuple[float, float]], comm: float,
                peak_flops: float, bandwidth: float, kappas: Sequence[float] = (0.0, 0.0, 0.0),
                size_curve: SizeCurve | None = None,
                dispatch: tuple[tuple[float, ...], ...], curves: CurveRates | None = None) -> PhaseRates:
    """Rates of one phase.

    Parameters
    ----------
    efficiency:
        ``(e_c, e_m)`` of each operator family (BestServe's MFU and MBU).
    comm:
        Communication efficiency ``e_+``.
    peak_flops, bandwidth:
        Device peaks ``S_c`` (FLOP/s, for the weight dtype) and ``S_m`` (bytes/s).
    kappas:
        Bytes/s of the decode data movements of BestServe eq. (12) (update, repeat_kv, upcast),
        in :data:`RATES` order after the roofline; 0 means the op's family memory rate.
    size_curve:
        GEMM time over peak roofline time by rows (replaces the factors for GEMMs).
    dispatch:
        Host dispatch time per group and block (:func:`dispatch_times`).
    curves:
        Measured shape-aware curves (:class:`CurveRates`); they take precedence over the size
        curve and the factors for the operators they cover.
    """
    e_c = np.array([efficiency[f][0] for f in FAMILIES])[step.family]
    e_m = np.array([efficiency[f][1] for f in FAMILIES])[step.family]
    mem = e_m * bandwidth
    # a kappa-rate op moves data at its kappa (or the memory roofline without one) and has no compute term
    mem_rate = mem.copy()
    for r, kap in enumerate(kappas, start=1):
        if kap:
            mem_rate = np.where(step.rate == r, kap, mem_rate)
    inv_comp = np.where(step.rate == 0, 1.0 / (e_c * peak_flops), 0.0)
    return PhaseRates(inv_compute=inv_comp, inv_memory=1.0 / mem_rate, inv_comm=1.0 / comm,
                      peak_inv=(1.0 / peak_flops, 1.0 / bandwidth), size_curve=size_curve,
                      dispatch=dispatch, comm_efficiency=comm, curves=curves)


# ------------------------------------------------------------------------------ timing
OpTerms = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def op_terms(step: CompiledStep, rates: PhaseRates, x: np.ndarray) -> OpTerms:
    """Roofline terms of a step (``x``: a feature vector) or of many (``x``: one column per step).

    Returns ``(W, Q, compute, memory, time, block_compute, block_comm)``: per operator its work
    (FLOP), traffic (bytes), compute and memory terms and roofline time ``max(compute, memory)``
    (BestServe eq. 3/5; a GEMM under a size curve takes ``ratio(rows) * max(W/S_c, Q/S_m)``), and
    per block the summed operator time and the collectives' time (alpha-beta or eq. 8).
    """
    W = step.F @ x
    Q = step.B @ x
    single = x.ndim == 1
    inv_comm: Any = rates.inv_comm
    if step.comm_scale is not None:   # collectives with their own efficiency are not scaled by e_+
        inv_comm = np.where(step.comm_scale, 1.0, rates.inv_comm)
        if not single:
            inv_comm = inv_comm[:, None]
    if single:
        comp, mem = W * rates.inv_compute, Q * rates.inv_memory
        active: Any = 1.0 if x[_N] > 0 else 0.0
        comm = (step.C @ x) * inv_comm + step.C_lat * active
    else:
        comp, mem = W * rates.inv_compute[:, None], Q * rates.inv_memory[:, None]
        active = (x[_N] > 0).astype(float)
        comm = (step.C @ x) * inv_comm + step.C_lat[:, None] * active
    curve = rates.size_curve
    if curve is not None:
        ratio = curve.ratio(step.R @ x)
        g = step.is_gemm if single else step.is_gemm[:, None]
        comp = np.where(g, W * rates.peak_inv[0] * ratio, comp)
        mem = np.where(g, Q * rates.peak_inv[1] * ratio, mem)
    if rates.curves is not None:
        comp, mem, comm = _apply_curves(step, rates.curves, x, W, Q, comp, mem, comm)
    t_op = np.maximum(comp, mem)
    return W, Q, comp, mem, t_op, step.S @ t_op, step.SC @ comm


def _reads_only_decode_keys(step: CompiledStep, cr: CurveRates) -> bool:
    """Whether the decodes' context sum (feature ``kvd``) enters no operator's terms but the
    decode-attention kernels' (under ``cr.decode_attention``) and no collective's: then a step's
    other terms are a function of its other features (:func:`step_block_terms`)."""
    if cr.decode_attention is None or not len(cr.decode_index) or cr.moe is not None:
        return False
    others = np.ones(step.F.shape[0], dtype=bool)
    others[cr.decode_index] = False
    return not (np.any(step.F[others, _KVD]) or np.any(step.B[others, _KVD]) or np.any(step.R[:, _KVD])
                or np.any(step.C[:, _KVD]) or np.any(step.comm_volume[:, _KVD]) or np.any(cr.gemm_rows[:, _KVD]))


@dataclass(frozen=True, slots=True)
class DecodeRows:
    """What :func:`step_block_terms` needs of one step's decode-attention operators: their indices,
    and per operator the nonzero ``(feature, coefficient)`` pairs of its rows of ``F`` and ``B``
    when every coefficient is an integer (``None`` otherwise)."""

    index: tuple[int, ...]
    work: tuple[tuple[tuple[int, float], ...], ...] | None
    traffic: tuple[tuple[tuple[int, float], ...], ...] | None


def decode_rows(step: CompiledStep, cr: CurveRates) -> DecodeRows | None:
    """:func:`_reads_only_decode_keys` and the decode rows, once per curve set (each is resolved
    for one step)."""
    hit: DecodeRows | None | bool = cr.checks.get("decode_rows", False)
    if hit is False:
        hit = None
        if _reads_only_decode_keys(step, cr):
            idx = tuple(int(i) for i in cr.decode_index)

            def pairs(M: np.ndarray) -> tuple[tuple[tuple[int, float], ...], ...] | None:
                rows = tuple(tuple((int(j), float(M[i, j])) for j in np.flatnonzero(M[i])) for i in idx)
                return rows if all(c.is_integer() for r in rows for _, c in r) else None

            hit = DecodeRows(idx, pairs(step.F), pairs(step.B))
        cr.checks["decode_rows"] = hit
    assert hit is None or isinstance(hit, DecodeRows)
    return hit


def _exact_dot(pairs: tuple[tuple[int, float], ...], xs: list[float]) -> float | None:
    """``sum(c * x[j])`` when every product and partial sum is an integer below 2^53 (integer
    coefficients and features): then any order of the additions, with or without fused
    multiply-adds, gives this same float, so it equals BLAS's ``F @ x`` row; else ``None``."""
    total = 0.0
    bound = 0.0
    for j, c in pairs:
        v = xs[j]
        if not v.is_integer():
            return None
        total += c * v
        bound += abs(c * v)
    return total if bound < 9007199254740992.0 else None


def step_block_terms(step: CompiledStep, rates: PhaseRates, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``op_terms(step, rates, x)``'s per-block operator and collective times of one step (a
    feature vector), the same floats: the terms of every operator but decode attention are a
    function of the features other than the decodes' context sum (checked once per curve set,
    :func:`_reads_only_decode_keys`), so their times ``max(compute, memory)`` are memoised on those;
    a serving run's mixed steps repeat their prompt chunks and decode counts while the context sum
    is new each time, and only the decode-attention terms are then computed (on floats,
    :func:`_decode_attention_floats`), from their rows of ``F x`` and ``B x``: summed exactly
    in integers where they are (:func:`_exact_dot`), else by the same products."""
    cr = rates.curves
    rows = decode_rows(step, cr) if cr is not None else None
    if rows is None:
        *_, bc, bm = op_terms(step, rates, x)
        return bc, bm
    assert cr is not None and cr.decode_attention is not None   # decode_rows holds it
    key = _steps_key(x)
    hit = cr.steps.get(key)
    if hit is None:
        _, _, comp, mem, t_op, bc, bm = op_terms(step, rates, x)
        if len(cr.steps) >= _CURVE_MEMO:
            cr.steps.clear()
        cr.steps[key] = (t_op, bm)
        return bc, bm
    return np.asarray(decode_block_terms(step, rates, x.tolist(), rows, hit[0].copy())), hit[1]


def _steps_key(x: np.ndarray) -> bytes:
    """The key of :attr:`CurveRates.steps`: a step's features but the decodes' context sum."""
    xk = x.copy()
    xk[_KVD] = 0.0
    key: bytes = xk.tobytes()
    return key


def kept_op_times(step: CompiledStep, rates: PhaseRates, x: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """What :func:`step_block_terms` keeps of the step ``x`` (every operator's time, the blocks'
    collective times; the decode-attention times are those of the step that filled it), or
    ``None`` when it keeps nothing for it."""
    cr = rates.curves
    if cr is None or decode_rows(step, cr) is None:
        return None
    return cr.steps.get(_steps_key(x))


def decode_block_terms(step: CompiledStep, rates: PhaseRates, xs: list[float], rows: DecodeRows,
                       t_op: np.ndarray) -> list[float]:
    """Per block operator times of the step with features ``xs`` (a list) whose operators other than
    decode attention take the times in ``t_op`` (overwritten at the decode-attention rows):
    :func:`step_block_terms` after a memo hit."""
    cr = rates.curves
    assert cr is not None and cr.decode_attention is not None   # decode_rows holds it
    Wa = Qa = None
    if rows.work is not None and rows.traffic is not None:
        Wa = [_exact_dot(p, xs) for p in rows.work]
        Qa = [_exact_dot(p, xs) for p in rows.traffic]
    if Wa is None or Qa is None or None in Wa or None in Qa:
        idx = list(rows.index)
        x = np.array(xs)
        Wa, Qa = (step.F @ x)[idx].tolist(), (step.B @ x)[idx].tolist()
    hq, hkv, d = step.attn_heads
    # as _apply_curves: nd - ndx sequences, q * group query rows per CTA
    seqs = xs[_ND] - xs[_NDX]
    group = hq / hkv * xs[_ND] / max(seqs, 1e-30)
    ca, ma = _decode_attention_floats(cr, cr.decode_attention, seqs, xs[_KVD], hkv, (d, group),
                                      Wa, Qa)  # type: ignore[arg-type]
    for i, c, m in zip(rows.index, ca, ma, strict=True):
        t_op[i] = c if c > m else m    # np.maximum on numbers
    out: list[float] = (step.S @ t_op).tolist()
    return out


def _apply_curves(step: CompiledStep, cr: CurveRates, x: np.ndarray, W: Any, Q: Any, comp: Any, mem: Any,
                  comm: Any) -> tuple[Any, Any, Any]:
    """Replace the terms of the operators and collectives a measured curve covers (in place on
    the fresh ``comp``/``mem`` arrays of :func:`op_terms`; only the covered rows are computed)."""
    vec = np.ndim(x) == 1
    c = cr.gemm
    gi = cr.gemm_index
    if c is not None and len(gi):
        m = cr.gemm_rows @ x
        Wg, Qg = W[gi], Q[gi]
        comp[gi], mem[gi] = _curve_terms(cr, (0, m, Wg, Qg) if vec else None, _gemm_terms, cr, c, m, Wg, Qg, vec)
    if cr.moe is not None and cr.moe_parts is not None:
        # one fused kernel per MoE block: its time on the gate-up operator, none on the other two
        g, a, dn = cr.moe_parts
        inter, h, experts = cr.moe_dims
        We, Qe = W[g] + W[a] + W[dn], Q[g] + Q[a] + Q[dn]
        routed = W[dn] / (2.0 * inter * h)          # routed rows through this device's experts
        fixed, cm, mm = cr.moe.terms(routed, 3.0 * inter, h, We, Qe, cr.peak_flops, cr.bandwidth, experts)
        fixed = fixed * (We > 0)
        comp[g], mem[g] = fixed + cm, fixed + mm
        comp[a] = mem[a] = comp[dn] = mem[dn] = 0.0
    hq, hkv, d = step.attn_heads
    for curve, idx, ph in ((cr.prefill_attention, cr.prefill_index, 1), (cr.decode_attention, cr.decode_index, 2)):
        if curve is None or not len(idx):
            continue
        group: Any = hq / hkv
        if ph == 1:
            seqs, keys, heads = x[_SP], x[_KVP], hq
        else:
            # decode sequences are nd - ndx; with q query tokens per sequence (speculative verify)
            # a CTA of one (sequence, KV head) holds q * group query rows (FlashInfer and
            # FlashMLA pack the query tokens with the heads: FlashMLA's get_mla_metadata takes
            # s_q * h_q // h_kv), so the curve's per-CTA floor reads q * group
            seqs, keys, heads = x[_ND] - x[_NDX], x[_KVD], hkv
            group = group * x[_ND] / np.maximum(seqs, 1e-30)
        Wa, Qa = W[idx], Q[idx]
        if vec and ph == 2:
            # decode attention reads the decodes' context sum, new in nearly every step: not
            # memoised, timed on plain floats (:meth:`AttentionCurve.decode_terms`)
            comp[idx], mem[idx] = _decode_attention_floats(cr, curve, float(seqs), float(keys), heads,
                                                           (d, float(group)), Wa.tolist(), Qa.tolist())
            continue
        comp[idx], mem[idx] = _curve_terms(cr, (ph, seqs, keys, Wa, Qa) if vec and ph == 1 else None,
                                           _attention_terms, cr, curve, ph, seqs, keys, heads, (d, group), Wa, Qa)
    if cr.comm_index:
        comm = np.array(comm, dtype=float, copy=True)
        active = x[_N] > 0
        vol = step.comm_volume @ x
        for i in cr.comm_index:
            cc = cr.collectives[i]
            assert cc is not None
            comm[i] = cc.time(_COLLECTIVE_OP[step.comm_kind[i]], step.comm_group[i], vol[i]) * active
    return comp, mem, comm


def _curve_terms(cr: CurveRates, key: tuple[Any, ...] | None, fn: Callable[..., tuple[Any, Any]],
                 *args: Any) -> tuple[Any, Any]:
    """``fn(*args)``: the (compute, memory) terms of the rows one curve covers, memoised for one
    step (``key``: the values they are computed from, arrays by their bytes; None: columns, not
    memoised). A mixed step of a serving run repeats its prompt chunks and token counts while its
    decode context sum changes every time: the GEMM and prefill-attention rows then hit."""
    if key is None:
        return fn(*args)
    k = tuple(v.tobytes() if isinstance(v, np.ndarray) else v for v in key)
    hit = cr.memo.get(k)
    if hit is None:
        if len(cr.memo) >= _CURVE_MEMO:
            cr.memo.clear()
        hit = cr.memo[k] = fn(*args)
    return hit


def _gemm_terms(cr: CurveRates, c: GemmCurve, m: Any, Wg: Any, Qg: Any, vec: bool) -> tuple[Any, Any]:
    """(compute, memory) terms of the GEMMs under curve ``c`` (``m`` rows; work ``Wg``, traffic ``Qg``)."""
    k = cr.gemm_inner if vec else cr.gemm_inner[:, None]
    n = (cr.gemm_weight if vec else cr.gemm_weight[:, None]) / k
    fixed, cg, mg = c.terms(m, n, k, Wg, Qg, cr.peak_flops, cr.bandwidth)
    fixed = fixed * (Wg > 0)      # an op without work this step costs nothing
    return fixed + cg, fixed + mg


def _attention_terms(cr: CurveRates, curve: AttentionCurve, ph: int, seqs: Any, keys: Any, heads: float,
                     dims: tuple[float, Any], Wa: Any, Qa: Any) -> tuple[Any, Any]:
    """(compute, memory) terms of the fused attention of phase ``ph`` (1: prefill, 2: decode) under
    ``curve`` (``seqs`` sequences of ``keys`` keys in all; ``dims``: head dim, query heads per KV head)."""
    length = keys / np.maximum(seqs, 1e-30)
    fixed, ca, ma = curve.terms("prefill" if ph == 1 else "decode", length, seqs * heads, dims[0], dims[1], Wa, Qa,
                                cr.attention_peak_flops, cr.bandwidth)
    fixed = fixed * (Wa > 0)
    ca, ma = fixed + ca, fixed + ma
    on = Wa > 0
    return np.where(on, ca, 0.0), np.where(on, ma, 0.0)


def _decode_attention_floats(cr: CurveRates, curve: AttentionCurve, seqs: float, keys: float, heads: float,
                             dims: tuple[float, float], Wa: list[float],
                             Qa: list[float]) -> tuple[list[float], list[float]]:
    """:func:`_attention_terms` of the decode phase for one step (``Wa``, ``Qa``: the work and
    traffic of its decode-attention operators), the same operations on plain floats: equal bit for
    bit (an operator without work costs 0, as ``np.where`` there gives)."""
    comp, mem = [0.0] * len(Wa), [0.0] * len(Wa)
    if not any(w > 0 for w in Wa):
        return comp, mem
    length = keys / max(seqs, 1e-30)
    pairs = seqs * heads
    if not (length > 0 and pairs > 0):    # no decodes but work: the array path's values
        ca, ma = _attention_terms(cr, curve, 2, np.float64(seqs), np.float64(keys), heads, dims,
                                  np.array(Wa), np.array(Qa))
        return ca.tolist(), ma.tolist()
    for i, (w, q) in enumerate(zip(Wa, Qa, strict=True)):
        if w > 0:
            fixed, ca, ma = curve.decode_terms(length, pairs, dims[0], dims[1], w, q, cr.attention_peak_flops,
                                               cr.bandwidth)
            comp[i], mem[i] = fixed + ca, fixed + ma
    return comp, mem


def group_matrix(step: CompiledStep) -> np.ndarray:
    """(groups, blocks) 0/1: the layer group each block belongs to."""
    G = np.zeros((len(step.counts), step.num_blocks))
    for bi, (gi, _) in enumerate(step.blocks):
        G[gi, bi] = 1.0
    return G


def layers_time_floats(block_compute: Sequence[float], block_comm: Sequence[float],
                       dispatch: Sequence[Sequence[float]], counts: Sequence[float]) -> float:
    """:func:`layers_time` of one step (plain floats per block): the same sums in the same order,
    ``max`` for ``np.maximum`` (equal on numbers)."""
    total = 0.0
    i = 0
    for disp, count in zip(dispatch, counts, strict=True):
        t_d = 0.0
        t_c = 0.0
        for d in disp:
            t_d += d
            t_c = (t_d if t_d > t_c else t_c) + block_compute[i] + block_comm[i]
            i += 1
        total = total + count * t_c
    return total


def layers_time(block_compute: Any, block_comm: Any, dispatch: Sequence[Sequence[float]],
                counts: Sequence[float]) -> Any:
    """BestServe Algorithm 1 per layer kind, times the layer counts.

    The host dispatches module after module (``T_d += dispatch``); the device starts a module
    when it is dispatched and the previous one finished (``T_c = max(T_d, T_c) + compute``), then
    runs its communication. Line 17 (``T = ell * T_c``) is read as after the loop. Blocks are
    numbered across groups; ``block_compute[i]`` may be a number or an array (one per step).
    """
    total: Any = 0.0
    i = 0
    for disp, count in zip(dispatch, counts, strict=True):
        t_d = 0.0
        t_c: Any = 0.0
        for d in disp:
            t_d += d
            t_c = np.maximum(t_d, t_c) + block_compute[i] + block_comm[i]
            i += 1
        total = total + count * t_c
    return total


# ------------------------------------------------------------------------------ columns that vary in few features
def restrict(step: CompiledStep, rates: PhaseRates, ops: np.ndarray,
             colls: np.ndarray) -> tuple[CompiledStep, PhaseRates]:
    """The step and rates of a subset of its operators (``ops``) and collectives (``colls``),
    every block kept: :func:`op_terms` of the pair gives those operators' terms, and per block
    their summed time and the chosen collectives' time."""
    sub = CompiledStep(
        group_names=step.group_names, counts=step.counts, blocks=step.blocks,
        ops=tuple(step.ops[i] for i in ops), op_block=step.op_block[ops],
        F=step.F[ops], B=step.B[ops], R=step.R[ops], rate=step.rate[ops], family=step.family[ops],
        is_gemm=step.is_gemm[ops], S=step.S[:, ops],
        C=step.C[colls], C_lat=step.C_lat[colls], SC=step.SC[:, colls],
        weight_elems=step.weight_elems[ops], inner=step.inner[ops], attn_phase=step.attn_phase[ops],
        attn_heads=step.attn_heads, comm_volume=step.comm_volume[colls],
        comm_kind=tuple(step.comm_kind[i] for i in colls),
        comm_group=tuple(step.comm_group[i] for i in colls),
        comm_scale=step.comm_scale[colls] if step.comm_scale is not None else None,
        expert_part=step.expert_part[ops] if step.expert_part is not None else None,
    )
    cr = rates.curves
    if cr is not None:
        coll = tuple(cr.collectives[i] for i in colls)
        gi = np.flatnonzero(sub.is_gemm)
        cr = dataclasses.replace(
            cr, collectives=coll, gemm_index=gi, gemm_rows=sub.R[gi], gemm_weight=sub.weight_elems[gi],
            gemm_inner=sub.inner[gi], prefill_index=np.flatnonzero(sub.attn_phase == 1),
            decode_index=np.flatnonzero(sub.attn_phase == 2),
            comm_index=tuple(i for i, cc in enumerate(coll) if cc is not None),
            moe_parts=CurveRates.expert_parts(sub) if cr.moe is not None else None)
        if cr.moe is not None and cr.moe_parts is None:
            cr = dataclasses.replace(cr, moe=None)
    return sub, dataclasses.replace(rates, inv_compute=rates.inv_compute[ops], inv_memory=rates.inv_memory[ops],
                                    curves=cr)


@dataclass(frozen=True, slots=True, kw_only=True)
class SplitStep:
    """A step split by the features that vary between the columns of a feature matrix: the
    operators and collectives whose terms read one of them (``varying``), timed per column,
    and the rest (``fixed``), timed once (:func:`split_step`, :func:`block_terms`)."""

    varying: tuple[CompiledStep, PhaseRates]
    fixed: tuple[CompiledStep, PhaseRates]


def split_step(step: CompiledStep, rates: PhaseRates, features: Sequence[int]) -> SplitStep:
    """Split ``step`` by the feature indices ``features`` that vary (see :class:`SplitStep`).

    An operator reads a feature through its work, traffic or GEMM rows (``F``, ``B``, ``R``), and
    a fused attention kernel under a measured curve also through its sequences and keys (``sp``,
    ``kvp`` in prefill, ``nd``, ``ndx``, ``kvd`` in decode); a collective through its coefficients and
    payload, and every collective through ``n`` (its latency is paid when the step has tokens).
    """
    f = np.asarray(features, dtype=int)
    ops = (step.F[:, f] != 0).any(axis=1) | (step.B[:, f] != 0).any(axis=1) | (step.R[:, f] != 0).any(axis=1)
    fs = set(f.tolist())
    if fs & {_SP, _KVP}:
        ops |= step.attn_phase == 1
    if fs & {_ND, _NDX, _KVD}:
        ops |= step.attn_phase == 2
    if _N in fs:
        colls = np.ones(len(step.C), dtype=bool)
    else:
        colls = (step.C[:, f] != 0).any(axis=1) | (step.comm_volume[:, f] != 0).any(axis=1)
    return SplitStep(varying=restrict(step, rates, np.flatnonzero(ops), np.flatnonzero(colls)),
                     fixed=restrict(step, rates, np.flatnonzero(~ops), np.flatnonzero(~colls)))


def varying_features(X: np.ndarray) -> tuple[int, ...]:
    """Indices of the features (rows of ``X``) that differ between its columns."""
    return tuple(np.flatnonzero((X != X[:, :1]).any(axis=1)).tolist())


def fixed_terms(split: SplitStep, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per block, the compute and communication times of the fixed operators and collectives of
    ``split`` for the feature vector ``x`` (they read none of the varying features)."""
    *_, bc, bm = op_terms(*split.fixed, x)
    return bc, bm


def block_terms(split: SplitStep, X: np.ndarray,
                fixed: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per block, the compute and communication times of the columns of ``X`` (blocks x columns),
    as :func:`op_terms` gives them, where ``X`` varies only in the features ``split`` was made
    for: the fixed operators and collectives are timed on the first column (or given:
    :func:`fixed_terms`) and added to every column's varying ones (equal to :func:`op_terms` up
    to the order of the per-block sums)."""
    bc0, bm0 = fixed if fixed is not None else fixed_terms(split, X[:, 0])
    *_, bc, bm = op_terms(*split.varying, X)
    return bc + bc0[:, None], bm + bm0[:, None]
