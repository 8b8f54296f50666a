"""Shared fixtures."""

from __future__ import annotations

import pytest

from serveplan import ParallelConfig, get_hardware, get_model, get_profile
from serveplan.estimator.step import Estimator


@pytest.fixture(scope="session")
def table3_estimator() -> Estimator:
    """BestServe Table 3 testbed: CodeLlama-34B, Ascend 910B3, bestserve-910b3, TP 4."""
    return Estimator(get_model("codellama-34b"), get_hardware("ascend-910b3"),
                     get_profile("bestserve-910b3"), ParallelConfig(tp=4))
