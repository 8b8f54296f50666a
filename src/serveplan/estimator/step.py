"""Step estimate: adapted roofline per operator, Algorithm 1 overlap, communication, memory.

:class:`Estimator` compiles the model's operator lists (:mod:`serveplan.ops.graph`) once into
coefficient matrices, so one step estimate is a few small matrix products; the same code runs on
a matrix of many batches (``step_times``) for the simulator's decode stretches.

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

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from serveplan.errors import InfeasibleError, SpecError
from serveplan.estimator.batch import StepBatch
from serveplan.ops.base import FEATURE_INDEX, FEATURES, Collective, LayerGroup, Lin, Rate
from serveplan.ops.graph import build_layer_groups
from serveplan.ops.window import window_features
from serveplan.specs.hardware import DeviceSpec
from serveplan.specs.model import AttentionKind, LayerType, ModelSpec
from serveplan.specs.parallel import ParallelConfig
from serveplan.specs.profile import CommModel, EfficiencyProfile, Module, PhaseEfficiency
from serveplan.units import DType

#: Fraction of device memory the engine may use (vLLM's ``gpu_memory_utilization`` default 0.9).
DEFAULT_MEMORY_UTILIZATION = 0.9

_NF = len(FEATURES)
_CACHE_SIZE = 1 << 16  # memoised step times per estimator
_I = FEATURE_INDEX
_N, _NP = FEATURE_INDEX["n"], FEATURE_INDEX["np"]


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


def _vec(lin: Lin) -> np.ndarray:
    v = np.zeros(_NF)
    for k, c in lin.items():
        v[_I[k]] = c
    return v


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
    ``kv_capacity_tokens`` is for the whole instance (all data-parallel ranks).
    """

    weights_bytes: float
    kv_bytes_per_token: float
    activation_bytes: float
    device_memory_bytes: float
    memory_utilization: float
    kv_capacity_tokens: int
    model_kv_bytes_per_token: float
    total_weights_bytes: float

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
        }


@dataclass(frozen=True, slots=True)
class StepEstimate:
    """Time of one step of one instance, with its breakdown."""

    total_s: float
    phase: str
    modules: tuple[ModuleTiming, ...]
    ops: tuple[OpTiming, ...]
    memory: MemoryEstimate
    pp_comm_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "total_s": self.total_s,
            "phase": self.phase,
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


