"""Overlap scheduling (vLLM's asynchronous scheduling, SGLang's and TensorRT-LLM's overlap
schedulers): the host plans step ``k + 1`` while step ``k`` runs, so a request that reaches a busy
engine during step ``k`` is first scheduled into step ``k + 2``; an idle engine takes it at once.

Golden values are derived from the estimator next to each test (one decode step of the request
in flight), never fitted. The stretches with overlap are pinned to the step-by-step path in
test_fast_paths.py (test_held_prompts_match_step_by_step)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from serveplan import get_hardware, get_model, get_profile
from serveplan.errors import SpecError
from serveplan.estimator.static import decode_times
from serveplan.sim import SimulationConfig, Workload, simulate
from serveplan.sim.serving import engine_estimator
from serveplan.sim.workload import LengthDist
from serveplan.specs.catalog import get_engine


@pytest.fixture(scope="module")
def h100():
    return get_model("llama-3.1-8b"), get_hardware("h100-sxm"), get_profile(None, "h100-sxm")


def _two(h100, overlap: bool, t1: float, engine: str = "vllm", pp: int = 1):
    m, h, p = h100
    spec = dataclasses.replace(get_engine(engine), overlap_scheduling=overlap)
    wl = Workload(input_lengths=np.array([512, 512]), output_lengths=np.array([300, 32]), arrival="trace",
                  trace_times=np.array([0.0, t1]))
    return simulate(SimulationConfig(model=m, hardware=h, profile=p, engine=spec, dtype="fp8", tp=1, pp=pp,
                                     strategy="1m", workload=wl))


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_an_arrival_at_a_busy_engine_waits_one_more_step(h100, engine):
    # Request 0 reaches an idle engine (taken at once either way) and decodes alone; request 1
    # arrives during one of its decode steps, step k. Without overlap, step k + 1 prefills it;
    # with overlap, step k + 1 was planned when step k started, before it arrived, and is request
    # 0's decode alone: request 1 starts one decode step of request 0 later (context 513-812
    # tokens; the prompt's own step then differs only by that decode's one more key).
    m, h, p = h100
    par = _two(h100, True, 0.03, engine).config.fleet.first.parallel
    est, _, _ = engine_estimator(get_engine(engine), m, h, p, par, dtype="fp8")
    shortest = float(decode_times(est, 1, 513, 1)[0])
    longest = float(decode_times(est, 1, 512 + 300, 1)[0])
    for t1 in np.linspace(0.030, 0.060, 7):
        off, on = _two(h100, False, t1, engine), _two(h100, True, t1, engine)
        assert on.requests.ttft[0] == off.requests.ttft[0]
        extra = on.requests.ttft[1] - off.requests.ttft[1]
        assert 0.99 * shortest <= extra <= 1.01 * longest
    assert any("overlap scheduling" in n for n in on.config.engine_setup.notes)


def test_an_idle_engine_takes_each_request_at_once(h100):
    # one client at a time: the engine is idle whenever a request arrives, so overlap changes nothing
    m, h, p = h100
    wl = Workload.from_distributions(LengthDist(kind="uniform", low=200, high=1200),
                                     LengthDist(kind="uniform", low=20, high=200), 24, seed=2)
    runs = [simulate(SimulationConfig(model=m, hardware=h, profile=p,
                                      engine=dataclasses.replace(get_engine("vllm"), overlap_scheduling=flag),
                                      dtype="fp8", tp=1, strategy="1m", concurrency=1, rate=None, workload=wl))
            for flag in (False, True)]
    np.testing.assert_array_equal(runs[0].requests.ttft, runs[1].requests.ttft)
    np.testing.assert_array_equal(runs[0].requests.finish, runs[1].requests.finish)


def test_pipeline_parallel_instances_plan_as_without_overlap(h100):
    # modelled for one stage only (vLLM turns asynchronous scheduling off under PP)
    off, on = _two(h100, False, 0.045, pp=2), _two(h100, True, 0.045, pp=2)
    np.testing.assert_array_equal(off.requests.ttft, on.requests.ttft)
    assert any("off with pipeline parallelism" in n for n in on.config.engine_setup.notes)


def test_engine_files_say_which_engines_overlap():
    # vLLM from v0.14 (vllm-0.33), SGLang and TensorRT-LLM by default; vLLM 0.11 and BestServe's testbed not
    assert get_engine("vllm-0.33").overlap_scheduling and get_engine("vllm").overlap_scheduling
    assert get_engine("sglang-0.5").overlap_scheduling and get_engine("sglang-0.5.23").overlap_scheduling
    assert get_engine("trtllm-1.2").overlap_scheduling
    assert not get_engine("vllm-0.11").overlap_scheduling and not get_engine("bestserve").overlap_scheduling
    assert get_engine("vllm-0.33").describe()["overlap_scheduling"] is True
    assert "overlap_scheduling" not in get_engine("vllm-0.11").describe()


def test_bad_overlap_scheduling_names_the_field():
    from importlib import resources

    import yaml

    from serveplan.specs.engine import engine_from_dict

    data = yaml.safe_load((resources.files("serveplan.specs.data.engines") / "vllm-0.33.yaml").read_text())
    data["overlap_scheduling"] = "yes"
    with pytest.raises(SpecError, match="overlap_scheduling='yes' must be true or false"):
        engine_from_dict(data, name="vllm-test")
