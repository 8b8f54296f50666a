"""Paired timing of serveplan's default search against NVIDIA aiconfigurator 0.12.0 (issue 45 acceptance 2).

Run: .venv/bin/python benchmarks/bench_vs_aiconfigurator.py [--only job1,job4] [--pairs 3]
     [--serveplan-src PATH] [--find-links DIR]

The same questions to both tools on the same machine, each as a whole process from the command line:

* job1: Qwen3-32B on 16 x H200, ISL 4000 / OSL 500, P90 TTFT <= 1 s, TPOT <= 20 ms, max batch 16/64/256
  (serveplan's vLLM engine; aiconfigurator ``--backend vllm``);
* job2: the same with serveplan ``--engine trtllm`` and aiconfigurator ``--backend trtllm``;
* job3: job1 with serveplan ``--exhaustive`` (serveplan only, one run: its ratio is against serveplan's
  default search on job1, target <= 10x);
* job4: Llama-3.1-70B on 16 x H100 SXM, vLLM, TTFT <= 1 s, TPOT <= 30 ms;
* job5: DeepSeek-V3 FP8 on 32 x H200, EP and DP-attention layouts, TTFT <= 2 s, TPOT <= 50 ms;
* job6: one step estimate, Llama-3.1-70B TP8 on H100 SXM, batch 1, ISL 4000 / OSL 500 (serveplan
  ``estimate``; aiconfigurator ``cli estimate --estimate-mode static``).

The serveplan arguments of jobs 1, 4 and 5 are bench_optimize_scale.py's qwen, llama and deepseek jobs.
aiconfigurator is installed by this script (never by tests or CI) into its own virtualenv,
``$SERVEPLAN_BENCH_CACHE/aic-venv`` (default ``~/.cache/serveplan-bench``), with
``pip install aiconfigurator==0.12.0`` (``--find-links DIR`` reuses wheels already downloaded); it reads
the model configs it bundles, so nothing is fetched while timing.

For each job the two tools alternate (serveplan, aiconfigurator, serveplan, ...; ``--pairs`` pairs, default
3). Each run is timed whole: wall seconds by ``time.perf_counter`` around ``subprocess.run``, CPU seconds
(user + system of the process and its workers) from ``resource.getrusage(RUSAGE_CHILDREN)`` deltas. The
medians of each and the median of the per-pair ratios (serveplan / aiconfigurator) are recorded with the
load average before and after the job, since the machine may be shared, and the decision each tool reached
(collocated/aggregated or disaggregated, and its layout) so that "the same decision" can be judged.
Writes results/vs-aiconfigurator-<YYYYMMDD>.md and .json; a run with ``--only`` merges its jobs into the
JSON of the same day and rewrites the table from all of them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling machine_info module
from machine_info import describe  # noqa: E402

RESULTS = Path(__file__).parent / "results"
ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("SERVEPLAN_BENCH_CACHE", Path.home() / ".cache" / "serveplan-bench"))
AIC_VERSION = "0.12.0"
AIC_VENV = CACHE / "aic-venv"

QWEN = ["optimize", "--model", "qwen3-32b", "--hardware", "h200", "--devices", "16", "--tp", "1,2,4,8",
        "--max-batch", "16,64,256", "--input-len", "4000", "--output-len", "500", "--slo-ttft", "1",
        "--slo-tpot", "0.02"]
LLAMA = ["optimize", "--model", "llama-3.1-70b", "--hardware", "h100-sxm", "--engine", "vllm", "--devices", "16",
         "--tp", "1,2,4,8", "--input-len", "4000", "--output-len", "500", "--slo-ttft", "1", "--slo-tpot", "0.03"]
DEEPSEEK = ["optimize", "--model", "deepseek-v3", "--hardware", "h200", "--dtype", "fp8", "--devices", "32",
            "--tp", "1,2,4,8", "--dp", "1,2,4,8,16,32", "--ep", "1,8,16,32", "--input-len", "4000",
            "--output-len", "500", "--slo-ttft", "2", "--slo-tpot", "0.05"]
OPT_TAIL = ["--json", "--no-progress", "--jobs", "2"]
AIC_QWEN = ["cli", "default", "--model", "Qwen/Qwen3-32B", "--total-gpus", "16", "--system", "h200_sxm",
            "--isl", "4000", "--osl", "500", "--ttft", "1000", "--tpot", "20"]

# name: (question, serveplan arguments, aiconfigurator arguments or None, kind)
JOBS: dict[str, tuple[str, list[str], list[str] | None, str]] = {
    "job1": ("Qwen3-32B, 16 x H200, vLLM, 4000/500, TTFT 1 s, TPOT 20 ms", QWEN + OPT_TAIL,
             AIC_QWEN + ["--backend", "vllm"], "search"),
    "job2": ("Qwen3-32B, 16 x H200, TensorRT-LLM, 4000/500, TTFT 1 s, TPOT 20 ms",
             QWEN + ["--engine", "trtllm"] + OPT_TAIL, AIC_QWEN + ["--backend", "trtllm"], "search"),
    "job3": ("job1 with serveplan --exhaustive (serveplan only; ratio against job1's serveplan median)",
             QWEN + ["--exhaustive"] + OPT_TAIL, None, "search"),
    "job4": ("Llama-3.1-70B, 16 x H100 SXM, vLLM, 4000/500, TTFT 1 s, TPOT 30 ms", LLAMA + OPT_TAIL,
             ["cli", "default", "--model", "meta-llama/Meta-Llama-3.1-70B", "--total-gpus", "16", "--system",
              "h100_sxm", "--backend", "vllm", "--isl", "4000", "--osl", "500", "--ttft", "1000", "--tpot", "30"],
             "search"),
    "job5": ("DeepSeek-V3 FP8, 32 x H200, vLLM, EP and DP attention, 4000/500, TTFT 2 s, TPOT 50 ms",
             DEEPSEEK + OPT_TAIL,
             ["cli", "default", "--model", "deepseek-ai/DeepSeek-V3", "--total-gpus", "32", "--system", "h200_sxm",
              "--backend", "vllm", "--isl", "4000", "--osl", "500", "--ttft", "2000", "--tpot", "50"], "search"),
    "job6": ("one step estimate: Llama-3.1-70B TP8 H100 SXM, vLLM, batch 1, 4000/500",
             ["estimate", "--model", "llama-3.1-70b", "--hardware", "h100-sxm", "--engine", "vllm", "--tp", "8",
              "--batch", "1", "--input-len", "4000", "--output-len", "500", "--json"],
             ["cli", "estimate", "--model", "meta-llama/Meta-Llama-3.1-70B", "--system", "h100_sxm", "--backend",
              "vllm", "--estimate-mode", "static", "--tp", "8", "--batch-size", "1", "--isl", "4000", "--osl", "500"],
             "estimate"),
}
OUTPUT_LEN = 500  # every job's output length: req/s x OSL = output tokens/s, aiconfigurator's unit
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def load_avg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def aic_bin() -> Path:
    return AIC_VENV / "bin" / "aiconfigurator"


def installed_version() -> str | None:
    py = AIC_VENV / "bin" / "python"
    if not py.exists() or not aic_bin().exists():
        return None
    out = subprocess.run([str(py), "-c", "import importlib.metadata as m; print(m.version('aiconfigurator'))"],
                         capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else None


def ensure_aiconfigurator(find_links: str | None) -> str:
    """Install aiconfigurator==AIC_VERSION into AIC_VENV unless it is there; returns its version."""
    if installed_version() != AIC_VERSION:
        CACHE.mkdir(parents=True, exist_ok=True)
        print(f"installing aiconfigurator=={AIC_VERSION} into {AIC_VENV} (its core wheel is ~80 MB)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(AIC_VENV)], check=True)
        pip = [str(AIC_VENV / "bin" / "pip"), "install", "--disable-pip-version-check",
               f"aiconfigurator=={AIC_VERSION}"]
        if find_links:
            pip += ["--find-links", find_links]
        subprocess.run(pip, check=True)
    version = installed_version()
    if version != AIC_VERSION:
        raise SystemExit(f"aiconfigurator {AIC_VERSION} not installed in {AIC_VENV} (found {version})")
    return version


def timed(cmd: list[str], env: dict[str, str], cwd: str) -> dict:
    """One whole process: wall and CPU seconds (process and workers), exit status, output."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu, "rc": proc.returncode, "stdout": ANSI.sub("", proc.stdout),
            "stderr": ANSI.sub("", proc.stderr)}


