"""Communication of TP, EP, PP and DP against the modeling notes (A.2, A.7), and link topology.

Conventions. The notes count values; we count bytes (2 per bf16 activation). A link's
``bandwidth`` is bytes/s per direction per device, so a collective's time is the bytes one device
*sends* over that bandwidth (alpha-beta: plus one latency per message round):

* TP ring all-reduce (notes A.2): each device sends ``2(TP-1)/TP x N x d`` values (and receives
  as many at the same time). The notes call this figure "Send + Receive", but it is the volume of
  one direction; it is what the link carries, so it is compared as is.
* EP all-to-all (notes A.7): the notes' ``4 x (N*k*d/EP) x (EP-1)/EP`` is two all-to-alls
  (dispatch and combine) times (send + receive). A device sends half of it, so the time is
  ``2 x (N*k*d/EP) x (EP-1)/EP`` values over the link.
* PP send/recv (notes A.7): ``N x d`` values per stage boundary, one direction.

To read bytes back from times, the tests run on a copy of the device with a 1 GB/s link and no
latency, and a profile with communication efficiency 1: ``comm_s * 1e9`` is then bytes sent.
"""

from __future__ import annotations

import pytest

from serveplan import Estimator, ParallelConfig, StepBatch, get_hardware, get_model, get_profile
from serveplan.ops.base import Collective
from serveplan.ops.graph import build_layer_groups
from serveplan.specs.hardware import LinkSpec
from serveplan.specs.profile import PhaseEfficiency
from serveplan.units import DType

BW = 1e9      # bytes/s of the test links
AB = 2        # bytes per bf16 activation value
d, k = 7168, 8  # DeepSeek-V3 hidden size and routed experts per token

# notes A.7 "for a prefill and a decode batch": B x S tokens in prefill, B in decode
PREFILL = StepBatch.prefill(8, 1024)   # N = 8192
DECODE = StepBatch.decode(64, 2048)    # N = 64


def _unit_links(hw_name: str = "h100-sxm"):
    hw = get_hardware(hw_name)
    return hw.with_(intra_node_link=LinkSpec(name="test", bandwidth=BW, latency_s=0.0),
                    inter_node_link=LinkSpec(name="test-inter", bandwidth=BW, latency_s=0.0))


def _unit_profile():
    p = get_profile("default-gpu")
    return p.with_(prefill=PhaseEfficiency(compute=0.6, memory=0.8, comm=1.0),
                   decode=PhaseEfficiency(compute=0.5, memory=0.7, comm=1.0))


def _module_comm_bytes(est: Estimator, batch: StepBatch, group: str, module: str) -> float:
    [m] = [m for m in est.estimate(batch).modules if m.group == group and m.name == module]
    return m.comm_s * BW


def _ds(par: ParallelConfig) -> Estimator:
    return Estimator(get_model("deepseek-v3"), _unit_links(), _unit_profile(), par)


# ---------------------------------------------------------------------------- TP (notes A.2, A.7)
@pytest.mark.parametrize("batch, N", [(PREFILL, 8192), (DECODE, 64)])
def test_tp_all_reduce_logical_volume_is_n_times_d(batch, N):
    # "data to synchronize" = the row-split layer's output, N x d values, per attention and MLP
    groups = build_layer_groups(get_model("deepseek-v3"), ParallelConfig(tp=8), dtype=DType.BF16,
                                kv_dtype=DType.BF16, attention_impl=_unit_profile().attention_impl,
                                include_lm_head=False)
    dense = next(g for g in groups if g.name == "dense")
    comms = [c for b in dense.blocks for c in b.comms]
    assert [c.kind for c in comms] == [Collective.ALL_REDUCE, Collective.ALL_REDUCE]  # attention, MLP
    for c in comms:
        assert c.values.evaluate(n=N) == N * d
        assert c.volume.evaluate(n=N) == N * d * AB
        assert c.group_size == 8


@pytest.mark.parametrize("batch, N", [(PREFILL, 8192), (DECODE, 64)])
def test_tp8_all_reduce_sends_1_75_n_d_per_gpu(batch, N):
    # notes A.7: TP=8 -> 2*(8-1)/8 = 1.75 x N*d values per GPU per all-reduce
    est = _ds(ParallelConfig(tp=8))
    for module in ("attention", "mlp"):
        assert _module_comm_bytes(est, batch, "dense", module) == pytest.approx(1.75 * N * d * AB, rel=1e-12)
    # prefill 1.75*8192*7168*2 = 205,520,896 B; decode 1.75*64*7168*2 = 1,605,632 B
    golden = {8192: 205_520_896, 64: 1_605_632}[N]
    assert _module_comm_bytes(est, batch, "dense", "attention") == pytest.approx(golden, rel=1e-12)


