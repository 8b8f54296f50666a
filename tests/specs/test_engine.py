"""Engine data files: every bundled engine loads, and the defaults are the ones read from the
engines' own source (cited in each data file)."""

from __future__ import annotations

import pytest

from serveplan.errors import SpecError
from serveplan.specs.catalog import get_engine, get_hardware, list_engines
from serveplan.specs.engine import Admission, Mechanism, MemoryBasis


@pytest.mark.parametrize("name", list_engines())
def test_every_engine_loads_with_a_source_and_cites_its_limits(name: str) -> None:
    e = get_engine(name)
    assert e.source and e.version
    assert e.tiers
    if e.engine != "bestserve":
        assert "tiers" in e.cites and e.cites["tiers"]
    for hw in ("h100-sxm", "a100-80g", "l40s", "b200"):
        lim = e.limits(get_hardware(hw))
        assert lim.max_num_seqs is None or lim.max_num_seqs >= 1


def test_family_name_picks_the_default_version() -> None:
    assert get_engine("vllm").name == "vllm-0.33"
    assert get_engine("sglang").name == "sglang-0.5.23"
    assert get_engine("trtllm").name == "trtllm-1.2"


def test_unknown_engine_names_the_options() -> None:
    with pytest.raises(SpecError, match=r"unknown engine 'vlm'.*did you mean 'vllm'"):
        get_engine("vlm")


def test_vllm_v1_limits_depend_on_device_memory_and_a100() -> None:
    # vllm/engine/arg_utils.py EngineArgs.get_batch_defaults (v0.33.0): >= 160 GiB the largest,
    # >= 70 GiB and not A100 the large ones, else the small ones
    e = get_engine("vllm")
    b200 = e.limits(get_hardware("b200"))  # 180 GB = 167.6 GiB
    assert (b200.max_num_seqs, b200.token_budget) == (1024, 16384)
    h100 = e.limits(get_hardware("h100-sxm"))
    assert (h100.max_num_seqs, h100.token_budget) == (1024, 8192)
    assert e.limits(get_hardware("h100-sxm"), offline=True).token_budget == 16384
    a100 = e.limits(get_hardware("a100-80g"))  # 80 GB but an A100: the small defaults
    assert (a100.max_num_seqs, a100.token_budget) == (256, 2048)
    assert e.limits(get_hardware("a100-80g"), offline=True).token_budget == 8192
    assert e.mechanism is Mechanism.CHUNKED_PREFILL and e.kv_block_size == 16
    assert e.memory_basis is MemoryBasis.TOTAL and e.memory_fraction == 0.92  # CacheConfig, v0.33.0


def test_vllm_0_11_is_kept_with_its_own_defaults() -> None:
    # v0.11.0: no >= 160 GiB tier (B200 gets the H100 defaults) and gpu_memory_utilization 0.9
    e = get_engine("vllm-0.11")
    assert e.limits(get_hardware("b200")).token_budget == 8192
    assert e.memory_fraction == 0.9


def test_sglang_chunk_by_memory_and_static_fraction() -> None:
    # server_args.py _handle_gpu_memory_settings: 8192 below 160 GiB (H100, H200), 16384 above (B200)
    e = get_engine("sglang")
    assert e.limits(get_hardware("h100-sxm")).chunk_size == 8192
    assert e.limits(get_hardware("h200")).chunk_size == 8192
    assert e.limits(get_hardware("b200")).chunk_size == 16384
    assert e.limits(get_hardware("l40s")).chunk_size == 4096  # 48 GB: the < 60 GiB row
    assert not e.mixed and e.max_prefill_tokens == 16384 and e.admission is Admission.RESERVE_RATIO
    # H100 (80e9 B = 76,294 MiB), TP 1: reserved = 512 + 8192 x 1.5 + 256 x 2 + 1/8 x 1024 = 13,440 MiB,
    # above the 10 GiB floor -> (76,294 - 13,440) / 76,294 = 0.824 (rounded to 3 digits as SGLang does)
    assert e.static_fraction(get_hardware("h100-sxm"), tp=1) == pytest.approx(0.824, abs=1e-3)
    # TP 8: 512 + 12,288 + 512 x 2 + 8/8 x 1024 = 14,848 MiB -> (76,294 - 14,848) / 76,294 = 0.805
    assert e.static_fraction(get_hardware("h100-sxm"), tp=8) == pytest.approx(0.805, abs=1e-3)


def test_trtllm_reserves_whole_sequences_and_never_chunks() -> None:
    e = get_engine("trtllm")
    lim = e.limits(get_hardware("h100-sxm"))
    assert (lim.max_num_seqs, lim.token_budget) == (2048, 8192)
    assert e.admission is Admission.FULL and not e.chunked_prefill and e.kv_block_size == 32
    # free_gpu_memory_fraction 0.9 of what weights (40 GB) and activations (2 GB) leave of 80 GB:
    # KV = 0.9 x 38 GB = 34.2 GB -> utilization (42 + 34.2) / 80 = 0.9525
    util = e.memory_utilization(get_hardware("h100-sxm"), weights_bytes=40e9, activation_bytes=2e9)
    assert util == pytest.approx(0.9525)


def test_bestserve_engine_keeps_the_paper_testbed() -> None:
    e = get_engine("bestserve")
    lim = e.limits(get_hardware("ascend-910b3"))
    assert (lim.max_num_seqs, lim.prefill_max_batch, e.default_tp) == (16, 4, 4)
    assert e.mechanism is Mechanism.PREFILL_FIRST and lim.token_budget is None


def test_sglang_0_5_23_running_requests_follow_capacity_over_context():
    # mem_cache/kv_cache_configurator.py resolve_max_num_reqs (v0.5.23):
    # min(clamp(capacity / context_len x 512, 2048, 4096), capacity // 2)
    e = get_engine("sglang-0.5.23")
    lim = e.limits(get_hardware("h100-sxm"))
    assert e.max_num_seqs_for(lim, 500_000, context_len=131_072) == 2048     # 1953 -> floor 2048
    assert e.max_num_seqs_for(lim, 500_000, context_len=8_192) == 4096       # 31250 -> cap 4096
    assert e.max_num_seqs_for(lim, 3_000, context_len=131_072) == 1500       # capacity // 2 binds
    assert e.max_num_seqs_for(lim, 1_000_000, context_len=131_072) == 3906   # inside the clamp
    # 0.5.5: min(capacity // 2, 4096), no context term
    assert get_engine("sglang-0.5").max_num_seqs_for(lim, 500_000, context_len=131_072) == 4096


def test_sglang_0_5_23_chunks_4096_on_24_gb_gpus():
    # arg_groups/memory_hook.py (v0.5.23): the 20-35 GiB row (A10, 4090, 5090) chunks at 4096 (0.5.5: 2048)
    assert get_engine("sglang-0.5.23").limits(get_hardware("l4")).chunk_size == 4096
    assert get_engine("sglang-0.5").limits(get_hardware("l4")).chunk_size == 2048
