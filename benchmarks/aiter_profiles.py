"""Fit the AMD measured GEMM profiles to AMD AITER's tuned-GEMM tables and record held-out errors.

One-time data step (never in tests or CI). AMD's AITER library (``ROCm/aiter``, MIT) keeps, for
every GEMM shape its tuner has seen, the time of the fastest kernel it found on one device:
``aiter/configs/*tuned*gemm*.csv`` and ``aiter/configs/model_configs/*tuned*gemm*.csv``, columns
``gfx, cu_num, M, N, K, ..., us`` (importer: :func:`serveplan.calibrate.importers.import_aiter`).
The tables are read at commit :data:`COMMIT` from a clone of the repository (``--aiter``: a
clone, bare or not; default ``$SERVEPLAN_BENCH_CACHE/aiter``, cloned there when missing), through
``git archive`` into ``$SERVEPLAN_BENCH_CACHE/aiter-<commit>``.

For each device (architecture and compute-unit count -> serveplan hardware id, :data:`DEVICES`)
it

1. imports the rows of that ``gfx`` and ``cu_num``;
2. fits one GEMM curve per format with the fit of the NVIDIA profiles (``calibrate/kernel_fit.py``
   :func:`fit_gemm` and :func:`choose_tile`, the split of :func:`fit_kernel_curves`): on a seeded
   half of the ``(n, k)`` shape groups, reported on every row of the other half (overall and by
   row count ``m``), then on every shape. The activations of AITER's rows arrive quantized, so no
   quantization pass is fitted (``quant_pass=False``). Unlike aiconfigurator's tables, which time
   each shape at a fixed ladder of ``m``, AITER's tables hold whatever ``m`` its users tuned (half
   of the gfx942 FP8 rows have ``m`` above 4096), so the fit is dominated by large ``m``: each
   format's curve is fitted either on every row or on the rows whose ``m`` is a power of two
   (:func:`sampling`), whichever predicts an inner held-out half of the training shapes better
   on the mean over ``m`` ranges of the median |error| (:data:`M_EDGES`; chosen inside the
   training half, like the row tile);
3. reports a second held-out figure by table: each model's table predicted by the curve fitted on
   the rows of shapes that table does not hold (row sampling and tile as fitted on every row);
4. writes ``src/serveplan/specs/data/profiles/measured-<hardware>.yaml``: default-gpu's factors
   for everything without a curve (attention, collectives, norms...), the GEMM curves fitted here.

Writes ``benchmarks/results/aiter-kernel-validation.md`` (the tables of
docs/validation/kernel-curves.md, "AMD: AITER GEMM tables").

Usage: ``python benchmarks/aiter_profiles.py [--aiter PATH] [--devices mi300x,mi355x] [--no-write]``
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from serveplan.calibrate.importers import import_aiter, shape_of  # noqa: E402
from serveplan.calibrate.kernel_fit import (  # noqa: E402
    GEMM_MAX_ROWS,
    GEMM_MIN_DIM,
    choose_tile,
    fit_gemm,
    gemm_group,
    predict_gemm,
    rel_errors,
    select,
    split_by_group,
    summarize,
)
from serveplan.specs.catalog import get_hardware, get_profile  # noqa: E402
from serveplan.specs.kernels import KernelCurves, Provenance  # noqa: E402

CACHE = Path(os.environ.get("SERVEPLAN_BENCH_CACHE", Path.home() / ".cache" / "serveplan-bench"))
REPO = "https://github.com/ROCm/aiter"
#: ROCm/aiter commit read (2026-08-22, "[HIP] Fix and opt inverse rope group quant on gfx1250 (#4806)")
COMMIT = "e4048607a535ace3a2b51ded31b1c8c2d45c0879"
COMMIT_DATE = "2026-08-22"
#: serveplan hardware id -> (gfx architecture, compute units) of the AITER rows fitted. gfx942 with
#: 304 CUs is the MI300X and the MI325X (the tables do not say which; 80 CUs is the MI308X, left
#: out); gfx950 with 256 CUs the MI355X and the MI350X (same die and CUs).
DEVICES = {"mi300x": ("gfx942", 304), "mi355x": ("gfx950", 256)}
FORMATS = ("bf16", "fp8", "fp8_block", "fp4")


def ensure_tables(aiter: Path | None) -> Path:
    """``aiter/configs`` of :data:`COMMIT`, unpacked once under the cache."""
    out = CACHE / f"aiter-{COMMIT[:7]}"
    if (out / "aiter" / "configs").is_dir():
        return out
    repo = aiter or CACHE / "aiter"
    if not repo.exists():
        subprocess.run(["git", "clone", "--filter=blob:none", "--no-checkout", REPO, str(repo)], check=True)
    blob = subprocess.run(["git", "-C", str(repo), "archive", COMMIT, "aiter/configs"], check=True,
                          capture_output=True).stdout
    out.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        tar.extractall(out, filter="data")
    return out


def pct(v: float) -> str:
    return f"{v:.1%}"


def fit_rows(ms, dtype: str) -> list:
    """The rows a format's curve is fitted on (the GEMM filter of ``fit_kernel_curves``)."""
    return [r for r in select(ms, "gemm", dtype=dtype) if r.rows <= GEMM_MAX_ROWS
            and min(float(shape_of(r)["n"]), float(shape_of(r)["k"])) >= GEMM_MIN_DIM]


