"""Facts of the bundled catalog: the H800's profile, declared KV formats kept by the engines, and
every host's GPU listed in the hardware catalog."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from serveplan import ParallelConfig, StepBatch, estimate
from serveplan.cli import app
from serveplan.errors import SpecError
from serveplan.sim.serving import engine_estimator
from serveplan.specs import catalog
from serveplan.specs.catalog import get_engine, get_hardware, get_host, get_model, get_profile, list_hardware
from serveplan.units import DType

runner = CliRunner()


def test_h800_uses_the_h100_measured_profile_without_its_nccl_curves():
    h800, h100 = get_profile(None, "h800"), get_profile(None, "h100-sxm")
    assert h800.name == "measured-h100-sxm" and h800.kernels is not None
    assert h800.kernels.gemm == h100.kernels.gemm and h800.kernels.attention == h100.kernels.attention
    assert h100.kernels.collectives and not h800.kernels.collectives   # measured over a 900 GB/s NVLink
    # so a TP-8 all-reduce on the H800 goes over its own 400 GB/s NVLink: slower than the H100's
    comm = {hw: sum(m.comm_s for m in estimate("llama-3.1-70b", hw, parallel=ParallelConfig(tp=8),
                                               input_len=4096).step.modules) for hw in ("h800", "h100-sxm")}
    assert comm["h800"] > 1.5 * comm["h100-sxm"] > 0


def test_serveplan_hardware_says_which_profile_the_h800_uses_and_why():
    rows = {r["name"]: r for r in json.loads(runner.invoke(app, ["hardware", "--json"]).stdout)["hardware"]}
    assert rows["h800"]["profile"] == "measured-h100-sxm"
    assert "same GH100 silicon" in rows["h800"]["profile_note"] and rows["h100-sxm"]["profile_note"] == ""
    table = runner.invoke(app, ["hardware"]).stdout
    assert "h800 uses measured-h100-sxm: the same GH100 silicon" in " ".join(table.split())


def test_a_broken_hardware_profile_entry_is_named(monkeypatch):
    original = catalog._entries
    fake = dict(original("hardware"), h800=dict(original("hardware")["h800"], profile="measured-h100-sxm"))
    monkeypatch.setattr(catalog, "_entries", lambda kind: fake if kind == "hardware" else original(kind))
    with pytest.raises(SpecError, match="hardware 'h800': profile='measured-h100-sxm' must be a mapping"):
        catalog._hardware_profile_entry("h800")


def test_every_hosts_gpu_is_in_the_hardware_catalog():
    hosts_dir = catalog._data_dir("hosts")
    for name in catalog.list_hosts():
        raw = yaml.safe_load(hosts_dir.joinpath(f"{name}.yaml").read_text())
        assert isinstance(raw["gpu"], str), f"host {name!r} describes its GPU inline: add it to the catalog"
        host = get_host(name)
        assert host.gpu.name in list_hardware() and host.reference_gpu.name in list_hardware()
        assert host.gpu == get_hardware(host.gpu.name)


def test_the_rtx_3090_of_flexgen_3090_is_listed_and_estimable():
    assert get_host("flexgen-3090").gpu.name == "rtx-3090"
    hw = get_hardware("3090")
    assert hw.name == "rtx-3090" and hw.flops(DType.FP16) == 71.0e12 and hw.memory_bandwidth == 936.0e9
    listed = [r["name"] for r in json.loads(runner.invoke(app, ["hardware", "--json"]).stdout)["hardware"]]
    assert "rtx-3090" in listed
    r = runner.invoke(app, ["estimate", "-H", "rtx-3090", "--model", "llama-3.1-8b", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["hardware"] == "rtx-3090"


CONFIG = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
          "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256, "torch_dtype": "bfloat16"}
#: ModelOpt's export beside config.json (as nvidia/DeepSeek-R1-FP4 and nvidia/DeepSeek-V3.1-NVFP4 ship it)
HF_QUANT = {"producer": {"name": "modelopt", "version": "0.23.0"},
            "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8", "group_size": 16,
                             "exclude_modules": ["lm_head"]}}


@pytest.fixture
def nvfp4_folder(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    (tmp_path / "hf_quant_config.json").write_text(json.dumps(HF_QUANT))
    return tmp_path


def test_a_config_folder_with_hf_quant_config_declares_weights_and_kv_format(nvfp4_folder):
    m = get_model(str(nvfp4_folder))
    assert m.dtype is DType.NVFP4 and m.kv_dtype is DType.FP8
    assert get_model(str(nvfp4_folder / "config.json")).kv_dtype is DType.FP8   # the file's folder is read too


@pytest.mark.parametrize("engine", ["trtllm", "vllm", "sglang"])
def test_engines_keep_the_declared_fp8_kv_cache_of_an_nvfp4_checkpoint(nvfp4_folder, tmp_path, engine):
    hw, pr, par = get_hardware("b200"), get_profile(None, "b200"), ParallelConfig(tp=1)
    declared = get_model(str(nvfp4_folder))
    est, _, _ = engine_estimator(get_engine(engine), declared, hw, pr, par)
    assert est.kv_dtype is DType.FP8
    assert est.time(StepBatch.decode(8, 4096)) > 0
    # the same weights without the declaration keep the activations' format, as the engines' "auto" does
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "config.json").write_text(json.dumps(CONFIG))
    est, _, _ = engine_estimator(get_engine(engine), get_model(str(plain)), hw, pr, par, dtype="nvfp4")
    assert est.kv_dtype is DType.BF16


def test_kv_dtype_for_puts_the_declared_format_first():
    trt, vllm = get_engine("trtllm"), get_engine("vllm")
    assert trt.kv_dtype_for(DType.NVFP4, DType.FP8) is DType.FP8
    assert trt.kv_dtype_for(DType.FP8, DType.BF16) is DType.BF16     # the declaration beats the FP8-weights rule
    assert trt.kv_dtype_for(DType.FP8) is DType.FP8 and trt.kv_dtype_for(DType.NVFP4) is None
    assert vllm.kv_dtype_for(DType.NVFP4, DType.FP8) is DType.FP8 and vllm.kv_dtype_for(DType.NVFP4) is None


def test_a_model_yaml_states_its_kv_format(tmp_path):
    f = tmp_path / "m.yaml"
    f.write_text(yaml.safe_dump({**CONFIG, "kv_cache_dtype": "fp8"}))
    assert get_model(str(f)).kv_dtype is DType.FP8
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**CONFIG, "kv_cache_dtype": "w4a16"}))
    with pytest.raises(SpecError, match="kv_cache_dtype: kv_dtype='w4a16' is not a KV-cache format"):
        get_model(str(bad))
    bundled = get_model("deepseek-v3.1")   # states kv_cache_dtype: fp8 with its hf_quant_config.json source
    assert bundled.dtype is DType.NVFP4 and bundled.kv_dtype is DType.FP8
    assert "kv_cache_dtype: fp8" in catalog._data_dir("models").joinpath("deepseek-v3.1.yaml").read_text()


def test_a_broken_hf_quant_config_is_named(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    (tmp_path / "hf_quant_config.json").write_text(json.dumps({"producer": {}}))
    with pytest.raises(SpecError, match="hf_quant_config.json': field 'quantization' is missing"):
        get_model(str(tmp_path))
