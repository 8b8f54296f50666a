"""Model specification built from Hugging Face ``config.json`` fields.

Field names follow the HF configs one-to-one (``hidden_size``, ``num_hidden_layers``, ...) so a
bundled YAML file or a user's ``config.json`` loads without renaming. Architecture families:

* ``llama``, ``mistral``, ``qwen2``, ``qwen3``: RMSNorm, GQA attention, SiLU-gated MLP.
* ``mixtral``: as llama, with a top-k mixture-of-experts MLP in every layer.
* ``opt``: LayerNorm with bias, MHA with bias, ReLU/GELU two-matrix MLP, learned positions.
* ``deepseek_v3``: RMSNorm, multi-head latent attention (MLA), MoE with shared experts after the
  first ``first_k_dense_replace`` dense layers.

Parameter and KV sizes are derived here once (``__post_init__``); every other layer reads them.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import yaml

from serveplan.errors import SpecError
from serveplan.units import DType

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "mixtral", "qwen2", "qwen3", "opt", "deepseek_v3")


class AttentionKind(str, Enum):
    """Attention mechanism; MHA is GQA with as many KV heads as query heads."""

    GQA = "gqa"
    MLA = "mla"


class MLPKind(str, Enum):
    """Feed-forward shape: SiLU-gated three-matrix MLP, or two-matrix MLP (OPT)."""

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
        As in HF configs (``intermediate_size`` is OPT's ``ffn_dim``).
    num_experts, num_experts_per_tok, num_shared_experts, moe_intermediate_size,
    first_k_dense_replace, moe_layer_freq:
        Mixture of experts (``num_local_experts`` / ``n_routed_experts`` in HF); 0 experts = dense.
    q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim:
        Multi-head latent attention (DeepSeek-V2/V3); ``kv_lora_rank > 0`` selects MLA.
    dtype:
        Default weight/KV format (HF ``torch_dtype``); commands may override it.
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
    first_k_dense_replace: int = 0
    moe_layer_freq: int = 1
    # multi-head latent attention
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    dtype: DType = DType.BF16
    source: str = ""
    # derived in __post_init__
    attention: AttentionKind = field(init=False)
    mlp: MLPKind = field(init=False)
    norm: NormKind = field(init=False)

    def __post_init__(self) -> None:
        if self.model_type not in SUPPORTED_MODEL_TYPES:
            raise SpecError(
                f"model {self.name!r}: model_type={self.model_type!r} is not supported; "
                f"expected one of: {', '.join(SUPPORTED_MODEL_TYPES)}"
            )
        for fname in ("hidden_size", "intermediate_size", "num_hidden_layers",
                      "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size"):
            value = getattr(self, fname)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise SpecError(f"model {self.name!r}: {fname}={value!r} must be a positive integer")
        if self.num_attention_heads % self.num_key_value_heads:
            raise SpecError(
                f"model {self.name!r}: num_key_value_heads={self.num_key_value_heads} must divide "
                f"num_attention_heads={self.num_attention_heads}"
            )
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
        set_ = object.__setattr__
        set_(self, "attention", AttentionKind.MLA if is_mla else AttentionKind.GQA)
        set_(self, "norm", NormKind.LAYER if self.model_type == "opt" else NormKind.RMS)
        set_(self, "mlp", MLPKind.PLAIN if self.model_type == "opt" else MLPKind.GATED)

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
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def num_moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts (DeepSeek: after ``first_k_dense_replace``)."""
        if not self.is_moe:
            return 0
        return sum(
            1
            for i in range(self.first_k_dense_replace, self.num_hidden_layers)
            if (i - self.first_k_dense_replace) % max(self.moe_layer_freq, 1) == 0
        )

    @property
    def num_dense_layers(self) -> int:
        return self.num_hidden_layers - self.num_moe_layers

    # ----------------------------------------------------------------------------- parameters
    def attention_params(self) -> int:
        """Parameters of one attention block (projections and biases, MLA norms included)."""
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
        # Q (h x q_dim), K and V (h x kv_dim each), O (q_dim x h): modeling notes B.1
        n = h * self.q_dim + 2 * h * self.kv_dim + self.q_dim * h
        if self.bias:
            n += self.q_dim + 2 * self.kv_dim + h
        return n

    def dense_mlp_params(self) -> int:
        h, ff = self.hidden_size, self.intermediate_size
        if self.mlp is MLPKind.GATED:
            return 3 * h * ff  # gate, up, down (BestServe eq. 6)
        n = 2 * h * ff  # fc1, fc2 (OPT)
        if self.bias:
            n += ff + h
        return n

    def expert_params(self) -> int:
        """Parameters of one routed (or shared) expert: a gated MLP of ``moe_intermediate_size``."""
        return 3 * self.hidden_size * self.moe_intermediate_size

    def moe_mlp_params(self) -> int:
        """All experts plus router of one MoE layer."""
        return (
            (self.num_experts + self.num_shared_experts) * self.expert_params()
            + self.hidden_size * self.num_experts  # router W_gating (d_model x E), notes B.1
        )

    def norm_params(self) -> int:
        """Two norms per layer (RMSNorm: weight; LayerNorm: weight and bias)."""
        per = self.hidden_size * (2 if self.norm is NormKind.LAYER else 1)
        return 2 * per

    def embedding_params(self) -> int:
        """Token embedding, untied LM head, final norm and (OPT) learned positions."""
        h = self.hidden_size
        n = self.vocab_size * h
        if not self.tie_word_embeddings:
            n += self.vocab_size * h
        n += h * (2 if self.norm is NormKind.LAYER else 1)
        if self.model_type == "opt":
            n += (self.max_position_embeddings + 2) * h  # OPT offsets positions by 2
        return n

    def num_parameters(self) -> int:
        """Total parameter count (all experts)."""
        per_layer_common = self.attention_params() + self.norm_params()
        return (
            self.num_hidden_layers * per_layer_common
            + self.num_dense_layers * self.dense_mlp_params()
            + self.num_moe_layers * self.moe_mlp_params()
            + self.embedding_params()
        )

    def num_active_parameters(self) -> int:
        """Parameters touched per token: top-k plus shared experts in MoE layers."""
        if not self.is_moe:
            return self.num_parameters()
        active_moe = (
            (self.num_experts_per_tok + self.num_shared_experts) * self.expert_params()
            + self.hidden_size * self.num_experts
        )
        return self.num_parameters() - self.num_moe_layers * (self.moe_mlp_params() - active_moe)

    def weight_bytes(self, dtype: DType | None = None) -> float:
        return self.num_parameters() * (dtype or self.dtype).bytes

    # ----------------------------------------------------------------------------- KV cache
    def kv_elements_per_token_per_layer(self) -> int:
        """Cached values per token per layer.

        GQA/MHA: K and V, ``2 * num_kv_heads * head_dim`` (modeling notes B.3 with the layer
        factor restored). MLA: the latent ``c^KV`` plus the decoupled RoPE key ``k^R``,
        ``kv_lora_rank + qk_rope_head_dim`` (512 + 64 = 576 for DeepSeek-V3; notes A.5 decode
        step 3 — the prefill step-3 figure of 512 omits the RoPE key).
        """
        if self.attention is AttentionKind.MLA:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.kv_dim

    def kv_bytes_per_token(self, dtype: DType | None = None) -> float:
        """KV-cache bytes per token over all layers (whole model, no parallelism)."""
        return (
            self.kv_elements_per_token_per_layer()
            * self.num_hidden_layers
            * (dtype or self.dtype).bytes
        )

    def with_(self, **changes: Any) -> ModelSpec:
        return dataclasses.replace(self, **changes)