#: Row-count ranges of the held-out breakdown and of the sampling choice (1-16, 17-64, ..., 4097-16384).
M_EDGES = (1, 17, 65, 257, 1025, 4097, GEMM_MAX_ROWS + 1)


def pow2(rows: list) -> list:
    return [r for r in rows if int(r.rows) & (int(r.rows) - 1) == 0]


def by_m(c, rows: list, hw, dtype: str) -> list[tuple[str, int, float, float]]:
    """(range, rows, median |error|, signed median) of ``c`` on ``rows`` by row count."""
    e = rel_errors(predict_gemm(c, rows, hw, dtype), np.array([r.time_s for r in rows]))
    m = np.array([r.rows for r in rows])
    out = []
    for lo, hi in zip(M_EDGES[:-1], M_EDGES[1:], strict=True):
        sel = (m >= lo) & (m < hi)
        if sel.any():
            out.append((f"{lo}-{hi - 1}", int(sel.sum()), float(np.median(np.abs(e[sel]))), float(np.median(e[sel]))))
    return out


def fit_sampled(rows: list, hw, dtype: str, seed: int, variant: str, **kw) -> tuple:
    sub = rows if variant == "all" else pow2(rows)
    tile = choose_tile(sub, hw, dtype, seed, quant_pass=False)
    return fit_gemm(sub, hw, dtype, tile=tile, quant_pass=False, **kw), len(sub)


def sampling(rows: list, hw, dtype: str, seed: int) -> str:
    """``all`` or ``pow2``: the row sampling whose curve, fitted on a seeded half of the shape
    groups of ``rows``, predicts the other half best (mean over :data:`M_EDGES` ranges of the
    median |error|)."""
    inner = split_by_group(gemm_group(rows), seed + 1)
    fit = [r for r, m in zip(rows, inner, strict=True) if m]
    val = [r for r, m in zip(rows, inner, strict=True) if not m]
    if len(pow2(fit)) < 16 or not val:
        return "all"
    score = {v: float(np.mean([x[2] for x in by_m(fit_sampled(fit, hw, dtype, seed, v)[0], val, hw, dtype)]))
             for v in ("all", "pow2")}
    return min(score, key=score.__getitem__)


