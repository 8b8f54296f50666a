"""How a model, hardware, profile or host name is read: ids in any case, aliases from the data files,
Hugging Face repository ids, snapshot folders, and errors whose suggestions come best first."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from serveplan.cli import app
from serveplan.errors import SpecError, suggest_names
from serveplan.specs import catalog
from serveplan.specs.catalog import (
    aliases,
    get_hardware,
    get_host,
    get_model,
    get_profile,
    list_hardware,
    list_models,
    resolve_model,
    resolve_name,
)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "names.md"


@pytest.mark.parametrize("name, kind, expected", [
    ("H100-SXM", "hardware", "h100-sxm"), ("h100", "hardware", "h100-sxm"), ("a100", "hardware", "a100-80g"),
    ("4090", "hardware", "rtx-4090"), ("H200", "hardware", "h200"), ("MI300X", "hardware", "mi300x"),
    ("llama-3.1-70B", "models", "llama-3.1-70b"), ("qwen3-235b", "models", "qwen3-235b-a22b"),
    ("Qwen3-235B", "models", "qwen3-235b-a22b"),
])
def test_ids_in_any_case_and_aliases_name_one_entry(name, kind, expected):
    assert resolve_name(kind, kind, name) == expected
    spec = get_model(name) if kind == "models" else get_hardware(name)
    assert spec.name == expected


def test_profiles_and_hosts_are_case_insensitive_too():
    assert get_profile("Measured-H100-SXM").name == "measured-h100-sxm"
    assert get_profile(None, "H100").name == "measured-h100-sxm"  # the device's default, by alias
    assert get_host("FlexGen-T4").name == "flexgen-t4"


@pytest.mark.parametrize("kind", ["models", "hardware"])
def test_every_alias_names_its_own_entry_and_no_id(kind):
    ids = set(list_models() if kind == "models" else list_hardware())
    seen: dict[str, str] = {}
    for entry, names in aliases(kind).items():
        for alias in names:
            assert alias.lower() not in ids, f"alias {alias!r} of {entry!r} is an id"
            assert seen.setdefault(alias.lower(), entry) == entry, f"alias {alias!r} names two entries"
            if "/" not in alias:
                assert resolve_name(kind, kind, alias) == entry


def test_an_alias_that_is_another_entrys_id_is_refused(monkeypatch):
    fake = catalog._Entries({"h100-sxm": "aliases: [h200]\n", "h200": "{}\n"})
    monkeypatch.setattr(catalog, "_entries", lambda kind: fake)
    catalog._index.cache_clear()
    catalog._ids.cache_clear()
    try:
        with pytest.raises(SpecError, match="alias 'h200' of 'h100-sxm' is already the name of 'h200'"):
            catalog._index("hardware")
    finally:
        catalog._index.cache_clear()
        catalog._ids.cache_clear()


def test_docs_alias_table_matches_the_data_files():
    text = DOCS.read_text()
    table = text[text.index("<!-- aliases:begin -->"):text.index("<!-- aliases:end -->")]
    documented = set()
    for line in table.splitlines()[3:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        entry = cells[2].strip("`")
        for alias in re.findall(r"`([^`]+)`", cells[0]):
            documented.add((cells[1], alias, entry))
    data = {(kind, a, entry) for kind in ("hardware", "models") for entry, names in aliases(kind).items()
            for a in names}
    assert documented == data


def test_hugging_face_repository_ids_name_the_bundled_model(caplog):
    assert resolve_model("meta-llama/Llama-3.1-70B") == "llama-3.1-70b"
    assert resolve_model("META-LLAMA/llama-3.1-70b") == "llama-3.1-70b"  # case-insensitive, exact: no note
    assert not caplog.records
    with caplog.at_level(logging.INFO, logger="serveplan.specs.catalog"):
        assert resolve_model("meta-llama/Llama-3.1-70B-Instruct") == "llama-3.1-70b"
        assert resolve_model("Qwen/Qwen3-235B-A22B-Instruct-2507") == "qwen3-235b-a22b"
        assert resolve_model("meta-llama/Meta-Llama-3.1-8B-Instruct") == "llama-3.1-8b"  # renamed: an alias
    notes = [r.getMessage() for r in caplog.records]
    assert "read as the bundled 'llama-3.1-70b' (from meta-llama/Llama-3.1-70B)" in notes[0]
    assert len(notes) == 3
    # another quantisation is another model, not a variant
    assert resolve_model("Qwen/Qwen3-235B-A22B-FP8") == "qwen3-235b-a22b-fp8"


def test_every_bundled_source_repository_names_its_own_model():
    for model, written in ((k, w) for k, w in catalog._hf_repos().values()):
        assert resolve_model(written) == model


def test_unknown_repository_says_what_to_give_instead():
    with pytest.raises(SpecError) as err:
        get_model("meta-llama/Llama-3.3-70B-Instruct")
    msg = str(err.value)
    assert "no bundled model comes from that Hugging Face repository" in msg
    assert "closest: llama-3.1-70b" in msg and "more: serveplan models" in msg and "config.json" in msg


def test_a_snapshot_folder_reads_like_its_config_json(tmp_path):
    snap = tmp_path / "models--acme--tiny-llama" / "snapshots" / "0123abcd"
    snap.mkdir(parents=True)
    cfg = {"model_type": "llama", "hidden_size": 512, "intermediate_size": 1024, "num_hidden_layers": 2,
           "num_attention_heads": 8, "num_key_value_heads": 8, "vocab_size": 1000}
    (snap / "config.json").write_text(json.dumps(cfg))
    from_folder, from_file = get_model(str(snap)), get_model(str(snap / "config.json"))
    assert from_folder.num_parameters() == from_file.num_parameters() > 0
    assert from_folder.name == "acme/tiny-llama"  # the repository, not the snapshot hash
    plain = tmp_path / "my-model"
    plain.mkdir()
    (plain / "config.json").write_text(json.dumps(cfg))
    assert get_model(str(plain)).name == "my-model"
    with pytest.raises(SpecError, match="holds no config.json"):
        get_model(str(tmp_path))


@pytest.mark.parametrize("typed, known, first", [
    ("h100", "hardware", "h100-sxm"),       # plain difflib: h800
    ("a100", "hardware", "a100-40g"),       # plain difflib: a10g (a100-80g is its alias)
    ("qwen3-235b", "models", "qwen3-235b-a22b"),   # plain difflib: qwen3-32b
    ("h100-pcie", "hardware", "h100-sxm"),
    ("llama-3.1-70b-instruct", "models", "llama-3.1-70b"),
    ("lama-2-7b", "models", "llama-2-7b"),
])
def test_suggestions_rank_the_right_name_first(typed, known, first):
    names = list_models() if known == "models" else list_hardware()
    assert suggest_names(typed, names)[0] == first


def test_a_long_list_is_folded_to_the_best_suggestions():
    with pytest.raises(SpecError) as err:
        get_model("qwen3-235")
    msg = str(err.value)
    assert msg.startswith("unknown model 'qwen3-235' (did you mean 'qwen3-235b-a22b'?); closest: qwen3-235b-a22b, ")
    shown = msg.split("closest: ")[1].split(";")[0].split(", ")
    assert 3 <= len(shown) <= 5
    assert f"; {len(list_models()) - len(shown)} more: serveplan models" in msg
    assert "opt-175b" not in msg  # not every model on one line
    with pytest.raises(SpecError, match=r"more: serveplan hardware"):
        get_hardware("zz-nothing")


def test_cli_accepts_repository_ids_and_notes_the_variant_on_stderr():
    get_model.cache_clear()
    r = CliRunner().invoke(app, ["estimate", "--model", "meta-llama/Llama-3.1-8B-Instruct", "-H", "H100",
                                 "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["model"] == "llama-3.1-8b" and json.loads(r.stdout)["hardware"] == "h100-sxm"
    assert "note: model 'meta-llama/Llama-3.1-8B-Instruct' read as the bundled 'llama-3.1-8b'" in r.stderr


def test_catalog_listings_show_aliases():
    r = CliRunner().invoke(app, ["hardware", "--json"])
    rows = {row["name"]: row for row in json.loads(r.stdout)["hardware"]}
    assert rows["h100-sxm"]["aliases"] == ["h100", "h100-sxm5"]
    r = CliRunner().invoke(app, ["models", "--json"])
    rows = {row["name"]: row for row in json.loads(r.stdout)}
    assert "qwen3-235b" in rows["qwen3-235b-a22b"]["aliases"]
