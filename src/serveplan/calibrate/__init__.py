"""Calibration: profile a device, fit an efficiency profile, predict with bands, check real runs.

* :mod:`~serveplan.calibrate.profile` - torch micro-benchmarks (``serveplan profile``; torch
  is imported lazily, extra ``serveplan[profile]``);
* :mod:`~serveplan.calibrate.measurements` - the measurement CSV format;
* :mod:`~serveplan.calibrate.fit` - bounded least squares, cross-validation, covariance
  (``serveplan calibrate``);
* :mod:`~serveplan.calibrate.bands` - P10/P50/P90 of any prediction from the uncertainty.

Calibration sits below the simulator (it needs the estimator only); checking predictions
against served runs and bands of simulations are in :mod:`serveplan.validate`.
"""

from typing import Any

from serveplan.calibrate.bands import Band, band, sample_profiles
from serveplan.calibrate.measurements import Measurement, MeasurementSet, read_measurements

__all__ = ["Band", "Calibration", "Measurement", "MeasurementSet", "band", "calibrate", "read_measurements",
           "sample_profiles"]


def __getattr__(name: str) -> Any:
    """The fitting names load scipy: imported when first used, so importing the package (the bands
    every command offers) stays light."""
    if name in ("Calibration", "calibrate"):
        from serveplan.calibrate import fit

        return getattr(fit, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
