"""FlexGen's two-level policy search, evaluation of a given policy, and the latency-throughput frontier.

Outer level (FlexGen Section 4.3): enumerate the GPU batch size, the number of GPU batches in a block,
compression on/off and CPU attention on/off. Inner level: the placement LP of
:mod:`serveplan.offload.lp`, then rounding to whole percent. Candidates are visited in decreasing
order of a throughput bound that ignores all transfers (compute alone), and the enumeration stops
when the bound falls below the best rounded plan, so few LPs are solved. Rounding yields only
placements FlexGen's runtime allocates (:func:`serveplan.offload.cost.runtime_allocation`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

import numpy as np

from serveplan.errors import InfeasibleError, SpecError, check_number
from serveplan.offload.cost import (
    TERMS,
    CostTerms,
    LayerSizes,
    cost_terms,
    kv_allocation,
    layer_sizes,
    runtime_allocation,
    weight_allocation,
)
from serveplan.offload.lp import (
    build_lp,
    kv_split_step,
    memory_violations,
    round_placement,
    runtime_roundings,
    solve,
)
from serveplan.offload.policy import PLACEMENT_FIELDS, OffloadPolicy, Overlap
from serveplan.specs.catalog import get_hardware, get_host, get_model
from serveplan.specs.hardware import DeviceSpec
from serveplan.specs.host import HostSpec
from serveplan.specs.model import ModelSpec

#: GPU batch sizes tried (FlexGen: "typically a multiple of 4"; Tables 14-18 also use 1, 2, 7).
GPU_BATCH_SIZES = (1, 2, 4, 8, 12, 16, 20, 24, 28, 32, 40, 48, 56, 64, 72, 80, 96, 112, 128, 144,
                   160, 192, 224, 256, 320, 384, 448, 512)
#: GPU batches per block tried (Tables 14-18 use 1 to 36).
NUM_GPU_BATCHES = (1, 2, 3, 4, 5, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32, 36, 40)

_TIERS = ("gpu", "cpu", "disk")
#: A plan that uses the disk is chosen only if it beats the best disk-free plan by this fraction
#: (assumed: half the model's median error on Tables 14-18, 10%; disk plans also depend on the page
#: cache). FlexGen's ablation treats disk on/off as a switch (Tables 4 and 23, "No disk").
DISK_MARGIN = 0.05
_X_MIN_GPU = np.array([0, 1, 0, 0, 1, 0, 0, 1, 0], dtype=float)  # minimizes every GPU peak term


@dataclass(frozen=True, slots=True, kw_only=True)
class OffloadPlan:
    """A policy with its predicted throughput, latency, memory per tier and time per term.

    ``latency_s`` is the time of one block (``bls`` sequences, ``s`` prompt and ``n`` generated
    tokens each) and ``throughput_tokens_per_s = bls * n / latency_s`` (FlexGen Section 3).
    """

    model: str
    gpu: str
    host: str
    input_len: int
    output_len: int
    overlap: Overlap
    policy: OffloadPolicy
    throughput_tokens_per_s: float
    latency_s: float
    prefill_s: float
    decode_s: float
    prefill_layer_terms_s: dict[str, float]
    decode_layer_terms_s: dict[str, float]
    time_breakdown_s: dict[str, float]
    peak_memory_bytes: dict[str, float]
    capacity_bytes: dict[str, float]
    violations_bytes: dict[str, float]
    placement_bytes: dict[str, dict[str, float]]
    sizes: dict[str, float]
    relaxed: dict[str, Any] | None = None
    search: dict[str, Any] | None = None
    #: fraction of every tier kept free; ``capacity_bytes`` is already reduced by it
    memory_headroom: float = 0.0
    #: placement FlexGen's runtime allocates for ``policy`` (percent): weights per tensor, KV cache
    #: in whole sequences (:func:`serveplan.offload.cost.runtime_allocation`); priced above
    allocated_percent: dict[str, float] | None = None

    @property
    def fits(self) -> bool:
        return not self.violations_bytes

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model, "gpu": self.gpu, "host": self.host,
            "input_len": self.input_len, "output_len": self.output_len, "overlap": self.overlap.value,
            "throughput_tokens_per_s": self.throughput_tokens_per_s, "latency_s": self.latency_s,
            "prefill_s": self.prefill_s, "decode_s": self.decode_s,
            "policy": self.policy.to_dict(), "fits": self.fits,
            "prefill_layer_terms_s": self.prefill_layer_terms_s,
            "decode_layer_terms_s": self.decode_layer_terms_s,
            "time_breakdown_s": self.time_breakdown_s,
            "peak_memory_bytes": self.peak_memory_bytes, "capacity_bytes": self.capacity_bytes,
            "memory_headroom": self.memory_headroom, "violations_bytes": self.violations_bytes,
            "placement_bytes": self.placement_bytes,
            "sizes": self.sizes, "relaxed": self.relaxed, "search": self.search,
            "allocated_percent": self.allocated_percent,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class OffloadFrontier:
    """Best throughput under each latency bound: plans sorted by latency, throughput increasing."""

    points: tuple[OffloadPlan, ...]
    search: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"points": [p.to_dict() for p in self.points], "search": self.search}


# ------------------------------------------------------------------------------------- inputs
def _resolve(model: str | ModelSpec, gpu: str | DeviceSpec | None, host: str | HostSpec,
             memory_headroom: float | None = None) -> tuple[ModelSpec, DeviceSpec, HostSpec]:
    m = get_model(model) if isinstance(model, str) else model
    h = get_host(host) if isinstance(host, str) else host
    if memory_headroom is not None:
        h = replace(h, memory_headroom=memory_headroom)  # validated by HostSpec
    if gpu is None:
        g = h.gpu
    elif isinstance(gpu, DeviceSpec):
        g = gpu
    elif gpu == h.gpu.name:
        g = h.gpu
    else:
        g = get_hardware(gpu)
    return m, g, h


def _check_lengths(input_len: int, output_len: int) -> None:
    for name, v in (("input_len", input_len), ("output_len", output_len)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise SpecError(f"{name}={v!r} must be a positive integer (tokens)")


# ------------------------------------------------------------------------------------- evaluate
def _plan_from(terms: CostTerms, x: np.ndarray, *, model: ModelSpec, gpu: DeviceSpec, host: HostSpec,
               policy: OffloadPolicy, relaxed: dict[str, Any] | None = None,
               search: dict[str, Any] | None = None) -> OffloadPlan:
    """Price the allocated placement ``x`` of ``policy``."""
    L, n, s = terms.num_layers, terms.output_len, terms.input_len
    prefill_s, decode_s = terms.block_latency(x)
    latency = prefill_s + decode_s
    pre = {t: terms.prefill[t].at(x) for t in TERMS}
    dec = {t: terms.decode[t].at(x) for t in TERMS}
    breakdown = {f"prefill_{t}": v * L for t, v in pre.items()}
    breakdown.update({f"decode_{t}": v * (n - 1) * L for t, v in dec.items()})
    breakdown.update({k: a.at(x) * (L if k.startswith("prefill") else (n - 1) * L)
                      for k, a in terms.parts.items()})
    z = terms.sizes
    bls = terms.block_size
    kv_block = z.kv_bytes_per_token * (s + n) * bls * L
    act_block = z.act_bytes_per_token * s * bls
    placement = {
        "weights": {t: float(z.total_weight_bytes * x[i]) for i, t in enumerate(_TIERS)},
        "kv_cache": {t: float(kv_block * x[3 + i]) for i, t in enumerate(_TIERS)},
        "activations": {t: float(act_block * x[6 + i]) for i, t in enumerate(_TIERS)},
    }
    sizes = {
        "weight_bytes_per_layer": z.weight_bytes,
        "weight_fp16_bytes_per_layer": z.weight_fp16_bytes,
        "weight_bytes_total": z.total_weight_bytes,
        "kv_bytes_per_token_per_layer": z.kv_bytes_per_token,
        "kv_bytes_block": kv_block,
        "activation_bytes_per_token": z.act_bytes_per_token,
        "linear_flops_per_token_per_layer": z.linear_flops_per_token,
        "num_layers": L,
    }
    return OffloadPlan(
        model=model.name, gpu=gpu.name, host=host.name, input_len=s, output_len=n,
        overlap=terms.overlap, policy=policy,
        throughput_tokens_per_s=bls * n / latency, latency_s=latency,
        prefill_s=prefill_s, decode_s=decode_s,
        prefill_layer_terms_s=pre, decode_layer_terms_s=dec, time_breakdown_s=breakdown,
        peak_memory_bytes={t: m.at(x) for t, m in terms.memory.items()},
        capacity_bytes=dict(terms.capacity), violations_bytes=memory_violations(terms, x),
        placement_bytes=placement, sizes=sizes, relaxed=relaxed, search=search,
        memory_headroom=host.memory_headroom,
        allocated_percent={f: float(v * 100) for f, v in zip(PLACEMENT_FIELDS, x, strict=True)},
    )


def _policy_from(terms: CostTerms, x: np.ndarray) -> OffloadPolicy:
    vals = {f: float(round(v, 6)) for f, v in zip(PLACEMENT_FIELDS, x, strict=True)}
    return OffloadPolicy(gpu_batch_size=terms.gpu_batch_size, num_gpu_batches=terms.num_gpu_batches,
                         compress=terms.compress, cpu_attention=terms.cpu_attention, **vals)


def evaluate_policy(
    model: str | ModelSpec,
    policy: OffloadPolicy,
    *,
    gpu: str | DeviceSpec | None = None,
    host: str | HostSpec = "flexgen-t4",
    input_len: int = 512,
    output_len: int = 32,
    overlap: Overlap = Overlap.SERIAL_LOAD,
    memory_headroom: float | None = None,
) -> OffloadPlan:
    """Predict throughput, latency, peak memory per tier and time per term of a given policy.

    The policy is priced as FlexGen's runtime allocates it (``allocated_percent``): weights are
    placed per tensor and a split KV cache in whole sequences of a GPU batch
    (:func:`serveplan.offload.cost.runtime_allocation`).

    A policy that overflows a tier is still evaluated (FlexGen's own tables contain such policies,
    e.g. Table 18's OPT-30B ``512x8``); the overflow is reported in ``violations_bytes``.

    Example
    -------
    >>> plan = evaluate_policy("opt-30b", parse_policy("48x3,20,80,0,100,0,100"))  # doctest: +SKIP
    """
    _check_lengths(input_len, output_len)
    m, g, h = _resolve(model, gpu, host, memory_headroom)
    terms = cost_terms(m, g, h, input_len=input_len, output_len=output_len,
                       gpu_batch_size=policy.gpu_batch_size, num_gpu_batches=policy.num_gpu_batches,
                       compress=policy.compress, cpu_attention=policy.cpu_attention, overlap=overlap)
    x = runtime_allocation(terms, np.array(policy.placement()))
    return _plan_from(terms, x, model=m, gpu=g, host=h, policy=policy)


# ------------------------------------------------------------------------------------- search
@dataclass(slots=True)
class _Candidate:
    terms: CostTerms
    allow_disk: bool
    latency_lb: float
    throughput_ub: float


def _modes(compress: bool | None, cpu_attention: bool | None) -> list[tuple[bool, bool]]:
    comps = [False, True] if compress is None else [compress]
    out = []
    for c in comps:
        if c:
            if cpu_attention:
                raise SpecError("cpu_attention=True conflicts with compress=True: FlexGen turns CPU "
                                "attention off under compression (Section 5)")
            out.append((True, False))
        else:
            out += [(False, a) for a in ([True, False] if cpu_attention is None else [cpu_attention])]
    return out


def _min_need(model: ModelSpec, s: int, n: int, compress: bool) -> tuple[float, float, float, float]:
    """Bytes the smallest block (one sequence) needs: weights, KV, activations, and the total."""
    z = layer_sizes(model, compress=compress)
    w = z.total_weight_bytes
    kv = z.kv_bytes_per_token * (s + n) * z.num_layers
    act = z.act_bytes_per_token * s
    return w, kv, act, w + kv + act


def _latency_bound(t: CostTerms, allow_disk: bool) -> float | None:
    """A lower bound on the block latency over all placements, or None if none can fit.

    Compute terms do not depend on placement; weights beyond GPU capacity must cross PCIe every
    step; bytes beyond GPU + CPU capacity must be read from disk every step (at least the
    ``ctx/(s+n)`` share of a KV byte). Both bounds only relax the LP, so pruning on them is safe.
    """
    z, L, n, s = t.sizes, t.num_layers, t.output_len, t.input_len
    bls = t.block_size
    cap_g, cap_c = t.capacity["gpu_decode"], t.capacity["cpu_decode"]
    disk_ok = allow_disk and not t.compress
    cap_d = t.capacity["disk"] if disk_ok else 0.0
    home = (z.total_weight_bytes + z.kv_bytes_per_token * (s + n) * bls * L
            + z.act_bytes_per_token * s * bls)
    if home > cap_g + cap_c + cap_d:
        return None
    # seconds per layer-step to upload one home byte that is off the GPU: weights W/l per layer,
    # KV (GPU attention only) its ctx/(s+n) share; coefficients read from the affine terms
    up_w = t.decode["ctog"].coef[1] / z.total_weight_bytes  # (W / ctog_bw) per Wt home byte
    kv_home = z.kv_bytes_per_token * (s + n) * bls * L
    x_gpu, x_cpu = np.zeros(9), np.zeros(9)
    x_gpu[3], x_cpu[4] = 1.0, 1.0  # attention over a cache on the GPU or on the CPU
    comp_gpu, comp_cpu = t.decode["comp"].at(x_gpu), t.decode["comp"].at(x_cpu)
    comp_g = min(comp_gpu, comp_cpu)
    off = max(0.0, z.total_weight_bytes + kv_home - cap_g)  # home bytes that cannot be on the GPU
    mixed = 0.0
    if t.cpu_attention:
        # off-GPU weights upload (ctog); off-GPU KV is attended on the CPU (comp): either way at
        # least the cheaper per-byte cost, and at least the weights that cannot fit must upload
        ctog_lb = max(0.0, z.total_weight_bytes - cap_g) * up_w
        per_kv = max(0.0, comp_cpu - comp_gpu) / kv_home if kv_home > 0 else up_w
        mixed = comp_g + off * min(up_w, per_kv)
    else:
        up_kv = t.decode["ctog"].coef[4] / kv_home if kv_home > 0 else up_w
        ctog_lb = off * min(up_w, up_kv)
    ctx_share = (s + n / 2) / (s + n)
    disk_bytes = max(0.0, home - cap_g - cap_c)
    dtoc_lb = disk_bytes / L * ctx_share * (t.decode["dtoc"].coef[2] / max(z.weight_bytes, 1.0))
    comp_p = t.prefill["comp"].const
    if t.overlap is Overlap.SERIAL_LOAD:
        pre, dec = max(comp_p, ctog_lb), max(ctog_lb + max(comp_g, dtoc_lb), mixed)
    else:
        pre, dec = max(comp_p, ctog_lb), max(comp_g, ctog_lb, dtoc_lb)
    return float(pre * L + dec * (n - 1) * L)


def _candidates(model: ModelSpec, gpu: DeviceSpec, host: HostSpec, *, s: int, n: int,
                modes: list[tuple[bool, bool]], overlap: Overlap, gpu_batch_sizes: tuple[int, ...],
                num_gpu_batches: tuple[int, ...], max_latency_s: float | None) -> list[_Candidate]:
    out: list[_Candidate] = []
    for comp, cpu_att in modes:
        sizes = layer_sizes(model, compress=comp)
        disk_flags = (False,) if comp or host.disk_bytes <= 0 else (False, True)
        for gbs in gpu_batch_sizes:
            gpu_fits = True
            for ngb in num_gpu_batches:
                t = cost_terms(model, gpu, host, input_len=s, output_len=n, gpu_batch_size=gbs,
                               num_gpu_batches=ngb, compress=comp, cpu_attention=cpu_att,
                               overlap=overlap, sizes=sizes)
                # GPU floor (nothing resident): grows with gbs, so larger gbs cannot fit either
                if any(t.memory[k].at(_X_MIN_GPU) > t.capacity[k] for k in ("gpu_prefill", "gpu_decode")):
                    gpu_fits = False
                    break
                any_fit = False
                for disk in disk_flags:
                    lb = _latency_bound(t, disk)
                    if lb is None:
                        continue
                    any_fit = True
                    if max_latency_s is not None and lb > max_latency_s:
                        continue
                    out.append(_Candidate(t, disk, lb, t.block_size * n / lb))
                if not any_fit:
                    break  # larger blocks need more memory
            if not gpu_fits:
                break
    return out


def _weight_options(terms: CostTerms, x: np.ndarray) -> list[np.ndarray]:
    """Nominal weight percentages near the relaxed ``x`` whose per-tensor allocation
    (:func:`weight_allocation`) puts on the GPU the largest share not above ``x``'s and the smallest
    share not below it; the disk share stays as relaxed (floored to whole percent)."""
    wd = math.floor(x[2] * 100 + 1e-6)
    want = x[1] + x[2]  # share off the GPU
    below = above = None  # (share off the GPU, nominal off-GPU percent)
    for t in range(wd, 101):
        off = _share_below(terms.sizes, t)  # tensors with midpoints below wd + wc leave the GPU
        closer = abs(t / 100 - want)  # ties in allocated share go to the nominal percent nearest the relaxed one
        if off <= want + 1e-9 and (below is None or off > below[0] + 1e-12
                                   or (abs(off - below[0]) <= 1e-12 and closer < abs(below[1] / 100 - want))):
            below = (off, t)
        if off >= want - 1e-9 and (above is None or off < above[0] - 1e-12
                                   or (abs(off - above[0]) <= 1e-12 and closer < abs(above[1] / 100 - want))):
            above = (off, t)
    out: list[np.ndarray] = []
    for opt in (below, above):
        if opt is None:
            continue
        xv = np.array(x, dtype=float)
        xv[0:3] = (1 - opt[1] / 100, (opt[1] - wd) / 100, wd / 100)
        if not any(np.allclose(xv, o) for o in out):
            out.append(xv)
    return out


def _tidy_weights(terms: CostTerms, xr: np.ndarray) -> np.ndarray:
    """The whole-percent weight split closest to what the runtime allocates for ``xr`` among those
    it allocates identically (a nominal 12/47/41 and 0/50/50 both give OPT-175B's 0/50/50). The
    disk set depends only on ``wd`` and the off-GPU set only on ``wd + wc``, so each is chosen alone."""
    z = terms.sizes
    if not z.weight_tensor_groups:
        return xr
    g, c, d = weight_allocation(z, float(xr[2]), float(xr[1]))
    below = [_share_below(z, t) for t in range(101)]  # bytes share with midpoint below t percent
    wd = min((t for t in range(101) if abs(below[t] - d) <= 1e-9), key=lambda t: abs(t / 100 - d), default=None)
    off = min((t for t in range(101) if abs(below[t] - (c + d)) <= 1e-9 and t >= (wd or 0)),
              key=lambda t: abs(t / 100 - c - d), default=None)
    if wd is None or off is None:
        return xr
    out = np.array(xr, dtype=float)
    out[0:3] = (1 - off / 100, (off - wd) / 100, wd / 100)
    return out


@lru_cache(maxsize=65536)
def _share_below(sizes: LayerSizes, percent: int) -> float:
    """Share of a layer's weight bytes whose tensors' size midpoints lie below ``percent``."""
    return 1.0 - weight_allocation(sizes, 0.0, percent / 100)[0]


def _nominal_kv(terms: CostTerms, xr: np.ndarray) -> np.ndarray:
    """Write a whole-sequence KV split as whole percent that the runtime allocates the same way
    (``1/12`` becomes 9%: FlexGen rounds the share down, so 8.33% would give no sequence)."""
    if terms.compress:
        return xr
    b = terms.gpu_batch_size
    target = tuple(xr[3:6])
    out = np.array(xr, dtype=float)
    pg = math.ceil(xr[3] * 100 - 1e-6)
    pc = math.ceil(xr[4] * 100 - 1e-6) if xr[5] > 1e-9 else 100 - pg
    if 0 <= pg and 0 <= pc and pg + pc <= 100:
        out[3:6] = (pg / 100, pc / 100, (100 - pg - pc) / 100)
        if np.allclose(kv_allocation(b, False, *out[3:6]), target, atol=1e-9):
            return out
    return xr


def _solve_candidate(c: _Candidate, max_latency_s: float | None, beat_latency_s: float | None = None,
                     lps: list[int] | None = None) -> tuple[np.ndarray, np.ndarray, Any] | None:
    """Relaxed LP, then the best policy FlexGen's runtime can run near it.

    The KV cache and the activations are rounded down or up to what the runtime allocates (whole
    sequences, one tier: :func:`runtime_roundings`) and the weights re-optimized by the LP with those
    fixed; the weights are then written as whole percent whose per-tensor allocation lies just
    below or above the relaxed share, and everything is priced as allocated. Returns the nominal
    policy fractions, their allocation and the relaxed solution; None if the relaxed block latency
    is not below ``beat_latency_s`` (the LP is a relaxation, so no rounding can beat it then).
    ``lps[0]`` counts the LPs solved.
    """
    count = lps if lps is not None else [0]
    count[0] += 1
    sol = solve(build_lp(c.terms, max_latency_s=max_latency_s, allow_disk=c.allow_disk))
    if beat_latency_s is not None and sol.latency_s >= beat_latency_s:
        return None
    kv_step = kv_split_step(c.terms)
    def alloc(v: np.ndarray) -> np.ndarray:
        return runtime_allocation(c.terms, v)

    best: tuple[float, np.ndarray, np.ndarray] | None = None
    for fixed in runtime_roundings(c.terms, sol.x):
        try:
            if fixed:
                count[0] += 1
            x0 = sol.x if not fixed else solve(build_lp(
                c.terms, max_latency_s=max_latency_s, allow_disk=c.allow_disk, fixed=fixed)).x
        except InfeasibleError:
            continue
        for xw in _weight_options(c.terms, x0):
            try:
                xr = round_placement(c.terms, xw, kv_step=kv_step, whole_activations=True, allocate=alloc)
            except InfeasibleError:
                continue
            xr = _nominal_kv(c.terms, xr)
            xa = alloc(xr)
            lat = sum(c.terms.block_latency(xa))
            if max_latency_s is not None and lat > max_latency_s * (1 + 1e-9):
                continue
            if best is None or lat < best[0]:
                best = (lat, xr, xa)
    if best is None:
        raise InfeasibleError("no rounded placement that FlexGen's runtime can allocate fits")
    return best[1], best[2], sol


def _infeasible_message(model: ModelSpec, gpu: DeviceSpec, host: HostSpec, s: int, n: int,
                        modes: list[tuple[bool, bool]], max_latency_s: float | None,
                        overlap: Overlap) -> str:
    if max_latency_s is not None:
        return (f"no policy for {model.name!r} on {gpu.name} + {host.name!r} finishes a block of "
                f"{s}+{n} tokens within --max-latency {max_latency_s:g} s")
    cap_g, cap_c, cap_d = host.gpu_capacity_bytes(gpu), host.cpu_capacity_bytes(), host.disk_capacity_bytes()
    parts = []
    for comp in sorted({c for c, _ in modes}):
        w, kv, act, total = _min_need(model, s, n, compress=comp)
        t = cost_terms(model, gpu, host, input_len=s, output_len=n, gpu_batch_size=1,
                       num_gpu_batches=1, compress=comp, cpu_attention=not comp, overlap=overlap)
        floor = max(t.memory[k].at(_X_MIN_GPU) for k in ("gpu_prefill", "gpu_decode"))
        usable = cap_g + cap_c + (0.0 if comp else cap_d)
        parts.append(
            f"{'4-bit' if comp else 'FP16'}: one sequence needs {total:.4g} bytes (weights {w:.4g}, "
            f"KV cache {kv:.4g}, activations {act:.4g}) of GPU {cap_g:.4g} + CPU {cap_c:.4g}"
            + (" bytes (compressed tensors stay off the disk)" if comp else f" + disk {cap_d:.4g} bytes")
            + f" = {usable:.4g}; the GPU working set alone needs {floor:.4g} of {cap_g:.4g} bytes"
        )
    return f"model {model.name!r} does not fit on {gpu.name} + host {host.name!r}: " + "; ".join(parts)


# ------------------------------------------------------------------------------------- skeleton
@dataclass(slots=True)
class _Search:
    """What :func:`plan_offload` and :func:`offload_frontier` share: resolved specs, the batch
    shapes to solve (:func:`_candidates`) and the counts reported under ``search``."""

    model: ModelSpec
    gpu: DeviceSpec
    host: HostSpec
    input_len: int
    output_len: int
    modes: list[tuple[bool, bool]]
    overlap: Overlap
    candidates: list[_Candidate]
    t0: float
    solved: int = 0
    lps: list[int] = field(default_factory=lambda: [0])

    def solve(self, c: _Candidate, max_latency_s: float | None,
              beat_latency_s: float | None) -> tuple[np.ndarray, np.ndarray, Any] | None:
        """:func:`_solve_candidate`, counted; None when nothing runnable beats ``beat_latency_s``."""
        self.solved += 1
        try:
            return _solve_candidate(c, max_latency_s, beat_latency_s, self.lps)
        except InfeasibleError:
            return None

    def stats(self) -> dict[str, Any]:
        return {"candidates": len(self.candidates), "shapes_solved": self.solved, "lps_solved": self.lps[0],
                "seconds": time.perf_counter() - self.t0}

    def infeasible(self, max_latency_s: float | None) -> InfeasibleError:
        return InfeasibleError(_infeasible_message(self.model, self.gpu, self.host, self.input_len, self.output_len,
                                                   self.modes, max_latency_s, self.overlap))

    def plan(self, c: _Candidate, xr: np.ndarray, xa: np.ndarray, **extra: Any) -> OffloadPlan:
        """The plan of an allocated placement, its policy written with tidy weight percentages."""
        return _plan_from(c.terms, xa, model=self.model, gpu=self.gpu, host=self.host,
                          policy=_policy_from(c.terms, _tidy_weights(c.terms, xr)), **extra)


def _start_search(model: str | ModelSpec, gpu: str | DeviceSpec | None, host: str | HostSpec, *,
                  input_len: int, output_len: int, compress: bool | None, cpu_attention: bool | None,
                  overlap: Overlap, gpu_batch_sizes: tuple[int, ...], num_gpu_batches: tuple[int, ...],
                  memory_headroom: float | None, max_latency_s: float | None) -> _Search:
    _check_lengths(input_len, output_len)
    t0 = time.perf_counter()
    m, g, h = _resolve(model, gpu, host, memory_headroom)
    modes = _modes(compress, cpu_attention)
    cands = _candidates(m, g, h, s=input_len, n=output_len, modes=modes, overlap=overlap,
                        gpu_batch_sizes=gpu_batch_sizes, num_gpu_batches=num_gpu_batches,
                        max_latency_s=max_latency_s)
    return _Search(model=m, gpu=g, host=h, input_len=input_len, output_len=output_len, modes=modes,
                   overlap=overlap, candidates=cands, t0=t0)


@dataclass(slots=True)
class _BestByDisk:
    """Best plan found with and without disk. A disk plan is chosen only when its throughput beats
    the best disk-free plan's by :data:`DISK_MARGIN`, so each class has its own bar to beat."""

    plans: dict[bool, tuple[float, _Candidate, np.ndarray, np.ndarray, Any] | None] = field(
        default_factory=lambda: {False: None, True: None})

    def rate(self, disk: bool) -> float:
        b = self.plans[disk]
        return b[0] if b is not None else 0.0

    def disk_wins(self) -> bool:
        return self.rate(True) > self.rate(False) * (1 + DISK_MARGIN)

    def to_beat(self, disk: bool) -> float:
        """Throughput a candidate of the class must exceed to change the answer."""
        if disk:
            return max(self.rate(True), self.rate(False) * (1 + DISK_MARGIN))
        return max(self.rate(False), self.rate(True) / (1 + DISK_MARGIN))

    def chosen(self) -> tuple[float, _Candidate, np.ndarray, np.ndarray, Any] | None:
        if self.plans[False] is not None and (self.plans[True] is None or not self.disk_wins()):
            return self.plans[False]
        return self.plans[True]


def plan_offload(
    model: str | ModelSpec,
    *,
    gpu: str | DeviceSpec | None = None,
    host: str | HostSpec = "flexgen-t4",
    input_len: int = 512,
    output_len: int = 32,
    compress: bool | None = None,
    cpu_attention: bool | None = None,
    max_latency_s: float | None = None,
    overlap: Overlap = Overlap.SERIAL_LOAD,
    gpu_batch_sizes: tuple[int, ...] = GPU_BATCH_SIZES,
    num_gpu_batches: tuple[int, ...] = NUM_GPU_BATCHES,
    memory_headroom: float | None = None,
) -> OffloadPlan:
    """The highest-throughput FlexGen policy for ``model`` (two-level search of Section 4.3).

    Parameters
    ----------
    compress, cpu_attention:
        ``None`` searches both settings (CPU attention only without compression); a bool fixes it.
    max_latency_s:
        Upper bound on the block latency (seconds), added to the LP as a linear constraint.
    memory_headroom:
        Fraction of every tier's capacity to keep free (default: the host's, 0 for the bundled
        hosts), for runtimes whose real peak exceeds the model's (fragmentation, extra buffers).

    Raises
    ------
    InfeasibleError
        No policy fits GPU + CPU + disk (the message gives the bytes needed and available per tier)
        or meets ``max_latency_s``.
    SpecError
        ``max_latency_s`` is not a positive number (``inf`` reads as no bound).
    """
    if max_latency_s is not None:
        max_latency_s = check_number("max_latency_s", max_latency_s, low=0, low_open=True, unit="s", allow_inf=True)
        if math.isinf(max_latency_s):
            max_latency_s = None  # no bound: the LP takes finite constraints only
    run = _start_search(model, gpu, host, input_len=input_len, output_len=output_len, compress=compress,
                        cpu_attention=cpu_attention, overlap=overlap, gpu_batch_sizes=gpu_batch_sizes,
                        num_gpu_batches=num_gpu_batches, memory_headroom=memory_headroom,
                        max_latency_s=max_latency_s)
    run.candidates.sort(key=lambda c: -c.throughput_ub)
    best = _BestByDisk()
    for c in run.candidates:
        threshold = best.to_beat(c.allow_disk)
        if c.throughput_ub <= threshold:
            if c.throughput_ub <= min(best.to_beat(True), best.to_beat(False)):
                break  # sorted by bound: nothing left can matter for either class
            continue
        got = run.solve(c, max_latency_s, c.terms.block_size * output_len / threshold if threshold > 0 else None)
        if got is None:
            continue
        xr, xa, sol = got
        tp = c.terms.block_size * output_len / sum(c.terms.block_latency(xa))
        uses_disk = bool(xa[2] > 0 or xa[5] > 0 or xa[8] > 0)  # classify by the allocated plan
        if tp > best.rate(uses_disk):
            best.plans[uses_disk] = (tp, c, xr, xa, sol)
    chosen = best.chosen()
    if chosen is None:
        raise run.infeasible(max_latency_s)
    _, c, xr, xa, sol = chosen
    relaxed = {
        "placement_percent": {f: float(v * 100) for f, v in zip(PLACEMENT_FIELDS, sol.x, strict=True)},
        "latency_s": sol.latency_s,
        "throughput_tokens_per_s": c.terms.block_size * output_len / sol.latency_s,
    }
    return run.plan(c, xr, xa, relaxed=relaxed, search=run.stats())


def offload_frontier(
    model: str | ModelSpec,
    *,
    gpu: str | DeviceSpec | None = None,
    host: str | HostSpec = "flexgen-t4",
    input_len: int = 512,
    output_len: int = 32,
    compress: bool | None = None,
    cpu_attention: bool | None = None,
    overlap: Overlap = Overlap.SERIAL_LOAD,
    gpu_batch_sizes: tuple[int, ...] = GPU_BATCH_SIZES,
    num_gpu_batches: tuple[int, ...] = NUM_GPU_BATCHES,
    memory_headroom: float | None = None,
) -> OffloadFrontier:
    """Latency-throughput frontier (FlexGen Figure 1, Tables 19-20): for every batch shape the
    best rounded placement, keeping the plans no other plan beats on both latency and throughput.

    Raises
    ------
    InfeasibleError
        As :func:`plan_offload`.
    """
    run = _start_search(model, gpu, host, input_len=input_len, output_len=output_len, compress=compress,
                        cpu_attention=cpu_attention, overlap=overlap, gpu_batch_sizes=gpu_batch_sizes,
                        num_gpu_batches=num_gpu_batches, memory_headroom=memory_headroom, max_latency_s=None)
    run.candidates.sort(key=lambda c: c.latency_lb)
    found: list[tuple[float, float, _Candidate, np.ndarray, np.ndarray]] = []  # (latency, rate, ...)
    for c in run.candidates:
        # sound pruning: a found plan at most as slow as c can ever be, with at least c's best rate
        if any(lat <= c.latency_lb and tp >= c.throughput_ub for lat, tp, *_ in found):
            continue
        got = run.solve(c, None, None)
        if got is None:
            continue
        xr, xa, _ = got
        lat = sum(c.terms.block_latency(xa))
        found.append((lat, c.terms.block_size * output_len / lat, c, xr, xa))
    if not found:
        raise run.infeasible(None)
    found.sort(key=lambda f: (f[0], -f[1]))
    points, best_tp = [], 0.0
    for _, tp, c, xr, xa in found:
        if tp > best_tp * (1 + 1e-9):
            best_tp = tp
            points.append(run.plan(c, xr, xa))
    return OffloadFrontier(points=tuple(points), search=run.stats())
