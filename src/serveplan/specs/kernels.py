"""Shape-aware kernel efficiency curves of a measured profile.

A constant-factor profile gives every matrix multiply of a phase the same MFU and MBU. Measured
kernels (aiconfigurator's per-kernel tables, Vidur's operator profiles, ``serveplan profile``)
show that the attained fraction of the roofline depends on the shape, so a measured profile
replaces the constants by a few small curves, each a formula with four to six fitted numbers
(never a lookup table):

**GEMM** (``m x k`` activations by a ``k x n`` weight, per weight format)::

    t = t0 + q * m * k / (S_m * e_q)
           + max( W * pad(m) / (S_c * e_c(m, w, p)),  Q / (S_m * e_m) )
    e_c(m, w, p) = c_max * m / (m + m_half) * w / (w + w_half) * p / (p + p_half)   w = n * k
    pad(m)  = ceil(m / T(m)) * T(m) / m,    T(m) = min(tile, 2^ceil(log2 m))   (tile quantization)
    p       = ceil(m / T(m)) * ceil(n / 128)                                    (output tiles)

Small ``m`` is memory bound (weight streaming at ``e_m``); large shapes approach ``c_max``, a
format-specific ceiling; small weights fill few thread blocks (``w_half``); ``t0`` is the
kernel's fixed latency. Three terms come from how the kernels are built:

* *Tile quantization* (Sarathi §4.4): rows are computed in tiles of ``T(m)`` rows, so a partial
  tile costs a whole one. The kernels pick the tile from ``m`` in powers of two up to ``tile``
  (vLLM's CUTLASS FP8 dispatch for Hopper, ``scaled_mm_sm90_fp8_dispatch.cuh``: 64-row tiles up
  to m = 64, 2 x 64 up to 128, then 2 x 128-row clusters; cuBLAS heuristics alike), which is
  why measured times step at m = 129, 257, 513... and stay flat up to the next power of two.
* *Output-tile parallelism*: a GEMM without split-K runs one thread block per ``T(m) x 128``
  output tile, each over the whole ``k``; with few tiles (small ``n``, small ``m``) most SMs idle
  however large ``k`` is. ``p_half`` is the tile count at which half the ceiling is reached
  (0: off). This is what makes a tall, narrow weight (n = 512, k = 16384) slow where ``w`` alone
  says it is large.
* *Activation quantization*: an FP8/FP4 GEMM with bf16 activations first runs a separate
  element-wise pass over the ``m x k`` input (vLLM ``Fp8LinearOp``: ``scaled_fp8_quant``, static
  per-tensor or dynamic per-token-group scales; NVFP4: ``scaled_fp4_quant``) moving
  ``q = 2 + b_a`` bytes per element (bf16 read, ``b_a``-byte write, scales), at its own
  efficiency ``e_q``. It does not overlap the GEMM, so it adds to the time (``q = 0``: none,
  as for bf16).

Without the last two, vLLM's FP8 GEMMs of tall, narrow weights (``n / k < 1/8``) came out 37%
too fast on H100, and the FP8 curve missed its held-out rows by 12-14% (``docs/validation/kernel-curves.md``).

**Attention** (FlashAttention-class prefill and paged decode, per phase and KV format)::

    prefill:  t = t0 + max( W / (S_c * c_max * sat(s, len_half) * sat(d, head_dim_half) * sat(b h_q, parallel_half)
                                * sat(g, group_half)),
                            Q / (S_m * m_max) )
    decode:   t = t0 + max( W / (S_c * c_max),
                            Q / (S_m * m_max * sat(c, len_half) * sat(b h_kv, parallel_half)) )
    sat(x, x_half) = x / (x + x_half)

with ``s`` the prompt length, ``c`` the context of a decode, ``d`` the head dimension and
``b h`` the (sequence, head) pairs the kernel spreads over the SMs: short sequences, small heads
and few (sequence, head) pairs leave tiles and memory pipelines idle; ``g`` the query heads per KV
head, which prefill kernels that pack a head group into one tile turn into fuller tiles
(``group_half``; 0: off). ``W`` and ``Q`` are counted
as ``ops/graph.py`` counts the fused kernel, so a smaller KV format reads fewer bytes and may also
have its own ceilings.

A decode kernel runs one CTA per (sequence, KV head) and per context block, each loading the
``g = h_q / h_kv`` query rows of its head group and writing their outputs, so its fixed time has
two more terms (fitted; 0 when absent)::

    t0 + group_cost * (g d / 4096) * max(1, CTAs / SMs) + dim_cost * 64 / d

the first a per-CTA cost that grows with the head group's size and with the waves of CTAs over
the device's SMs (``sm_count``, datasheet), the second the floor of small heads (TensorRT-LLM's
XQA at one sequence and a short context, H100: 7.8-9.4 us at ``d = 64`` against 5.6-7.0 us at
``d = 128``). TensorRT-LLM's XQA kernel splits a long context over several CTAs
(``multi_block_tokens``, :meth:`AttentionCurve.blocks`): the length each CTA streams is then
``c / blocks`` and the CTAs ``b h_kv blocks``. Which kernel runs depends on ``g``
(``kernelUtils.cpp``: XQA for 2 to 32, the masked MHA kernel otherwise), so TensorRT-LLM's
profiles hold one decode curve per regime, keyed ``decode/<kv>/g=<lo>-<hi>``
(:meth:`KernelCurves.attention_curve`). The other engines' decode curves are split by the same
regimes (their kernels change with ``g`` too), and a context split is chosen per curve among
XQA's and FlashInfer-like ones (``calibrate/kernel_fit.py`` ``fit_split_or_not``).

Two more decode terms come from the measurements. The CTA saturation may be sharper than
``x / (x + x_half)``: ``sat_p(x) = x / (x^n + x_half^n)^(1/n)`` with a fitted ``n`` in [1, 8]
(``parallel_power``; large ``n`` is ``min(1, x / x_half)``: CTAs that each stream at a fixed rate
until the DRAM rate binds). And a kernel table repeats each call on the same KV, so a KV of at
most the L2 size (``cache_bytes``, the device's ``l2_cache_bytes``) streams from L2 at
``cache_gain`` times the DRAM rate (L40S, 96 MiB of L2 over 864 GB/s of GDDR6: ~1.6 TB/s at
64 MiB, 615 GB/s at 128 MiB). That regime is fitted so that it does not bend the DRAM one, and
priced only for kernel tables (``warm=True``): in a forward pass the other layers' weights and KV
pass through L2 between two calls of one layer.

**Collectives** (NCCL, per operation and rank count, on the link the table was measured on)::

    t = latency + (f(op, g) * bytes + sqrt(f(op, g) * bytes * ramp_bytes)) / bus_bandwidth
    f = 2(g-1)/g (all-reduce), (g-1)/g (all-gather, reduce-scatter, all-to-all), 1 (send/recv)

the bus-bandwidth convention of nccl-tests (``PERFORMANCE.md``). The square-root term is the
pipeline fill of a ring (chunks in flight grow with the message): without it, the latency plus
bandwidth form misses NCCL's 1-64 MiB range by 13-23% on H100; with it, by 1-4% (held out,
``docs/validation/kernel-curves.md``). ``ramp_bytes`` is the size at which the fill equals the transfer.
Rank counts between measured ones take the nearest measured count's bandwidth and latency.

**Fused MoE** (per weight format): the routed experts of one MoE layer as the engine's fused kernel
runs them (token permutation, the gate-up and down grouped GEMMs with their activation, the
un-permutation and weighting), timed as one operator. Its curve has the GEMM form above with
``m`` the routed rows through the device's experts (``tokens x top-k``, divided by EP), ``n`` one
expert's three projections (``3 x inter`` per device) and ``k`` the hidden size; ``W`` and ``Q``
are the experts' work and traffic as ``ops/graph.py`` counts them (active experts' weights, routed
activations), and the activation pass ``q m k`` is a cost per routed element (permutation and
quantization of the expanded rows). Taking ``m`` per expert instead (``n`` over all experts) missed
the held-out rows by more (B200 NVFP4 25.5% against 19.3%). TensorRT-LLM's CUTLASS MoE on B200
reaches about 6% of the NVFP4 peak at thousands of tokens (aiconfigurator's ``moe_perf`` tables),
where its dense GEMMs reach over half: a dense GEMM curve does not describe it.

**Launch**: ``eager_launch_s`` is the host cost of one eager operator launch; ``graph_step_s`` the
fixed cost of one replayed CUDA graph step.

Every fitted number carries its relative standard deviation (``sd``), and the curves the
source, fit date and number of points they were fitted on (:class:`Provenance`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from serveplan.errors import SpecError
from serveplan.units import DType

#: Collective operations with a curve, and their bus-bandwidth factor ``f(op, g)``.
COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")


#: Weight formats whose GEMMs a curve of another key describes (same kernels' arithmetic).
GEMM_CURVE_KEY = {"nvfp4": "fp4", "mxfp4": "fp4", "fp16": "bf16"}


def gemm_peak_flops(hardware: Any, fmt: str) -> float:
    """The peak a GEMM curve of format ``fmt`` is a fraction of: the datasheet's dense peak of the
    format; ``fp4`` (NVFP4/MXFP4) where the datasheet file lists none is twice the fp8 peak
    (Blackwell datasheets: FP4 dense = 2x FP8 dense). Fit and estimator both use this. A fused-MoE
    backend's key (``mxfp4@marlin``) takes its format's peak."""
    fmt = fmt.split("@", 1)[0]
    if GEMM_CURVE_KEY.get(fmt, fmt) == "fp4":
        fp4 = next((v for d, v in hardware.peak_flops.items() if d.value == "fp4"), None)
        return float(fp4) if fp4 else 2.0 * hardware.flops(DType.FP8)
    return float(hardware.flops(DType.parse(fmt)))


def attention_peak_flops(hardware: Any, kv_fmt: str) -> float:
    """The peak an attention curve of KV format ``kv_fmt`` is a fraction of. With an FP8 KV cache
    the engines quantize the query and run both products on FP8 tensor cores: vLLM's
    FlashAttention-3 backend quantizes the query with the KV scales (``q_descale``), its FlashInfer
    backend on Blackwell runs TensorRT-LLM's FP8 kernels, TensorRT-LLM runs FP8 context FMHA, SGLang
    FA3 the same as vLLM. So the FP8 dense peak, where the datasheet lists one (else BF16);
    otherwise the BF16 peak. Fit and estimator both use this; where a fitted ceiling is inside its
    bound the choice only rescales it (Blackwell's FP8-KV prefill ceiling was at the bound against
    BF16)."""
    if kv_fmt == "fp8" and DType.FP8 in hardware.peak_flops:
        return float(hardware.flops(DType.FP8))
    return float(hardware.flops(DType.BF16))


def bus_factor(op: str, ranks: int) -> float:
    """Bytes each rank moves per payload byte (nccl-tests PERFORMANCE.md bus bandwidth)."""
    if op == "all_reduce":
        return 2.0 * (ranks - 1) / ranks
    if op == "send_recv":
        return 1.0
    return (ranks - 1) / ranks


@dataclass(frozen=True, slots=True, kw_only=True)
class Provenance:
    """Where a curve's numbers come from."""

    source: str
    fit_date: str
    points: int
    held_out_median: float | None = None  # median |relative error| on rows not used in the fit

    def to_dict(self, parent: Provenance | None = None) -> dict[str, Any]:
        """Fields as written; source and fit date are left out where they are the parent's."""
        d: dict[str, Any] = {}
        if parent is None or self.source != parent.source:
            d["source"] = self.source
        if parent is None or self.fit_date != parent.fit_date:
            d["fit_date"] = self.fit_date
        d["points"] = self.points
        if self.held_out_median is not None:
            d["held_out_median"] = round(self.held_out_median, 4)
        return d