def error_text(run: dict) -> str:
    """The lines that say why a run failed (the last error lines, else the output's tail)."""
    lines = [ln for ln in (run["stderr"] + run["stdout"]).splitlines() if ln.strip()]
    errs = [ln for ln in lines if re.search(r"error|Error|Traceback|Exception", ln)]
    return " / ".join((errs or lines)[-3:])[:800]


# ---- decisions ------------------------------------------------------------------------------------------

def serveplan_search_decision(d: dict) -> dict:
    """The best strategy of ``serveplan optimize --json``, its layout, and the best of the other architecture."""
    by_name = {s["name"]: s for s in d["strategies"]}

    def brief(s: dict | None) -> dict | None:
        if s is None:
            return None
        kind = "collocated" if s.get("num_collocated", 0) else "disaggregated"
        out = {k: s.get(k) for k in ("name", "strategy", "num_devices", "num_collocated", "num_prefill", "num_decode",
                                     "tp", "decode_tp", "pp", "dp", "decode_dp", "ep", "decode_ep", "max_batch",
                                     "goodput_rps", "goodput_per_device", "ttft_p_s", "tpot_p_s")}
        out["kind"] = kind
        out["output_tok_s_per_device"] = s["goodput_per_device"] * OUTPUT_LEN
        return out

    best = brief(d["strategies"][0])
    return {"best": best, "best_collocated": brief(by_name.get(d.get("best_collocated") or "")),
            "best_disaggregated": brief(by_name.get(d.get("best_disaggregated") or "")),
            "num_simulations": d.get("num_simulations"), "method": d.get("settings", {}).get("method")}


