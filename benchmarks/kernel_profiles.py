"""Fit the bundled measured profiles to aiconfigurator's per-kernel tables and record held-out errors.

One-time data step (never in tests or CI): the ``aiconfigurator-core`` 0.12.0 wheel (Apache-2.0)
is fetched with ``pip download --no-deps`` into ``$SERVEPLAN_BENCH_CACHE/wheels`` (default
``~/.cache/serveplan-bench``; reused when already there) and its GEMM, attention and NCCL tables are
unpacked to ``$SERVEPLAN_BENCH_CACHE/aiconfigurator``. Reading the parquet tables needs ``pyarrow``
(``pip install 'serveplan[import]'``). Vidur's tables (MIT, ``microsoft/vidur`` repository,
``data/profiling``) are read from ``$SERVEPLAN_BENCH_CACHE/vidur`` when present, as a cross-source check.

For each GPU (aiconfigurator system -> serveplan hardware id) it

1. imports the vLLM tables (GEMM, context and generation attention) and the NCCL tables of the
   system's NCCL version (``systems/<system>.yaml``: ``nccl_version``);
2. fits the curves on half of the shape groups and reports the other half (held out), then fits
   on all rows and writes ``src/serveplan/specs/data/profiles/measured-<hardware>.yaml``;
3. predicts H200 from the H100 curves with only the datasheet peaks changed (no H200 row used),
   and Vidur's H100/A100 GEMMs from the curves fitted to aiconfigurator's tables.

Writes ``benchmarks/results/kernel-validation.md`` (the tables of docs/validation/kernel-curves.md).

Usage: ``python benchmarks/kernel_profiles.py [--systems h100_sxm,h200_sxm] [--no-write]``
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from serveplan.calibrate.importers import import_aiconfigurator, import_vidur, shape_of  # noqa: E402
from serveplan.calibrate.kernel_fit import (  # noqa: E402
    GEMM_MAX_ROWS,
    GEMM_MIN_DIM,
    choose_tile,
    fit_gemm,
    fit_kernel_curves,
    fit_moe_curves,
    gemm_group,
    predict_by_curve,
    predict_gemm,
    select,
    split_by_group,
)
from serveplan.calibrate.selection import (  # noqa: E402
    MOE_BACKENDS,
    moe_backend_rows,
    moe_path,
    one_kernel_per_table,
)
from serveplan.specs.catalog import get_hardware, get_profile  # noqa: E402

CACHE = Path(os.environ.get("SERVEPLAN_BENCH_CACHE", Path.home() / ".cache" / "serveplan-bench"))
WHEEL = "aiconfigurator-core==0.12.0"
#: aiconfigurator system -> serveplan hardware id
SYSTEMS = {"h100_sxm": "h100-sxm", "h200_sxm": "h200", "b200_sxm": "b200", "a100_sxm": "a100-80g", "l40s": "l40s",
           "gb200": "gb200", "b300_sxm": "b300", "gb300": "gb300", "rtx_pro_6000_server": "rtx-pro-6000"}
FRAMEWORK = "vllm"   # the default profile models a vLLM-style stack (default-gpu)
#: other engines whose own GEMM and attention tables go to the profile's engine_kernels
OTHER_ENGINES = ("trtllm", "sglang")
SOURCE = "aiconfigurator-core 0.12.0 (Apache-2.0) {system}: {gemm} GEMM/attention, {nccl}"


def ensure_tables() -> Path:
    """Download the wheel once and unpack its system tables (GEMM, attention, NCCL, system YAMLs)."""
    out = CACHE / "aiconfigurator"
    if (out / "aiconfigurator_core" / "systems" / "data").is_dir():
        return out
    wheels = CACHE / "wheels"
    found = sorted(wheels.glob("aiconfigurator_core-0.12.0-*.whl"))
    if not found:
        wheels.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(wheels), WHEEL], check=True)
        found = sorted(wheels.glob("aiconfigurator_core-0.12.0-*.whl"))
    with zipfile.ZipFile(found[0]) as z:
        for info in z.infolist():
            f = info.filename
            kinds = ("gemm", "attention", "comm", "moe")
            if "/systems/" in f and (f.endswith(".yaml") or any(f"/{k}/" in f for k in kinds)):
                z.extract(info, out)
    return out


def system_info(root: Path, system: str) -> dict:
    return yaml.safe_load((root / "aiconfigurator_core" / "systems" / f"{system}.yaml").read_text())


def runtime_version(ms, kind: str) -> str:
    for r in ms.rows:
        if r.kind == kind:
            return shape_of(r).get("runtime", "")
    return ""


def pct(v: float) -> str:
    return f"{v:.1%}"


def gemm_rows(ms, dtype: str) -> list:
    return [r for r in select(ms, "gemm", dtype=dtype) if r.rows <= GEMM_MAX_ROWS
            and min(float(shape_of(r)["n"]), float(shape_of(r)["k"])) >= GEMM_MIN_DIM]


def breakdown(ms, hw, dtype: str, seed: int) -> list[str]:
    """Held-out signed and absolute errors of a GEMM curve by row count and by weight aspect
    ``n / k`` (the same split, tile choice and fit as the table above)."""
    rows = gemm_rows(ms, dtype)
    tr = split_by_group(gemm_group(rows), seed)
    train = [r for r, m in zip(rows, tr, strict=True) if m]
    test = [r for r, m in zip(rows, tr, strict=True) if not m]
    c = fit_gemm(train, hw, dtype, tile=choose_tile(train, hw, dtype, seed))
    e = predict_gemm(c, test, hw, dtype) / np.array([r.time_s for r in test]) - 1
    m = np.array([r.rows for r in test])
    aspect = np.array([float(shape_of(r)["n"]) / float(shape_of(r)["k"]) for r in test])
    out = [f"Held-out gemm {dtype} by slice (tile {c.tile_rows}, output tiles at half ceiling {c.tiles_half:.3g}, "
           f"quantization pass at {c.quant_memory:.3g} of the bandwidth):", "",
           "| slice | rows | median | signed median |", "|---|---|---|---|"]
    for name, x, edges in (("m", m, (1, 16, 64, 128, 256, 512, 1024, 4096, 8192, GEMM_MAX_ROWS + 1)),
                           ("n/k", aspect, (0, 0.125, 0.5, 2, 8, np.inf))):
        for lo, hi in zip(edges[:-1], edges[1:], strict=True):
            sel = (x >= lo) & (x < hi)
            if sel.any():
                label = f"{name} in [{lo:g}, {hi:g})" if name == "n/k" else f"{name} in [{lo:g}, {hi - 1:g}]"
                out.append(f"| {label} | {int(sel.sum())} | {pct(float(np.median(np.abs(e[sel]))))} | "
                           f"{float(np.median(e[sel])):+.1%} |")
    return out + [""]


def moe_kernels(ms) -> str:
    """``format kernel (runtime)`` of the fused-MoE rows kept (printed per system)."""
    return ", ".join(f"{d} {k} ({v})" for d, v, k in sorted({moe_path(r) for r in ms.rows if r.kind == "moe"}))


def fit_other_engines(root: Path, system: str, hw, today: str, seed: int) -> tuple[dict, dict]:
    """GEMM and attention curves of TensorRT-LLM's and SGLang's own kernel tables (held out too)."""
    curves, held = {}, {}
    for eng in OTHER_ENGINES:
        # the fused-MoE tables: one version and one kernel path per format (one_moe_path_per_format); for
        # TensorRT-LLM that is its default MoE backend (MoeConfig.backend = "CUTLASS")
        kinds = ("gemm", "context_attention", "generation_attention", "moe")
        try:
            ems = import_aiconfigurator(root, system, framework=eng, kinds=kinds)
        except Exception as exc:  # a system without that engine's tables
            print(f"  {eng}: {exc}")
            continue
        ems = one_kernel_per_table(ems)
        src = SOURCE.format(system=system, gemm=runtime_version(ems, "gemm"), nccl="NCCL curves from vLLM's")
        curves[eng], held[eng] = fit_kernel_curves(ems, hw, source=src, fit_date=today, seed=seed,
                                                   collective_runtime="none")
        print(f"  {eng}: {len(ems.rows)} rows ({runtime_version(ems, 'gemm')}; MoE: {moe_kernels(ems) or 'none'})")
    return curves, held


def fit_deepep_experts(root: Path, system: str, hw, today: str, seed: int) -> tuple[dict, list]:
    """The DeepEP decode expert curve (``moe_deepep``, by format) from SGLang's DeepEP expert tables
    (``wideep_generation_moe_perf``: DeepGEMM's masked grouped GEMM on one expert-parallel rank), on
    the systems that have them (H200 and newer); held out by expert-parallel size."""
    try:
        ms = one_kernel_per_table(import_aiconfigurator(root, system, framework="sglang", kinds=("moe_ep",)))
    except Exception as exc:   # no DeepEP table on this system
        print(f"  DeepEP experts: {exc}")
        return {}, []
    held: list = []
    runtimes = sorted({shape_of(r).get("runtime", "") for r in ms.rows})
    src = f"aiconfigurator-core 0.12.0 (Apache-2.0) {system}: {', '.join(runtimes)} DeepEP expert layers"
    curves = fit_moe_curves(ms, hw, "moe_ep", seed, held, source=src, fit_date=today)
    print(f"  DeepEP experts: {len(ms.rows)} rows ({', '.join(runtimes)}): {', '.join(curves) or 'no curve'}")
    return curves, held


def fit_moe_backends(ms, system: str, hw, today: str, seed: int) -> tuple[dict, list]:
    """Curves of the opt-in fused-MoE backends (``selection.MOE_BACKENDS``) that vLLM's tables of
    this system time (``ms``: the tables as imported, before :func:`one_kernel_per_table` keeps one
    path per format), keyed ``<format>@<backend>`` (held out by shape group like the default paths)."""
    curves: dict = {}
    held: list = []
    for backend in MOE_BACKENDS:
        rows = moe_backend_rows(ms, backend)
        if rows.rows:
            src = f"aiconfigurator-core 0.12.0 (Apache-2.0) {system}: {runtime_version(rows, 'moe')} {backend} MoE"
            curves.update(fit_moe_curves(rows, hw, "moe", seed, held, source=src, fit_date=today))
    if curves:
        print(f"  MoE backends: {', '.join(curves)}")
    return curves, held


def h100_predicting_h200(c100, h200, ms200) -> list[str]:
    """The H100 curves predicting every H200 row with only the H200's datasheet peaks."""
    lines = ["## H100 curves predicting H200 (datasheet peaks only, no H200 row used)", "",
             "| kernel | H200 rows | median | P90 |", "|---|---|---|---|"]
    for dt_ in ("bf16", "fp8"):
        rows = gemm_rows(ms200, dt_)
        if dt_ in c100.gemm and rows:
            e = np.abs(predict_gemm(c100.gemm[dt_], rows, h200, dt_) / np.array([r.time_s for r in rows]) - 1)
            lines.append(f"| gemm {dt_} | {len(rows)} | {pct(np.median(e))} | {pct(np.percentile(e, 90))} |")
    for key in c100.attention:
        if key.count("/") != 1:
            continue   # head-size curves: used through their phase's row below
        phase, kv = key.split("/")
        rows = [r for r in select(ms200, "attention", kv_dtype=kv) if r.phase == phase]
        if rows:
            pred = predict_by_curve(c100.attention, rows, h200, kv, phase)
            e = np.abs(pred / np.array([r.time_s for r in rows]) - 1)
            lines.append(f"| {phase} attention, KV {kv} | {len(rows)} | {pct(np.median(e))} | "
                         f"{pct(np.percentile(e, 90))} |")
    return lines + [""]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--no-write", action="store_true", help="Do not write the bundled profiles.")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    root = ensure_tables()
    today = dt.date.today().isoformat()
    base = get_profile("default-gpu")
    lines = [f"# Kernel curves: held-out validation ({today})", "",
             "Generated by `SERVEPLAN_BENCH_CACHE=/work/cache python benchmarks/kernel_profiles.py`. Median and P90 "
             "|relative error| of each curve fitted on a seeded half of the shape groups and evaluated on the other "
             "half (a GEMM's row tile is chosen inside the fitted half) "
             f"(GEMMs: n, k >= {GEMM_MIN_DIM}, m <= {GEMM_MAX_ROWS}; collectives: every other message size, "
             "reported on 1-512 MiB).", ""]
    fitted = {}
    for system in args.systems.split(","):
        hw_id = SYSTEMS[system]
        hw = get_hardware(hw_id)
        info = system_info(root, system)
        nccl = str(info.get("misc", {}).get("nccl_version", ""))
        t0 = time.perf_counter()
        imported = import_aiconfigurator(
            root, system, framework=FRAMEWORK, kinds=("gemm", "context_attention", "generation_attention", "nccl",
                                                      "moe"))
        ms = one_kernel_per_table(imported)
        nccl_runtime = f"nccl-{nccl}"
        if not any(shape_of(r).get("runtime") == nccl_runtime for r in select(ms, "collective")):
            versions = sorted({shape_of(r).get("runtime", "") for r in select(ms, "collective")})
            nccl_runtime = versions[-1] if versions else ""
        source = SOURCE.format(system=system, gemm=runtime_version(ms, "gemm"), nccl=nccl_runtime)
        curves, held = fit_kernel_curves(ms, hw, source=source, fit_date=today, seed=args.seed,
                                         collective_runtime=nccl_runtime)
        deepep, deepep_held = fit_deepep_experts(root, system, hw, today, args.seed)
        if deepep:
            curves = dataclasses.replace(curves, moe_deepep=deepep)
            held += deepep_held
        backends, backend_held = fit_moe_backends(imported, system, hw, today, args.seed)
        if backends:
            curves = dataclasses.replace(curves, moe={**curves.moe, **backends})
            held += backend_held
        fitted[system] = (hw, curves, ms)
        print(f"{system}: {len(ms.rows)} rows, fit in {time.perf_counter() - t0:.1f} s "
              f"(MoE: {moe_kernels(ms) or 'none'})")
        engine_curves, engine_held = fit_other_engines(root, system, hw, today, args.seed)
        lines += [f"## {hw_id} (aiconfigurator `{system}`; {runtime_version(ms, 'gemm')}, {nccl_runtime})", "",
                  "| curve | fit rows | held-out rows | median | P90 |", "|---|---|---|---|---|"]
        lines += [f"| {h.what} | {h.train} | {h.test} | {pct(h.median)} | {pct(h.p90)} |" for h in held]
        for eng, eh in engine_held.items():
            lines += [f"| {eng}: {h.what} | {h.train} | {h.test} | {pct(h.median)} | {pct(h.p90)} |" for h in eh]
        lines.append("")
        if system in ("h100_sxm", "h200_sxm") and "fp8" in curves.gemm:
            lines += breakdown(ms, hw, "fp8", args.seed)
        if not args.no_write:
            prof = base.with_(name=f"measured-{hw_id}", hardware=hw_id, kernels=curves, engine_kernels=engine_curves,
                              description=f"vLLM-style stack on {hw.description or hw_id}: kernel curves fitted to "
                                          f"measured GEMM, attention and NCCL tables; other factors from default-gpu",
                              source=source,
                              measured_from=f"aiconfigurator {system} tables ({FRAMEWORK}, {nccl_runtime}), "
                                            f"{len(ms.rows)} rows, fitted {today}")
            d = prof.to_dict()
            d["default_for_hardware"] = True
            header = (f"# Measured profile for {hw_id}: written by benchmarks/kernel_profiles.py on {today}.\n"
                      f"# Kernel curves (specs/kernels.py) fitted to {source}.\n"
                      f"# Operators without a curve (norms, element-wise, cache writes, dispatch) keep default-gpu's\n"
                      f"# assumed factors. sd = relative standard deviation of each fitted value.\n")
            out = ROOT / "src" / "serveplan" / "specs" / "data" / "profiles" / f"measured-{hw_id}.yaml"
            out.write_text(header + yaml.safe_dump(d, sort_keys=False, default_flow_style=None, width=120))
            print(f"  wrote {out.relative_to(ROOT)} ({out.stat().st_size / 1024:.1f} KB)")

    # H100 -> H200 with datasheet ratios only
    if "h100_sxm" in fitted and "h200_sxm" in fitted:
        lines += h100_predicting_h200(fitted["h100_sxm"][1], *fitted["h200_sxm"][::2])

    # Vidur's GEMMs predicted by the curves fitted to aiconfigurator (another source, other kernels)
    vidur_dir = CACHE / "vidur"
    if vidur_dir.is_dir():
        lines += ["## Vidur operator profiles predicted by the aiconfigurator-fitted curves", "",
                  "Vidur (MIT) times the projections of whole model layers in fp16 (CUDA events, "
                  "`data/profiling/compute/<gpu>/<model>/mlp.csv`); here the bf16 GEMM curve of the same GPU "
                  "predicts them.", "",
                  "| GPU | Vidur GEMM rows | median | P90 |", "|---|---|---|---|"]
        for gpu, system in (("h100", "h100_sxm"), ("a100", "a100_sxm")):
            if system not in fitted:
                continue
            hw, curves, _ = fitted[system]
            vs = import_vidur(vidur_dir, gpu=gpu)
            rows = [r for r in select(vs, "gemm") if r.rows <= GEMM_MAX_ROWS]
            if rows and "bf16" in curves.gemm:
                e = np.abs(predict_gemm(curves.gemm["bf16"], rows, hw, "bf16") / np.array([r.time_s for r in rows]) - 1)
                lines.append(f"| {gpu} | {len(rows)} | {pct(np.median(e))} | {pct(np.percentile(e, 90))} |")
        lines.append("")
    res = ROOT / "benchmarks" / "results" / "kernel-validation.md"
    res.write_text("\n".join(lines) + "\n")
    print(f"wrote {res.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
