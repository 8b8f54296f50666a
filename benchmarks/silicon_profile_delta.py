"""Serving-level effect of the measured profiles: two validate_silicon.py runs side by side.

    python benchmarks/validate_silicon.py --profile default-gpu --no-docs \\
        --out benchmarks/results/silicon_validation_default_gpu.json
    python benchmarks/validate_silicon.py --no-docs \\
        --out benchmarks/results/silicon_validation_measured.json
    python benchmarks/silicon_profile_delta.py benchmarks/results/silicon_validation_default_gpu.json \\
        benchmarks/results/silicon_validation_measured.json

Prints a markdown table: median |error| and share within 25% of TTFT and TPOT, before (assumed
``default-gpu`` factors) and after (each GPU's measured profile), overall and per system and
engine, over the rows both runs predicted. Nothing is fitted to these rows.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np


def stats(errs: list[float]) -> tuple[float, float]:
    a = np.abs(np.asarray(errs))
    return float(np.median(a)), float(np.mean(a <= 0.25))


def main(before_path: str, after_path: str) -> None:
    before = {r["row_id"]: r for r in json.loads(Path(before_path).read_text())["rows"]}
    after = {r["row_id"]: r for r in json.loads(Path(after_path).read_text())["rows"]}
    common = sorted(set(before) & set(after))
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    for rid in common:
        r = after[rid]
        groups[("all", "")].append(rid)
        groups[(r["system"], "")].append(rid)
        groups[(r["system"], r["engine"])].append(rid)
    print("| rows | system | engine | TTFT med. abs err before -> after | TTFT within 25% | "
          "TPOT med. abs err before -> after | TPOT within 25% |")
    print("|---|---|---|---|---|---|---|")
    for (system, engine), ids in sorted(groups.items(), key=lambda kv: (kv[0][0] != "all", kv[0])):
        tb, wtb = stats([before[i]["ttft_err"] for i in ids])
        ta, wta = stats([after[i]["ttft_err"] for i in ids])
        pb, wpb = stats([before[i]["tpot_err"] for i in ids])
        pa, wpa = stats([after[i]["tpot_err"] for i in ids])
        print(f"| {len(ids)} | {system} | {engine or 'all'} | {tb:.1%} -> {ta:.1%} | {wtb:.0%} -> {wta:.0%} | "
              f"{pb:.1%} -> {pa:.1%} | {wpb:.0%} -> {wpa:.0%} |")


if __name__ == "__main__":
    main(*sys.argv[1:3])
