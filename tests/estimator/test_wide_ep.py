"""Wide expert parallelism: collectives per tier, two-batch overlap, redundant experts, DP-attention
placement, MLA weight reads and pools across nodes (issue: DeepSeek-class serving at scale)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from serveplan import Estimator, ParallelConfig, StepBatch, get_hardware, get_model, get_profile
from serveplan.errors import SpecError
from serveplan.estimator.collectives import collective_coefficients, remote_domains
from serveplan.estimator.pools import decode_pool, prefill_pool
from serveplan.ops.base import FEATURE_INDEX, Collective
from serveplan.specs.comm import CommOptions, Overlap, comm_options_from_dict
from serveplan.specs.profile import CommModel, profile_from_dict
from serveplan.units import DType

H800 = get_hardware("h800")
DSV3 = get_model("deepseek-v3")


def _a2a(g: int, nbytes: float, *, dedup: bool = False, copies: float = 8.0) -> tuple[float, float]:
    """(bandwidth seconds at efficiency 1, latency seconds) of one all-to-all of ``nbytes`` per rank."""
    row, lat = collective_coefficients(Collective.ALL_TO_ALL, g, np.array([nbytes]), np.array([nbytes / 2]), H800,
                                       CommModel.ALPHA_BETA, copies=copies, dedup_nodes=dedup)
    return float(row[0]), lat


# ------------------------------------------------------------------------ all-to-all (acceptance 2)
def test_all_to_all_time_grows_with_bytes_and_its_latency_not_with_ranks():
    """Algorithm (estimator/collectives.py): every pair exchanges at once. Inside one NVLink
    domain ``t = (g-1)/g V / B_up + a_up``; across ``D`` domains ``t = max(V_off / B_out, V_nvl /
    B_up) + a_out + a_up`` with ``V_off = V (g-d)/g`` leaving through the GPU's own NIC. The
    latency term is one hop per tier, whatever the rank count; the bandwidth term grows with the
    per-rank bytes ``V`` and tends to ``V / B_out`` as ``g`` grows (it never exceeds it)."""
    V = 7.57e6  # 128 tokens x 8 copies x 7168 values in FP8 with scales: DeepEP's low-latency test
    up, out = H800.intra_node_link, H800.inter_node_link
    assert out is not None
    lat_inside = {g: _a2a(g, V)[1] for g in (2, 4, 8)}
    assert set(lat_inside.values()) == {up.latency_s}                 # constant in g inside the domain
    lat_across = {g: _a2a(g, V)[1] for g in (16, 32, 64, 128, 144, 256)}
    assert set(lat_across.values()) == {out.latency_s + up.latency_s}  # constant in g across domains
    for g in (8, 16, 32, 128, 256):
        bw1, _ = _a2a(g, V)
        bw2, _ = _a2a(g, 2 * V)
        assert bw2 == pytest.approx(2 * bw1, rel=1e-12) and bw1 > 0   # linear in the per-rank bytes
        assert bw1 <= V / out.bandwidth + 1e-15
    # hand-derived: EP128 on H800 nodes, 120/128 of V over a 50 GB/s NIC = 142 us, + 5 us + 3 us
    bw, lat = _a2a(128, V)
    assert bw + lat == pytest.approx(120 / 128 * V / 50e9 + 8e-6, rel=1e-12)
    # the old serial chain charged 127 latencies: 635 us of latency alone at EP128
    assert lat < 127 * out.latency_s / 50


def test_node_deduplicated_dispatch_sends_each_token_once_per_remote_node():
    # EP32 over 4 nodes, 8 copies per token: distinct remote nodes 3 (1 - (3/4)^8) = 2.70 of the
    # 6 copies that leave the node without deduplication
    assert remote_domains(8, 4) == pytest.approx(3 * (1 - 0.75 ** 8), rel=1e-12)
    plain, _ = _a2a(32, 1e6)
    dedup, _ = _a2a(32, 1e6, dedup=True)
    assert plain == pytest.approx(24 / 32 * 1e6 / 50e9, rel=1e-12)
    assert dedup == pytest.approx(remote_domains(8, 4) / 8 * 1e6 / 50e9, rel=1e-12)


def test_hierarchical_all_reduce_across_nodes_is_cheaper_than_a_flat_ring_and_nvls_inside():
    V = 33_554_432
    row, lat = collective_coefficients(Collective.ALL_REDUCE, 32, np.array([V]), np.array([V / 2]), H800,
                                       CommModel.ALPHA_BETA)
    flat = 2 * 31 / 32 * V / 50e9 + 62 * 5e-6
    assert row[0] + lat < flat / 3
    gb200 = get_hardware("gb200")
    assert gb200.in_switch_reduction and not H800.in_switch_reduction
    row, lat = collective_coefficients(Collective.ALL_REDUCE, 32, np.array([V]), np.array([V / 2]), gb200,
                                       CommModel.ALPHA_BETA)
    assert row[0] == pytest.approx(V / 900e9) and lat == pytest.approx(2 * 3e-6)   # NVLS: V / B + 2 a


def test_measured_nccl_curves_stand_only_inside_their_domain():
    # measured-h200's all-to-all curves were taken on 2-8 GPUs over NVLink; a 16-rank group
    # crosses the network and keeps the per-tier model (before: the 8-rank NVLink curve)
    est = Estimator(DSV3, get_hardware("h200"), get_profile("measured-h200"), ParallelConfig(tp=1, dp=16, ep=16),
                    dtype="fp8")
    assert est._curves is not None and est._curves.comm_index == ()
    inside = Estimator(DSV3, get_hardware("h200"), get_profile("measured-h200"), ParallelConfig(tp=1, dp=8, ep=8),
                       dtype="fp8")
    assert inside._curves is not None and len(inside._curves.comm_index) == 2


# ------------------------------------------------------------------------ overlap (acceptance 2)
def _est(par: ParallelConfig, comm: CommOptions | None = None, hw: str = "h800") -> Estimator:
    return Estimator(DSV3, get_hardware(hw), get_profile("default-gpu"), par, dtype="fp8", comm=comm)


EP32 = ParallelConfig(tp=1, dp=32, ep=32, redundant_experts=32)


@settings(max_examples=40, deadline=None)
@given(prefill=st.booleans(), seqs=st.integers(1, 4096), length=st.integers(1, 8192),
       ep=st.sampled_from([8, 32, 144]))
def test_overlap_never_makes_a_step_faster_than_its_largest_stream(prefill, seqs, length, ep):
    par = ParallelConfig(tp=1, dp=ep, ep=ep, redundant_experts={8: 0, 32: 32, 144: 32}[ep])
    est = _est(par, CommOptions.deepep())
    batch = StepBatch.prefill(seqs, length) if prefill else StepBatch.decode(seqs * 8, length)
    step, compute, comm = est.overlap_streams(batch)
    assert step >= max(compute, comm) * (1 - 1e-12)
    x = est.features(batch)
    plain = _est(par, CommOptions(dispatch_dtype="fp8", dedup_nodes=True, all_to_all_efficiency=0.78))
    if x[FEATURE_INDEX["n"]] >= 2:
        # the engine splits when it pays: the step is the overlapped one or the un-split one
        assert est.time(batch) == pytest.approx(min(step, plain.time(batch)), rel=1e-9)
        # and never faster than the un-split computation alone (splitting only adds weight reads)
        bc = plain.estimate(batch)
        assert step >= sum(m.compute_s * m.count for m in bc.modules) * (1 - 1e-9)
    else:
        assert est.time(batch) == pytest.approx(plain.time(batch), rel=1e-12)


@pytest.mark.parametrize("ep", [8, 32, 144])
def test_overlapped_step_time_does_not_fall_as_the_batch_grows(ep):
    est = _est(ParallelConfig(tp=1, dp=ep, ep=ep, redundant_experts=0 if ep == 8 else 32), CommOptions.deepep())
    dec = [est.time(StepBatch.decode(b * ep, 4096)) for b in range(1, 160, 3)]
    pre = [est.time(StepBatch.prefill(b, 2048)) for b in range(1, 160, 3)]
    assert np.all(np.diff(dec) >= 0) and np.all(np.diff(pre) >= 0)


def test_two_batch_overlap_hides_the_prefill_all_to_alls():
    # DeepSeek's prefill unit (EP32 on 4 nodes, 16K tokens per GPU of 4K prompts): with the
    # all-to-alls under the other micro-batch's computation, the step is its busier stream plus
    # a little, well below computation + communication in series
    batch = StepBatch.prefill(4 * 32, 4096)
    serial = _est(EP32, CommOptions(dispatch_dtype="fp8", dedup_nodes=True, all_to_all_efficiency=0.78))
    tbo = _est(EP32, CommOptions.deepep())
    step, compute, comm = tbo.overlap_streams(batch)
    assert tbo.time(batch) < 0.7 * serial.time(batch)
    assert step < 1.1 * max(compute, comm)   # + the dense layers (nothing to overlap) and the fill


def test_fp8_dispatch_halves_the_dispatch_bytes():
    bf16 = _est(EP32)
    fp8 = _est(EP32, CommOptions(dispatch_dtype="fp8"))

    def vol(e: Estimator, name: str) -> float:
        [c] = [c for g in e.groups for b in g.blocks for c in b.comms if c.name == name and g.name == "moe"]
        return c.volume.evaluate(n=1000, nall=32000)
    assert vol(fp8, "moe.dispatch_all_to_all") / vol(bf16, "moe.dispatch_all_to_all") == pytest.approx(1.03125 / 2)
    assert vol(fp8, "moe.combine_all_to_all") == vol(bf16, "moe.combine_all_to_all")


def test_comm_options_are_checked_and_round_trip_through_a_profile():
    with pytest.raises(SpecError, match="all_to_all_efficiency"):
        CommOptions(all_to_all_efficiency=1.5)
    with pytest.raises(SpecError, match="dispatch_dtype"):
        CommOptions(dispatch_dtype="int4")
    with pytest.raises(SpecError, match="unknown field"):
        comm_options_from_dict({"overlapp": "two-batch"})
    assert comm_options_from_dict("deepep") == CommOptions.deepep()
    p = get_profile("default-gpu").with_(comm=CommOptions.deepep())
    assert profile_from_dict(p.to_dict()).comm == p.comm
    assert Estimator(DSV3, H800, p, EP32, dtype="fp8").comm.overlap is Overlap.TWO_BATCH


# ------------------------------------------------------------------------ expert placement
def test_redundant_experts_let_ep144_divide_256_experts_and_set_the_memory_per_rank():
    with pytest.raises(SpecError, match="redundant_experts"):
        _est(ParallelConfig(tp=1, dp=144, ep=144))
    e144 = _est(ParallelConfig(tp=1, dp=144, ep=144, redundant_experts=32))
    e32 = _est(EP32)
    assert e144.parallel.experts_per_device(256) == 2 and e32.parallel.experts_per_device(256) == 9
    # weights per GPU differ by 7 experts x 58 MoE layers x 3 x 7168 x 2048 FP8 bytes
    expert = 3 * 7168 * 2048
    assert e32.memory.weights_bytes - e144.memory.weights_bytes == pytest.approx(7 * 58 * expert, rel=1e-9)
    assert ParallelConfig(tp=1, dp=144, ep=144, redundant_experts=32).label() == "tp1-dp144-ep144-r32"


def test_expert_imbalance_slows_the_busiest_expert_device_and_its_combine():
    base = _est(EP32)
    skew = Estimator(DSV3, H800, get_profile("default-gpu").with_(expert_imbalance=1.3), EP32, dtype="fp8")
    b = StepBatch.decode(32 * 64, 4096)
    assert skew.time(b) > base.time(b)


# ------------------------------------------------------------------------ the three defects
def test_mla_steps_read_only_their_own_paths_up_projection_weights():
    """Defect 1: a decode step streamed the prefill path's W^UQ/W^UK/W^UV copies too (+0.99 ms of
    a 47.9 ms DeepSeek-V3 decode step at tp 8) and a prefill step the decode path's."""
    est = Estimator(DSV3, get_hardware("h200"), get_profile("default-gpu"), ParallelConfig(tp=8), dtype="bf16")

    def path_bytes(batch: StepBatch, prefix: str) -> float:
        return sum(o.bytes for o in est.estimate(batch).ops if o.name.startswith(prefix))
    assert path_bytes(StepBatch.decode(64, 4096), "mla.prefill.") == 0.0
    assert path_bytes(StepBatch.prefill(1, 4096), "mla.decode.") == 0.0
    mixed = StepBatch.prefill(1, 512) + StepBatch.decode(8, 1024)
    assert path_bytes(mixed, "mla.prefill.") > 0 and path_bytes(mixed, "mla.decode.") > 0


