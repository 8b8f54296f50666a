"""The bundled configs of 2026's model types: parameter counts against the model cards and KV
bytes per token against hand derivations from each config (written next to each case)."""

from __future__ import annotations

import pytest

from serveplan import DType, get_model
from serveplan.specs.catalog import list_models
from serveplan.specs.model import SUPPORTED_MODEL_TYPES, LayerType

# (catalog id, total parameters on the model card, where the card says it)
CARD_TOTALS = [
    ("gpt-oss-120b", 116.83e9, "openai/gpt-oss-120b model card: 116.83B total"),
    ("gpt-oss-20b", 20.91e9, "openai/gpt-oss model card: 20.91B total"),
    ("qwen3-235b-a22b", 235e9, "Qwen3-235B-A22B card: 235B in total"),
    ("qwen3-30b-a3b", 30.5e9, "Qwen3-30B-A3B card: 30.5B in total"),
    ("qwen3-8b", 8.2e9, "Qwen3-8B card: 8.2B"),
    ("qwen3-next-80b-a3b", 80e9, "Qwen3-Next-80B-A3B card: 80B in total"),
    ("qwen3.5-397b-a17b", 397e9, "Qwen3.5-397B-A17B card: 397B in total (its vision tower is ~0.4B)"),
    ("qwen3.5-122b-a10b", 122e9, "Qwen3.5-122B-A10B card: 122B in total"),
    ("qwen1.5-moe-a2.7b", 14.3e9, "Qwen1.5-MoE-A2.7B card: 14.3B parameters in total"),
    ("llama-4-maverick", 400e9, "Llama 4 card: Maverick 400B total"),
    ("minimax-m2.5", 230e9, "MiniMax-M2 card: 230B total parameters"),
    ("deepseek-v3", 671e9, "DeepSeek-V3 card: 671B total (MTP module excluded)"),
    ("deepseek-r1", 671e9, "DeepSeek-R1 card: 671B total"),
    ("deepseek-v2", 236e9, "DeepSeek-V2 card: 236B total"),
    ("deepseek-v2-lite", 15.7e9, "DeepSeek-V2-Lite card: 15.7B total"),
    ("glm-4.5", 355e9, "GLM-4.5 card: 355B total"),
    ("glm-4.5-air", 106e9, "GLM-4.5-Air card: 106B total"),
    ("mixtral-8x22b", 141e9, "Mixtral-8x22B announcement: 141B total"),
    ("gemma-2-9b", 9.24e9, "gemma-2-9b page: 9.24B params"),
    ("gemma-2-27b", 27.2e9, "gemma-2-27b page: 27.2B params"),
    ("gemma-3-27b", 27e9, "Gemma 3 report: 27B (text decoder 25.6B non-embedding + 1.4B embedding)"),
    ("phi-3-mini-4k", 3.8e9, "Phi-3-mini card: 3.8B"),
    ("phi-4", 14.7e9, "phi-4 card: 14.7B"),
    ("gpt-j-6b", 6_053_381_344, "EleutherAI/gpt-j-6b card: 6,053,381,344 parameters"),
    ("gpt-neox-20b", 20_554_567_680, "GPT-NeoX-20B paper, Table 1: 20,554,567,680"),
    ("mistral-7b-v0.1", 7.24e9, "Mistral-7B-v0.1 page: 7.24B params"),
    ("qwen2.5-72b", 72.7e9, "Qwen2.5-72B-Instruct card: 72.7B"),
]


@pytest.mark.parametrize("name, total, where", CARD_TOTALS)
def test_parameter_count_matches_the_model_card(name, total, where):
    assert get_model(name).num_parameters() == pytest.approx(total, rel=0.01), where


@pytest.mark.parametrize(
    "name, active, where",
    [
        # gpt-oss counts active parameters without the embedding table (the unembedding counts):
        # 5.712e9 - 201,088 x 2,880 = 5.133e9
        ("gpt-oss-120b", 5.13e9, "model card: 5.13B active"),
        ("gpt-oss-20b", 3.61e9, "model card: 3.61B active"),
        ("qwen3-235b-a22b", 22e9, "card: 22B activated"),
        ("qwen1.5-moe-a2.7b", 2.7e9, "card: 2.7B activated"),
        ("mixtral-8x22b", 39e9, "announcement: 39B active"),
        ("kimi-k2", 32.6e9, "Kimi K2 tech report: 32.6B activated"),
    ],
)
def test_active_parameters_match_the_model_card(name, active, where):
    m = get_model(name)
    n = m.num_active_parameters()
    if m.model_type == "gpt_oss":
        n -= m.vocab_size * m.hidden_size
    assert n == pytest.approx(active, rel=0.01), where


