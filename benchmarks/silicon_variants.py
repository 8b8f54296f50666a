"""Choose how the silicon rows are simulated, on one system's rows only (the others stay held out).

Four variants of ``validate_silicon.py``: the statistic (``steady``: the closed loop's steady
window; ``run``: the mean over a run of 10 C requests from a cold start, as aiconfigurator's
benchmark runners report it) times the engine configuration (the engines' defaults, or
aiconfigurator's generator settings, ``--as-deployed``). Each variant predicts the same
deterministic sample (every k-th covered row of ``--system``) and the median |error| per engine
is printed::

    python benchmarks/silicon_variants.py --system h100-sxm --sample 90

The choice recorded in docs/validation/harness.md ("Earlier choices, still in force") was made with this
command on H100 rows; H200 and B200 rows did not take part. ``--frontend-us`` compares values of
the engines' serial frontend work per request instead (the engines' defaults, ``run`` statistic;
``--statistics run,steady`` for both), the value in ``frontend.per_request_us`` of the engine
files::

    python benchmarks/silicon_variants.py --system h100-sxm --sample 90 --frontend-us 0,250,1000,4000

``--prefill-host-us`` compares values of the host work per module of an uncaptured prefill step
(``ATTENTION/MLP/MOE`` microseconds, each replacing the rows' engine files' ``prefill_host_us``; 0
keeps the profile's dispatch time), every row otherwise run as ``validate_silicon.py`` runs it
(vLLM as deployed); the vLLM value in its engine files was chosen with::

    python benchmarks/silicon_variants.py --system h100-sxm --engines vllm --sample 222 \
        --prefill-host-us 0/0/0,0/0/250,0/0/500,0/0/750,0/0/1000,478/91/0,478/91/250,478/91/500,478/91/750
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from silicon_data import SiliconCase  # noqa: E402
from validate_silicon import AS_DEPLOYED, covered_cases, predict  # noqa: E402

VARIANTS = (("defaults", "steady"), ("defaults", "run"), ("as-deployed", "steady"), ("as-deployed", "run"))


def host_variant(text: str) -> dict[str, float]:
    """``attention/mlp/moe`` microseconds (``--prefill-host-us`` item) -> ``prefill_host_us``."""
    parts = text.split("/")
    try:
        values = [float(v) for v in parts]
    except ValueError:
        values = []
    if len(values) != 3 or not all(v >= 0 for v in values):
        raise SystemExit(f"--prefill-host-us: {text!r} is not ATTENTION/MLP/MOE microseconds, each >= 0 "
                         "(e.g. 478/91/750)")
    return dict(zip(("attention", "mlp", "moe"), values, strict=True))


def _job(args: tuple[SiliconCase, str, str]) -> dict[str, Any]:
    case, config, statistic = args
    frontend_us = None
    if config.startswith("frontend="):  # the engines' defaults with this serial frontend time per request
        frontend_us = float(config.split("=", 1)[1])
    host = host_variant(config.split("=", 1)[1]) if config.startswith("host=") else None
    # host variants run every row as validate_silicon.py does by default (AS_DEPLOYED engines as deployed)
    deployed = config == "as-deployed" or (host is not None and case.engine in AS_DEPLOYED)
    try:
        p = predict(case, as_deployed=deployed, statistic=statistic, frontend_us=frontend_us,
                    prefill_host_us=host)
    except Exception as exc:  # a row the simulator rejects is left out of every variant's median
        return {"row_id": case.row_id, "config": config, "statistic": statistic, "error": str(exc)[:200]}
    return {"row_id": case.row_id, "engine": case.engine, "config": config, "statistic": statistic,
            "ttft_err": (p["ttft_s"] - case.ttft_s) / case.ttft_s,
            "tpot_err": (p["tpot_s"] - case.tpot_s) / case.tpot_s}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--system", default="h100-sxm")
    ap.add_argument("--sample", type=int, default=90, help="every k-th covered row of the system, this many")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--out", type=Path, default=None, help="write every prediction here (JSON)")
    ap.add_argument("--frontend-us", default=None,
                    help="comma-separated serial frontend times per request (us) to compare instead of the four "
                         "variants: each is the engines' defaults (run statistic) with that frontend time")
    ap.add_argument("--statistics", default="run", help="with --frontend-us: comma-separated statistics (run, steady)")
    ap.add_argument("--prefill-host-us", default=None,
                    help="comma-separated ATTENTION/MLP/MOE host times (us) of an uncaptured prefill step's modules "
                         "to compare instead of the four variants (each replaces the rows' engine files' "
                         "prefill_host_us; 0 = the profile's dispatch), e.g. 0/0/500,478/91/750")
    ap.add_argument("--engines", default=None, help="comma-separated engines: only their rows")
    args = ap.parse_args(argv)
    if args.prefill_host_us is not None:
        for v in args.prefill_host_us.split(","):
            host_variant(v)
        variants: tuple[tuple[str, str], ...] = tuple(
            (f"host={v}", stat) for v in args.prefill_host_us.split(",") for stat in args.statistics.split(","))
    elif args.frontend_us is not None:
        variants = tuple((f"frontend={float(v):g}", stat) for v in args.frontend_us.split(",")
                         for stat in args.statistics.split(","))
    else:
        variants = VARIANTS
    cases = [c for c in covered_cases()[0] if c.hardware == args.system
             and (args.engines is None or c.engine in args.engines.split(","))]
    step = max(len(cases) / args.sample, 1.0)
    cases = [cases[int(i * step)] for i in range(min(args.sample, len(cases)))]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        out = list(pool.map(_job, [(c, cfg, stat) for c in cases for cfg, stat in variants], chunksize=2))
    bad = {r["row_id"] for r in out if "error" in r}
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in out:
        if r["row_id"] not in bad:
            for eng in (r["engine"], "all"):
                groups[(r["config"], r["statistic"], eng)].append(r)
    print(f"{len(cases) - len(bad)} rows of {args.system} ({len(bad)} rejected), {time.perf_counter() - t0:.0f} s")
    print("| configuration | statistic | engine | rows | TTFT median abs err | TTFT signed median "
          "| TPOT median abs err |")
    print("|---|---|---|---|---|---|---|")
    for (cfg, stat, eng), g in sorted(groups.items()):
        t = np.array([r["ttft_err"] for r in g])
        p = np.array([r["tpot_err"] for r in g])
        print(f"| {cfg} | {stat} | {eng} | {len(g)} | {np.median(np.abs(t)):.1%} | {np.median(t):+.0%} "
              f"| {np.median(np.abs(p)):.1%} |")
    if args.out:
        args.out.write_text(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