def test_dp_attention_never_splits_a_lone_prompt_over_ranks():
    """Defect 2: one 8192-token prompt at tp1/dp8/ep8 was divided over the 8 attention ranks
    (128 ms against 250 ms at tp8/ep8). A request lives on one rank, which runs all its heads."""
    h200 = "h200"
    dp8, tp8 = _est(ParallelConfig(tp=1, dp=8, ep=8), hw=h200), _est(ParallelConfig(tp=8, ep=8), hw=h200)
    lone = StepBatch.prefill(1, 8192)
    assert dp8.features(lone)[FEATURE_INDEX["np"]] == 8192
    assert dp8.time(lone) >= tp8.time(lone)
    spread = StepBatch.prefill(8, 1024)          # eight prompts: one per rank
    assert dp8.features(spread)[FEATURE_INDEX["np"]] == 1024
    assert dp8.features(StepBatch.prefill(9, 1024))[FEATURE_INDEX["np"]] == 2048  # the busiest rank runs 2


def test_collocated_fleet_keeps_its_tp_for_decode_and_states_its_capacity():
    """Defect 3: ``Candidate(num_collocated=4, tp=2)`` kept ``decode_tp=1`` and the capacity bound
    was that of tp 1 (3.45 instead of 38.4 req/s). A collocated instance decodes with its own layout,
    and four instances serve four times one."""
    from serveplan.optimize.goodput import GoodputSettings, capacity_bound
    from serveplan.sim import SLO, Workload
    from serveplan.sim.fleet import Fleet

    four, one = Fleet.build("4m", tp=2), Fleet.build("1m", tp=2)
    assert four.last.parallel.tp == 2 and four.to_dict()["decode_tp"] == 2
    s = GoodputSettings(model=get_model("llama-2-7b"), hardware=get_hardware("a100-80g"), profile=get_profile(),
                        workload=Workload.scenario("op2", num_requests=200), slo=SLO(ttft_s=1.5, tpot_s=0.07),
                        engine=None)
    assert capacity_bound(four, s) == pytest.approx(4 * capacity_bound(one, s), rel=1e-12)
    tp1 = capacity_bound(Fleet.build("4m", tp=1), s)
    assert capacity_bound(four, s) != pytest.approx(tp1, rel=1e-3)


