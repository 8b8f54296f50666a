"""Search, evaluation and frontier (FlexGen Section 4.3, Tables 2, 15, 16, 19) and the checks against the paper."""

from __future__ import annotations

import pytest

from serveplan.errors import InfeasibleError, SpecError
from serveplan.offload.policy import parse_policy
from serveplan.offload.search import evaluate_policy, offload_frontier, plan_offload
from serveplan.offload.validation import TABLE2_CELLS, compare_cells, compare_table2, summarize
from serveplan.specs.catalog import get_host


@pytest.fixture(scope="module")
def table2():
    return {(r["model"], r["input_len"], r["compress"]): r for r in compare_table2()}


def test_evaluate_mode_on_tables_14_to_18():
    records = compare_cells()
    s = summarize(records)
    assert s["cells"] == 30
    assert s["median_abs_error"] <= 0.25
    assert s["max_factor"] <= 2.0


@pytest.mark.slow
def test_search_is_never_worse_than_the_paper_policy(table2):
    assert len(table2) == 12 == 2 * len({(c.model, c.input_len) for c in TABLE2_CELLS})
    for key, r in table2.items():
        assert r["predicted"] >= r["paper_policy_predicted"] * (1 - 1e-3), key


@pytest.mark.parametrize("model, s", [("opt-30b", 512), ("opt-175b", 512), ("opt-30b", 1024),
                                      ("opt-175b", 1024), ("opt-6.7b", 1024)])
def test_fp16_search_within_30_percent_of_flexgen(table2, model, s):
    assert abs(table2[(model, s, False)]["error"]) <= 0.30


def test_opt67b_at_512_search_beats_flexgen_by_splitting_the_kv_cache(table2):
    # Known deviation (docs/offload.md, "OPT-6.7B at 512+32"): the model prefers 4x1 with one of the
    # four sequences' KV cache on the CPU over FlexGen's 2x1 all-GPU policy, predicting ~1.3x
    # FlexGen's measured 25.26 token/s.
    r = table2[("opt-6.7b", 512, False)]
    assert r["paper_policy_predicted"] == pytest.approx(25.26, rel=0.10)
    assert r["chosen_policy"] == "4x1, 100, 0, 75, 25, 100, 0"
    assert 0.25 < r["error"] < 0.35


@pytest.mark.slow
def test_search_emits_only_placements_flexgens_runtime_allocates(table2):
    # KV cache in whole sequences of a GPU batch, unsplit when compressed, activations on one tier,
    # weights priced as allocated per tensor (flexgen/pytorch_backend.py, flexgen/flex_opt.py)
    for model, s, comp in table2:
        plan = plan_offload(model, input_len=s, output_len=32, compress=comp)
        p, a = plan.policy, plan.allocated_percent
        gbs = p.gpu_batch_size
        for f in ("cg", "cc", "cd"):
            assert a[f] / 100 * gbs == pytest.approx(round(a[f] / 100 * gbs), abs=1e-9), (model, s, comp, f)
        if comp:
            assert max(a["cg"], a["cc"], a["cd"]) == pytest.approx(100)
        assert max(p.hg, p.hc, p.hd) == pytest.approx(1.0)
        again = evaluate_policy(model, p, input_len=s, output_len=32)
        assert again.throughput_tokens_per_s == pytest.approx(plan.throughput_tokens_per_s, rel=1e-9)
        assert again.allocated_percent == pytest.approx(a)


def test_evaluate_prices_the_kv_split_the_runtime_allocates():
    # 4 sequences x 85% on the GPU: FlexGen's runtime keeps floor(3.4) = 3 sequences there
    a = evaluate_policy("opt-6.7b", parse_policy("4x1,100,0,85,15,100,0"))
    b = evaluate_policy("opt-6.7b", parse_policy("4x1,100,0,75,25,100,0"))
    assert a.allocated_percent["cg"] == pytest.approx(75) and a.allocated_percent["cc"] == pytest.approx(25)
    assert a.throughput_tokens_per_s == pytest.approx(b.throughput_tokens_per_s, rel=1e-12)
    # a nominal 2% of OPT weights on the CPU moves no tensor: the plan stays all on the GPU
    c = evaluate_policy("opt-6.7b", parse_policy("4x1,98,2,100,0,100,0"))
    assert c.allocated_percent["wg"] == pytest.approx(100) and not c.fits


