"""Predictions checked against measurements and their uncertainty, through the simulator.

* :mod:`~serveplan.validate.compare` - a vLLM serving-benchmark result against the simulator
  (``serveplan compare``);
* :mod:`~serveplan.validate.bands` - P10/P50/P90 bands of simulations and of goodput from a
  calibrated profile's uncertainty (``--band`` of ``simulate`` and ``optimize``).

It sits above the simulator and the optimizer, while :mod:`serveplan.calibrate` (profiling,
fitting, sampling profiles) sits below them, next to the estimator.
"""

from serveplan.validate.bands import GoodputBand, goodput_bands, simulation_band
from serveplan.validate.compare import Comparison, ServingRun, compare, read_vllm_result

__all__ = ["Comparison", "GoodputBand", "ServingRun", "compare", "goodput_bands", "read_vllm_result",
           "simulation_band"]