def _check_positive(obj: Any, names: tuple[str, ...], where: str) -> None:
    for n in names:
        v = getattr(obj, n)
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
            raise SpecError(f"{where}: {n}={v!r} must be a finite number >= 0")


#: Output-tile width along ``n`` of the GEMM kernels the curves describe (CUTLASS/cuBLAS Hopper
#: and Ampere tensor-core kernels: 128 columns per thread block).
GEMM_TILE_COLS = 128

#: TensorRT-LLM XQA's multi-block split aims at this many waves of CTAs at most
#: (``decoderXQAConstants.h`` ``kTargetWaveFactor = 8``).
XQA_TARGET_WAVES = 8.0


@dataclass(frozen=True, slots=True, kw_only=True)
class GemmCurve:
    """Efficiency of one weight format's GEMMs (see the module docstring)."""

    overhead_s: float
    compute_max: float
    rows_half: float
    weight_half: float
    memory: float
    tile_rows: int = 1
    tiles_half: float = 0.0          # output tiles at half the ceiling (0: no parallelism term)
    quant_bytes: float = 0.0         # bytes per activation element of the quantization pass (0: none)
    quant_memory: float = 1.0        # its fraction of the memory bandwidth
    #: fused-MoE curves: the row terms (``m_half``, tile padding, output tiles) count each active
    #: expert's rows, ``m / e_act``, not the routed rows of the layer (:meth:`terms`)
    per_expert: bool = False
    sd: Mapping[str, float] = field(default_factory=dict)
    provenance: Provenance | None = None

    def __post_init__(self) -> None:
        _check_positive(self, ("overhead_s", "rows_half", "weight_half", "tiles_half", "quant_bytes"), "gemm curve")
        for n in ("compute_max", "memory", "quant_memory"):
            v = getattr(self, n)
            if not 0 < v <= 1.5:  # measured ceilings can exceed the datasheet slightly (boost clocks)
                raise SpecError(f"gemm curve: {n}={v!r} must be in (0, 1.5]")

    def with_fused_input(self, floor_s: float) -> GemmCurve:
        """This curve inside an engine that quantizes the GEMM's input in the kernel before it
        (fused RMSNorm/all-reduce + FP8 quantization): no separate quantization pass, and a per-call
        latency no larger than ``floor_s``, the floor of a single GEMM kernel measured under CUDA
        graphs on the same GPU. A table that timed the layer's ``forward`` on an unquantized input
        (aiconfigurator's TensorRT-LLM collector, ``collector/trtllm/collect_gemm.py``) holds both the
        quantization kernel and its launch in every row; the engine runs neither."""
        if not self.quant_bytes:
            return self
        return dataclasses.replace(self, quant_bytes=0.0, overhead_s=min(self.overhead_s, floor_s))

    def terms(self, m: Any, n: Any, k: Any, flops: Any, nbytes: Any, peak_flops: float,
              bandwidth: float, experts: Any = None) -> tuple[Any, Any, Any]:
        """``(fixed, compute, memory)`` seconds of ``m`` rows by a ``k x n`` weight doing
        ``flops``/``nbytes``: the time is ``fixed + max(compute, memory)``, ``fixed`` being the
        kernel latency and the activation-quantization pass.

        ``experts``: local experts of a fused-MoE layer (``m`` its routed rows). A
        :attr:`per_expert` curve runs each active expert as its own GEMM of ``m / e_act`` rows, as
        the fused kernels do: vLLM's and SGLang's Triton ``fused_moe`` pad each expert's rows to the
        block size (``moe_align_block_size``), CUTLASS and DeepGEMM grouped GEMMs tile each group
        apart. So a layer whose routed rows are many but spread thin over the experts (1,024 tokens,
        top-4 of 128 experts: 32 rows each) computes at the efficiency of 32-row GEMMs, and the
        output tiles are the active experts' together. ``e_act = E (1 - (1 - 1/E)^m)``, the experts
        that ``m`` rows drawn uniformly over ``E`` experts reach (close to the
        ``E (1 - (1 - k/E)^tokens)`` experts whose weights the estimator counts as read, which draws
        the ``k`` experts of a token without repeats)."""
        m = np.maximum(m, 1.0)
        groups: Any = 1.0
        if self.per_expert and experts is not None:
            e = np.maximum(experts, 1.0)
            groups = np.maximum(-e * np.expm1(m * np.log1p(-np.minimum(1.0 / e, 1.0 - 1e-12))), 1.0)
        rows = m / groups
        e_c = self.compute_max * rows / (rows + self.rows_half)
        w = n * k
        e_c = e_c * w / (w + self.weight_half)
        if self.tile_rows > 1 or self.tiles_half > 0:
            tile = np.minimum(float(max(self.tile_rows, 1)), np.exp2(np.ceil(np.log2(np.maximum(rows, 1.0)))))
            row_tiles = np.ceil(rows / tile)
            if self.tile_rows > 1:
                e_c = e_c * rows / (row_tiles * tile)
            if self.tiles_half > 0:
                p = groups * row_tiles * np.ceil(n / GEMM_TILE_COLS)
                e_c = e_c * p / (p + self.tiles_half)
        fixed = self.overhead_s + (self.quant_bytes * m * k / (bandwidth * self.quant_memory) if self.quant_bytes
                                   else 0.0)
        return fixed, flops / (peak_flops * e_c), nbytes / (bandwidth * self.memory)

    def time(self, m: Any, n: Any, k: Any, flops: Any, nbytes: Any, peak_flops: float, bandwidth: float,
             experts: Any = None) -> Any:
        """Seconds for ``m`` rows by a ``k x n`` weight doing ``flops``/``nbytes`` (``experts``:
        :meth:`terms`)."""
        fixed, comp, mem = self.terms(m, n, k, flops, nbytes, peak_flops, bandwidth, experts)
        return fixed + np.maximum(comp, mem)


