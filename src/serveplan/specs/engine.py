"""Serving engines: a batching mechanism plus the defaults an engine version ships with.

Each bundled engine version is one data file ``specs/data/engines/<id>.yaml`` (``vllm-0.11``,
``sglang-0.5``, ``trtllm-1.2``, ``bestserve``) naming its mechanism and every default the
simulator needs, each with the file and function of the engine's own source it was read from.
A new engine or version is a new file; ``--engine vllm`` picks the file marked ``default: true``
among those of ``engine: vllm``.

What an engine fixes (:class:`EngineSpec`):

* ``mechanism``: the scheduler (:class:`Mechanism`; the policies live in
  :mod:`serveplan.sim.schedulers`).
* Device-dependent limits (:class:`DeviceTier`, first matching row wins): sequences per step,
  new tokens per step (online server and offline batch values), the prefill chunk.
* KV memory: block size, how the memory fraction is applied (:class:`MemoryBasis`), how admission
  reserves room for the tokens still to come (:class:`Admission`), preemption by recompute.

:meth:`EngineSpec.limits` resolves the limits of one device and layout into
:class:`EngineLimits`; :meth:`EngineSpec.memory_utilization` turns the engine's memory rule into
the share of device memory the estimator may fill with weights, activations and KV cache.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from serveplan.errors import SpecError, check_int, check_number
from serveplan.specs.comm import CommOptions, comm_options_from_dict
from serveplan.specs.hardware import DeviceSpec
from serveplan.specs.profile import EfficiencyProfile, Module
from serveplan.units import DType, GiB, MiB


class Mechanism(str, Enum):
    """Batching policies, named by what they do (the engines that use them in brackets)."""

    #: one token budget per step: running requests first (decodes, then the prompt in progress),
    #: then waiting prompts FCFS in chunks of what the budget leaves (vLLM V1).
    CHUNKED_PREFILL = "chunked-prefill"
    #: a step prefills waiting prompts when any can be admitted, else decodes; prompts are chunked
    #: and decodes join prefill steps only when mixing is enabled (SGLang).
    PREFILL_PRIORITY = "prefill-priority"
    #: every step decodes all running requests and adds whole prompts FCFS while the token budget
    #: allows; admission reserves each request's full length, so nothing is ever preempted
    #: (TensorRT-LLM in-flight batching, GUARANTEED_NO_EVICT).
    INFLIGHT_NO_EVICT = "inflight-no-evict"
    #: prefill steps of whole prompts first, never mixed with decodes (vLLM v0, BestServe).
    PREFILL_FIRST = "prefill-first"

    @property
    def scheduler(self) -> str:
        """Name of the policy in the scheduler registry."""
        return _SCHEDULER_OF[self]


_SCHEDULER_OF = {
    Mechanism.CHUNKED_PREFILL: "chunked-prefill",
    Mechanism.PREFILL_PRIORITY: "prefill-priority",
    Mechanism.INFLIGHT_NO_EVICT: "inflight-no-evict",
    Mechanism.PREFILL_FIRST: "prefill-first",
}


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


class Admission(str, Enum):
    """What a waiting request must find free in the KV cache to be admitted."""

    #: its prompt (vLLM: blocks are allocated as tokens come, later shortage preempts).
    PROMPT = "prompt"
    #: its prompt plus ``new_token_ratio x`` the remaining output of every running request and
    #: its own (SGLang ``PrefillAdder``; the ratio decays while no request is retracted).
    RESERVE_RATIO = "reserve-ratio"
    #: its whole length, prompt plus output (TensorRT-LLM GUARANTEED_NO_EVICT).
    FULL = "full"


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
    max_prefill_tokens: int | None
    prefill_max_batch: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineSpec:
    """One engine version: its mechanism and defaults (see the module docstring).

    Parameters
    ----------
    name, engine, version, source:
        Id (the data file's stem), engine family, version and the source it was read from.
    mechanism:
        The batching policy.
    mixed:
        Whether decodes and prefills share a step.
    chunked_prefill:
        Whether prompts are split across steps.
    tiers:
        Device-dependent limits, first match wins.
    max_prefill_tokens:
        New prompt tokens of one prefill step (SGLang ``max_prefill_tokens``).
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
    admission:
        :class:`Admission`; ``new_token_ratio``, ``min_ratio_factor``, ``ratio_decay_steps`` and
        ``clip_tokens`` parametrise ``reserve-ratio``.
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
    comm_options:
        Opt-in expert-parallel communication setups the engine offers (name -> :class:`CommOptions`,
        e.g. SGLang's ``deepep``), none applied unless asked for (:meth:`comm`); the engines'
        default is none of them (plain NCCL collectives).
    comm_flags:
        Name -> the engine's command-line flags that switch the setup on.
    batch_wait_iters, batch_wait_tokens_ratio:
        TensorRT-LLM's batch waiting (``batch_wait_timeout_iters``, ``batch_wait_max_tokens_ratio``;
        both 0, off, by default): prompts are held back while requests decode until the step's
        tokens reach ``ratio x`` the token budget or they have waited that many steps
        (:class:`~serveplan.sim.schedulers.inflight.InflightNoEvictScheduler`).
    adp_timeout_iters, adp_batching_wait_iters:
        TensorRT-LLM's attention-DP balance (``attention_dp_config``: ``enable_balance`` off by
        default, ``timeout_iters`` 50 and ``batching_wait_iters`` 10 when on, ``llm_args.py``
        ``AttentionDpConfig``); ``adp_timeout_iters`` None: off. With attention data parallelism
        prompts are held back until every rank has one, for up to the timeout
        (:class:`~serveplan.sim.schedulers.inflight.InflightNoEvictScheduler`).
    scheduler_recv_interval:
        SGLang's ``--scheduler-recv-interval`` (``ServerArgs.scheduler_recv_interval``, default 1:
        every loop). Above 1 the scheduler takes new requests in only when a counter reaches it;
        each decode step adds 1 and any step with prompt tokens adds 1000
        (``managers/scheduler_recv_skipper.py`` ``SchedulerRecvSkipper``: ``ForwardMode.DECODE: 1``,
        any other mode ``_DEFAULT_WEIGHT = 1000``), so while requests decode a new one waits
        for the next multiple of that many decode steps (:class:`~serveplan.sim.instance.Instance`).
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
    mechanism: Mechanism
    mixed: bool
    chunked_prefill: bool
    tiers: tuple[DeviceTier, ...]
    max_prefill_tokens: int | None = None
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
    admission: Admission = Admission.PROMPT
    new_token_ratio: float = 0.0
    min_ratio_factor: float = 1.0
    ratio_decay_steps: int = 1
    clip_tokens: int = 0
    preemption: str = "recompute"
    prefix_caching: bool = False
    fused_input_quantization: bool = False
    fused_operators: bool = False
    kv_dtype_with_fp8_weights: DType | None = None
    default_tp: int | None = None
    comm_options: dict[str, CommOptions] = field(default_factory=dict)
    comm_flags: dict[str, tuple[str, ...]] = field(default_factory=dict)
    batch_wait_iters: int = 0
    batch_wait_tokens_ratio: float = 0.0
    adp_timeout_iters: int | None = None
    adp_batching_wait_iters: int = 0
    scheduler_recv_interval: int = 1
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
        if self.batch_wait_iters < 0 or not 0 <= self.batch_wait_tokens_ratio <= 1:
            raise SpecError(f"engine {self.name!r}: batch_wait timeout_iters={self.batch_wait_iters} must be >= 0 "
                            f"and max_tokens_ratio={self.batch_wait_tokens_ratio} in [0, 1]")
        waits = self.batch_wait_iters or self.batch_wait_tokens_ratio
        if waits and self.mechanism is not Mechanism.INFLIGHT_NO_EVICT:
            raise SpecError(f"engine {self.name!r}: batch_wait is TensorRT-LLM's (mechanism inflight-no-evict); "
                            f"got mechanism {self.mechanism.value}")
        if self.adp_timeout_iters is not None:
            if self.adp_timeout_iters < 0 or self.adp_batching_wait_iters < 0:
                raise SpecError(f"engine {self.name!r}: attention_dp_balance timeout_iters={self.adp_timeout_iters} "
                                f"and batching_wait_iters={self.adp_batching_wait_iters} must be >= 0")
            if self.mechanism is not Mechanism.INFLIGHT_NO_EVICT:
                raise SpecError(f"engine {self.name!r}: attention_dp_balance is TensorRT-LLM's (mechanism "
                                f"inflight-no-evict); got mechanism {self.mechanism.value}")
        if self.scheduler_recv_interval < 1:
            raise SpecError(f"engine {self.name!r}: scheduler_recv_interval={self.scheduler_recv_interval} must be "
                            ">= 1 (1: requests taken in before every step)")
        if self.scheduler_recv_interval > 1 and self.mechanism is not Mechanism.PREFILL_PRIORITY:
            raise SpecError(f"engine {self.name!r}: scheduler_recv_interval is SGLang's (mechanism "
                            f"prefill-priority); got mechanism {self.mechanism.value}")
        if self.admission is Admission.RESERVE_RATIO and not 0 < self.new_token_ratio <= 1:
            raise SpecError(f"engine {self.name!r}: new_token_ratio={self.new_token_ratio} must be in (0, 1]")

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
                            max_prefill_tokens=self.max_prefill_tokens, prefill_max_batch=self.prefill_max_batch)

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
        out = (profile.for_engine(self.engine, fused_input_quantization=self.fused_input_quantization,
                                  fused_operators=self.fused_operators)
               .with_moe_backends(self.moe_backends)
               .with_prefill_host({Module(k): v for k, v in self.prefill_host_s.items()}))
        graphs = self.graph_tokens()
        return out.with_(prefill_graph_tokens=graphs) if graphs != out.prefill_graph_tokens else out

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
        return {"name": self.name, "engine": self.engine, "version": self.version, "mechanism": self.mechanism.value,
                "mixed": self.mixed, "chunked_prefill": self.chunked_prefill, "kv_block_size": self.kv_block_size,
                "memory_basis": self.memory_basis.value, "memory_fraction": self.memory_fraction,
                "admission": self.admission.value, "preemption": self.preemption, "source": self.source,
                **({"batch_wait": {"timeout_iters": self.batch_wait_iters,
                                   "max_tokens_ratio": self.batch_wait_tokens_ratio}}
                   if self.batch_wait_iters or self.batch_wait_tokens_ratio else {}),
                **({"attention_dp_balance": {"timeout_iters": self.adp_timeout_iters,
                                             "batching_wait_iters": self.adp_batching_wait_iters}}
                   if self.adp_timeout_iters is not None else {}),
                **({"scheduler_recv_interval": self.scheduler_recv_interval}
                   if self.scheduler_recv_interval > 1 else {}),
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


def _number(raw: dict[str, Any], key: str, where: str, kind: type[int] | type[float]) -> Any:
    """``raw[key]`` as ``kind`` (0 when absent); a :class:`SpecError` naming it when not a number."""
    v = raw.get(key, 0)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (kind is int and not float(v).is_integer()):
        raise SpecError(f"{where}: {key}={v!r} must be {'an integer' if kind is int else 'a number'}")
    return kind(v)


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


def engine_from_dict(raw: dict[str, Any], *, name: str) -> EngineSpec:
    """Build an :class:`EngineSpec` from a data file's mapping (see ``specs/data/engines``)."""
    where = f"engine {name!r}"
    try:
        mech = Mechanism(raw["mechanism"])
    except KeyError:
        raise SpecError(f"{where}: missing field 'mechanism'; expected one of: "
                        f"{', '.join(m.value for m in Mechanism)}") from None
    except ValueError:
        raise SpecError(f"{where}: mechanism={raw['mechanism']!r}; expected one of: "
                        f"{', '.join(m.value for m in Mechanism)}") from None
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
    mem = raw.get("memory") or {}
    adm = raw.get("admission") or {}
    try:
        basis = MemoryBasis(mem.get("basis", "total"))
        admission = Admission(adm.get("kind", "prompt"))
    except ValueError as exc:
        raise SpecError(f"{where}: {exc}") from None
    kv8 = raw.get("kv_dtype_with_fp8_weights")
    bw = raw.get("batch_wait") or {}
    if not isinstance(bw, dict):
        raise SpecError(f"{where}: batch_wait must map timeout_iters and max_tokens_ratio; got {bw!r}")
    adp = raw.get("attention_dp_balance")
    if adp is not None and not isinstance(adp, dict):
        raise SpecError(f"{where}: attention_dp_balance must map timeout_iters and batching_wait_iters "
                        f"(TensorRT-LLM attention_dp_config); got {adp!r}")
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
    return EngineSpec(
        name=name, engine=str(raw.get("engine", name)), version=str(raw.get("version", "")),
        source=str(raw.get("source", "")), description=str(raw.get("description", "")),
        is_default=bool(raw.get("default", False)), mechanism=mech, mixed=bool(raw.get("mixed", False)),
        chunked_prefill=bool(raw.get("chunked_prefill", False)), tiers=tuple(tiers),
        max_prefill_tokens=_opt_int(raw, "max_prefill_tokens", where),
        prefill_max_batch=_opt_int(raw, "prefill_max_batch", where),
        max_num_seqs_le_budget=bool(raw.get("max_num_seqs_le_budget", False)),
        max_num_seqs_kv_fraction=raw.get("max_num_seqs_kv_fraction"),
        max_num_seqs_cap=_opt_int(raw, "max_num_seqs_cap", where),
        max_num_seqs_per_context=(float(raw["max_num_seqs_per_context"])
                                  if raw.get("max_num_seqs_per_context") is not None else None),
        max_num_seqs_floor=_opt_int(raw, "max_num_seqs_floor", where),
        kv_block_size=int(raw.get("kv_block_size", 16)), memory_basis=basis,
        memory_fraction=mem.get("fraction"),
        reserve_mib={k: float(v) for k, v in (mem.get("reserve_mib") or {}).items()},
        admission=admission, new_token_ratio=float(adm.get("new_token_ratio", 0.0)),
        min_ratio_factor=float(adm.get("min_ratio_factor", 1.0)),
        ratio_decay_steps=int(adm.get("decay_steps", 1)), clip_tokens=int(adm.get("clip_tokens", 0)),
        preemption=str(raw.get("preemption", "recompute")), prefix_caching=bool(raw.get("prefix_caching", False)),
        fused_input_quantization=bool(raw.get("fused_input_quantization", False)),
        fused_operators=bool(raw.get("fused_operators", False)),
        kv_dtype_with_fp8_weights=DType.parse(kv8) if kv8 else None,
        default_tp=_opt_int(raw, "default_tp", where),
        comm_options=comm_options, comm_flags=comm_flags,
        batch_wait_iters=_number(bw, "timeout_iters", f"{where}: batch_wait", int),
        batch_wait_tokens_ratio=_number(bw, "max_tokens_ratio", f"{where}: batch_wait", float),
        # TensorRT-LLM AttentionDpConfig defaults when enable_balance is on: timeout 50, batching wait 10
        adp_timeout_iters=(None if adp is None else _number({"timeout_iters": 50, **adp}, "timeout_iters",
                                                            f"{where}: attention_dp_balance", int)),
        adp_batching_wait_iters=(0 if adp is None else _number({"batching_wait_iters": 10, **adp},
                                                               "batching_wait_iters",
                                                               f"{where}: attention_dp_balance", int)),
        scheduler_recv_interval=(_number(raw, "scheduler_recv_interval", where, int)
                                 if "scheduler_recv_interval" in raw else 1),
        overlap_scheduling=_flag(raw, "overlap_scheduling", where),
        frontend_s=_frontend_s(raw.get("frontend"), where),
        moe_backends=_moe_backends(raw.get("moe_backends"), where),
        prefill_host_s=_prefill_host_s(raw.get("prefill_host_us"), where),
        prefill_graphs=_prefill_graphs(raw.get("prefill_graphs"), where),
        prefix_cache_tier_load=_prefix_cache_tier_load(raw.get("prefix_cache"), where),
        cites={str(k): str(v) for k, v in (raw.get("cites") or {}).items()},
    )
