"""Serving engines: a batching mechanism plus the defaults an engine version ships with.

Each bundled engine version is one data file ``specs/data/engines/<id>.yaml`` (``vllm-0.11``,
``sglang-0.5``, ``trtllm-1.2``, ``bestserve``) naming its mechanism and every default the
simulator needs, each with the file and function of the engine's own source it was read from.
A new engine or version is a new file; ``--engine vllm`` picks the file marked ``default: true``
among those of ``engine: vllm``.

What an engine fixes (:class:`EngineSpec`):

* ``scheduler``: the batching policy (by what it does: ``chunked-prefill``, ``prefill-priority``,
  ``inflight-no-evict``, ``prefill-first``) and its options in the engine's own words
  (``scheduler: {policy, options}`` in the file). The policies live in
  :mod:`serveplan.sim.schedulers`, each with its ``Options`` type, which validates the options
  when a deployment is resolved; this module keeps them as the file gives them.
* Device-dependent limits (:class:`DeviceTier`, first matching row wins): sequences per step,
  new tokens per step (online server and offline batch values), the prefill chunk.
* KV memory: block size, how the memory fraction is applied (:class:`MemoryBasis`), preemption by
  recompute.

:meth:`EngineSpec.limits` resolves the limits of one device and layout into
:class:`EngineLimits`; :meth:`EngineSpec.memory_utilization` turns the engine's memory rule into
the share of device memory the estimator may fill with weights, activations and KV cache.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from serveplan.errors import SpecError, check_int, check_number
from serveplan.specs.comm import CommOptions, comm_options_from_dict
from serveplan.specs.hardware import DeviceSpec
from serveplan.specs.profile import EfficiencyProfile, Module
from serveplan.units import DType, GiB, MiB


class MemoryBasis(str, Enum):
    """How an engine's memory fraction sizes its KV cache."""

    #: ``fraction x device memory`` holds weights, activations and the KV cache
    #: (vLLM ``gpu_memory_utilization``).
    TOTAL = "total"
    #: ``fraction x device memory`` holds weights and the KV cache; the fraction itself is
    #: derived from reserved activation/graph memory (SGLang ``mem_fraction_static``).
    STATIC = "static"
    #: ``fraction x`` the memory left after weights and activations holds the KV cache
    #: (TensorRT-LLM ``free_gpu_memory_fraction``).
    FREE = "free"


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceTier:
    """One row of device-dependent defaults; applies when the device memory is in
    ``[min_memory_gib, max_memory_gib)`` and its name contains none of ``exclude``."""

    min_memory_gib: float = 0.0
    max_memory_gib: float = math.inf
    exclude: tuple[str, ...] = ()
    max_num_seqs: int | None = None
    token_budget_online: int | None = None
    token_budget_offline: int | None = None
    chunk_size: int | None = None
    graph_max_batch: tuple[int, int] = (0, 0)  # (TP < 4, TP >= 4): CUDA-graph batch (SGLang memory reserve)

    def matches(self, device: DeviceSpec) -> bool:
        gib = device.engine_memory_bytes / GiB  # the engines read the driver's total (torch.cuda.mem_get_info)
        name = device.name.lower()
        return self.min_memory_gib <= gib < self.max_memory_gib and not any(x in name for x in self.exclude)


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineLimits:
    """Limits of one engine on one device and layout (``None``: the engine sets no such limit).

    ``max_num_seqs`` may be ``None`` when the engine derives it from the KV cache
    (``max_num_seqs_kv_fraction``): see :meth:`EngineSpec.max_num_seqs_for`.
    """

    max_num_seqs: int | None
    token_budget: int | None
    chunk_size: int | None
    prefill_max_batch: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineSpec:
    """One engine version: its mechanism and defaults (see the module docstring).

    Parameters
    ----------
    name, engine, version, source:
        Id (the data file's stem), engine family, version and the source it was read from.
    scheduler, scheduler_options:
        The batching policy's registered name and its options in the engine's own words, as the
        file gives them (``scheduler: {policy: prefill-priority, options: {scheduler_recv_interval:
        1}}``); the policy's ``Options`` type validates them
        (:func:`serveplan.sim.schedulers.policy_options`).
    chunked_prefill:
        Whether prompts are split across steps.
    tiers:
        Device-dependent limits, first match wins.
    prefill_max_batch:
        New prompts per step (BestServe's testbed).
    max_num_seqs_le_budget:
        ``max_num_seqs`` is capped by the token budget (vLLM).
    max_num_seqs_kv_fraction, max_num_seqs_cap:
        When the tier gives no ``max_num_seqs``: ``min(KV tokens x fraction, cap)`` (SGLang).
    max_num_seqs_per_context, max_num_seqs_floor:
        With both set, the KV-derived default is instead ``min(clamp(KV tokens / context length x
        per_context, floor, cap), KV tokens x fraction)`` (SGLang 0.5.23
        ``KVCacheConfigurator.resolve_max_num_reqs``).
    kv_block_size:
        Tokens per KV block (page).
    memory_basis, memory_fraction:
        How the memory fraction applies (:class:`MemoryBasis`); for ``static`` the fraction is
        derived from ``reserve_mib`` unless given.
    reserve_mib:
        SGLang's reserved-memory rule, MiB: ``base``, ``per_chunk_token`` (times
        ``max(chunk, min_chunk)``), ``per_graph_batch``, ``per_device_of_8`` (times ``tp*pp/8``)
        and ``floor_above_60gib``.
    kv_dtype_with_fp8_weights:
        KV format the engine picks for FP8 checkpoints when none is asked for (``None``: the
        estimator's default, the activations' 16-bit format).
    fused_input_quantization:
        The engine quantizes FP8/FP4 GEMM inputs inside the kernel before them (RMSNorm, all-reduce
        or activation fusions), so a measured profile's curves of its own GEMMs apply without the
        separate quantization pass their tables were timed with
        (:meth:`~serveplan.specs.profile.EfficiencyProfile.for_engine`).
    fused_operators:
        The engine runs the fused operator list (fused residual add + norm, one QKV GEMM with RoPE
        in place, one gate-up GEMM with ``silu_and_mul``) rather than BestServe's eager one
        (:func:`~serveplan.ops.graph.build_layer_groups`).
    prefix_caching:
        Whether the engine keeps computed KV in a prefix cache by default: a preempted request's
        computed tokens are then found there on its return instead of being recomputed (eviction
        in between is not modelled).
    default_tp:
        TP used when none is given (``None``: the smallest that fits, :func:`default_tp`).
    default_strategy:
        Fleet strategy of a run that gives none (``None``: one collocated instance, ``1m``).
    steady_state_check:
        The goodput search rejects a rate whose SLO holds over the stream but not in its steady
        state (:attr:`serveplan.optimize.goodput.GoodputSettings.steady_state`); off for BestServe's
        testbed, whose reproduction keeps the paper's Algorithm 9 check over the whole stream.
    comm_options:
        Opt-in expert-parallel communication setups the engine offers (name -> :class:`CommOptions`,
        e.g. SGLang's ``deepep``), none applied unless asked for (:meth:`comm`); the engines'
        default is none of them (plain NCCL collectives).
    comm_flags:
        Name -> the engine's command-line flags that switch the setup on.
    frontend_s:
        Serial work of the engine's API server per request, seconds (``frontend.per_request_us``;
        0: none): requests sent together reach the scheduler this far apart
        (:class:`~serveplan.sim.cluster.Frontend`; closed loops only).
    prefill_host_s:
        Host time per module and layer of a step with prompt tokens, for an engine that runs
        those steps eagerly (``prefill_host_us: {attention: A, mlp: M, moe: X}``): its Python and
        launch work per module, paid by the step model's dispatch overlap (BestServe Algorithm 1)
        instead of the profile's ``dispatch_s`` (:meth:`EfficiencyProfile.with_prefill_host`).
        Decode steps run under CUDA graphs and are unaffected, except those too large for the
        captured graphs (:attr:`prefill_graphs`). Empty: the profile's.
    prefill_graphs:
        ``(max_tokens, per_sequence)``: steps up to :meth:`graph_tokens` tokens replay a captured
        CUDA graph, larger ones run without and pay :attr:`prefill_host_s` and the profile's
        dispatch, decode steps included (vLLM captures piecewise graphs of steps up to
        ``max_cudagraph_capture_size`` tokens, by default ``min(2 x max_num_seqs x decode query
        length, 512)`` and at most the token budget, and runs larger steps without;
        ``vllm/config/vllm.py`` ``_set_cudagraph_sizes``, ``v1/cudagraph_dispatcher.py``).
        ``None``: every step with prompt tokens pays it and decode steps replay graphs.
    overlap_scheduling:
        The host plans and launches step ``k + 1`` while step ``k`` runs on the device, from the
        queue as it stood when step ``k`` started: a request that reaches a busy engine during
        step ``k`` is first scheduled into step ``k + 2``; an idle engine takes it at once
        (:class:`~serveplan.sim.instance.Instance`). vLLM's ``--async-scheduling`` (on by default
        since v0.14.0, PR #27614; ``v1/engine/core.py`` ``step_with_batch_queue``), SGLang's
        overlap schedule (``disable_overlap_schedule = False``; ``managers/scheduler.py``
        ``event_loop_overlap``) and TensorRT-LLM's overlap scheduler (``disable_overlap_scheduler
        = False``; ``_torch/pyexecutor/py_executor.py`` ``_executor_loop_overlap``). Off: each
        step is planned after the previous one ends. Pipeline-parallel instances plan as if off.
    moe_backends:
        Weight format -> opt-in fused-MoE backend the deployment runs for it instead of the
        engine's default path (``moe_backends: {mxfp4: marlin}``: vLLM with
        ``VLLM_MXFP4_USE_MARLIN=1``); priced by that backend's own curve
        (:meth:`~serveplan.specs.profile.EfficiencyProfile.with_moe_backends`). Empty: the defaults.
    prefix_cache_tier_load:
        How prefix-cache hits found in CPU memory or on disk reach the GPU (``prefix_cache:
        {tier_load: ...}``; one of :data:`TIER_LOADS`): ``serial``, one copy before the step that
        needs them, or ``layerwise``, layer ``i``'s copy under layer ``i - 1``'s compute
        (:meth:`~serveplan.sim.prefix_cache.PrefixCache.step_with_loads`). Absent: ``serial``.
    cites:
        Field -> where in the engine's source the value was read.
    """

    name: str
    engine: str
    version: str
    source: str
    description: str = ""
    is_default: bool = False
    scheduler: str
    scheduler_options: dict[str, Any] = field(default_factory=dict)
    chunked_prefill: bool
    tiers: tuple[DeviceTier, ...]
    prefill_max_batch: int | None = None
    max_num_seqs_le_budget: bool = False
    max_num_seqs_kv_fraction: float | None = None
    max_num_seqs_cap: int | None = None
    max_num_seqs_per_context: float | None = None
    max_num_seqs_floor: int | None = None
    kv_block_size: int
    memory_basis: MemoryBasis
    memory_fraction: float | None = None
    reserve_mib: dict[str, float] = field(default_factory=dict)
    preemption: str = "recompute"
    prefix_caching: bool = False
    fused_input_quantization: bool = False
    fused_operators: bool = False
    kv_dtype_with_fp8_weights: DType | None = None
    default_tp: int | None = None
    default_strategy: str | None = None
    steady_state_check: bool = True
    comm_options: dict[str, CommOptions] = field(default_factory=dict)
    comm_flags: dict[str, tuple[str, ...]] = field(default_factory=dict)
    overlap_scheduling: bool = False
    frontend_s: float = 0.0
    moe_backends: dict[str, str] = field(default_factory=dict)
    prefill_host_s: dict[str, float] = field(default_factory=dict)
    prefill_graphs: tuple[int, int] | None = None
    prefix_cache_tier_load: str = "serial"
    cites: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.tiers:
            raise SpecError(f"engine {self.name!r}: needs at least one tier of limits")
        if self.kv_block_size < 1:
            raise SpecError(f"engine {self.name!r}: kv_block_size={self.kv_block_size} must be >= 1")
        if self.memory_fraction is not None and not 0 < self.memory_fraction <= 1:
            raise SpecError(f"engine {self.name!r}: memory_fraction={self.memory_fraction} must be in (0, 1]")
        if self.memory_basis is MemoryBasis.STATIC and self.memory_fraction is None and not self.reserve_mib:
            raise SpecError(f"engine {self.name!r}: memory basis 'static' needs memory_fraction or reserve_mib")
        check_number(f"engine {self.name!r}: frontend_s", self.frontend_s, low=0, unit="seconds")
        if not isinstance(self.scheduler_options, dict):
            raise SpecError(f"engine {self.name!r}: scheduler options must be a mapping; got "
                            f"{self.scheduler_options!r}")

    def with_scheduler_options(self, **changes: Any) -> EngineSpec:
        """This engine with some scheduler options changed (in the policy's own words:
        ``spec.with_scheduler_options(scheduler_recv_interval=30)``)."""
        return dataclasses.replace(self, scheduler_options={**self.scheduler_options, **changes})

    @property
    def label(self) -> str:
        return f"{self.engine} {self.version}"

    def tier(self, device: DeviceSpec) -> DeviceTier:
        for t in self.tiers:
            if t.matches(device):
                return t
        raise SpecError(f"engine {self.name!r} has no defaults for {device.name} "
                        f"({device.memory_bytes / GiB:.0f} GiB); add a tier to its data file")

    def limits(self, device: DeviceSpec, *, offline: bool = False) -> EngineLimits:
        """The engine's limits on ``device``: offline (``LLM`` class) or online server values."""
        t = self.tier(device)
        budget = t.token_budget_offline if offline else t.token_budget_online
        seqs = t.max_num_seqs
        if seqs is not None and budget is not None and self.max_num_seqs_le_budget:
            seqs = min(seqs, budget)
        return EngineLimits(max_num_seqs=seqs, token_budget=budget, chunk_size=t.chunk_size,
                            prefill_max_batch=self.prefill_max_batch)

    def max_num_seqs_for(self, limits: EngineLimits, kv_capacity_tokens: int, context_len: int | None = None) -> int:
        """Sequences per step, resolving a KV-derived default (SGLang ``max_running_requests``);
        ``context_len`` is the model's context length (used by ``max_num_seqs_per_context``)."""
        if limits.max_num_seqs is not None:
            return limits.max_num_seqs
        frac = self.max_num_seqs_kv_fraction or 1.0
        n = int(kv_capacity_tokens * frac)
        if self.max_num_seqs_per_context and self.max_num_seqs_floor and context_len:
            est = int(kv_capacity_tokens / context_len * self.max_num_seqs_per_context)
            est = max(min(est, self.max_num_seqs_cap or est), self.max_num_seqs_floor)
            return max(min(est, n), 1)
        if self.max_num_seqs_cap:
            n = min(n, self.max_num_seqs_cap)
        return max(n, 1)

    def memory_utilization(self, device: DeviceSpec, *, weights_bytes: float, activation_bytes: float,
                           tp: int = 1, pp: int = 1) -> float:
        """Share of device memory (the catalog's ``memory_bytes``) that weights, activations and
        KV cache may fill under this engine's rule (the estimator's ``memory_utilization``; its KV
        capacity is then ``utilization x memory - weights - activations``). Engines apply their
        fraction to the memory the driver reports (:attr:`DeviceSpec.engine_memory_bytes`: vLLM
        ``gpu_memory_utilization x`` the total of ``torch.cuda.mem_get_info``, SGLang's
        ``mem_fraction_static x`` the memory free at start, TensorRT-LLM's
        ``free_gpu_memory_fraction x`` the memory free after loading), which exceeds the
        datasheet's decimal gigabytes, so the share may exceed 1."""
        nominal = device.memory_bytes
        mem = device.engine_memory_bytes
        if self.memory_basis is MemoryBasis.TOTAL:
            return float(self.memory_fraction or 0.9) * mem / nominal
        if self.memory_basis is MemoryBasis.FREE:
            f = float(self.memory_fraction or 0.9)
            used = min(weights_bytes + activation_bytes, mem)
            return min(mem, used + f * (mem - used)) / nominal
        # STATIC: weights + KV = fraction x memory; activations sit in the reserved remainder
        frac = self.memory_fraction if self.memory_fraction is not None else self.static_fraction(device, tp=tp, pp=pp)
        return min(mem, frac * mem + activation_bytes) / nominal

    def memory_rule(self, device: DeviceSpec, *, tp: int = 1, pp: int = 1) -> str:
        """The engine's memory setting in its own terms, for output beside the share
        :meth:`memory_utilization` gives (e.g. ``gpu_memory_utilization 0.92 x 81.6 GB reported``)."""
        reported = f"{device.engine_memory_bytes / 1e9:.1f} GB reported"
        if self.memory_basis is MemoryBasis.TOTAL:
            return f"gpu_memory_utilization {float(self.memory_fraction or 0.9):g} x {reported}"
        if self.memory_basis is MemoryBasis.FREE:
            return f"free_gpu_memory_fraction {float(self.memory_fraction or 0.9):g} of the memory free after weights"
        frac = self.memory_fraction if self.memory_fraction is not None else self.static_fraction(device, tp=tp, pp=pp)
        return f"mem_fraction_static {frac:g} x {reported}"

    def static_fraction(self, device: DeviceSpec, *, tp: int = 1, pp: int = 1) -> float:
        """SGLang's ``mem_fraction_static`` = (memory - reserved) / memory, reserved in MiB."""
        r = self.reserve_mib
        gpu_mib = device.engine_memory_bytes / MiB  # get_device_memory_capacity(): the driver's total
        t = self.tier(device)
        chunk = t.chunk_size or 0
        graph = t.graph_max_batch[1 if tp >= 4 else 0]
        reserved = r.get("base", 0.0) + max(chunk, r.get("min_chunk", 0.0)) * r.get("per_chunk_token", 0.0)
        reserved += graph * r.get("per_graph_batch", 0.0) + tp * pp / 8 * r.get("per_device_of_8", 0.0)
        if gpu_mib > 60 * 1024:
            reserved = max(reserved, r.get("floor_above_60gib", 0.0))
        return round((gpu_mib - reserved) / gpu_mib, 3)

    def comm(self, name: str) -> CommOptions:
        """The engine's opt-in communication setup ``name`` (see ``comm_options``).

        Raises
        ------
        SpecError
            The engine offers no setup of that name.
        """
        try:
            return self.comm_options[name]
        except KeyError:
            offered = ", ".join(sorted(self.comm_options)) or "none (the engine has no expert-parallel options here)"
            raise SpecError(f"comm={name!r} for engine {self.name!r}; expected one of: {offered}") from None

    def profile_for(self, profile: EfficiencyProfile) -> EfficiencyProfile:
        """``profile`` as this engine runs it: its own kernels' curves, its fused input
        quantization and its operator list (:meth:`EfficiencyProfile.for_engine`), the opt-in
        MoE backends of :attr:`moe_backends`, and the eager steps' host work of
        :attr:`prefill_host_s`, paid by steps larger than :meth:`graph_tokens` (without an
        instance's limits; the simulator bounds each instance by its own,
        :func:`~serveplan.sim.deployment.resolve`)."""
        hit = profile.derived.get(id(self))
        if hit is not None and hit[0] is self:
            derived: EfficiencyProfile = hit[1]   # derived before for this very engine object
            return derived
        out = (profile.for_engine(self.engine, fused_input_quantization=self.fused_input_quantization,
                                  fused_operators=self.fused_operators)
               .with_moe_backends(self.moe_backends)
               .with_prefill_host({Module(k): v for k, v in self.prefill_host_s.items()}))
        graphs = self.graph_tokens()
        out = out.with_(prefill_graph_tokens=graphs) if graphs != out.prefill_graph_tokens else out
        if len(profile.derived) >= 64:
            profile.derived.clear()
        profile.derived[id(self)] = (self, out)
        return out

    def host_note(self, *, moe: bool, graphs: int | dict[str, int] | None = None) -> str | None:
        """One line on which steps pay :attr:`prefill_host_s` and how much per layer (``None``
        when a model without MoE layers (``moe=False``) has no module that pays it). ``graphs``:
        :meth:`graph_tokens` of the instances (by role where they differ; default: the engine's
        bound without an instance's limits)."""
        paid = {k: v for k, v in self.prefill_host_s.items() if k != "moe" or moe}
        if not paid:
            return None
        graphs = self.graph_tokens() if graphs is None else graphs
        host = ", ".join(f"{k} {v * 1e6:.0f} us" for k, v in paid.items())
        if isinstance(graphs, dict):
            which = "steps of more than " + ", ".join(f"{n} tokens per rank ({role} instances)"
                                                      for role, n in graphs.items())
        elif graphs:
            which = f"steps of more than {graphs} tokens per rank"
        else:
            which = "steps with prompt tokens"
        return (f"{which} run without CUDA graphs: the host's work per layer ({host}) is paid where it "
                "exceeds the device's")

    def graph_tokens(self, max_num_seqs: int | None = None, *, query_len: int = 1,
                     token_budget: float | None = None, dp: int = 1) -> int:
        """Tokens per rank of the largest step that replays a captured graph (0: no bound, every step
        with prompt tokens pays :attr:`prefill_host_s` and decode steps replay graphs): vLLM's default
        ``max_cudagraph_capture_size``, ``min(per_sequence x max_num_seqs x query_len, max_tokens)``
        of :attr:`prefill_graphs`, at most ``token_budget``, rounded down to the sizes it captures
        (1, 2, 4, multiples of 8 below 256, multiples of 16 from 256;
        ``vllm/config/vllm.py`` ``_set_cudagraph_sizes``). Unknown limits leave ``max_tokens``.
        ``max_num_seqs`` and ``token_budget`` are an instance's; each of its ``dp`` data-parallel
        ranks captures for its share (the busiest rank's, rounded up)."""
        if self.prefill_graphs is None:
            return 0
        cap, per_seq = self.prefill_graphs
        if max_num_seqs is not None:
            cap = min(cap, per_seq * -(-max_num_seqs // dp) * max(1, query_len))
        if token_budget is not None and math.isfinite(token_budget):
            cap = min(cap, -(-int(token_budget) // dp))
        return _captured_size(cap)

    def kv_dtype_for(self, weight_dtype: DType, declared: DType | None = None) -> DType | None:
        """KV format the engine picks for weights in ``weight_dtype`` (None: the estimator's default,
        which is the model's declared format when it has one). A format the checkpoint declares
        (``declared``: ``ModelSpec.kv_dtype``, from ``hf_quant_config.json`` or ``kv_cache_dtype``)
        comes first: each engine's ``auto`` KV format follows the checkpoint's."""
        if declared is not None:
            return declared
        if weight_dtype is DType.FP8 and self.kv_dtype_with_fp8_weights is not None:
            return self.kv_dtype_with_fp8_weights
        return None

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "engine": self.engine, "version": self.version,
                "scheduler": {"policy": self.scheduler, "options": dict(self.scheduler_options)},
                "chunked_prefill": self.chunked_prefill, "kv_block_size": self.kv_block_size,
                "memory_basis": self.memory_basis.value, "memory_fraction": self.memory_fraction,
                "preemption": self.preemption, "source": self.source,
                **({"overlap_scheduling": True} if self.overlap_scheduling else {}),
                **({"moe_backends": dict(self.moe_backends)} if self.moe_backends else {}),
                **({"prefill_host_us": {k: v * 1e6 for k, v in self.prefill_host_s.items()}}
                   if self.prefill_host_s else {}),
                **({"prefill_graphs": {"max_tokens": self.prefill_graphs[0],
                                       "per_sequence": self.prefill_graphs[1]}}
                   if self.prefill_graphs is not None else {}),
                **({"comm_options": {k: {**v.to_dict(), "flags": list(self.comm_flags.get(k, ()))}
                                     for k, v in self.comm_options.items()}} if self.comm_options else {})}


def _flag(raw: dict[str, Any], key: str, where: str) -> bool:
    """``raw[key]`` as a bool (False when absent); a :class:`SpecError` naming it when not true/false."""
    v = raw.get(key, False)
    if not isinstance(v, bool):
        raise SpecError(f"{where}: {key}={v!r} must be true or false")
    return v


def _opt_int(raw: dict[str, Any], key: str, where: str) -> int | None:
    v = raw.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise SpecError(f"{where}: {key}={v!r} must be a positive integer")
    return v


def _moe_backends(raw: Any, where: str) -> dict[str, str]:
    """``moe_backends: {<weight format>: <backend>}`` (absent: none)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not all(isinstance(v, str) and v for v in raw.values()):
        raise SpecError(f"{where}: moe_backends must map weight formats to backend names, e.g. "
                        f"{{mxfp4: marlin}}; got {raw!r}")
    return {DType.parse(str(k)).value: v for k, v in raw.items()}


def _captured_size(cap: int) -> int:
    """The largest CUDA-graph size vLLM captures that is at most ``cap`` tokens: 1, 2, 4, then
    multiples of 8 below 256 and of 16 from 256 (``VllmConfig._set_cudagraph_sizes``)."""
    if cap < 1:
        return 0
    if cap < 8:
        return 4 if cap >= 4 else (2 if cap >= 2 else 1)
    return cap // 8 * 8 if cap < 256 else cap // 16 * 16


def _prefill_graphs(raw: Any, where: str) -> tuple[int, int] | None:
    """``prefill_graphs: {max_tokens: N, per_sequence: k}`` -> ``(N, k)`` (absent: ``None``)."""
    if raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) - {"max_tokens", "per_sequence"} or "max_tokens" not in raw:
        raise SpecError(f"{where}: prefill_graphs must be {{max_tokens: N, per_sequence: k}} (the largest "
                        f"step with prompt tokens that replays a captured graph, and its bound per sequence); "
                        f"got {raw!r}")
    return (check_int(f"{where}: prefill_graphs.max_tokens", raw["max_tokens"], low=1),
            check_int(f"{where}: prefill_graphs.per_sequence", raw.get("per_sequence", 2), low=1))


#: how lower-tier prefix-cache hits are loaded (:attr:`EngineSpec.prefix_cache_tier_load`)
TIER_LOADS = ("serial", "layerwise")


def _prefix_cache_tier_load(raw: Any, where: str) -> str:
    """``prefix_cache: {tier_load: serial|layerwise}`` -> the tier load (absent: ``serial``)."""
    if raw is None:
        return "serial"
    if not isinstance(raw, dict) or set(raw) - {"tier_load"}:
        raise SpecError(f"{where}: prefix_cache must be {{tier_load: {'|'.join(TIER_LOADS)}}}; got {raw!r}")
    v = raw.get("tier_load", "serial")
    if v not in TIER_LOADS:
        raise SpecError(f"{where}: prefix_cache.tier_load={v!r}; expected one of: {', '.join(TIER_LOADS)}")
    return str(v)


def _prefill_host_s(raw: Any, where: str) -> dict[str, float]:
    """``prefill_host_us: {<module>: microseconds}`` -> seconds by module name (absent: none)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise SpecError(f"{where}: prefill_host_us must map modules ({', '.join(m.value for m in Module)}) "
                        f"to microseconds; got {raw!r}")
    out = {}
    for k, v in raw.items():
        if str(k) not in {m.value for m in Module}:
            raise SpecError(f"{where}: prefill_host_us key {k!r}; expected one of: "
                            f"{', '.join(m.value for m in Module)}")
        out[str(k)] = check_number(f"{where}: prefill_host_us.{k}", v, low=0, unit="microseconds") * 1e-6
    return out


def _frontend_s(raw: Any, where: str) -> float:
    """``frontend: {per_request_us: X}`` -> seconds (absent: 0, no frontend queue)."""
    if raw is None:
        return 0.0
    v = raw.get("per_request_us") if isinstance(raw, dict) else None
    return check_number(f"{where}: frontend.per_request_us", v, low=0, unit="microseconds") * 1e-6


#: keys of engine files written before the scheduler's options moved under ``scheduler:``, and where
#: each now lives (``_legacy_scheduler``); such files still load
_LEGACY_KEYS = ("mechanism", "mixed", "max_prefill_tokens", "admission", "batch_wait", "attention_dp_balance",
                "scheduler_recv_interval")


#: the earlier ``admission`` keys and SGLang's names for them (``environ.py``)
_LEGACY_ADMISSION = {"new_token_ratio": "init_new_token_ratio", "min_ratio_factor": "min_new_token_ratio_factor",
                     "decay_steps": "new_token_ratio_decay_steps", "clip_tokens": "clip_max_new_tokens"}


def _renamed(raw: Any, names: dict[str, str]) -> dict[str, Any]:
    """The entries of ``raw`` named in ``names``, under their new names."""
    return {new: raw[old] for old, new in names.items() if isinstance(raw, dict) and old in raw}


def _legacy_scheduler(raw: dict[str, Any], where: str) -> dict[str, Any]:
    """``scheduler: {policy, options}`` of a file in the earlier layout (top-level ``mechanism``,
    ``mixed``, ``max_prefill_tokens``, ``admission``, ``batch_wait``, ``attention_dp_balance`` and
    ``scheduler_recv_interval``), in the policies' own option names."""
    if "mechanism" not in raw:
        raise SpecError(f"{where}: missing field 'scheduler' ({{policy: <name>, options: {{...}}}}); policies: "
                        "chunked-prefill, prefill-priority, inflight-no-evict, prefill-first")
    policy = str(raw["mechanism"])
    opts: dict[str, Any] = {}
    if policy == "prefill-priority":
        opts["enable_mixed_chunk"] = _flag(raw, "mixed", where)
        opts.update(_renamed(raw.get("admission") or {}, _LEGACY_ADMISSION))
    opts.update(_renamed(raw, {"max_prefill_tokens": "max_prefill_tokens",
                               "scheduler_recv_interval": "scheduler_recv_interval"}))
    bw = raw.get("batch_wait")
    if isinstance(bw, dict):
        opts.update(_renamed(bw, {"timeout_iters": "batch_wait_timeout_iters",
                                  "max_tokens_ratio": "batch_wait_max_tokens_ratio"}))
    elif bw is not None:
        opts["batch_wait"] = bw   # refused by the policy, naming it
    adp = raw.get("attention_dp_balance")
    if adp is not None:
        opts["attention_dp_config"] = {"enable_balance": True, **adp} if isinstance(adp, dict) else adp
    return {"policy": policy, "options": opts}


def _scheduler(raw: dict[str, Any], where: str) -> tuple[str, dict[str, Any]]:
    """``scheduler: {policy: <name>, options: {...}}`` -> (policy, raw options)."""
    if "scheduler" not in raw or any(k in raw for k in _LEGACY_KEYS):
        if "scheduler" in raw:
            old = ", ".join(k for k in _LEGACY_KEYS if k in raw)
            raise SpecError(f"{where}: {old} belong under scheduler.options (in the policy's own words) "
                            "when the file has a 'scheduler' mapping")
        block = _legacy_scheduler(raw, where)
    else:
        block = raw["scheduler"]
    if isinstance(block, str):
        block = {"policy": block}
    if not isinstance(block, dict) or not isinstance(block.get("policy"), str) or set(block) - {"policy", "options"}:
        raise SpecError(f"{where}: scheduler must be {{policy: <name>, options: {{...}}}}; got {block!r}")
    opts = block.get("options") or {}
    if not isinstance(opts, dict):
        raise SpecError(f"{where}: scheduler.options must map option names to values; got {opts!r}")
    return block["policy"], {str(k): v for k, v in opts.items()}


def _tiers(raw: dict[str, Any], where: str) -> tuple[DeviceTier, ...]:
    """The device tiers of an engine file (first match wins)."""
    tiers = []
    for i, t in enumerate(raw.get("tiers") or []):
        w = f"{where} tier {i}"
        when = t.get("when") or {}
        budget = t.get("max_num_batched_tokens")
        online = offline = None
        if isinstance(budget, dict):
            online, offline = budget.get("online"), budget.get("offline")
        elif budget is not None:
            online = offline = budget
        for label, v in (("max_num_batched_tokens.online", online), ("max_num_batched_tokens.offline", offline)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise SpecError(f"{w}: {label}={v!r} must be a positive integer")
        g = t.get("graph_max_batch", (0, 0))
        tiers.append(DeviceTier(
            min_memory_gib=float(when.get("min_memory_gib", 0.0)),
            max_memory_gib=float(when.get("max_memory_gib", math.inf)),
            exclude=tuple(str(x).lower() for x in when.get("exclude", ())),
            max_num_seqs=_opt_int(t, "max_num_seqs", w), token_budget_online=online, token_budget_offline=offline,
            chunk_size=_opt_int(t, "chunk_size", w),
            graph_max_batch=(int(g[0]), int(g[1])) if isinstance(g, (list, tuple)) else (int(g), int(g)),
        ))
    return tuple(tiers)


def _comm(raw: dict[str, Any], where: str) -> tuple[dict[str, CommOptions], dict[str, tuple[str, ...]]]:
    """``comm: {<name>: {<CommOptions fields>, flags: [...]}}`` -> options and flags by name."""
    comm_raw = raw.get("comm") or {}
    if not isinstance(comm_raw, dict):
        raise SpecError(f"{where}: comm must map option names to their settings; got {comm_raw!r}")
    comm_options: dict[str, CommOptions] = {}
    comm_flags: dict[str, tuple[str, ...]] = {}
    for key, val in comm_raw.items():
        if not isinstance(val, dict):
            raise SpecError(f"{where}: comm.{key} must be a mapping of CommOptions fields and flags; got {val!r}")
        fields = {k: v for k, v in val.items() if k != "flags"}
        opts = comm_options_from_dict(fields, f"{where}: comm.{key}")
        assert opts is not None  # a mapping always gives options
        comm_options[str(key)] = opts
        comm_flags[str(key)] = tuple(str(f) for f in val.get("flags") or ())
    return comm_options, comm_flags


def _memory(raw: dict[str, Any], where: str) -> dict[str, Any]:
    """The ``memory`` mapping as :class:`EngineSpec` keywords."""
    mem = raw.get("memory") or {}
    try:
        basis = MemoryBasis(mem.get("basis", "total"))
    except ValueError as exc:
        raise SpecError(f"{where}: memory.basis: {exc}; expected one of: "
                        f"{', '.join(b.value for b in MemoryBasis)}") from None
    return {"memory_basis": basis, "memory_fraction": mem.get("fraction"),
            "reserve_mib": {k: float(v) for k, v in (mem.get("reserve_mib") or {}).items()}}


def _max_num_seqs_rule(raw: dict[str, Any], where: str) -> dict[str, Any]:
    """The keywords of the KV-derived ``max_num_seqs`` default (SGLang's)."""
    per_context = raw.get("max_num_seqs_per_context")
    return {"max_num_seqs_le_budget": bool(raw.get("max_num_seqs_le_budget", False)),
            "max_num_seqs_kv_fraction": raw.get("max_num_seqs_kv_fraction"),
            "max_num_seqs_cap": _opt_int(raw, "max_num_seqs_cap", where),
            "max_num_seqs_per_context": float(per_context) if per_context is not None else None,
            "max_num_seqs_floor": _opt_int(raw, "max_num_seqs_floor", where)}


def engine_from_dict(raw: dict[str, Any], *, name: str) -> EngineSpec:
    """Build an :class:`EngineSpec` from a data file's mapping (see ``specs/data/engines``)."""
    where = f"engine {name!r}"
    policy, options = _scheduler(raw, where)
    kv8 = raw.get("kv_dtype_with_fp8_weights")
    comm_options, comm_flags = _comm(raw, where)
    return EngineSpec(
        name=name, engine=str(raw.get("engine", name)), version=str(raw.get("version", "")),
        source=str(raw.get("source", "")), description=str(raw.get("description", "")),
        is_default=bool(raw.get("default", False)), scheduler=policy, scheduler_options=options,
        chunked_prefill=bool(raw.get("chunked_prefill", False)), tiers=_tiers(raw, where),
        prefill_max_batch=_opt_int(raw, "prefill_max_batch", where), **_max_num_seqs_rule(raw, where),
        kv_block_size=int(raw.get("kv_block_size", 16)), **_memory(raw, where),
        preemption=str(raw.get("preemption", "recompute")), prefix_caching=bool(raw.get("prefix_caching", False)),
        fused_input_quantization=bool(raw.get("fused_input_quantization", False)),
        fused_operators=bool(raw.get("fused_operators", False)),
        kv_dtype_with_fp8_weights=DType.parse(kv8) if kv8 else None,
        default_tp=_opt_int(raw, "default_tp", where),
        default_strategy=str(raw["default_strategy"]) if raw.get("default_strategy") else None,
        steady_state_check=_flag({"steady_state_check": True, **raw}, "steady_state_check", where),
        comm_options=comm_options, comm_flags=comm_flags,
        overlap_scheduling=_flag(raw, "overlap_scheduling", where),
        frontend_s=_frontend_s(raw.get("frontend"), where),
        moe_backends=_moe_backends(raw.get("moe_backends"), where),
        prefill_host_s=_prefill_host_s(raw.get("prefill_host_us"), where),
        prefill_graphs=_prefill_graphs(raw.get("prefill_graphs"), where),
        prefix_cache_tier_load=_prefix_cache_tier_load(raw.get("prefix_cache"), where),
        cites={str(k): str(v) for k, v in (raw.get("cites") or {}).items()},
    )
