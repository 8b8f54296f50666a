"""Build the bundled arrival processes (``serveplan day-plan --traffic azure-conv-2023``) from the
Azure LLM inference trace 2023.

The shipped files hold request counts per minute only, never the requests. Run once with a clone
(or snapshot) of the public repository Azure/AzurePublicDataset (data licensed CC-BY-4.0)::

    python benchmarks/build_traffic.py --azure DIR   # DIR/data/AzureLLMInferenceTrace_{conv,code}.csv

writes ``src/serveplan/specs/data/traffic/{azure-conv-2023,azure-code-2023}.yaml``. Minute ``k``
counts the requests whose ``TIMESTAMP`` lies in ``[t0 + 60 k, t0 + 60 (k + 1))``, ``t0`` the first
request's time; the last, partial minute is dropped.
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--azure", type=Path, required=True, help="a clone of Azure/AzurePublicDataset")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
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