@dataclass(frozen=True, slots=True, kw_only=True)
class AttentionCurve:
    """Efficiency of one phase's attention kernel for one KV format (module docstring)."""

    overhead_s: float
    compute_max: float
    memory_max: float
    len_half: float
    head_dim_half: float = 0.0
    parallel_half: float = 0.0
    group_half: float = 0.0          # prefill: query heads per KV head at half the ceiling (0: off)
    # decode only (0: off): the per-CTA floors and TensorRT-LLM XQA's multi-block split
    group_cost_s: float = 0.0        # per wave of CTAs, per 4096 (query heads per KV head x head dim)
    dim_cost_s: float = 0.0          # x 64 / head_dim
    sm_count: int = 0                # SMs one wave of CTAs fills (datasheet; 0: every kernel one wave)
    multi_block_tokens: int = 0      # XQA: history tokens per CTA before the context is split (0: no split)
    parallel_power: float = 1.0      # decode: sharpness of the CTA saturation (1: ctas / (ctas + parallel_half))
    split_waves: float = XQA_TARGET_WAVES   # decode split: waves of the SMs the CTAs may fill
    cache_bytes: float = 0.0         # decode: KV bytes a repeated kernel finds in L2 (datasheet L2 size; 0: none)
    cache_gain: float = 1.0          # decode: bandwidth multiple of such an L2-resident KV (kernel tables only)
    sd: Mapping[str, float] = field(default_factory=dict)
    provenance: Provenance | None = None

    def __post_init__(self) -> None:
        _check_positive(self, ("overhead_s", "len_half", "head_dim_half", "parallel_half", "group_half", "group_cost_s",
                               "dim_cost_s", "sm_count", "multi_block_tokens", "cache_bytes"), "attention curve")
        if not 1.0 <= self.parallel_power <= 8.0:
            raise SpecError(f"attention curve: parallel_power={self.parallel_power!r} must be in [1, 8]")
        if not 0 < self.split_waves <= 64:
            raise SpecError(f"attention curve: split_waves={self.split_waves!r} must be in (0, 64]")
        if not 1.0 <= self.cache_gain <= 20.0:
            raise SpecError(f"attention curve: cache_gain={self.cache_gain!r} must be in [1, 20] "
                            "(L2 over DRAM bandwidth)")
        for n in ("compute_max", "memory_max"):
            v = getattr(self, n)
            if not 0 < v <= 1.5:
                raise SpecError(f"attention curve: {n}={v!r} must be in (0, 1.5]")
        if self.multi_block_tokens and not self.sm_count:
            raise SpecError("attention curve: multi_block_tokens needs sm_count (the SMs the split fills)")

    def blocks(self, length: Any, pairs: Any) -> Any:
        """CTAs per (sequence, KV head) of a decode kernel: 1 without a multi-block split, else
        TensorRT-LLM XQA's rule (``decoderXQAImplJIT``/``xqaDispatcher`` ``computeMultiBlockCount``:
        ``history / kMinHistoryTokensPerBlock``, scaled down when the CTAs would exceed
        ``kTargetWaveFactor`` = 8 waves of the SMs, at most one per SM)."""
        if not self.multi_block_tokens:
            return 1.0
        mb = np.maximum(np.floor(length / self.multi_block_tokens), 1.0)
        adj = pairs * mb / (self.sm_count * self.split_waves)
        mb = np.where(adj > 1.0, np.maximum(np.floor(mb / np.maximum(adj, 1.0)), 1.0), mb)
        return np.minimum(mb, float(self.sm_count))

    def terms(self, phase: str, length: Any, pairs: Any, head_dim: Any, group: Any, flops: Any, nbytes: Any,
              peak_flops: float, bandwidth: float, *, warm: bool = False) -> tuple[Any, Any, Any]:
        """``(fixed, compute, memory)`` seconds of a kernel whose sequences have ``length`` tokens
        (prompt or context) over ``pairs`` (sequence, head) pairs (query heads in prefill, KV heads
        in decode), ``group`` query heads per KV head: the time is ``fixed + max(compute, memory)``.
        ``warm``: the kernel runs again and again on the same KV, as a kernel benchmark times it, so
        a decode's KV of at most ``cache_bytes`` streams from L2 at ``cache_gain`` times the DRAM
        rate; in a forward pass the other layers' weights and KV pass through L2 between two calls
        of one layer, so serving prices the DRAM rate (the default)."""
        if phase == "prefill":
            with np.errstate(divide="ignore", invalid="ignore"):
                sat = length / (length + self.len_half) * pairs / (pairs + self.parallel_half)
                sat = sat * head_dim / (head_dim + self.head_dim_half)
                if self.group_half:
                    sat = sat * group / (group + self.group_half)
                return (self.overhead_s, flops / (peak_flops * self.compute_max * sat),
                        nbytes / (bandwidth * self.memory_max))
        with np.errstate(divide="ignore", invalid="ignore"):
            mb = self.blocks(length, pairs)
            ctas = pairs * mb
            n = self.parallel_power
            par = (ctas / (ctas + self.parallel_half) if n == 1.0
                   else ctas / (ctas ** n + self.parallel_half ** n) ** (1 / n))
            sat = (length / mb) / (length / mb + self.len_half) * par
            fixed: Any = self.overhead_s
            if self.group_cost_s:
                waves = np.maximum(ctas / self.sm_count, 1.0) if self.sm_count else 1.0
                fixed = fixed + self.group_cost_s * group * head_dim / 4096.0 * waves
            if self.dim_cost_s:
                fixed = fixed + self.dim_cost_s * 64.0 / np.maximum(head_dim, 1.0)
            bw = bandwidth * self.memory_max * sat
            if warm and self.cache_bytes:
                bw = np.where(np.asarray(nbytes) <= self.cache_bytes, bw * self.cache_gain, bw)
            return fixed, flops / (peak_flops * self.compute_max), nbytes / bw

    def decode_terms(self, length: float, pairs: float, head_dim: float, group: float, flops: float,
                     nbytes: float, peak_flops: float, bandwidth: float) -> tuple[float, float, float]:
        """:meth:`terms` of one decode kernel (``phase="decode"``, not ``warm``) on plain floats, the
        same operations in the same order: a step of a serving run times one such kernel per layer
        group, and a dozen numpy calls on one-element arrays cost several times these float ones.
        The powers of a ``parallel_power`` other than 1 are numpy's scalar ones, as :meth:`terms` takes
        them on the scalar ``length`` and ``pairs`` a single step passes, so the values equal
        :meth:`terms`' bit for bit on such a step (``tests/estimator/test_curve_scalar.py``).
        ``length`` and ``pairs`` must be positive."""
        mb = 1.0
        if self.multi_block_tokens:
            # :meth:`blocks`, one value
            mb = max(float(math.floor(length / self.multi_block_tokens)), 1.0)
            adj = pairs * mb / (self.sm_count * self.split_waves)
            if adj > 1.0:
                mb = max(float(math.floor(mb / max(adj, 1.0))), 1.0)
            mb = min(mb, float(self.sm_count))
        ctas = pairs * mb
        n = self.parallel_power
        if n == 1.0:
            par = ctas / (ctas + self.parallel_half)
        else:
            par = ctas / float((np.float64(ctas) ** n + self.parallel_half ** n) ** (1 / n))
        sat = (length / mb) / (length / mb + self.len_half) * par
        fixed = self.overhead_s
        if self.group_cost_s:
            waves = max(ctas / self.sm_count, 1.0) if self.sm_count else 1.0
            fixed = fixed + self.group_cost_s * group * head_dim / 4096.0 * waves
        if self.dim_cost_s:
            fixed = fixed + self.dim_cost_s * 64.0 / max(head_dim, 1.0)
        bw = bandwidth * self.memory_max * sat
        return fixed, flops / (peak_flops * self.compute_max), nbytes / bw

    def time(self, phase: str, length: Any, pairs: Any, head_dim: Any, flops: Any, nbytes: Any,
             peak_flops: float, bandwidth: float, group: Any = 1.0, *, warm: bool = False) -> Any:
        """Seconds of a kernel (:meth:`terms`)."""
        fixed, comp, mem = self.terms(phase, length, pairs, head_dim, group, flops, nbytes, peak_flops, bandwidth,
                                      warm=warm)
        return fixed + np.maximum(comp, mem)


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectiveCurve:
    """One collective at one rank count: ``latency + f * bytes / bus_bandwidth``."""

    latency_s: float
    bus_bandwidth: float
    ramp_bytes: float = 0.0
    link: str = ""
    sd: Mapping[str, float] = field(default_factory=dict)
    provenance: Provenance | None = None

    def __post_init__(self) -> None:
        _check_positive(self, ("latency_s", "ramp_bytes"), "collective curve")
        if not self.bus_bandwidth > 0:
            raise SpecError(f"collective curve: bus_bandwidth={self.bus_bandwidth!r} must be > 0 bytes/s")

    def time(self, op: str, ranks: int, nbytes: Any) -> Any:
        x = bus_factor(op, ranks) * np.asarray(nbytes, dtype=float)
        return self.latency_s + (x + np.sqrt(x * self.ramp_bytes)) / self.bus_bandwidth


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelCurves:
    """All curves of a measured profile.

    ``gemm`` is keyed by weight format (``bf16``, ``fp8``, ``fp4``...), ``attention`` by
    ``"<phase>/<kv format>"`` (``prefill/bf16``, ``decode/fp8``), ``collectives`` by operation
    and then rank count.
    """

    gemm: Mapping[str, GemmCurve] = field(default_factory=dict)
    attention: Mapping[str, AttentionCurve] = field(default_factory=dict)
    collectives: Mapping[str, Mapping[int, CollectiveCurve]] = field(default_factory=dict)
    moe: Mapping[str, GemmCurve] = field(default_factory=dict)   # fused MoE kernel, by weight format
    #: routed experts of a decode step behind DeepEP's low-latency dispatch on one expert-parallel rank
    #: (DeepGEMM's masked grouped GEMM), by weight format
    moe_deepep: Mapping[str, GemmCurve] = field(default_factory=dict)
    eager_launch_s: float | None = None
    graph_step_s: float | None = None
    launch_provenance: str = ""
    source: str = ""      # of every curve without its own
    fit_date: str = ""

    def gemm_curve(self, dtype: str) -> GemmCurve | None:
        """Curve of a weight format; fp16 uses bf16's, NVFP4/MXFP4 fp4's, block-scaled fp8 fp8's.
        Weight-only formats (w4a16, w8a16, int4) compute at 16 bits through other kernels: none."""
        for key in (dtype, GEMM_CURVE_KEY.get(dtype, ""), {"bf16": "fp16", "fp8_block": "fp8"}.get(dtype, "")):
            if key in self.gemm:
                return self.gemm[key]
        return None

    def moe_curve(self, dtype: str, *, deepep: bool = False) -> GemmCurve | None:
        """Fused-MoE curve of a weight format (``nvfp4`` and ``fp4`` stand for each other, ``fp16`` for
        ``bf16``); no fallback across precisions: another format runs other kernels. ``deepep``: the
        experts of a decode step run behind DeepEP's low-latency dispatch (DeepGEMM's masked grouped
        GEMM), whose own curve is taken where the profile has one for the format, else the fused-MoE
        curve."""
        alias = {"nvfp4": "fp4", "fp4": "nvfp4", "fp16": "bf16"}.get(dtype, "")
        for table in ((self.moe_deepep, self.moe) if deepep else (self.moe,)):
            for key in (dtype, alias):
                if key in table:
                    return table[key]
        return None

    def attention_curve(self, phase: str, kv_dtype: str, group: float | None = None,
                        head_dim: float | None = None) -> AttentionCurve | None:
        """Curve of a phase and KV format; with ``head_dim``, the curve of the kernel instantiated
        for that head size (keys ``<phase>/<kv>/d=<n>``) where there is one; with ``group`` (query
        heads per KV head), the curve of the kernel regime that covers it (keys
        ``<phase>/<kv>/g=<lo>-<hi>``) where there is one; else the phase's curve."""
        for kv in (kv_dtype, "fp16" if kv_dtype == "bf16" else "bf16" if kv_dtype == "fp16" else "", "bf16"):
            if head_dim:
                by_dim = self.attention.get(head_dim_key(phase, kv, head_dim))
                if by_dim is not None:
                    return by_dim
            if group is not None:
                for key, regime in self.attention.items():
                    parts = key.split("/")
                    if len(parts) == 3 and parts[:2] == [phase, kv]:
                        lo, hi = group_range(parts[2]) or (0.0, 0.0)
                        if lo <= group <= hi:
                            return regime
            default = self.attention.get(f"{phase}/{kv}")
            if default is not None:
                return default
        return None

    def collective_curve(self, op: str, ranks: int) -> CollectiveCurve | None:
        """The curve measured at ``ranks``, else at the nearest measured rank count."""
        by_g = self.collectives.get(op) or (self.collectives.get("all_reduce") if op != "send_recv" else None)
        if not by_g:
            return None
        g = min(by_g, key=lambda r: (abs(math.log(r) - math.log(max(ranks, 2))), r))
        return by_g[g]

    def to_dict(self) -> dict[str, Any]:
        parent = Provenance(source=self.source, fit_date=self.fit_date, points=0)

        def one(c: Any) -> dict[str, Any]:
            # fields at their default (terms a curve does not use) are left out
            d = {f.name: _round(getattr(c, f.name)) for f in fields(c) if f.name not in ("sd", "provenance")
                 and (f.default is dataclasses.MISSING or getattr(c, f.name) != f.default)}
            if c.sd:
                d["sd"] = {k: float(f"{float(v):.2g}") for k, v in c.sd.items()}
            if c.provenance is not None:
                d["provenance"] = c.provenance.to_dict(parent)
            return d

        out: dict[str, Any] = {}
        if self.source:
            out["source"] = self.source
        if self.fit_date:
            out["fit_date"] = self.fit_date
        if self.gemm:
            out["gemm"] = {k: one(v) for k, v in self.gemm.items()}
        if self.attention:
            out["attention"] = {k: one(v) for k, v in self.attention.items()}
        if self.collectives:
            out["collectives"] = {op: {int(g): one(c) for g, c in by.items()} for op, by in self.collectives.items()}
        if self.moe:
            out["moe"] = {k: one(v) for k, v in self.moe.items()}
        if self.moe_deepep:
            out["moe_deepep"] = {k: one(v) for k, v in self.moe_deepep.items()}
        launch: dict[str, Any] = {}
        if self.eager_launch_s is not None:
            launch["eager_launch_s"] = _round(self.eager_launch_s)
        if self.graph_step_s is not None:
            launch["graph_step_s"] = _round(self.graph_step_s)
        if launch:
            launch["source"] = self.launch_provenance
            out["launch"] = launch
        return out