def test_tp_decode_volume_is_s_times_smaller_than_prefill():
    # notes A.7: N = B*S in prefill, B in decode -> S times less (here B = 8 in both)
    est = _ds(ParallelConfig(tp=8))
    pre = _module_comm_bytes(est, StepBatch.prefill(8, 1024), "dense", "attention")
    dec = _module_comm_bytes(est, StepBatch.decode(8, 1024), "dense", "attention")
    assert pre / dec == pytest.approx(1024)


# ---------------------------------------------------------------------------- EP (notes A.7)
@pytest.mark.parametrize("par", [ParallelConfig(tp=1, dp=8, ep=8), ParallelConfig(tp=8, ep=8)])
@pytest.mark.parametrize("batch, N", [(PREFILL, 8192), (DECODE, 64)])
def test_ep_two_all_to_alls_match_notes(par, batch, N):
    EP = 8
    est = _ds(par)
    # logical: N x k x d values in all (notes A.7); one device holds N*k*d/EP of them
    groups = build_layer_groups(get_model("deepseek-v3"), par, dtype=DType.BF16, kv_dtype=DType.BF16,
                                attention_impl=_unit_profile().attention_impl, include_lm_head=False)
    moe = next(g for g in groups if g.name == "moe")
    a2a = [c for b in moe.blocks for c in b.comms if c.kind is Collective.ALL_TO_ALL]
    assert [c.name for c in a2a] == ["moe.dispatch_all_to_all", "moe.combine_all_to_all"]
    for c in a2a:   # dispatch: each rank's N/dp tokens; combine: each expert device's N*k/EP copies
        assert c.values.evaluate(nall=N, n=N / par.dp) * EP == N * k * d
        assert c.group_size == EP
    # the shared expert is split over tp like a dense MLP: its partial sums need an all-reduce
    # of N x d over tp (1.75 N d per device at tp 8; none at tp 1)
    shared = 1.75 * N * d * AB if par.tp == 8 else 0.0
    # actual per GPU: notes 4*(N*k*d/EP)*(EP-1)/EP counts send + receive; the link carries half
    notes_actual = 4 * (N * k * d / EP) * (EP - 1) / EP
    moe_bytes = _module_comm_bytes(est, batch, "moe", "moe")
    assert moe_bytes - shared == pytest.approx(notes_actual / 2 * AB, rel=1e-12)
    # prefill: 4*8192*8*7168/8*7/8 = 205,520,896 values (send+receive), 205,520,896 B sent
    golden = {8192: 205_520_896, 64: 1_605_632}[N]
    assert moe_bytes - shared == pytest.approx(golden, rel=1e-12)


def test_dp_attention_with_ep_has_no_attention_all_reduce():
    # tp=1: attention runs whole on each DP rank; only the MoE all-to-alls communicate
    est = _ds(ParallelConfig(tp=1, dp=8, ep=8))
    assert _module_comm_bytes(est, PREFILL, "moe", "attention") == 0.0
    assert _module_comm_bytes(est, PREFILL, "dense", "mlp") == 0.0


def test_dp_needs_no_communication():
    # notes A.7: replicas (data parallelism) do not communicate in inference
    est = Estimator(get_model("llama-2-7b"), _unit_links(), _unit_profile(), ParallelConfig(tp=1, dp=2))
    e = est.estimate(PREFILL)
    assert all(m.comm_s == 0.0 for m in e.modules) and e.pp_comm_s == 0.0


def test_tp_and_ep_prefill_figures_in_the_notes_ratio():
    # notes A.7: TP N*d vs EP N*k*d logical; per GPU at TP = EP = 8: 1.75*N*d vs 4*N*k*d/8*7/8
    # = 3.5*N*d (send + receive): the all-to-alls send as much as one TP all-reduce here, and
    # the MoE module adds the shared expert's all-reduce: twice the attention's all-reduce
    est = _ds(ParallelConfig(tp=8, ep=8))
    tp = _module_comm_bytes(est, PREFILL, "moe", "attention")
    ep = _module_comm_bytes(est, PREFILL, "moe", "moe")
    assert ep == pytest.approx(2 * tp, rel=1e-12)


def test_all_to_all_spans_the_stage_when_experts_are_split():
    # tp=8, dp=2, ep=8 on 16 devices: each expert is split over 2 devices (one per node), so a
    # token's copies reach devices of both nodes: the all-to-alls run over all 16 devices (and
    # the inter-node link), with the same N*k*d/ep values per device
    groups = build_layer_groups(get_model("deepseek-v3"), ParallelConfig(tp=8, dp=2, ep=8), dtype=DType.BF16,
                                kv_dtype=DType.BF16, attention_impl=_unit_profile().attention_impl,
                                include_lm_head=False)
    moe = next(g for g in groups if g.name == "moe")
    a2a = [c for b in moe.blocks for c in b.comms if c.kind is Collective.ALL_TO_ALL]
    assert all(c.group_size == 16 for c in a2a)
    assert all(c.values.evaluate(nall=8192, n=8192 / 2) == 8192 * k * d / 8 for c in a2a)


