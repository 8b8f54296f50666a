"""How far any TTFT correction by engine could take a validate_silicon.py run: a bound, not a model.

    SERVEPLAN_BENCH_CACHE=<cache> python benchmarks/validate_silicon.py --no-docs --out /tmp/all.json
    python benchmarks/silicon_correction_bound.py /tmp/all.json [--models a,b,...]

Applies to every row's predicted TTFT the correction ``a_e x TTFT + b_e`` of its engine ``e`` and
finds, on the reported rows themselves, the ``(a_e, b_e)`` of the three engines that minimise the
median |TTFT error| (a grid, ``a`` in 0.50-1.80 by 0.05 and ``b`` in 0-250 ms by 5 ms, searched one
engine at a time from four starts until no engine moves; deterministic). Also the best offsets
alone (``a_e = 1``) and, for comparison, the offsets chosen on H100 rows only and applied to every
row. The corrections are fitted to the rows they are scored on, so the figures are a lower bound of
what a per-engine correction of the prediction can reach, not a result (docs/validation/checks.md,
check 9). Nothing is simulated.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

ENGINES = ("vllm", "sglang", "trtllm")
FACTORS = np.round(np.arange(0.5, 1.8001, 0.05), 2)
OFFSETS_MS = np.arange(0.0, 250.001, 5.0)
STARTS = ((1.0, 0.0), (1.0, 50.0), (0.8, 100.0), (1.2, 20.0))


def median_error(pred: np.ndarray, meas: np.ndarray, eng: np.ndarray, a: np.ndarray, b_ms: np.ndarray) -> float:
    """Median |error| of the corrected TTFTs."""
    return float(np.median(np.abs((pred * a[eng] + b_ms[eng] / 1e3) / meas - 1.0)))


def best_correction(pred: np.ndarray, meas: np.ndarray, eng: np.ndarray, *,
                    factors: np.ndarray = FACTORS) -> tuple[float, np.ndarray, np.ndarray]:
    """Coordinate search over each engine's ``(a, b)`` grid; returns (median, a, b in ms)."""
    best: tuple[float, np.ndarray, np.ndarray] | None = None
    for a0, b0 in STARTS:
        a = np.full(len(ENGINES), a0 if len(factors) > 1 else float(factors[0]))
        b = np.full(len(ENGINES), b0)
        cur = median_error(pred, meas, eng, a, b)
        moved = True
        while moved:
            moved = False
            for e in range(len(ENGINES)):
                for aa in factors:
                    for bb in OFFSETS_MS:
                        a2, b2 = a.copy(), b.copy()
                        a2[e], b2[e] = aa, bb
                        v = median_error(pred, meas, eng, a2, b2)
                        if v < cur - 1e-12:
                            cur, a, b, moved = v, a2, b2, True
        if best is None or cur < best[0]:
            best = (cur, a, b)
    assert best is not None
    return best


def arrays(rows: list[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return (np.array([r["ttft_pred_s"] for r in rows]), np.array([r["ttft_meas_s"] for r in rows]),
            np.array([ENGINES.index(r["engine"]) for r in rows]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, help="JSON written by validate_silicon.py --out")
    ap.add_argument("--models", default="", help="Comma list of models (default: every row).")
    args = ap.parse_args()
    rows = json.loads(args.results.read_text())["rows"]
    if args.models:
        keep = set(args.models.split(","))
        rows = [r for r in rows if r["model"] in keep]
    pred, meas, eng = arrays(rows)
    none = median_error(pred, meas, eng, np.ones(3), np.zeros(3))
    print(f"{len(rows)} rows: TTFT median |error| {100 * none:.1f}% as predicted")
    v, a, b = best_correction(pred, meas, eng, factors=np.array([1.0]))
    print(f"best offsets fitted on these rows: {100 * v:.1f}% "
          + ", ".join(f"{e} +{bb:.0f} ms" for e, bb in zip(ENGINES, b, strict=True)))
    v, a, b = best_correction(pred, meas, eng)
    print(f"best factor and offset fitted on these rows: {100 * v:.1f}% "
          + ", ".join(f"{e} x{aa:.2f} +{bb:.0f} ms" for e, aa, bb in zip(ENGINES, a, b, strict=True)))
    h100 = [r for r in rows if r["system"] == "h100-sxm"]
    if h100:
        hp, hm, he = arrays(h100)
        _, _, bh = best_correction(hp, hm, he, factors=np.array([1.0]))
        held = [i for i, r in enumerate(rows) if r["system"] != "h100-sxm"]
        chosen = ", ".join(f"{e} +{bb:.0f} ms" for e, bb in zip(ENGINES, bh, strict=True))
        print(f"offsets chosen on H100 rows ({chosen}):"
              f" all rows {100 * median_error(pred, meas, eng, np.ones(3), bh):.1f}%, held-out rows"
              f" {100 * median_error(pred[held], meas[held], eng[held], np.ones(3), bh):.1f}%"
              f" (as predicted {100 * median_error(pred[held], meas[held], eng[held], np.ones(3), np.zeros(3)):.1f}%)")


if __name__ == "__main__":
    main()