def fit_format(rows: list, hw, dtype: str, seed: int, source: str, today: str) -> tuple:
    """(curve on every shape, its sampling, held-out summary, held-out by m) of one format."""
    tr = split_by_group(gemm_group(rows), seed)
    train = [r for r, m in zip(rows, tr, strict=True) if m]
    test = [r for r, m in zip(rows, tr, strict=True) if not m]
    c, n_fit = fit_sampled(train, hw, dtype, seed, sampling(train, hw, dtype, seed))
    e = rel_errors(predict_gemm(c, test, hw, dtype), np.array([r.time_s for r in test]))
    ho = summarize(f"gemm {dtype}", e, n_fit)
    variant = sampling(rows, hw, dtype, seed)
    sub = rows if variant == "all" else pow2(rows)
    curve, _ = fit_sampled(rows, hw, dtype, seed, variant,
                           provenance=Provenance(source=source, fit_date=today, points=len(sub),
                                                 held_out_median=ho.median))
    return curve, variant, ho, by_m(c, test, hw, dtype)


def by_table(ms, hw, dtype: str, tile: int, variant: str) -> list[str]:
    """Each table's rows predicted by the curve fitted on the shapes that table does not hold."""
    rows = fit_rows(ms, dtype)
    groups = gemm_group(rows)
    tables = sorted({shape_of(r)["table"] for r in rows})
    out = []
    for table in tables:
        mine = np.array([shape_of(r)["table"] == table for r in rows])
        held = set(groups[mine].tolist())
        train = [r for r, g in zip(rows, groups, strict=True) if g not in held]
        test = [r for r, m in zip(rows, mine, strict=True) if m]
        if len(test) < 8 or len(train) < 16:
            continue
        c = fit_gemm(train if variant == "all" else pow2(train), hw, dtype, tile=tile, quant_pass=False)
        e = rel_errors(predict_gemm(c, test, hw, dtype), np.array([r.time_s for r in test]))
        a = np.abs(e)
        out.append(f"| {dtype} | {table} | {len(train)} | {len(test)} | {pct(float(np.median(a)))} | "
                   f"{pct(float(np.percentile(a, 90)))} | {float(np.median(e)):+.1%} |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--aiter", type=Path, default=None, help="a clone of ROCm/aiter holding the commit read")
    ap.add_argument("--devices", default=",".join(DEVICES))
    ap.add_argument("--no-write", action="store_true", help="Do not write the bundled profiles.")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    root = ensure_tables(args.aiter)
    today = dt.date.today().isoformat()
    base = get_profile("default-gpu")
    lines = [f"# AMD kernel curves from AITER's tuned-GEMM tables: held-out validation ({today})", "",
             "Generated by `SERVEPLAN_BENCH_CACHE=/work/cache python benchmarks/aiter_profiles.py`. Source: "
             f"{REPO} at {COMMIT} ({COMMIT_DATE}), `aiter/configs/**/*tuned*gemm*.csv`. Median and P90 "
             "|relative error| of each curve fitted on a seeded half of the (n, k) shape groups and evaluated on "
             f"the other half (GEMMs: n, k >= {GEMM_MIN_DIM}, m <= {GEMM_MAX_ROWS}), then by table: each table "
             "predicted by the curve fitted on the shapes it does not hold.", ""]
    for hw_id in args.devices.split(","):
        gfx, cu = DEVICES[hw_id]
        hw = get_hardware(hw_id)
        t0 = time.perf_counter()
        ms = import_aiter(root, cu_num=cu, gfx=gfx, runtime=f"aiter-{COMMIT[:7]}")
        source = (f"ROCm/aiter (MIT) {COMMIT[:7]} ({COMMIT_DATE}) aiter/configs tuned GEMM tables, "
                  f"gfx={gfx} cu_num={cu}")
        gemm, variants, held, slices = {}, {}, [], {}
        for dtype in FORMATS:
            rows = fit_rows(ms, dtype)
            if len(rows) < 32:
                continue
            gemm[dtype], variants[dtype], ho, slices[dtype] = fit_format(rows, hw, dtype, args.seed, source, today)
            held.append(ho)
        curves = KernelCurves(gemm=gemm, source=source, fit_date=today)
        counts = {d: len(fit_rows(ms, d)) for d in FORMATS}
        print(f"{hw_id}: {len(ms.rows)} rows ({counts}; sampling {variants}), fit in {time.perf_counter() - t0:.1f} s")
        lines += [f"## {hw_id} ({gfx}, cu_num {cu})", "", f"Tables read: {ms.metadata['tables']}.", "",
                  "| curve | fit rows | held-out rows | median | P90 |", "|---|---|---|---|---|"]
        lines += [f"| {h.what} | {h.train} | {h.test} | {pct(h.median)} | {pct(h.p90)} |" for h in held]
        lines += ["", "Held-out rows by row count m:", "", "| format | m | rows | median | signed median |",
                  "|---|---|---|---|---|"]
        for dtype, sl in slices.items():
            lines += [f"| {dtype} | {rng} | {n} | {pct(med)} | {sgn:+.1%} |" for rng, n, med, sgn in sl]
        lines += ["", "| format | held-out table | fit rows | table rows | median | P90 | signed median |",
                  "|---|---|---|---|---|---|---|"]
        for dtype, c in curves.gemm.items():
            lines += by_table(ms, hw, dtype, c.tile_rows, variants[dtype])
        lines += ["", "Fitted curves (every shape):", "",
                  "| format | rows sampled | points | t0 (us) | c_max | m_half | w_half | e_m | tile | p_half |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for dtype, c in curves.gemm.items():
            pts = c.provenance.points if c.provenance else 0
            lines.append(f"| {dtype} | {variants[dtype]} | {pts} | {c.overhead_s * 1e6:.2f} | {c.compute_max:.3f} | "
                         f"{c.rows_half:.3g} | {c.weight_half:.3g} | {c.memory:.3f} | {c.tile_rows} | "
                         f"{c.tiles_half:.3g} |")
        lines.append("")
        if not args.no_write:
            formats = ", ".join(curves.gemm)
            prof = base.with_(name=f"measured-{hw_id}", hardware=hw_id, kernels=curves,
                              description=f"vLLM-style stack on {hw.description or hw_id}: GEMM curves ({formats}) "
                                          "fitted to AMD AITER's measured tuned-GEMM tables; attention, collectives "
                                          "and every other factor from default-gpu",
                              source=source,
                              measured_from=f"AITER tuned GEMM tables ({gfx}, cu_num {cu}), {len(ms.rows)} rows, "
                                            f"fitted {today}")
            d = prof.to_dict()
            d["default_for_hardware"] = True
            header = (f"# Measured profile for {hw_id}: written by benchmarks/aiter_profiles.py on {today}.\n"
                      f"# GEMM curves (specs/kernels.py) fitted to the measured kernel times (column `us`) of AMD\n"
                      f"# AITER's tuned-GEMM tables: {REPO} (MIT) at {COMMIT} ({COMMIT_DATE}),\n"
                      f"# aiter/configs/*tuned*gemm*.csv and aiter/configs/model_configs/*tuned*gemm*.csv, rows with\n"
                      f"# gfx={gfx} and cu_num={cu}. Formats: {formats}; a format without a curve (and\n"
                      f"# attention, collectives, norms, element-wise, dispatch) keeps default-gpu's assumed factors.\n"
                      f"# The rows time the GEMM on quantized activations: no quantization pass is fitted or priced.\n"
                      f"# Held-out errors: benchmarks/results/aiter-kernel-validation.md. sd = relative standard\n"
                      f"# deviation of each fitted value.\n")
            out = ROOT / "src" / "serveplan" / "specs" / "data" / "profiles" / f"measured-{hw_id}.yaml"
            out.write_text(header + yaml.safe_dump(d, sort_keys=False, default_flow_style=None, width=120))
            print(f"  wrote {out.relative_to(ROOT)} ({out.stat().st_size / 1024:.1f} KB)")
    res = ROOT / "benchmarks" / "results" / "aiter-kernel-validation.md"
    res.write_text("\n".join(lines) + "\n")
    print(f"wrote {res.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