def test_exact_hand_derivations():
    # GPT-NeoX-20B: per layer qkv+dense 4h^2 + 4h biases, MLP 2*h*4h + 4h + h, two LayerNorms 4h;
    # h = 6144, 44 layers, untied 50,432-token embeddings, final LayerNorm 2h.
    h, L, V = 6144, 44, 50432
    layer = 4 * h * h + 4 * h + 2 * h * 4 * h + 4 * h + h + 4 * h
    assert get_model("gpt-neox-20b").num_parameters() == L * layer + 2 * V * h + 2 * h == 20_554_567_680
    # Falcon-7B: fused qkv h x (h + 2*64) (multi-query), dense h^2, MLP 2*h*4h, one LayerNorm
    # (parallel block), tied 65,024-token embedding: 6,921,720,704 (the figure HF reports)
    h = 4544
    layer = h * (h + 128) + h * h + 2 * h * 4 * h + 2 * h
    assert get_model("falcon-7b").num_parameters() == 32 * layer + 65024 * h + 2 * h == 6_921_720_704
    # Gemma-3-1B: q 1152x1024, k/v 1152x256, o 1024x1152, q/k norms 2x256, four norms, gated
    # MLP 3x1152x6912, tied 262,144-token embedding: 999,885,952 (the checkpoint's count)
    h = 1152
    layer = h * 1024 * 2 + 2 * h * 256 + 512 + 4 * h + 3 * h * 6912
    assert get_model("gemma-3-1b").num_parameters() == 26 * layer + 262144 * h + h == 999_885_952
    # Llama-4-Scout text model: 48 MoE layers of 16 experts + 1 shared (3 x 5120 x 8192 each),
    # router 5120 x 16, GQA 40/8 heads of 128; the card's 109B adds the vision encoder.
    h, e = 5120, 3 * 5120 * 8192
    layer = 2 * h * 5120 + 2 * h * 1024 + 2 * h + 17 * e + h * 16
    assert get_model("llama-4-scout").num_parameters() == 48 * layer + 2 * 202048 * h + h


@pytest.mark.parametrize(
    "name, kv",
    [
        ("gpt-oss-120b", 36 * 2 * 8 * 64 * 2),        # 36 layers, K+V, 8 KV heads of 64, bf16
        ("gemma-3-27b", 62 * 2 * 16 * 128 * 2),       # 62 layers, 16 KV heads of 128
        ("gemma-2-9b", 42 * 2 * 8 * 256 * 2),         # head_dim 256
        ("llama-4-scout", 48 * 2 * 8 * 128 * 2),
        ("qwen3-235b-a22b", 94 * 2 * 4 * 128 * 2),
        ("qwen3-next-80b-a3b", 12 * 2 * 2 * 256 * 2),  # only the 12 full-attention layers cache K/V
        ("qwen3.5-397b-a17b", 15 * 2 * 2 * 256 * 2),   # 15 of 60 layers are full attention
        ("minimax-m2.5", 62 * 2 * 8 * 128 * 2),
        ("kimi-k2", 61 * (512 + 64) * 2),              # MLA latent + RoPE key
        ("deepseek-v2-lite", 27 * (512 + 64) * 2),
        ("glm-4.5", 92 * 2 * 8 * 128 * 2),
        ("qwen1.5-moe-a2.7b", 24 * 2 * 16 * 128 * 2),
        ("phi-4", 40 * 2 * 10 * 128 * 2),
        ("falcon-7b", 32 * 2 * 1 * 64 * 2),            # multi-query: one KV head
        ("falcon-40b", 60 * 2 * 8 * 64 * 2),
        ("gpt-neox-20b", 44 * 2 * 6144 * 2),
        ("gpt-j-6b", 28 * 2 * 4096 * 2),
        ("mistral-7b-v0.1", 32 * 2 * 8 * 128 * 2),
    ],
)
def test_kv_bytes_per_token_by_hand(name, kv):
    assert get_model(name).kv_bytes_per_token(DType.BF16) == kv


def test_at_least_25_new_configs_cover_every_type_with_a_source():
    models = [get_model(n) for n in list_models()]
    assert len(models) >= 17 + 25
    assert all(m.source.startswith("https://") for m in models)
    assert set(SUPPORTED_MODEL_TYPES) <= {m.model_type for m in models}


def test_layer_structure_read_from_the_configs():
    oss = get_model("gpt-oss-120b")
    assert oss.count_layers(LayerType.SLIDING) == 18 and oss.sliding_window == 128 and oss.attention_sinks
    gemma3 = get_model("gemma-3-27b")
    assert gemma3.count_layers(LayerType.FULL) == 62 // 6 and gemma3.tie_word_embeddings  # 5 local : 1 global
    assert get_model("gemma-2-9b").layer_kinds[:2] == (LayerType.SLIDING, LayerType.FULL)
    mav = get_model("llama-4-maverick")
    assert mav.num_moe_layers == 24 and sorted(mav.moe_layer_set)[:2] == [1, 3]  # every 2nd layer
    assert mav.count_layers(LayerType.CHUNKED) == 36 and mav.attention_chunk_size == 8192  # NoPE every 4th
    nxt = get_model("qwen3-next-80b-a3b")
    assert nxt.layer_kinds[:4] == (LayerType.LINEAR,) * 3 + (LayerType.FULL,) and nxt.attn_output_gate
    assert get_model("qwen1.5-moe-a2.7b").shared_intermediate == 5632
    assert get_model("glm-4.5").num_dense_layers == 3 and get_model("glm-4.5").partial_rotary_factor == 0.5
    assert get_model("gpt-j-6b").parallel_block and get_model("gpt-neox-20b").partial_rotary_factor == 0.25
    assert get_model("falcon-7b").num_key_value_heads == 1 and get_model("falcon-40b").num_key_value_heads == 8
    assert get_model("mistral-7b-v0.1").local_window == 4096


def test_unsupported_type_names_the_supported_ones(tmp_path):
    from serveplan import SpecError
    from serveplan.specs.hf_config import model_from_hf_config

    with pytest.raises(SpecError, match="model_type='mamba' is not supported; expected one of: llama"):
        model_from_hf_config({"model_type": "mamba", "hidden_size": 8})
