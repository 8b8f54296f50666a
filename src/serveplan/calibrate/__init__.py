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

import typing

from serveplan.lazy import lazy_exports as _lazy_exports

if typing.TYPE_CHECKING:
    from serveplan.calibrate.bands import Band, band, sample_profiles
    from serveplan.calibrate.fit import Calibration, calibrate
    from serveplan.calibrate.measurements import Measurement, MeasurementSet, read_measurements

__all__ = ["Band", "Calibration", "Measurement", "MeasurementSet", "band", "calibrate", "read_measurements",
           "sample_profiles"]

# each name is imported when first used: the fitting names load scipy, so importing the package (the
# bands every command offers) stays light
__getattr__, __dir__ = _lazy_exports(__name__, {
    "serveplan.calibrate.bands": ("Band", "band", "sample_profiles"),
    "serveplan.calibrate.fit": ("Calibration", "calibrate"),
    "serveplan.calibrate.measurements": ("Measurement", "MeasurementSet", "read_measurements"),
})
