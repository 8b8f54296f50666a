"""Speculative decoding in the simulator, the optimizer's K search and the CLI."""

from __future__ import annotations

import json
import math
from collections import deque
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from spec_off_cases import CASES, run_case
from typer.testing import CliRunner

from serveplan import get_hardware, get_model, get_profile
from serveplan.cli import app
from serveplan.optimize.space import SearchSpace, enumerate_space, spec_choices
from serveplan.sim import Fleet, Workload, simulate
from serveplan.sim.config import SimulationConfig, simulation_config
from serveplan.sim.request import RequestState
from serveplan.sim.schedulers import get_scheduler
from serveplan.specs.speculative import SpecDecodeConfig

GOLDEN = json.loads((Path(__file__).parents[1] / "golden" / "spec_off.json").read_text())
M, HW, PR = get_model("llama-3.1-8b"), get_hardware("h100-sxm"), get_profile()


def _same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], list):
            x, y = np.asarray(a[k], dtype=float), np.asarray(b[k], dtype=float)
            assert np.array_equal(np.isnan(x), np.isnan(y)), k
            ok = ~np.isnan(x)
            assert np.allclose(x[ok], y[ok], rtol=1e-12, atol=0), k
        elif isinstance(a[k], float):
            assert math.isclose(a[k], b[k], rel_tol=1e-12), k
        else:
            assert a[k] == b[k], k


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("spec", [None, SpecDecodeConfig(method="eagle", num_tokens=0),
                                  SpecDecodeConfig(method="none")], ids=["off", "k0", "none"])
def test_speculation_off_or_k0_gives_every_result_of_before(case, spec):
    # golden recorded from commit 6c2f17b (before speculative decoding), see spec_off_cases.py
    extra = {} if spec is None else {"spec": spec}
    _same(run_case(case, **extra), GOLDEN[case[0]])


@pytest.mark.parametrize("case", CASES[:3], ids=[c[0] for c in CASES[:3]])
def test_k0_and_none_equal_no_setting_on_this_tree(case):
    # the same invariant without the recorded golden (it holds whatever other changes the tree has)
    plain = run_case(case)
    _same(run_case(case, spec=SpecDecodeConfig(method="mtp", num_tokens=0)), plain)
    _same(run_case(case, spec=SpecDecodeConfig(method="none")), plain)


def _lone(spec, out=200):
    cfg = simulation_config(engine="vllm", fleet_options={"tp": 1}, model=M, hardware=HW, profile=PR,
                            workload=Workload.fixed(1000, out, 3), rate=None, concurrency=1, spec=spec)
    return simulate(cfg)


def test_tpot_is_step_time_over_expected_tokens():
    # a request alone: every decode step verifies K + 1 = 4 tokens; with acceptance 1 each step
    # yields 4 tokens, so TPOT = mean verify-step time / 4
    spec = SpecDecodeConfig(method="ngram", num_tokens=3, acceptance=1.0)
    res = _lone(spec)
    from serveplan.estimator.speculative import SpecEstimator
    from serveplan.specs.catalog import get_engine
    from serveplan.specs.parallel import ParallelConfig
    pr = get_engine("vllm").profile_for(PR)   # the engine's own profile: its kernels and operator list
    est = SpecEstimator(M, HW, pr, ParallelConfig(tp=1), spec=spec, memory_utilization=0.92)
    from serveplan.estimator.batch import StepBatch
    steps = [est.time(StepBatch.decode(1, 1001 + i)) for i in range(199)]  # context 1000 + generated
    assert math.isclose(res.tpot_s.mean, float(np.mean(steps)), rel_tol=1e-9)


@settings(max_examples=6, deadline=None)
@given(st.floats(0.0, 0.95), st.floats(0.0, 0.05))
def test_tpot_falls_as_acceptance_rises(a, da):
    lo = _lone(SpecDecodeConfig(method="eagle", num_tokens=3, acceptance=a)).tpot_s.mean
    hi = _lone(SpecDecodeConfig(method="eagle", num_tokens=3, acceptance=a + da)).tpot_s.mean
    assert hi <= lo * (1 + 1e-12)


