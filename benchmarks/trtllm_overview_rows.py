"""Write TensorRT-LLM v1.0's published offline throughput as ``serveplan validate`` rows.

Reads ``benchmarks/data/trtllm_perf_overview_v1.0.csv`` (transcribed from
``docs/source/performance/perf-overview.md`` of NVIDIA/TensorRT-LLM at the commit its header names)
and writes ``src/serveplan/validate/data/trtllm-docs-perf-overview-v1.0.yaml``: one row per CSV row,
with the settings the overview states (trtllm-bench throughput, PyTorch backend, ModelOpt FP8 or
NVFP4 checkpoint with an FP8 KV cache, fixed lengths, the request count of its table) and
``load.batch_limits: trtllm-bench``, which tells :mod:`serveplan.validate.mapping` to take the batch
limits trtllm-bench chooses when given none (:mod:`serveplan.validate.trtllm_bench`, the rule
``benchmarks/validate_offline_trtllm.py`` applies to the same rows).

Usage::

    python benchmarks/trtllm_overview_rows.py            # rewrites the YAML
    python benchmarks/trtllm_overview_rows.py --check    # exit 1 if the YAML is not what the CSV gives
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from validate_offline_trtllm import DATA, Row, load_rows  # noqa: E402  (a script beside this one)

OUT = ROOT / "src" / "serveplan" / "validate" / "data" / "trtllm-docs-perf-overview-v1.0.yaml"
#: catalog hardware id -> the overview's column name
COLUMN = {"h100-sxm": "H100", "h200": "H200", "b200": "B200", "gb200": "GB200"}
#: catalog model id -> the overview's table name (Llama-3.3-70B has Llama-3.1-70B's architecture)
TABLE = {"llama-3.1-8b": "Llama 3.1 8B", "llama-3.1-70b": "Llama 3.3 70B", "llama-3.1-405b": "Llama 3.1 405B",
         "qwen3-30b-a3b": "Qwen3-30B-A3B", "llama-4-scout": "Llama 4 Scout"}
DTYPE = {"fp8": "FP8", "nvfp4": "FP4"}


def source_commit(path: Path = DATA) -> str:
    """The overview's commit, as the CSV header names it."""
    head = "".join(ln for ln in path.read_text().splitlines(keepends=True) if ln.startswith("#"))
    m = re.search(r"\b([0-9a-f]{40})\b", head)
    if not m:
        raise SystemExit(f"{path}: no commit in the header")
    return m.group(1)


def row_record(r: Row) -> dict[str, Any]:
    if r.hardware == "rtx-pro-6000":   # its own table under each model, columns by GPU count
        table = f"table '{TABLE[r.model]}', its RTX 6000 Pro Blackwell Server Edition table"
        col = f"{r.gpus} GPUs TP{r.tp},PP{r.pp}"
    else:
        table, col = f"table '{TABLE[r.model]}'", f"{COLUMN[r.hardware]} TP{r.tp}"
    where = f"Throughput Measurements, {table}, row {r.isl}/{r.osl}, column '{col} ({DTYPE[r.dtype]})'"
    return {
        "id": f"{r.model}-{r.hardware}-{r.dtype}-tp{r.tp}pp{r.pp}-{r.isl}-{r.osl}",
        "where": where,
        "model": r.model,
        "model_stated": r.checkpoint,
        "hardware": r.hardware,
        "num_devices": r.gpus,
        "engine": "trtllm",
        "engine_version": "1.0",
        "layout": {"tp": r.tp, "pp": r.pp},
        "dtype": r.dtype,
        "kv_dtype": "fp8",
        "workload": {"input_len": r.isl, "output_len": r.osl, "synthetic": "token-norm-dist stdev 0"},
        "load": {"kind": "offline", "requests": r.num_requests, "batch_limits": "trtllm-bench"},
        "slo": None,
        "metric": "output_tokens_per_s",
        "statistic": "mean",
        "value": r.output_tok_s,
        "unit": "tok/s (all GPUs)",
        "also": {},
        "settings_stated": (f"trtllm-bench --tp {r.tp} --pp {r.pp} throughput --backend pytorch, "
                            "--max_batch_size/--max_num_tokens not given (trtllm-bench's heuristic), "
                            "--kv_cache_free_gpu_mem_fraction default 0.90 (the overview: many runs used 0.95), "
                            "cuda_graph_config padding on"),
    }


def document(rows: list[Row]) -> dict[str, Any]:
    commit = source_commit()
    return {
        "source": {
            "id": "trtllm-docs-perf-overview-v1.0",
            "group": "trtllm-docs-perf-overview",   # one publisher and harness with the v0.14 overview
            "title": "TensorRT-LLM performance overview (v1.0)",
            "url": f"https://github.com/NVIDIA/TensorRT-LLM/blob/{commit}/docs/source/performance/perf-overview.md",
            "date": None,
            "kind": "docs",
            "publisher": "NVIDIA TensorRT-LLM",
            "read_from": f"github NVIDIA/TensorRT-LLM docs/source/performance/perf-overview.md @ {commit}, "
                         f"transcribed to {DATA.relative_to(ROOT)}; written by benchmarks/trtllm_overview_rows.py",
            "notes": (
                "Offline max-throughput ('a local inference client is fed requests at an infinite rate'): "
                "trtllm-bench throughput, PyTorch backend (no engine build, 'Starting with v0.19'), NVIDIA's "
                "ModelOpt FP8 and NVFP4 checkpoints (FP8 KV cache), synthetic token-norm-dist dataset with zero "
                "stdev (every request has exactly ISL/OSL tokens), 'Total Output Throughput (tokens/sec)' of the "
                "whole system; num_requests per ISL/OSL from the overview's table. A release and checkpoints other "
                "than trtllm-docs-perf-overview-v0.14 (TensorRT engines of 0.14.0). Transcribed: every dense-model "
                "table (Llama 3.1 8B, Llama 3.3 70B, Llama 3.1 405B, RTX 6000 Pro at each TP x PP) and the "
                "one-GPU columns of the MoE tables (Qwen3-30B-A3B on B200, GB200 and one RTX 6000 Pro, "
                "Llama 4 Scout on B200 and GB200); left out: every MoE column on more than one GPU "
                "(Qwen3-235B-A22B, Llama 4 Maverick, Scout on H100/H200 TP4, the RTX 6000 Pro MoE columns at "
                "2-8 GPUs), whose expert-parallel size ('--ep $ep_size') the overview does not give. The date of "
                "the commit was not read. benchmarks/validate_offline_trtllm.py checks the same rows (no constant "
                "was chosen on them)."),
        },
        "rows": [row_record(r) for r in rows],
    }


def render(rows: list[Row]) -> str:
    header = ("# Generated by benchmarks/trtllm_overview_rows.py from benchmarks/data/trtllm_perf_overview_v1.0.csv;\n"
              "# edit the CSV and rerun, not this file.\n")
    doc = document(rows)
    return (header + yaml.safe_dump({"source": doc["source"]}, sort_keys=False, default_flow_style=False, width=120)
            + yaml.safe_dump({"rows": doc["rows"]}, sort_keys=False, default_flow_style=None, width=120))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the bundled YAML differs from the CSV's")
    args = ap.parse_args(argv)
    text = render(load_rows())
    if args.check:
        same = OUT.exists() and OUT.read_text() == text
        print(f"{OUT.relative_to(ROOT)} {'matches' if same else 'differs from'} the CSV")
        return 0 if same else 1
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(ROOT)} ({len(load_rows())} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
