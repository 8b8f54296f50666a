"""The placement LP (epigraph form, HiGHS) and rounding."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from serveplan.errors import InfeasibleError
from serveplan.offload.cost import cost_terms
from serveplan.offload.lp import build_lp, memory_violations, round_placement, solve
from serveplan.offload.policy import parse_policy
from serveplan.specs.catalog import get_host, get_model

HOST = get_host("flexgen-t4")


def _terms(model="opt-175b", gbs=32, ngb=8, compress=False, cpu_attention=True, s=512, n=32):
    return cost_terms(get_model(model), HOST.gpu, HOST, input_len=s, output_len=n, gpu_batch_size=gbs,
                      num_gpu_batches=ngb, compress=compress, cpu_attention=cpu_attention)


def test_lp_objective_equals_the_cost_model_at_its_solution():
    t = _terms()
    sol = solve(build_lp(t))
    pre, dec = t.block_latency(sol.x)
    assert sol.latency_s == pytest.approx(pre + dec, rel=1e-6)  # epigraph variables are tight
    assert not memory_violations(t, sol.x, rtol=1e-6)
    for g in range(3):
        assert sol.x[3 * g:3 * g + 3].sum() == pytest.approx(1.0)


def test_lp_beats_the_paper_policy_for_the_same_shape():
    t = _terms()
    x_paper = np.array(parse_policy("32x8,0,50,0,0,0,100").placement())
    assert not memory_violations(t, x_paper)
    sol = solve(build_lp(t))
    assert sol.latency_s <= sum(t.block_latency(x_paper)) * (1 + 1e-9)


def test_opt175b_must_spill_to_disk_and_activations_stay_off_it():
    sol = solve(build_lp(_terms()))
    wg, wc, wd, cg, cc, cd, hg, hc, hd = sol.x
    assert wd + cd > 0.3  # 325 GB of weights and 657 GB of KV cannot fit 16 + 208 GB
    assert hd == 0.0  # FlexGen's runtime keeps activations off the disk


def test_compressed_tensors_stay_off_disk_and_that_can_be_infeasible():
    sol = solve(build_lp(_terms(gbs=48, ngb=3, compress=True, cpu_attention=False)))
    assert sol.x[2] == 0 and sol.x[5] == 0
    with pytest.raises(InfeasibleError):  # 4-bit KV of 4096 sequences does not fit GPU + CPU
        solve(build_lp(_terms(gbs=64, ngb=64, compress=True, cpu_attention=False)))


def test_latency_bound_is_a_linear_constraint():
    t = _terms("opt-30b", gbs=48, ngb=3)
    free = solve(build_lp(t))
    with pytest.raises(InfeasibleError):
        solve(build_lp(t, max_latency_s=free.latency_s * 0.9))
    bounded = solve(build_lp(t, max_latency_s=free.latency_s * 1.5))
    assert bounded.latency_s == pytest.approx(free.latency_s, rel=1e-6)


@settings(max_examples=25, deadline=None)
@given(gbs=st.sampled_from([1, 8, 32, 64]), ngb=st.sampled_from([1, 3, 8]),
       model=st.sampled_from(["opt-30b", "opt-175b"]), cpu_attention=st.booleans())
def test_rounding_gives_whole_percent_that_fits_and_costs_no_less(gbs, ngb, model, cpu_attention):
    t = _terms(model, gbs=gbs, ngb=ngb, cpu_attention=cpu_attention)
    try:
        sol = solve(build_lp(t))
    except InfeasibleError:
        return
    xr = round_placement(t, sol.x)
    assert np.allclose(xr * 100, np.round(xr * 100), atol=1e-6)
    for g in range(3):
        assert xr[3 * g:3 * g + 3].sum() == pytest.approx(1.0)
    assert not memory_violations(t, xr)
    assert sum(t.block_latency(xr)) >= sol.latency_s * (1 - 1e-6)  # the LP is a relaxation
