"""Per-size matmul curve: measured GEMM time over its roofline time, by rows."""

from __future__ import annotations

import numpy as np
import pytest

from serveplan import get_hardware
from serveplan.calibrate.fit import fit_size_curve, size_curve_cv
from serveplan.calibrate.measurements import Measurement, MeasurementSet, parse_measurements
from serveplan.errors import SpecError

HW = get_hardware("a100-80g")
SC, SM = HW.flops("fp16"), HW.memory_bandwidth
RATIO = {1: 1.2, 4: 3.0, 16: 2.0, 64: 1.5}   # made-up slowdowns, a cliff at 4 rows


def _set(noise: float = 0.0) -> MeasurementSet:
    rng = np.random.default_rng(0)
    rows = []
    for k, n in ((4096, 4096), (4096, 1024), (4096, 11008), (11008, 4096)):
        for m, r in RATIO.items():
            w, q = 2.0 * m * k * n, 2.0 * (k * n + m * (k + n))
            t = r * max(w / SC, q / SM) * (1 + noise * rng.standard_normal())
            rows.append(Measurement(kind="gemm", phase="decode", flops=w, bytes=q, time_s=t, rows=m))
            rows.append(Measurement(kind="gemm", phase="prefill", flops=w * 64, bytes=q, time_s=1.1 * w * 64 / SC,
                                    rows=m * 64))
    return MeasurementSet(tuple(rows), {"dtype": "fp16"})


def test_curve_recovers_the_slowdown_at_each_row_count():
    c = fit_size_curve(_set(), HW, dtype="fp16")
    assert c.ratio("decode", np.array([1.0, 4.0, 16.0, 64.0])) == pytest.approx(list(RATIO.values()))
    assert c.ratio("prefill", np.array([256.0])) == pytest.approx([1.1])


def test_held_out_error_is_the_noise_level():
    cv = size_curve_cv(_set(noise=0.03), HW, dtype="fp16")
    assert cv["median_abs"] < 0.06 and cv["n"] == 32


def test_rows_column_round_trips():
    ms = parse_measurements(_set().to_csv())
    assert {r.rows for r in ms.rows if r.phase == "decode"} == set(RATIO)


def test_no_row_counts_is_a_spec_error():
    ms = MeasurementSet((Measurement(kind="gemm", phase="decode", flops=1e9, bytes=1e6, time_s=1e-3),
                         Measurement(kind="gemm", phase="prefill", flops=1e9, bytes=1e6, time_s=1e-3)))
    with pytest.raises(SpecError, match="size curve"):
        fit_size_curve(ms, HW, dtype="fp16")
