"""Fit the shape-aware kernel curves (:mod:`serveplan.specs.kernels`) to per-kernel measurements.

Rows come from :mod:`serveplan.calibrate.importers` (aiconfigurator, Vidur) or any measurement
file whose ``name`` carries the shape as ``key=value`` pairs. Each curve is fitted by bounded
least squares (``scipy.optimize.least_squares``, soft-L1 loss of scale 0.1 on the log of
predicted over measured time, so a few outliers such as mis-tuned kernels do not pull the curve)
over the logarithms of its parameters. The relative standard deviation of each parameter is
``sqrt(diag(s^2 (J^T J)^-1))`` at the optimum (Gauss-Newton, log parameters), with ``s^2`` the
residual variance; a parameter the data do not constrain gets ``sd`` capped at 1.

Held-out error: the shapes are split in two halves by a seeded draw of *shape groups* (a GEMM's
``(n, k)``, an attention kernel's ``(heads, kv_heads, head_dim)``, a collective's message sizes
alternately), the curve is fitted on one half and its median |relative error| reported on the
other (:func:`held_out`). The bundled profiles are then fitted on all rows.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from serveplan.calibrate.importers import shape_of
from serveplan.calibrate.measurements import Measurement, MeasurementSet
from serveplan.errors import SpecError
from serveplan.specs.hardware import DeviceSpec
from serveplan.specs.kernels import (
    XQA_TARGET_WAVES,
    AttentionCurve,
    CollectiveCurve,
    GemmCurve,
    KernelCurves,
    Provenance,
    attention_peak_flops,
    bus_factor,
    gemm_peak_flops,
    head_dim_key,
    regime_key,
)

#: Tile sizes along the rows tried for each format (chosen inside the training rows, :func:`choose_tile`).
TILE_CHOICES = (1, 64, 128, 256)
#: GEMMs fitted and validated: both weight dimensions at least this (layer projections; the
#: tables' 32-256 wide shapes are not LLM layers) and at most this many rows.
GEMM_MIN_DIM = 512
GEMM_MAX_ROWS = 16384
#: Fewest rows a curve is fitted on.
MIN_POINTS = 8


def peak_flops_for(hardware: DeviceSpec, dtype: str) -> float:
    """Peak a GEMM curve is fitted against (:func:`serveplan.specs.kernels.gemm_peak_flops`)."""
    return gemm_peak_flops(hardware, dtype)


@dataclass(frozen=True, slots=True)
class _Rows:
    t: np.ndarray
    W: np.ndarray
    Q: np.ndarray
    a: np.ndarray        # rows m (GEMM) or length (attention) or bytes (collective)
    b: np.ndarray        # weight columns n (GEMM), (sequence, head) pairs (attention)
    c: np.ndarray        # weight rows k (GEMM), head dimension (attention)
    group: np.ndarray    # shape group for the held-out split
    ratio: np.ndarray | None = None   # attention: query heads per KV head
    experts: np.ndarray | None = None  # fused MoE: experts on the device (``experts / ep``)


def _gemm_rows(rows: Sequence[Measurement]) -> _Rows:
    sh = [shape_of(r) for r in rows]
    n = np.array([float(s["n"]) for s in sh])
    k = np.array([float(s["k"]) for s in sh])
    experts = (np.array([float(s["experts"]) / float(s.get("ep", 1)) for s in sh])
               if sh and all("experts" in s for s in sh) else None)
    return _Rows(np.array([r.time_s for r in rows]), np.array([r.flops for r in rows]),
                 np.array([r.bytes for r in rows]), np.array([float(s["m"]) for s in sh]), n, k, n * 1e6 + k,
                 experts=experts)


def _attn_rows(rows: Sequence[Measurement], phase: str) -> _Rows:
    sh = [shape_of(r) for r in rows]
    length = np.array([float(s["seq" if phase == "prefill" else "context"]) for s in sh])
    grp = np.array([float(s["heads"]) * 1e6 + float(s["kv_heads"]) * 1e3 + float(s["head_dim"]) for s in sh])
    heads = "heads" if phase == "prefill" else "kv_heads"
    pairs = np.array([float(s["batch"]) * float(s[heads]) for s in sh])
    return _Rows(np.array([r.time_s for r in rows]), np.array([r.flops for r in rows]),
                 np.array([r.bytes for r in rows]), length, pairs,
                 np.array([float(s["head_dim"]) for s in sh]), grp,
                 np.array([float(s["heads"]) / float(s["kv_heads"]) for s in sh]))


def _fit(model: Callable[[np.ndarray, _Rows], np.ndarray], p0: Sequence[float], d: _Rows,
         starts: Sequence[Sequence[float]] = ()) -> tuple[np.ndarray, np.ndarray]:
    """Log-parameter least squares on log(predicted / measured); returns (params, relative sd).
    ``starts``: further starting points; the fit with the lowest cost is kept."""
    from scipy.optimize import least_squares

    def resid(lp: np.ndarray) -> np.ndarray:
        return np.asarray(np.log(model(np.exp(lp), d) / d.t))

    res = None
    for start in (p0, *starts):
        r = least_squares(resid, np.log(np.asarray(start, dtype=float)), loss="soft_l1", f_scale=0.1,
                          bounds=(np.log(1e-12), np.log(1e12)), max_nfev=3000)
        if res is None or (r.status >= 0 and np.all(np.isfinite(r.x)) and r.cost < res.cost):
            res = r
    assert res is not None
    if res.status < 0 or not np.all(np.isfinite(res.x)):
        raise SpecError(f"kernel curve fit did not converge: {res.message}")
    J = res.jac
    dof = max(len(d.t) - len(p0), 1)
    s2 = float(np.sum(res.fun ** 2) / dof)
    try:
        cov = s2 * np.linalg.pinv(J.T @ J)
        sd = np.sqrt(np.clip(np.diag(cov), 0, None))
    except np.linalg.LinAlgError:
        sd = np.full(len(p0), np.inf)
    return np.asarray(np.exp(res.x)), np.minimum(sd, 1.0)


# ------------------------------------------------------------------------------------ GEMM
#: Bytes per activation element of the quantization pass before a GEMM whose activations are
#: quantized (:class:`~serveplan.specs.kernels.GemmCurve` ``quant_bytes``): the bf16 input read
#: (2) plus the quantized write: FP8 1; block FP8 1 and one fp32 scale per 128 values (vLLM/
#: DeepGEMM per-token-group 1 x 128); NVFP4 0.5 and one fp8 scale per 16 values. Formats not
#: listed compute on bf16 activations (no pass).
QUANT_BYTES = {"fp8": 3.0, "fp8_block": 3.0 + 4.0 / 128, "fp4": 2.0 + 0.5 + 1.0 / 16, "int8": 3.0}
GEMM_PARAMS = ("overhead_s", "compute_max", "rows_half", "weight_half", "memory", "tiles_half", "quant_memory")


def _gemm_curve(p: np.ndarray, tile: int, quant: float, per_expert: bool = False, **kw: Any) -> GemmCurve:
    return GemmCurve(overhead_s=p[0], compute_max=min(p[1], 1.5), rows_half=p[2], weight_half=p[3],
                     memory=min(p[4], 1.5), tile_rows=tile, tiles_half=p[5], quant_bytes=quant,
                     quant_memory=min(p[6], 1.5) if quant else 1.0, per_expert=per_expert, **kw)


def _gemm_model(peak: float, bw: float, tile: int, quant: float,
                per_expert: bool = False) -> Callable[[np.ndarray, _Rows], np.ndarray]:
    def f(p: np.ndarray, d: _Rows) -> np.ndarray:
        return np.asarray(_gemm_curve(p, tile, quant, per_expert).time(d.a, d.b, d.c, d.W, d.Q, peak, bw, d.experts))
    return f


#: Further starting ceilings (fractions of the format's peak) of a fused-MoE curve fit. A MoE
#: kernel can run far below its weight format's peak: MXFP4 experts compute on 16-bit or MXFP8
#: activations at those formats' rates, a quarter or half of the FP4 peak the curve is a fraction
#: of. Started at 0.8 only, the ceiling ran past its clip (1.5), where it has no gradient, and
#: the fit kept memory and overhead terms alone (vLLM on B200, MXFP4: 33% held out; from 0.1:
#: 14%, ``kernel-validation.md``).
MOE_CEILING_STARTS = (0.3, 0.1, 0.03)
#: Row tiles tried for a fused-MoE curve, whose rows are counted per active expert
#: (:meth:`GemmCurve.terms`, ``experts``): none, or the block sizes the kernels pad each expert's
#: rows to (vLLM's and SGLang's Triton ``fused_moe`` configurations use ``BLOCK_SIZE_M`` 16 to 128,
#: ``fused_moe/configs/*.json``); chosen per format inside the training half (:func:`choose_tile`).
#: Counting per expert took the held-out medians on H200 from 9-25% to 5-17% (vLLM FP8 12.2% ->
#: 7.3%, INT4 25.2% -> 7.7%; TensorRT-LLM FP8 13.7% -> 8.4%; docs/validation/moe-kernels.md, "Rows per expert").
MOE_TILE_CHOICES = (1, 16, 64)


def fit_gemm(rows: Sequence[Measurement], hardware: DeviceSpec, dtype: str, *, tile: int = 1,
             provenance: Provenance | None = None, ceilings: Sequence[float] = (),
             per_expert: bool = False, quant_pass: bool = True) -> GemmCurve:
    """Fit one format's GEMM curve (``t0, c_max, m_half, w_half, e_m, p_half`` and, for formats
    with quantized activations (:data:`QUANT_BYTES`), ``e_q``) to GEMM rows. ``ceilings``: further
    starting values of ``c_max``; the fit of lowest cost is kept. ``per_expert``: fused-MoE rows,
    whose row terms count each active expert's rows (:meth:`GemmCurve.terms`). ``quant_pass=False``:
    rows that time the GEMM on activations already quantized (AITER's tuning tables), so the curve
    has no activation-quantization term whatever the format."""
    if len(rows) < MIN_POINTS:
        raise SpecError(f"gemm {dtype}: {len(rows)} rows; at least {MIN_POINTS} are needed to fit a curve")
    d = _gemm_rows(rows)
    quant = QUANT_BYTES.get(dtype, 0.0) if quant_pass else 0.0
    p0 = (5e-6, 0.8, 16.0, 1e6, 0.8, 8.0) + ((0.5,) if quant else ())
    starts = [(p0[0], c, *p0[2:]) for c in ceilings]
    p, sd = _fit(_gemm_model(peak_flops_for(hardware, dtype), hardware.memory_bandwidth, tile, quant, per_expert),
                 p0, d, starts)
    if not quant:
        p = np.append(p, 1.0)
    return _gemm_curve(p, tile, quant, per_expert, sd=dict(zip(GEMM_PARAMS, sd.tolist(), strict=False)),
                       provenance=provenance)


def predict_gemm(c: GemmCurve, rows: Sequence[Measurement], hardware: DeviceSpec, dtype: str) -> np.ndarray:
    d = _gemm_rows(rows)
    return np.asarray(c.time(d.a, d.b, d.c, d.W, d.Q, peak_flops_for(hardware, dtype), hardware.memory_bandwidth,
                             d.experts))


# ------------------------------------------------------------------------------------ attention
#: Decode kernels by query heads per KV head ``g``, one curve per regime (the first is the default).
#: The bounds are TensorRT-LLM's (``kernels/decoderMaskedMultiheadAttention/decoderXQAImplJIT/
#: kernelUtils.cpp``, ``supportConfigCommon``/``supportConfigQGMMA``/``supportConfigHMMA``: XQA,
#: ``mha.cu``/``mha_sm90.cu``, takes groups of 2 to 32; plain MHA (1) and groups above 32 run the
#: masked multi-head attention kernel). The other engines' decode kernels change with ``g`` too:
#: SGLang's FlashInfer decode runs on CUDA cores below ``g = 4`` and as the tensor-core prefill
#: kernel from 4 (``flashinfer_backend.py`` ``should_use_tensor_core``), FlashAttention packs a
#: head group into one tile (``pack_gqa``); the same three regimes serve them (held out: A100 vLLM
#: 12.0% -> 7.6%, SGLang 15.7% -> 10.6%; docs/validation/kernel-curves.md).
DECODE_REGIMES: tuple[tuple[int, int | None], ...] = ((2, 32), (1, 1), (33, None))
#: XQA's history tokens per CTA before it splits a context over more CTAs
#: (``decoderXQAConstants.h`` ``kMinHistoryTokensPerBlock = 128``).
XQA_BLOCK_TOKENS = 128
PREFILL_PARAMS = ("overhead_s", "compute_max", "memory_max", "len_half", "parallel_half", "head_dim_half",
                  "group_half")
DECODE_PARAMS = ("overhead_s", "compute_max", "memory_max", "len_half", "parallel_half", "group_cost_s",
                 "dim_cost_s", "parallel_power", "cache_gain")


def _attn_curve(phase: str, p: np.ndarray, sm_count: int, multi_block: int, cache_bytes: float = 0.0,
                split_waves: float = XQA_TARGET_WAVES, **kw: Any) -> AttentionCurve:
    decode = phase == "decode"
    cache = decode and cache_bytes > 0 and len(p) > 8
    return AttentionCurve(overhead_s=p[0], compute_max=min(p[1], 1.5), memory_max=min(p[2], 1.5), len_half=p[3],
                          parallel_half=p[4], head_dim_half=0.0 if decode else p[5],
                          group_half=0.0 if decode or len(p) < 7 else p[6],
                          group_cost_s=p[5] if decode else 0.0, dim_cost_s=p[6] if decode else 0.0,
                          sm_count=sm_count if decode else 0, multi_block_tokens=multi_block if decode else 0,
                          split_waves=split_waves if decode and multi_block else XQA_TARGET_WAVES,
                          parallel_power=float(np.clip(p[7], 1.0, 8.0)) if decode else 1.0,
                          cache_bytes=cache_bytes if cache else 0.0,
                          cache_gain=float(np.clip(p[8], 1.0, 20.0)) if cache else 1.0, **kw)


def _attn_model(phase: str, peak: float, bw: float, sm_count: int = 0, multi_block: int = 0,
                cache_bytes: float = 0.0, split_waves: float = XQA_TARGET_WAVES,
                ) -> Callable[[np.ndarray, _Rows], np.ndarray]:
    def f(p: np.ndarray, d: _Rows) -> np.ndarray:
        c = _attn_curve(phase, p, sm_count, multi_block, cache_bytes, split_waves)
        return np.asarray(c.time(phase, d.a, d.b, d.c, d.W, d.Q, peak, bw, d.ratio, warm=True))
    return f


def _cache_bytes(rows: Sequence[Measurement], hardware: DeviceSpec, phase: str) -> float:
    """The device's L2 size where a decode table has at least :data:`MIN_POINTS` rows on each side
    of it (so the L2-resident regime is identified), else 0 (no such regime)."""
    l2 = float(hardware.l2_cache_bytes)
    if phase != "decode" or not l2:
        return 0.0
    nbytes = np.array([r.bytes for r in rows])
    return l2 if min(int(np.sum(nbytes <= l2)), int(np.sum(nbytes > l2))) >= MIN_POINTS else 0.0


def _attention_peak(rows: Sequence[Measurement], hardware: DeviceSpec) -> float:
    """:func:`~serveplan.specs.kernels.attention_peak_flops` of the rows' one KV format."""
    kvs = {shape_of(r).get("kv_dtype", "bf16") for r in rows}
    if len(kvs) != 1:
        raise SpecError(f"attention rows of several KV formats ({sorted(kvs)}): fit each format apart")
    return attention_peak_flops(hardware, kvs.pop())


def fit_attention(rows: Sequence[Measurement], hardware: DeviceSpec, phase: str, *, multi_block: int = 0,
                  split_waves: float = XQA_TARGET_WAVES, provenance: Provenance | None = None,
                  start: AttentionCurve | None = None, group_term: bool = True) -> AttentionCurve:
    """Fit one phase's attention curve for one KV format: ``t0, c_max, m_max, len_half,
    parallel_half`` and, in prefill, ``head_dim_half`` and (``group_term``) ``group_half``; in
    decode the two per-CTA floors (``group_cost_s``, ``dim_cost_s``; waves of the device's
    ``sm_count`` SMs where it is known), the CTA saturation's ``parallel_power`` and, where the
    device's L2 size splits the rows (:func:`_cache_bytes`), the L2-resident ``cache_gain``.
    ``multi_block``/``split_waves``: the context split (history tokens per CTA and the waves of
    SMs the CTAs may fill, :data:`DECODE_SPLITS`; 0: none; needs the device's ``sm_count``).
    ``start``: a curve whose parameters are tried as one more starting point (a subset's fit
    seeded from the whole table's)."""
    if len(rows) < MIN_POINTS:
        raise SpecError(f"attention {phase}: {len(rows)} rows; at least {MIN_POINTS} are needed to fit a curve")
    sm = hardware.sm_count
    if multi_block and not sm:
        raise SpecError(f"attention {phase}: a multi-block split needs the SM count of {hardware.name} (sm_count)")
    d = _attn_rows(rows, phase)
    cache = _cache_bytes(rows, hardware, phase)
    gain = (2.0,) if cache else ()
    grp = (0.5,) if group_term else ()   # prefill: group_half (fitted unless group_term is False)
    p0 = (5e-6, 0.6, 0.8, 256.0, 8.0) + ((16.0, *grp) if phase == "prefill" else (1e-6, 1e-6, 1.0) + gain)
    # decode: a second start at short saturation lengths (the floors and the saturation trade off;
    # from one start the fit can stop at a worse optimum, e.g. TensorRT-LLM's H100 bf16 table)
    # and one with a sharp CTA saturation (parallel_power 4)
    starts: list[tuple[float, ...]] = [] if phase == "prefill" else [
        (5e-6, 0.5, 0.8, 50.0, 4.0, 1e-6, 1e-6, 1.0) + gain, (5e-6, 0.5, 0.8, 50.0, 32.0, 1e-6, 1e-6, 4.0) + gain]
    if start is not None:
        tail = ((start.head_dim_half, *((start.group_half,) if group_term else ())) if phase == "prefill"
                else (start.group_cost_s, start.dim_cost_s, start.parallel_power) + gain)
        starts.append(tuple(max(float(v), 1e-9) for v in (start.overhead_s, start.compute_max, start.memory_max,
                                                            start.len_half, start.parallel_half, *tail)))
    p, sd = _fit(_attn_model(phase, _attention_peak(rows, hardware), hardware.memory_bandwidth, sm, multi_block, cache,
                             split_waves), p0, d, starts)
    names = PREFILL_PARAMS[:6 + len(grp)] if phase == "prefill" else DECODE_PARAMS[:8 + len(gain)]
    if phase == "decode":  # compute never binds a paged decode kernel: its ceiling is not identified
        p[1], sd[1] = min(p[1], 1.0), 1.0
    return _attn_curve(phase, p, sm, multi_block, cache, split_waves, sd=dict(zip(names, sd.tolist(), strict=True)),
                       provenance=provenance)


def predict_attention(c: AttentionCurve, rows: Sequence[Measurement], hardware: DeviceSpec, phase: str) -> np.ndarray:
    d = _attn_rows(rows, phase)
    return np.asarray(c.time(phase, d.a, d.b, d.c, d.W, d.Q, _attention_peak(rows, hardware), hardware.memory_bandwidth,
                             d.ratio, warm=True))


def fit_decode_regimes(rows: Sequence[Measurement], hardware: DeviceSpec, kv: str, *,
                       provenance: Provenance | None = None) -> dict[str, AttentionCurve]:
    """Decode curves, one per kernel regime (:data:`DECODE_REGIMES`), each with the context split
    its rows show (:func:`fit_split_or_not`): ``{"decode/<kv>": g = 2-32, "decode/<kv>/g=1": ...,
    "decode/<kv>/g=33-": ...}`` (regimes with too few rows are left to the default curve)."""
    out: dict[str, AttentionCurve] = {}
    ratio = _attn_rows(rows, "decode").ratio
    assert ratio is not None
    for lo, hi in DECODE_REGIMES:
        sub = [r for r, g in zip(rows, ratio, strict=True) if lo <= g and (hi is None or g <= hi)]
        if len(sub) < 2 * MIN_POINTS:
            continue
        prov = None if provenance is None else dataclasses.replace(provenance, points=len(sub))
        key = f"decode/{kv}" if (lo, hi) == DECODE_REGIMES[0] else regime_key("decode", kv, lo, hi)
        out[key] = fit_split_or_not(sub, hardware, provenance=prov)
    if f"decode/{kv}" not in out:   # too few rows of the default regime: one curve over all of them stands in
        out[f"decode/{kv}"] = fit_split_or_not(rows, hardware, provenance=provenance)
    return out


#: The context splits a decode curve may take (:func:`fit_split_or_not`): ``(history tokens per CTA,
#: waves of the SMs the CTAs may fill)``; 0 tokens: one CTA per (sequence, KV head). TensorRT-LLM
#: XQA: 128 tokens and 8 waves (:data:`XQA_BLOCK_TOKENS`, ``kTargetWaveFactor``). FlashInfer's decode
#: plan (``scheduler.cuh`` ``PartitionPagedKVCacheBinarySearchMinNumPagePerBatch``) takes the
#: smallest KV chunk (in pages) whose chunks fill at most the grid of ``SMs x blocks per SM``; with
#: 16-token pages, 16 tokens and one to four waves stand for it.
DECODE_SPLITS: tuple[tuple[int, float], ...] = ((0, XQA_TARGET_WAVES), (XQA_BLOCK_TOKENS, XQA_TARGET_WAVES),
                                                (16, 1.0), (16, 2.0), (16, 4.0))


def fit_split_or_not(rows: Sequence[Measurement], hardware: DeviceSpec, *,
                     splits: Sequence[tuple[int, float]] = DECODE_SPLITS,
                     provenance: Provenance | None = None) -> AttentionCurve:
    """A decode curve for each context split of ``splits`` (:data:`DECODE_SPLITS`); the one
    closest to ``rows`` (median |relative error|) is kept. Which split a kernel makes depends on the
    kernel and the build: on L40S TensorRT-LLM's FP8-KV decode streams a 65,536-token context of one
    sequence at 127 GB/s (one CTA per KV head) where eight sequences reach 716 GB/s. Without the
    device's SM count only the unsplit curve is fitted."""
    t = np.array([r.time_s for r in rows])
    best: tuple[float, AttentionCurve] | None = None
    for tokens, waves in (splits if hardware.sm_count else [(0, XQA_TARGET_WAVES)]):
        c = fit_attention(rows, hardware, "decode", multi_block=tokens, split_waves=waves, provenance=provenance)
        err = float(np.median(np.abs(predict_attention(c, rows, hardware, "decode") / t - 1)))
        if best is None or err < best[0]:
            best = (err, c)
    assert best is not None
    return best[1]


def predict_by_curve(curves: Mapping[str, AttentionCurve], rows: Sequence[Measurement], hardware: DeviceSpec,
                     kv: str, phase: str) -> np.ndarray:
    """Each row timed by the curve :meth:`KernelCurves.attention_curve` picks for its query heads
    per KV head and its head size (TensorRT-LLM's decode regimes, the prefill curves per head size,
    else the phase's curve)."""
    kc = KernelCurves(attention=dict(curves))
    d = _attn_rows(rows, phase)
    assert d.ratio is not None
    out = np.empty(len(rows))
    for g, hd in sorted(set(zip(d.ratio.tolist(), d.c.tolist(), strict=True))):
        c = kc.attention_curve(phase, kv, g, hd)
        assert c is not None
        idx = np.flatnonzero((d.ratio == g) & (d.c == hd))
        out[idx] = predict_attention(c, [rows[int(k)] for k in idx], hardware, phase)
    return out


def fit_head_dim_curves(rows: Sequence[Measurement], hardware: DeviceSpec, kv: str, *, phase: str = "prefill",
                        provenance: Provenance | None = None) -> dict[str, AttentionCurve]:
    """One phase's curves per head size (:func:`~serveplan.specs.kernels.head_dim_key`: the kernels
    are instantiated per head dimension, each with its own tiles) beside one over all rows for other
    head sizes: ``{"<phase>/<kv>": all rows, "<phase>/<kv>/d=128": ..., ...}``. Each head size's fit
    starts from the common curve too; head sizes with fewer than ``2 MIN_POINTS`` rows keep the
    common curve; a table of one head size has only it."""
    grp = group_term_helps(rows, hardware, phase)
    common = fit_attention(rows, hardware, phase, provenance=provenance, group_term=grp)
    out = {f"{phase}/{kv}": common}
    dims = sorted({int(shape_of(r)["head_dim"]) for r in rows})
    if len(dims) < 2:
        return out
    for d in dims:
        sub = [r for r in rows if int(shape_of(r)["head_dim"]) == d]
        if len(sub) >= 2 * MIN_POINTS:
            prov = None if provenance is None else dataclasses.replace(provenance, points=len(sub))
            out[head_dim_key(phase, kv, d)] = fit_attention(sub, hardware, phase, provenance=prov, start=common,
                                                            group_term=grp)
    return out


def group_term_helps(rows: Sequence[Measurement], hardware: DeviceSpec, phase: str = "prefill", seed: int = 1) -> bool:
    """Whether a prefill curve should carry the group term (``group_half``): fitted with and without
    it on half of ``rows``' shape groups and kept if it predicts the other half better (median
    |relative error|). Prefill kernels that pack a KV head's query heads into one tile gain with the
    group (FlashAttention-3, TensorRT-LLM and FlashInfer FMHA on Hopper and Blackwell); others do
    not (A100's vLLM table: with the term its MHA rows came out 21% too slow, held out 10.4% ->
    12.9%), and with the group confounded with the head counts the term can fit noise."""
    ratio = _attn_rows(rows, phase).ratio
    if phase != "prefill" or ratio is None or len(set(ratio.tolist())) < 3:
        return False
    tr = split_by_group(attention_group(rows, phase), seed)
    fit = [r for r, m in zip(rows, tr, strict=True) if m]
    val = [r for r, m in zip(rows, tr, strict=True) if not m]
    if len(fit) < MIN_POINTS or len(val) < MIN_POINTS:
        return False
    t = np.array([r.time_s for r in val])
    errs = [float(np.median(np.abs(predict_attention(fit_attention(fit, hardware, phase, group_term=g), val, hardware,
                                                     phase) / t - 1))) for g in (False, True)]
    return errs[1] < errs[0]


# ------------------------------------------------------------------------------------ collectives
def fit_collective(rows: Sequence[Measurement], op: str, ranks: int, *, link: str = "",
                   provenance: Provenance | None = None) -> CollectiveCurve:
    """Fit ``latency + (f bytes + sqrt(f bytes ramp_bytes)) / bus_bandwidth`` to one operation at
    one rank count."""
    if len(rows) < 3:
        raise SpecError(f"{op} on {ranks} ranks: {len(rows)} rows; at least 3 are needed")
    t = np.array([r.time_s for r in rows])
    nbytes = np.array([r.bytes for r in rows])
    f = bus_factor(op, ranks)
    z = np.zeros_like(t)
    d = _Rows(t, z, nbytes, nbytes, z, z, nbytes)
    p, sd = _fit(lambda p, d: p[0] + (f * d.Q + np.sqrt(f * d.Q * p[2])) / p[1], (1e-5, 1e11, 1e6), d)
    return CollectiveCurve(latency_s=p[0], bus_bandwidth=p[1], ramp_bytes=p[2], link=link,
                           sd={"latency_s": float(sd[0]), "bus_bandwidth": float(sd[1]), "ramp_bytes": float(sd[2])},
                           provenance=provenance)


# ------------------------------------------------------------------------------------ selection and split
def select(ms: MeasurementSet | Sequence[Measurement], kind: str, **shape: str) -> list[Measurement]:
    """Rows of one kind whose ``name`` has every ``key=value`` given (``dtype="bf16"``)."""
    rows = ms.rows if isinstance(ms, MeasurementSet) else ms
    out = []
    for r in rows:
        if r.kind != kind:
            continue
        s = shape_of(r)
        if all(s.get(k) == v for k, v in shape.items()):
            out.append(r)
    return out


def split_by_group(groups: np.ndarray, seed: int = 0) -> np.ndarray:
    """Boolean mask of the training half: a seeded half of the distinct shape groups."""
    keys = np.unique(groups)
    rng = np.random.default_rng(seed)
    train = set(rng.choice(keys, size=max(len(keys) // 2, 1), replace=False).tolist())
    return np.array([g in train for g in groups.tolist()])


def rel_errors(pred: np.ndarray, t: np.ndarray) -> np.ndarray:
    return np.asarray(pred / t - 1.0)


@dataclass(frozen=True, slots=True)
class HeldOut:
    """Held-out |relative error| of one curve: fitted on ``train`` rows, evaluated on ``test`` rows."""

    what: str
    train: int
    test: int
    median: float
    p90: float

    def to_dict(self) -> dict[str, Any]:
        return {"what": self.what, "train": self.train, "test": self.test, "median": self.median, "p90": self.p90}


def summarize(what: str, err: np.ndarray, train: int) -> HeldOut:
    a = np.abs(err)
    return HeldOut(what, train, len(a), float(np.median(a)) if len(a) else math.nan,
                   float(np.percentile(a, 90)) if len(a) else math.nan)


def gemm_group(rows: Sequence[Measurement]) -> np.ndarray:
    return _gemm_rows(rows).group


def attention_group(rows: Sequence[Measurement], phase: str) -> np.ndarray:
    return _attn_rows(rows, phase).group


def moe_group(rows: Sequence[Measurement]) -> np.ndarray:
    """Shape group of a fused-MoE row: one model's MoE layer at one split (hidden, intermediate,
    experts, top-k, expert TP, expert-parallel ranks), whatever the token count."""
    keys = [tuple(int(float(shape_of(r).get(f, 1))) for f in ("k", "inter", "experts", "topk", "tp", "ep"))
            for r in rows]
    index = {key: i for i, key in enumerate(sorted(set(keys)))}
    return np.array([index[key] for key in keys], dtype=float)


def choose_tile(rows: Sequence[Measurement], hardware: DeviceSpec, dtype: str, seed: int = 0, *,
                choices: Sequence[int] = TILE_CHOICES, **fit: Any) -> int:
    """The tile of ``choices`` whose curve, fitted on a seeded half of the shape groups of
    ``rows``, predicts the other half best. Called on the training half only, so the reported
    held-out rows never choose the tile. ``fit``: further arguments of :func:`fit_gemm` (a fused-MoE
    curve's ``per_expert`` and ``ceilings``; its rows are grouped by :func:`moe_group`)."""
    groups = moe_group(rows) if fit.get("per_expert") else gemm_group(rows)
    inner = split_by_group(groups, seed + 1)
    fit_rows = [r for r, m in zip(rows, inner, strict=True) if m]
    val = [r for r, m in zip(rows, inner, strict=True) if not m]
    if len(fit_rows) < MIN_POINTS or not val:
        return 1
    t_val = np.array([r.time_s for r in val])
    errs = [float(np.median(np.abs(rel_errors(predict_gemm(fit_gemm(fit_rows, hardware, dtype, tile=tile, **fit), val,
                                                             hardware, dtype), t_val)))) for tile in choices]
    return choices[int(np.argmin(errs))]


def _attention_curves(ms: MeasurementSet, hardware: DeviceSpec, kv_dtypes: Sequence[str], seed: int,
                      held: list[HeldOut], *, source: str, fit_date: str,
                      ) -> dict[str, AttentionCurve]:
    """The attention curves of :func:`fit_kernel_curves` (held-out figures appended to ``held``)."""
    attention: dict[str, AttentionCurve] = {}
    for phase in ("prefill", "decode"):
        for kv in kv_dtypes:
            rows = [r for r in select(ms, "attention", kv_dtype=kv) if r.phase == phase]
            if len(rows) < 2 * MIN_POINTS:
                continue
            tr = split_by_group(attention_group(rows, phase), seed)
            train = [r for r, m in zip(rows, tr, strict=True) if m]
            test = [r for r, m in zip(rows, tr, strict=True) if not m]
            ho_median = None
            regimes = phase == "decode" and bool(hardware.sm_count)
            if len(train) >= MIN_POINTS and test:   # too few shape groups: no held-out figure
                t = np.array([r.time_s for r in test])
                if regimes:
                    pred = predict_by_curve(fit_decode_regimes(train, hardware, kv), test, hardware, kv, "decode")
                elif phase == "prefill":
                    pred = predict_by_curve(fit_head_dim_curves(train, hardware, kv), test, hardware, kv, "prefill")
                else:
                    pred = predict_attention(fit_attention(train, hardware, phase), test, hardware, phase)
                ho = summarize(f"{phase} attention, KV {kv}", rel_errors(pred, t), len(train))
                held.append(ho)
                ho_median = ho.median
            prov = Provenance(source=source, fit_date=fit_date, points=len(rows), held_out_median=ho_median)
            if regimes:
                attention.update(fit_decode_regimes(rows, hardware, kv, provenance=prov))
            elif phase == "prefill":   # decode per head size: docs/validation/kernel-curves.md (kept out: profile size)
                attention.update(fit_head_dim_curves(rows, hardware, kv, provenance=prov))
            else:
                attention[f"{phase}/{kv}"] = fit_attention(rows, hardware, phase, provenance=prov)
    return attention


def fit_moe_curves(ms: MeasurementSet, hardware: DeviceSpec, kind: str, seed: int, held: list[HeldOut], *,
                   source: str, fit_date: str) -> dict[str, GemmCurve]:
    """Routed-expert curves by weight format from the rows of ``kind`` (``moe``: fused MoE on one
    device; ``moe_ep``: DeepEP expert layers on one expert-parallel rank), each fitted on a seeded
    half of its shape groups (:func:`moe_group`) and reported on the other half (appended to
    ``held``), then fitted on every row. A format with one shape group has no held-out half and
    gets no curve."""
    out: dict[str, GemmCurve] = {}
    label = {"moe": "moe", "moe_ep": "moe DeepEP"}.get(kind, kind)
    for dt in sorted({shape_of(r)["dtype"] for r in select(ms, kind)}):
        rows = select(ms, kind, dtype=dt)
        if len(rows) < 2 * MIN_POINTS:
            continue
        tr = split_by_group(moe_group(rows), seed)
        if tr.all() or not tr.any():   # one shape group: no held-out half
            continue
        train = [r for r, m in zip(rows, tr, strict=True) if m]
        tile = choose_tile(train, hardware, dt, seed, choices=MOE_TILE_CHOICES, per_expert=True,
                           ceilings=MOE_CEILING_STARTS)
        out[dt] = _fit_gemm_held_out(rows, tr, hardware, dt, f"{label} {dt}", held, source=source,
                                     fit_date=fit_date, tile=tile, ceilings=MOE_CEILING_STARTS, per_expert=True)
    return out


def _fit_gemm_held_out(rows: Sequence[Measurement], train_mask: np.ndarray, hardware: DeviceSpec, dtype: str,
                       what: str, held: list[HeldOut], *, source: str, fit_date: str, tile: int = 1,
                       ceilings: Sequence[float] = (), per_expert: bool = False) -> GemmCurve:
    """A curve of the GEMM form fitted on the ``train_mask`` rows and reported on the others
    (appended to ``held`` as ``what``), then fitted on every row with that held-out error in its
    provenance."""
    train = [r for r, m in zip(rows, train_mask, strict=True) if m]
    test = [r for r, m in zip(rows, train_mask, strict=True) if not m]
    c = fit_gemm(train, hardware, dtype, tile=tile, ceilings=ceilings, per_expert=per_expert)
    ho = summarize(what, rel_errors(predict_gemm(c, test, hardware, dtype), np.array([r.time_s for r in test])),
                   len(train))
    held.append(ho)
    return fit_gemm(rows, hardware, dtype, tile=tile, ceilings=ceilings, per_expert=per_expert,
                    provenance=Provenance(source=source, fit_date=fit_date, points=len(rows),
                                          held_out_median=ho.median))


def fit_kernel_curves(ms: MeasurementSet, hardware: DeviceSpec, *, source: str, fit_date: str, seed: int = 0,
                      gemm_dtypes: Sequence[str] = ("bf16", "fp8", "fp4"),
                      kv_dtypes: Sequence[str] = ("bf16", "fp8"),
                      collective_runtime: str | None = None,
                      ) -> tuple[KernelCurves, list[HeldOut]]:
    """Fit every curve the measurements support; returns the curves (fitted on all rows) and the
    held-out errors (fitted on half of the shape groups, evaluated on the other half).

    A GEMM format's tile size is chosen among :data:`TILE_CHOICES` within the training half
    (:func:`choose_tile`). Decode curves are fitted per regime of query heads per KV head
    (:func:`fit_decode_regimes`) where the device's ``sm_count`` is known.
    """
    held: list[HeldOut] = []
    gemm: dict[str, GemmCurve] = {}
    for dt in gemm_dtypes:
        rows = [r for r in select(ms, "gemm", dtype=dt) if r.rows <= GEMM_MAX_ROWS
                and min(float(shape_of(r)["n"]), float(shape_of(r)["k"])) >= GEMM_MIN_DIM]
        if len(rows) < 2 * MIN_POINTS:
            continue
        tr = split_by_group(gemm_group(rows), seed)
        tile = choose_tile([r for r, m in zip(rows, tr, strict=True) if m], hardware, dt, seed)
        gemm[dt] = _fit_gemm_held_out(rows, tr, hardware, dt, f"gemm {dt}", held, source=source,
                                      fit_date=fit_date, tile=tile)
    attention = _attention_curves(ms, hardware, kv_dtypes, seed, held, source=source, fit_date=fit_date)
    moe = fit_moe_curves(ms, hardware, "moe", seed, held, source=source, fit_date=fit_date)
    moe_deepep = fit_moe_curves(ms, hardware, "moe_ep", seed, held, source=source, fit_date=fit_date)
    coll: dict[str, dict[int, CollectiveCurve]] = {}
    crow = select(ms, "collective")
    if collective_runtime:
        crow = [r for r in crow if shape_of(r).get("runtime") == collective_runtime]
    # the curves describe the intra-node link: rows whose ranks span nodes are left out
    crow = [r for r in crow if int(shape_of(r).get("per_node", shape_of(r)["ranks"])) >= int(shape_of(r)["ranks"])]
    keys = sorted({(shape_of(r)["op"], int(shape_of(r)["ranks"])) for r in crow})
    link = hardware.link_for(2).name
    for op, g in keys:
        rows = sorted((r for r in crow if shape_of(r)["op"] == op and int(shape_of(r)["ranks"]) == g
                       and shape_of(r).get("dtype") in ("fp16", "bf16")), key=lambda r: r.bytes)
        if len(rows) < 6 or g > hardware.devices_per_node:
            continue
        # held out: every other message size
        train, test = rows[::2], rows[1::2]
        cc = fit_collective(train, op, g)
        big = [r for r in test if 1 << 20 <= r.bytes <= 512 << 20]
        if big:
            pred = np.array([cc.time(op, g, r.bytes) for r in big])
            ho = summarize(f"{op} {g} ranks, 1-512 MiB", rel_errors(pred, np.array([r.time_s for r in big])),
                           len(train))
            held.append(ho)
        coll.setdefault(op, {})[g] = fit_collective(
            rows, op, g, link=link,
            provenance=Provenance(source=source, fit_date=fit_date, points=len(rows),
                                  held_out_median=held[-1].median if big else None))
    return KernelCurves(gemm=gemm, attention=attention, collectives=coll, moe=moe, moe_deepep=moe_deepep,
                        source=source,
                        fit_date=fit_date), held
