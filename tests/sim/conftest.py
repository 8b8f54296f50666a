"""Fixtures of the simulator tests: the BestServe testbed and Sarathi's LLaMA-13B / A6000."""

from __future__ import annotations

import pytest

from serveplan import get_hardware, get_model, get_profile
from serveplan.sim import SimulationConfig, Workload


@pytest.fixture(scope="session")
def testbed():
    """CodeLlama-34B on Ascend 910B3 with BestServe's profile (Tables 3-5)."""
    return dict(model=get_model("codellama-34b"), hardware=get_hardware("ascend-910b3"),
                profile=get_profile("bestserve-910b3"))


@pytest.fixture(scope="session")
def sarathi_bed():
    """LLaMA-13B on one A6000 (Sarathi Table 2 and Table 3 deployment)."""
    return dict(model=get_model("llama-13b"), hardware=get_hardware("a6000"), profile=get_profile("default-gpu"))


@pytest.fixture()
def make_cfg(testbed):
    def make(**kw):
        base = dict(testbed, strategy="2m", tp=4, max_batch=16, rate=1.0,
                    workload=Workload.scenario("op3", num_requests=300))
        base.update(kw)
        return SimulationConfig(**base)

    return make