def test_policy_shapes_match_the_paper(table2):
    for s in (512, 1024):
        big, big_c, mid = table2[("opt-175b", s, False)], table2[("opt-175b", s, True)], table2[("opt-30b", s, False)]
        assert big["uses_disk"] and big["weights_on_disk"] > 0.3  # Table 2: 175B spills to disk
        assert not big_c["uses_disk"]  # FlexGen (c): all weights in CPU memory, no disk
        assert not mid["uses_disk"]  # Table 24: OPT-30B does not use the SSD
        assert mid["chosen_policy"].split(", ")[2] != "0"  # most 30B weights on the CPU (wc > 0)
        assert table2[("opt-6.7b", s, False)]["chosen_policy"].split(", ")[1] == "100"  # 6.7B on GPU


@pytest.mark.parametrize("model", ["llama-2-70b", "mixtral-8x7b", "deepseek-v3"])
def test_other_architectures_plan_on_the_t4_machine(model):
    plan = plan_offload(model)
    assert plan.fits and plan.throughput_tokens_per_s > 0
    z = plan.sizes
    bls, n, s = plan.policy.block_size, plan.output_len, plan.input_len
    assert plan.throughput_tokens_per_s == pytest.approx(bls * n / plan.latency_s)
    assert z["kv_bytes_block"] == pytest.approx(z["kv_bytes_per_token_per_layer"] * (s + n) * bls * z["num_layers"])
    fmt = 0.5625 if plan.policy.compress else 2.0  # bytes per value stored
    expected_kv = {"llama-2-70b": 2 * 8 * 128, "mixtral-8x7b": 2 * 8 * 128, "deepseek-v3": 512 + 64}[model]
    assert z["kv_bytes_per_token_per_layer"] == pytest.approx(expected_kv * fmt)
    total = sum(plan.placement_bytes["weights"].values())
    assert total == pytest.approx(z["weight_bytes_total"])


def test_deepseek_v3_streams_from_disk_on_the_t4_machine():
    plan = plan_offload("deepseek-v3")
    # 671e9 parameters: 1.34 TB in FP16 or 377 GB in 4 bits; CPU memory is 208 GB, so FP16 on disk
    assert plan.sizes["weight_bytes_total"] == pytest.approx(2 * 671.0e9, rel=0.01)
    assert not plan.policy.compress and plan.policy.wd > 0.8


def test_model_too_big_for_every_tier_names_bytes_per_tier():
    with pytest.raises(InfeasibleError) as err:
        plan_offload("deepseek-v3", host="flexgen-3090")  # 1.34 TB > 24 GB + 125 GB + 1 TB
    msg = str(err.value)
    assert "GPU 2.29e+10" in msg and "CPU 1.25e+11" in msg and "disk 1e+12" in msg
    assert "1.342e+12 bytes" in msg


def test_max_latency_bounds_the_block_latency_and_can_be_infeasible():
    free = plan_offload("opt-30b", compress=False)
    bounded = plan_offload("opt-30b", compress=False, max_latency_s=free.latency_s / 3)
    assert bounded.latency_s <= free.latency_s / 3
    assert bounded.throughput_tokens_per_s < free.throughput_tokens_per_s
    with pytest.raises(InfeasibleError, match="max-latency"):
        plan_offload("opt-30b", compress=False, max_latency_s=1.0)


def test_evaluate_reports_overflow_instead_of_refusing():
    plan = evaluate_policy("opt-30b", parse_policy("512x8,20,80,0,100,0,100"), input_len=512, output_len=8)
    assert not plan.fits and plan.violations_bytes["cpu_decode"] > 1e12  # Table 18 prints 512x8