# ---------------------------------------------------------------------------- PP (notes A.7)
@pytest.mark.parametrize("batch, N", [(PREFILL, 8192), (DECODE, 64)])
def test_pp_send_recv_is_n_times_d_per_boundary(batch, N):
    # notes A.7: N x d values, one direction, at each of pp - 1 boundaries
    for pp in (2, 4):
        est = _ds(ParallelConfig(tp=8, pp=pp))
        assert est.estimate(batch).pp_comm_s * BW == pytest.approx((pp - 1) * N * d * AB, rel=1e-12)


def test_pp_with_dp_attention_sends_each_ranks_tokens_on_its_own_link():
    # dp=8: each rank sends its own N/8 tokens to its peer in the next stage, in parallel
    est = _ds(ParallelConfig(tp=1, dp=8, ep=8, pp=2))
    assert est.estimate(PREFILL).pp_comm_s * BW == pytest.approx(8192 / 8 * d * AB, rel=1e-12)


def test_stage_time_adds_one_boundary():
    est = _ds(ParallelConfig(tp=8, pp=4))
    prof = _unit_profile()
    no_pp = Estimator(get_model("deepseek-v3"), _unit_links(), prof, ParallelConfig(tp=8))
    layers = no_pp.step_time(no_pp.features(PREFILL)) / 4
    assert est.stage_time(PREFILL) == pytest.approx(layers + 8192 * d * AB / BW, rel=1e-9)


# ---------------------------------------------------------------------------- topology
H100 = get_hardware("h100-sxm")
INTRA, INTER = H100.intra_node_link, H100.inter_node_link
E_PRE = get_profile("default-gpu").prefill.comm  # 0.7


def _llama70(par: ParallelConfig) -> Estimator:
    return Estimator(get_model("llama-2-70b"), H100, get_profile("default-gpu"), par)


def test_link_for_picks_inter_node_above_devices_per_node():
    assert H100.devices_per_node == 8
    assert H100.link_for(8) is INTRA and H100.link_for(16) is INTER
    assert INTRA.bandwidth == 450e9 and INTER.bandwidth == 50e9


def test_all_reduce_is_a_ring_inside_the_node():
    # Llama-2-70B (h = 8192) prefill of 2048 tokens, tp=8 on NVLink: ring all-reduce of N*h*2 B
    # = 2(g-1)/g * 33,554,432 B / (0.7 * 450 GB/s) + 2(g-1) * 3 us = 1.75*33.55 MB / 315 GB/s + 14*3 us
    N, h = 2048, 8192
    est = _llama70(ParallelConfig(tp=8))
    [att] = [m for m in est.estimate(StepBatch.prefill(1, N)).modules if m.name == "attention"]
    expected = 2 * 7 / 8 * N * h * 2 / (E_PRE * INTRA.bandwidth) + 2 * 7 * INTRA.latency_s
    assert att.comm_s == pytest.approx(expected, rel=1e-12)
    assert att.comm_s == pytest.approx(0.2284e-3, rel=1e-3)


def test_all_reduce_across_nodes_is_hierarchical():
    # tp=16 over 2 nodes of 8 (estimator/collectives.py): reduce-scatter and all-gather over
    # NVLink, 2 * 7/8 * V / (0.7 * 450 GB/s) = 0.18641 ms; all-reduce of V/8 over the 2 nodes'
    # NICs, 2 * 1/2 * (V / 8) / (0.7 * 50 GB/s) = 0.11984 ms; latencies 2*7*3 us + 2*1*5 us =
    # 52 us; V = 33,554,432 B: 0.35825 ms. The flat ring of the old model, 1.875 V / 35 GB/s +
    # 30 * 5 us = 1.947 ms, sent the whole payload over the NIC with 30 serial latencies.
    N, h = 2048, 8192
    V = N * h * 2
    est = _llama70(ParallelConfig(tp=16))
    [att] = [m for m in est.estimate(StepBatch.prefill(1, N)).modules if m.name == "attention"]
    expected = (2 * 7 / 8 * V / (E_PRE * INTRA.bandwidth) + 2 * 1 / 2 * (V / 8) / (E_PRE * INTER.bandwidth)
                + 2 * 7 * INTRA.latency_s + 2 * 1 * INTER.latency_s)
    assert att.comm_s == pytest.approx(expected, rel=1e-12)
    assert att.comm_s == pytest.approx(0.35825e-3, rel=1e-3)