def test_speculation_with_high_acceptance_beats_plain_decoding_alone():
    plain = _lone(None).tpot_s.mean
    assert _lone(SpecDecodeConfig(method="eagle", num_tokens=3, acceptance=0.8)).tpot_s.mean < plain
    assert _lone(SpecDecodeConfig(method="eagle", num_tokens=3, acceptance=0.0)).tpot_s.mean > plain


class View:
    def __init__(self, R, running, budget, k):
        self.now = 0.0
        self.req = R
        self.waiting = deque(range(len(running), R.n))
        self.running = list(running)
        self.free_blocks = 10_000
        self.block_size = 16
        self.max_batch = self.max_running = self.max_prompts = 64
        self.token_budget = budget
        self.chunk_size = budget
        self.decode_tokens = k + 1


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 20), st.integers(1, 10), st.integers(0, 5), st.integers(64, 2048))
def test_budget_counts_k_plus_1_tokens_per_decode(n_run, n_wait, k, budget):
    # vLLM V1 Scheduler.schedule: a running request takes num_tokens_with_spec - num_computed_tokens
    # = 1 + K tokens of max_num_batched_tokens
    n = n_run + n_wait
    R = RequestState(np.zeros(n), np.full(n, 3000), np.full(n, 100))
    for q in range(n_run):
        R.prefilled[q] = R.kv_len[q] = 3000
        R.gen[q] = 1
        R.blocks[q] = 188
    plan = get_scheduler("chunked-prefill")().plan_batch(View(R, range(n_run), budget, k))
    if plan is not None:
        used = (k + 1) * len(plan.decode) + sum(c for _, c in plan.prefill)
        # a decode batch alone may exceed the budget (decodes are never cut); prompts fill what is left
        assert not plan.prefill or used <= budget
        if n_run and (k + 1) * n_run < budget:
            assert plan.prefill and used == budget  # the chunk takes exactly what the decodes left


def test_budget_tokens_per_decode_reach_the_instance():
    spec = SpecDecodeConfig(method="eagle", num_tokens=2)
    cfg = SimulationConfig(model=M, hardware=HW, profile=PR, fleet=Fleet.build("1m", tp=1, scheduler="sarathi",
                                                                               spec=spec),
                           rate=5.0, workload=Workload.fixed(512, 32, 20))
    assert cfg.fleet.name.endswith("-eagle2") and cfg.fleet.to_dict()["spec_tokens"] == 2
    assert Fleet.from_dict(cfg.fleet.to_dict()) == cfg.fleet
    assert simulate(cfg).num_completed == 20


def test_optimizer_searches_k():
    space = SearchSpace(devices=1, tp_sizes=(1,), max_batches=(64,), disaggregated=False,
                        specs=spec_choices("eagle", [0, 1, 2, 3]))
    listing = enumerate_space(space, _settings(), request_tokens=2048)
    ks = sorted(c.spec.k if c.spec is not None else 0 for c in listing.candidates)
    assert ks == [0, 1, 2, 3]


def test_optimizer_gives_pipelined_layouts_plain_decoding_only():
    space = SearchSpace(devices=2, tp_sizes=(1,), pp_sizes=(2,), max_batches=(64,), disaggregated=False,
                        specs=spec_choices("mtp", [1]))
    listing = enumerate_space(space, _settings(), request_tokens=2048)
    assert listing.candidates and all(c.spec is None for c in listing.candidates)


BASE_ARGS = ["simulate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--input-len", "256", "--output-len", "32",
             "-n", "20", "--concurrency", "2"]


@pytest.mark.parametrize("args, words", [
    (["--spec-method", "eagle", "--spec-acceptance", "1.5"], "spec_acceptance=1.5"),
    (["--spec-method", "eagle", "--spec-acceptance", "0.9,-1"], "spec_acceptance=-1"),
    (["--spec-method", "eagle", "--spec-tokens", "-2"], "spec_tokens=-2"),
    (["--spec-method", "draft", "--spec-draft-model", "llama-3.1-70b"], "not smaller than the target"),
    (["--spec-method", "draft", "--spec-draft-model", "qwen3-8b"], "vocabulary"),
    (["--spec-method", "medusa"], "spec_method='medusa'"),
    (["--spec-tokens", "2"], "need spec_method"),
    (["--spec-method", "mtp"], "has no multi-token-prediction module"),
])
def test_cli_bad_speculation_is_one_line_exit_2(args, words):
    r = CliRunner().invoke(app, BASE_ARGS + args)
    assert r.exit_code == 2, r.output
    assert words in r.output and len(r.output.strip().splitlines()) == 1