def group_range(tag: str) -> tuple[float, float] | None:
    """``(lo, hi)`` of a regime tag ``g=<lo>-<hi>`` (``g=33-``: 33 and up; ``g=1``: exactly 1)."""
    if not tag.startswith("g="):
        return None
    lo_s, sep, hi_s = tag[2:].partition("-")
    try:
        lo = float(int(lo_s))
        hi = float(int(hi_s)) if hi_s else (math.inf if sep else lo)
    except ValueError:
        return None
    return (lo, hi) if 0 < lo <= hi else None


def head_dim_key(phase: str, kv: str, head_dim: float) -> str:
    """Key of a curve fitted to one head size (attention kernels are instantiated per head
    dimension: FlashAttention's ``hdim`` templates, TensorRT-LLM's FMHA cubins per head size)."""
    return f"{phase}/{kv}/d={int(round(head_dim))}"


def _is_head_dim_tag(tag: str) -> bool:
    return tag.startswith("d=") and tag[2:].isdigit() and int(tag[2:]) > 0


def regime_key(phase: str, kv: str, lo: int, hi: int | None) -> str:
    """Key of a regime curve (:func:`group_range`)."""
    return f"{phase}/{kv}/g={lo}" + ("" if hi == lo else f"-{hi}" if hi is not None else "-")