# ------------------------------------------------------------------------ pools across nodes (acceptance 1)
def test_deepseek_decode_at_ep144_serves_20_tokens_per_user():
    est = _est(ParallelConfig(tp=1, dp=144, ep=144, redundant_experts=32), CommOptions.deepep())
    d = decode_pool(est, context_len=4989, tokens_per_s_per_user=20)
    assert d.nodes == 18 and d.batch_per_rank >= 1
    assert d.step_s <= 0.05 and d.output_tokens_per_s_per_node > 0
    assert d.output_tokens_per_s_per_node == pytest.approx(d.batch_per_rank * 144 / d.step_s / 18)


def test_prefill_pool_counts_cached_prompt_tokens_as_input():
    est = _est(EP32, CommOptions.deepep())
    plain = prefill_pool(est, input_len=4096, tokens_per_rank=16384)
    cached = prefill_pool(est, input_len=4096, tokens_per_rank=16384, cache_hit_rate=0.563)
    assert plain.nodes == 4 and plain.prompts_per_rank == 4 and plain.new_tokens_per_prompt == 4096
    assert cached.new_tokens_per_prompt == round(4096 * 0.437)
    assert cached.input_tokens_per_s_per_node > plain.input_tokens_per_s_per_node
    assert plain.computed_tokens_per_s_per_node == plain.input_tokens_per_s_per_node
    with pytest.raises(SpecError, match="cache_hit_rate"):
        prefill_pool(est, input_len=4096, tokens_per_rank=16384, cache_hit_rate=1.0)


