"""Model specification built from Hugging Face ``config.json`` fields.

Field names follow the HF configs one-to-one (``hidden_size``, ``num_hidden_layers``, ...) so a
bundled YAML file or a user's ``config.json`` loads without renaming. What is modelled per
``model_type`` (docs/adding-model.md has the table):

* ``llama``, ``mistral``, ``qwen2``, ``qwen3``, ``phi3``: RMSNorm, GQA attention, SiLU-gated MLP
  (``mistral``/``phi3`` with a ``sliding_window`` attend only to the last ``sliding_window``
  keys in every layer; ``qwen2`` has q/k/v biases, ``qwen3`` per-head q/k norms).
* ``mixtral``, ``qwen2_moe``, ``qwen3_moe``, ``minimax_m2``: GQA with a top-k mixture of experts
  (``qwen2_moe``: a gated shared expert of its own width; ``minimax_m2``: full-width q/k norms).
* ``llama4`` (``llama4_text``): MoE (one routed plus one shared expert) on every
  ``interleave_moe_layer_step``-th layer, dense MLPs of ``intermediate_size_mlp`` elsewhere;
  chunked local attention (``attention_chunk_size``) on RoPE layers, global attention on the
  NoPE layers (every fourth).
* ``gpt_oss``: alternating sliding-window (``sliding_window``) and full attention per
  ``layer_types``, attention sinks (one logit per head), biases, MoE with biased experts.
* ``gemma2``, ``gemma3`` (``gemma3_text``): local sliding-window and global layers (gemma2
  alternates; gemma3 five local to one global), four RMSNorms per layer, tied embeddings, their
  ``head_dim``; gemma3 has q/k norms.
* ``deepseek_v2``, ``deepseek_v3``, ``kimi_k2``, ``glm4_moe``: MoE with shared experts after
  ``first_k_dense_replace`` dense layers; DeepSeek/Kimi with multi-head latent attention (MLA),
  GLM-4.5 with GQA and partial rotary.
* ``qwen3_next``, ``qwen3_5_moe`` (``qwen3_5_moe_text``): hybrid layers per ``layer_types``:
  Gated DeltaNet linear attention (a fixed-size recurrent and convolution state per sequence,
  no KV cache) and gated full attention (the query projection also produces an output gate).
* ``gptj``, ``gpt_neox``, ``falcon``: LayerNorm, attention and MLP in parallel from one input
  (``gpt_neox`` with ``use_parallel_residual``), two-matrix GELU MLP, partial rotary; ``falcon``
  multi-query (``multi_query``) or grouped (``new_decoder_architecture``) attention.
* ``opt``: LayerNorm with bias, MHA with bias, ReLU two-matrix MLP, learned positions.

Multimodal wrappers (``llama4``, ``gemma3``, ``qwen3_5_moe``, ``kimi_k25``) are read from their
``text_config``: serveplan plans the language model. Other types whose layers have one of these
shapes (``granite``, ``olmo2``, ``smollm3``, ...) are read as that family
(:data:`~serveplan.specs.hf_config.MODEL_FAMILIES`). Parameter and KV sizes are derived here once
(``__post_init__``); every other layer reads them. The reader of ``config.json`` files is
:mod:`serveplan.specs.hf_config`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from serveplan.errors import SpecError
from serveplan.units import DType

SUPPORTED_MODEL_TYPES = (
    "llama", "mistral", "mixtral", "qwen2", "qwen3", "opt", "deepseek_v3",
    "qwen2_moe", "qwen3_moe", "llama4", "gpt_oss", "gemma2", "gemma3", "phi3", "glm4_moe",
    "deepseek_v2", "gptj", "gpt_neox", "falcon", "kimi_k2", "minimax_m2", "qwen3_next",
    "qwen3_5_moe",
)
_LAYERNORM_TYPES = ("opt", "gptj", "gpt_neox", "falcon")
_PLAIN_MLP_TYPES = ("opt", "gptj", "gpt_neox", "falcon")
_PARALLEL_BLOCK_TYPES = ("gptj", "gpt_neox", "falcon")

#: Largest width, head count or layer count a model field may hold: 2**22 (4,194,304), far above
#: any published model (Llama 3.1 405B: hidden 16,384, FFN 53,248; DeepSeek-V3: 256 experts), so
#: only a corrupt or mistyped file is refused; keeps every derived product finite.
MAX_DIMENSION = 2**22
#: Fields that must be positive, with their own limit and its reason where it is not MAX_DIMENSION.
_POSITIVE_FIELDS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                    "num_key_value_heads", "head_dim", "vocab_size", "max_position_embeddings")
_FIELD_LIMITS = {
    "max_position_embeddings": (2**31, "the largest context a 32-bit position index addresses"),
    "vocab_size": (2**24, "larger than any tokenizer (the largest published: 256k tokens)"),
    "num_hidden_layers": (100_000, "larger than any transformer built (the deepest published: 126 layers)"),
}
#: Integer fields that may be 0 (feature off).
_COUNT_FIELDS = ("num_experts", "num_experts_per_tok", "num_shared_experts", "moe_intermediate_size",
                 "shared_expert_intermediate_size", "first_k_dense_replace", "moe_layer_freq", "sliding_window",
                 "attention_chunk_size", "qk_norm_params", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
                 "qk_rope_head_dim", "v_head_dim", "linear_num_key_heads", "linear_num_value_heads",
                 "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim", "norms_per_layer")


class AttentionKind(str, Enum):
    """Attention mechanism; MHA is GQA with as many KV heads as query heads."""

    GQA = "gqa"
    MLA = "mla"


class LayerType(str, Enum):
    """What the token mixer of one layer attends to (HF ``layer_types`` values).

    ``FULL`` attends to every earlier key; ``SLIDING`` to the last ``sliding_window`` keys;
    ``CHUNKED`` to the earlier keys of its own ``attention_chunk_size`` chunk (Llama 4);
    ``LINEAR`` is a linear-attention (Gated DeltaNet) layer with a fixed-size state.
    """

    FULL = "full_attention"
    SLIDING = "sliding_attention"
    CHUNKED = "chunked_attention"
    LINEAR = "linear_attention"

    @property
    def is_local(self) -> bool:
        return self in (LayerType.SLIDING, LayerType.CHUNKED)


class MLPKind(str, Enum):
    """Feed-forward shape: SiLU-gated three-matrix MLP, or two-matrix MLP (OPT, GPT-J, ...)."""

    GATED = "gated"
    PLAIN = "plain"


class NormKind(str, Enum):
    RMS = "rmsnorm"
    LAYER = "layernorm"


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """A decoder-only transformer, in Hugging Face ``config.json`` terms.

    Parameters
    ----------
    name:
        Catalog id, e.g. ``"llama-2-7b"``.
    model_type:
        HF ``model_type``; one of :data:`SUPPORTED_MODEL_TYPES`.
    hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, num_key_value_heads,
    head_dim, vocab_size, max_position_embeddings, tie_word_embeddings:
        As in HF configs (``intermediate_size`` is the dense MLP width: OPT's ``ffn_dim``,
        Llama 4's ``intermediate_size_mlp``, GPT-J's ``n_inner``).
    num_experts, num_experts_per_tok, num_shared_experts, moe_intermediate_size,
    first_k_dense_replace, moe_layer_freq:
        Mixture of experts (``num_local_experts`` / ``n_routed_experts`` in HF); 0 experts = dense.
    shared_expert_intermediate_size:
        Width of all shared experts together when it differs from
        ``num_shared_experts * moe_intermediate_size`` (Qwen2-MoE, Qwen3-Next); 0 = that product.
    moe_layers:
        Indices of the MoE layers when they do not follow ``first_k_dense_replace`` /
        ``moe_layer_freq`` (Llama 4 interleaving, Qwen ``mlp_only_layers``); empty = derived.
    layer_types:
        Token mixer per layer (:class:`LayerType` values); empty = full attention everywhere.
    sliding_window, attention_chunk_size:
        Keys a ``sliding_attention`` layer sees; chunk of a ``chunked_attention`` layer.
    q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim:
        Multi-head latent attention (DeepSeek-V2/V3); ``kv_lora_rank > 0`` selects MLA.
    linear_num_key_heads, linear_num_value_heads, linear_key_head_dim, linear_value_head_dim,
    linear_conv_kernel_dim:
        Gated DeltaNet layers (Qwen3-Next, Qwen3.5).
    attn_output_gate:
        The query projection also emits a sigmoid output gate (Qwen3-Next/3.5 full attention).
    qk_norm_params, attention_sinks, expert_bias, partial_rotary_factor, parallel_block,
    norms_per_layer, lm_head_bias:
        Structural details that change parameter counts or operators (see docstring of the module).
    dtype:
        Default weight format (HF ``torch_dtype``, or ``quantization_config`` when present).
    quantized_experts_only:
        ``quantization_config`` leaves attention, router and embeddings in 16 bits (gpt-oss MXFP4).
    kv_dtype:
        KV-cache format the checkpoint declares (``kv_cache_scheme`` / ``kv_cache_quant_algo``);
        None = the engine's default.
    num_mtp_layers:
        Multi-token-prediction modules shipped with the weights (HF ``num_nextn_predict_layers``);
        speculative decoding with ``mtp`` needs at least one.
    config_model_type:
        The config's own ``model_type`` when it is read as another family (``granite`` read as
        ``llama``, :data:`~serveplan.specs.hf_config.MODEL_FAMILIES`); empty when it is ``model_type``.
    """

    name: str
    model_type: str
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = False
    hidden_act: str = "silu"
    bias: bool = False  # bias in attention projections and MLP (OPT; qkv bias of qwen2)
    # mixture of experts
    num_experts: int = 0
    num_experts_per_tok: int = 0
    num_shared_experts: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    shared_expert_gate: bool = False
    first_k_dense_replace: int = 0
    moe_layer_freq: int = 1
    moe_layers: tuple[int, ...] = ()
    expert_bias: bool = False
    router_bias: bool = False
    # attention variants
    layer_types: tuple[str, ...] = ()
    sliding_window: int = 0
    attention_chunk_size: int = 0
    attention_sinks: bool = False
    attn_output_gate: bool = False
    qk_norm_params: int = 0  # per layer
    partial_rotary_factor: float = 1.0
    # multi-head latent attention
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # linear attention (Gated DeltaNet)
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel_dim: int = 0
    # block structure
    mlp_bias: bool = False  # biases on a two-matrix MLP (OPT, GPT-J, GPT-NeoX)
    parallel_block: bool = False
    norms_per_layer: int = 2
    lm_head_bias: bool = False
    dtype: DType = DType.BF16
    quantized_experts_only: bool = False
    kv_dtype: DType | None = None
    num_mtp_layers: int = 0  # multi-token-prediction modules shipped with the weights (DeepSeek-V3: 1)
    source: str = ""
    config_model_type: str = ""  # the config's own model_type when it is read as another family
    # derived in __post_init__
    attention: AttentionKind = field(init=False)
    mlp: MLPKind = field(init=False)
    norm: NormKind = field(init=False)
    layer_kinds: tuple[LayerType, ...] = field(init=False)
    moe_layer_set: frozenset[int] = field(init=False)
    total_params: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.model_type not in SUPPORTED_MODEL_TYPES:
            raise SpecError(
                f"model {self.name!r}: model_type={self.model_type!r} is not supported; "
                f"expected one of: {', '.join(SUPPORTED_MODEL_TYPES)}"
            )
        self._check_fields()
        if self.num_experts:
            if not 0 < self.num_experts_per_tok <= self.num_experts:
                raise SpecError(
                    f"model {self.name!r}: num_experts_per_tok={self.num_experts_per_tok} must be "
                    f"in 1..num_experts={self.num_experts}"
                )
            if self.moe_intermediate_size <= 0:
                raise SpecError(f"model {self.name!r}: moe_intermediate_size must be positive for MoE")
        is_mla = self.kv_lora_rank > 0
        if is_mla and min(self.qk_nope_head_dim, self.qk_rope_head_dim, self.v_head_dim) <= 0:
            raise SpecError(
                f"model {self.name!r}: MLA needs positive qk_nope_head_dim, qk_rope_head_dim, v_head_dim"
            )
        kinds, moe_set = self._derive_layers()
        set_ = object.__setattr__
        set_(self, "attention", AttentionKind.MLA if is_mla else AttentionKind.GQA)
        set_(self, "norm", NormKind.LAYER if self.model_type in _LAYERNORM_TYPES else NormKind.RMS)
        set_(self, "mlp", MLPKind.PLAIN if self.model_type in _PLAIN_MLP_TYPES else MLPKind.GATED)
        set_(self, "layer_kinds", kinds)
        set_(self, "moe_layer_set", moe_set)
        set_(self, "total_params", sum(self.layer_params(i) for i in range(self.num_hidden_layers))
             + self.embedding_params())

    def _check_fields(self) -> None:
        """Every integer field an integer in its range, every size positive and within
        :data:`MAX_DIMENSION`, heads consistent: one message naming the field and the range."""
        where = f"model {self.name!r}"
        if not isinstance(self.name, str) or not self.name.strip():
            raise SpecError(f"model name={self.name!r} must be a non-empty name")
        for fname in _POSITIVE_FIELDS:
            value = getattr(self, fname)
            limit, why = _FIELD_LIMITS.get(fname, (MAX_DIMENSION, "larger than any transformer built"))
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise SpecError(f"{where}: {fname}={value!r} must be a positive integer (1..{limit:,})")
            if value > limit:
                raise SpecError(f"{where}: {fname}={value:,} must be <= {limit:,} ({why})")
        for fname in _COUNT_FIELDS:
            value = getattr(self, fname)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_DIMENSION:
                raise SpecError(f"{where}: {fname}={value!r} must be an integer in 0..{MAX_DIMENSION:,}")
        prf = self.partial_rotary_factor
        if isinstance(prf, bool) or not isinstance(prf, (int, float)) or not 0 < prf <= 1:
            raise SpecError(f"{where}: partial_rotary_factor={prf!r} must be in (0, 1]")
        if self.num_key_value_heads > self.num_attention_heads:
            raise SpecError(
                f"{where}: num_key_value_heads={self.num_key_value_heads} must be <= "
                f"num_attention_heads={self.num_attention_heads} (and divide it)"
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise SpecError(
                f"{where}: num_key_value_heads={self.num_key_value_heads} must divide "
                f"num_attention_heads={self.num_attention_heads}"
            )
        if self.num_experts and self.moe_layer_freq < 1:
            raise SpecError(f"{where}: moe_layer_freq={self.moe_layer_freq} must be >= 1")

    def _derive_layers(self) -> tuple[tuple[LayerType, ...], frozenset[int]]:
        """Token mixer of every layer and the MoE layer indices, checked against the fields."""
        L = self.num_hidden_layers
        kinds: tuple[LayerType, ...]
        if self.layer_types:
            if len(self.layer_types) != L:
                raise SpecError(
                    f"model {self.name!r}: layer_types has {len(self.layer_types)} entries; "
                    f"expected num_hidden_layers={L}"
                )
            try:
                kinds = tuple(LayerType(t) for t in self.layer_types)
            except ValueError:
                raise SpecError(
                    f"model {self.name!r}: layer_types={sorted(set(self.layer_types))}; expected values "
                    f"in: {', '.join(t.value for t in LayerType)}"
                ) from None
        else:
            kinds = (LayerType.FULL,) * L
        if LayerType.SLIDING in kinds and self.sliding_window <= 0:
            raise SpecError(f"model {self.name!r}: sliding_attention layers need a positive sliding_window")
        if LayerType.CHUNKED in kinds and self.attention_chunk_size <= 0:
            raise SpecError(f"model {self.name!r}: chunked_attention layers need a positive attention_chunk_size")
        if LayerType.LINEAR in kinds and min(self.linear_num_key_heads, self.linear_num_value_heads,
                                             self.linear_key_head_dim, self.linear_value_head_dim) <= 0:
            raise SpecError(f"model {self.name!r}: linear_attention layers need the linear_* head fields")
        if self.moe_layers:
            bad = [i for i in self.moe_layers if not 0 <= i < L]
            if bad:
                raise SpecError(f"model {self.name!r}: moe_layers {bad} outside 0..{L - 1}")
            moe_set = frozenset(self.moe_layers) if self.num_experts else frozenset()
        elif self.num_experts:
            moe_set = frozenset(
                i for i in range(self.first_k_dense_replace, L)
                if (i - self.first_k_dense_replace) % max(self.moe_layer_freq, 1) == 0
            )
        else:
            moe_set = frozenset()
        return kinds, moe_set

    # ----------------------------------------------------------------------------- geometry
    @property
    def q_dim(self) -> int:
        """Width of the concatenated query heads (``num_heads * head_dim``; may differ from h)."""
        if self.attention is AttentionKind.MLA:
            return self.num_attention_heads * (self.qk_nope_head_dim + self.qk_rope_head_dim)
        return self.num_attention_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of the K (or V) projection output for GQA/MHA."""
        return self.num_key_value_heads * self.head_dim

    @property
    def o_dim(self) -> int:
        """Input width of the output projection (``num_heads * v_head_dim``)."""
        if self.attention is AttentionKind.MLA:
            return self.num_attention_heads * self.v_head_dim
        return self.num_attention_heads * self.head_dim

    @property
    def attention_variant(self) -> str:
        """How the model's attention is known: ``mla`` (latent KV), ``mha`` (as many KV heads as
        query heads: OPT, GPT-3, Llama-1), ``mqa`` (one KV head: Falcon-7B) or ``gqa`` (KV heads
        shared by groups of query heads). The estimator models the last three alike (GQA with
        ``num_key_value_heads``); this is the name users expect to read."""
        if self.attention is AttentionKind.MLA:
            return "mla"
        if self.num_key_value_heads == self.num_attention_heads:
            return "mha"
        if self.num_key_value_heads == 1:
            return "mqa"
        return "gqa"

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def num_moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts."""
        return len(self.moe_layer_set)

    @property
    def num_dense_layers(self) -> int:
        return self.num_hidden_layers - self.num_moe_layers

    @property
    def local_window(self) -> int:
        """Keys a local layer attends to at most: the sliding window or the attention chunk."""
        if LayerType.CHUNKED in self.layer_kinds:
            return self.attention_chunk_size
        if LayerType.SLIDING in self.layer_kinds:
            return self.sliding_window
        return 0

    @property
    def is_chunked(self) -> bool:
        return LayerType.CHUNKED in self.layer_kinds

    def count_layers(self, kind: LayerType) -> int:
        return sum(1 for k in self.layer_kinds if k is kind)

    @property
    def num_attention_layers(self) -> int:
        """Layers with softmax attention (and hence a KV cache)."""
        return self.num_hidden_layers - self.count_layers(LayerType.LINEAR)

    def layer_signature(self) -> dict[tuple[LayerType, bool], int]:
        """Number of layers per (token mixer, MoE?) kind, in first-appearance order."""
        out: dict[tuple[LayerType, bool], int] = {}
        for i, k in enumerate(self.layer_kinds):
            key = (k, i in self.moe_layer_set)
            out[key] = out.get(key, 0) + 1
        return out

    # ----------------------------------------------------------------------------- parameters
    def attention_params(self) -> int:
        """Parameters of one softmax-attention block (projections, biases, norms, sinks)."""
        h = self.hidden_size
        if self.attention is AttentionKind.MLA:
            # DeepSeek-V3 MLA (modeling notes A.5): W^DQ (h x q_lora) + q norm, W^UQ and W^QR
            # (q_lora x H*(d_C + d_R)), W^DKV and W^KR (h x (kv_lora + d_R)) + kv norm,
            # W^UK and W^UV (kv_lora x H*(d_C + d_v)), W_O (H*d_v x h).
            H = self.num_attention_heads
            q_in = self.q_lora_rank or h
            n = 0
            if self.q_lora_rank:
                n += h * self.q_lora_rank + self.q_lora_rank
            n += q_in * H * (self.qk_nope_head_dim + self.qk_rope_head_dim)
            n += h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
            n += self.kv_lora_rank * H * (self.qk_nope_head_dim + self.v_head_dim)
            n += H * self.v_head_dim * h
            return n
        # Q (h x q_dim, twice with an output gate), K and V (h x kv_dim each), O (q_dim x h):
        # modeling notes B.1
        q_out = self.q_dim * (2 if self.attn_output_gate else 1)
        n = h * q_out + 2 * h * self.kv_dim + self.q_dim * h
        if self.bias:
            n += q_out + 2 * self.kv_dim + h
        n += self.qk_norm_params
        if self.attention_sinks:
            n += self.num_attention_heads  # one learned sink logit per head (gpt-oss)
        return n

    def linear_attention_params(self) -> int:
        """Parameters of one Gated DeltaNet layer (Qwen3-Next ``Qwen3NextGatedDeltaNet``):
        ``in_proj_qkvz`` h x (2*nk*dk + 2*nv*dv), ``in_proj_ba`` h x 2*nv, a depthwise causal
        conv1d of ``conv_kernel`` taps over the q, k and v channels, ``dt_bias`` and ``A_log``
        (nv each), the gated RMSNorm (dv) and ``out_proj`` nv*dv x h."""
        h = self.hidden_size
        kd = self.linear_num_key_heads * self.linear_key_head_dim
        vd = self.linear_num_value_heads * self.linear_value_head_dim
        nv = self.linear_num_value_heads
        return (h * (2 * kd + 2 * vd) + h * 2 * nv + (2 * kd + vd) * self.linear_conv_kernel_dim
                + 2 * nv + self.linear_value_head_dim + vd * h)

    def mixer_params(self, kind: LayerType) -> int:
        return self.linear_attention_params() if kind is LayerType.LINEAR else self.attention_params()

    def dense_mlp_params(self) -> int:
        h, ff = self.hidden_size, self.intermediate_size
        if self.mlp is MLPKind.GATED:
            return 3 * h * ff  # gate, up, down (BestServe eq. 6)
        n = 2 * h * ff  # fc1, fc2 (OPT, GPT-J, GPT-NeoX, Falcon)
        if self.mlp_bias:
            n += ff + h
        return n

    def expert_params(self) -> int:
        """Parameters of one routed expert: a gated MLP of ``moe_intermediate_size`` (plus its
        biases in gpt-oss: ``2*ff`` on gate_up and ``h`` on down)."""
        n = 3 * self.hidden_size * self.moe_intermediate_size
        if self.expert_bias:
            n += 2 * self.moe_intermediate_size + self.hidden_size
        return n

    @property
    def shared_intermediate(self) -> int:
        """Width of the shared expert(s) taken together."""
        return self.shared_expert_intermediate_size or self.num_shared_experts * self.moe_intermediate_size

    def shared_expert_params(self) -> int:
        """All shared experts of one MoE layer (a gated MLP of their total width) and the
        sigmoid gate of Qwen2-MoE/Qwen3-Next (h x 1)."""
        n = 3 * self.hidden_size * self.shared_intermediate
        if self.shared_expert_gate:
            n += self.hidden_size
        return n

    def router_params(self) -> int:
        """Router W_gating (d_model x E), notes B.1, plus its bias (gpt-oss)."""
        return self.hidden_size * self.num_experts + (self.num_experts if self.router_bias else 0)

    def moe_mlp_params(self) -> int:
        """All experts plus router of one MoE layer."""
        return self.num_experts * self.expert_params() + self.shared_expert_params() + self.router_params()

    def norm_params(self) -> int:
        """Norms of one layer (RMSNorm: weight; LayerNorm: weight and bias): two for pre-norm
        blocks, one for GPT-J/Falcon-7B parallel blocks, four for Gemma's sandwich norms."""
        per = self.hidden_size * (2 if self.norm is NormKind.LAYER else 1)
        return self.norms_per_layer * per

    def embedding_params(self) -> int:
        """Token embedding, untied LM head (and its bias), final norm and (OPT) learned positions."""
        h = self.hidden_size
        n = self.vocab_size * h
        if not self.tie_word_embeddings:
            n += self.vocab_size * h
        if self.lm_head_bias:
            n += self.vocab_size
        n += h * (2 if self.norm is NormKind.LAYER else 1)
        if self.model_type == "opt":
            n += (self.max_position_embeddings + 2) * h  # OPT offsets positions by 2
        return n

    def layer_params(self, index: int) -> int:
        """Parameters of layer ``index`` (mixer, norms and MLP or MoE)."""
        kind = self.layer_kinds[index]
        mlp = self.moe_mlp_params() if index in self.moe_layer_set else self.dense_mlp_params()
        return self.mixer_params(kind) + self.norm_params() + mlp

    def num_parameters(self) -> int:
        """Total parameter count (all experts; multi-token-prediction heads not included)."""
        return self.total_params

    def num_active_parameters(self) -> int:
        """Parameters touched per token: top-k plus shared experts in MoE layers."""
        if not self.is_moe:
            return self.num_parameters()
        active_moe = (self.num_experts_per_tok * self.expert_params() + self.shared_expert_params()
                      + self.router_params())
        return self.num_parameters() - self.num_moe_layers * (self.moe_mlp_params() - active_moe)

    def routed_expert_params(self) -> int:
        """Parameters of all routed experts of the model."""
        return self.num_moe_layers * self.num_experts * self.expert_params()

    # ----------------------------------------------------------------------------- bytes
    def weight_formats(self, dtype: DType | None = None) -> tuple[DType, DType, DType]:
        """Formats of (layer weights, routed experts, embeddings and LM head) under ``dtype``.

        Checkpoints in block-scaled or weight-only formats keep the token embedding and LM head
        in 16 bits (ModelOpt's NVFP4 and FP8-block exports exclude ``lm_head``; AWQ/GPTQ quantise
        linear layers only); a ``quantization_config`` whose ``modules_to_not_convert`` names the
        attention and router (gpt-oss MXFP4) quantises the routed experts only. Plain ``fp8``,
        ``int8`` and ``int4`` store every weight in the format.
        """
        dt = dtype or self.dtype
        wide = DType.BF16
        if self.quantized_experts_only and dt.bytes < 2:
            return wide, dt, wide
        if dt in (DType.NVFP4, DType.MXFP4, DType.FP8_BLOCK, DType.W4A16, DType.W8A16):
            return dt, dt, wide
        return dt, dt, dt

    def weight_bytes(self, dtype: DType | None = None) -> float:
        """Bytes of all weights, block scales included (see :meth:`weight_formats`)."""
        layer_dt, expert_dt, embed_dt = self.weight_formats(dtype)
        experts = self.routed_expert_params()
        embed = self.embedding_params()
        rest = self.num_parameters() - experts - embed
        return rest * layer_dt.bytes + experts * expert_dt.bytes + embed * embed_dt.bytes

    def weight_bytes_per_device(self, dtype: DType | None = None, *, tp: int = 1, ep: int = 1,
                                expert_tp: int = 1, pp: int = 1, redundant_experts: int = 0) -> float:
        """Weight bytes on one device of the largest pipeline stage.

        Attention heads, dense MLP columns, shared experts and the vocabulary split over ``tp``
        (K/V projections are replicated when ``tp`` exceeds the KV heads; MLA's latent down-
        projections and every norm and router are replicated); routed experts spread over
        ``ep`` devices, each split over ``expert_tp``; layers over ``pp`` stages (the largest
        stage holds ``ceil(L/pp)`` layers, charged as that share of the whole); with
        ``redundant_experts`` copies a device holds ``(E + redundant) / ep`` experts.
        """
        layer_dt, expert_dt, embed_dt = self.weight_formats(dtype)
        h, t = self.hidden_size, tp
        if self.attention is AttentionKind.MLA:
            replicated = (h * self.q_lora_rank + self.q_lora_rank if self.q_lora_rank else 0)
            replicated += h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
            attn = replicated + (self.attention_params() - replicated) / t
        else:
            hkv_t = max(self.num_key_value_heads / t, 1.0)
            q_out = self.q_dim * (2 if self.attn_output_gate else 1)
            attn = (h * q_out + self.q_dim * h) / t + 2 * h * hkv_t * self.head_dim
            if self.bias:
                attn += (q_out + 2 * self.kv_dim) / t + h
            attn += self.qk_norm_params + (self.num_attention_heads / t if self.attention_sinks else 0)
        layer = experts = 0.0
        for i, kind in enumerate(self.layer_kinds):
            layer += (self.linear_attention_params() / t if kind is LayerType.LINEAR else attn) + self.norm_params()
            if i in self.moe_layer_set:
                experts += ((self.num_experts + redundant_experts) / ep) * self.expert_params() / expert_tp
                layer += self.shared_expert_params() / t + self.router_params()
            else:
                layer += self.dense_mlp_params() / t
        frac = math.ceil(self.num_hidden_layers / pp) / self.num_hidden_layers
        return (frac * (layer * layer_dt.bytes + experts * expert_dt.bytes)
                + self.embedding_params() / t * embed_dt.bytes)

    # ----------------------------------------------------------------------------- KV cache
    def default_kv_dtype(self, weights: DType | None = None) -> DType:
        """KV format when none is asked for: the checkpoint's declared KV format, else the
        weights' 16/32-bit format, else bf16 (vLLM ``kv_cache_dtype="auto"`` keeps the
        activations' format under quantised weights)."""
        if self.kv_dtype is not None:
            return self.kv_dtype
        w = weights or self.dtype
        return w if w in (DType.FP32, DType.FP16, DType.BF16) else DType.BF16

    def kv_elements_per_token_per_layer(self) -> int:
        """Cached values per token per softmax-attention layer.

        GQA/MHA: K and V, ``2 * num_kv_heads * head_dim`` (modeling notes B.3 with the layer
        factor restored). MLA: the latent ``c^KV`` plus the decoupled RoPE key ``k^R``,
        ``kv_lora_rank + qk_rope_head_dim`` (512 + 64 = 576 for DeepSeek-V3; notes A.5 decode
        step 3 — the prefill step-3 figure of 512 omits the RoPE key).
        """
        if self.attention is AttentionKind.MLA:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.kv_dim

    def kv_bytes_per_token(self, dtype: DType | None = None) -> float:
        """KV-cache bytes per token over all attention layers (whole model, no parallelism), for
        a sequence within every window: local layers stop growing past theirs (see
        :meth:`kv_bytes_per_sequence`); linear-attention layers hold no KV cache."""
        return (
            self.kv_elements_per_token_per_layer()
            * self.num_attention_layers
            * (dtype or self.default_kv_dtype()).bytes
        )

    def linear_state_elements(self) -> int:
        """Values of one Gated DeltaNet layer's state per sequence: the recurrent state
        ``nv * dk * dv`` plus the convolution state ``(2*nk*dk + nv*dv) * (conv_kernel - 1)``."""
        kd = self.linear_num_key_heads * self.linear_key_head_dim
        vd = self.linear_num_value_heads * self.linear_value_head_dim
        rec = self.linear_num_value_heads * self.linear_key_head_dim * self.linear_value_head_dim
        return rec + (2 * kd + vd) * max(self.linear_conv_kernel_dim - 1, 0)

    def cached_tokens(self, kind: LayerType, length: int) -> int:
        """Tokens of a ``length``-token sequence whose K/V a layer of ``kind`` keeps."""
        if kind is LayerType.SLIDING:
            return min(length, self.sliding_window)
        if kind is LayerType.CHUNKED:
            return min(length, self.attention_chunk_size)
        if kind is LayerType.LINEAR:
            return 0
        return length

    def kv_bytes_per_sequence(self, length: int, dtype: DType | None = None,
                              state_dtype: DType = DType.BF16) -> float:
        """Cache bytes of one sequence of ``length`` tokens (whole model, no parallelism).

        Full-attention layers keep every token; sliding-window layers keep the last
        ``sliding_window`` (vLLM V1's hybrid allocator frees blocks that left the window);
        chunked layers at most one ``attention_chunk_size`` chunk; linear-attention layers a
        fixed-size state in ``state_dtype`` whatever the length.
        """
        kvb = (dtype or self.default_kv_dtype()).bytes
        per_tok = self.kv_elements_per_token_per_layer() * kvb
        total = 0.0
        state = self.linear_state_elements() * state_dtype.bytes if LayerType.LINEAR in self.layer_kinds else 0.0
        for kind in self.layer_kinds:
            total += state if kind is LayerType.LINEAR else per_tok * self.cached_tokens(kind, length)
        return total

    def with_(self, **changes: Any) -> ModelSpec:
        return dataclasses.replace(self, **changes)
