"""Step times and memory of an instance that decodes speculatively.

:class:`SpecEstimator` is an :class:`~serveplan.estimator.step.Estimator` whose decode steps
draft ``K`` tokens per sequence and verify them (:mod:`serveplan.specs.speculative`). Every
consumer of step times (the simulator's step clock and decode tables, the static estimates)
reads it unchanged, because the two timing sinks, :meth:`Estimator.step_time` and
:meth:`Estimator.step_times`, are the ones overridden:

* **Verify.** The target runs ``K + 1`` tokens per decoding sequence: every linear layer, the
  LM head and the MoE routing see ``(K + 1) * nd`` rows (features ``n``, ``ng``, ``nd``,
  ``nout``, ``nall``, ``eact``), and each sequence's attention covers ``K`` more keys (``kvd``)
  with ``K`` more query tokens (``ndx``). The decode attention kernels take the ``K + 1``
  queries of a sequence in one pass (FlashMLA ``flash_mla_with_kvcache`` with ``s_q`` query
  tokens, packed with the heads: ``get_mla_metadata(cache_seqlens, s_q * h_q // h_kv, ...)``;
  FlashInfer and FlashAttention likewise): the cache is read once per sequence (bytes over
  ``kvd``), and every query token scores every key it sees (work over ``kvd + adx``, about
  ``K + 1`` times a decode's; :func:`serveplan.ops.window.decode_features`). FlashMLA's
  deep dive (docs/20250422-new-kernel-deep-dive.md) counts the same: FLOPs
  ``2 h_q s_q s_k (d_k + d_v)``, bytes about ``2 s_k d_k``, intensity about ``2 h_q s_q``
  FLOP/byte, compute-bound on H800 from ``h_q s_q >= 128``; so MLA at TP 1 (128 heads on one
  latent) is compute-bound in a verify, while GQA (intensity about ``(K + 1) * group``) stays
  memory-bound and barely changes.
* **Draft.** ``draft``: the draft model (a catalog model with the target's vocabulary, same TP)
  runs one step over the step's prompt tokens and one new token per decode, then ``K - 1``
  decode-only steps (K autoregressive draft tokens). ``eagle``: the same with an EAGLE head,
  one dense decoder layer of the target's width with its own LM head over a 32,000-token draft
  vocabulary (the EAGLE-3 checkpoints' ``draft_vocab_size``, e.g. yuhuili/EAGLE3-LLaMA3.1-
  Instruct-8B config.json) and the target's embedding. ``mtp``: DeepSeek-V3's MTP module
  (tech report §2.2): one transformer block of the model's own kind (MoE included) with the
  shared embedding and output head, run ``K`` times (engines reuse the one module for K > 1).
  ``ngram``: nothing (prompt lookup runs on the CPU).
* **Tokens per step.** A decode-only step yields ``E`` tokens per sequence in expectation
  (:meth:`SpecDecodeConfig.expected_tokens`). The simulator emits one token per step, so the
  time of a decode-only step is ``(verify + draft) / E``: per request, TPOT = step time /
  accepted tokens per step, and KV grows by one token per emitted token, as on average it does.
  This is expected-value acceptance (no acceptance variance in TPOT); it keeps runs
  deterministic and the simulator's decode fast paths. A step mixing prompt chunks and decodes
  keeps its full time (its prompt tokens progress at the engine's rate); the simulator advances
  its decodes ``E`` tokens on average (``Instance._spec_mixed_decode``).
* **Memory.** The drafter's weights (draft model; EAGLE layer and head; MTP block without the
  shared embedding and head, plus its projection ``M`` of ``d x 2d`` that joins the previous
  depth's hidden state and the next token's embedding, DeepSeek-V3 tech report eq. 21) and its
  KV per token (draft model: its own cache; EAGLE and MTP: one layer's) are taken from the KV
  budget, and each running sequence holds ``K`` lookahead slots (vLLM allocates
  ``num_lookahead_tokens = K`` per request).
* **Communication.** The target and an MoE drafter (MTP) run with the deployment's
  :class:`~serveplan.specs.comm.CommOptions` (two-batch overlap, FP8 dispatch); the drafter
  shares the target's expert-parallel layout (redundant experts included) and its all-to-all
  buffers, which the target reserves once.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from serveplan.errors import SpecError
from serveplan.estimator.batch import StepBatch
from serveplan.estimator.roofline import tile_quantized_rows
from serveplan.estimator.step import DEFAULT_MEMORY_UTILIZATION, Estimator, MemoryEstimate, StepEstimate
from serveplan.ops.base import FEATURE_INDEX
from serveplan.specs.catalog import get_model
from serveplan.specs.comm import A2ABuffer, CommOptions
from serveplan.specs.hardware import DeviceSpec
from serveplan.specs.model import ModelSpec
from serveplan.specs.parallel import ParallelConfig
from serveplan.specs.profile import EfficiencyProfile
from serveplan.specs.speculative import SpecDecodeConfig, SpecMethod
from serveplan.units import DType

_N, _NG, _NP, _ND = FEATURE_INDEX["n"], FEATURE_INDEX["ng"], FEATURE_INDEX["np"], FEATURE_INDEX["nd"]
_KVD, _NOUT, _NALL, _EACT = FEATURE_INDEX["kvd"], FEATURE_INDEX["nout"], FEATURE_INDEX["nall"], FEATURE_INDEX["eact"]
_NDX = FEATURE_INDEX["ndx"]
_PREFILL_ROWS = tuple(FEATURE_INDEX[f] for f in ("np", "sp", "kvp", "ap", "apc"))

#: EAGLE-3 heads predict over a reduced draft vocabulary (``draft_vocab_size: 32000`` in the
#: config.json of yuhuili/EAGLE3-LLaMA3.1-Instruct-8B and the other EAGLE-3 releases).
EAGLE_DRAFT_VOCAB = 32000


def drafter_model(spec: SpecDecodeConfig, model: ModelSpec) -> ModelSpec | None:
    """The model the drafter runs (``None`` for n-gram lookup); checks a draft model against the
    target (same vocabulary, fewer parameters)."""
    m = spec.method
    if m is SpecMethod.NGRAM or not spec.is_active:
        return None
    if m is SpecMethod.DRAFT:
        assert spec.draft_model is not None  # SpecDecodeConfig requires it
        dm = get_model(spec.draft_model)
        if dm.vocab_size != model.vocab_size:
            raise SpecError(f"spec_draft_model={spec.draft_model!r} has a vocabulary of {dm.vocab_size:,} tokens; "
                            f"the target {model.name} has {model.vocab_size:,}: draft tokens must come from the "
                            "target's vocabulary")
        if dm.total_params >= model.total_params:
            raise SpecError(f"spec_draft_model={spec.draft_model!r} ({dm.total_params / 1e9:.1f}B parameters) is not "
                            f"smaller than the target {model.name} ({model.total_params / 1e9:.1f}B); expected a "
                            "smaller draft model")
        return dm
    if m is SpecMethod.EAGLE:
        # one dense Llama-style decoder layer at the target's width; embedding shared with the
        # target (tied here so the head's own LM head is counted once)
        heads = model.num_attention_heads
        kv = min(model.num_key_value_heads, heads)
        head_dim = model.head_dim or model.hidden_size // heads
        return ModelSpec(name=f"{model.name}-eagle-head", model_type="llama", hidden_size=model.hidden_size,
                         intermediate_size=model.intermediate_size or 4 * model.hidden_size, num_hidden_layers=1,
                         num_attention_heads=heads, num_key_value_heads=kv, head_dim=head_dim,
                         vocab_size=min(model.vocab_size, EAGLE_DRAFT_VOCAB), tie_word_embeddings=True,
                         dtype=model.dtype, source="EAGLE-3 head (Li et al. 2025): one decoder layer + LM head")
    if model.num_mtp_layers < 1:
        raise SpecError(f"spec_method='mtp': {model.name} has no multi-token-prediction module "
                        "(num_nextn_predict_layers=0); use eagle, draft or ngram")
    # MTP: one block of the model's last layer kind, MoE as in its MoE layers
    last = model.num_hidden_layers - 1
    kinds = model.layer_kinds[last]
    moe = bool(model.moe_layer_set)
    return dataclasses.replace(
        model, name=f"{model.name}-mtp", num_hidden_layers=1, first_k_dense_replace=0, moe_layer_freq=1,
        moe_layers=(0,) if moe else (), layer_types=(kinds.value,) if model.layer_types else (),
    )


def _mtp_projection_bytes(spec: SpecDecodeConfig, drafter: Estimator) -> float:
    """Bytes per device of an MTP module's projection ``M_k`` (``d x 2d``, DeepSeek-V3 tech report
    §2.2 eq. 21; ``eh_proj`` of the checkpoint's layer 61), held whole by every DP-attention rank
    and split over TP, in the format of the module's dense weights."""
    if spec.method is not SpecMethod.MTP:
        return 0.0
    m = drafter.model
    dense_dt = m.weight_formats(drafter.dtype)[0]
    return 2.0 * m.hidden_size * m.hidden_size / drafter.parallel.tp * dense_dt.bytes