def serveplan_estimate_decision(d: dict) -> dict:
    st = d.get("static") or {}
    return {"ttft_s": st.get("ttft_s"), "tpot_s": st.get("itl_s"), "e2e_s": st.get("e2e_s"),
            "prefill_step_s": d.get("total_s")}


def aic_table_top(text: str, title: str) -> dict | None:
    """Row 1 of aiconfigurator's '<title> Top Configurations' table as {column: value}."""
    lines = text.splitlines()
    for i, ln in enumerate(lines):
        if ln.strip().startswith(f"{title} Top Configurations"):
            rows = [r for r in lines[i + 1:i + 8] if r.strip().startswith("|")]
            if len(rows) < 2:
                return None
            head = [c.strip() for c in rows[0].strip().strip("|").split("|")]
            vals = [c.strip() for c in rows[1].strip().strip("|").split("|")]
            return dict(zip(head, vals, strict=False))
    return None


def aic_layout(row: dict | None, mode: str) -> str | None:
    if row is None:
        return None
    if mode == "agg":
        return (f"{row.get('replicas')} x {row.get('parallel')} bs {row.get('bs')} "
                f"({row.get('total_gpus (used)')} GPUs)")
    return (f"{row.get('replicas')} x [{row.get('(p)workers')} x {row.get('(p)parallel')} (p) bs {row.get('(p)bs')} "
            f"+ {row.get('(d)workers')} x {row.get('(d)parallel')} (d) bs {row.get('(d)bs')}] "
            f"({row.get('total_gpus (used)')} GPUs)")


def aic_search_decision(text: str) -> dict:
    m = re.search(r"Best Experiment Chosen:\s*(\w+) at ([\d.,]+) tokens/s/gpu(.*)", text)
    agg, disagg = aic_table_top(text, "agg"), aic_table_top(text, "disagg")
    out = {"best_mode": m.group(1) if m else None,
           "best_tok_s_per_gpu": float(m.group(2).replace(",", "")) if m else None,
           "best_note": m.group(3).strip() if m else None,
           "agg": agg, "disagg": disagg, "agg_layout": aic_layout(agg, "agg"),
           "disagg_layout": aic_layout(disagg, "disagg")}
    if m:
        out["best_layout"] = out["agg_layout"] if m.group(1) == "agg" else out["disagg_layout"]
    return out


