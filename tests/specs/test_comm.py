"""All-to-all buffers an expert-parallel rank registers (DeepEP), and the engines' opt-in
communication setups.

The low-latency size is derived by hand from DeepEP's ``LowLatencyLayout``
(deepseek-ai/DeepEP ``csrc/legacy/config.hpp``) for DeepSeek-V3 (hidden 7168, 56 scale groups) at
EP144 over 256 + 32 experts, 128 tokens per rank:

* dispatch message = 16 (int4) + max(7168 x 2, 7168 + 56 x 4) = 14,352 bytes;
* combine message = 56 x 4 (bf16x2 min/max) + 7168 x 2 = 14,560 bytes;
* send = max(128 x 14,352, 288 x 128 x 14,560) = 536,739,840; receive = 288 x 128 x 14,560 = 536,739,840;
  signalling = 288 x 4 = 1,152 (already 128-aligned);
* total = 2 x (send + receive + signalling) = 2,146,961,664, rounded as
  ``get_low_latency_rdma_size_hint`` does, ``(n + 128) // 128 * 128`` = 2,146,961,792 bytes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from serveplan import Estimator, ParallelConfig, get_engine, get_hardware, get_model, get_profile
from serveplan.errors import InfeasibleError, SpecError
from serveplan.specs.comm import A2ABuffer, CommOptions, comm_options_from_dict, deepep_buffer_bytes
from serveplan.specs.engine import engine_from_dict

V3 = dict(hidden_size=7168, num_experts=288)
EP144 = ParallelConfig(tp=1, dp=144, ep=144, redundant_experts=32)


def test_low_latency_buffer_matches_deepeps_layout_by_hand() -> None:
    ll = CommOptions.deepep(A2ABuffer.LOW_LATENCY)
    assert deepep_buffer_bytes(ll, ep=144, **V3) == 2_146_961_792
    # it scales with the tokens per rank and the experts, not with the rank count
    assert deepep_buffer_bytes(ll, ep=32, **V3) == 2_146_961_792
    half = CommOptions.deepep(A2ABuffer.LOW_LATENCY, buffer_tokens_per_rank=64)
    assert deepep_buffer_bytes(half, ep=144, **V3) == pytest.approx(2_146_961_792 / 2, rel=1e-5)


def test_normal_buffers_grow_with_the_nodes_and_auto_holds_both() -> None:
    normal = CommOptions.deepep(A2ABuffer.NORMAL)
    one_node = deepep_buffer_bytes(normal, ep=8, **V3)
    four, eighteen = deepep_buffer_bytes(normal, ep=32, **V3), deepep_buffer_bytes(normal, ep=144, **V3)
    assert 0 < one_node < four < eighteen
    auto = deepep_buffer_bytes(CommOptions.deepep(), ep=144, **V3)
    ll = deepep_buffer_bytes(CommOptions.deepep(A2ABuffer.LOW_LATENCY), ep=144, **V3)
    assert max(ll, eighteen) < auto <= ll + eighteen     # one RDMA buffer serves both modes
    # an EP size without a tuned config takes the next larger one's chunk sizes (EP72 -> EP96's),
    # over its own 9 nodes
    ep64, ep72, ep96 = (deepep_buffer_bytes(normal, ep=e, **V3) for e in (64, 72, 96))
    assert ep64 < ep72 < ep96


def test_no_buffer_without_a_library_or_expert_parallelism() -> None:
    assert deepep_buffer_bytes(CommOptions(), ep=144, **V3) == 0.0
    assert deepep_buffer_bytes(CommOptions.deepep(A2ABuffer.NONE), ep=144, **V3) == 0.0
    assert deepep_buffer_bytes(CommOptions.deepep(), ep=1, **V3) == 0.0


def test_estimator_takes_the_buffers_from_the_kv_cache() -> None:
    m, h, p = get_model("deepseek-v3"), get_hardware("h800"), get_profile()
    plain = Estimator(m, h, p, EP144, dtype="fp8", comm=CommOptions.deepep(A2ABuffer.NONE))
    ll = Estimator(m, h, p, EP144, dtype="fp8", comm=CommOptions.deepep(A2ABuffer.LOW_LATENCY))
    assert plain.memory.comm_buffer_bytes == 0 and ll.memory.comm_buffer_bytes == 2_146_961_792
    lost = (plain.memory.kv_capacity_tokens - ll.memory.kv_capacity_tokens) / 144
    assert lost == pytest.approx(2_146_961_792 / ll.memory.kv_bytes_per_token, abs=1.0)
    assert ll.memory.to_dict()["comm_buffer_bytes"] == 2_146_961_792
    # a dense model has no expert-parallel buffers whatever the options say
    dense = Estimator(get_model("llama-2-7b"), h, p, ParallelConfig(tp=1), comm=CommOptions.deepep())
    assert dense.memory.comm_buffer_bytes == 0.0


def test_check_fits_counts_the_buffers() -> None:
    m, h, p = get_model("deepseek-v3"), get_hardware("h800"), get_profile()
    par = ParallelConfig(tp=1, dp=16, ep=16)   # 58 GB of FP8 weights per device, 72 GB usable
    Estimator(m, h, p, par, dtype="fp8", memory_utilization=0.9, comm=CommOptions.deepep(A2ABuffer.NONE)).check_fits()
    # 1024 tokens per rank (the most DeepEP allows): 15.6 GB of buffers no longer fit
    est = Estimator(m, h, p, par, dtype="fp8", memory_utilization=0.9,
                    comm=CommOptions.deepep(A2ABuffer.AUTO, buffer_tokens_per_rank=1024))
    with pytest.raises(InfeasibleError, match="all-to-all buffers"):
        est.check_fits()


def test_buffer_options_are_validated_and_round_trip() -> None:
    for bad in (0, 2048, True):
        with pytest.raises(SpecError, match="buffer_tokens_per_rank"):
            CommOptions(buffer_tokens_per_rank=bad)
    with pytest.raises(SpecError, match="buffer='both'"):
        CommOptions(**{"buffer": "both"})
    with pytest.raises(SpecError, match="buffer='both'"):
        CommOptions.deepep("both")
    with pytest.raises(SpecError, match="comm.buffer"):
        comm_options_from_dict({"buffer": "both"})
    ll = CommOptions.deepep(A2ABuffer.LOW_LATENCY, buffer_tokens_per_rank=256)
    assert comm_options_from_dict(ll.to_dict()) == ll
    parsed = comm_options_from_dict({"buffer": "low_latency"})
    assert parsed is not None and parsed.buffer is A2ABuffer.LOW_LATENCY


# ------------------------------------------------------------------------ engine presets
def test_sglang_offers_deepep_as_an_opt_in_with_its_own_flags() -> None:
    e = get_engine("sglang-0.5.23")
    assert e.comm("deepep") == CommOptions.deepep()
    flags = json.loads((Path(__file__).parents[1] / "report" / "data" / "engine_flags.json").read_text())["sglang"]
    assert flags["version"] == e.version
    for f in e.comm_flags["deepep"]:
        assert not f.startswith("--") or f in flags["flags"], f
    assert "comm_options" in e.describe()
    with pytest.raises(SpecError, match="expected one of: deepep"):
        e.comm("pplx")
    with pytest.raises(SpecError, match="expected one of: none"):
        get_engine("vllm").comm("deepep")


def test_a_malformed_comm_section_names_the_field() -> None:
    base = {"mechanism": "chunked-prefill", "tiers": [{"max_num_seqs": 8}], "kv_block_size": 16}
    with pytest.raises(SpecError, match="comm.deepep must be a mapping"):
        engine_from_dict({**base, "comm": {"deepep": "on"}}, name="x")
    with pytest.raises(SpecError, match="unknown field"):
        engine_from_dict({**base, "comm": {"deepep": {"overlap": "two-batch", "speed": 2}}}, name="x")
    e = engine_from_dict({**base, "comm": {"deepep": {"overlap": "two-batch", "flags": ["--a2a"]}}}, name="x")
    assert e.comm("deepep").overlap.value == "two-batch" and e.comm_flags["deepep"] == ("--a2a",)
