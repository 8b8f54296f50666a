"""Write GPUStack's "performance lab" pages as ``serveplan validate`` rows.

Reads ``docs/performance-lab/**/*.md`` of gpustack/gpustack from a local git mirror at a stated
commit and writes one YAML per page, ``src/serveplan/validate/data/gpustack-perflab-<model>-<hw>.yaml``.
Nothing is downloaded: the mirror path is an argument.

Inclusion rule (decided before any prediction was looked at; also in ``validate/data/README.md``):

* Every page whose "Benchmark Script" section measures with ``vllm bench serve`` is taken whole:
  every ``Serving Benchmark Result`` block of the page is a run, and every run gives one row per
  figure below. Runs on hardware, engines or models the catalog lacks, or with flags the tool does
  not model, stay in the data (the mapping reports them unmapped with the reason).
* Pages measured with another harness are left out as a whole: GLM-5.2 and the Qwen3.5 pages run
  GPUStack's benchmark-runner (guidellm), whose load ("request_rate: 1000" with a concurrency cap
  the page does not state) is not ``vllm bench serve``'s. ``overview.md`` and ``references/`` hold
  no result blocks.
* Figures per run: mean, median and P99 TTFT, TPOT and ITL, request throughput, output token
  throughput and total token throughput. The rest of the printout (duration, totals, peak output
  throughput, peak concurrent requests) goes to ``also``.
* A run printed figure for figure on two pages (another model or accelerator) is a pasted block:
  both copies stay in the data with ``copy_of`` naming the other, and the mapping uses neither
  (:func:`mark_copies`; added in 2026-11 after the copies were noticed while reading residuals:
  eight runs of ``glm-4.5-air/a100.md`` and ``glm-4.5-air/h100.md``, five of the two Ascend pages).

How a run is read:

* Engine, model, layout and formats come from the serving script above the result block (the
  ``??? info "... serving script"`` block): ``vllm serve`` is vLLM, ``sglang.launch_server`` SGLang,
  ``trtllm-serve`` TensorRT-LLM, ``mindie serve`` MindIE; on Ascend pages the vLLM runs are
  vLLM-Ascend (the page's engine list). Engine versions are the page's "Engine Version" list.
  A result-block label that is a flag (``# --max-num-batched-tokens 4096``) is that run's variant of
  the script, written first in ``settings_stated``.
* Load: ``vllm bench serve`` with no ``--request-rate`` sends every request at t=0 (its default
  rate is ``inf``); a block that prints "Maximum request concurrency: C" ran with
  ``--max-concurrency C``, a closed loop of C clients.
* Workload: the block's label (``# random 32K input``) names the page's random case (its
  "Benchmark Dataset" list gives the lengths); an unlabelled block is the page's ShareGPT run or
  its random 4000/200 run, whichever the printed mean input length (total input tokens / successful
  requests) is nearer to. vLLM's random dataset draws lengths uniformly in
  ``[L (1 - r), L (1 + r)]`` with ``--random-range-ratio r``, default 0.0 (vllm-project/vllm
  ``vllm/benchmarks/datasets.py``, ``RandomDataset.DEFAULT_RANGE_RATIO``), and no command on these
  pages sets it: fixed lengths. ShareGPT runs state the mean lengths the printout gives (total
  tokens / successful requests). Request count: the printed successful requests.

Usage::

    python benchmarks/gpustack_perflab_rows.py /work/.mirror/gpustack+gpustack/repo            # rewrite
    python benchmarks/gpustack_perflab_rows.py /work/.mirror/gpustack+gpustack/repo --check    # compare
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "serveplan" / "validate" / "data"
#: the commit of gpustack/gpustack read (newest stored snapshot, 2026-08-21)
COMMIT = "47277d79f4a5bae12a2d25e9ecbed2a2177a5f2d"
PREFIX = "docs/performance-lab/"
URL = "https://github.com/gpustack/gpustack/blob/{commit}/{path}"

#: HF id (without a quantization suffix) -> catalog id (absent: the HF id is kept, the catalog lacks it)
MODELS = {
    "Qwen/Qwen3-8B": "qwen3-8b", "Qwen/Qwen3-32B": "qwen3-32b", "Qwen/Qwen3-30B-A3B": "qwen3-30b-a3b",
    "Qwen/Qwen3-235B-A22B-Instruct-2507": "qwen3-235b-a22b",
    "openai/gpt-oss-20b": "gpt-oss-20b", "openai/gpt-oss-120b": "gpt-oss-120b",
    "zai-org/GLM-4.5-Air": "glm-4.5-air", "deepseek-ai/DeepSeek-R1-0528": "deepseek-r1",
}
#: checkpoints named by path or short name on the pages -> HF id
ALIASES = {"GLM-4.5-Air": "zai-org/GLM-4.5-Air", "/workspace/DeepSeek-v3.2": "deepseek-ai/DeepSeek-V3.2",
           "/workspace/DeepSeek-R1-0528": "deepseek-ai/DeepSeek-R1-0528", "Qwen3-30B-A3B": "Qwen/Qwen3-30B-A3B",
           "vllm-ascend/Qwen3-8B-W8A8": "Qwen/Qwen3-8B-W8A8"}
#: checkpoint suffix -> weight format as the tool names it
QUANT = {"-FP8": "fp8", "-AWQ": "w4a16", "-W8A8": "w8a8"}
#: the published format of a model whose checkpoint is quantized as released
PUBLISHED = {"gpt-oss-20b": "mxfp4", "gpt-oss-120b": "mxfp4", "deepseek-r1": "fp8_block",
             "deepseek-ai/DeepSeek-V3.2": "fp8_block", "qwen3-235b-a22b-fp8": "fp8_block"}
#: the page's Hardware line -> catalog id (None: the page does not say which catalog part)
HARDWARE = (
    (re.compile(r"H200", re.I), "h200"),
    (re.compile(r"H100 SXM", re.I), "h100-sxm"),
    (re.compile(r"A100 SXM 80GB", re.I), "a100-80g"),
    (re.compile(r"A100 SXM GPU", re.I), "a100-sxm (memory size not stated)"),
    (re.compile(r"Ascend 910B", re.I), "ascend-910b (variant not stated)"),
)
#: page's stated latency/throughput lines -> (metric, statistic, factor to SI)
FIGURES = (
    ("Mean TTFT (ms)", "ttft_s", "mean", 1e-3), ("Median TTFT (ms)", "ttft_s", "p50", 1e-3),
    ("P99 TTFT (ms)", "ttft_s", "p99", 1e-3),
    ("Mean TPOT (ms)", "tpot_s", "mean", 1e-3), ("Median TPOT (ms)", "tpot_s", "p50", 1e-3),
    ("P99 TPOT (ms)", "tpot_s", "p99", 1e-3),
    ("Mean ITL (ms)", "itl_s", "mean", 1e-3), ("Median ITL (ms)", "itl_s", "p50", 1e-3),
    ("P99 ITL (ms)", "itl_s", "p99", 1e-3),
    ("Request throughput (req/s)", "requests_per_s", "mean", 1.0),
    ("Output token throughput (tok/s)", "output_tokens_per_s", "mean", 1.0),
    ("Total Token throughput (tok/s)", "total_tokens_per_s", "mean", 1.0),
)
UNITS = {"ttft_s": "s", "tpot_s": "s", "itl_s": "s", "requests_per_s": "req/s", "output_tokens_per_s": "tok/s",
         "total_tokens_per_s": "tok/s (input + output)"}
ALSO = {"Successful requests": "successful_requests", "Failed requests": "failed_requests",
        "Maximum request concurrency": "max_concurrency", "Benchmark duration (s)": "duration_s",
        "Total input tokens": "total_input_tokens", "Total generated tokens": "total_generated_tokens",
        "Peak output token throughput (tok/s)": "peak_output_tokens_per_s",
        "Peak concurrent requests": "peak_concurrent_requests"}
#: a random case's label on the pages -> the "Benchmark Dataset" entry it names
CASES = {"32k": "Very long prompt", "4k": "Long prompt", "2k": "Medium prompt", "128": "Short prompt"}
#: (all four are the pages' "Benchmark Dataset" names; labels are matched case-insensitively)


@dataclass
class Run:
    line: int                       # 1-based line of the "Serving Benchmark Result" header
    heading: str
    script: str
    script_title: str
    label: str
    figures: dict[str, tuple[float, int, str]] = field(default_factory=dict)   # name -> (value, line, as printed)


def git_show(mirror: Path, commit: str, path: str) -> str:
    return subprocess.run(["git", "--git-dir", str(mirror), "show", f"{commit}:{path}"], check=True,
                          capture_output=True, text=True).stdout


def page_paths(mirror: Path, commit: str) -> list[str]:
    out = subprocess.run(["git", "--git-dir", str(mirror), "ls-tree", "-r", "--name-only", commit, PREFIX],
                         check=True, capture_output=True, text=True).stdout.split()
    return sorted(p for p in out if p.endswith(".md"))


def _section(text: str, title: str) -> str:
    m = re.search(rf"^##+ {re.escape(title)}\s*\n(.*?)(?=^##+ |\Z)", text, re.M | re.S)
    return m.group(1).strip() if m else ""


def included(text: str) -> bool:
    """The inclusion rule (module doc): a page measured with ``vllm bench serve``."""
    return "Serving Benchmark Result" in text and "vllm bench serve" in _section(text, "Benchmark Script")


def parse_runs(text: str) -> list[Run]:
    runs: list[Run] = []
    heading, script, title, label = "", "", "", ""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        ln = lines[i]
        s = ln.strip()
        if re.match(r"^#{2,5} ", ln):
            heading, label = ln.lstrip("#").strip(), ""
        m = re.match(r'^\?\?\?\+? info "([^"]*serving script[^"]*)"', s, re.I)
        if m:
            title, body = m.group(1), []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith("```"):
                i += 1
            i += 1
            while i < len(lines) and not lines[i].strip().startswith("```"):
                body.append(lines[i].strip())
                i += 1
            script = " ".join(b.rstrip("\\").strip() for b in body if b)
            label = ""
        elif s and not s.startswith("`") and i + 1 < len(lines) and "Serving Benchmark Result" in lines[i + 1]:
            label = s.removeprefix("# ").strip()     # the line just above a result block names the run
        elif "Serving Benchmark Result" in s:
            run = Run(line=i + 1, heading=heading, script=script, script_title=title, label=label)
            i += 1
            while i < len(lines) and not lines[i].strip().startswith("=" * 10):
                fm = re.match(r"^\s*([A-Za-z][^:]*?):\s+([-0-9.]+)\s*$", lines[i])
                if fm:
                    run.figures[fm.group(1).strip()] = (float(fm.group(2)), i + 1, fm.group(2))
                i += 1
            runs.append(run)
            label = ""
        i += 1
    return runs


def _flag(cmd: str, *names: str) -> str | None:
    for n in names:
        m = re.search(rf"(?:^|\s){re.escape(n)}(?:[ =])(\S+)", cmd)
        if m:
            return m.group(1)
    return None


def _engine(cmd: str, ascend: bool) -> str:
    if "sglang.launch_server" in cmd:
        return "sglang"
    if "trtllm-serve" in cmd:
        return "trtllm"
    if "mindie serve" in cmd:
        return "other:mindie"
    if "vllm serve" in cmd:
        return "other:vllm-ascend" if ascend else "vllm"
    raise SystemExit(f"no engine in serving script {cmd!r}")


def _checkpoint(cmd: str) -> str:
    name = _flag(cmd, "--model-path", "--model")
    if name is None:
        m = re.search(r"(?:vllm serve|trtllm-serve|mindie serve)\s+(\S+)", cmd)
        if not m:
            raise SystemExit(f"no model in serving script {cmd!r}")
        name = m.group(1)
    return ALIASES.get(name, name)


def _model(ckpt: str) -> tuple[str, str | None]:
    """Catalog model (or HF id) and weight format (None: the model's own) of a checkpoint."""
    base, dtype = ckpt, None
    for suffix, fmt in QUANT.items():
        if ckpt.endswith(suffix):
            base, dtype = ckpt[: -len(suffix)], fmt
    model = MODELS.get(base, base)
    if model == "qwen3-235b-a22b" and dtype == "fp8":
        model, dtype = "qwen3-235b-a22b-fp8", None
    return model, dtype or PUBLISHED.get(model)


def _layout(cmd: str, engine: str, model: str) -> tuple[dict[str, Any], int]:
    tp = int(_flag(cmd, "-tp", "--tensor-parallel-size", "--tp", "--tp-size", "--tp_size") or 1)
    pp = int(_flag(cmd, "-pp", "--pipeline-parallel-size", "--pp-size", "--pp_size") or 1)
    dp = int(_flag(cmd, "-dp", "--data-parallel-size", "--dp", "--dp-size") or 1)
    ep_flag = _flag(cmd, "--ep-size", "--ep", "--ep_size")
    lay: dict[str, Any] = {"tp": tp, "pp": pp}
    if engine == "sglang":
        # SGLang: --tp-size is every GPU of the instance; --enable-dp-attention splits attention into --dp ranks
        devices = tp * pp
        if "--enable-dp-attention" in cmd:
            if dp == 1:
                lay["dp_attention"] = "enabled with no --dp (the attention DP size is not stated)"
            else:
                lay.update(tp=tp // dp, dp=dp)
        if ep_flag:
            lay["ep"] = int(ep_flag)
        return lay, devices
    devices = tp * pp * dp
    if engine.startswith("other:"):
        return lay | ({"dp": dp} if dp > 1 else {}), devices
    if ep_flag:
        lay["ep"] = int(ep_flag)
    if "--enable-expert-parallel" in cmd:
        lay["ep"] = tp * dp
    if dp > 1:
        lay["dp"] = dp        # vLLM DP of an MoE model: attention ranks, experts over all tp*dp GPUs
    return lay, devices


def _kv(cmd: str) -> str | None:
    v = _flag(cmd, "--kv-cache-dtype")
    return None if v is None else ("fp8" if v.startswith("fp8") else v)


def _random_cases(text: str) -> dict[str, tuple[int, int]]:
    """The page's random cases ("Benchmark Dataset" list): name -> (input, output) tokens ("1K" = 1000)."""
    out = {}
    for m in re.finditer(r"-\s*([A-Za-z -]+?prompt):\s*(\d+)(K?) input tokens,\s*(\d+)(K?) output tokens",
                         _section(text, "Benchmark Dataset"), re.I):
        k_in, k_out = (1000 if m.group(3) else 1), (1000 if m.group(5) else 1)
        out[m.group(1).strip()] = (int(m.group(2)) * k_in, int(m.group(4)) * k_out)
    return out


def _workload(run: Run, text: str) -> tuple[dict[str, Any], str]:
    fig = {k: v for k, (v, _, _) in run.figures.items()}
    n = int(fig["Successful requests"])
    mean_in, mean_out = fig["Total input tokens"] / n, fig["Total generated tokens"] / n
    cases = _random_cases(text)
    label = run.label.lower()
    case = next((c for k, c in CASES.items() if re.search(rf"\brandom {k}\b", label)), None)
    if case is None and "sharegpt" not in label:
        # an unlabelled block: the random case whose lengths the printed means match within 5%
        case = next((c for c, (i, o) in cases.items()
                     if abs(mean_in / i - 1) <= 0.05 and abs(mean_out / o - 1) <= 0.05), None)
    if case is not None:
        inp, out = cases[case]
        return ({"dataset": "random", "input_len": inp, "output_len": out, "length_variance": "fixed",
                 "prompts": n, "benchmark": "vllm bench serve"},
                f"random dataset, page's '{case}' case ({inp} in, {out} out)")
    return ({"dataset": "sharegpt", "input_len_mean": round(mean_in, 2), "output_len_mean": round(mean_out, 2),
             "prompts": n, "benchmark": "vllm bench serve",
             "lengths": "ShareGPT conversations; means are the printed totals / successful requests"},
            "ShareGPT (ShareGPT_V3_unfiltered_cleaned_split.json)")


def _versions(text: str) -> dict[str, str]:
    out = {}
    for m in re.finditer(r"^-\s*([A-Za-z-]+):?\s*v?([0-9][\w.]*)", _section(text, "Engine Version"), re.M):
        out[m.group(1).lower()] = m.group(2)
    return out


def page_rows(path: str, text: str, commit: str) -> dict[str, Any]:
    rel = path[len(PREFIX):-3]
    sid = "gpustack-perflab-" + rel.replace("/", "-").replace(".", "")
    hw_line = _section(text, "Hardware").splitlines()[0]
    hardware = next((h for p, h in HARDWARE if p.search(hw_line)), hw_line)
    ascend = "Ascend" in hw_line
    versions = _versions(text)
    title = text.splitlines()[0].lstrip("# ").strip()
    bench = " ".join(ln.strip() for ln in _section(text, "Benchmark Script").splitlines()
                     if ln.strip().startswith("vllm bench serve"))
    rows = []
    runs = parse_runs(text)
    for k, run in enumerate(runs, 1):
        if not run.script:
            raise SystemExit(f"{path}:{run.line}: a result block with no serving script above it")
        engine = _engine(run.script, ascend)
        ckpt = _checkpoint(run.script)
        model, dtype = _model(ckpt)
        layout, devices = _layout(run.script, engine, model)
        version = versions.get({"vllm": "vllm", "sglang": "sglang", "trtllm": "tensorrt-llm",
                                "other:mindie": "mindie", "other:vllm-ascend": "vllm-ascend"}[engine])
        workload, wl_text = _workload(run, text)
        fig = {k2: v for k2, (v, _, _) in run.figures.items()}
        conc = fig.get("Maximum request concurrency")
        load: dict[str, Any] = ({"kind": "concurrency", "value": int(conc), "requests": workload["prompts"]}
                                if conc else {"kind": "rate", "value": "inf", "requests": workload["prompts"],
                                              "note": "vllm bench serve's default --request-rate inf: every "
                                                      "request sent at t=0"})
        also = {ALSO[k2]: v for k2, v in fig.items() if k2 in ALSO}
        variant = run.label if run.label.startswith("--") else ""
        stated = (f"run variant (result label): {variant} | " if variant else "") + \
            f"serving script: {run.script}" + (f" | result label: {run.label}" if run.label and not variant else "")
        for name, metric, stat, factor in FIGURES:
            if name not in run.figures:
                continue
            value, line, printed = run.figures[name]
            rows.append({
                "id": f"run{k:02d}-{metric[:-2] if metric in ('ttft_s', 'tpot_s', 'itl_s') else metric}-{stat}",
                "where": f"{path} line {line}: section '{run.heading}', result block after '{run.script_title}'"
                         + (f" labelled '{run.label}'" if run.label else "") + f", '{name}: {printed}'",
                "model": model, "model_stated": ckpt, "hardware": hardware, "num_devices": devices,
                "engine": engine, "engine_version": version, "layout": layout, "dtype": dtype,
                "kv_dtype": _kv(run.script), "workload": workload, "load": load, "slo": None,
                "metric": metric, "statistic": stat, "value": round(value * factor, 9), "unit": UNITS[metric],
                "also": also, "settings_stated": stated,
                "notes": f"run {k} of {len(runs)} (result block at line {run.line}); workload: {wl_text}",
            })
    return {"source": {
        "id": sid, "group": "gpustack-perflab", "title": f"GPUStack performance lab: {title}",
        "url": URL.format(commit=commit, path=path),
        "date": "", "kind": "docs", "publisher": "GPUStack (gpustack/gpustack docs)",
        "read_from": f"github gpustack/gpustack @ {commit} {path}",
        "notes": f"Hardware: {hw_line} Engines: {', '.join(f'{k} {v}' for k, v in versions.items())}. "
                 f"Benchmark: {bench} (vllm bench serve; no --request-rate, so every request at t=0 unless a "
                 f"block prints a maximum concurrency). Written by benchmarks/gpustack_perflab_rows.py."},
        "rows": rows}


def _run_of(row_id: str) -> str:
    return row_id.split("-", 1)[0]


def mark_copies(pages: dict[str, dict[str, Any]]) -> int:
    """Mark each run whose printed figures (every latency and throughput line, and every line of
    ``also``) equal, to the last digit, a run on another page: ``copy_of`` names the other run's
    first row, and the mapping uses neither (a result block pasted under another model or
    accelerator; which page it was measured for is unknown). Returns the runs marked."""
    runs: dict[tuple[Any, ...], list[tuple[str, str]]] = {}
    for page in pages.values():
        sid = page["source"]["id"]
        by_run: dict[str, list[Any]] = {}
        for r in page["rows"]:
            by_run.setdefault(_run_of(r["id"]), []).append(
                (r["metric"], r["statistic"], r["value"], tuple(sorted(r["also"].items()))))
        for run, figs in by_run.items():
            runs.setdefault(tuple(sorted(figs)), []).append((sid, run))
    marked = 0
    for same in runs.values():
        if len({sid for sid, _ in same}) < 2:
            continue
        for sid, run in same:
            other = next(f"{s2}/{r2}" for s2, r2 in same if s2 != sid)
            page = pages[f"{sid}.yaml"]
            for r in page["rows"]:
                if _run_of(r["id"]) == run:
                    r["copy_of"] = other
            marked += 1
    return marked


def build(mirror: Path, commit: str) -> dict[str, dict[str, Any]]:
    out = {}
    for path in page_paths(mirror, commit):
        text = git_show(mirror, commit, path)
        if not included(text):
            continue
        page = page_rows(path, text, commit)
        out[f"{page['source']['id']}.yaml"] = page
    mark_copies(out)
    return out


class _Dumper(yaml.SafeDumper):  # type: ignore[misc]
    def ignore_aliases(self, data: Any) -> bool:    # every row spelled out, no YAML anchors
        return True


def dump(page: dict[str, Any]) -> str:
    return str(yaml.dump(page, Dumper=_Dumper, sort_keys=False, width=120, allow_unicode=True))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mirror", type=Path, help="git directory of a gpustack/gpustack mirror")
    ap.add_argument("--commit", default=COMMIT)
    ap.add_argument("--check", action="store_true", help="exit 1 if a bundled file differs")
    args = ap.parse_args(argv)
    pages = build(args.mirror, args.commit)
    bad = 0
    for name, page in pages.items():
        text = dump(page)
        target = OUT / name
        if args.check:
            if not target.exists() or target.read_text() != text:
                print(f"differs: {name}")
                bad += 1
        else:
            target.write_text(text)
        print(f"{name}: {len(page['rows'])} rows")
    print(f"{len(pages)} pages, {sum(len(p['rows']) for p in pages.values())} rows")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