def aic_estimate_decision(text: str) -> dict:
    def ms(label: str) -> float | None:
        m = re.search(rf"^\s*{label}:\s*([\d.]+)\s*ms", text, re.M)
        return float(m.group(1)) / 1e3 if m else None

    return {"ttft_s": ms("TTFT"), "tpot_s": ms("TPOT"), "e2e_s": ms("Request Latency")}


# ---- one job --------------------------------------------------------------------------------------------

def run_job(name: str, pairs: int, sp_src: Path) -> dict:
    question, sp_args, aic_args, kind = JOBS[name]
    sp_cmd = [sys.executable, "-m", "serveplan", *sp_args]
    sp_env = dict(os.environ, PYTHONPATH=str(sp_src))
    aic_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    aic_cmd = [str(aic_bin()), *aic_args] if aic_args else None
    n = 1 if name == "job3" else pairs
    rec: dict = {"question": question, "kind": kind, "serveplan_cmd": "serveplan " + " ".join(sp_args),
                 "aiconfigurator_cmd": "aiconfigurator " + " ".join(aic_args) if aic_args else None,
                 "load_before": load_avg(), "started": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": describe(),
                 "serveplan_runs": [], "aiconfigurator_runs": [], "errors": []}
    aic_failed = False
    with tempfile.TemporaryDirectory(prefix="aic-bench-") as cwd:
        for i in range(n):
            r = timed(sp_cmd, sp_env, str(ROOT))
            print(f"{name} pair {i + 1}: serveplan {r['wall_s']:.1f} s wall {r['cpu_s']:.1f} s CPU rc {r['rc']}",
                  flush=True)
            rec["serveplan_runs"].append({k: r[k] for k in ("wall_s", "cpu_s", "rc")})
            if r["rc"] == 0 and "serveplan_decision" not in rec:
                d = json.loads(r["stdout"])
                rec["serveplan_decision"] = (serveplan_estimate_decision(d) if kind == "estimate"
                                             else serveplan_search_decision(d))
            elif r["rc"] != 0:
                rec["errors"].append(f"serveplan run {i + 1}: {error_text(r)}")
            if aic_cmd is None or aic_failed:
                continue
            a = timed(aic_cmd, aic_env, cwd)
            print(f"{name} pair {i + 1}: aiconfigurator {a['wall_s']:.1f} s wall {a['cpu_s']:.1f} s CPU "
                  f"rc {a['rc']}", flush=True)
            rec["aiconfigurator_runs"].append({k: a[k] for k in ("wall_s", "cpu_s", "rc")})
            if a["rc"] != 0:
                rec["errors"].append(f"aiconfigurator run {i + 1} (rc {a['rc']}): {error_text(a)}")
                aic_failed = True  # the same question fails the same way: time serveplan alone
            elif "aiconfigurator_decision" not in rec:
                rec["aiconfigurator_decision"] = (aic_estimate_decision(a["stdout"] + a["stderr"]) if kind == "estimate"
                                                  else aic_search_decision(a["stdout"] + a["stderr"]))
    rec["load_after"] = load_avg()
    ok_sp = [r for r in rec["serveplan_runs"] if r["rc"] == 0]
    ok_aic = [r for r in rec["aiconfigurator_runs"] if r["rc"] == 0]
    for tool, runs in (("serveplan", ok_sp), ("aiconfigurator", ok_aic)):
        if runs:
            rec[f"{tool}_wall_median_s"] = statistics.median(r["wall_s"] for r in runs)
            rec[f"{tool}_cpu_median_s"] = statistics.median(r["cpu_s"] for r in runs)
    paired = [(s, a) for s, a in zip(rec["serveplan_runs"], rec["aiconfigurator_runs"], strict=False)
              if s["rc"] == 0 and a["rc"] == 0]
    if paired:
        rec["pairs"] = len(paired)
        rec["ratio_wall_median"] = statistics.median(s["wall_s"] / a["wall_s"] for s, a in paired)
        rec["ratio_cpu_median"] = statistics.median(s["cpu_s"] / a["cpu_s"] for s, a in paired)
    return rec


