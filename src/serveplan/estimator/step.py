"""Step estimate: adapted roofline per operator, Algorithm 1 overlap, communication, memory.

:class:`Estimator` compiles the model's operator lists (:mod:`serveplan.ops.graph`) once into
coefficient matrices, so one step estimate is a few small matrix products; the same code runs on
a matrix of many batches (``step_times``) for the simulator's decode stretches. The timing
arithmetic below lives in :mod:`serveplan.estimator.roofline` (shared with calibration):

* Per operator (BestServe eq. 3/5): ``time = max(W / (e_c S_c), Q / (e_m S_m))``; the decode
  data movements of eq. (12) use their ``kappa`` rates instead (``Q / kappa``).
* Per layer (BestServe Algorithm 1, with L17 read as after the loop): the host dispatches module
  after module; the device starts a module when it is dispatched and the previous one finished,
  ``T_c = max(T_d, T_c) + compute``, then adds the module's communication. Step time = layer time
  times layers, summed over layer kinds (``T = ell * T_compute`` after the loop).
* Communication: eq. (8) ``values/t / (e_+ S_+)``, or a ring/alpha-beta collective on the link
  the group uses (profile ``comm_model``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from serveplan.errors import InfeasibleError, SpecError
from serveplan.estimator.batch import StepBatch
from serveplan.estimator.overlap import two_batch_group_time, two_batch_layers_time
from serveplan.estimator.roofline import (
    CompiledStep,
    CurveRates,
    DecodeRows,
    OpFamily,
    PhaseRates,
    SizeCurve,
    SplitStep,
    block_terms,
    compile_step,
    decode_block_terms,
    decode_rows,
    dispatch_times,
    fixed_terms,
    group_matrix,
    kept_op_times,
    layers_time,
    layers_time_floats,
    op_terms,
    phase_rates,
    split_step,
    step_block_terms,
    tile_quantized_rows,
    tile_quantized_rows_array,
    varying_features,
)
from serveplan.ops.base import FEATURE_INDEX, FEATURES, Collective, LayerGroup, Rate
from serveplan.ops.graph import build_layer_groups
from serveplan.ops.window import decode_features, window_features
from serveplan.specs.comm import CommOptions, Overlap, deepep_buffer_bytes
from serveplan.specs.hardware import DeviceSpec
from serveplan.specs.kernels import attention_peak_flops, gemm_peak_flops
from serveplan.specs.model import AttentionKind, LayerType, ModelSpec
from serveplan.specs.parallel import ParallelConfig
from serveplan.specs.profile import AttentionImpl, EfficiencyProfile, Phase
from serveplan.units import DType, ceil_div

#: Fraction of device memory the engine may use (vLLM's ``gpu_memory_utilization`` default 0.9).
DEFAULT_MEMORY_UTILIZATION = 0.9

_NF = len(FEATURES)
_CACHE_SIZE = 1 << 16  # memoised step times per estimator
_FIXED_CACHE_SIZE = 1 << 12  # memoised fixed parts of step columns per estimator (about 1 kB each)


@dataclass(frozen=True, slots=True)
class _SumsStep:
    """A step :meth:`Estimator.time_of_sums` times from its decode context sum alone: its feature
    vector with that sum at 0, the busiest rank's decode share, its rates and decode-attention rows,
    every operator's time (the decode-attention ones are recomputed) and the blocks' collective
    times."""

    xs: list[float]
    fd: float
    rates: PhaseRates
    rows: DecodeRows
    t_op: np.ndarray
    bm: list[float]
_I = FEATURE_INDEX
_N, _NP = FEATURE_INDEX["n"], FEATURE_INDEX["np"]
_NDX, _ADX = FEATURE_INDEX["ndx"], FEATURE_INDEX["adx"]
_KVD = FEATURE_INDEX["kvd"]


@dataclass(frozen=True, slots=True)
class OpTiming:
    """One operator of one layer (per device): work, traffic and roofline terms."""

    group: str
    module: str
    name: str
    flops: float
    bytes: float
    compute_s: float
    memory_s: float
    time_s: float
    bound: str  # "compute", "memory" or the kappa rate name
    source: str


@dataclass(frozen=True, slots=True)
class ModuleTiming:
    """One module of one layer (per device), repeated ``count`` times in the step."""

    group: str
    name: str
    count: int
    dispatch_s: float
    compute_s: float
    comm_s: float


@dataclass(frozen=True, slots=True)
class MemoryEstimate:
    """Per-device memory of one instance.

    ``kv_bytes_per_token`` is per device (whole model divided as the layout stores it);
    ``kv_capacity_tokens`` is for the whole instance (all data-parallel ranks);
    ``comm_buffer_bytes`` are the registered all-to-all buffers of an expert-parallel device
    (:func:`~serveplan.specs.comm.deepep_buffer_bytes`), taken from the KV cache's share.
    """

    weights_bytes: float
    kv_bytes_per_token: float
    activation_bytes: float
    device_memory_bytes: float
    memory_utilization: float
    kv_capacity_tokens: int
    model_kv_bytes_per_token: float
    total_weights_bytes: float
    comm_buffer_bytes: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "weights_bytes": self.weights_bytes,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "activation_bytes": self.activation_bytes,
            "device_memory_bytes": self.device_memory_bytes,
            "memory_utilization": self.memory_utilization,
            "kv_capacity_tokens": self.kv_capacity_tokens,
            "model_kv_bytes_per_token": self.model_kv_bytes_per_token,
            "total_weights_bytes": self.total_weights_bytes,
            "comm_buffer_bytes": self.comm_buffer_bytes,
        }


@dataclass(frozen=True, slots=True)
class StepEstimate:
    """Time of one step of one instance, with its breakdown."""

    total_s: float
    phase: Phase
    modules: tuple[ModuleTiming, ...]
    ops: tuple[OpTiming, ...]
    memory: MemoryEstimate
    pp_comm_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "total_s": self.total_s,
            "phase": self.phase.value,
            "pp_comm_s": self.pp_comm_s,
            "modules": [
                {"group": m.group, "name": m.name, "count": m.count, "dispatch_s": m.dispatch_s,
                 "compute_s": m.compute_s, "comm_s": m.comm_s}
                for m in self.modules
            ],
            "ops": [
                {"group": o.group, "module": o.module, "name": o.name, "flops": o.flops, "bytes": o.bytes,
                 "compute_s": o.compute_s, "memory_s": o.memory_s, "time_s": o.time_s, "bound": o.bound}
                for o in self.ops
            ],
            "memory": self.memory.to_dict(),
        }


def _busiest_share(seqs: float, dp: int) -> float:
    """``ceil(seqs / dp) / seqs``: the share of ``seqs`` whole sequences the busiest of ``dp``
    ranks runs (``1 / dp`` without sequences, so zero totals stay zero)."""
    if seqs <= 0:
        return 1.0 / dp
    return math.ceil(seqs / dp - 1e-9) / seqs


def profile_rates(compiled: CompiledStep, profile: EfficiencyProfile, phase: Phase, *, peak_flops: float,
                  bandwidth: float, curves: CurveRates | None, compute_cap: float = 1.0) -> PhaseRates:
    """Rates of one phase from a profile: family factors (GEMMs and streaming kernels share the
    phase's MFU/MBU, attention may have its own), ``kappa`` rates, size curve, dispatch times
    (none in decode under CUDA graphs) and the measured curves. ``compute_cap``: the largest share
    of ``peak_flops`` matrix work may reach (the device's measured sustained FLOP/s over its peak,
    :meth:`~serveplan.specs.hardware.DeviceSpec.sustained_share`): the GEMM and attention factors
    are capped at it."""
    eff = profile.efficiency(phase)
    if compute_cap < 1.0:
        eff = dataclasses.replace(eff, compute=min(eff.compute, compute_cap),
                                  attention_compute=min(eff.attn_compute, compute_cap))
    hidden = phase is Phase.DECODE and profile.dispatch_hidden_in_decode
    curve = profile.matmul_size_curve.get(phase.value)
    return phase_rates(
        compiled,
        efficiency={OpFamily.MATMUL: (eff.compute, eff.memory), OpFamily.STREAM: (eff.compute, eff.memory),
                    OpFamily.ATTENTION: (eff.attn_compute, eff.attn_memory)},
        comm=eff.comm, peak_flops=peak_flops, bandwidth=bandwidth,
        kappas=(profile.kappa_update, profile.kappa_repeat_kv, profile.kappa_upcast),
        size_curve=SizeCurve.from_points(*curve) if curve is not None else None,
        dispatch=dispatch_times(compiled, lambda kind: 0.0 if hidden else profile.dispatch(kind, phase)),
        curves=curves,
    )


def resolve_curves(compiled: CompiledStep, profile: EfficiencyProfile, hardware: DeviceSpec, *, dtype: DType,
                   kv_dtype: DType, moe_dims: tuple[float, float, float] | None = None,
                   deepep: bool = False) -> CurveRates | None:
    """The profile's measured curves for these formats, or ``None`` for a constant-factor profile.
    Collective curves stand for groups inside the scale-up domain they were measured in.
    ``moe_dims``: (expert intermediate size per device, hidden size, routed experts per device) of
    a MoE model; ``deepep``: its
    experts run behind DeepEP's dispatch (the profile's DeepEP expert curve where it has one)."""
    if profile.kernels is None:
        return None
    return CurveRates.resolve(compiled, profile.kernels, dtype=dtype.value, kv_dtype=kv_dtype.value,
                              peak_flops=gemm_peak_flops(hardware, dtype.value),
                              attention_peak_flops=attention_peak_flops(hardware, kv_dtype.value),
                              bandwidth=hardware.memory_bandwidth,
                              max_ranks=hardware.domain_size, moe_dims=moe_dims, deepep=deepep)


def scale_up_latencies(profile: EfficiencyProfile, hardware: DeviceSpec) -> dict[Collective, float] | None:
    """Measured start-up latency of the scale-up tier by collective: the profile's NCCL curve at
    the largest rank count measured inside the domain (reused, not refitted), for the scale-up
    hop of collectives that span several domains; ``None`` without measured curves."""
    k = profile.kernels
    if k is None:
        return None
    out = {}
    for kind, op in ((Collective.ALL_TO_ALL, "all_to_all"), (Collective.ALL_REDUCE, "all_reduce")):
        curve = k.collective_curve(op, hardware.domain_size)
        if curve is not None:
            out[kind] = curve.latency_s
    return out or None


class Estimator:
    """Step-time oracle for one (model, hardware, profile, parallel layout, dtype).

    Parameters
    ----------
    model, hardware, profile, parallel:
        The specs; ``parallel`` is validated against the model.
    dtype:
        Weight format (default: the model's ``torch_dtype``).
    kv_dtype:
        KV-cache format, separate from the weights (default: ``dtype`` for 16/32-bit weights,
        else bf16, as vLLM's ``kv_cache_dtype="auto"`` keeps the activations' format). It sets the
        cache's bytes per token (capacity) and the bytes attention reads from the cache.
    comm:
        How the engine runs expert-parallel communication (:class:`CommOptions`: two-batch
        overlap, FP8 dispatch, node-deduplicated dispatch); default the profile's
        (``EfficiencyProfile.comm``), else none of them.

    Examples
    --------
    >>> from serveplan import Estimator, get_model, get_hardware, get_profile, ParallelConfig, StepBatch
    >>> est = Estimator(get_model("llama-2-7b"), get_hardware("a100-80g"), get_profile(), ParallelConfig(tp=1))
    >>> est.estimate(StepBatch.prefill(1, 512)).total_s > 0
    True
    """

    def __init__(self, model: ModelSpec, hardware: DeviceSpec, profile: EfficiencyProfile,
                 parallel: ParallelConfig | None = None, *, dtype: DType | str | None = None,
                 kv_dtype: DType | str | None = None,
                 memory_utilization: float = DEFAULT_MEMORY_UTILIZATION, comm: CommOptions | None = None) -> None:
        parallel = parallel or ParallelConfig()
        parallel.validate_for(model)
        self.model, self.hardware, self.profile, self.parallel = model, hardware, profile, parallel
        self.dtype = DType.parse(dtype) if dtype is not None else model.dtype
        if kv_dtype is not None:
            self.kv_dtype = DType.parse_kv(kv_dtype)
        else:
            self.kv_dtype = model.default_kv_dtype(self.dtype)
        top = max(1.0, hardware.engine_memory_bytes / hardware.memory_bytes)  # up to what the driver reports
        if not 0 < memory_utilization <= top:
            raise SpecError(f"memory_utilization={memory_utilization} must be in (0, {top:.4g}] (the share of "
                            f"{hardware.memory_bytes / 1e9:.0f} GB the driver reports)" if top > 1 else
                            f"memory_utilization={memory_utilization} must be in (0, 1]")
        self.memory_utilization = memory_utilization
        self.peak_flops = hardware.flops(self.dtype)
        self.tile = hardware.tile_size if profile.tile_quantization else 0
        self.groups: tuple[LayerGroup, ...] = build_layer_groups(
            model, parallel, dtype=self.dtype, kv_dtype=self.kv_dtype,
            attention_impl=profile.attention_impl, include_lm_head=profile.include_lm_head,
            expert_imbalance=profile.expert_imbalance, comm=comm or profile.comm,
            fused_operators=profile.fused_operators,
        )
        self.comm = comm or profile.comm or CommOptions()
        fused_gqa = (profile.kernels is not None and profile.attention_impl is AttentionImpl.FUSED
                     and model.attention is not AttentionKind.MLA)
        heads = ((model.num_attention_heads / parallel.tp, max(model.num_key_value_heads / parallel.tp, 1.0),
                  float(model.head_dim)) if fused_gqa else None)
        self.compiled = compile_step(self.groups, hardware, profile.comm_model, attention_heads=heads,
                                     scale_up_latency=scale_up_latencies(profile, hardware))
        moe_dims = ((model.moe_intermediate_size / parallel.expert_tp, float(model.hidden_size),
                     (model.num_experts + parallel.redundant_experts) / parallel.ep) if model.is_moe else None)
        self._curves = resolve_curves(self.compiled, profile, hardware, dtype=self.dtype, kv_dtype=self.kv_dtype,
                                      moe_dims=moe_dims)
        # DeepEP over more than one expert-parallel rank: decode steps run the experts as DeepGEMM's
        # masked grouped GEMM on the low-latency layout (the profile's DeepEP expert curve where it
        # has one); prefill steps keep the fused-MoE curve
        # (resolved again only where the profile has a DeepEP curve of its own for the format)
        k = profile.kernels
        deepep = (self.comm.runs_deepep and parallel.ep > 1 and model.is_moe and k is not None
                  and k.moe_curve(self.dtype.value, deepep=True) is not k.moe_curve(self.dtype.value))
        self._decode_curves = (resolve_curves(self.compiled, profile, hardware, dtype=self.dtype,
                                              kv_dtype=self.kv_dtype, moe_dims=moe_dims, deepep=True)
                               if deepep else self._curves)
        self._local_window = model.local_window   # read per step (_attention_rows): a property of the layer kinds
        # keyed by str: a Phase is a str with the same hash, and callers may pass "decode"
        self._rates: dict[str, PhaseRates] = {ph: self._phase_rates(ph) for ph in Phase}
        # the hot paths pick a phase by a comparison, not by hashing the enum
        self._prefill_rates, self._decode_rates = self._rates[Phase.PREFILL], self._rates[Phase.DECODE]
        # steps of up to this many tokens per rank replay a captured graph, larger ones run without
        # (EfficiencyProfile.prefill_graph_tokens; 0: no bound, steps with prompt tokens pay the eager
        # host work and decode steps replay graphs): a small step with prompt tokens pays the profile's
        # own dispatch, a large decode step the eager host work with nothing hidden
        self._graph_tokens = float(profile.prefill_graph_tokens)
        self._graph_prefill_rates, self._eager_decode_rates = self._prefill_rates, self._decode_rates
        if self._graph_tokens:
            graph = self._phase_rates(Phase.PREFILL, profile.with_(prefill_dispatch_s={}))
            if graph.dispatch != self._prefill_rates.dispatch:
                self._graph_prefill_rates = graph
            eager = self._phase_rates(Phase.DECODE, profile.with_(
                dispatch_hidden_in_decode=False, dispatch_s={**profile.dispatch_s, **profile.prefill_dispatch_s}))
            if eager.dispatch != self._decode_rates.dispatch:
                self._eager_decode_rates = eager
        # pipeline: activations of n tokens cross pp-1 stage boundaries (notes A.7, PP row)
        self._ab = 4.0 if self.dtype is DType.FP32 else 2.0
        self._pp_links = self._stage_boundary_links()
        # slowest boundary (least bandwidth, then most latency): it bounds the pipeline's rate
        self._pp_link = min(self._pp_links, key=lambda lk: (lk.bandwidth, -lk.latency_s)) if self._pp_links else None
        self.memory = self._memory()
        m = model  # (attention layers, local ones, their window) for kv_equivalent_tokens
        self._kv_layers = (m.num_attention_layers,
                           m.count_layers(LayerType.SLIDING) + m.count_layers(LayerType.CHUNKED), m.local_window)
        self._cache: dict[StepBatch, float] = {}
        #: :meth:`time_of_sums`: per step aggregates but the decodes' context sum, what its time
        #: needs besides that sum (``None``: the step is timed by the general path)
        self._by_sums: dict[tuple[float, ...], _SumsStep | None] = {}
        #: by (rates, varying features): the split, its varying part summed per layer group,
        #: the features that do not vary
        self._splits: dict[tuple[int, tuple[int, ...]],
                           tuple[SplitStep, tuple[CompiledStep, PhaseRates], np.ndarray]] = {}
        self._fixed: dict[tuple[tuple[int, tuple[int, ...]], bytes], tuple[np.ndarray, ...]] = {}
        self._groups = group_matrix(self.compiled)
        self._counts = np.array(self.compiled.counts)

    def _rates_of(self, x: np.ndarray) -> PhaseRates:
        """Rates of the step with feature vector ``x``: its phase's (prefill with prompt tokens,
        else decode), for a step small enough to replay a captured graph or too large for one."""
        small, large = self._graph_pair(Phase.PREFILL if x[_NP] > 0 else Phase.DECODE)
        return large if self._graph_tokens and x[_N] > self._graph_tokens else small

    def _graph_pair(self, phase: Phase | str) -> tuple[PhaseRates, PhaseRates]:
        """``(rates of a step that replays a captured graph, of one too large for a graph)`` in ``phase``."""
        if phase == Phase.PREFILL:
            return self._graph_prefill_rates, self._prefill_rates
        return self._decode_rates, self._eager_decode_rates

    def _phase_rates(self, phase: Phase, profile: EfficiencyProfile | None = None) -> PhaseRates:
        return profile_rates(self.compiled, profile or self.profile, phase, peak_flops=self.peak_flops,
                             bandwidth=self.hardware.memory_bandwidth,
                             compute_cap=self.hardware.sustained_share(self.dtype),
                             curves=self._decode_curves if phase is Phase.DECODE else self._curves)

    # ------------------------------------------------------------------ features
    def rank_shares(self, batch: StepBatch) -> tuple[float, float]:
        """Shares of the step's prefill and decode totals the busiest DP-attention rank holds.

        A request is placed whole on one rank (DeepSeek-style DP-attention, SGLang
        ``--enable-dp-attention``: each rank runs attention for its own requests), so with ``s``
        sequences of a phase over ``dp`` ranks the busiest rank runs ``ceil(s / dp)`` of them:
        its share is ``ceil(s / dp) / s`` (``1 / dp`` when they divide evenly; 1 for a lone
        prompt, which is never split over ranks). Sequences of a phase are taken to be of the
        phase's mean size. ``(1, 1)`` without DP-attention.
        """
        dp = self.parallel.dp
        if dp == 1:
            return 1.0, 1.0
        return _busiest_share(batch.prefill_seqs, dp), _busiest_share(batch.decode_tokens, dp)

    def features(self, batch: StepBatch) -> np.ndarray:
        """Feature vector (per data-parallel rank, the busiest one) of a step; see
        :mod:`serveplan.ops.base` and :meth:`rank_shares`."""
        fp, fd = self.rank_shares(batch)
        x = np.zeros(_NF)
        n_all = batch.num_tokens
        n = batch.prefill_tokens * fp + batch.decode_tokens * fd
        x[_I["one"]] = 1.0
        x[_I["n"]] = n
        x[_I["ng"]] = tile_quantized_rows(n, self.tile)
        x[_I["np"]] = batch.prefill_tokens * fp
        x[_I["nd"]] = batch.decode_tokens * fd
        x[_I["sp"]] = batch.prefill_seqs * fp
        x[_I["kvp"]] = batch.prefill_keys * fp
        x[_I["kvd"]] = batch.decode_keys * fd
        x[_I["ap"]] = batch.prefill_scores * fp
        x[_I["apc"]] = batch.prefill_causal_scores * fp
        x[_I["nout"]] = batch.prefill_seqs * fp + batch.decode_tokens * fd
        x[_I["nall"]] = n_all
        x[_I["pon"]] = 1.0 if batch.prefill_tokens > 0 else 0.0
        x[_I["don"]] = 1.0 if batch.decode_tokens > 0 else 0.0
        self._attention_rows(x)
        self._expert_rows(x)
        return x

    def _expert_rows(self, x: np.ndarray) -> None:
        """Expected routed experts with at least one token on one expert device (feature
        ``eact``), from ``nall`` (a vector or the columns of a matrix): under uniform routing
        ``E_dev (1 - (1 - k/E)^nall)`` with ``E_dev = (E + redundant) / ep`` experts a device holds."""
        m = self.model
        if m.is_moe:
            frac = 1.0 - (1.0 - m.num_experts_per_tok / m.num_experts) ** x[_I["nall"]]
            x[_I["eact"]] = self.parallel.experts_per_device(m.num_experts) * frac

    # ------------------------------------------------------------------ timing
    def _layers_time(self, block_compute: Any, block_comm: Any, rates: PhaseRates) -> Any:
        return layers_time(block_compute, block_comm, rates.dispatch, self.compiled.counts)

    @property
    def _two_batch(self) -> bool:
        return self.comm.overlap is Overlap.TWO_BATCH

    def _halve(self, x: np.ndarray) -> np.ndarray:
        """Features of one of two equal micro-batches (a vector, or the columns of a matrix):
        every count halved, the per-step constants kept, tile rows and active experts
        recomputed for the half (they are not linear)."""
        h = x * 0.5
        for f in ("one", "pon", "don"):
            h[_I[f]] = x[_I[f]]
        if self.tile:
            h[_I["ng"]] = (tile_quantized_rows(h[_N], self.tile) if x.ndim == 1
                           else tile_quantized_rows_array(h[_N], self.tile))
        self._expert_rows(h)
        return h

    def _overlapped(self, x: np.ndarray, rates: PhaseRates, plain: Any) -> Any:
        """Two-batch overlap (:mod:`serveplan.estimator.overlap`) of steps with communication
        and at least two tokens per rank to split; other steps keep their ``plain`` time, and so
        do steps where splitting would not pay (a small batch whose doubled weight reads cost
        more than the communication hidden: engines run those unsplit, SGLang's two-batch
        overlap falls back to one batch when it cannot balance the two)."""
        half = self._halve(x)
        if x.ndim == 1:
            *_, bc, bm = op_terms(self.compiled, rates, half)
            if x[_N] < 2 or not np.any(bm):
                return plain
            return min(two_batch_layers_time(bc.tolist(), bm.tolist(), rates.dispatch, self.compiled.counts)[0],
                       plain)
        bc, bm = self._block_terms(half, rates)
        t = two_batch_layers_time(list(bc), list(bm), rates.dispatch, self.compiled.counts)[0]
        return np.where((x[_N] >= 2) & np.any(bm != 0, axis=0), np.minimum(t, plain), plain)

    def overlap_streams(self, batch: StepBatch) -> tuple[float, float, float]:
        """``(step, compute stream, communication stream)`` seconds of ``batch`` under two-batch
        overlap (each stream's busy time over both micro-batches); the step is at least the larger."""
        x = self.features(batch)
        rates = self._rates_of(x)
        *_, bc, bm = op_terms(self.compiled, rates, self._halve(x))
        t, c, m = two_batch_layers_time(bc.tolist(), bm.tolist(), rates.dispatch, self.compiled.counts)
        return float(t), float(c), float(m)

    def _attention_rows(self, x: np.ndarray) -> None:
        """Fill the attention features derived from others, of one feature vector or of the
        columns of a matrix, so callers that vary ``sp``, ``np``, ``kvp``, ``nd``, ``ndx`` or
        ``kvd`` stay consistent: the local-layer features (``kvpw``, ``kvdw``, ``apw``, ``apcw``,
        ``adxw``) and the extra decode score elements of several queries per sequence (``adx``),
        :mod:`serveplan.ops.window`."""
        m = self.model
        multi = bool(x[_NDX].any()) if x.ndim > 1 else bool(x[_NDX] != 0.0)
        if multi:
            x[_ADX], adxw = decode_features(x[_I["nd"]], x[_NDX], x[_I["kvd"]], m.local_window, m.is_chunked)
        if not self._local_window:
            return
        seqs = x[_I["nd"]] - x[_NDX] if multi else x[_I["nd"]]
        x[_I["kvpw"]], x[_I["kvdw"]], x[_I["apw"]], x[_I["apcw"]] = window_features(
            x[_I["sp"]], x[_I["np"]], x[_I["kvp"]], seqs, x[_I["kvd"]], m.local_window, m.is_chunked)
        x[_I["adxw"]] = adxw if multi else 0.0

    def _stage_boundary_links(self) -> list[Any]:
        """Link used at each of the ``pp - 1`` stage boundaries.

        Stages occupy consecutive devices (stage ``s`` holds devices ``s*g .. s*g + g - 1`` with
        ``g = tp * dp``) and device ``i`` of a stage sends to device ``i`` of the next one; a
        boundary uses the inter-node link when any such pair sits on different nodes.
        """
        g, dpn = self.parallel.stage_devices, self.hardware.devices_per_node
        links = []
        for b in range(1, self.parallel.pp):
            crosses = any(((b - 1) * g + i) // dpn != (b * g + i) // dpn for i in range(g))
            # a pair of devices on two nodes is a group that does not fit in one node
            links.append(self.hardware.link_for(dpn + 1 if crosses else 2))
        return links

    def _pp_time(self, x: Any, e_comm: float) -> Any:
        """Send/recv of the activations at every stage boundary (notes A.7, PP row: ``N x d``
        values, unidirectional), alpha-beta on each boundary's link. ``N`` is the token count of
        one data-parallel rank: each rank sends its own tokens to its peer over its own link."""
        if self.parallel.pp == 1:
            return 0.0
        vol = x[_I["n"]] * self.model.hidden_size * self._ab
        active = x[_I["n"]] > 0
        return sum(vol / (e_comm * lk.bandwidth) + lk.latency_s * active for lk in self._pp_links)

    def time_of_sums(self, sums: tuple[float, ...]) -> float:
        """:meth:`step_time` of the step with aggregates ``sums`` (:func:`step_sums`), the same float.

        A serving run meets the same prompt chunks and decode counts again and again with a new
        decode context sum each time; every operator but decode attention is then the same
        (:func:`~serveplan.estimator.roofline.step_block_terms`), so per aggregates but that sum
        this keeps the feature vector, the other operators' times and the blocks' collective times,
        and times a new sum from its decode-attention terms alone (no local-window layers, no
        several queries per sequence, no two-batch overlap, one pipeline stage: else the general
        path)."""
        key = (sums[0], sums[1], sums[2], sums[3], sums[5], sums[6])
        ent = self._by_sums.get(key, False)
        if ent is False:
            batch = StepBatch.from_sums(sums)
            x = self.features(batch)
            t = self.step_time(x)
            if len(self._by_sums) >= _CACHE_SIZE:
                self._by_sums.clear()
            self._by_sums[key] = self._sums_step(x, batch)
            return t
        if ent is None:
            return self.step_time(self.features(StepBatch.from_sums(sums)))
        assert isinstance(ent, _SumsStep)
        xs = ent.xs.copy()
        xs[_KVD] = sums[4] * ent.fd        # features(): x[kvd] = decode_keys * fd
        t_op = ent.t_op.copy()
        bc = decode_block_terms(self.compiled, ent.rates, xs, ent.rows, t_op)
        return float(layers_time_floats(bc, ent.bm, ent.rates.dispatch, self.compiled.counts) + 0.0)

    def _sums_step(self, x: np.ndarray, batch: StepBatch) -> _SumsStep | None:
        """What :meth:`time_of_sums` keeps of the step ``x`` of ``batch`` (after :meth:`step_time`),
        or ``None``."""
        if self._local_window or self._two_batch or self.parallel.pp != 1 or x[_NDX] != 0.0:
            return None
        rates = self._rates_of(x)
        rows = decode_rows(self.compiled, rates.curves) if rates.curves is not None else None
        if rows is None:
            return None
        kept = kept_op_times(self.compiled, rates, x)   # step_time just filled it
        if kept is None:
            *_, t_op, _, bm = op_terms(self.compiled, rates, x)
        else:
            t_op, bm = kept
        xs = x.tolist()
        xs[_KVD] = 0.0
        fd = self.rank_shares(batch)[1]
        return _SumsStep(xs=xs, fd=fd, rates=rates, rows=rows, t_op=t_op, bm=bm.tolist())

    def step_time(self, x: np.ndarray) -> float:
        """Step time (s) of a feature vector: fast path without breakdown."""
        self._attention_rows(x)
        rates = self._rates_of(x)
        cs = self.compiled
        bc, bm = step_block_terms(cs, rates, x)
        total = layers_time_floats(bc.tolist(), bm.tolist(), rates.dispatch, cs.counts)
        if self._two_batch:
            total = self._overlapped(x, rates, total)
        return float(total + self._pp_time(x, rates.comm_efficiency))

    def _block_terms(self, X: np.ndarray, rates: PhaseRates, *, grouped: bool = False,
                     varying: tuple[int, ...] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Per block compute and communication times of the columns of ``X`` (as ``op_terms``):
        the operators that read no feature varying between the columns are timed once
        (a decode table varies in its context sum only, so only attention is timed per column).
        ``grouped``: summed per layer group instead (groups x columns); ``varying``: the features
        that vary between the columns, when the caller knows them (:func:`varying_features`)."""
        if varying is None:
            varying = varying_features(X)
        key = (id(rates), varying)   # the rates are this estimator's own (self._rates, the graph pair): stable ids
        hit = self._splits.get(key)
        if hit is None:
            split = split_step(self.compiled, rates, varying)
            var_step, var_rates = split.varying
            # the varying operators' times summed per layer group rather than per block
            by_group = dataclasses.replace(var_step, S=self._groups @ var_step.S, SC=self._groups @ var_step.SC)
            # the rows not in ``varying``, in order (numpy's setdiff1d would load numpy.ma at start-up)
            skip = set(varying)
            fixed_rows = np.array([i for i in range(X.shape[0]) if i not in skip], dtype=np.int64)
            hit = self._splits[key] = (split, (by_group, var_rates), fixed_rows)
        split, grouped_step, fixed_rows = hit
        # the fixed part reads only the features that do not vary (the same for every table of
        # one batch size): memoised on them, unless nothing varies (a lone column, seldom repeated)
        x0 = X[:, 0]
        fkey = (key, x0[fixed_rows].tobytes())
        fixed = self._fixed.get(fkey) if varying else None
        if fixed is None:
            if len(self._fixed) >= _FIXED_CACHE_SIZE:
                self._fixed.clear()
            x0 = x0.copy()
            x0[list(varying)] = 0.0
            bc0, bm0 = fixed_terms(split, x0)
            G = self._groups
            fixed = (bc0, bm0, G @ bc0, G @ bm0)
            if varying:
                self._fixed[fkey] = fixed
        if not grouped:
            return block_terms(split, X, (fixed[0], fixed[1]))
        *_, gc, gm = op_terms(*grouped_step, X)
        return gc + fixed[2][:, None], gm + fixed[3][:, None]

    def _undispatched_times(self, X: np.ndarray, rates: PhaseRates) -> np.ndarray:
        """``step_times`` where no module waits for its dispatch (decode under CUDA graphs):
        Algorithm 1 then sums a layer's module times, so whole layer groups are summed at once
        (and two-batch overlap applies its rule to the groups' sums, :func:`two_batch_group_time`)."""
        counts = self._counts
        varying = varying_features(X)
        gc, gm = self._block_terms(X, rates, grouped=True, varying=varying)
        total = counts @ (gc + gm)
        if self._two_batch:
            # the half varies where X does, and in the tile rows and active experts it recomputes
            # from n and nall
            derived = {_I["ng"]} if _N in varying else set()
            if _I["nall"] in varying:
                derived.add(_I["eact"])
            hc, hm = self._block_terms(self._halve(X), rates, grouped=True,
                                       varying=tuple(sorted(derived.union(varying))) if derived else varying)
            t = two_batch_group_time(hc, hm, counts)
            total = np.where((X[_N] >= 2) & np.any(hm != 0, axis=0), np.minimum(t, total), total)
        return np.asarray(total)

    def step_times(self, X: np.ndarray, phase: Phase | str = Phase.DECODE) -> np.ndarray:
        """Step times of many feature vectors (columns of ``X``) that share one phase; columns
        small enough to replay a captured graph take its rates, larger ones the eager ones."""
        self._attention_rows(X)
        graph, eager = self._graph_pair(phase)
        if not self._graph_tokens or graph is eager:
            return self._times_at(X, self._rates[phase])
        small = X[_N] <= self._graph_tokens
        if small.all():
            return self._times_at(X, graph)
        if not small.any():
            return self._times_at(X, eager)
        out = np.empty(X.shape[1])
        out[small] = self._times_at(X[:, small], graph)
        out[~small] = self._times_at(X[:, ~small], eager)
        return out

    def _times_at(self, X: np.ndarray, rates: PhaseRates) -> np.ndarray:
        """:meth:`step_times` of columns that all take ``rates``."""
        if not any(d for per_group in rates.dispatch for d in per_group):
            return np.asarray(self._undispatched_times(X, rates) + self._pp_time(X, rates.comm_efficiency))
        bc, bm = self._block_terms(X, rates)
        total = self._layers_time(bc, bm, rates)
        if self._two_batch:
            total = self._overlapped(X, rates, total)
        return np.asarray(total + self._pp_time(X, rates.comm_efficiency))

    def time(self, batch: StepBatch) -> float:
        """Step time (s) of a batch, no breakdown; memoised on the batch (BestServe §3.3.4)."""
        hit = self._cache.get(batch)
        if hit is None:
            if len(self._cache) >= _CACHE_SIZE:
                self._cache.clear()
            hit = self._cache[batch] = self.step_time(self.features(batch))
        return hit

    def stage_time(self, batch: StepBatch) -> float:
        """Time of one pipeline stage (layers split evenly) plus one stage-boundary transfer
        (on the slowest boundary link, which bounds a pipeline's steady-state rate)."""
        x = self.features(batch)
        rates = self._rates_of(x)
        pp = self.parallel.pp
        *_, bc, bm = op_terms(self.compiled, rates, x)
        layers = self._layers_time(bc.tolist(), bm.tolist(), rates)
        if self._two_batch:
            layers = self._overlapped(x, rates, layers)
        layers = layers / pp
        lk = self._pp_link
        if lk is None:
            return float(layers)
        n = x[_N]
        send = n * self.model.hidden_size * self._ab / (rates.comm_efficiency * lk.bandwidth) + lk.latency_s * (n > 0)
        return float(layers + send)

    def estimate(self, batch: StepBatch) -> StepEstimate:
        """Step time with the per-module and per-operator breakdown."""
        return self._estimate(self.features(batch))

    def _estimate(self, x: np.ndarray) -> StepEstimate:
        """:meth:`estimate` of a feature vector."""
        self._attention_rows(x)
        phase = Phase.PREFILL if x[_NP] > 0 else Phase.DECODE
        rates = self._rates_of(x)
        cs = self.compiled
        W, Q, comp, mem, t_op, bc, bm = op_terms(cs, rates, x)
        block_dispatch = [d for per_group in rates.dispatch for d in per_group]
        modules = tuple(
            ModuleTiming(cs.group_names[gi], kind.value, int(cs.counts[gi]), float(block_dispatch[i]),
                         float(bc[i]), float(bm[i]))
            for i, (gi, kind) in enumerate(cs.blocks))
        ops: list[OpTiming] = []
        for oi, (op, blk) in enumerate(zip(cs.ops, cs.op_block, strict=True)):
            gi, kind = cs.blocks[blk]
            bound = ("compute" if comp[oi] >= mem[oi] else "memory") if op.rate is Rate.ROOFLINE else op.rate.value
            ops.append(OpTiming(cs.group_names[gi], kind.value, op.name, float(W[oi]), float(Q[oi]),
                                float(comp[oi]), float(mem[oi]), float(t_op[oi]), bound, op.source))
        total = self._layers_time(bc.tolist(), bm.tolist(), rates)
        if self._two_batch:
            total = self._overlapped(x, rates, total)
        total = float(total)
        pp_s = float(self._pp_time(x, rates.comm_efficiency))
        return StepEstimate(total + pp_s, phase, modules, tuple(ops), self.memory, pp_s)

    # ------------------------------------------------------------------ memory
    def weights_per_device(self) -> float:
        """Weight bytes on the most loaded device (largest pipeline stage)."""
        p = self.parallel
        return self.model.weight_bytes_per_device(self.dtype, tp=p.tp, ep=p.ep, expert_tp=p.expert_tp, pp=p.pp,
                                                  redundant_experts=p.redundant_experts)

    def kv_bytes_per_token_per_device(self) -> float:
        """KV bytes per token on one device of the largest stage (every attention layer, for a
        sequence within its windows)."""
        m = self.model
        return m.kv_bytes_per_token(self.kv_dtype) * self._kv_device_fraction()

    def _kv_device_fraction(self) -> float:
        """Share of the model's KV cache one device holds: its stage's layers, and its KV heads
        (replicated when tp exceeds them; the MLA latent is whole on every TP rank, notes A.5)."""
        m, p = self.model, self.parallel
        frac = ceil_div(m.num_hidden_layers, p.pp) / m.num_hidden_layers
        if m.attention is AttentionKind.MLA:
            return frac
        return frac * max(m.num_key_value_heads / p.tp, 1.0) / m.num_key_value_heads

    def kv_bytes_per_sequence(self, length: int) -> float:
        """Cache bytes one sequence of ``length`` tokens holds on one device: full layers grow
        with it, local layers stop at their window, linear-attention layers hold a fixed state
        (:meth:`ModelSpec.kv_bytes_per_sequence`), divided as the layout stores them."""
        m = self.model
        state_frac = ceil_div(m.num_hidden_layers, self.parallel.pp) / m.num_hidden_layers / self.parallel.tp
        kv = m.kv_bytes_per_sequence(length, self.kv_dtype) - m.kv_bytes_per_sequence(0, self.kv_dtype)
        return kv * self._kv_device_fraction() + m.kv_bytes_per_sequence(0, self.kv_dtype) * state_frac

    @property
    def kv_is_bounded(self) -> bool:
        """Whether some layers' caches stop growing (local windows) or are a fixed state."""
        m = self.model
        return bool(m.local_window) or m.num_attention_layers < m.num_hidden_layers

    def kv_equivalent_tokens(self, length: int) -> float:
        """Full-model tokens the growing part of a ``length``-token sequence's cache is worth:
        ``(full layers * length + local layers * min(length, window)) / attention layers``
        (at most ``length``); the fixed linear-attention state is charged separately
        (:meth:`kv_capacity_tokens`). Chunked layers are charged a whole chunk."""
        n_attn, n_local, window = self._kv_layers
        if n_attn == 0:
            return 0.0
        return ((n_attn - n_local) * length + n_local * min(length, window)) / n_attn

    def kv_equivalent_tokens_fn(self) -> Callable[[int], float]:
        """:meth:`kv_equivalent_tokens` as a closure over its constants (the simulator's KV owner
        calls it for every running sequence of every decode stretch)."""
        n_attn, n_local, window = self._kv_layers
        if n_attn == 0:
            return lambda length: 0.0
        full, local = (n_attn - n_local) / n_attn, n_local / n_attn
        return lambda length: full * length + local * (length if length < window else window)

    def state_bytes_per_sequence(self) -> float:
        """Linear-attention state one sequence holds on one device (0 without such layers)."""
        return self.kv_bytes_per_sequence(0)

    def kv_capacity_tokens(self, max_sequences: int) -> int:
        """KV capacity (full-model tokens, whole instance) once the fixed linear-attention
        states of up to ``max_sequences`` running sequences are set aside; assumed: at most
        half the cache goes to states (vLLM V1 draws attention pages and Mamba-style states
        from one pool, so states of idle slots take no memory; half bounds the reservation
        for large batch limits)."""
        cap = self.memory.kv_capacity_tokens
        state = self.state_bytes_per_sequence()
        if state <= 0 or self.memory.kv_bytes_per_token <= 0:
            return cap
        reserve = min(max_sequences * state / self.memory.kv_bytes_per_token, cap / 2)
        return max(int(cap - reserve), 0)

    def activation_bytes(self, token_budget: int = 2048) -> float:
        """Peak transient activations of a step of ``token_budget`` new tokens (per device):
        the widest live tensors of one layer (input, gate and up outputs, attention output)."""
        m, t = self.model, self.parallel.tp
        ff = (m.moe_intermediate_size * (m.num_experts_per_tok + m.num_shared_experts)
              if m.is_moe else m.intermediate_size)
        n = token_budget / self.parallel.dp
        width = 2 * m.hidden_size + 2 * ff / t + m.q_dim / t + m.vocab_size / t * (4 / self._ab) / max(n, 1)
        return n * width * self._ab

    def comm_buffer_bytes(self) -> float:
        """Registered all-to-all buffers of one expert-parallel device (``comm.buffer``; DeepEP's
        size hints over the physical experts, redundant copies included)."""
        m, p = self.model, self.parallel
        if not m.is_moe:
            return 0.0
        return deepep_buffer_bytes(self.comm, hidden_size=m.hidden_size,
                                   num_experts=m.num_experts + p.redundant_experts, ep=p.ep)

    def _memory(self) -> MemoryEstimate:
        w = self.weights_per_device()
        kv_tok = self.kv_bytes_per_token_per_device()
        act = self.activation_bytes()
        buf = self.comm_buffer_bytes()
        usable = self.hardware.memory_bytes * self.memory_utilization - w - act - buf
        cap = int(max(usable, 0.0) // kv_tok) * self.parallel.dp if kv_tok > 0 else 0
        return MemoryEstimate(
            weights_bytes=w, kv_bytes_per_token=kv_tok, activation_bytes=act,
            device_memory_bytes=self.hardware.memory_bytes, memory_utilization=self.memory_utilization,
            kv_capacity_tokens=cap, model_kv_bytes_per_token=self.model.kv_bytes_per_token(self.kv_dtype),
            total_weights_bytes=self.model.weight_bytes(self.dtype), comm_buffer_bytes=buf,
        )

    def check_fits(self) -> None:
        """Raise :class:`InfeasibleError` when the weights (with activations and communication
        buffers) exceed usable device memory."""
        mem = self.memory
        usable = mem.device_memory_bytes * mem.memory_utilization
        if mem.weights_bytes + mem.activation_bytes + mem.comm_buffer_bytes >= usable:
            buf = f", +{mem.comm_buffer_bytes / 1e9:.1f} GB all-to-all buffers" if mem.comm_buffer_bytes else ""
            raise InfeasibleError(
                f"{self.model.name} ({self.dtype.value}) on {self.hardware.name} with {self.parallel.label()}: "
                f"weights need {mem.weights_bytes / 1e9:.1f} GB per device (+{mem.activation_bytes / 1e9:.1f} GB "
                f"activations{buf}) but only {usable / 1e9:.1f} GB is usable "
                f"({mem.memory_utilization:.0%} of {mem.device_memory_bytes / 1e9:.0f} GB); "
                f"use a larger tp/pp or a smaller dtype"
            )
