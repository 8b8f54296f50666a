"""Run the fuzz strategies outside pytest and count outcomes by cause.

    PYTHONPATH=src python tests/fuzz/fuzz_report.py --examples 200 [--family cli] [--out FILE]

Prints, per family, the number of cases and of tracebacks, hangs, memory exhaustions and
accepted nonsense, each grouped by cause (exception and innermost serveplan frame, or the hostile
choice for accepted nonsense), with one example invocation per cause. The ``serveplan`` it runs is
the one first on ``PYTHONPATH``, so the same script measures any checkout.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fuzz_cases import FAMILIES, Case, profile_cmd_case  # noqa: E402
from fuzz_harness import run_forked  # noqa: E402
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402


def draw_cases(strategy: object, n: int) -> list[Case]:
    """``n`` cases of ``strategy``, the same ones on every run (derandomised generation)."""
    out: list[Case] = []

    @settings(max_examples=n, derandomize=True, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)  # type: ignore[arg-type]
    def collect(case: Case) -> None:
        out.append(case)

    collect()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=200, help="cases per family")
    ap.add_argument("--family", action="append", help="only these families (repeatable)")
    ap.add_argument("--out", help="also write the report (markdown) here")
    ns = ap.parse_args()
    import serveplan

    families = dict(FAMILIES, **{"profile-cmd": profile_cmd_case()})
    lines = [f"serveplan from {os.path.dirname(serveplan.__file__)}", ""]
    totals: collections.Counter[str] = collections.Counter()
    t0 = time.monotonic()
    for fam, strategy in families.items():
        if ns.family and fam not in ns.family:
            continue
        cases = draw_cases(strategy, ns.examples)
        groups: dict[str, dict[str, list[str]]] = collections.defaultdict(lambda: collections.defaultdict(list))
        counts: collections.Counter[str] = collections.Counter()
        for case in cases:
            with tempfile.TemporaryDirectory() as tmp:
                out = run_forked(case.materialise(tmp))
            verdict = out.verdict(case.nonsense)
            counts[verdict] += 1
            if verdict != "ok":
                cause = case.label if verdict == "accepted" else out.cause()
                groups[verdict][cause].append(out.describe().replace(tmp, "TMP"))
        totals.update(counts)
        totals["cases"] += len(cases)
        lines.append(f"## {fam}: {len(cases)} cases, " + ", ".join(
            f"{k} {counts[k]}" for k in ("ok", "traceback", "hang", "memory", "accepted")))
        for verdict in ("traceback", "hang", "memory", "accepted"):
            for cause, examples in sorted(groups[verdict].items(), key=lambda kv: -len(kv[1])):
                lines.append(f"- {verdict} x{len(examples)}: {cause}")
                lines.append(f"    e.g. {examples[0][:400]}")
        lines.append("")
        print(f"{fam}: " + ", ".join(f"{k} {counts[k]}" for k in sorted(counts)), file=sys.stderr, flush=True)
    lines.append(f"total: {totals['cases']} cases in {time.monotonic() - t0:.0f} s; " + ", ".join(
        f"{k} {totals[k]}" for k in ("ok", "traceback", "hang", "memory", "accepted")))
    text = "\n".join(lines)
    print(text)
    if ns.out:
        with open(ns.out, "w") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()
