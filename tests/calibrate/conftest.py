"""Fixtures of the calibration tests."""

from __future__ import annotations

import pytest
from calibrate_synthetic import synthetic

from serveplan.calibrate.measurements import MeasurementSet


@pytest.fixture(scope="session")
def synthetic_set() -> MeasurementSet:
    """Estimator-generated measurements with known factors and 5% noise (seed 0)."""
    return synthetic()
