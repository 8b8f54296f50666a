"""The goodput check's MLPerf workloads (benchmarks/validate_goodput.py): lengths drawn per request
from the official sets' per-sample lengths, outputs at the benchmark's reference tokens per sample."""

from __future__ import annotations

import numpy as np
from bench_modules import load


def _cases(lengths: str):
    vg = load("validate_goodput")
    old = vg.LENGTHS[0]
    vg.LENGTHS[0] = lengths
    try:
        return vg, vg.state_rows()[0]
    finally:
        vg.LENGTHS[0] = old


def test_mlperf_rows_draw_their_sets_lengths_with_the_reference_output_mean() -> None:
    vg, cases = _cases("dataset")
    by_table = {c.length_table for c in cases if c.source.startswith("mlperf")}
    assert by_table == {"mlperf-openorca", "mlperf-mixtral"}
    assert all(c.length_table is None for c in cases if not c.source.startswith("mlperf"))
    for table, ref in (("mlperf-openorca", 294), ("mlperf-mixtral", 145)):
        case = next(c for c in cases if c.length_table == table)
        assert case.output_len == ref   # round(294.45), round(144.84): datasets-mlperf.yaml
        wl = vg.workload(case, 2000, 0)
        assert abs(float(np.mean(wl.output_lengths)) - ref) < 0.5
        # the prompts are the set's own: its mean (222.3 / 427.4) within sampling error, its spread kept
        assert abs(float(np.mean(wl.input_lengths)) - case.input_len) < 0.06 * case.input_len
        assert wl.input_lengths.max() > 3 * case.input_len
        assert vg.workload(case, 2000, 0) == wl   # same seed, same draw
    # a drawn and a fixed-length reading of one row are different questions (simulated apart)
    mixtral = next(c for c in cases if c.length_table == "mlperf-mixtral")
    fixed = next(c for c in _cases("mean")[1] if c.key == mixtral.key)
    assert vg._question(mixtral) != vg._question(fixed)


def test_mean_reading_keeps_fixed_lengths() -> None:
    vg, cases = _cases("mean")
    assert all(c.length_table is None for c in cases)
    assert vg.workload(cases[0], 100, 0) is None