def _shared_embedding_bytes(spec: SpecDecodeConfig, drafter: Estimator) -> float:
    """Bytes per device of the drafter's weights that are the target's (MTP: embedding and output
    head, DeepSeek-V3 §2.2; EAGLE: the embedding, already left out by tying)."""
    if spec.method is not SpecMethod.MTP:
        return 0.0
    m = drafter.model
    *_, embed_dt = m.weight_formats(drafter.dtype)
    return m.embedding_params() / drafter.parallel.tp * embed_dt.bytes


class SpecEstimator(Estimator):
    """An :class:`Estimator` of speculative decoding (module docstring): decode steps verify
    ``K + 1`` tokens per sequence, run the drafter, and yield ``E`` tokens per sequence.

    Parameters
    ----------
    spec:
        The active :class:`~serveplan.specs.speculative.SpecDecodeConfig`.
    model, hardware, profile, parallel, dtype, kv_dtype, memory_utilization, comm:
        As :class:`Estimator`. Pipeline parallelism is not supported with speculation.
    """

    def __init__(self, model: ModelSpec, hardware: DeviceSpec, profile: EfficiencyProfile,
                 parallel: ParallelConfig | None = None, *, spec: SpecDecodeConfig,
                 dtype: DType | str | None = None, kv_dtype: DType | str | None = None,
                 memory_utilization: float = DEFAULT_MEMORY_UTILIZATION, comm: CommOptions | None = None) -> None:
        if not isinstance(spec, SpecDecodeConfig) or not spec.is_active:
            raise SpecError(f"spec={spec!r}: a SpecEstimator needs an active SpecDecodeConfig (a method, K >= 1)")
        parallel = parallel or ParallelConfig()
        if parallel.pp > 1:
            raise SpecError(f"pp={parallel.pp} with speculative decoding: the drafter runs beside the whole model; "
                            "use pp=1 (tp/dp/ep) with spec_method")
        self.spec = spec
        self.k = spec.k
        self.expected_tokens = spec.expected_tokens
        dm = drafter_model(spec, model)
        self.drafter: Estimator | None = None
        if dm is not None:
            layout = ParallelConfig(tp=parallel.tp, dp=parallel.dp, ep=parallel.ep if dm.is_moe else 1,
                                    redundant_experts=parallel.redundant_experts if dm.is_moe else 0)
            try:
                layout.validate_for(dm)
            except SpecError as err:
                raise SpecError(f"the {spec.method.value} drafter ({dm.name}) cannot run at "
                                f"{parallel.label()}: {err}") from None
            # the buffers are the target's (one per rank, reserved there): the drafter runs with
            # the deployment's communication choices but reserves none of its own
            dcomm = comm or profile.comm
            if dcomm is not None:
                dcomm = dataclasses.replace(dcomm, buffer=A2ABuffer.NONE)
            self.drafter = Estimator(dm, hardware, profile, layout, dtype=dtype if dtype is not None else model.dtype,
                                     kv_dtype=kv_dtype, memory_utilization=memory_utilization, comm=dcomm)
        super().__init__(model, hardware, profile, parallel, dtype=dtype, kv_dtype=kv_dtype,
                         memory_utilization=memory_utilization, comm=comm)

    # ------------------------------------------------------------------ features
    def _verify(self, x: np.ndarray) -> np.ndarray:
        """Features of the verify pass: ``K`` more rows and keys per decoding sequence (one
        vector or the columns of a matrix)."""
        v: np.ndarray = x.copy()
        extra = x[_ND] * self.k
        v[_N] = x[_N] + extra
        v[_ND] = x[_ND] + extra
        v[_NOUT] = x[_NOUT] + extra
        v[_NALL] = x[_NALL] + extra * self.parallel.dp
        v[_KVD] = x[_KVD] + extra
        v[_NDX] = x[_NDX] + extra  # K more query tokens per sequence: adx follows (Estimator._attention_rows)
        self._set_rows(v)
        self._set_experts(v)
        return v

    def _set_rows(self, v: np.ndarray) -> None:
        """Feature ``ng`` (GEMM rows under tile quantization) from ``n``."""
        if not self.tile:
            v[_NG] = v[_N]
        elif v.ndim == 1:
            v[_NG] = tile_quantized_rows(float(v[_N]), self.tile)
        else:
            v[_NG] = [tile_quantized_rows(float(n), self.tile) for n in v[_N]]

    def _set_experts(self, v: np.ndarray) -> None:
        """Feature ``eact`` from ``nall`` (:meth:`Estimator._expert_rows`: expected experts with
        >= 1 routed token under uniform routing on one expert device, redundant copies included;
        the MTP drafter shares the target's experts and layout)."""
        self._expert_rows(v)

    def _decode_only(self, x: np.ndarray) -> np.ndarray:
        """The decode part of a step's features (prompt rows removed)."""
        d: np.ndarray = x.copy()
        for i in _PREFILL_ROWS:
            d[i] = 0.0
        d[_N] = x[_ND]
        d[_NOUT] = x[_ND]
        self._set_rows(d)
        d[_NALL] = x[_ND] * self.parallel.dp
        self._set_experts(d)
        return d

    def _draft_time(self, x: np.ndarray) -> float:
        """K drafting passes: the first over the step's prompt tokens and one token per decode,
        the other ``K - 1`` over the decodes alone."""
        dr = self.drafter
        if dr is None:
            return 0.0
        first = dr.step_time(x.copy())
        if self.k == 1:
            return first
        rest = first if x[_NP] == 0 else dr.step_time(self._decode_only(x))
        return first + (self.k - 1) * rest

    def _draft_times(self, X: np.ndarray, phase: Any) -> np.ndarray | float:
        dr = self.drafter
        if dr is None:
            return 0.0
        first = np.asarray(dr.step_times(X.copy(), phase))
        if self.k == 1:
            return first
        if str(phase) == "decode":
            return np.asarray(first * self.k)
        return np.asarray(first + (self.k - 1) * dr.step_times(self._decode_only(X), "decode"))

    # ------------------------------------------------------------------ timing sinks
    def step_time(self, x: np.ndarray) -> float:
        """Step time of a feature vector: verify + draft; a decode-only step divided by the
        expected tokens per sequence (module docstring)."""
        if x[_ND] <= 0:
            return super().step_time(x)
        t = super().step_time(self._verify(x)) + self._draft_time(x)
        return t / self.expected_tokens if x[_NP] <= 0 else t

    def step_times(self, X: np.ndarray, phase: Any = "decode") -> np.ndarray:
        """Step times of many feature vectors of one phase (columns of ``X``)."""
        if not np.any(X[_ND] > 0):
            return np.asarray(super().step_times(X, phase))
        t = super().step_times(self._verify(X), phase) + self._draft_times(X, phase)
        decode_only = (X[_NP] <= 0) & (X[_ND] > 0)
        return np.asarray(np.where(decode_only, t / self.expected_tokens, t))

    def estimate(self, batch: StepBatch) -> StepEstimate:
        """Breakdown of the step's verify pass (every decode computing ``K + 1`` tokens); its
        ``total_s`` is the speculative step time (:meth:`step_time`: verify + draft, over the
        expected tokens for a decode-only step)."""
        if batch.decode_tokens <= 0:
            return super().estimate(batch)
        return dataclasses.replace(self._estimate(self._verify(self.features(batch))), total_s=self.time(batch))

    # ------------------------------------------------------------------ memory
    def drafter_weights_bytes(self) -> float:
        """Drafter weights on one device (not shared with the target)."""
        dr = self.drafter
        if dr is None:
            return 0.0
        per_module = (dr.weights_per_device() - _shared_embedding_bytes(self.spec, dr)
                      + _mtp_projection_bytes(self.spec, dr))
        # every MTP module the checkpoint ships is loaded (MiniMax-M2.5: 3)
        return per_module * (self.model.num_mtp_layers if self.spec.method is SpecMethod.MTP else 1)

    def drafter_kv_bytes_per_token(self) -> float:
        """Drafter cache bytes per token on one device."""
        dr = self.drafter
        if dr is None:
            return 0.0
        # MTP: module i drafts position i (reused beyond the last), each with its own one-layer cache
        n = min(self.k, self.model.num_mtp_layers) if self.spec.method is SpecMethod.MTP else 1
        return n * dr.kv_bytes_per_token_per_device()

    def _memory(self) -> MemoryEstimate:
        mem = super()._memory()
        w = mem.weights_bytes + self.drafter_weights_bytes()
        kv_tok = mem.kv_bytes_per_token + self.drafter_kv_bytes_per_token()
        usable = mem.device_memory_bytes * mem.memory_utilization - w - mem.activation_bytes - mem.comm_buffer_bytes
        cap = int(max(usable, 0.0) // kv_tok) * self.parallel.dp if kv_tok > 0 else 0
        return dataclasses.replace(mem, weights_bytes=w, kv_bytes_per_token=kv_tok, kv_capacity_tokens=cap)

    def kv_capacity_tokens(self, max_sequences: int) -> int:
        """As :meth:`Estimator.kv_capacity_tokens`, less ``K`` lookahead slots per sequence."""
        return max(super().kv_capacity_tokens(max_sequences) - max_sequences * self.k, 0)
