"""How an engine runs the communication of expert parallelism: overlap, formats, routing of tokens.

One frozen value, :class:`CommOptions`, chosen per engine deployment and handed to the estimator
(``Estimator(..., comm=CommOptions.deepep())``). The default (no overlap, 16-bit payloads, one
copy of a token per routed expert) is what an engine without a dedicated all-to-all library does
(vLLM/SGLang with NCCL all-to-all or all-gather MoE). :meth:`CommOptions.deepep` is the DeepEP
deployment of DeepSeek's own inference system and of SGLang's large-scale EP
(``--moe-a2a-backend deepep --enable-two-batch-overlap``):

* dispatch in FP8, combine in BF16: "matrix multiplications and dispatch transmissions adopt the
  FP8 format aligned with training, while core MLA computations and combine transmissions use
  the BF16 format" ("DeepSeek-V3/R1 Inference System Overview", deepseek-ai/open-infra-index,
  202502OpenSourceWeek/day_6, "Statistics of DeepSeek's Online Service"). DeepEP's FP8 dispatch
  carries one fp32 scale per 128 values (``x_scales`` of shape ``[tokens, hidden / 128]``,
  deepseek-ai/DeepEP ``buffer.py``), so 1 + 4/128 bytes per value;
* two-batch overlap: "splitting a batch of requests into two microbatches ... the communication
  cost of one microbatch is hidden behind the computation of the other" (same document,
  "Computation-Communication Overlapping"); the step-time rule is in
  :mod:`serveplan.estimator.overlap`;
* node-deduplicated dispatch: "each token is dispatched to at most 4 nodes ... tokens are first
  transmitted via IB to the GPUs with the same in-node index on their target nodes. Once they
  reach the target nodes, we will endeavor to ensure that they are instantaneously forwarded via
  NVLink" (DeepSeek-V3 technical report, arXiv:2412.19437, §3.2.2; DeepEP's normal kernels):
  a token crosses the network once per remote node it is routed to, not once per expert.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from serveplan.errors import SpecError
from serveplan.units import DType

#: DeepEP's achieved share of a 400 Gb/s NIC: its low-latency kernels reach 39-40 GB/s of RDMA
#: bandwidth at EP128-256 on H800 with CX7 (~50 GB/s maximum), 128 tokens per rank, top-8, FP8
#: dispatch and BF16 combine (deepseek-ai/DeepEP docs/legacy.md, "Low-latency kernels with pure
#: RDMA"): 39 / 50 = 0.78. Measured on the library, not fitted to any serving figure.
DEEPEP_RDMA_EFFICIENCY = 0.78

#: Bytes per value of an FP8 payload with DeepEP's per-128-value fp32 scales.
FP8_SCALED_BYTES = 1.0 + 4.0 / 128.0


class Overlap(str, Enum):
    """Computation-communication overlap of a step."""

    NONE = "none"
    TWO_BATCH = "two-batch"


@dataclass(frozen=True, slots=True, kw_only=True)
class CommOptions:
    """Communication choices of one engine deployment (see the module docstring).

    Parameters
    ----------
    overlap:
        ``none``: communication follows each module's computation; ``two-batch``: two
        micro-batches alternate so that one's communication runs under the other's computation.
    dispatch_dtype, combine_dtype:
        Formats of the MoE dispatch (tokens to experts) and combine (expert outputs back) payloads.
    dedup_nodes:
        A token crosses the scale-out network once per remote node (then NVLink forwarding),
        instead of once per routed expert.
    all_to_all_efficiency:
        Achieved fraction of the link bandwidth of the MoE all-to-all library (0: the profile's
        communication efficiency ``e_+``, as for every other collective).
    """

    overlap: Overlap = Overlap.NONE
    dispatch_dtype: DType = DType.BF16
    combine_dtype: DType = DType.BF16
    dedup_nodes: bool = False
    all_to_all_efficiency: float = 0.0

    def __post_init__(self) -> None:
        if not 0 <= self.all_to_all_efficiency <= 1:
            raise SpecError(f"all_to_all_efficiency={self.all_to_all_efficiency!r} must be in [0, 1] "
                            f"(0: the profile's)")
        object.__setattr__(self, "overlap", Overlap(self.overlap))
        for f in ("dispatch_dtype", "combine_dtype"):
            v = DType.parse(getattr(self, f))
            if v not in (DType.BF16, DType.FP16, DType.FP8, DType.FP32):
                raise SpecError(f"{f}={v.value!r}; expected one of: bf16, fp16, fp8, fp32")
            object.__setattr__(self, f, v)

    @staticmethod
    def deepep() -> CommOptions:
        """DeepEP with two-batch overlap (DeepSeek's inference system, SGLang large-scale EP)."""
        return CommOptions(overlap=Overlap.TWO_BATCH, dispatch_dtype=DType.FP8, combine_dtype=DType.BF16,
                           dedup_nodes=True, all_to_all_efficiency=DEEPEP_RDMA_EFFICIENCY)

    def payload_bytes(self, dtype: DType, activation_bytes: float) -> float:
        """Bytes per value of a payload in ``dtype`` (FP8 with its scales); 16-bit payloads
        keep the activations' width (4 under an fp32 model)."""
        if dtype is DType.FP8:
            return FP8_SCALED_BYTES
        return activation_bytes if dtype in (DType.BF16, DType.FP16) else 4.0

    def to_dict(self) -> dict[str, Any]:
        """YAML-ready mapping (inverse of :func:`comm_options_from_dict`)."""
        return {"overlap": self.overlap.value, "dispatch_dtype": self.dispatch_dtype.value,
                "combine_dtype": self.combine_dtype.value, "dedup_nodes": self.dedup_nodes,
                "all_to_all_efficiency": self.all_to_all_efficiency}


def comm_options_from_dict(raw: Any, where: str = "comm") -> CommOptions | None:
    """A profile's ``comm:`` section: ``deepep`` (the preset) or a mapping of the fields."""
    if raw is None:
        return None
    if raw == "deepep":
        return CommOptions.deepep()
    if not isinstance(raw, Mapping):
        raise SpecError(f"{where} must be 'deepep' or a mapping of overlap, dispatch_dtype, combine_dtype, "
                        f"dedup_nodes, all_to_all_efficiency; got {raw!r}")
    known = {"overlap", "dispatch_dtype", "combine_dtype", "dedup_nodes", "all_to_all_efficiency"}
    unknown = set(raw) - known
    if unknown:
        raise SpecError(f"{where}: unknown field(s) {', '.join(sorted(map(str, unknown)))}; expected: "
                        f"{', '.join(sorted(known))}")
    try:
        overlap = Overlap(str(raw.get("overlap", "none")))
    except ValueError:
        raise SpecError(f"{where}.overlap={raw.get('overlap')!r}; expected one of: "
                        f"{', '.join(o.value for o in Overlap)}") from None
    try:
        eff = float(raw.get("all_to_all_efficiency", 0.0))
    except (TypeError, ValueError):
        raise SpecError(f"{where}.all_to_all_efficiency={raw.get('all_to_all_efficiency')!r} must be a "
                        f"number") from None
    return CommOptions(overlap=overlap, dispatch_dtype=DType.parse(raw.get("dispatch_dtype", "bf16")),
                       combine_dtype=DType.parse(raw.get("combine_dtype", "bf16")),
                       dedup_nodes=bool(raw.get("dedup_nodes", False)), all_to_all_efficiency=eff)
