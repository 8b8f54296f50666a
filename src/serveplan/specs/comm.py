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
  a token crosses the network once per remote node it is routed to, not once per expert;
* registered communication buffers (:class:`A2ABuffer`, :func:`deepep_buffer_bytes`): DeepEP
  allocates its send/receive buffers once per rank, sized by its own size hints, and that memory
  is taken from what the KV cache could use (:meth:`Estimator._memory
  <serveplan.estimator.step.Estimator>`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from serveplan.errors import SpecError
from serveplan.units import DType, ceil_div

#: DeepEP's achieved share of a 400 Gb/s NIC: its low-latency kernels reach 39-40 GB/s of RDMA
#: bandwidth at EP128-256 on H800 with CX7 (~50 GB/s maximum), 128 tokens per rank, top-8, FP8
#: dispatch and BF16 combine (deepseek-ai/DeepEP docs/legacy.md, "Low-latency kernels with pure
#: RDMA"): 39 / 50 = 0.78. Measured on the library, not fitted to any serving figure.
DEEPEP_RDMA_EFFICIENCY = 0.78

#: Bytes per value of an FP8 payload with DeepEP's per-128-value fp32 scales.
FP8_SCALED_BYTES = 1.0 + 4.0 / 128.0


#: Tokens per rank DeepEP's low-latency buffer is sized for (``num_max_dispatch_tokens_per_rank``):
#: SGLang's ``SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK = EnvInt(128)`` (sglang 0.5.23
#: ``srt/environ.py``); DeepEP's legacy docs test "a typical DeepSeek-V3/R1 production setting
#: (128 tokens per batch ...)" and recommend it "(the actual batch size in the decoding engine)
#: should be less than 256" (deepseek-ai/DeepEP ``docs/legacy.md``).
DEEPEP_LL_TOKENS_PER_RANK = 128

#: DeepEP V1 (``deep_ep/buffers/legacy.py`` ``Buffer.get_dispatch_config`` /
#: ``get_combine_config``): the recommended normal-mode configs per EP size,
#: ``(num_max_nvl_chunked_send_tokens, num_max_nvl_chunked_recv_tokens,
#: num_max_rdma_chunked_send_tokens, num_max_rdma_chunked_recv_tokens)``, with
#: ``Buffer.num_sms = 20`` SMs (10 channels). Only the receive sizes and the RDMA send size (which
#: rounds the RDMA receive size up) set the buffer size.
_DEEPEP_NORMAL_CONFIGS: dict[int, tuple[tuple[int, int, int, int], tuple[int, int, int, int]]] = {
    2: ((24, 256, 6, 128), (10, 256, 6, 128)),
    4: ((6, 256, 6, 128), (9, 256, 6, 128)),
    8: ((6, 256, 6, 128), (4, 256, 6, 128)),
    16: ((36, 288, 20, 128), (4, 288, 12, 128)),
    24: ((32, 288, 8, 128), (1, 288, 8, 128)),
    32: ((32, 288, 8, 128), (1, 288, 8, 128)),
    48: ((32, 288, 8, 128), (1, 288, 8, 128)),
    64: ((32, 288, 8, 128), (1, 288, 8, 128)),
    96: ((20, 480, 12, 128), (1, 480, 8, 128)),
    128: ((20, 560, 12, 128), (1, 560, 8, 128)),
    144: ((32, 720, 12, 128), (2, 720, 8, 128)),
    160: ((28, 720, 12, 128), (2, 720, 8, 128)),
}
_DEEPEP_NUM_SMS = 20          # deep_ep Buffer.num_sms (legacy default)
_NVL_PEERS = 8                # LEGACY_NUM_MAX_NVL_PEERS (csrc/kernels/legacy/compiled.cuh)
_MAX_TOPK = _MAX_SCALES = 128  # kNumMaxTopK, kNumMaxScales (csrc/legacy/config.hpp)
_SOURCE_META = 8              # sizeof(internode::SourceMeta): two ints (csrc/kernels/legacy/internode.cu)
_TOPK_IDX = 8                 # topk_idx_t: int64 in DeepEP V1
_ALIGN = 128                  # LEGACY_NUM_BUFFER_ALIGNMENT_BYTES


class A2ABuffer(str, Enum):
    """Which registered all-to-all buffers a rank holds (DeepEP's ``deepep_mode``, SGLang
    ``--deepep-mode``: ``auto`` uses normal kernels for prefill and low-latency ones for decode,
    so it allocates both)."""

    NONE = "none"                # NCCL all-to-all / all-gather MoE: no dedicated buffer
    NORMAL = "normal"            # high-throughput kernels (prefill)
    LOW_LATENCY = "low-latency"  # low-latency kernels (decode, CUDA graphs)
    AUTO = "auto"                # both (SGLang's default deepep_mode)


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
    buffer:
        Registered all-to-all buffers each expert-parallel rank holds (:class:`A2ABuffer`; their
        size: :func:`deepep_buffer_bytes`).
    buffer_tokens_per_rank:
        Tokens per rank the low-latency buffer is sized for (DeepEP
        ``num_max_dispatch_tokens_per_rank``; :data:`DEEPEP_LL_TOKENS_PER_RANK`).
    """

    overlap: Overlap = Overlap.NONE
    dispatch_dtype: DType = DType.BF16
    combine_dtype: DType = DType.BF16
    dedup_nodes: bool = False
    all_to_all_efficiency: float = 0.0
    buffer: A2ABuffer = A2ABuffer.NONE
    buffer_tokens_per_rank: int = DEEPEP_LL_TOKENS_PER_RANK

    def __post_init__(self) -> None:
        if not 0 <= self.all_to_all_efficiency <= 1:
            raise SpecError(f"all_to_all_efficiency={self.all_to_all_efficiency!r} must be in [0, 1] "
                            f"(0: the profile's)")
        object.__setattr__(self, "overlap", Overlap(self.overlap))
        try:
            object.__setattr__(self, "buffer", A2ABuffer(self.buffer))
        except ValueError:
            raise SpecError(f"buffer={self.buffer!r}; expected one of: "
                            f"{', '.join(b.value for b in A2ABuffer)}") from None
        t = self.buffer_tokens_per_rank
        if isinstance(t, bool) or not isinstance(t, int) or not 1 <= t <= 1024:
            # DeepEP's internode low-latency dispatch counts tokens per rank pair below
            # FINISHED_SUM_TAG = 1024 (SGLang asserts num_max_dispatch_tokens_per_rank <= 1024)
            raise SpecError(f"buffer_tokens_per_rank={t!r} must be an integer in [1, 1024]")
        for f in ("dispatch_dtype", "combine_dtype"):
            v = DType.parse(getattr(self, f))
            if v not in (DType.BF16, DType.FP16, DType.FP8, DType.FP32):
                raise SpecError(f"{f}={v.value!r}; expected one of: bf16, fp16, fp8, fp32")
            object.__setattr__(self, f, v)

    @staticmethod
    def deepep(buffer: A2ABuffer | str = A2ABuffer.AUTO,
               buffer_tokens_per_rank: int = DEEPEP_LL_TOKENS_PER_RANK) -> CommOptions:
        """DeepEP with two-batch overlap (DeepSeek's inference system, SGLang large-scale EP);
        ``buffer`` as SGLang's ``--deepep-mode`` (default ``auto``: both buffers; a decode pool
        of a disaggregated deployment runs ``low-latency``, a prefill pool ``normal``)."""
        try:
            buf = A2ABuffer(buffer)
        except ValueError:
            raise SpecError(f"buffer={buffer!r}; expected one of: {', '.join(b.value for b in A2ABuffer)}") from None
        return CommOptions(overlap=Overlap.TWO_BATCH, dispatch_dtype=DType.FP8, combine_dtype=DType.BF16,
                           dedup_nodes=True, all_to_all_efficiency=DEEPEP_RDMA_EFFICIENCY,
                           buffer=buf, buffer_tokens_per_rank=buffer_tokens_per_rank)

    @property
    def runs_deepep(self) -> bool:
        """A DeepEP deployment (:meth:`deepep`, the engines' ``deepep`` options): node-deduplicated
        dispatch is DeepEP's, whatever buffers are reserved (a variant without the memory term, or
        an MTP draft module sharing the main model's buffers, still runs its kernels)."""
        return self.dedup_nodes

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
                "all_to_all_efficiency": self.all_to_all_efficiency, "buffer": self.buffer.value,
                "buffer_tokens_per_rank": self.buffer_tokens_per_rank}


def _normal_config(ep: int) -> tuple[tuple[int, int, int, int], tuple[int, int, int, int]]:
    """DeepEP's recommended normal-mode configs for ``ep`` ranks; an EP size without its own row
    takes the next larger one (DeepEP itself refuses it: assumed, the closest tuned size)."""
    for n in sorted(_DEEPEP_NORMAL_CONFIGS):
        if n >= ep:
            return _DEEPEP_NORMAL_CONFIGS[n]
    return _DEEPEP_NORMAL_CONFIGS[max(_DEEPEP_NORMAL_CONFIGS)]


def _align(x: int, a: int = _ALIGN) -> int:
    return ceil_div(x, a) * a


def _normal_buffer_bytes(hidden_size: int, ep: int) -> tuple[int, int]:
    """``(NVLink, RDMA)`` bytes of DeepEP's normal-mode buffers: the larger of the dispatch and
    combine configs' ``Config.get_nvl_buffer_size_hint`` and ``get_rdma_buffer_size_hint``
    (``csrc/legacy/config.hpp``), with SGLang's ``hidden_bytes = hidden x 2`` (BF16 width,
    ``DeepEPBuffer.get_deepep_buffer``)."""
    hidden_bytes = hidden_size * 2
    channels = _DEEPEP_NUM_SMS // 2
    rdma_ranks = max(ep // _NVL_PEERS, 1)
    nvl_ranks = min(ep, _NVL_PEERS)
    per_token = hidden_bytes + _SOURCE_META + _MAX_TOPK * (_TOPK_IDX + 4) + _MAX_SCALES * 4
    nvl = rdma = 0
    for _, nvl_recv, rdma_send, rdma_recv in _normal_config(ep):
        n = channels * nvl_ranks * (2 * rdma_ranks + 3) * 4 + channels * nvl_ranks * nvl_recv * per_token
        nvl = max(nvl, _align(n))
        if ep > _NVL_PEERS:   # inside one node the normal kernels use NVLink only
            recv = ceil_div(rdma_recv, rdma_send) * rdma_send     # Config rounds it to the send chunk
            r = channels * rdma_ranks * (_NVL_PEERS * 2 + 2) * 2 * 4
            r += channels * rdma_ranks * recv * (per_token + 16) * 2   # + one int4 per token, two sides
            rdma = max(rdma, _align(r))
    return nvl, rdma


def _low_latency_buffer_bytes(hidden_size: int, num_experts: int, tokens_per_rank: int) -> int:
    """RDMA bytes of DeepEP's low-latency buffer, ``get_low_latency_rdma_size_hint``
    (``LowLatencyLayout``, ``csrc/legacy/config.hpp``): two (odd/even) send, receive and signalling
    buffers; a dispatch message is one int4 plus the token in BF16 (wider than FP8 with its
    scales), a combine message the token in BF16 plus a bf16x2 min/max per 128 channels; every
    rank can receive ``tokens_per_rank`` tokens from each of the ``num_experts`` experts."""
    scales = hidden_size // 128
    dispatch_msg = 16 + max(hidden_size * 2, hidden_size + scales * 4)
    combine_msg = scales * 4 + hidden_size * 2
    send = max(tokens_per_rank * dispatch_msg, num_experts * tokens_per_rank * combine_msg)
    recv = num_experts * tokens_per_rank * max(dispatch_msg, combine_msg)
    signal = _align(num_experts * 4)
    total = 2 * (send + recv + signal)
    return (total + _ALIGN) // _ALIGN * _ALIGN    # as get_low_latency_rdma_size_hint rounds


def deepep_buffer_bytes(comm: CommOptions, *, hidden_size: int, num_experts: int, ep: int) -> float:
    """Bytes of registered all-to-all buffers one expert-parallel rank holds.

    DeepEP's own size hints, as SGLang allocates them (``DeepEPBuffer.get_deepep_buffer``, sglang
    0.5.23 ``srt/layers/moe/token_dispatcher/deepep.py``): NVLink bytes from the normal mode; RDMA
    bytes the larger of the normal mode's and the low-latency mode's (one buffer serves both).
    ``num_experts`` counts the physical experts (redundant copies included, as SGLang passes
    them). 0 without a registered buffer or expert parallelism. DeepSeek-V3 (hidden 7168) at
    EP144 over 288 experts, 128 tokens per rank: about 2.1 GB low-latency, 0.9 GB normal NVLink.
    """
    if comm.buffer is A2ABuffer.NONE or ep <= 1 or num_experts < 1:
        return 0.0
    nvl = rdma = 0
    if comm.buffer in (A2ABuffer.NORMAL, A2ABuffer.AUTO):
        nvl, rdma = _normal_buffer_bytes(hidden_size, ep)
    if comm.buffer in (A2ABuffer.LOW_LATENCY, A2ABuffer.AUTO):
        rdma = max(rdma, _low_latency_buffer_bytes(hidden_size, num_experts, comm.buffer_tokens_per_rank))
    return float(nvl + rdma)


def comm_options_from_dict(raw: Any, where: str = "comm") -> CommOptions | None:
    """A profile's ``comm:`` section: ``deepep`` (the preset) or a mapping of the fields."""
    if raw is None:
        return None
    if raw == "deepep":
        return CommOptions.deepep()
    known = {"overlap", "dispatch_dtype", "combine_dtype", "dedup_nodes", "all_to_all_efficiency", "buffer",
             "buffer_tokens_per_rank"}
    if not isinstance(raw, Mapping):
        raise SpecError(f"{where} must be 'deepep' or a mapping of {', '.join(sorted(known))}; got {raw!r}")
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
    buffer = str(raw.get("buffer", "none")).replace("_", "-")
    if buffer not in {b.value for b in A2ABuffer}:
        raise SpecError(f"{where}.buffer={raw.get('buffer')!r}; expected one of: "
                        f"{', '.join(b.value for b in A2ABuffer)}")
    tokens = raw.get("buffer_tokens_per_rank", DEEPEP_LL_TOKENS_PER_RANK)
    if isinstance(tokens, bool) or not isinstance(tokens, int):
        raise SpecError(f"{where}.buffer_tokens_per_rank={tokens!r} must be an integer in [1, 1024]")
    return CommOptions(overlap=overlap, dispatch_dtype=DType.parse(raw.get("dispatch_dtype", "bf16")),
                       combine_dtype=DType.parse(raw.get("combine_dtype", "bf16")),
                       dedup_nodes=bool(raw.get("dedup_nodes", False)), all_to_all_efficiency=eff,
                       buffer=A2ABuffer(buffer), buffer_tokens_per_rank=tokens)
