"""How measured TTFT grows with the output length at a fixed concurrency, from the measurements alone.

    SERVEPLAN_BENCH_CACHE=<cache> python benchmarks/silicon_osl_slope.py [--models m1,m2]

For every set of aggregated rows of aiconfigurator's ``silicon_sample.csv`` that differ only in the
output length (same engine and version, system, model, formats, layout, prompt length and
concurrency ``C``; at least three output lengths), the slope ``dTTFT / d(osl)`` of a least-squares
line, divided by ``TPOT / C`` (TPOT the set's mean). Prints the median ratio per engine, version,
system, model and ``C``.

Why this ratio: in a closed loop of ``C`` clients a request lasts about ``osl x TPOT``, so one
completes every ``osl x TPOT / C`` on average. A server that admits every new request at once has a
TTFT that does not depend on ``osl`` (ratio about 0). A server whose ``C`` clients see only
``C - 1`` free batch slots makes every new request wait for the next completion: its TTFT grows by
about ``TPOT / C`` per output token (ratio about 1). No simulator is involved; nothing here is
fitted (docs/validation/checks.md, check 1).
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from silicon_data import SiliconCase, load_rows, map_rows  # noqa: E402

#: Fewest output lengths a set needs for a slope.
MIN_LENGTHS = 3


def slope_ratio(osl: Iterable[float], ttft_s: Iterable[float], tpot_s: Iterable[float], concurrency: int) -> float:
    """``dTTFT/d(osl)`` of the least-squares line over ``TPOT / C`` (TPOT: the mean of ``tpot_s``)."""
    x, y, t = (np.asarray(list(v), dtype=float) for v in (osl, ttft_s, tpot_s))
    if len(set(x.tolist())) < 2:
        raise ValueError("slope_ratio: needs at least two distinct output lengths")
    slope = float(np.polyfit(x, y, 1)[0])
    return slope / (float(t.mean()) / concurrency)


def output_length_sets(cases: Iterable[SiliconCase]) -> dict[tuple[object, ...], list[SiliconCase]]:
    """Aggregated cases grouped by everything but the output length (sets of at least
    :data:`MIN_LENGTHS` lengths)."""
    groups: dict[tuple[object, ...], list[SiliconCase]] = defaultdict(list)
    for c in cases:
        if c.mode != "agg":
            continue
        p = c.parallel
        groups[(c.engine, c.engine_version, c.hardware, c.model, c.dtype.value, c.kv_dtype.value,
                p.tp, p.pp, p.dp, p.ep, c.isl, c.concurrency)].append(c)
    return {k: v for k, v in groups.items() if len({c.osl for c in v}) >= MIN_LENGTHS}


def set_ratios(cases: Iterable[SiliconCase]) -> list[tuple[list[SiliconCase], float]]:
    """Each output-length set (:func:`output_length_sets`) with its :func:`slope_ratio`."""
    return [(rows, slope_ratio([c.osl for c in rows], [c.ttft_s for c in rows], [c.tpot_s for c in rows],
                               rows[0].concurrency))
            for rows in output_length_sets(cases).values()]


def summary(cases: Iterable[SiliconCase]) -> list[tuple[tuple[str, str, str, str, int], int, float]]:
    """``((engine, version, system, model, C), sets, median ratio)``, sorted."""
    per: dict[tuple[str, str, str, str, int], list[float]] = defaultdict(list)
    for rows, ratio in set_ratios(cases):
        c = rows[0]
        per[(c.engine, c.engine_version, c.hardware, c.model, c.concurrency)].append(ratio)
    return [(k, len(v), float(np.median(v))) for k, v in sorted(per.items())]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=None, help="comma-separated catalog ids (default: every statable row)")
    args = ap.parse_args(argv)
    cases, _ = map_rows(load_rows())
    if args.models:
        keep = set(args.models.split(","))
        cases = [c for c in cases if c.model in keep]
    print("| engine | version | system | model | C | sets | median dTTFT/d(osl) / (TPOT/C) |")
    print("|---|---|---|---|---|---|---|")
    for (engine, version, system, model, conc), n, ratio in summary(cases):
        print(f"| {engine} | {version or '-'} | {system} | {model} | {conc} | {n} | {ratio:+.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
