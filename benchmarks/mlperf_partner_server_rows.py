"""Write ``mlperf-inference-v4.1-partners.yaml``: the v4.1 LLM Server results of every closed-division submitter
other than NVIDIA and AMD (whose rows ``mlperf-inference-v4.1.yaml`` already holds), read from a snapshot of
``mlcommons/inference_results_v4.1``.

Inclusion rule (fixed before any of these rows was compared with a prediction): every
``closed/<submitter>/results/<system>/<benchmark>/Server/performance/run_1/mlperf_log_summary.txt`` of the snapshot
whose benchmark is ``llama2-70b-99``, ``llama2-70b-99.9`` or ``mixtral-8x7b`` and whose loadgen verdict is
``Result is : VALID``, for every submitter but NVIDIA and AMD, whatever its accelerator, engine or system. The open
division is left out (it may change the model or the accuracy target). Rows serveplan cannot state (a device the
catalog lacks, a MaxQ power cap, one result reused for both accuracy targets) are written all the same and skipped,
with their cause, by ``benchmarks/validate_goodput.py``.

What each row takes from the submission: the summary log (completed tokens/s as ``value``; completed and scheduled
samples/s, target_qps, mean/p50/p90/p99 TTFT and TPOT in ``also``; the SLO from "Test Parameters Used") and
``closed/<submitter>/systems/<system>.json`` (system name, accelerator, count per node times nodes, framework and
software). Engine: ``trtllm`` where the framework names TensorRT, ``vllm`` (with its stated version) where it names
vLLM. Layout and precision are left null: no submitter's config was read for these rows, so the benchmark searches the
layouts and assumes the precision by accelerator, as for the v5.0 partner rows.

Usage::

    python benchmarks/mlperf_partner_server_rows.py /work/.mirror/mlcommons+inference_results_v4.1/repo
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "serveplan" / "validate" / "data" / "mlperf-inference-v4.1-partners.yaml"
BENCHMARKS = {"llama2-70b-99": ("llama-2-70b", "mlperf-openorca-24576"),
              "llama2-70b-99.9": ("llama-2-70b", "mlperf-openorca-24576"),
              "mixtral-8x7b": ("mixtral-8x7b", "mlperf-mixtral-15k")}
EXCLUDED = ("NVIDIA", "AMD")  # already in mlperf-inference-v4.1.yaml
_PATH = re.compile(r"^closed/([^/]+)/results/([^/]+)/([^/]+)/Server/performance/run_1/mlperf_log_summary\.txt$")


def hardware(name: str, memory: str) -> str:
    """Catalog id of an MLPerf accelerator name (the name itself, lower-cased, where the catalog has none)."""
    n = name.upper()
    if "GH200" in n:
        return "gh200" if "144" in n or "144" in memory else "gh200-96gb"  # the catalog's GH200 is the 144 GB part
    for key, hw in (("H100-NVL", "h100-nvl-94gb"), ("H100 NVL", "h100-nvl-94gb"), ("H200", "h200"),
                    ("H100", "h100-sxm"), ("L40S", "l40s"), ("MI300X", "mi300x")):
        if key in n:
            if hw == "h100-sxm" and "PCIE" in n:
                return "h100-pcie"
            return hw
    return re.sub(r"\W+", "-", name.lower()).strip("-")


def engine(sysd: dict[str, Any]) -> tuple[str, str | None]:
    text = f"{sysd.get('framework', '')} {json.dumps(sysd.get('other_software_stack', ''))}"
    m = re.search(r"vllm\W+(\d+\.\d+\.\d+)", text, re.I)
    if m:
        return "vllm", m.group(1)
    if "tensorrt" in text.lower():
        return "trtllm", None
    return "other:" + re.sub(r"\W+", "-", str(sysd.get("framework", "")).lower()).strip("-"), None


def parse_summary(text: str) -> dict[str, Any]:
    def num(label: str) -> float | None:
        m = re.search(re.escape(label) + r"\s*:\s*([\d.]+)", text)
        return float(m.group(1)) if m else None

    def ns(label: str) -> float | None:
        v = num(label)
        return None if v is None else v / 1e9

    return {
        "valid": "Result is : VALID" in text,
        "tokens_per_s": num("Completed tokens per second"),
        "samples_per_s": num("Completed samples per second"),
        "scheduled_samples_per_s": num("Scheduled samples per second"),
        "target_qps": num("target_qps"),
        "ttft_s": ns("ttft_latency (ns)"), "tpot_s": ns("tpot_latency (ns)"),
        "ttft_mean_s": ns("Mean First Token latency (ns)"),
        "ttft_p50_s": ns("50.00 percentile first token latency (ns)"),
        "ttft_p90_s": ns("90.00 percentile first token latency (ns)"),
        "ttft_p99_s": ns("99.00 percentile first token latency (ns)"),
        "tpot_mean_s": ns("Mean Time to Output Token (ns)"),
        "tpot_p50_s": ns("50.00 percentile time to output token (ns)"),
        "tpot_p90_s": ns("90.00 percentile time to output token (ns)"),
        "tpot_p99_s": ns("99.00 percentile time to output token (ns)"),
    }


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout


def main(argv: list[str]) -> int:
    repo = Path(argv[1]) if len(argv) > 1 else Path("/work/.mirror/mlcommons+inference_results_v4.1/repo")
    commit = git(repo, "rev-parse", "HEAD").strip()
    rows, invalid = [], []
    for path in sorted(git(repo, "ls-tree", "-r", "--name-only", "HEAD", "closed").splitlines()):
        m = _PATH.match(path)
        if not m or m.group(3) not in BENCHMARKS or m.group(1) in EXCLUDED:
            continue
        submitter, system, bench = m.groups()
        s = parse_summary(git(repo, "show", f"HEAD:{path}"))
        if not s["valid"]:
            invalid.append(path)
            continue
        sysd = json.loads(git(repo, "show", f"HEAD:closed/{submitter}/systems/{system}.json"))
        eng, version = engine(sysd)
        devices = int(sysd["accelerators_per_node"]) * int(sysd.get("number_of_nodes") or 1)
        model, dataset = BENCHMARKS[bench]
        software = sysd.get("other_software_stack")
        software = software if isinstance(software, str) else json.dumps(software)
        rows.append({
            "id": re.sub(r"[^a-z0-9]+", "-", f"{submitter}-{system}-{bench}-server".lower()).strip("-"),
            "where": path, "submitter": submitter, "system": str(sysd.get("system_name") or system),
            "model": model, "hardware": hardware(str(sysd["accelerator_model_name"]),
                                                 str(sysd.get("accelerator_memory_capacity", ""))),
            "num_devices": devices, "engine": eng, "engine_version": version,
            "layout": {"tp": None, "pp": None, "dp": None, "ep": None, "instances": None},
            "dtype": None, "kv_dtype": None, "workload": {"dataset": dataset}, "load": {"kind": "server"},
            "slo": {"ttft_s": s["ttft_s"], "tpot_s": s["tpot_s"], "percentile": 99},
            "metric": "output_tokens_per_s", "statistic": None, "value": s["tokens_per_s"], "unit": "tokens/s",
            "also": {k: s[k] for k in ("samples_per_s", "scheduled_samples_per_s", "target_qps", "ttft_mean_s",
                                       "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_mean_s", "tpot_p50_s",
                                       "tpot_p90_s", "tpot_p99_s")},
            "settings_stated": None,
            "notes": (f"MLPerf benchmark id: {bench}; scenario Server; accelerator: {sysd['accelerator_model_name']} "
                      f"({sysd.get('accelerator_memory_capacity', '?')}), {sysd['accelerators_per_node']} per node x "
                      f"{sysd.get('number_of_nodes', 1)} node(s); framework: {sysd.get('framework', '?')}; "
                      f"software: {software}"),
        })
    doc = {
        "source": {
            "id": "mlperf-inference-v4.1-partners",
            "title": "MLPerf Inference v4.1 Datacenter (closed division): LLM Server results of submitters other than "
                     "NVIDIA and AMD",
            "url": "https://github.com/mlcommons/inference_results_v4.1",
            "date": "2024-08-28", "kind": "benchmark-log", "publisher": "MLCommons",
            "read_from": f"github mlcommons/inference_results_v4.1 @ {commit} (full snapshot)",
            "notes": "Written by benchmarks/mlperf_partner_server_rows.py (its docstring: inclusion rule and fields). "
                     "Every VALID closed-division llama2-70b-99/-99.9 and mixtral-8x7b Server summary of the snapshot "
                     "but NVIDIA's and AMD's; layouts and precision not read (null). Left out as not VALID: "
                     + (", ".join(invalid) or "none") + ".",
        },
        "rows": rows,
    }
    header = ("# MLPerf Inference v4.1 Datacenter, closed division: LLM Server results of the submitters other\n"
              "# than NVIDIA and AMD. Generated by benchmarks/mlperf_partner_server_rows.py; see README.md here.\n")
    OUT.write_text(header + yaml.safe_dump(doc, sort_keys=False, width=120, allow_unicode=True))
    print(f"{len(rows)} rows ({len(invalid)} not VALID) -> {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
