"""Efficiency profile: how close to the roofline a software stack gets on a device.

Kept apart from the hardware datasheet (:mod:`serveplan.specs.hardware`) because the same device
runs at different efficiencies under different inference engines, and because these are the
numbers that calibration (``serveplan calibrate``) fits. Every bundled value carries provenance in
its YAML file.

Symbols (BestServe Appendix A): ``compute`` = MFU ``e_c``, ``memory`` = MBU ``e_m``,
``comm`` = communication efficiency ``e_+``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from serveplan.errors import SpecError, check_int, check_number
from serveplan.specs.comm import CommOptions, comm_options_from_dict
from serveplan.specs.kernels import KernelCurves, kernel_curves_from_dict


class Phase(str, Enum):
    """Phase of a step: PREFILL when it computes prompt tokens (a mixed step counts as prefill),
    else DECODE. A ``str`` enum (``Phase.DECODE == "decode"``), so string keys and comparisons
    keep working; ``str()`` and f-strings give the value."""

    PREFILL = "prefill"
    DECODE = "decode"

    def __str__(self) -> str:
        return str(self.value)


#: Phase names, for validating data files and keys.
PHASES: tuple[str, ...] = tuple(p.value for p in Phase)


class Module(str, Enum):
    """Modules of a transformer layer as dispatched by the host (BestServe §3.3.3)."""

    NORM = "norm"
    ATTENTION = "attention"
    MLP = "mlp"
    MOE = "moe"
    LM_HEAD = "lm_head"


class AttentionImpl(str, Enum):
    """EAGER: unfused HF-style attention of BestServe Tables 8-11 (scores materialised).
    FUSED: one flash-attention style kernel (scores never leave on-chip memory)."""

    EAGER = "eager"
    FUSED = "fused"


class CommModel(str, Enum):
    """BESTSERVE: eq. (8) ``b*s*h/t / (e_+ S_+)``. ALPHA_BETA: ring collective on the link."""

    BESTSERVE = "bestserve"
    ALPHA_BETA = "alpha_beta"


@dataclass(frozen=True, slots=True, kw_only=True)
class PhaseEfficiency:
    """MFU, MBU and communication efficiency of one phase, each in (0, 1].

    ``attention_compute`` / ``attention_memory`` optionally give the attention kernels (QK^T,
    softmax, AV, or the fused kernel) their own factors, which calibration shows can differ from
    the GEMMs' (e.g. SDPA at 0.43 of peak against 0.77 for GEMMs on a CPU); ``None`` = same as
    ``compute`` / ``memory``.
    """

    compute: float
    memory: float
    comm: float
    attention_compute: float | None = None
    attention_memory: float | None = None

    def __post_init__(self) -> None:
        for fname in ("compute", "memory", "comm", "attention_compute", "attention_memory"):
            v = getattr(self, fname)
            if v is None and fname.startswith("attention"):
                continue
            if isinstance(v, bool) or not (isinstance(v, (int, float)) and 0 < v <= 1):
                raise SpecError(f"efficiency {fname}={v!r} must be in (0, 1] (a fraction of the datasheet peak)")

    @property
    def attn_compute(self) -> float:
        return self.attention_compute if self.attention_compute is not None else self.compute

    @property
    def attn_memory(self) -> float:
        return self.attention_memory if self.attention_memory is not None else self.memory


@dataclass(frozen=True, slots=True, kw_only=True)
class EfficiencyProfile:
    """Efficiency factors, dispatch times and modelling choices for one software stack.

    Parameters
    ----------
    prefill, decode:
        Factors for steps with and without prefill tokens (a mixed step uses ``prefill``).
    dispatch_s:
        Host time to dispatch one module of one layer (BestServe §3.3.3, Table 3).
    dispatch_hidden_in_decode:
        True when decode steps replay a captured graph (CUDA graphs): no dispatch term.
    prefill_dispatch_s:
        Host time per module of a step that runs eagerly, outside CUDA graphs, where it differs
        from ``dispatch_s``: every step with prompt tokens, or with :attr:`prefill_graph_tokens`
        every step larger than that. Its Python and launch work per module is what the host pays
        (set by :meth:`with_prefill_host`; empty: ``dispatch_s``).
    prefill_graph_tokens:
        Steps of at most this many tokens (per data-parallel rank) replay a captured CUDA graph:
        with prompt tokens they pay ``dispatch_s``, without none (``dispatch_hidden_in_decode``);
        larger steps run without a graph and pay :attr:`prefill_dispatch_s` where it has the
        module, else ``dispatch_s``, decode steps included (0: no bound, every step with prompt
        tokens pays :attr:`prefill_dispatch_s` and decode steps keep ``dispatch_hidden_in_decode``).
        vLLM captures piecewise graphs up to ``max_cudagraph_capture_size`` tokens and runs
        larger steps without (:meth:`~serveplan.specs.engine.EngineSpec.graph_tokens`).
    kappa_update, kappa_repeat_kv, kappa_upcast:
        Bytes/s of the decode-only data movements of eq. (12); 0 means "memory roofline".
    attention_impl, comm_model:
        See :class:`AttentionImpl` and :class:`CommModel`.
    include_lm_head:
        Count the final norm and logits projection of the last token of each sequence
        (BestServe omits it, §5).
    tile_quantization:
        Charge GEMMs for the rows of partly filled tiles (Sarathi §4.4; model in estimator/step.py).
    expert_imbalance:
        Load of the busiest expert device over the mean (>= 1), for expert parallelism.
    matmul_size_curve:
        Optional per phase ``(rows, time_over_roofline)`` points: a matrix multiplication with
        ``m`` rows takes ``ratio(m) * max(W / S_c, Q / S_m)`` (peak roofline), the ratio
        interpolated linearly in ``log m`` and held constant outside the points. Replaces the
        phase's MFU/MBU for GEMMs when a calibration shows that their efficiency depends on the
        row count (e.g. CPU BLAS kernels slow down at 4-16 rows); fitted by ``serveplan calibrate``.
    kernels:
        Measured shape-aware curves (:class:`~serveplan.specs.kernels.KernelCurves`: GEMM by rows,
        weight size and format; fused attention by length, parallelism and KV format; NCCL
        collectives by size and rank count). Where a curve covers an operator it replaces the
        factors and the size curve; other operators keep them.
    engine_kernels:
        GEMM and attention curves of other engines' kernels (``trtllm``, ``sglang``), keyed by
        engine family; :meth:`for_engine` swaps them in (collectives stay ``kernels``').
    measured_from:
        One line naming the measurements a measured profile was fitted to (``serveplan hardware``).
    fused_operators:
        Price the operator list the serving engines run (fused residual add + norm, one QKV GEMM
        with RoPE in place, one gate-up GEMM with ``silu_and_mul``;
        :func:`~serveplan.ops.graph.build_layer_groups`) instead of BestServe's eager list. Set by
        :meth:`for_engine` for engines whose file says ``fused_operators: true``.
    comm:
        How the stack runs expert-parallel communication (:class:`~serveplan.specs.comm.CommOptions`:
        two-batch overlap, FP8 dispatch, node-deduplicated all-to-all); ``None``: none of them.
        ``profile.with_(comm=CommOptions.deepep())`` describes a DeepEP deployment.
    """

    name: str
    source: str = ""
    description: str = ""
    hardware: str = ""
    prefill: PhaseEfficiency
    decode: PhaseEfficiency
    dispatch_s: Mapping[Module, float]
    dispatch_hidden_in_decode: bool = False
    prefill_dispatch_s: Mapping[Module, float] = field(default_factory=dict)
    prefill_graph_tokens: int = 0
    kappa_update: float = 0.0
    kappa_repeat_kv: float = 0.0
    kappa_upcast: float = 0.0
    attention_impl: AttentionImpl = AttentionImpl.FUSED
    comm_model: CommModel = CommModel.ALPHA_BETA
    include_lm_head: bool = True
    tile_quantization: bool = False
    expert_imbalance: float = 1.0
    uncertainty: Mapping[str, float] = field(default_factory=dict)
    matmul_size_curve: Mapping[str, tuple[tuple[float, ...], tuple[float, ...]]] = field(default_factory=dict)
    kernels: KernelCurves | None = None
    engine_kernels: Mapping[str, KernelCurves] = field(default_factory=dict)
    measured_from: str = ""
    comm: CommOptions | None = None
    fused_operators: bool = False
    #: profiles derived from this one, by who derived them (:meth:`EngineSpec.profile_for`): the
    #: same object each time, so the caches keyed on a profile meet it again (a pure function of
    #: this value; not compared, hashed or printed)
    derived: dict[Any, Any] = field(default_factory=dict, init=False, compare=False, hash=False, repr=False)

    def __post_init__(self) -> None:
        for ph, (rows, ratio) in self.matmul_size_curve.items():
            if ph not in PHASES:
                raise SpecError(f"profile {self.name!r}: matmul_size_curve phase {ph!r}; expected prefill or decode")
            if len(rows) != len(ratio) or len(rows) < 1:
                raise SpecError(f"profile {self.name!r}: matmul_size_curve.{ph} needs as many rows as ratios (>= 1)")
            if any(r <= 0 for r in rows) or list(rows) != sorted(rows) or any(v <= 0 for v in ratio):
                raise SpecError(f"profile {self.name!r}: matmul_size_curve.{ph}: rows must be positive and "
                                f"increasing, ratios positive")
        where = f"profile {self.name!r}"
        for label, table in (("dispatch_s", self.dispatch_s), ("prefill_dispatch_s", self.prefill_dispatch_s)):
            for m, v in table.items():
                check_number(f"{where}: {label}[{m.value}]", v, low=0, unit="s")
        check_int(f"{where}: prefill_graph_tokens", self.prefill_graph_tokens, low=0,
                     why="tokens of the largest step that replays a captured graph")
        for fname in ("kappa_update", "kappa_repeat_kv", "kappa_upcast"):
            check_number(f"{where}: {fname}", getattr(self, fname), low=0, unit="bytes/s; 0 = memory roofline")
        check_number(f"{where}: expert_imbalance", self.expert_imbalance, low=1,
                     why="the busiest expert's load over the mean")
        for k, v in self.uncertainty.items():
            check_number(f"{where}: uncertainty[{k}]", v, low=0)

    def dispatch(self, module: Module, phase: Phase | str | None = None) -> float:
        """Host time to dispatch ``module`` in a step of ``phase`` (prefill: :attr:`prefill_dispatch_s`
        where it has the module)."""
        if phase == Phase.PREFILL and module in self.prefill_dispatch_s:
            return float(self.prefill_dispatch_s[module])
        return float(self.dispatch_s.get(module, 0.0))

    def with_prefill_host(self, host_s: Mapping[Module, float]) -> EfficiencyProfile:
        """This profile with the host time per module of steps with prompt tokens set from an
        engine that runs them eagerly (``EngineSpec.prefill_host_s``); decode steps keep theirs."""
        return self.with_(prefill_dispatch_s={**self.prefill_dispatch_s, **host_s}) if host_s else self

    def efficiency(self, phase: Phase | str) -> PhaseEfficiency:
        """Factors of a phase (``prefill`` or ``decode``)."""
        return self.prefill if phase == Phase.PREFILL else self.decode

    def for_engine(self, engine: str, *, fused_input_quantization: bool = False,
                   fused_operators: bool = False) -> EfficiencyProfile:
        """This profile with the GEMM and attention curves measured for ``engine``'s own kernels
        (``engine_kernels``), or unchanged when it has none for that engine.

        ``fused_operators``: the engine runs the fused operator list (sets :attr:`fused_operators`).

        ``fused_input_quantization``: the engine quantizes a GEMM's input inside the kernel before
        it, so the engine's GEMM curves lose their separate quantization pass and keep at most the
        per-call floor of this profile's own (CUDA-graph timed) curve of the same format
        (:meth:`~serveplan.specs.kernels.GemmCurve.with_fused_input`)."""
        prof = self.with_(fused_operators=True) if fused_operators and not self.fused_operators else self
        ek = self.engine_kernels.get(engine)
        if ek is None or self.kernels is None:
            return prof
        gemm = ek.gemm or self.kernels.gemm
        if fused_input_quantization and ek.gemm:
            base = self.kernels.gemm
            gemm = {dt: (c.with_fused_input(base[dt].overhead_s) if dt in base else c) for dt, c in gemm.items()}
        return prof.with_(kernels=dataclasses.replace(self.kernels, gemm=gemm,
                                                      attention=ek.attention or self.kernels.attention,
                                                      moe=ek.moe or self.kernels.moe,
                                                      moe_deepep=ek.moe_deepep or self.kernels.moe_deepep))

    def with_moe_backends(self, backends: Mapping[str, str]) -> EfficiencyProfile:
        """This profile with the fused-MoE curve of each weight format in ``backends`` replaced by
        the curve of that opt-in backend (``kernels.moe["<format>@<backend>"]``, fitted to the
        tables that time it: ``calibrate.selection.MOE_BACKENDS``). A constant-factor profile has no
        MoE curve to replace and is returned as it is.

        Raises
        ------
        SpecError
            The profile's curves include none for that backend and format."""
        if not backends or self.kernels is None:
            return self
        moe = dict(self.kernels.moe)
        for fmt, backend in backends.items():
            key = f"{fmt}@{backend}"
            if key not in moe:
                offered = ", ".join(sorted(k.split("@", 1)[1] for k in moe if k.startswith(f"{fmt}@")))
                raise SpecError(f"moe_backends: {fmt}={backend!r} has no fused-MoE curve in profile {self.name!r}; "
                                f"expected one of: {offered or f'none (its tables time no other {fmt} backend)'}")
            moe[fmt] = moe[key]
        return self.with_(kernels=dataclasses.replace(self.kernels, moe=moe))

    def with_(self, **changes: Any) -> EfficiencyProfile:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """YAML-ready dictionary (inverse of :func:`profile_from_dict`)."""
        return {
            "name": self.name,
            "source": self.source,
            "description": self.description,
            "hardware": self.hardware,
            "prefill": {k: v for k, v in dataclasses.asdict(self.prefill).items() if v is not None},
            "decode": {k: v for k, v in dataclasses.asdict(self.decode).items() if v is not None},
            "dispatch_s": {m.value: float(v) for m, v in self.dispatch_s.items()},
            "dispatch_hidden_in_decode": self.dispatch_hidden_in_decode,
            "kappa_update": self.kappa_update,
            "kappa_repeat_kv": self.kappa_repeat_kv,
            "kappa_upcast": self.kappa_upcast,
            "attention_impl": self.attention_impl.value,
            "comm_model": self.comm_model.value,
            "include_lm_head": self.include_lm_head,
            "tile_quantization": self.tile_quantization,
            "expert_imbalance": self.expert_imbalance,
            "uncertainty": dict(self.uncertainty),
            **({"matmul_size_curve": {ph: {"rows": list(r), "time_over_roofline": list(v)}
                                      for ph, (r, v) in self.matmul_size_curve.items()}}
               if self.matmul_size_curve else {}),
            **({"measured_from": self.measured_from} if self.measured_from else {}),
            **({"comm": self.comm.to_dict()} if self.comm is not None else {}),
            **({"fused_operators": True} if self.fused_operators else {}),
            **({"kernels": self.kernels.to_dict()} if self.kernels is not None else {}),
            **({"engine_kernels": {e: k.to_dict() for e, k in self.engine_kernels.items()}}
               if self.engine_kernels else {}),
        }


def _enum(cls: type[Enum], value: Any, where: str) -> Any:
    try:
        return cls(str(value))
    except ValueError:
        opts = ", ".join(str(e.value) for e in cls)
        raise SpecError(f"{where}={value!r}; expected one of: {opts}") from None


def profile_from_dict(raw: Mapping[str, Any], *, name: str | None = None) -> EfficiencyProfile:
    """Build a profile from the YAML schema of ``data/profiles/*.yaml``."""
    if not isinstance(raw, Mapping):
        raise SpecError(f"efficiency profile must be a mapping, got {type(raw).__name__}")
    name = name or str(raw.get("name", "custom"))
    for key in PHASES:
        if not isinstance(raw.get(key), Mapping):
            raise SpecError(f"profile {name!r}: field {key!r} must map compute/memory/comm to factors")

    def phase(key: str) -> PhaseEfficiency:
        d = raw[key]
        try:
            def factor(k: str) -> float:
                return check_number(f"{key}.{k}", d[k], low=0, high=1, low_open=True,
                                    why="a fraction of the datasheet peak")

            opt = {k: factor(k) for k in ("attention_compute", "attention_memory") if d.get(k) is not None}
            return PhaseEfficiency(compute=factor("compute"), memory=factor("memory"), comm=factor("comm"), **opt)
        except KeyError as exc:
            raise SpecError(f"profile {name!r}: {key}.{exc.args[0]} is missing") from None
        except SpecError as exc:
            raise SpecError(f"profile {name!r}: {exc}") from None
        except (TypeError, ValueError):
            raise SpecError(f"profile {name!r}: {key} factors must be numbers in (0, 1], got {d!r}") from None

    disp_raw = raw.get("dispatch_s", {}) or {}
    if not isinstance(disp_raw, Mapping):
        raise SpecError(f"profile {name!r}: dispatch_s must map modules to seconds, got {disp_raw!r:.60}")
    dispatch = {}
    for k, v in disp_raw.items():
        dispatch[_enum(Module, k, f"profile {name!r}: dispatch_s key")] = check_number(
            f"profile {name!r}: dispatch_s[{k}]", v, low=0, unit="s")

    def num(key: str, default: float, low: float) -> float:
        return check_number(f"profile {name!r}: {key}", raw.get(key, default), low=low)

    unc = raw.get("uncertainty") or {}
    if not isinstance(unc, Mapping):
        raise SpecError(f"profile {name!r}: uncertainty must map factor names to numbers, got {unc!r:.60}")
    return EfficiencyProfile(
        name=name,
        source=str(raw.get("source", "")),
        description=str(raw.get("description", "")),
        hardware=str(raw.get("hardware", "")),
        prefill=phase("prefill"),
        decode=phase("decode"),
        dispatch_s=dispatch,
        dispatch_hidden_in_decode=bool(raw.get("dispatch_hidden_in_decode", False)),
        kappa_update=num("kappa_update", 0.0, 0),
        kappa_repeat_kv=num("kappa_repeat_kv", 0.0, 0),
        kappa_upcast=num("kappa_upcast", 0.0, 0),
        attention_impl=_enum(AttentionImpl, raw.get("attention_impl", "fused"), f"profile {name!r}: attention_impl"),
        comm_model=_enum(CommModel, raw.get("comm_model", "alpha_beta"), f"profile {name!r}: comm_model"),
        include_lm_head=bool(raw.get("include_lm_head", True)),
        tile_quantization=bool(raw.get("tile_quantization", False)),
        expert_imbalance=num("expert_imbalance", 1.0, 1),
        uncertainty={str(k): check_number(f"profile {name!r}: uncertainty[{k}]", v, low=0) for k, v in unc.items()},
        matmul_size_curve=_size_curve(raw.get("matmul_size_curve"), name),
        kernels=kernel_curves_from_dict(raw.get("kernels"), f"profile {name!r}: kernels"),
        engine_kernels=_engine_kernels(raw.get("engine_kernels"), name),
        measured_from=str(raw.get("measured_from", "")),
        comm=comm_options_from_dict(raw.get("comm"), f"profile {name!r}: comm"),
        fused_operators=bool(raw.get("fused_operators", False)),
    )


def _size_curve(raw: Any, name: str) -> dict[str, tuple[tuple[float, ...], tuple[float, ...]]]:
    if not raw:
        return {}
    if not isinstance(raw, Mapping):
        raise SpecError(f"profile {name!r}: matmul_size_curve must map prefill/decode to rows and ratios")
    out = {}
    for ph, d in raw.items():
        if ph == "held_out":
            continue  # cross-validation summary written next to the curve
        try:
            out[str(ph)] = (tuple(float(v) for v in d["rows"]), tuple(float(v) for v in d["time_over_roofline"]))
        except (KeyError, TypeError, ValueError):
            raise SpecError(f"profile {name!r}: matmul_size_curve.{ph} needs numeric lists 'rows' and "
                            f"'time_over_roofline'") from None
    return out


def _engine_kernels(raw: Any, name: str) -> dict[str, KernelCurves]:
    if not raw:
        return {}
    if not isinstance(raw, Mapping):
        raise SpecError(f"profile {name!r}: engine_kernels must map engine families to kernel curves")
    out = {}
    for engine, section in raw.items():
        curves = kernel_curves_from_dict(section, f"profile {name!r}: engine_kernels.{engine}")
        if curves is not None:
            out[str(engine)] = curves
    return out