# ---- report ---------------------------------------------------------------------------------------------

def f1(x: float | None, fmt: str = ".1f") -> str:
    return "-" if x is None else format(x, fmt)


def ms_text(seconds: float | None, fmt: str = ".1f") -> str:
    return f1(None if seconds is None else seconds * 1e3, fmt)


def sp_decision_text(rec: dict) -> str:
    d = rec.get("serveplan_decision")
    if not d:
        return "failed"
    if rec["kind"] == "estimate":
        return f"TTFT {ms_text(d['ttft_s'])} ms, TPOT {ms_text(d['tpot_s'], '.2f')} ms"
    b = d["best"]
    other = d["best_collocated"] if b["kind"] == "disaggregated" else d["best_disaggregated"]
    lay = (f"TP{b['tp']}" + (f"/DP{b['dp']}" if (b.get("dp") or 1) > 1 else "")
           + (f"/EP{b['ep']}" if (b.get("ep") or 1) > 1 else ""))
    if b["kind"] == "disaggregated":
        lay = (f"{b['num_prefill']} x {lay} (p) + {b['num_decode']} x TP{b['decode_tp']}"
               + (f"/DP{b['decode_dp']}" if (b.get("decode_dp") or 1) > 1 else "")
               + (f"/EP{b['decode_ep']}" if (b.get("decode_ep") or 1) > 1 else "") + " (d)")
    else:
        lay = f"{b['num_collocated']} x {lay}"
    txt = (f"{b['kind']} {b['name']}: {lay}, {b['num_devices']} devices, {b['goodput_per_device']:.3f} req/s/device "
           f"= {b['output_tok_s_per_device']:.0f} output tok/s/device")
    if other:
        txt += f"; best {other['kind']} {other['name']} {other['output_tok_s_per_device']:.0f}"
    return txt


def aic_decision_text(rec: dict) -> str:
    if rec.get("aiconfigurator_cmd") is None:
        return "not run (serveplan only)"
    d = rec.get("aiconfigurator_decision")
    if not d:
        return "failed: " + ("; ".join(rec["errors"]) or "?")
    if rec["kind"] == "estimate":
        return f"TTFT {ms_text(d['ttft_s'])} ms, TPOT {ms_text(d['tpot_s'], '.2f')} ms"
    mode = d.get("best_mode")
    other = "agg" if mode == "disagg" else "disagg"
    other_row = d.get(other) or {}
    return (f"{mode}: {d.get('best_layout')}, {f1(d.get('best_tok_s_per_gpu'))} output tok/s/GPU "
            f"{d.get('best_note')}; best {other} {other_row.get('tokens/s/gpu', '-')}: {d.get(f'{other}_layout')}")