def test_cli_optimize_bad_k_list_exit_2():
    r = CliRunner().invoke(app, ["optimize", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--spec-method", "eagle",
                                 "--spec-tokens", "0,-1"])
    assert r.exit_code == 2 and "spec-tokens" in r.output


def test_cli_json_shows_speculation():
    r = CliRunner().invoke(app, BASE_ARGS + ["--spec-method", "eagle", "--spec-tokens", "2", "--spec-acceptance",
                                             "0.5", "--json"])
    assert r.exit_code == 0, r.output
    cfg = json.loads(r.output)["config"]
    assert cfg["spec_method"] == "eagle" and cfg["spec_tokens"] == 2 and cfg["spec_expected_tokens"] == 1.75


def test_plan_serving_ranks_draft_lengths():
    from serveplan import SLO, plan_serving

    space = SearchSpace(devices=1, tp_sizes=(1,), max_batches=(32,), prefill_max_batch=None, disaggregated=False,
                        schedulers=("sarathi",), chunk_sizes=(1024,), specs=spec_choices("eagle", [0, 2]))
    res = plan_serving(M, HW, profile=PR, space=space, workload=Workload.fixed(256, 128, 200),
                       slo=SLO(ttft_s=1.0, tpot_s=0.012, percentile=90), engine="bestserve", method="exhaustive")
    names = sorted(r.name for r in res.strategies)
    assert len(names) == 2 and any(n.endswith("-eagle2") for n in names)


@settings(max_examples=8, deadline=None)
@given(st.sampled_from(["vllm", "sglang", "trtllm"]), st.integers(1, 5), st.floats(0.0, 1.0),
       st.integers(0, 10_000))
def test_every_request_finishes_once_under_speculation(engine, k, a, seed):
    # mixed steps advance their decodes E tokens on average, capped by what is left and the free
    # KV blocks (the KV owner asserts it is never overcommitted); tight memory forces preemptions
    from serveplan.sim.workload import LengthDist

    wl = Workload.from_distributions(LengthDist.parse("uniform:16,3000"), LengthDist.parse("uniform:1,300"), 150,
                                     seed=seed)
    cfg = simulation_config(engine=engine, fleet_options={"tp": 1, "max_batch": 64}, model=M, hardware=HW,
                            profile=PR, workload=wl, rate=40.0, seed=seed,
                            spec=SpecDecodeConfig(method="ngram", num_tokens=k, acceptance=a))
    res = simulate(cfg)
    rec = res.requests
    assert res.num_completed == 150
    assert np.all(rec.finish >= rec.first_token) and np.all(np.isfinite(rec.tpot[rec.output_len > 1]))


def test_mixed_steps_advance_decodes_by_the_expected_tokens():
    # vLLM chunked prefill: steady arrivals keep prompt chunks beside the decodes; with every draft
    # accepted (E = K + 1 = 3) speculation must cut the mean TPOT by well over half
    wl = Workload.fixed(2000, 200, 300)
    plain = simulate(simulation_config(engine="vllm", fleet_options={"tp": 1}, model=M, hardware=HW, profile=PR,
                                       workload=wl, rate=8.0))
    spec = simulate(simulation_config(engine="vllm", fleet_options={"tp": 1}, model=M, hardware=HW, profile=PR,
                                      workload=wl, rate=8.0,
                                      spec=SpecDecodeConfig(method="ngram", num_tokens=2, acceptance=1.0)))
    assert spec.tpot_s.mean < 0.5 * plain.tpot_s.mean


def _settings():
    """Search settings of the layout screens (no engine: the fleets' own settings)."""
    from serveplan.optimize.goodput import GoodputSettings
    from serveplan.sim import SLO

    return GoodputSettings(model=M, hardware=HW, profile=PR, workload=Workload.fixed(1024, 1024, 10), slo=SLO(),
                           engine=None)