def test_frontier_is_monotone_and_ends_at_the_best_throughput():
    fr = offload_frontier("opt-175b")
    lat = [p.latency_s for p in fr.points]
    tp = [p.throughput_tokens_per_s for p in fr.points]
    assert lat == sorted(lat) and tp == sorted(tp)
    best = plan_offload("opt-175b")
    assert tp[-1] == pytest.approx(best.throughput_tokens_per_s, rel=0.06)  # disk margin aside
    # Table 19: FlexGen (c) reaches 1.12 token/s at block 144 and stops where CPU memory is full
    assert fr.points[-1].policy.compress and fr.points[-1].policy.block_size <= 160


def test_unknown_host_and_bad_lengths_are_spec_errors():
    with pytest.raises(SpecError, match="did you mean 'flexgen-t4'"):
        get_host("flexgen-t5")
    with pytest.raises(SpecError, match="input_len"):
        plan_offload("opt-30b", input_len=0)


def test_other_gpu_scales_runtime_speeds():
    h = get_host("flexgen-t4")
    r = h.runtime_for(h.gpu)
    assert r is h.runtime
    from serveplan.specs.catalog import get_hardware
    a100 = h.runtime_for(get_hardware("a100-80g"))
    assert a100.mm_prefill_flops > r.mm_prefill_flops


def test_gpu_reserve_lies_between_what_flexgen_ran_and_did_not_use():
    # flexgen-t4 gpu_reserved_bytes (fitted, specs/data/hosts/flexgen-t4.yaml): every OPT-6.7B
    # policy FlexGen ran all on the GPU (Tables 14-18, FP16 and 4-bit) fits; 2x1 at 1024+32, one
    # sequence more than FlexGen used there, does not.
    ran = [c for c in compare_cells() if c["model"] == "opt-6.7b"]
    assert len(ran) == 10 and all(c["fits"] for c in ran)
    unused = evaluate_policy("opt-6.7b", parse_policy("2x1,100,0,100,0,100,0"), input_len=1024, output_len=32)
    assert not unused.fits and set(unused.violations_bytes) == {"gpu_prefill"}


def test_memory_headroom_keeps_every_tier_that_fraction_free():
    # FlexGen's released search keeps 20% of each tier spare (alpha_g = alpha_c = alpha_n = 0.8)
    full = plan_offload("opt-6.7b", input_len=512, output_len=32, compress=False)
    safe = plan_offload("opt-6.7b", input_len=512, output_len=32, compress=False, memory_headroom=0.2)
    host = get_host("flexgen-t4")
    gpu_net = (host.gpu.memory_bytes - host.gpu_reserved_bytes) * 0.8
    assert safe.capacity_bytes["gpu_prefill"] == pytest.approx(gpu_net)
    assert safe.capacity_bytes["cpu_decode"] == pytest.approx(0.8 * host.cpu_memory_bytes)
    assert safe.capacity_bytes["disk"] == pytest.approx(0.8 * host.disk_bytes)
    assert safe.fits and safe.memory_headroom == 0.2 and safe.to_dict()["memory_headroom"] == 0.2
    for tier, peak in safe.peak_memory_bytes.items():
        assert peak <= safe.capacity_bytes[tier] * (1 + 1e-9), tier
    # less memory never buys throughput; the full-memory plan would not fit the reduced tiers
    assert safe.throughput_tokens_per_s <= full.throughput_tokens_per_s
    again = evaluate_policy("opt-6.7b", full.policy, input_len=512, output_len=32, memory_headroom=0.2)
    assert not again.fits and "gpu_prefill" in again.violations_bytes


@pytest.mark.parametrize("value", [-0.1, 1.0, 1.5])
def test_memory_headroom_outside_zero_one_is_a_spec_error_naming_it(value):
    with pytest.raises(SpecError, match="memory_headroom"):
        plan_offload("opt-6.7b", memory_headroom=value)