def render(data: dict) -> list[str]:
    jobs = data["jobs"]
    lines = [f"# serveplan vs aiconfigurator {AIC_VERSION}: paired whole-process timing (issue 45 acceptance 2)", "",
             "Generated by `benchmarks/bench_vs_aiconfigurator.py` (command per run below). Each job alternates "
             "the two tools (serveplan first), whole processes from the command line; wall = `time.perf_counter` "
             "around `subprocess.run`, CPU = user + system of the process and its workers (`RUSAGE_CHILDREN` deltas). "
             "Ratio = median over pairs of serveplan / aiconfigurator (below 1: serveplan faster). serveplan "
             "optimize runs with `--jobs 2`; aiconfigurator with its defaults. Decisions: serveplan ranks by P90 "
             "goodput per device from simulated Poisson arrivals (req/s/device x OSL 500 = output tok/s/device); "
             "aiconfigurator by output tokens/s/GPU at the best SLA-meeting concurrency of its static model.", ""]
    lines += ["| job | question | serveplan wall median (s) | aiconfigurator wall median (s) | paired ratio wall "
              "| serveplan CPU median (s) | aiconfigurator CPU median (s) | paired ratio CPU | pairs "
              "| load before -> after |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name in sorted(jobs):
        r = jobs[name]
        ratio_w, ratio_c, pairs = f1(r.get("ratio_wall_median"), ".2f"), f1(r.get("ratio_cpu_median"), ".2f"), \
            str(r.get("pairs", 0))
        if name == "job3" and "job1" in jobs and "serveplan_wall_median_s" in r:
            j1 = jobs["job1"]
            ratio_w = (f"{r['serveplan_wall_median_s'] / j1['serveplan_wall_median_s']:.1f}x job1 serveplan "
                       "(target <= 10x)")
            ratio_c = f"{r['serveplan_cpu_median_s'] / j1['serveplan_cpu_median_s']:.1f}x job1 serveplan"
            pairs = f"{len(r['serveplan_runs'])} run"
        lines.append(f"| {name} | {r['question']} | {f1(r.get('serveplan_wall_median_s'))} | "
                     f"{f1(r.get('aiconfigurator_wall_median_s'))} | {ratio_w} | "
                     f"{f1(r.get('serveplan_cpu_median_s'))} | "
                     f"{f1(r.get('aiconfigurator_cpu_median_s'))} | {ratio_c} | {pairs} | "
                     f"{r['load_before']} -> {r['load_after']} |")
    lines += ["", "## Decisions", "", "| job | serveplan best | aiconfigurator best |", "|---|---|---|"]
    for name in sorted(jobs):
        lines.append(f"| {name} | {sp_decision_text(jobs[name])} | {aic_decision_text(jobs[name])} |")
    lines += ["", "## Runs", ""]
    for name in sorted(jobs):
        r = jobs[name]
        lines += [f"### {name}: {r['question']}", "", f"- started {r['started']}; machine: {r['machine']}",
                  f"- serveplan source: {r.get('serveplan_src', '?')}", f"- `{r['serveplan_cmd']}`"]
        if r.get("aiconfigurator_cmd"):
            lines.append(f"- `{r['aiconfigurator_cmd']}`")
        lines.append("- wall / CPU seconds per run, in order: serveplan "
                     + ", ".join(f"{x['wall_s']:.1f}/{x['cpu_s']:.1f}" + ("" if x["rc"] == 0 else f" (rc {x['rc']})")
                                 for x in r["serveplan_runs"])
                     + ("; aiconfigurator " + ", ".join(f"{x['wall_s']:.1f}/{x['cpu_s']:.1f}"
                                                        + ("" if x["rc"] == 0 else f" (rc {x['rc']})")
                                                        for x in r["aiconfigurator_runs"])
                        if r["aiconfigurator_runs"] else ""))
        for e in r["errors"]:
            lines.append(f"- error: {e}")
        lines.append("")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=",".join(JOBS), help="comma-separated jobs (job1..job6)")
    ap.add_argument("--pairs", type=int, default=3, help="alternating pairs per job (job3: one serveplan run)")
    ap.add_argument("--serveplan-src", type=Path, default=ROOT / "src",
                    help="PYTHONPATH of the serveplan tree to time (default: this tree's src)")
    ap.add_argument("--find-links", default=None, help="directory of already downloaded wheels for pip")
    ap.add_argument("--date", default=time.strftime("%Y%m%d"), help="results file date (merges into that day's)")
    a = ap.parse_args()
    names = [n.strip() for n in a.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in JOBS]
    if unknown:
        raise SystemExit(f"unknown jobs {unknown}; choose from {list(JOBS)}")
    version = ensure_aiconfigurator(a.find_links)
    sp_src = a.serveplan_src.resolve()
    commit = subprocess.run(["git", "-C", str(sp_src), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "?"
    out_json = RESULTS / f"vs-aiconfigurator-{a.date}.json"
    data = json.loads(out_json.read_text()) if out_json.exists() else {"jobs": {}}
    data.update(aiconfigurator_version=version, aiconfigurator_venv=str(AIC_VENV))
    for name in names:
        rec = run_job(name, a.pairs, sp_src)
        rec["serveplan_src"] = f"{sp_src} (commit {commit})"
        data["jobs"][name] = rec
        RESULTS.mkdir(exist_ok=True)
        out_json.write_text(json.dumps(data, indent=1) + "\n")  # after every job: a long run keeps what it has
    text = "\n".join(render(data)) + "\n"
    (RESULTS / f"vs-aiconfigurator-{a.date}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