def test_all_to_all_inside_the_node_has_one_latency():
    # DeepSeek-V3, dp=ep=8 attention ranks: each all-to-all sends (g-1)/g of N*k*d/ep values,
    # all pairs at once (one latency, not g-1 in a chain)
    N, ep = 8192, 8
    est = Estimator(get_model("deepseek-v3"), H100, get_profile("default-gpu"), ParallelConfig(tp=1, dp=ep, ep=ep))
    [moe] = [m for m in est.estimate(StepBatch.prefill(8, 1024)).modules if m.group == "moe" and m.name == "moe"]
    one = (ep - 1) / ep * N * k * d / ep * AB / (E_PRE * INTRA.bandwidth) + INTRA.latency_s
    assert moe.comm_s == pytest.approx(2 * one, rel=1e-12)


def test_all_to_all_across_nodes_splits_nic_and_nvlink_traffic():
    # dp=ep=16 over 2 nodes: of a device's V = N*k*d/16*2 B, half goes to the other node over its
    # NIC, 7/16 to the 7 peers of its node over NVLink, concurrently: max(V/2 / (0.7*50 GB/s),
    # 7V/16 / (0.7*450 GB/s)) = the NIC share, plus one network and one NVLink latency (5 + 3 us)
    N, ep = 8192, 16
    est = Estimator(get_model("deepseek-v3"), H100, get_profile("default-gpu"), ParallelConfig(tp=1, dp=ep, ep=ep))
    [moe] = [m for m in est.estimate(StepBatch.prefill(16, 512)).modules if m.group == "moe" and m.name == "moe"]
    V = N * k * d / ep * AB
    one = max(V / 2 / (E_PRE * INTER.bandwidth), 7 * V / 16 / (E_PRE * INTRA.bandwidth)) + INTER.latency_s + 3e-6
    assert moe.comm_s == pytest.approx(2 * one, rel=1e-12)


@pytest.mark.parametrize("tp, pp, links", [
    (4, 2, [INTRA]),                  # 8 devices, one node
    (8, 2, [INTER]),                  # a stage fills a node: the boundary crosses nodes
    (4, 4, [INTRA, INTER, INTRA]),    # 16 devices: only the boundary between devices 7 and 8 crosses
])
def test_send_recv_is_alpha_beta_on_each_boundarys_link(tp, pp, links):
    N, h = 2048, 8192
    est = _llama70(ParallelConfig(tp=tp, pp=pp))
    expected = sum(N * h * AB / (E_PRE * lk.bandwidth) + lk.latency_s for lk in links)
    assert est.estimate(StepBatch.prefill(1, N)).pp_comm_s == pytest.approx(expected, rel=1e-12)


def test_tp16_step_is_slower_than_two_tp8_halves_would_suggest():
    # crossing nodes: even hierarchically (an eighth of the payload over the 9x slower NIC), tp=16
    # prefill pays more communication per layer than tp=8 although each device computes half as much
    b = StepBatch.prefill(1, 2048)
    e8, e16 = _llama70(ParallelConfig(tp=8)).estimate(b), _llama70(ParallelConfig(tp=16)).estimate(b)
    comm = lambda e: sum(m.comm_s * m.count for m in e.modules)  # noqa: E731
    assert comm(e16) > 1.5 * comm(e8)


def test_hierarchical_all_reduce_takes_a_measured_domain_start_up_once():
    # A measured profile gives the start-up latency A of a whole all-reduce over one domain (its
    # NCCL curve at 8 ranks). Across 2 domains the domain's reduce-scatter + all-gather cost that
    # start-up once, not once per ring hop: latency A + 2 (D-1) a_out. Hand check with A = 20 us,
    # a_out = 5 us (H100 InfiniBand), D = 2: 30 us; charging A per hop, 2*7*20 + 2*5 = 290 us,
    # priced a 57 KB decode all-reduce over 16 B200 at 0.36 ms (measured SGLang TPOT of DeepSeek at
    # TP 16 over 2 nodes: about 9 ms a step for 61 layers, i.e. well under 0.1 ms an all-reduce).
    import numpy as np

    from serveplan.estimator.collectives import collective_coefficients
    from serveplan.ops.base import Collective
    from serveplan.specs.profile import CommModel

    vol = np.array([1.0])
    _, lat = collective_coefficients(Collective.ALL_REDUCE, 16, vol, vol, H100, CommModel.ALPHA_BETA,
                                     scale_up_latency={Collective.ALL_REDUCE: 20e-6})
    assert lat == pytest.approx(20e-6 + 2 * INTER.latency_s, rel=1e-12)
    _, lat_link = collective_coefficients(Collective.ALL_REDUCE, 16, vol, vol, H100, CommModel.ALPHA_BETA)
    assert lat_link == pytest.approx(2 * 7 * INTRA.latency_s + 2 * INTER.latency_s, rel=1e-12)
