"""Conformance of every bundled model, device and profile."""

from __future__ import annotations

import pytest

from serveplan import (
    Estimator,
    ParallelConfig,
    SpecError,
    StepBatch,
    get_hardware,
    get_model,
    get_profile,
    list_hardware,
    list_models,
    list_profiles,
)

REQUIRED_MODELS = {
    "codellama-34b", "llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-13b", "llama-33b", "llama-3.1-8b",
    "llama-3.1-70b", "llama-3.1-405b", "llama-3.2-1b", "opt-6.7b", "opt-30b", "opt-175b", "mixtral-8x7b",
    "qwen3-32b", "deepseek-v3",
}
REQUIRED_HW = {"ascend-910b3", "a100-40g", "a100-80g", "h100-sxm", "h200", "b200", "l40s", "a6000", "t4"}


def test_required_entries_are_bundled():
    assert REQUIRED_MODELS <= set(list_models())
    assert REQUIRED_HW <= set(list_hardware())
    assert {"bestserve-910b3", "default-gpu"} <= set(list_profiles())


@pytest.mark.parametrize("name", list_models())
def test_model_entry(name):
    m = get_model(name)
    assert m.source.startswith("http"), "every bundled model cites its source"
    assert m.num_parameters() >= m.num_active_parameters() > 0
    assert m.kv_bytes_per_token() > 0
    e = Estimator(m, get_hardware("h200"), get_profile("default-gpu"), ParallelConfig(tp=1))
    assert e.time(StepBatch.prefill(1, 2048)) > e.time(StepBatch.decode(1, 2048)) > 0


@pytest.mark.parametrize("name", list_hardware())
def test_hardware_entry(name):
    hw = get_hardware(name)
    assert hw.source.startswith("http")
    assert hw.memory_bytes > 1e9 and hw.memory_bandwidth > 1e11
    assert hw.flops(get_model("llama-2-7b").dtype) > 1e12


def test_profile_default_for_hardware():
    assert get_profile(None, "ascend-910b3").name == "bestserve-910b3"
    # GPUs with measured kernel tables default to their measured profile; others to default-gpu
    for hw in ("h100-sxm", "h200", "b200", "a100-80g", "l40s"):
        assert get_profile(None, hw).name == f"measured-{hw}"
        assert get_profile(None, hw).kernels is not None
    assert get_profile(None, "t4").name == "default-gpu"


def test_known_parameter_counts():
    # public figures: Mixtral 46.7B total / 12.9B active; DeepSeek-V3 671B / 37B active
    assert get_model("mixtral-8x7b").num_parameters() == pytest.approx(46.7e9, rel=0.01)
    assert get_model("mixtral-8x7b").num_active_parameters() == pytest.approx(12.9e9, rel=0.01)
    assert get_model("deepseek-v3").num_parameters() == pytest.approx(671e9, rel=0.01)
    assert get_model("deepseek-v3").num_active_parameters() == pytest.approx(37e9, rel=0.03)
    # model cards: Qwen3-14B "Number of Parameters: 14.8B"; GLM-4.6 (GLM-4.5's architecture, a longer context)
    # 355B total
    assert get_model("qwen3-14b").num_parameters() == pytest.approx(14.8e9, rel=0.01)
    assert get_model("Qwen/Qwen3-14B").name == "qwen3-14b" and get_model("zai-org/GLM-4.6").name == "glm-4.6"
    assert get_model("glm-4.6").num_parameters() == pytest.approx(get_model("glm-4.5").num_parameters())
    assert get_model("glm-4.6").num_parameters() == pytest.approx(355e9, rel=0.02)
    assert get_model("glm-4.6").max_position_embeddings == 202752


def test_parallel_validation_messages():
    m = get_model("llama-2-7b")
    with pytest.raises(SpecError, match="ep=2 needs a mixture-of-experts model"):
        ParallelConfig(tp=2, ep=2).validate_for(m)
    with pytest.raises(SpecError, match="tp=0 must be a positive integer"):
        ParallelConfig(tp=0)