def test_fp32_model_payloads_keep_four_bytes():
    assert CommOptions().payload_bytes(DType.BF16, 4.0) == 4.0 and CommOptions().payload_bytes(DType.FP8, 2) > 1


def test_disaggregated_pools_of_their_own_widths_are_candidates():
    from serveplan.optimize.space import SearchSpace, enumerate_space
    from serveplan.sim.fleet import Fleet

    f = Fleet.build("1p1d", tp=1, dp=8, ep=8, decode_dp=16, decode_ep=16, max_batch=512, redundant_experts=32)
    assert f.name == "1p1d-tp1-dp8-ep8-r32/dp16-ep16-b512" and f.num_devices == 24
    assert f.last.parallel == ParallelConfig(tp=1, dp=16, ep=16, redundant_experts=32)
    assert Fleet.from_dict(f.to_dict()) == f
    space = SearchSpace(devices=24, tp_sizes=(1,), dp_sizes=(8, 16), ep_sizes=(8, 16), mixed_ep=True)
    st = _settings(DSV3, get_hardware("h200"), get_profile("default-gpu"), dtype=DType.FP8)
    listing = enumerate_space(space, st, request_tokens=4096)
    names = {c.name for c in listing.candidates}
    assert "1p1d-tp1-dp8-ep8/dp16-ep16-b16" in names
    assert all(c.num_devices <= 24 for c in listing.candidates)
    same = enumerate_space(SearchSpace(devices=24, tp_sizes=(1,), dp_sizes=(8, 16), ep_sizes=(8, 16)), st,
                           request_tokens=4096)
    assert not any("/" in c.name for c in same.candidates)


def _settings(model, hardware, profile, **kw):
    """Search settings of the layout screens (no engine: the fleets' own settings)."""
    from serveplan.optimize.goodput import GoodputSettings
    from serveplan.sim import SLO, Workload

    return GoodputSettings(model=model, hardware=hardware, profile=profile, workload=Workload.fixed(2048, 2048, 10),
                           slo=SLO(), engine=None, **kw)
