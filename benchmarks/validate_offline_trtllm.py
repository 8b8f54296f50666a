"""Offline throughput against TensorRT-LLM's published v1.0 figures (``trtllm-bench throughput``).

The measurements are NVIDIA's own: ``docs/source/performance/perf-overview.md`` of TensorRT-LLM
v1.0 (Apache-2.0), transcribed to ``benchmarks/data/trtllm_perf_overview_v1.0.csv`` with the
commit they were read from. Each row is one ``trtllm-bench throughput`` run: every request of a
synthetic dataset with fixed prompt and output lengths queued at once (an offline run), the
PyTorch backend, NVIDIA's ModelOpt FP8 or NVFP4 checkpoint (FP8 KV cache), and the reported
"Total Output Throughput (tokens/sec)" of the whole system. The dense-model tables are covered:
Llama-3.1-8B, Llama-3.3-70B (Llama-3.1-70B's architecture) and Llama-3.1-405B on H100, H200, B200,
GB200 and RTX PRO 6000 at the overview's TP/PP layouts (146 rows), and the MoE tables' one-GPU
columns (Qwen3-30B-A3B on B200, GB200 and RTX PRO 6000, Llama-4-Scout on B200 and GB200: 50 rows);
on more GPUs the overview does not give the expert-parallel size, so those columns are left out.

How a row is predicted (nothing here is fitted; no constant was chosen on these rows):

* ``serveplan.simulate`` with ``offline=True`` and the ``trtllm`` engine file, the row's model,
  hardware (its bundled measured profile where it has one), TP/PP, weight format and an FP8 KV cache;
  ``num_requests`` as the overview's table gives them (1,000-30,000).
* The batch limits are trtllm-bench's, not the LLM API's defaults: when neither is given,
  ``trtllm-bench`` sizes ``max_batch_size`` and ``max_num_tokens`` from the KV cache it expects
  (``tensorrt_llm/bench/build/tuning.py`` ``calc_engine_setting`` and ``finetune_setting``) and,
  with chunked prefill off, raises ``max_num_tokens`` to at least the longest prompt plus the batch
  size (``tensorrt_llm/bench/benchmark/utils/general.py`` ``get_settings``). :func:`bench_settings`
  applies that rule to a row. Its inputs are the GPU memory NVML reports (the catalog's driver total),
  the checkpoint's parameter count as stored in its safetensors files (NVFP4 linear weights are
  packed two to a byte with one FP8 scale per 16: :func:`checkpoint_param_count`) and the
  ``--kv_cache_free_gpu_mem_fraction`` default 0.90, which is also the share of the free memory the
  runtime gives the KV cache (the overview says many runs used 0.95: ``--kv-fraction`` shows it).
  The rule lives in :mod:`serveplan.validate.trtllm_bench`, which ``serveplan validate`` applies to
  the same rows (``benchmarks/trtllm_overview_rows.py`` writes them into its data).

Usage::

    python benchmarks/validate_offline_trtllm.py               # all 196 rows, writes the results JSON
    python benchmarks/validate_offline_trtllm.py --kv-fraction 0.95 --out /tmp/o95.json
    python benchmarks/validate_offline_trtllm.py --engine-defaults   # LLM API defaults instead

Writes ``benchmarks/results/offline_trtllm_validation.json`` and prints the tables of
docs/validation/offline-trtllm.md ("Offline throughput against TensorRT-LLM's published figures").
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

DATA = ROOT / "benchmarks" / "data" / "trtllm_perf_overview_v1.0.csv"
OUT = ROOT / "benchmarks" / "results" / "offline_trtllm_validation.json"

# trtllm-bench's rule, shared with serveplan validate (imported after the path insert)
from serveplan.validate import trtllm_bench  # noqa: E402
from serveplan.validate.trtllm_bench import BYTES_PER_ELEM, KV_FRACTION, checkpoint_param_count  # noqa: E402,F401


@dataclass(frozen=True)
class Row:
    model: str
    checkpoint: str
    hardware: str
    gpus: int
    tp: int
    pp: int
    dtype: str
    isl: int
    osl: int
    num_requests: int
    output_tok_s: float

    @property
    def key(self) -> str:
        return f"{self.model} {self.hardware} tp{self.tp}pp{self.pp} {self.dtype} {self.isl}/{self.osl}"


def load_rows(path: Path = DATA) -> list[Row]:
    with path.open() as f:
        lines = [ln for ln in f if not ln.startswith("#")]
    out = []
    for r in csv.DictReader(lines):
        out.append(Row(model=r["model"], checkpoint=r["checkpoint"], hardware=r["hardware"], gpus=int(r["gpus"]),
                       tp=int(r["tp"]), pp=int(r["pp"]), dtype=r["dtype"], isl=int(r["isl"]), osl=int(r["osl"]),
                       num_requests=int(r["num_requests"]), output_tok_s=float(r["output_tok_s"])))
    return out


def bench_settings(row: Row, kv_fraction: float = KV_FRACTION) -> tuple[int, int]:
    """``max_batch_size`` and ``max_num_tokens`` trtllm-bench chooses for ``row``
    (:func:`serveplan.validate.trtllm_bench.bench_settings`, shared with ``serveplan validate``)."""
    from serveplan import get_hardware, get_model

    return trtllm_bench.bench_settings(get_model(row.model), get_hardware(row.hardware), tp=row.tp, pp=row.pp,
                                       dtype=row.dtype, isl=row.isl, osl=row.osl, kv_fraction=kv_fraction)


def predict(row: Row, *, kv_fraction: float = KV_FRACTION, engine_defaults: bool = False) -> dict[str, Any]:
    """Offline simulation of one row: output tokens/s of the whole system."""
    import dataclasses

    from serveplan import get_hardware, get_model, get_profile
    from serveplan.sim import SimulationConfig, Workload, simulate
    from serveplan.specs.catalog import get_engine

    t0 = time.perf_counter()
    spec = get_engine("trtllm")
    settings: dict[str, int] = {}
    if not engine_defaults:
        max_bs, max_tokens = bench_settings(row, kv_fraction)
        settings = {"max_batch": max_bs, "token_budget": max_tokens}
        spec = dataclasses.replace(spec, memory_fraction=kv_fraction)
    cfg = SimulationConfig(
        model=get_model(row.model), hardware=get_hardware(row.hardware), profile=get_profile(None, row.hardware),
        engine=spec, strategy="1m", tp=row.tp, pp=row.pp, dtype=row.dtype, kv_dtype="fp8",
        offline=True, rate=None, workload=Workload.fixed(row.isl, row.osl, num_requests=row.num_requests),
        **settings)
    res = simulate(cfg)
    return {"pred_tok_s": res.output_tokens_per_s, "makespan_s": res.makespan_s,
            "max_batch": res.config.fleet.max_batch, "token_budget": res.config.fleet.first.batching.token_budget,
            "preemptions": res.num_preemptions, "completed": res.num_completed,
            "seconds": time.perf_counter() - t0}


def _one(args: tuple[Row, float, bool]) -> tuple[str, dict[str, Any]]:
    row, frac, defaults = args
    try:
        return row.key, predict(row, kv_fraction=frac, engine_defaults=defaults)
    except Exception as exc:  # a row the simulator rejects is reported, not fatal
        return row.key, {"error": f"{type(exc).__name__}: {exc}"[:300]}


def summary(errs: list[float]) -> str:
    if not errs:
        return "- | - | -"
    med = statistics.median(abs(e) for e in errs)
    within = sum(abs(e) <= 0.25 for e in errs) / len(errs)
    return f"{med:.1%} | {within:.0%} | {statistics.median(errs):+.1%}"


def report(results: list[dict[str, Any]]) -> list[str]:
    ok = [r for r in results if "error" not in r]
    out = [f"{len(ok)} of {len(results)} rows predicted; output tokens/s of the whole system, "
           f"error = predicted / measured - 1.", "",
           "| rows | n | median abs error | within 25% | signed median |", "|---|---|---|---|---|"]
    out.append(f"| all | {len(ok)} | {summary([r['err'] for r in ok])} |")
    from serveplan import get_model
    moe = {m: get_model(m).is_moe for m in {r["model"] for r in ok}}
    for label, sel in (("dense models", False), ("MoE models (one GPU)", True)):
        errs = [r["err"] for r in ok if moe[r["model"]] is sel]
        if errs:
            out.append(f"| {label} | {len(errs)} | {summary(errs)} |")
    groups: dict[str, list[float]] = {}
    for r in ok:
        lay = f"TP{r['tp']}" + (f" PP{r['pp']}" if r["pp"] > 1 else "")
        groups.setdefault(f"{r['model']}, {r['hardware']} {lay} {r['dtype'].upper()}", []).append(r["err"])
    for k in sorted(groups):
        out.append(f"| {k} | {len(groups[k])} | {summary(groups[k])} |")
    by_len: dict[str, list[float]] = {}
    for r in ok:
        by_len.setdefault(f"{r['isl']}/{r['osl']}", []).append(r["err"])
    out += ["", "| ISL/OSL | n | median abs error | within 25% | signed median |", "|---|---|---|---|---|"]
    for k in sorted(by_len, key=lambda s: tuple(int(x) for x in s.split("/"))):
        out.append(f"| {k} | {len(by_len[k])} | {summary(by_len[k])} |")
    bad = [r for r in results if "error" in r]
    if bad:
        out += ["", "Rows the simulator rejected:"] + [f"* {r['key']}: {r['error']}" for r in bad]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--kv-fraction", type=float, default=KV_FRACTION,
                    help="trtllm-bench --kv_cache_free_gpu_mem_fraction (default 0.90)")
    ap.add_argument("--engine-defaults", action="store_true",
                    help="the LLM API's max_batch_size / max_num_tokens instead of trtllm-bench's heuristic")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    rows = load_rows()
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as ex:
        got = dict(ex.map(_one, [(r, args.kv_fraction, args.engine_defaults) for r in rows]))
    results = []
    for r in rows:
        p = got[r.key]
        rec = {"key": r.key, **asdict(r), **p}
        if "error" not in p:
            rec["err"] = p["pred_tok_s"] / r.output_tok_s - 1
        results.append(rec)
    wall = time.perf_counter() - t0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"source": str(DATA.relative_to(ROOT)), "kv_fraction": args.kv_fraction,
                                    "engine_defaults": args.engine_defaults, "seconds": wall,
                                    "rows": results}, indent=1) + "\n")
    print("\n".join(report(results)))
    print(f"\n{len(rows)} rows in {wall:.0f} s with {args.jobs} processes; results in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