def _round(v: Any) -> Any:
    return float(f"{v:.4g}") if isinstance(v, float) else v


def _prov(raw: Any, where: str, parent: tuple[str, str]) -> Provenance | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping) or not (raw.get("source") or parent[0]):
        raise SpecError(f"{where}.provenance must map source (or the kernels' source), fit_date and points")
    try:
        return Provenance(source=str(raw.get("source") or parent[0]), fit_date=str(raw.get("fit_date") or parent[1]),
                          points=int(raw.get("points", 0)),
                          held_out_median=float(raw["held_out_median"]) if raw.get("held_out_median") is not None
                          else None)
    except (TypeError, ValueError):
        raise SpecError(f"{where}.provenance: points must be an integer, held_out_median a number") from None


_INT_FIELDS = ("tile_rows", "sm_count", "multi_block_tokens")
_BOOL_FIELDS = ("per_expert",)


def _build(cls: Any, raw: Any, where: str, parent: tuple[str, str] = ("", "")) -> Any:
    if not isinstance(raw, Mapping):
        raise SpecError(f"{where} must be a mapping of fitted values")
    names = {f.name for f in fields(cls)} - {"sd", "provenance"}
    unknown = set(raw) - names - {"sd", "provenance"}
    if unknown:
        raise SpecError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}; expected: {', '.join(sorted(names))}")
    try:
        if any(not isinstance(raw[k], bool) for k in _BOOL_FIELDS if k in raw):
            raise TypeError
        kw = {k: (str(v) if k == "link" else int(v) if k in _INT_FIELDS else v if k in _BOOL_FIELDS else float(v))
              for k, v in raw.items() if k in names}
        sd = {str(k): float(v) for k, v in (raw.get("sd") or {}).items()}
    except (TypeError, ValueError):
        raise SpecError(f"{where}: fitted values must be numbers, got {dict(raw)!r}") from None
    try:
        return cls(**kw, sd=sd, provenance=_prov(raw.get("provenance"), where, parent))
    except TypeError as exc:
        raise SpecError(f"{where}: {exc}") from None
    except SpecError as exc:
        raise SpecError(f"{where}: {exc}") from None


