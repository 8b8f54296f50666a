"""Parallel layout of one serving instance."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from serveplan.errors import SpecError, check_int
from serveplan.specs.model import AttentionKind, ModelSpec

#: Most devices one fleet (and so one parallel group or one search) may hold: four times the largest
#: clusters serveplan plans for (16-1000 GPUs). The simulator keeps state per instance and the
#: optimizer enumerates fleets up to the budget, so a larger request would run for hours instead of
#: answering; raise it here if a planning question needs more.
MAX_FLEET_DEVICES = 4096


@dataclass(frozen=True, slots=True, kw_only=True)
class ParallelConfig:
    """How one instance spreads a model over devices.

    Parameters
    ----------
    tp:
        Tensor-parallel size of attention and dense MLPs (heads and FFN columns split).
    pp:
        Pipeline stages (layers split into ``pp`` contiguous stages).
    dp:
        Data-parallel attention ranks inside the instance (DeepSeek-style DP-attention): each rank
        runs attention for its own share of the requests with TP ``tp``; MoE layers span all
        ``tp * dp`` devices of a stage.
    ep:
        Expert-parallel size: routed experts are spread over ``ep`` devices, each expert split
        over the remaining ``tp * dp / ep`` devices. ``ep = 1`` shards every expert like a dense MLP.
    redundant_experts:
        Extra copies of the most loaded routed experts (DeepSeek's EPLB), so that ``ep`` need only
        divide ``num_experts + redundant_experts``: DeepSeek-V3's decode runs EP144 over 256 + 32
        experts, 2 per GPU; its prefill EP32 over the same 288, 9 per GPU ("DeepSeek-V3/R1
        Inference System Overview", open-infra-index, 2025). Each device holds
        ``(num_experts + redundant_experts) / ep`` experts' weights; the routed work per device
        is unchanged (the copies share their expert's tokens), and the busiest device's load is
        the profile's ``expert_imbalance``.

    The instance uses ``tp * dp * pp`` devices; ``ep`` must divide ``tp * dp``.
    """

    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1
    redundant_experts: int = 0

    def __post_init__(self) -> None:
        for fname in ("tp", "pp", "dp", "ep"):
            check_int(fname, getattr(self, fname), low=1, high=MAX_FLEET_DEVICES,
                      why="the most devices of one fleet, serveplan.specs.parallel.MAX_FLEET_DEVICES")
        if self.num_devices > MAX_FLEET_DEVICES:
            raise SpecError(f"tp*dp*pp={self.num_devices:,} devices in one instance; expected at most "
                            f"{MAX_FLEET_DEVICES:,} (serveplan.specs.parallel.MAX_FLEET_DEVICES)")
        r = self.redundant_experts
        if not isinstance(r, int) or isinstance(r, bool) or r < 0:
            raise SpecError(f"redundant_experts={r!r} must be a non-negative integer")
        if (self.tp * self.dp) % self.ep:
            raise SpecError(f"ep={self.ep} must divide tp*dp={self.tp * self.dp}")

    @property
    def num_devices(self) -> int:
        return self.tp * self.dp * self.pp

    @property
    def stage_devices(self) -> int:
        """Devices of one pipeline stage (the MoE group)."""
        return self.tp * self.dp

    def experts_per_device(self, num_experts: int) -> float:
        """Routed experts (with the redundant copies) whose weights one expert device holds."""
        return (num_experts + self.redundant_experts) / self.ep

    @property
    def expert_tp(self) -> int:
        """Devices each routed expert is split over."""
        return self.stage_devices // self.ep

    def validate_for(self, model: ModelSpec) -> None:
        """Check that the layout divides the model; raise :class:`SpecError` naming the field."""
        heads = model.num_attention_heads
        if heads % self.tp:
            raise SpecError(f"tp={self.tp} must divide num_attention_heads={heads} of {model.name!r}")
        if model.attention is AttentionKind.GQA:
            kv = model.num_key_value_heads
            if kv % self.tp and self.tp % kv:
                raise SpecError(
                    f"tp={self.tp} and num_key_value_heads={kv} of {model.name!r}: one must divide the other"
                )
        if model.intermediate_size % self.tp:
            raise SpecError(f"tp={self.tp} must divide intermediate_size={model.intermediate_size} of {model.name!r}")
        if self.pp > model.num_hidden_layers:
            raise SpecError(f"pp={self.pp} exceeds num_hidden_layers={model.num_hidden_layers} of {model.name!r}")
        if self.ep > 1:
            if not model.is_moe:
                raise SpecError(f"ep={self.ep} needs a mixture-of-experts model; {model.name!r} is dense")
            physical = model.num_experts + self.redundant_experts
            if physical % self.ep:
                extra = f" + redundant_experts={self.redundant_experts}" if self.redundant_experts else ""
                raise SpecError(f"ep={self.ep} must divide num_experts={model.num_experts}{extra} of {model.name!r}"
                                f" (give redundant_experts so that it does, e.g. EP144 over 256 + 32)")
        elif self.redundant_experts and not model.is_moe:
            raise SpecError(f"redundant_experts={self.redundant_experts} needs a mixture-of-experts model; "
                            f"{model.name!r} is dense")
        if model.is_moe and model.moe_intermediate_size % self.expert_tp:
            raise SpecError(
                f"expert split tp*dp/ep={self.expert_tp} must divide moe_intermediate_size="
                f"{model.moe_intermediate_size} of {model.name!r}"
            )

    def with_(self, **changes: Any) -> ParallelConfig:
        return dataclasses.replace(self, **changes)

    def label(self) -> str:
        parts = [f"tp{self.tp}"]
        if self.pp > 1:
            parts.append(f"pp{self.pp}")
        if self.dp > 1:
            parts.append(f"dp{self.dp}")
        if self.ep > 1:
            parts.append(f"ep{self.ep}")
        if self.redundant_experts:
            parts.append(f"r{self.redundant_experts}")
        return "-".join(parts)
