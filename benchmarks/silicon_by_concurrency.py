"""Signed TTFT error of a validate_silicon.py run by collection, engine and concurrency.

    SERVEPLAN_BENCH_CACHE=<cache> python benchmarks/validate_silicon.py --no-docs --out /tmp/all.json
    SERVEPLAN_BENCH_CACHE=<cache> python benchmarks/silicon_by_concurrency.py /tmp/all.json

The CSV holds three collections, told apart by ``silicon_data_source``: NVIDIA's gap-analysis runs
(a local file path containing ``aic-auto-gap-analysis``), a database dump (``db-dump/...``) and its
file export (``source_file=20...``). Prints the median signed TTFT error (and the rows) per
collection, engine and concurrency bucket, and the median ratio of measured to predicted TTFT at the
lowest concurrency by predicted size (docs/validation/low-concurrency.md). Nothing is
simulated or fitted here.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from silicon_data import load_rows  # noqa: E402

#: Upper bounds of the concurrency buckets (the last is open).
BUCKETS = (4, 16, 64)
#: Predicted-TTFT bands (ms) for the measured / predicted ratio at the lowest concurrency.
BANDS = (0, 30, 60, 100, 200, 400, float("inf"))


def collection(source: str) -> str:
    """``gap analysis``, ``database dump`` or ``file export`` from ``silicon_data_source``."""
    if "aic-auto-gap" in source:
        return "gap analysis"
    if source.startswith("db-dump"):
        return "database dump"
    return "file export"


def bucket(concurrency: int) -> str:
    lo = 1
    for hi in BUCKETS:
        if concurrency <= hi:
            return f"{lo}-{hi}"
        lo = hi + 1
    return f"> {BUCKETS[-1]}"


def by_concurrency(rows: list[dict[str, Any]], sources: dict[str, str]) -> dict[tuple[str, str, str], list[float]]:
    """Signed TTFT errors grouped by (collection, engine, concurrency bucket)."""
    out: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for r in rows:
        out[(collection(sources.get(r["row_id"], "")), r["engine"], bucket(r["concurrency"]))].append(r["ttft_err"])
    return out


def low_concurrency_ratios(rows: list[dict[str, Any]], concurrency: int = BUCKETS[0]) -> list[tuple[str, int, float]]:
    """Median measured / predicted TTFT of the rows at ``concurrency`` by predicted TTFT band."""
    sel = [r for r in rows if r["concurrency"] == concurrency]
    pred = np.array([r["ttft_pred_s"] for r in sel]) * 1e3
    ratio = np.array([r["ttft_meas_s"] / r["ttft_pred_s"] for r in sel])
    out = []
    for lo, hi in zip(BANDS[:-1], BANDS[1:], strict=True):
        m = (pred >= lo) & (pred < hi)
        if m.any():
            out.append((f"{lo:g}-{hi:g} ms", int(m.sum()), float(np.median(ratio[m]))))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results", help="the --out JSON of benchmarks/validate_silicon.py")
    args = ap.parse_args(argv)
    rows = json.loads(Path(args.results).read_text())["rows"]
    sources = {row.get("id", ""): row.get("silicon_data_source", "") for row in load_rows()}
    groups = by_concurrency(rows, sources)
    names = [f"1-{BUCKETS[0]}"] + [f"{a + 1}-{b}" for a, b in zip(BUCKETS[:-1], BUCKETS[1:], strict=True)]
    names.append(f"> {BUCKETS[-1]}")
    print("| collection | engine | " + " | ".join(f"C {n}" for n in names) + " |")
    print("|---|---|" + "---|" * len(names))
    for coll, eng in sorted({(c, e) for c, e, _ in groups}):
        cells = []
        for n in names:
            v = groups.get((coll, eng, n))
            cells.append(f"{np.median(v):+.0%} ({len(v)})" if v else "-")
        print(f"| {coll} | {eng} | " + " | ".join(cells) + " |")
    print()
    print(f"Measured / predicted TTFT at {BUCKETS[0]} clients by predicted TTFT:")
    for band, n, ratio in low_concurrency_ratios(rows):
        print(f"  {band}: {n} rows, median ratio {ratio:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