@dataclass
class _Compiled:
    name: str
    count: float
    F: np.ndarray              # (ops, features) FLOP
    B: np.ndarray              # (ops, features) bytes
    rate: np.ndarray           # (ops,) index into [roofline, update, repeat_kv, upcast]
    op_block: np.ndarray       # (ops,) block index
    block_kinds: list[Module]
    comm_coef: list[list[tuple[np.ndarray, np.ndarray, float, float, Collective, int]]]
    # per block: list of (bytes vector, values vector, link bandwidth, link latency, kind, group)
    ops: list[Any] = field(default_factory=list)


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
                 memory_utilization: float = DEFAULT_MEMORY_UTILIZATION) -> None:
        parallel = parallel or ParallelConfig()
        parallel.validate_for(model)
        self.model, self.hardware, self.profile, self.parallel = model, hardware, profile, parallel
        self.dtype = DType.parse(dtype) if dtype is not None else model.dtype
        if kv_dtype is not None:
            self.kv_dtype = DType.parse_kv(kv_dtype)
        else:
            self.kv_dtype = model.default_kv_dtype(self.dtype)
        if not 0 < memory_utilization <= 1:
            raise SpecError(f"memory_utilization={memory_utilization} must be in (0, 1]")
        self.memory_utilization = memory_utilization
        self.peak_flops = hardware.flops(self.dtype)
        self.tile = hardware.tile_size if profile.tile_quantization else 0
        self.groups: tuple[LayerGroup, ...] = build_layer_groups(
            model, parallel, dtype=self.dtype, kv_dtype=self.kv_dtype,
            attention_impl=profile.attention_impl, include_lm_head=profile.include_lm_head,
            expert_imbalance=profile.expert_imbalance,
        )
        self._compiled = [self._compile(g) for g in self.groups]
        self._rates = {
            "prefill": self._phase_rates(profile.prefill),
            "decode": self._phase_rates(profile.decode),
        }
        self._dispatch = {
            ph: [[0.0 if (ph == "decode" and profile.dispatch_hidden_in_decode) else profile.dispatch(k)
                  for k in c.block_kinds] for c in self._compiled]
            for ph in ("prefill", "decode")
        }
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
        self._fuse()

    # ------------------------------------------------------------------ compilation
    def _compile(self, g: LayerGroup) -> _Compiled:
        ops, rate, op_block, kinds, comm = [], [], [], [], []
        for bi, block in enumerate(g.blocks):
            kinds.append(block.kind)
            for op in block.ops:
                ops.append(op)
                rate.append([Rate.ROOFLINE, Rate.KAPPA_UPDATE, Rate.KAPPA_REPEAT_KV, Rate.KAPPA_UPCAST].index(op.rate))
                op_block.append(bi)
            cl = []
            for c in block.comms:
                link = self.hardware.link_for(c.group_size if c.kind is Collective.ALL_TO_ALL else c.group_size)
                cl.append((_vec(c.volume), _vec(c.values), link.bandwidth, link.latency_s, c.kind, c.group_size))
            comm.append(cl)
        F = np.array([_vec(o.flops) for o in ops]) if ops else np.zeros((0, _NF))
        B = np.array([_vec(o.bytes) for o in ops]) if ops else np.zeros((0, _NF))
        return _Compiled(g.name, float(g.count), F, B, np.array(rate), np.array(op_block), kinds, comm, ops)

    def _phase_rates(self, eff: PhaseEfficiency) -> tuple[float, np.ndarray, float]:
        mem = eff.memory * self.hardware.memory_bandwidth
        p = self.profile
        kappas = np.array([mem, p.kappa_update or mem, p.kappa_repeat_kv or mem, p.kappa_upcast or mem])
        return eff.compute * self.peak_flops, kappas, eff.comm

    # ------------------------------------------------------------------ features
    def features(self, batch: StepBatch) -> np.ndarray:
        """Feature vector (per data-parallel rank) of a step; see :mod:`serveplan.ops.base`."""
        dp = self.parallel.dp
        x = np.zeros(_NF)
        n_all = batch.num_tokens
        n = n_all / dp
        x[_I["one"]] = 1.0
        x[_I["n"]] = n
        x[_I["ng"]] = tile_quantized_rows(n, self.tile)
        x[_I["np"]] = batch.prefill_tokens / dp
        x[_I["nd"]] = batch.decode_tokens / dp
        x[_I["sp"]] = batch.prefill_seqs / dp
        x[_I["kvp"]] = batch.prefill_keys / dp
        x[_I["kvd"]] = batch.decode_keys / dp
        x[_I["ap"]] = batch.prefill_scores / dp
        x[_I["apc"]] = batch.prefill_causal_scores / dp
        x[_I["nout"]] = batch.num_seqs / dp
        x[_I["nall"]] = n_all
        m = self.model
        self._window_rows(x)
        if m.is_moe:
            # expected experts with >= 1 routed token under uniform routing: E(1 - (1 - k/E)^n)
            frac = 1.0 - (1.0 - m.num_experts_per_tok / m.num_experts) ** n_all
            x[_I["eact"]] = m.num_experts / self.parallel.ep * frac
        return x

    # ------------------------------------------------------------------ timing
    def _comm_coefficients(self, entry: tuple) -> tuple[np.ndarray, float]:
        """Seconds per feature unit at efficiency 1, and the latency term, of one collective."""
        vol_v, val_v, bw, lat, kind, g = entry
        if self.profile.comm_model is CommModel.BESTSERVE and kind is Collective.ALL_REDUCE:
            # BestServe eq. (8): (b*s*h/t) / (e_+ * S_+), a count of values, no latency term
            return val_v / g / bw, 0.0
        if kind is Collective.ALL_REDUCE:   # ring: 2(g-1)/g of the payload, 2(g-1) latencies
            return (2 * (g - 1) / g) * vol_v / bw, 2 * (g - 1) * lat
        if kind is Collective.ALL_TO_ALL:   # each device sends (g-1)/g of its payload
            return ((g - 1) / g) * vol_v / bw, (g - 1) * lat
        return vol_v / bw, lat              # send/recv

    def _fuse(self) -> None:
        """Stack every group's ops and collectives into single matrices for the fast path."""
        F, B, rate, op_block, comm_rows, comm_lat, comm_block = [], [], [], [], [], [], []
        self._blocks: list[tuple[int, int]] = []  # (group index, block index within group)
        for gi, c in enumerate(self._compiled):
            base = len(self._blocks)
            self._blocks += [(gi, bi) for bi in range(len(c.block_kinds))]
            F.append(c.F)
            B.append(c.B)
            rate.append(c.rate)
            op_block.append(c.op_block + base)
            for bi, entries in enumerate(c.comm_coef):
                for entry in entries:
                    row, lat = self._comm_coefficients(entry)
                    comm_rows.append(row)
                    comm_lat.append(lat)
                    comm_block.append(base + bi)
        nb = len(self._blocks)
        self._F = np.vstack(F)
        self._B = np.vstack(B)
        rate_all = np.concatenate(rate).astype(int)
        blocks_all = np.concatenate(op_block).astype(int)
        self._S = np.zeros((nb, len(rate_all)))
        self._S[blocks_all, np.arange(len(rate_all))] = 1.0
        self._C = np.array(comm_rows) if comm_rows else np.zeros((0, _NF))
        self._C_lat = np.array(comm_lat)
        self._SC = np.zeros((nb, len(comm_rows)))
        if comm_rows:
            self._SC[np.array(comm_block), np.arange(len(comm_rows))] = 1.0
        self._inv = {}
        all_ops = [op for c in self._compiled for op in c.ops]
        is_attn = np.array([op.attention for op in all_ops])
        for ph, (flops_rate, mem_rates, e_comm) in self._rates.items():
            eff = self.profile.prefill if ph == "prefill" else self.profile.decode
            inv_comp = np.where(rate_all == 0, 1.0 / flops_rate, 0.0)
            inv_mem = 1.0 / mem_rates[rate_all]
            # attention kernels may have their own factors (PhaseEfficiency.attention_*)
            inv_comp = np.where(is_attn, 1.0 / (eff.attn_compute * self.peak_flops), inv_comp)
            inv_mem = np.where(is_attn, 1.0 / (eff.attn_memory * self.hardware.memory_bandwidth), inv_mem)
            self._inv[ph] = (inv_comp, inv_mem, 1.0 / e_comm)
        # size-dependent GEMM efficiency (profile.matmul_size_curve): time = ratio(rows) x peak roofline
        self._gemm = np.array([op.rows is not None for op in all_ops])
        self._R = np.array([_vec(op.rows) if op.rows is not None else np.zeros(_NF) for op in all_ops])
        self._curves = {}
        for ph, (rows, ratio) in self.profile.matmul_size_curve.items():
            self._curves[ph] = (np.log(np.asarray(rows)), np.asarray(ratio))
        self._peak_inv = (1.0 / self.peak_flops, 1.0 / self.hardware.memory_bandwidth)
        self._group_blocks = [
            [(self._dispatch_flat(ph, i), i) for i, (g, _) in enumerate(self._blocks)]
            for ph in ("prefill", "decode")
        ]
        self._counts = [c.count for c in self._compiled]

    def _dispatch_flat(self, phase: str, i: int) -> float:
        gi, bi = self._blocks[i]
        return self._dispatch[phase][gi][bi]

    def _window_rows(self, x: np.ndarray) -> None:
        """Fill the local-layer features (``kvpw``, ``kvdw``, ``apw``, ``apcw``) of one feature
        vector or of the columns of a matrix from its ``sp``, ``np``, ``kvp``, ``nd``, ``kvd``
        rows (:mod:`serveplan.ops.window`), so callers that vary those rows stay consistent."""
        m = self.model
        if not m.local_window:
            return
        x[_I["kvpw"]], x[_I["kvdw"]], x[_I["apw"]], x[_I["apcw"]] = window_features(
            x[_I["sp"]], x[_I["np"]], x[_I["kvp"]], x[_I["nd"]], x[_I["kvd"]], m.local_window, m.is_chunked)

    def _block_terms(self, x: np.ndarray, phase: str) -> tuple[Any, Any, Any, Any, Any]:
        """Per-op work, traffic, compute and memory terms, and per-block compute and comm times."""
        self._window_rows(x)
        inv_comp, inv_mem, inv_e = self._inv[phase]
        W = self._F @ x
        Q = self._B @ x
        if np.ndim(x) == 1:
            comp, mem = W * inv_comp, Q * inv_mem
            active = 1.0 if x[_N] > 0 else 0.0
            comm = (self._C @ x) * inv_e + self._C_lat * active
        else:
            comp, mem = W * inv_comp[:, None], Q * inv_mem[:, None]
            active = (x[_N] > 0).astype(float)
            comm = (self._C @ x) * inv_e + self._C_lat[:, None] * active
        curve = self._curves.get(phase)
        if curve is not None:
            rows = self._R @ x
            ratio = np.interp(np.log(np.maximum(rows, 1.0)), curve[0], curve[1])
            g = self._gemm if np.ndim(x) == 1 else self._gemm[:, None]
            comp = np.where(g, W * self._peak_inv[0] * ratio, comp)
            mem = np.where(g, Q * self._peak_inv[1] * ratio, mem)
        t_op = np.maximum(comp, mem)
        return W, Q, comp, mem, t_op, self._S @ t_op, self._SC @ comm

    def _layers_time(self, block_compute: Any, block_comm: Any, phase: str) -> Any:
        """Algorithm 1 per layer kind (dispatch/compute overlap), times the layer counts."""
        total = 0.0
        disp = self._dispatch[phase]
        i = 0
        for gi, count in enumerate(self._counts):
            t_d = 0.0
            t_c = 0.0
            for d in disp[gi]:
                t_d += d
                t_c = np.maximum(t_d, t_c) + block_compute[i] + block_comm[i]
                i += 1
            total = total + count * t_c
        return total

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

    def step_time(self, x: np.ndarray) -> float:
        """Step time (s) of a feature vector: fast path without breakdown."""
        phase = "prefill" if x[_NP] > 0 else "decode"
        *_, bc, bm = self._block_terms(x, phase)
        total = self._layers_time(bc.tolist(), bm.tolist(), phase)
        return float(total + self._pp_time(x, self._rates[phase][2]))

    def step_times(self, X: np.ndarray, phase: str = "decode") -> np.ndarray:
        """Step times of many feature vectors (columns of ``X``) that share one phase."""
        *_, bc, bm = self._block_terms(X, phase)
        return self._layers_time(bc, bm, phase) + self._pp_time(X, self._rates[phase][2])

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
        phase = "prefill" if x[_NP] > 0 else "decode"
        pp = self.parallel.pp
        *_, bc, bm = self._block_terms(x, phase)
        layers = self._layers_time(bc.tolist(), bm.tolist(), phase) / pp
        if pp == 1:
            return float(layers)
        lk = self._pp_link
        e_comm = self._rates[phase][2]
        send = x[_I["n"]] * self.model.hidden_size * self._ab / (e_comm * lk.bandwidth) + lk.latency_s * (x[_I["n"]] > 0)
        return float(layers + send)

    def estimate(self, batch: StepBatch) -> StepEstimate:
        """Step time with the per-module and per-operator breakdown."""
        x = self.features(batch)
        phase = "prefill" if batch.is_prefill else "decode"
        W, Q, comp, mem, t_op, bc, bm = self._block_terms(x, phase)
        modules: list[ModuleTiming] = []
        ops: list[OpTiming] = []
        disp = self._dispatch[phase]
        i = 0
        oi = 0
        for gi, c in enumerate(self._compiled):
            for bi, kind in enumerate(c.block_kinds):
                modules.append(ModuleTiming(c.name, kind.value, int(c.count), float(disp[gi][bi]),
                                            float(bc[i]), float(bm[i])))
                i += 1
            for op, blk in zip(c.ops, c.op_block):
                bound = ("compute" if comp[oi] >= mem[oi] else "memory") if op.rate is Rate.ROOFLINE else op.rate.value
                ops.append(OpTiming(c.name, c.block_kinds[blk].value, op.name, float(W[oi]), float(Q[oi]),
                                    float(comp[oi]), float(mem[oi]), float(t_op[oi]), bound, op.source))
                oi += 1
        total = float(self._layers_time(bc.tolist(), bm.tolist(), phase))
        pp_s = float(self._pp_time(x, self._rates[phase][2]))
        return StepEstimate(total + pp_s, phase, tuple(modules), tuple(ops), self.memory, pp_s)

    # ------------------------------------------------------------------ memory
    def weights_per_device(self) -> float:
        """Weight bytes on the most loaded device (largest pipeline stage)."""
        p = self.parallel
        return self.model.weight_bytes_per_device(self.dtype, tp=p.tp, ep=p.ep, expert_tp=p.expert_tp, pp=p.pp)

    def kv_bytes_per_token_per_device(self) -> float:
        """KV bytes per token on one device of the largest stage (every attention layer, for a
        sequence within its windows)."""
        m = self.model
        return m.kv_bytes_per_token(self.kv_dtype) * self._kv_device_fraction()

    def _kv_device_fraction(self) -> float:
        """Share of the model's KV cache one device holds: its stage's layers, and its KV heads
        (replicated when tp exceeds them; the MLA latent is whole on every TP rank, notes A.5)."""
        m, p = self.model, self.parallel
        frac = math.ceil(m.num_hidden_layers / p.pp) / m.num_hidden_layers
        if m.attention is AttentionKind.MLA:
            return frac
        return frac * max(m.num_key_value_heads / p.tp, 1.0) / m.num_key_value_heads

    def kv_bytes_per_sequence(self, length: int) -> float:
        """Cache bytes one sequence of ``length`` tokens holds on one device: full layers grow
        with it, local layers stop at their window, linear-attention layers hold a fixed state
        (:meth:`ModelSpec.kv_bytes_per_sequence`), divided as the layout stores them."""
        m = self.model
        state_frac = math.ceil(m.num_hidden_layers / self.parallel.pp) / m.num_hidden_layers / self.parallel.tp
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

    def activation_bytes(self, max_tokens: int = 2048) -> float:
        """Peak transient activations of a step of ``max_tokens`` new tokens (per device):
        the widest live tensors of one layer (input, gate and up outputs, attention output)."""
        m, t = self.model, self.parallel.tp
        ff = (m.moe_intermediate_size * (m.num_experts_per_tok + m.num_shared_experts)
              if m.is_moe else m.intermediate_size)
        n = max_tokens / self.parallel.dp
        width = 2 * m.hidden_size + 2 * ff / t + m.q_dim / t + m.vocab_size / t * (4 / self._ab) / max(n, 1)
        return n * width * self._ab

    def _memory(self) -> MemoryEstimate:
        w = self.weights_per_device()
        kv_tok = self.kv_bytes_per_token_per_device()
        act = self.activation_bytes()
        usable = self.hardware.memory_bytes * self.memory_utilization - w - act
        cap = int(max(usable, 0.0) // kv_tok) * self.parallel.dp if kv_tok > 0 else 0
        return MemoryEstimate(
            weights_bytes=w, kv_bytes_per_token=kv_tok, activation_bytes=act,
            device_memory_bytes=self.hardware.memory_bytes, memory_utilization=self.memory_utilization,
            kv_capacity_tokens=cap, model_kv_bytes_per_token=self.model.kv_bytes_per_token(self.kv_dtype),
            total_weights_bytes=self.model.weight_bytes(self.dtype),
        )

    def check_fits(self) -> None:
        """Raise :class:`InfeasibleError` when the weights alone exceed usable device memory."""
        mem = self.memory
        usable = mem.device_memory_bytes * mem.memory_utilization
        if mem.weights_bytes + mem.activation_bytes >= usable:
            raise InfeasibleError(
                f"{self.model.name} ({self.dtype.value}) on {self.hardware.name} with {self.parallel.label()}: "
                f"weights need {mem.weights_bytes / 1e9:.1f} GB per device (+{mem.activation_bytes / 1e9:.1f} GB "
                f"activations) but only {usable / 1e9:.1f} GB is usable "
                f"({mem.memory_utilization:.0%} of {mem.device_memory_bytes / 1e9:.0f} GB); "
                f"use a larger tp/pp or a smaller dtype"
            )
