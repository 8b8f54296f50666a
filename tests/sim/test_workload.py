"""Workloads: common random numbers across rates, seeded lengths, traces, scenarios."""

from __future__ import annotations

import json

import numpy as np
import pytest

from serveplan.errors import SpecError
from serveplan.sim import LengthDist, Workload, arrival_times


def test_same_seed_at_two_rates_gives_the_same_sequence_rescaled():
    wl = Workload.scenario("op2", num_requests=1000)
    a1 = arrival_times(wl, 1.0, seed=7)
    a3 = arrival_times(wl, 3.0, seed=7)
    np.testing.assert_allclose(a3 * 3.0, a1, rtol=1e-12)
    assert not np.allclose(arrival_times(wl, 1.0, seed=8), a1)


def test_poisson_base_sequence_is_default_rng_exponential():
    wl = Workload.scenario("op1", num_requests=50)
    expected = np.cumsum(np.random.default_rng(3).exponential(1.0, 50)) / 2.5
    np.testing.assert_array_equal(arrival_times(wl, 2.5, seed=3), expected)


def test_gamma_gaps_have_mean_one_over_rate_and_the_requested_cv():
    wl = Workload.scenario("op2", num_requests=200_000, arrival="gamma", cv=2.0)
    gaps = np.diff(arrival_times(wl, 4.0, seed=0))
    assert gaps.mean() == pytest.approx(0.25, rel=0.02)
    assert gaps.std() / gaps.mean() == pytest.approx(2.0, rel=0.03)


def test_scenarios_are_bestserve_operating_points():
    for name, (s, n) in {"op1": (8192, 512), "op2": (2048, 64), "op3": (1024, 64), "op4": (256, 2048)}.items():
        wl = Workload.scenario(name, num_requests=3)
        assert wl.input_lengths.tolist() == [s] * 3 and wl.output_lengths.tolist() == [n] * 3


def test_sampled_lengths_depend_on_the_length_seed_only():
    d_in, d_out = LengthDist.parse("normal:2048,512"), LengthDist.parse("uniform:16,128")
    a = Workload.from_distributions(d_in, d_out, 500, seed=1)
    b = Workload.from_distributions(d_in, d_out, 500, seed=1)
    c = Workload.from_distributions(d_in, d_out, 500, seed=2)
    assert a == b and a != c
    assert a.output_lengths.min() >= 16 and a.output_lengths.max() <= 128
    assert a.input_lengths.mean() == pytest.approx(2048, rel=0.05)


@pytest.mark.parametrize("text", ["lognormal:1024,0.5", "empirical:128,256,1024", "fixed:77"])
def test_length_distributions_parse_and_sample_positive_integers(text):
    wl = Workload.from_distributions(LengthDist.parse(text), 8, 100, seed=0)
    assert wl.input_lengths.dtype == np.int64 and wl.input_lengths.min() >= 1


def test_trace_csv_and_jsonl_are_read_sorted_and_shifted(tmp_path):
    csv_path = tmp_path / "t.csv"
    csv_path.write_text("arrival_s,input_len,output_len\n5.0,100,10\n3.0,200,20\n")
    wl = Workload.from_trace(csv_path)
    assert wl.trace_times.tolist() == [0.0, 2.0]
    assert wl.input_lengths.tolist() == [200, 100]
    jl = tmp_path / "t.jsonl"
    jl.write_text("\n".join(json.dumps({"timestamp": t, "prompt_len": 64, "output_tokens": 8}) for t in (0.5, 1.5)))
    wl2 = Workload.from_trace(jl)
    assert wl2.num_requests == 2 and wl2.arrival == "trace"
    np.testing.assert_array_equal(arrival_times(wl2, None, seed=0), [0.0, 1.0])


@pytest.mark.parametrize("kwargs, field", [
    (dict(input_lengths=0, output_lengths=5, num_requests=3), "input_lengths"),
    (dict(input_lengths=10, output_lengths=5, num_requests=0), "num_requests"),
    (dict(input_lengths=10, output_lengths=5, num_requests=3, arrival="uniform"), "arrival"),
    (dict(input_lengths=10, output_lengths=5, num_requests=3, arrival="gamma", cv=0), "cv"),
    (dict(input_lengths=[10, 20], output_lengths=5, num_requests=3), "input_lengths"),
])
def test_bad_workloads_name_the_field(kwargs, field):
    with pytest.raises(SpecError, match=field):
        Workload(**kwargs)


def test_unreadable_trace_is_a_spec_error(tmp_path):
    with pytest.raises(SpecError, match="cannot be read"):
        Workload.from_trace(tmp_path / "missing.csv")
    bad = tmp_path / "bad.csv"
    bad.write_text("when,input_len,output_len\n1,2,3\n")
    with pytest.raises(SpecError, match="no arrival column"):
        Workload.from_trace(bad)
