"""The config.json reader: types read as a family (documented map), the opt-in family for an unknown
type, and its public names still importable from serveplan.specs.model."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from serveplan.errors import SpecError
from serveplan.specs import hf_config, model
from serveplan.specs.catalog import get_model
from serveplan.specs.hf_config import MODEL_FAMILIES, model_family, model_from_hf_config
from serveplan.specs.model import SUPPORTED_MODEL_TYPES

DOCS = Path(__file__).resolve().parents[2] / "docs" / "adding-model.md"

#: ibm-granite/granite-3.1-8b-instruct config.json (architecture fields and the multipliers)
GRANITE_8B = {
    "model_type": "granite", "hidden_size": 4096, "intermediate_size": 12800, "num_hidden_layers": 40,
    "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 49155, "tie_word_embeddings": True,
    "attention_bias": False, "mlp_bias": False, "embedding_multiplier": 12.0, "logits_scaling": 16.0,
    "residual_multiplier": 0.22, "attention_multiplier": 0.0078125, "max_position_embeddings": 131072,
}


def _llama(**changes):
    cfg = {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
           "num_attention_heads": 16, "num_key_value_heads": 4, "vocab_size": 50304}
    return {**cfg, **changes}


def test_every_family_is_supported_and_documented():
    text = DOCS.read_text()
    table = text[text.index("<!-- families:begin -->"):text.index("<!-- families:end -->")]
    rows = {}
    for line in table.splitlines()[3:]:
        cells = [c.strip().strip("`") for c in line.strip("|").split("|")]
        rows[cells[0]] = cells[1]
    assert rows == MODEL_FAMILIES
    assert set(MODEL_FAMILIES.values()) <= set(SUPPORTED_MODEL_TYPES)
    assert not set(MODEL_FAMILIES) & set(SUPPORTED_MODEL_TYPES)


def test_granite_reads_as_llama_and_its_multipliers_change_nothing():
    g = model_from_hf_config(GRANITE_8B, name="granite-3.1-8b")
    plain = model_from_hf_config({k: v for k, v in GRANITE_8B.items() if "multiplier" not in k
                                  and k != "logits_scaling"} | {"model_type": "llama"}, name="as-llama")
    assert g.model_type == "llama" and g.config_model_type == "granite" and plain.config_model_type == ""
    assert g.num_parameters() == plain.num_parameters()
    # hand count: embeddings 49155*4096 (tied) + 40 * (2*4096^2 + 2*4096*1024 + 3*4096*12800 + 2*4096) + 4096
    layer = 2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 12800 + 2 * 4096
    assert g.num_parameters() == 49155 * 4096 + 40 * layer + 4096  # about 8.17e9, the model card's 8.1B


def test_olmo2_adds_full_width_qk_norms_and_exaone4_per_head_ones():
    base = model_from_hf_config(_llama(), name="base").num_parameters()
    olmo2 = model_from_hf_config(_llama(model_type="olmo2"), name="olmo2")
    assert olmo2.num_parameters() - base == 16 * (16 + 4) * 128  # layers x (heads + kv heads) x head_dim
    exaone4 = model_from_hf_config(_llama(model_type="exaone4"), name="exaone4")
    assert exaone4.num_parameters() - base == 16 * 2 * 128


def test_local_layers_of_olmo3_and_exaone4_follow_their_defaults():
    olmo3 = model_from_hf_config(_llama(model_type="olmo3", sliding_window=4096), name="olmo3")
    assert olmo3.layer_types[:4] == ("sliding_attention",) * 3 + ("full_attention",)
    ex = model_from_hf_config(_llama(model_type="exaone4", sliding_window=4096, sliding_window_pattern="LLLG",
                                     num_hidden_layers=6), name="exaone4")
    assert ex.layer_types == ("sliding_attention",) * 3 + ("full_attention", "sliding_attention", "full_attention")
    ministral = model_from_hf_config(_llama(model_type="ministral", sliding_window=32768), name="ministral")
    assert ministral.model_type == "mistral" and set(ministral.layer_types) == {"sliding_attention"}


def test_internlm2_reads_its_bias_field():
    with_bias = model_from_hf_config(_llama(model_type="internlm2", bias=True), name="i")
    without = model_from_hf_config(_llama(model_type="internlm2", bias=False), name="i")
    assert with_bias.bias and not without.bias


def test_an_unknown_type_is_refused_unless_its_family_is_stated(tmp_path):
    cfg = _llama(model_type="mystery_lm")
    with pytest.raises(SpecError) as err:
        model_from_hf_config(cfg, name="m")
    msg = str(err.value)
    assert "model_type='mystery_lm' is not supported" in msg
    assert "granite -> llama" in msg and "family='llama'" in msg and "serveplan_family: llama" in msg
    as_llama = model_from_hf_config(cfg, name="m", family="llama")
    assert as_llama.model_type == "llama" and as_llama.config_model_type == "mystery_lm"
    assert as_llama.num_parameters() == model_from_hf_config(_llama(), name="l").num_parameters()
    # a model YAML states it without any environment or CLI option
    f = tmp_path / "mystery.yaml"
    f.write_text("serveplan_family: llama\n" + "".join(f"{k}: {v}\n" for k, v in cfg.items()))
    assert get_model(str(f)).config_model_type == "mystery_lm"


def test_a_family_is_not_an_override_for_a_known_type():
    with pytest.raises(SpecError, match="model_type='qwen2' is read as 'qwen2', not family='llama'"):
        model_from_hf_config(_llama(model_type="qwen2"), name="q", family="llama")
    with pytest.raises(SpecError, match="family='transformer' is not a supported family"):
        model_family("mystery", "transformer")
    assert model_family("granite", "llama") == "llama"


def test_the_reader_depends_on_the_model_spec_and_not_the_other_way():
    # the config.json reader (hf_config.py) builds ModelSpecs; model.py defines the spec alone and
    # neither imports nor re-exports the reader (one direction, no circle)
    source = Path(model.__file__).read_text()
    assert not re.search(r"^def (model_from_hf_config|load_model_file)", source, re.M)
    assert "hf_config import" not in source and "import hf_config" not in source
    assert not hasattr(model, "model_from_hf_config")
    assert "from serveplan.specs.model import" in Path(hf_config.__file__).read_text()
