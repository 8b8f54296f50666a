"""Build the bundled arrival processes (``serveplan day-plan --traffic azure-conv-2023``) from the
Azure LLM inference trace 2023, and a week of a production model's arrivals from Alibaba's ServeGen
release (``--traffic servegen-m-large-week``).

The shipped files hold request counts per minute only, never the requests. Run once with a clone
(or snapshot) of the public repository Azure/AzurePublicDataset (data licensed CC-BY-4.0)::

    python benchmarks/build_traffic.py --azure DIR   # DIR/data/AzureLLMInferenceTrace_{conv,code}.csv

writes ``src/serveplan/specs/data/traffic/{azure-conv-2023,azure-code-2023}.yaml``. Minute ``k``
counts the requests whose ``TIMESTAMP`` lies in ``[t0 + 60 k, t0 + 60 (k + 1))``, ``t0`` the first
request's time; the last, partial minute is dropped.

    python benchmarks/build_traffic.py --servegen DIR  # DIR/data/language/m-large/chunk-*-trace.csv

writes ``servegen-m-large-week.yaml`` from a clone of alibaba/ServeGen (Apache-2.0; Xiang et al.,
"ServeGen: Workload Characterization and Generation of Large Language Model Serving in Production",
arXiv 2505.09999): the release describes each client of the model ``m-large`` on Alibaba Cloud Model
Studio by its mean request rate in each 600 s window over 14 days (``chunk-i-trace.csv``: window start
in seconds, rate in req/s, then the burstiness fields). The model's rate in a window is the sum over
its clients; the file keeps the first 7 days (1,008 windows) as requests per window (rate x 600,
rounded), the burstiness within a window is not kept.
"""

from __future__ import annotations

import argparse
import csv
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "serveplan" / "specs" / "data" / "traffic"
SOURCE = "https://github.com/Azure/AzurePublicDataset/blob/master/data/"
BIN_S = 60
TRACES = {
    "azure-conv-2023": ("AzureLLMInferenceTrace_conv.csv", "conversation"),
    "azure-code-2023": ("AzureLLMInferenceTrace_code.csv", "coding"),
}


def counts(path: Path) -> tuple[list[int], str, str]:
    with path.open(newline="") as f:
        stamps = [datetime.fromisoformat(row["TIMESTAMP"][:26]) for row in csv.DictReader(f)]
    stamps.sort()
    t0 = stamps[0]
    secs = [(t - t0).total_seconds() for t in stamps]
    full = int(secs[-1] // BIN_S)  # whole minutes
    out = [0] * full
    for s in secs:
        k = int(s // BIN_S)
        if k < full:
            out[k] += 1
    return out, stamps[0].isoformat(), stamps[-1].isoformat()


SERVEGEN_WINDOW_S = 600   # ServeGen's trace windows (chunk-i-trace.csv timestamps step by 600 s)
SERVEGEN_DAYS = 7


def servegen_week(root: Path) -> None:
    """``servegen-m-large-week.yaml``: requests per 600 s window of model m-large, first 7 days (module doc)."""
    files = sorted((root / "data" / "language" / "m-large").glob("chunk-*-trace.csv"))
    total: dict[int, float] = {}
    for f in files:
        for line in f.read_text().splitlines():
            t, rate = line.split(",")[:2]
            total[int(t)] = total.get(int(t), 0.0) + float(rate)
    keep = [t for t in sorted(total) if t < SERVEGEN_DAYS * 86400]
    if [t // SERVEGEN_WINDOW_S for t in keep] != list(range(len(keep))):
        raise SystemExit("ServeGen windows are not consecutive 600 s steps from 0")
    c = [round(total[t] * SERVEGEN_WINDOW_S) for t in keep]
    lines = [
        "# Alibaba Cloud Model Studio, model m-large (ServeGen release): requests per 600 s window over",
        "# 7 days, the sum of its clients' mean rates (built by benchmarks/build_traffic.py --servegen).",
        "name: servegen-m-large-week",
        f'description: "ServeGen m-large (a production language model on Alibaba Cloud Model Studio), {SERVEGEN_DAYS} '
        f'days of arrivals in {SERVEGEN_WINDOW_S} s windows, {len(files)} clients summed"',
        "source: https://github.com/alibaba/ServeGen/tree/main/data/language/m-large",
        'licence: "Apache-2.0 (alibaba/ServeGen)"',
        ('attribution: "Xiang et al., ServeGen: Workload Characterization and Generation of Large Language Model '
         'Serving in Production, arXiv 2505.09999 (2025)"'),
        f'collected: "days 0-{SERVEGEN_DAYS} of the release\'s 14-day window (its own clock; dates not published)"',
        f"interval_s: {SERVEGEN_WINDOW_S}",
        f"num_requests: {sum(c)}   # rate x 600 s per window, rounded",
        f"counts: [{', '.join(str(v) for v in c)}]",
    ]
    (OUT / "servegen-m-large-week.yaml").write_text("\n".join(lines) + "\n")
    print("servegen-m-large-week", len(c), "windows", sum(c), "requests")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--azure", type=Path, help="a clone of Azure/AzurePublicDataset")
    ap.add_argument("--servegen", type=Path, help="a clone of alibaba/ServeGen")
    args = ap.parse_args()
    if args.azure is None and args.servegen is None:
        ap.error("give --azure DIR and/or --servegen DIR")
    OUT.mkdir(parents=True, exist_ok=True)
    if args.servegen is not None:
        servegen_week(args.servegen)
    if args.azure is None:
        return
    for name, (file, service) in TRACES.items():
        c, first, last = counts(args.azure / "data" / file)
        lines = [
            f"# Azure LLM inference trace 2023, {service} service: requests per minute (built by",
            "# benchmarks/build_traffic.py; the requests themselves are not shipped).",
            f"name: {name}",
            f'description: "Azure LLM inference trace 2023, {service} service, {len(c)} minutes of arrivals"',
            f"source: {SOURCE}{file}",
            'licence: "CC-BY-4.0 (Azure/AzurePublicDataset)"',
            ('attribution: "Patel et al., Splitwise: Efficient Generative LLM Inference Using Phase Splitting, '
             f'ISCA 2024; Azure/AzurePublicDataset {file}"'),
            f'collected: "{first} to {last} (the trace\'s own clock)"',
            f"interval_s: {BIN_S}",
            f"num_requests: {sum(c)}   # in the whole minutes kept",
            f"counts: [{', '.join(str(v) for v in c)}]",
        ]
        (OUT / f"{name}.yaml").write_text("\n".join(lines) + "\n")
        print(name, len(c), "minutes", sum(c), "requests")


if __name__ == "__main__":
    main()