# ------------------------------------------------------------------------------------ loading
def _get(cfg: dict[str, Any], *names: str, default: Any = None) -> Any:
    for n in names:
        if n in cfg and cfg[n] is not None:
            return cfg[n]
    return default


def model_from_hf_config(cfg: dict[str, Any], *, name: str | None = None, source: str = "") -> ModelSpec:
    """Build a :class:`ModelSpec` from a Hugging Face ``config.json`` dictionary.

    Raises
    ------
    SpecError
        If ``model_type`` is unsupported or a required field is missing or not a number.
    """
    if not isinstance(cfg, dict):
        raise SpecError(f"model config must be a mapping of config.json fields, got {type(cfg).__name__}")
    mt = cfg.get("model_type")
    name = name or cfg.get("name") or cfg.get("_name_or_path") or str(mt)
    if mt not in SUPPORTED_MODEL_TYPES:
        raise SpecError(
            f"model {name!r}: model_type={mt!r} is not supported; expected one of: "
            f"{', '.join(SUPPORTED_MODEL_TYPES)}"
        )

    def need(*keys: str) -> int:
        v = _get(cfg, *keys)
        if v is None:
            raise SpecError(f"model {name!r}: config.json field {keys[0]!r} is missing")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or int(v) != v:
            raise SpecError(f"model {name!r}: config.json field {keys[0]!r}={v!r} must be an integer")
        return int(v)

    hidden = need("hidden_size", "d_model")
    heads = need("num_attention_heads")
    kv_heads = int(_get(cfg, "num_key_value_heads", default=heads) or heads)
    head_dim = int(_get(cfg, "head_dim", default=0) or (hidden // heads if heads else 0))
    inter = need("ffn_dim", "intermediate_size") if mt == "opt" else need("intermediate_size")
    dtype_raw = _get(cfg, "torch_dtype", "dtype", default="bfloat16")
    try:
        dtype = DType.parse(dtype_raw)
    except SpecError:
        dtype = DType.BF16
    kw: dict[str, Any] = dict(
        name=name,
        model_type=mt,
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=need("num_hidden_layers"),
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        vocab_size=need("vocab_size"),
        max_position_embeddings=int(_get(cfg, "max_position_embeddings", default=4096)),
        tie_word_embeddings=bool(_get(cfg, "tie_word_embeddings", default=mt == "opt")),
        hidden_act=str(_get(cfg, "hidden_act", "activation_function", default="silu")),
        dtype=dtype,
        source=source or str(cfg.get("source", "")),
    )
    if mt == "opt":
        kw["bias"] = bool(_get(cfg, "enable_bias", default=True))
    elif mt == "qwen2":
        kw["bias"] = True  # qwen2 has q/k/v biases
    elif mt == "qwen3":
        kw["bias"] = bool(_get(cfg, "attention_bias", default=False))
    if mt == "mixtral":
        kw.update(
            num_experts=need("num_local_experts"),
            num_experts_per_tok=need("num_experts_per_tok"),
            moe_intermediate_size=inter,
        )
    if mt == "deepseek_v3":
        kw.update(
            num_experts=need("n_routed_experts"),
            num_experts_per_tok=need("num_experts_per_tok"),
            num_shared_experts=int(_get(cfg, "n_shared_experts", default=0)),
            moe_intermediate_size=need("moe_intermediate_size"),
            first_k_dense_replace=int(_get(cfg, "first_k_dense_replace", default=0)),
            moe_layer_freq=int(_get(cfg, "moe_layer_freq", default=1)),
            q_lora_rank=int(_get(cfg, "q_lora_rank", default=0) or 0),
            kv_lora_rank=need("kv_lora_rank"),
            qk_nope_head_dim=need("qk_nope_head_dim"),
            qk_rope_head_dim=need("qk_rope_head_dim"),
            v_head_dim=need("v_head_dim"),
        )
        kw["head_dim"] = kw["qk_nope_head_dim"] + kw["qk_rope_head_dim"]
    return ModelSpec(**kw)


def load_model_file(path: str | Path) -> ModelSpec:
    """Load a model from a HF ``config.json`` (or a YAML file with the same fields)."""
    p = Path(path)
    if not p.is_file():
        raise SpecError(f"model file {str(p)!r} does not exist")
    try:
        text = p.read_text()
        cfg = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except (OSError, json.JSONDecodeError, yaml.YAMLError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        fmt = "JSON" if p.suffix == ".json" else "YAML"
        raise SpecError(f"model file {str(p)!r} is not valid {fmt}: {first}") from None
    name = cfg.get("name") if isinstance(cfg, dict) else None
    return model_from_hf_config(cfg, name=name or p.parent.name or p.stem, source=str(p))
