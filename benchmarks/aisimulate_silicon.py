"""NVIDIA AISimulate on aiconfigurator's silicon rows, for the comparison in docs/validation/silicon.md.

AISimulate is not a dependency of serveplan. Its released 0.13.0 on the package index is a stub
that cannot build without NVIDIA's own index; ``pip install --pre --only-binary=:all: aisimulate``
installs a 0.13 development wheel (about 1.5 GB with JAX and its other dependencies). Install it
into a virtual environment of its own and point this script at its ``aisimulate`` command::

    python3 -m venv ~/.cache/serveplan-bench/aisim-venv
    ~/.cache/serveplan-bench/aisim-venv/bin/pip install --pre --only-binary=:all: aisimulate
    python benchmarks/aisimulate_silicon.py --aisimulate ~/.cache/serveplan-bench/aisim-venv/bin/aisimulate \\
        --sample 320 --out benchmarks/results/aisimulate_silicon.json

Each selected row (an aggregated row serveplan can state, see ``validate_silicon.py``) becomes one
``aisimulate predict`` run: fixed ``isl``/``osl`` synthetic traffic, a closed-loop
``concurrency`` load at the row's concurrency, the row's backend, TP/PP/attention-DP/MoE layout and
GEMM/MoE quantisation, and AISimulate's own scheduler defaults (8192 batched tokens; at least
the concurrency in sequences). AISimulate resolves model names to the configs bundled in its
wheel; the measured checkpoints map to the bundled ones (:data:`AISIM_MODELS`). Its timing data
comes with its own backend versions: the row's ``backend_version`` is not passed (the versions of
2025 rows are not in its tables). The mean TTFT and TPOT of each run and its wall time are saved.

Note: the AISimulate wheel bundles the same ``silicon_sample.csv`` (``aisimulate_core/systems``),
so its numbers on these rows are not necessarily held out.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from silicon_data import NotStatable, load_rows, map_row  # noqa: E402

#: Measured checkpoint -> the model config AISimulate bundles for the same architecture.
AISIM_MODELS = {
    "meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Meta-Llama-3.1-8B",
    "nvidia/Llama-3.1-8B-Instruct-FP8": "meta-llama/Meta-Llama-3.1-8B",
    "meta-llama/Llama-3.1-70B": "meta-llama/Meta-Llama-3.1-70B",
    "Qwen/Qwen3-32B": "Qwen/Qwen3-32B",
    "nvidia/Qwen3-32B-NVFP4": "Qwen/Qwen3-32B",
    "deepseek-ai/DeepSeek-V3": "deepseek-ai/DeepSeek-V3",
    "deepseek-ai/DeepSeek-R1": "deepseek-ai/DeepSeek-R1",
    "nvidia/DeepSeek-R1-NVFP4": "deepseek-ai/DeepSeek-R1",
}
ROOT = Path(__file__).resolve().parents[1]


def selected_rows(sample: int | None) -> list[dict[str, str]]:
    """Aggregated rows serveplan can state, sorted by id; every k-th when ``sample`` is given."""
    out = []
    for row in load_rows():
        if row.get("mode") != "agg":
            continue
        try:
            case = map_row(row)
        except NotStatable:
            continue
        if case.layout is None or case.layout.instances != 1:
            continue
        out.append(row)
    out.sort(key=lambda r: r["id"])
    if sample and sample < len(out):
        step = len(out) / sample
        out = [out[int(i * step)] for i in range(sample)]
    return out


def _int(row: dict[str, str], key: str, default: int = 1) -> int:
    v = (row.get(key) or "").strip()
    return int(float(v)) if v else default


def config_for(row: dict[str, str], num_requests: int) -> dict[str, Any]:
    case = map_row(row)
    par = case.parallel
    engine: dict[str, Any] = {
        "model": AISIM_MODELS.get(row["model_path"], row["model_path"]),
        "hardware": row["system"],
        "backend": row["backend"],
        "workers": {"aggregated": {
            "parallelism": {"tensor": par.tp, "pipeline": par.pp, "attention_data": par.dp,
                            "moe_tensor": _int(row, "moe_tp_size") if par.ep > 1 else par.tp * par.dp,
                            "moe_expert": par.ep},
            "scheduler": {"max_batched_tokens": 8192, "max_sequences": max(256, case.concurrency)},
        }},
    }
    for key in ("gemm_quant_mode", "moe_quant_mode"):
        if row.get(key):
            engine[key] = row[key]
    return {
        "traffic": {"source": {"type": "synthetic", "input_tokens": case.isl, "output_tokens": case.osl},
                    "load": {"type": "concurrency", "concurrency": case.concurrency},
                    "stop": {"requests": num_requests}},
        "engine": engine,
    }


def predict(exe: str, row: dict[str, str], num_requests: int, timeout_s: float) -> dict[str, Any]:
    import yaml

    cfg = config_for(row, num_requests)
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "config.yaml"
        p.write_text(yaml.safe_dump(cfg))
        t0 = time.perf_counter()
        try:
            proc = subprocess.run([exe, "predict", "-c", str(p), "--format", "json", "--output-dir",
                                   str(Path(d) / "out"), "--overwrite"], capture_output=True, text=True,
                                  timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout_s:.0f} s", "seconds": timeout_s}
        dt = time.perf_counter() - t0
    if proc.returncode != 0:
        last = [ln for ln in proc.stderr.splitlines() if "failed" in ln or "Error" in ln]
        return {"error": (last[-1] if last else proc.stderr.strip()[-300:])[:400], "seconds": dt}
    d = json.loads(proc.stdout)
    return {"ttft_s": d["mean_ttft_ms"] / 1e3, "tpot_s": d["mean_tpot_ms"] / 1e3, "seconds": dt,
            "data_version": (d.get("prediction_provenance") or {}).get("aggregated", {}).get("data_version")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--aisimulate", required=True, help="path of the aisimulate command (its own venv)")
    ap.add_argument("--sample", type=int, default=None, help="every k-th covered row, this many in all")
    ap.add_argument("--requests-per-client", type=int, default=4, help="requests = max(concurrency x this, 32)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per row")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "aisimulate_silicon.json")
    args = ap.parse_args(argv)
    rows = selected_rows(args.sample)
    done: dict[str, Any] = json.loads(args.out.read_text()) if args.out.exists() else {}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for i, row in enumerate(rows):
        if row["id"] in done:
            continue
        c = map_row(row).concurrency
        res = predict(args.aisimulate, row, max(c * args.requests_per_client, 32), args.timeout)
        done[row["id"]] = res
        args.out.write_text(json.dumps(done, indent=1, sort_keys=True))
        print(f"[{i + 1}/{len(rows)}] {row['id']}: {res}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
