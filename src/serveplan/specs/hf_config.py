"""Reading a Hugging Face ``config.json`` into a :class:`~serveplan.specs.model.ModelSpec`.

Fields keep their Hugging Face names, so a bundled YAML file or a user's ``config.json`` loads
without renaming; each ``model_type``'s own field names and defaults are read here
(:func:`model_from_hf_config`), and what each type models is listed in :mod:`serveplan.specs.model`
and docs/adding-model.md.

Types serveplan does not model on their own are read as a family when their layers have its shapes
(:data:`MODEL_FAMILIES`: ``granite``, ``olmo2``, ``smollm3``, ... read as ``llama``). A type outside
that map is refused unless the caller states the family it follows: ``family="llama"``, or
``serveplan_family: llama`` in a model YAML file. To add a type to the map, check its
``configuration_*.py`` and ``modeling_*.py`` (or ``modular_*.py``) in transformers: every layer
must have the family's projections and MLP, and anything else it adds (multipliers, norms) must
change neither the FLOPs nor the bytes beyond what the family's fields express; cite the file.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import yaml

from serveplan.errors import SpecError
from serveplan.specs.model import SUPPORTED_MODEL_TYPES, ModelSpec
from serveplan.units import DType

#: Wrapper or alias types and the type they are read as (multimodal wrappers via ``text_config``).
MODEL_TYPE_ALIASES = {
    "llama4_text": "llama4", "gemma3_text": "gemma3", "qwen3_5_moe_text": "qwen3_5_moe",
    "kimi_k25": "kimi_k2", "phi4": "phi3", "RefinedWeb": "falcon", "RefinedWebModel": "falcon",
}

#: ``model_type`` -> the supported family its layers follow (docs/adding-model.md, "Types read as a
#: family", has the table with each type's source and what it adds). Each was checked against
#: transformers' ``models/<type>/modular_<type>.py`` (or the model repository's remote code):
#: RMSNorm, q/k/v/o projections with grouped KV heads, SiLU-gated gate/up/down MLP in every layer.
MODEL_FAMILIES = {
    # GraniteAttention/GraniteDecoderLayer subclass Llama's: embedding, residual and attention
    # multipliers and logits_scaling scale activations (no FLOPs or bytes)
    "granite": "llama",
    # OlmoLayerNorm has no weights (counted as RMSNorm weights: h per norm, < 0.01% of the
    # parameters); clip_qkv clamps activations
    "olmo": "llama",
    # Olmo2: norms after attention and MLP (two per layer, as Llama) and RMSNorm over the whole q
    # and k projections (q_norm: heads x head_dim, k_norm: kv_heads x head_dim)
    "olmo2": "llama",
    # Olmo3 = Olmo2's block with sliding-window attention on three layers of four (layer_types)
    "olmo3": "llama",
    # SmolLM3: Llama's layers; every fourth layer skips RoPE (no_rope_layers): an element-wise op
    "smollm3": "llama",
    # EXAONE 3/3.5 (remote code, configuration_exaone.py): Llama's shapes under other field names
    # (num_layers, activation_function)
    "exaone": "llama",
    # EXAONE 4: norms after attention and MLP, per-head q/k RMSNorm, local/global layers (layer_types
    # or sliding_window_pattern "LLLG")
    "exaone4": "llama",
    # InternLM2 (remote code, configuration_internlm2.py): one fused wqkv of the same shape, w1/w3/w2
    # gated MLP; ``bias`` on the attention projections
    "internlm2": "llama",
    # Ministral: Qwen2's layers without q/k/v biases, every layer sliding (MistralConfig fields)
    "ministral": "mistral",
}
#: Types read as a family that add RMSNorm weights on q and k: per head (``2 * head_dim``) or over the
#: whole projections (``(heads + kv_heads) * head_dim``).
_QK_NORM_PER_HEAD = ("exaone4",)
_QK_NORM_FULL_WIDTH = ("olmo2", "olmo3")


def model_family(model_type: Any, family: str | None = None, *, name: str = "?") -> str:
    """The supported type a config of ``model_type`` is read as.

    Aliases and wrappers (:data:`MODEL_TYPE_ALIASES`) and Llama-shaped types (:data:`MODEL_FAMILIES`)
    map to their family; ``family`` reads a type serveplan does not know as that family (an opt-in:
    the caller vouches that its layers have the family's shapes).

    Raises
    ------
    SpecError
        An unknown type without ``family``, an unsupported ``family``, or a ``family`` that
        contradicts the family a known type is read as.
    """
    mt = MODEL_TYPE_ALIASES.get(str(model_type), model_type)
    mt = MODEL_FAMILIES.get(str(mt), mt)
    if family is not None:
        fam = str(family).strip().lower()
        if fam not in SUPPORTED_MODEL_TYPES:
            raise SpecError(f"model {name!r}: family={family!r} is not a supported family; expected one of: "
                            f"{', '.join(SUPPORTED_MODEL_TYPES)}")
        if mt in SUPPORTED_MODEL_TYPES and mt != fam:
            raise SpecError(f"model {name!r}: model_type={model_type!r} is read as {mt!r}, not family={fam!r}; "
                            "expected family only for a type serveplan does not know (or none)")
        return fam
    if mt not in SUPPORTED_MODEL_TYPES:
        families = ", ".join(f"{k} -> {v}" for k, v in sorted(MODEL_FAMILIES.items()))
        raise SpecError(
            f"model {name!r}: model_type={model_type!r} is not supported; expected one of: "
            f"{', '.join(SUPPORTED_MODEL_TYPES)} (read as a family: {families}). If its layers have one of "
            "these shapes (e.g. Llama's: RMSNorm, q/k/v/o projections, SiLU-gated MLP), say which: "
            "family='llama' (Python) or 'serveplan_family: llama' in a model YAML file")
    return str(mt)


def _get(cfg: dict[str, Any], *names: str, default: Any = None) -> Any:
    for n in names:
        if n in cfg and cfg[n] is not None:
            return cfg[n]
    return default


def _text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """The language model's fields: a multimodal wrapper's ``text_config`` (keeping the
    wrapper's quantization and dtype when the text part does not restate them)."""
    text = cfg.get("text_config")
    if not isinstance(text, dict):
        return cfg
    out = dict(text)
    for key in ("quantization_config", "torch_dtype", "dtype", "name", "source", "tie_word_embeddings"):
        if key in cfg and key not in out:
            out[key] = cfg[key]
    wrapper = MODEL_TYPE_ALIASES.get(str(cfg.get("model_type")), cfg.get("model_type"))
    inner = MODEL_TYPE_ALIASES.get(str(out.get("model_type")), out.get("model_type"))
    if inner not in SUPPORTED_MODEL_TYPES or wrapper in SUPPORTED_MODEL_TYPES:
        out["model_type"] = wrapper  # e.g. kimi_k25 wraps a deepseek_v3 text model: read as kimi_k2
    return out


#: ``quantization_config`` methods serveplan reads, for error messages.
QUANT_METHODS = ("fp8", "mxfp4", "awq", "gptq", "compressed-tensors", "modelopt", "bitsandbytes")


def quantization_from_config(qc: dict[str, Any], name: str) -> tuple[DType, bool, DType | None]:
    """``(weight format, experts only, KV format or None)`` of a HF ``quantization_config``.

    Read fields: ``quant_method`` with ``weight_block_size`` (fp8: block scales), ``bits``
    (AWQ/GPTQ), ``config_groups.*.weights`` and ``kv_cache_scheme`` (compressed-tensors),
    ``quant_algo``/``kv_cache_quant_algo`` (ModelOpt), ``modules_to_not_convert``/``ignore``
    (attention and router left in 16 bits -> experts only).
    """
    method = str(qc.get("quant_method", qc.get("quant_algo", ""))).lower()
    skip = [str(x) for x in (qc.get("modules_to_not_convert") or qc.get("ignore") or [])]
    experts_only = any("self_attn" in x for x in skip)
    kv: DType | None = None
    if method == "fp8":
        dt = DType.FP8_BLOCK if qc.get("weight_block_size") else DType.FP8
    elif method == "mxfp4":
        dt = DType.MXFP4
    elif method in ("awq", "gptq"):
        bits = int(qc.get("bits", qc.get("w_bit", 4)))
        dt = DType.W4A16 if bits == 4 else DType.W8A16
    elif method == "bitsandbytes":
        dt = DType.W4A16 if qc.get("load_in_4bit") else DType.W8A16
    elif method in ("modelopt", "nvfp4"):
        algo = str(qc.get("quant_algo", "")).upper()
        dt = DType.NVFP4 if "FP4" in algo else DType.FP8
        kv = DType.FP8 if str(qc.get("kv_cache_quant_algo", "")).upper() == "FP8" else None
    elif method == "compressed-tensors":
        groups: dict[str, Any] = qc.get("config_groups") or {}
        first: dict[str, Any] = next(iter(groups.values()), {})
        w: dict[str, Any] = first.get("weights") or {}
        a = first.get("input_activations")
        bits, kind = int(w.get("num_bits", 8)), str(w.get("type", "int"))
        if kind == "float" and bits == 4:
            dt = DType.NVFP4
        elif kind == "float":
            dt = DType.FP8_BLOCK if w.get("block_structure") else DType.FP8
        elif a is None:
            dt = DType.W4A16 if bits == 4 else DType.W8A16
        else:
            dt = DType.INT8 if bits == 8 else DType.INT4
        kvs = qc.get("kv_cache_scheme")
        if isinstance(kvs, dict) and int(kvs.get("num_bits", 16)) == 8:
            kv = DType.FP8
    else:
        raise SpecError(
            f"model {name!r}: quantization_config quant_method={method!r} is not supported; "
            f"expected one of: {', '.join(QUANT_METHODS)}"
        )
    return dt, experts_only, kv


def _layer_types(cfg: dict[str, Any], mt: str, n_layers: int) -> tuple[str, ...]:
    """Per-layer token mixer: the config's ``layer_types`` or the type's documented pattern."""
    given = cfg.get("layer_types")
    if isinstance(given, list) and given:
        return tuple(str(t) for t in given)
    sw = _get(cfg, "sliding_window", default=0) or 0
    if mt == "gemma2":
        # HF Gemma2DecoderLayer: even layers slide, odd layers are global
        return tuple("sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(n_layers))
    if mt == "gemma3":
        pattern = int(_get(cfg, "sliding_window_pattern", default=6))
        return tuple("sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n_layers))
    if mt == "llama4":
        # HF Llama4TextConfig: no_rope_layers[i] = 1 on RoPE layers, which use chunked attention;
        # the NoPE layers (every no_rope_layer_interval-th, default 4) attend globally
        interval = int(_get(cfg, "no_rope_layer_interval", default=4))
        nope = cfg.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(n_layers)]
        if not _get(cfg, "attention_chunk_size", default=0):
            return ()
        return tuple("chunked_attention" if r else "full_attention" for r in nope)
    if mt == "olmo3" and sw:
        # HF Olmo3Config: sliding-window attention on three layers of four, every fourth full
        return tuple("sliding_attention" if (i + 1) % 4 else "full_attention" for i in range(n_layers))
    pattern_str = cfg.get("sliding_window_pattern")
    if mt == "exaone4" and sw and isinstance(pattern_str, str) and pattern_str:
        # HF Exaone4Config: "L" local, "G" global, repeated from layer 0; the last layer is global
        kinds = ["sliding_attention" if pattern_str[i % len(pattern_str)].upper() == "L" else "full_attention"
                 for i in range(n_layers)]
        kinds[-1] = "full_attention"
        return tuple(kinds)
    if mt in ("qwen3_next", "qwen3_5_moe"):
        interval = int(_get(cfg, "full_attention_interval", default=4))
        return tuple("full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n_layers))
    if mt in ("mistral", "ministral", "phi3", "mixtral") and sw:
        return ("sliding_attention",) * n_layers
    if mt in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe") and sw and cfg.get("use_sliding_window"):
        first = int(_get(cfg, "max_window_layers", default=n_layers))  # HF Qwen2: layers >= it slide
        return tuple("sliding_attention" if i >= first else "full_attention" for i in range(n_layers))
    return ()


class _Fields:
    """Integer fields of one config with errors naming the model and the field."""

    def __init__(self, cfg: dict[str, Any], name: str) -> None:
        self.cfg, self.name = cfg, name

    def need(self, *keys: str) -> int:
        v = _get(self.cfg, *keys)
        if v is None:
            raise SpecError(f"model {self.name!r}: config.json field {keys[0]!r} is missing")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or int(v) != v:
            raise SpecError(f"model {self.name!r}: config.json field {keys[0]!r}={v!r} must be a positive integer")
        return int(v)

    def count(self, key: str, default: int) -> int:
        """An optional integer field: ``default`` when absent or null, else checked like :meth:`need`."""
        if _get(self.cfg, key) is None:
            return default
        return self.need(key)

    def opt(self, key: str, default: Any = 0) -> Any:
        return _get(self.cfg, key, default=default)


def _kv_heads(f: _Fields, mt: str, heads: int) -> int:
    cfg = f.cfg
    if mt == "falcon":
        if cfg.get("new_decoder_architecture"):
            return f.count("num_kv_heads", heads)
        return 1 if cfg.get("multi_query", True) else heads
    return f.count("num_key_value_heads", heads)


def _dense_width(f: _Fields, mt: str, hidden: int) -> int:
    """Width of the dense MLP under each type's field name."""
    if mt == "opt":
        return f.need("ffn_dim", "intermediate_size")
    if mt == "gptj":
        return int(f.opt("n_inner", 0) or 4 * hidden)
    if mt == "falcon":
        return int(f.opt("ffn_hidden_size", 0) or 4 * hidden)
    if mt == "llama4":
        return f.need("intermediate_size_mlp")
    if mt == "qwen3_5_moe" and f.opt("intermediate_size", None) is None:
        return f.need("moe_intermediate_size")  # every layer is MoE: no dense width given
    return f.need("intermediate_size")


def _attention_fields(f: _Fields, mt: str, heads: int, kv_heads: int, head_dim: int) -> dict[str, Any]:
    """Biases, q/k norms, partial rotary, block structure."""
    cfg, kw = f.cfg, {}
    rope: dict[str, Any] = cfg["rope_parameters"] if isinstance(cfg.get("rope_parameters"), dict) else {}
    prf = f.opt("partial_rotary_factor", None) or rope.get("partial_rotary_factor")
    if prf:
        kw["partial_rotary_factor"] = float(prf)
    if mt in ("gemma2", "gemma3"):
        kw.update(tie_word_embeddings=True,  # Gemma ties the LM head to the embedding
                  norms_per_layer=4)  # input, post-attention, pre- and post-feedforward RMSNorms
    if mt in ("qwen3", "qwen3_moe", "gemma3", "qwen3_next", "qwen3_5_moe"):
        kw["qk_norm_params"] = 2 * head_dim  # per-head RMSNorm on q and k
    if mt == "minimax_m2" and cfg.get("use_qk_norm", True):
        kw["qk_norm_params"] = (heads + kv_heads) * head_dim  # full-width q/k norms
        if f.opt("rotary_dim", 0):
            kw["partial_rotary_factor"] = float(f.opt("rotary_dim")) / head_dim
    bias_default = {"opt": True, "qwen2": True, "qwen2_moe": True, "gpt_neox": True}
    if mt == "opt":
        kw["bias"] = bool(f.opt("enable_bias", True))
    elif mt in ("qwen2", "qwen2_moe"):
        kw["bias"] = True  # q/k/v biases
    elif mt == "falcon":
        kw["bias"] = bool(f.opt("bias", False))
    elif mt not in ("gptj", "minimax_m2", "phi3", "mixtral", "llama4", "deepseek_v2", "deepseek_v3", "kimi_k2",
                    "qwen3_next", "qwen3_5_moe"):
        kw["bias"] = bool(f.opt("attention_bias", bias_default.get(mt, False)))
    if mt in ("opt", "gptj", "gpt_neox"):
        kw["mlp_bias"] = bool(kw.get("bias", True)) if mt == "opt" else True
    if mt == "gptj":
        kw.update(parallel_block=True, norms_per_layer=1, lm_head_bias=True,
                  partial_rotary_factor=float(f.opt("rotary_dim", head_dim)) / head_dim)
    elif mt == "gpt_neox":
        kw.update(parallel_block=bool(f.opt("use_parallel_residual", True)),
                  partial_rotary_factor=float(f.opt("rotary_pct", 1.0)))
    elif mt == "falcon":
        new_arch, parallel = bool(cfg.get("new_decoder_architecture")), bool(f.opt("parallel_attn", True))
        kw.update(parallel_block=parallel or new_arch, norms_per_layer=2 if new_arch or not parallel else 1)
    if mt in ("qwen3_next", "qwen3_5_moe"):
        kw.update(
            attn_output_gate=bool(f.opt("attn_output_gate", True)),
            linear_num_key_heads=f.need("linear_num_key_heads"),
            linear_num_value_heads=f.need("linear_num_value_heads"),
            linear_key_head_dim=f.need("linear_key_head_dim"),
            linear_value_head_dim=f.need("linear_value_head_dim"),
            linear_conv_kernel_dim=f.need("linear_conv_kernel_dim"),
        )
    return kw


def _moe_fields(f: _Fields, mt: str, layers: int, inter: int) -> dict[str, Any]:
    """Experts, their widths and which layers hold them, under each type's field names."""
    cfg = f.cfg
    if mt == "mixtral":
        return dict(num_experts=f.need("num_local_experts"), num_experts_per_tok=f.need("num_experts_per_tok"),
                    moe_intermediate_size=inter)
    if mt in ("qwen2_moe", "qwen3_moe", "qwen3_next", "qwen3_5_moe"):
        step = int(f.opt("decoder_sparse_step", 1))
        only = set(cfg.get("mlp_only_layers") or [])
        shared = int(f.opt("shared_expert_intermediate_size", 0) or 0)
        return dict(
            num_experts=f.need("num_experts"), num_experts_per_tok=f.need("num_experts_per_tok"),
            moe_intermediate_size=f.need("moe_intermediate_size"), num_shared_experts=1 if shared else 0,
            shared_expert_intermediate_size=shared, shared_expert_gate=bool(shared),
            # HF Qwen2MoeDecoderLayer: MoE where layer not in mlp_only_layers and (i+1) % step == 0
            moe_layers=tuple(i for i in range(layers) if i not in only and (i + 1) % step == 0),
        )
    if mt == "llama4":
        step = int(f.opt("interleave_moe_layer_step", 1))
        moe = cfg.get("moe_layers") or list(range(step - 1, layers, step))
        return dict(num_experts=f.need("num_local_experts"), num_experts_per_tok=f.need("num_experts_per_tok"),
                    moe_intermediate_size=f.need("intermediate_size"),
                    num_shared_experts=1,  # Llama4TextMoe: one shared expert of the expert width
                    moe_layers=tuple(int(i) for i in moe))
    if mt == "gpt_oss":
        return dict(num_experts=f.need("num_local_experts"),
                    num_experts_per_tok=f.need("num_experts_per_tok", "experts_per_token"),
                    moe_intermediate_size=f.need("intermediate_size"),
                    expert_bias=True, router_bias=True, attention_sinks=True)
    if mt == "minimax_m2":
        kw: dict[str, Any] = dict(num_experts=f.need("num_local_experts"),
                                  num_experts_per_tok=f.need("num_experts_per_tok"),
                                  moe_intermediate_size=f.need("intermediate_size"))
        shared = int(f.opt("shared_intermediate_size", 0) or 0)
        if shared:
            kw.update(num_shared_experts=1, shared_expert_intermediate_size=shared)
        return kw
    if mt in ("deepseek_v3", "deepseek_v2", "kimi_k2", "glm4_moe"):
        kw = dict(
            num_experts=f.need("n_routed_experts"), num_experts_per_tok=f.need("num_experts_per_tok"),
            num_shared_experts=int(f.opt("n_shared_experts", 0)), moe_intermediate_size=f.need("moe_intermediate_size"),
            first_k_dense_replace=int(f.opt("first_k_dense_replace", 0)),
            moe_layer_freq=int(f.opt("moe_layer_freq", 1)),
        )
        if mt != "glm4_moe":  # multi-head latent attention
            kw.update(q_lora_rank=int(f.opt("q_lora_rank", 0) or 0), kv_lora_rank=f.need("kv_lora_rank"),
                      qk_nope_head_dim=f.need("qk_nope_head_dim"), qk_rope_head_dim=f.need("qk_rope_head_dim"),
                      v_head_dim=f.need("v_head_dim"))
            kw["head_dim"] = kw["qk_nope_head_dim"] + kw["qk_rope_head_dim"]
        return kw
    return {}


def _max_positions(f: _Fields) -> int:
    if _get(f.cfg, "max_position_embeddings", "n_positions") is None:
        return 4096  # not stated: the common default of 2023 models
    return f.need("max_position_embeddings", "n_positions")


def model_from_hf_config(cfg: dict[str, Any], *, name: str | None = None, source: str = "",
                         family: str | None = None) -> ModelSpec:
    """Build a :class:`ModelSpec` from a Hugging Face ``config.json`` dictionary.

    Parameters
    ----------
    cfg:
        The ``config.json`` fields (a multimodal wrapper is read from its ``text_config``).
    name, source:
        Catalog id or display name, and where the fields come from.
    family:
        Read a ``model_type`` serveplan does not know as this supported type (``"llama"``): an
        opt-in for a type whose layers have that family's shapes. A model YAML file states it as
        ``serveplan_family: llama``. Types of :data:`MODEL_FAMILIES` need none.

    Raises
    ------
    SpecError
        If ``model_type`` is unsupported (and no ``family`` given), a required field is missing
        or not a number, or the ``quantization_config`` method is unknown.
    """
    if not isinstance(cfg, dict):
        raise SpecError(f"model config must be a mapping of config.json fields, got {type(cfg).__name__}")
    name = str(name or cfg.get("name") or cfg.get("_name_or_path") or cfg.get("model_type"))
    family = family if family is not None else cfg.get("serveplan_family")
    cfg = _text_config(cfg)
    raw_mt = cfg.get("model_type")
    mt = model_family(raw_mt, family, name=name)
    config_type = MODEL_TYPE_ALIASES.get(str(raw_mt), str(raw_mt))
    try:
        return _model_from_fields(cfg, name, mt, source, config_type=config_type if config_type != mt else "")
    except SpecError:
        raise
    except (TypeError, ValueError, OverflowError, KeyError, AttributeError) as exc:
        # a field of the wrong type (a list where a number belongs, NaN in an integer field, ...)
        raise SpecError(f"model {name!r}: config.json has a field of the wrong type or value: {exc}; expected "
                        "the Hugging Face config.json schema of model_type " + repr(mt)) from None


def _model_from_fields(cfg: dict[str, Any], name: str, mt: str, source: str, *, config_type: str = "") -> ModelSpec:
    f = _Fields(cfg, name)
    hidden = f.need("hidden_size", "d_model", "n_embd")
    heads = f.need("num_attention_heads", "n_head")
    if heads <= 0 or hidden <= 0:
        bad, value = ("num_attention_heads", heads) if heads <= 0 else ("hidden_size", hidden)
        raise SpecError(f"model {name!r}: config.json field {bad!r}={value} must be a positive integer")
    kv_heads = _kv_heads(f, mt, heads)
    given_head_dim = f.opt("head_dim", None)
    if given_head_dim is None and mt not in ("deepseek_v2", "deepseek_v3", "kimi_k2") and hidden % heads:
        raise SpecError(f"model {name!r}: num_attention_heads={heads} must divide hidden_size={hidden} "
                        "(or give head_dim)")
    if given_head_dim is not None and (isinstance(given_head_dim, bool) or not isinstance(given_head_dim, (int, float))
                                       or not math.isfinite(given_head_dim) or given_head_dim != int(given_head_dim)
                                       or given_head_dim <= 0):
        raise SpecError(f"model {name!r}: config.json field 'head_dim'={given_head_dim!r} must be a positive integer")
    head_dim = int(given_head_dim or hidden // heads)
    inter = _dense_width(f, mt, hidden)
    layers = f.need("num_hidden_layers", "n_layer", "num_layers")
    try:
        dtype = DType.parse(_get(cfg, "torch_dtype", "dtype", default="bfloat16"))
    except SpecError:
        dtype = DType.BF16
    experts_only, kv_dtype = False, None
    qc = cfg.get("quantization_config")
    if isinstance(qc, dict) and qc:
        dtype, experts_only, kv_dtype = quantization_from_config(qc, name)
    if cfg.get("kv_cache_dtype") is not None:
        # the KV format the checkpoint declares, stated outright (a model YAML citing the checkpoint's
        # hf_quant_config.json, or read from one beside config.json): it wins over quantization_config
        try:
            kv_dtype = DType.parse_kv(str(cfg["kv_cache_dtype"]))
        except SpecError as exc:
            raise SpecError(f"model {name!r}: kv_cache_dtype: {exc}") from None
    kw: dict[str, Any] = dict(
        name=name, model_type=mt, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim, vocab_size=f.need("vocab_size"),
        max_position_embeddings=_max_positions(f),
        tie_word_embeddings=bool(f.opt("tie_word_embeddings", mt in ("opt", "gemma2", "gemma3", "falcon"))),
        hidden_act=str(_get(cfg, "hidden_act", "hidden_activation", "activation_function", default="silu")),
        dtype=dtype, quantized_experts_only=experts_only, kv_dtype=kv_dtype,
        source=source or str(cfg.get("source", "")), layer_types=_layer_types(cfg, config_type or mt, layers),
        sliding_window=int(f.opt("sliding_window", 0) or 0),
        attention_chunk_size=int(f.opt("attention_chunk_size", 0) or 0),
    )
    kw.update(_attention_fields(f, mt, heads, kv_heads, head_dim))
    kw.update(_family_fields(f, config_type, heads, kv_heads, head_dim))
    kw.update(_moe_fields(f, mt, layers, inter))
    # multi-token-prediction modules (DeepSeek-V3 / GLM ``num_nextn_predict_layers``, Qwen3.5
    # ``mtp_num_hidden_layers``, MiniMax ``num_mtp_modules``): what speculative ``mtp`` drafts with
    mtp = _get(cfg, "num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_modules", default=0)
    kw["num_mtp_layers"] = int(mtp) if isinstance(mtp, (int, float)) and not isinstance(mtp, bool) else 0
    kw["config_model_type"] = config_type
    return ModelSpec(**kw)


def _family_fields(f: _Fields, config_type: str, heads: int, kv_heads: int, head_dim: int) -> dict[str, Any]:
    """What a type read as a family (:data:`MODEL_FAMILIES`) adds to the family's fields."""
    kw: dict[str, Any] = {}
    if config_type in _QK_NORM_FULL_WIDTH:
        kw["qk_norm_params"] = (heads + kv_heads) * head_dim  # Olmo2Attention q_norm and k_norm
    elif config_type in _QK_NORM_PER_HEAD:
        kw["qk_norm_params"] = 2 * head_dim  # Exaone4Attention per-head q_norm and k_norm
    if config_type == "internlm2":
        kw["bias"] = bool(f.opt("bias", False))  # InternLM2Attention wqkv and wo
    return kw


def load_model_file(path: str | Path, *, family: str | None = None) -> ModelSpec:
    """Load a model from a HF ``config.json`` (or a YAML file with the same fields), or from a
    folder holding a ``config.json`` (a local snapshot, as ``huggingface-cli download`` leaves it).

    The model is named by its file's ``name`` field, else by its repository when the path is a
    Hugging Face cache snapshot (``models--<owner>--<name>/snapshots/<hash>``), else by its folder.
    """
    p = Path(path)
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise SpecError(f"model folder {str(p)!r} holds no config.json; expected a Hugging Face model folder "
                            "(a snapshot holding config.json) or the path of a config.json")
        p = p / "config.json"
    if not p.is_file():
        raise SpecError(f"model file {str(p)!r} does not exist")
    try:
        text = p.read_text()
        cfg = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, yaml.YAMLError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        fmt = "JSON" if p.suffix == ".json" else "YAML"
        raise SpecError(f"model file {str(p)!r} is not valid {fmt}: {first}") from None
    if isinstance(cfg, dict) and p.suffix == ".json":
        cfg = with_hf_quant_config(cfg, p.parent / HF_QUANT_CONFIG)
    name = cfg.get("name") if isinstance(cfg, dict) else None
    return model_from_hf_config(cfg, name=name or _folder_name(p), source=str(p), family=family)


#: ModelOpt's export writes the checkpoint's quantization here, beside config.json (NVIDIA's FP4 and
#: FP8 checkpoints: ``{"producer": ..., "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo":
#: "FP8", ...}}``); their config.json may carry no ``quantization_config`` at all.
HF_QUANT_CONFIG = "hf_quant_config.json"


def with_hf_quant_config(cfg: dict[str, Any], path: Path) -> dict[str, Any]:
    """``cfg`` with what a ModelOpt ``hf_quant_config.json`` at ``path`` declares, when there is one:
    its weight format as a ModelOpt ``quantization_config`` when ``config.json`` has none, and its
    ``kv_cache_quant_algo`` as ``kv_cache_dtype`` (TensorRT-LLM's and vLLM's ``auto`` KV format follow
    it) unless ``cfg`` states one.

    Raises
    ------
    SpecError
        The file is not JSON or has no ``quantization`` mapping.
    """
    if not path.is_file():
        return cfg
    try:
        raw = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SpecError(f"{str(path)!r} is not valid JSON: {str(exc).splitlines()[0]}") from None
    quant = raw.get("quantization") if isinstance(raw, dict) else None
    if not isinstance(quant, dict):
        raise SpecError(f"{str(path)!r}: field 'quantization' is missing or not a mapping; expected ModelOpt's "
                        "hf_quant_config.json ({'quantization': {'quant_algo': ..., 'kv_cache_quant_algo': ...}})")
    out = dict(cfg)
    if not out.get("quantization_config") and quant.get("quant_algo"):
        out["quantization_config"] = {"quant_method": "modelopt", **quant}
    kv = quant.get("kv_cache_quant_algo")
    if kv and out.get("kv_cache_dtype") is None:
        out["kv_cache_dtype"] = str(kv).lower()
    return out


def _folder_name(config: Path) -> str:
    """A model's name from the path of its ``config.json``: ``owner/name`` for a Hugging Face cache
    snapshot (``.../models--owner--name/snapshots/<hash>/config.json``), else the folder's name."""
    folder = config.resolve().parent
    if folder.parent.name == "snapshots" and folder.parent.parent.name.startswith("models--"):
        return folder.parent.parent.name[len("models--"):].replace("--", "/")
    return config.parent.name or config.stem