def kernel_curves_from_dict(raw: Any, where: str = "kernels") -> KernelCurves | None:
    """Build the curves from a profile's ``kernels:`` section (inverse of ``to_dict``)."""
    if not raw:
        return None
    if not isinstance(raw, Mapping):
        raise SpecError(f"{where} must map gemm, attention, collectives and launch to curves")
    unknown = set(raw) - {"gemm", "attention", "collectives", "moe", "moe_deepep", "launch", "source", "fit_date"}
    if unknown:
        raise SpecError(f"{where}: unknown section(s) {', '.join(sorted(unknown))}; "
                        f"expected: source, fit_date, gemm, attention, collectives, moe, moe_deepep, launch")
    parent = (str(raw.get("source", "")), str(raw.get("fit_date", "")))
    gemm = {str(k): _build(GemmCurve, v, f"{where}.gemm.{k}", parent) for k, v in (raw.get("gemm") or {}).items()}
    moe = {str(k): _build(GemmCurve, v, f"{where}.moe.{k}", parent) for k, v in (raw.get("moe") or {}).items()}
    moe_deepep = {str(k): _build(GemmCurve, v, f"{where}.moe_deepep.{k}", parent)
                  for k, v in (raw.get("moe_deepep") or {}).items()}
    attn = {}
    for k, v in (raw.get("attention") or {}).items():
        parts = str(k).split("/")
        if parts[0] not in ("prefill", "decode") or len(parts) not in (2, 3) or (
                len(parts) == 3 and group_range(parts[2]) is None and not _is_head_dim_tag(parts[2])):
            raise SpecError(f"{where}.attention key {k!r}; expected '<prefill|decode>/<kv format>', "
                            f"'<prefill|decode>/<kv format>/g=<lo>-<hi>' (query heads per KV head, hi optional) "
                            f"or '<prefill|decode>/<kv format>/d=<head dim>'")
        attn[str(k)] = _build(AttentionCurve, v, f"{where}.attention.{k}", parent)
    coll: dict[str, dict[int, CollectiveCurve]] = {}
    for op, by in (raw.get("collectives") or {}).items():
        if op not in COLLECTIVE_OPS:
            raise SpecError(f"{where}.collectives: operation {op!r}; expected one of: {', '.join(COLLECTIVE_OPS)}")
        if not isinstance(by, Mapping):
            raise SpecError(f"{where}.collectives.{op} must map rank counts to curves")
        coll[str(op)] = {int(g): _build(CollectiveCurve, c, f"{where}.collectives.{op}.{g}", parent)
                         for g, c in by.items()}
    launch = raw.get("launch") or {}
    try:
        eager = float(launch["eager_launch_s"]) if launch.get("eager_launch_s") is not None else None
        graph = float(launch["graph_step_s"]) if launch.get("graph_step_s") is not None else None
    except (TypeError, ValueError):
        raise SpecError(f"{where}.launch: eager_launch_s and graph_step_s must be seconds") from None
    return KernelCurves(gemm=gemm, attention=attn, collectives=coll, moe=moe, moe_deepep=moe_deepep,
                        eager_launch_s=eager, graph_step_s=graph,
                        launch_provenance=str(launch.get("source", "")), source=parent[0], fit_date=parent[1])
