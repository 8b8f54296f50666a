"""Predictions checked against measurements, and how far to trust them.

* :mod:`~serveplan.validate.rows` - the bundled published measurements (``validate/data``);
* :mod:`~serveplan.validate.mapping` - a measured row asked of the tool out of the box;
* :mod:`~serveplan.validate.suite` - the whole validation (``serveplan validate``), with the
  leave-one-source-out calibration of the bands; :mod:`~serveplan.validate.summary` writes
  ``docs/validation.md`` from it;
* :mod:`~serveplan.validate.confidence` - the P10-P90 band of comparable validated rows, and
  :mod:`~serveplan.validate.answers` - that band for each figure ``simulate``, ``optimize`` and
  ``estimate`` print;
* :mod:`~serveplan.validate.compare` - a vLLM serving-benchmark result against the simulator
  (``serveplan compare``);
* :mod:`~serveplan.validate.bands` - P10/P50/P90 bands of simulations and of goodput from a
  calibrated profile's uncertainty (``--band`` of ``simulate`` and ``optimize``).

It sits above the simulator and the optimizer (and below the reports and the commands, which read
its bands), while :mod:`serveplan.calibrate` (profiling, fitting, sampling profiles) sits below
them, next to the estimator.
"""

import typing

from serveplan.lazy import lazy_exports as _lazy_exports

if typing.TYPE_CHECKING:
    from serveplan.validate.bands import GoodputBand, goodput_bands, simulation_band
    from serveplan.validate.compare import Comparison, ServingRun, compare, read_vllm_result
    from serveplan.validate.confidence import Band, band_for, bundled_residuals
    from serveplan.validate.suite import ValidationReport, run_validation

__getattr__, __dir__ = _lazy_exports(__name__, {
    "serveplan.validate.bands": ("GoodputBand", "goodput_bands", "simulation_band"),
    "serveplan.validate.compare": ("Comparison", "ServingRun", "compare", "read_vllm_result"),
    "serveplan.validate.confidence": ("Band", "band_for", "bundled_residuals"),
    "serveplan.validate.suite": ("ValidationReport", "run_validation"),
})

__all__ = ["Band", "Comparison", "GoodputBand", "ServingRun", "ValidationReport", "band_for", "bundled_residuals",
           "compare", "goodput_bands", "read_vllm_result", "run_validation", "simulation_band"]
