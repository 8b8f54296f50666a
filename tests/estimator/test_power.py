"""The power model: a step's activity from its breakdown, and a device's average power."""

from __future__ import annotations

import pytest

from serveplan import Estimator, ParallelConfig, StepBatch, get_hardware, get_model, get_profile
from serveplan.estimator.power import (
    COMM_ACTIVITY,
    MEMORY_ACTIVITY,
    StepActivity,
    average_power_w,
    host_power_w,
    idle_power_w,
    step_activity,
)


def test_activity_weighs_compute_memory_and_collective_time():
    # 0.5 s compute-bound + 0.4 s memory-bound + 0.1 s collectives in a 1 s step:
    # 0.5 + 0.355 x 0.4 + 0.25 x 0.1 = 0.5 + 0.142 + 0.025 = 0.667
    a = StepActivity(step_s=1.0, compute_s=0.5, memory_s=0.4, comm_s=0.1)
    assert a.activity == pytest.approx(0.667)
    assert MEMORY_ACTIVITY == 0.355 and COMM_ACTIVITY == 0.25
    assert StepActivity(step_s=1.0, compute_s=2.0, memory_s=0.0, comm_s=0.0).activity == 1.0


def test_average_power_of_a_hand_checkable_device():
    h200 = get_hardware("h200")          # 700 W board, 80 W idle, 350 W host share
    # busy half the time at activity 0.5: 80 + (700 - 80) x 0.5 x 0.5 = 235 W
    assert average_power_w(h200, 0.5, 0.5) == pytest.approx(235.0)
    assert average_power_w(h200, 0.0, 1.0) == 80.0 and average_power_w(h200, 1.0, 1.0) == 700.0
    assert idle_power_w(get_hardware("a100-80g")) == pytest.approx(40.0)     # assumed 10% of 400 W
    assert host_power_w(get_hardware("a100-80g")) == pytest.approx(200.0)    # assumed 50% of 400 W


def test_decode_at_batch_1_draws_less_than_a_long_prefill():
    est = Estimator(get_model("llama-3.1-8b"), get_hardware("h100-sxm"), get_profile("default-gpu"),
                    ParallelConfig(tp=1))
    decode = step_activity(est.estimate(StepBatch.decode(batch=1, context_len=1024)))
    prefill = step_activity(est.estimate(StepBatch.prefill(batch=4, input_len=2048)))
    assert decode.memory_s > decode.compute_s            # memory-bound
    assert decode.activity <= MEMORY_ACTIVITY + 1e-9 < prefill.activity
    assert prefill.compute_s + prefill.memory_s + prefill.comm_s <= prefill.step_s * (1 + 1e-9)
