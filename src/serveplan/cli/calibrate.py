"""``serveplan profile``, ``serveplan calibrate`` and ``serveplan compare``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from serveplan.cli.base import app, console, emit_json, handle_errors, parse_int_list
from serveplan.commands.checks import check_output_file
from serveplan.errors import SpecError
from serveplan.specs.profile import Phase


def _pairs(batches: str, lengths: str, what: str) -> list[tuple[int, int]]:
    bs = parse_int_list(batches, f"{what}-batches")
    return [(b, s) for b in bs for s in parse_int_list(lengths, f"{what}-lengths")]


@app.command("profile")
@handle_errors
def profile_cmd(
    device: str = typer.Option("cpu", "--device", help="cpu, cuda or cuda:N."),
    out: Path = typer.Option(Path("measurements.csv"), "--out", "-o", help="Measurement CSV to write."),
    threads: int | None = typer.Option(
        1, "--threads", help="torch CPU threads (recorded with the data; 0: torch default)."),
    dtype: str = typer.Option("fp32", "--dtype", help="fp32 (CPU), bf16 or fp16."),
    model: str | None = typer.Option(
        None, "--model", "-m", help="Sweep this model's layer shapes instead of the generic ones."),
    quick: bool = typer.Option(
        False, "--quick", help="Reduced sweep (one shape, few sizes): seconds, for smoke tests."),
    repeats: int | None = typer.Option(None, "--repeats", help="Timed repetitions per shape (median kept)."),
    clock: str = typer.Option(
        "auto", "--clock", help="cpu (process CPU time, one CPU thread only), wall, or auto (cpu when it applies)."),
    hardware_out: Path | None = typer.Option(
        None, "--hardware-out", help="Also write a hardware YAML with the measured peaks."),
    name: str = typer.Option("cpu-host", "--name", help="Device name used in --hardware-out."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
) -> None:
    """Time GEMMs, memory-bound kernels, attention, launches and tiny modules on one device
    (needs torch: pip install 'serveplan[profile]'). Writes one CSV row per shape, with the
    device, torch version and thread count in its header."""
    check_output_file(out, "--out")
    if hardware_out is not None:
        check_output_file(hardware_out, "--hardware-out")
    import csv
    import os

    from serveplan.calibrate.measurements import COLUMNS, Measurement
    from serveplan.calibrate.profile import (
        ProfileConfig,
        hardware_yaml_from_measurements,
        profile_device,
        shape_from_model,
    )

    changes: dict[str, Any] = {"device": device, "threads": threads or None, "dtype": dtype, "clock": clock}
    if repeats is not None:
        changes["repeats"] = repeats
    if model:
        from serveplan.specs.catalog import get_model

        changes["shapes"] = (shape_from_model(get_model(model)),)
    cfg = ProfileConfig.quick(**changes) if quick else ProfileConfig(**changes)
    partial = out.with_name(out.name + ".partial")
    with partial.open("w") as fh:  # each measurement saved as it is taken: an interrupted run keeps them
        fh.write("# partial: rows measured so far; the finished run replaces this file with " + out.name + "\n")
        writer = csv.DictWriter(fh, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        fh.flush()

        def save_row(row: Measurement) -> None:
            writer.writerow(row.to_row())
            fh.flush()

        ms = profile_device(cfg, progress=progress, on_row=save_row)
    tmp = out.with_name(out.name + ".tmp")
    ms.save(tmp)
    os.replace(tmp, out)  # atomic: a reader never sees half a file
    partial.unlink(missing_ok=True)
    md = ms.metadata
    typer.echo(f"wrote {len(ms.rows)} measurements to {out} ({md['device_name']}, torch {md['torch_version']}, "
               f"{md['threads'] or '-'} threads); best GEMM {float(md['peak_flops_measured']) / 1e9:.1f} GFLOP/s, "
               f"best copy/GEMV {float(md['peak_bandwidth_measured']) / 1e9:.1f} GB/s")
    if hardware_out:
        hardware_out.write_text(hardware_yaml_from_measurements(ms, name))
        typer.echo(f"wrote hardware {name!r} with the measured peaks to {hardware_out}")


@app.command("calibrate")
@handle_errors
def calibrate_cmd(
    measurements: Path = typer.Argument(
        ..., help="CSV written by serveplan profile (with --from: the directory of the tables)."),
    hardware: str = typer.Option(
        ..., "--hardware", "-H", help="Catalog id or hardware YAML (e.g. from profile --hardware-out)."),
    out: Path = typer.Option(Path("profile.yaml"), "--out", "-o", help="Profile YAML to write."),
    model: str = typer.Option(
        "llama-3.2-1b", "--model", "-m", help="Reference model whose steps the factors are fitted for."),
    base_profile: str | None = typer.Option(
        None, "--base-profile", help="Profile whose modelling choices are kept (default: default-gpu)."),
    attention_impl: str | None = typer.Option(
        None, "--attention-impl", help="fused or eager (default: the base profile's)."),
    dispatch_hidden_in_decode: bool = typer.Option(
        False, "--dispatch-hidden-in-decode/--dispatch-visible", help="Decode replays captured graphs (no dispatch)."),
    name: str | None = typer.Option(None, "--name", help="Profile name (default: the output file's stem)."),
    dtype: str | None = typer.Option(None, "--dtype", help="Dtype of the peaks to use (default: the measurements')."),
    form: str = typer.Option("auto", "--form", help="Kernel model: auto, tied (one MFU/MBU per phase) or family."),
    matmul: str = typer.Option(
        "auto", "--matmul",
        help="GEMMs in the profile: auto (size curve and attention factors when held-out error is clearly "
             "lower), constant, or curve."),
    folds: int = typer.Option(5, "--folds", help="Cross-validation folds (0 or 1: none)."),
    prefill_batches: str = typer.Option("1,2,4,8", "--prefill-batches", help="Projection grid: prefill batch sizes."),
    prefill_lengths: str = typer.Option(
        "128,256,512,1024,2048", "--prefill-lengths", help="Projection grid: prompt lengths."),
    decode_batches: str = typer.Option(
        "1,2,4,8,16,32,64", "--decode-batches", help="Projection grid: decode batch sizes."),
    decode_lengths: str = typer.Option(
        "128,256,512,1024,2048", "--decode-lengths", help="Projection grid: decode contexts."),
    samples: int = typer.Option(20, "--samples", help="Draws of the kernel-fit uncertainty propagated to the profile."),
    seed: int = typer.Option(0, "--seed", help="Seed of cross-validation folds and draws."),
    max_nfev: int | None = typer.Option(None, "--max-nfev", help="Cap on fit evaluations (default: scipy's)."),
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    source: str | None = typer.Option(
        None, "--from", help="Import public kernel tables instead: aiconfigurator (unpacked aiconfigurator-core "
                             "wheel) or vidur (its repository's data/profiling)."),
    system: str | None = typer.Option(
        None, "--system", help="--from aiconfigurator: system folder (default: from --hardware, e.g. h100_sxm); "
                               "--from vidur: GPU folder (h100, a100)."),
    framework: str | None = typer.Option(
        "vllm", "--framework", help="--from aiconfigurator: runtime whose GEMM/attention tables are used "
                                    "(vllm, sglang, trtllm)."),
    measurements_out: Path | None = typer.Option(
        None, "--measurements-out", help="--from: also write the imported rows as a measurement CSV."),
) -> None:
    """Fit MFU, MBU and dispatch times to a measurement file by bounded least squares, report
    residuals, held-out error and parameter uncertainty, and write a profile YAML usable with
    --profile by estimate, simulate, optimize and offload. With --from aiconfigurator DIR or
    --from vidur DIR, import those per-kernel tables and fit the shape-aware kernel curves
    (GEMM, attention, collectives) instead."""
    check_output_file(out, "--out")  # before any fitting: a long fit never ends on a missing folder
    if measurements_out is not None:
        check_output_file(measurements_out, "--measurements-out")
    if source is not None:
        _calibrate_from(source, measurements, hardware=hardware, out=out, system=system, framework=framework,
                        base_profile=base_profile, name=name, seed=seed, measurements_out=measurements_out,
                        json_out=json_out)
        return
    from serveplan.calibrate.fit import calibrate, profile_yaml
    from serveplan.calibrate.measurements import read_measurements
    from serveplan.specs.catalog import get_hardware, get_model, get_profile
    from serveplan.specs.profile import AttentionImpl

    ms = read_measurements(measurements)
    hw = get_hardware(hardware)
    ref = get_model(model)
    base = get_profile(base_profile or "default-gpu").with_(dispatch_hidden_in_decode=dispatch_hidden_in_decode)
    if attention_impl:
        try:
            base = base.with_(attention_impl=AttentionImpl(attention_impl))
        except ValueError:
            raise SpecError(f"attention-impl={attention_impl!r}; expected one of: fused, eager") from None
    cal = calibrate(ms, hw, ref, base=base, name=name or out.stem, dtype=dtype, form=form, matmul=matmul, folds=folds,
                    prefill_grid=_pairs(prefill_batches, prefill_lengths, "prefill"),
                    decode_grid=_pairs(decode_batches, decode_lengths, "decode"), samples=samples, seed=seed,
                    max_nfev=max_nfev, where=str(measurements))
    text = profile_yaml(cal, model)   # built fully before anything is written
    out.write_text(text)
    if json_out:
        emit_json({"profile": cal.profile.to_dict(), **cal.summary(), "out": str(out)})
        return
    _print_report(cal, out)


#: serveplan hardware id -> aiconfigurator system folder
AICONFIGURATOR_SYSTEMS = {"h100-sxm": "h100_sxm", "h200": "h200_sxm", "b200": "b200_sxm", "a100-80g": "a100_sxm",
                          "a100-40g": "a100_sxm", "l40s": "l40s"}


def _calibrate_from(source: str, directory: Path, *, hardware: str, out: Path, system: str | None,
                    framework: str | None, base_profile: str | None, name: str | None, seed: int,
                    measurements_out: Path | None, json_out: bool) -> None:
    """``calibrate --from aiconfigurator|vidur DIR``: import, fit the kernel curves, write a profile."""
    import datetime as dt

    import yaml

    from serveplan.calibrate.importers import SOURCES, import_aiconfigurator, import_vidur
    from serveplan.calibrate.kernel_fit import fit_kernel_curves
    from serveplan.calibrate.selection import one_kernel_per_table
    from serveplan.specs.catalog import get_hardware, get_profile

    hw = get_hardware(hardware)
    if source == "aiconfigurator":
        sysname = system or AICONFIGURATOR_SYSTEMS.get(hw.name)
        if sysname is None:
            raise SpecError(f"--system is needed: no aiconfigurator system is known for hardware {hw.name!r}; "
                            f"known: {', '.join(f'{k} ({v})' for k, v in AICONFIGURATOR_SYSTEMS.items())}")
        # one kernel per table, as the bundled profiles are fitted (calibrate/selection.py)
        ms = one_kernel_per_table(import_aiconfigurator(directory, sysname, framework=framework or None))
        label = f"aiconfigurator {sysname}" + (f" ({framework})" if framework else "")
    elif source == "vidur":
        ms = import_vidur(directory, gpu=system)
        label = "vidur" + (f" {system}" if system else "")
        runtimes = sorted({r.name.rpartition("runtime=")[2] for r in ms.rows if r.kind == "collective"})
        # Vidur measures each GPU in two network setups; the DGX one (NVSwitch) is the node's link
        coll_runtime = next((r for r in runtimes if r.endswith("_dgx")), runtimes[0] if runtimes else None)
    else:
        raise SpecError(f"--from {source!r}; expected one of: {', '.join(SOURCES)}")
    if source == "aiconfigurator":
        runtimes = sorted({r.name.rpartition("runtime=")[2] for r in ms.rows if r.kind == "collective"})
        coll_runtime = runtimes[-1] if runtimes else None   # the newest NCCL measured
    if measurements_out:
        ms.save(measurements_out)
    today = dt.date.today().isoformat()
    curves, held = fit_kernel_curves(ms, hw, source=f"{label}: {ms.metadata.get('source', '')}",
                                     fit_date=today, seed=seed, gemm_dtypes=("bf16", "fp16", "fp8", "fp4"),
                                     collective_runtime=coll_runtime)
    if not (curves.gemm or curves.attention or curves.collectives):
        raise SpecError(f"{directory}: too few rows to fit any kernel curve for {label}")
    base = get_profile(base_profile or "default-gpu")
    prof = base.with_(name=name or out.stem, hardware=hw.name, kernels=curves, source=ms.metadata.get("source", ""),
                      measured_from=f"{label}, {len(ms.rows)} rows, fitted {today}")
    text = yaml.safe_dump(prof.to_dict(), sort_keys=False)
    out.write_text(text)
    if json_out:
        emit_json({"profile": prof.to_dict(), "rows": len(ms.rows), "held_out": [h.to_dict() for h in held],
                   "out": str(out)})
        return
    t = Table(title=f"Kernel curves for {hw.name} from {label} ({len(ms.rows)} rows): held-out |relative error| "
                    f"(fitted on half of the shapes, evaluated on the other half)")
    for col in ("curve", "fit rows", "held-out rows", "median", "P90"):
        t.add_column(col, justify="left" if col == "curve" else "right")
    for h in held:
        t.add_row(h.what, str(h.train), str(h.test), f"{h.median:.1%}", f"{h.p90:.1%}")
    con = console()
    con.print(t)
    con.print(f"wrote {out}" + (f" and {measurements_out}" if measurements_out else ""))


def _print_report(cal: object, out: Path) -> None:
    from serveplan.calibrate.fit import Calibration

    assert isinstance(cal, Calibration)
    con = console()
    p, s = cal.profile, cal.summary()
    curve = cal.matmul == "curve"
    model = "GEMMs: size curve; MFU/MBU: streaming kernels" if curve else f"kernel model: {cal.chosen}"
    t = Table(title=f"Calibrated profile {p.name} for {p.hardware} ({model})")
    for col in ("parameter", "value", "sd"):
        t.add_column(col, justify="left" if col == "parameter" else "right")
    for ph in Phase:
        e = p.efficiency(ph)
        keys = [("compute", "MFU"), ("memory", "MBU")]
        if curve:
            keys += [("attention_compute", "attention MFU"), ("attention_memory", "attention MBU")]
        for k, label in keys:
            sd = p.uncertainty.get(f"{ph}.{k}")
            t.add_row(f"{ph} {label}", f"{getattr(e, k):.3f}", f"{sd:.3f}" if sd is not None else "-")
        if curve and ph in p.matmul_size_curve:
            rows, ratios = p.matmul_size_curve[ph]
            sd = p.uncertainty.get(f"{ph}.matmul_size_curve")
            t.add_row(f"{ph} GEMM time / roofline at rows " + ",".join(f"{r:g}" for r in rows),
                      " ".join(f"{v:.2f}" for v in ratios), f"{sd:.1%}" if sd is not None else "-")
    for m, v in p.dispatch_s.items():
        sd = p.uncertainty.get(f"dispatch.{m.value}")
        t.add_row(f"dispatch {m.value} (us)", f"{v * 1e6:.1f}", f"{sd * 1e6:.1f}" if sd is not None else "-")
    con.print(t)
    kt = Table(title="Kernel fit (per phase and family: MFU/MBU as fractions of the hardware peaks)")
    for col in ("parameter", "value", "sd"):
        kt.add_column(col, justify="left" if col == "parameter" else "right")
    for name, v in s["kernel_params"].items():
        sd = s["kernel_sd"].get(name)
        scale, unit = (1e6, " (us)") if name.startswith(("launch", "dispatch")) else (1.0, "")
        kt.add_row(name + unit, f"{v * scale:.3f}", f"{sd * scale:.3f}" if sd is not None else "not identified")
    con.print(kt)
    r = s["kernel_residuals"]
    con.print(f"kernel residuals: median |rel| {r['median_abs']:.1%}, P90 {r['p90_abs']:.1%}, max {r['max_abs']:.1%} "
              f"over {r['n']} rows (tied model: median {s['tied_residuals']['median_abs']:.1%})")
    if "cross_validation" in s:
        cv = s["cross_validation"]
        labels = {"tied": "constants per phase", "family": "constants per family", "curve": "GEMM size curve"}
        con.print(f"held-out ({cv['folds']}-fold) |rel| error of the kernel rows, median (P90): "
                  + ", ".join(f"{labels[k]} {v:.1%} ({cv['p90_abs'][k]:.1%})" for k, v in cv["median_abs"].items()))
        if cv.get("matmul_median_abs"):
            con.print("  GEMM rows alone (where the size curve is judged), median: "
                      + ", ".join(f"{labels[k]} {v:.1%}" for k, v in cv["matmul_median_abs"].items()))
    con.print("GEMMs in the profile: " + ("size curve (matmul_size_curve) with per-phase attention factors"
                                          if curve else "constant per-phase factors"))
    for ph, e in s["projection_error"].items():
        con.print(f"{ph}: constant factors{' (not written)' if curve else ''} vs composed kernel model over "
                  f"{e['n']} steps: median |rel| {e['median_abs']:.1%}, max {e['max_abs']:.1%}")
    con.print(f"wrote {out}")


@app.command("compare")
@handle_errors
def compare_cmd(
    result: Path = typer.Argument(..., help=(
        "vLLM serving benchmark result JSON (vllm bench serve --save-result; with --save-detailed the "
        "requests are compared one by one, without it the summary's means and percentiles).")),
    model: str = typer.Option(..., "--model", "-m", help="Catalog id or path to a HF config.json."),
    hardware: str = typer.Option(..., "--hardware", "-H", help="Catalog id or hardware YAML path."),
    profile: str | None = typer.Option(None, "--profile", "-p", help="Efficiency profile id or YAML path."),
    engine: str = typer.Option("vllm", "--engine", "-e", help=(
        "Engine whose scheduler and defaults apply, as in `simulate` (default vllm: the benchmark's server).")),
    strategy: str | None = typer.Option(None, "--strategy", "-s", help="Strategy of the benchmarked deployment "
                                        "(default 1m)."),
    tp: int | None = typer.Option(None, "--tp", help="Tensor-parallel size of each instance (default: as simulate)."),
    max_batch: int | None = typer.Option(None, "--max-batch", help=(
        "Sequences per step (vLLM max_num_seqs; default: the engine's, as simulate).")),
    scheduler: str | None = typer.Option(None, "--scheduler", help="Override the engine's mechanism "
                                         "(prefill-first, chunked-prefill, ...)."),
    chunk_size: int | None = typer.Option(None, "--chunk-size", help="Prefill chunk (default: the engine's)."),
    dtype: str | None = typer.Option(None, "--dtype", help="Weight dtype (default: the model's)."),
    seed: int = typer.Option(0, "--seed", help="Arrival seed of the simulation."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Measured (vLLM benchmark) against simulated TTFT and TPOT: mean, P50, P90, P99 (a summary-only result:
    the TTFT, TPOT, ITL and E2E statistics and throughputs it holds). The load is the benchmark's: its rate
    (inf: every request at t=0) and its max_concurrency (a closed loop)."""
    from serveplan.estimator.api import resolve_specs
    from serveplan.sim import simulation_config
    from serveplan.validate.compare import compare, read_vllm_result, workload_of

    run = read_vllm_result(result)
    m, hw, pr = resolve_specs(model, hardware, profile)
    cfg = simulation_config(engine=engine, strategy=strategy,
                            fleet_options={"tp": tp, "max_batch": max_batch, "scheduler": scheduler,
                                           "chunk_size": chunk_size},
                            model=m, hardware=hw, profile=pr, dtype=dtype, seed=seed,
                            workload=workload_of(run), rate=None if math.isinf(run.request_rate) else
                            run.request_rate)
    cmp = compare(run, cfg)
    if json_out:
        emit_json(cmp.to_dict())
        return
    rate = "inf" if cmp.request_rate == float("inf") else f"{cmp.request_rate:g}"
    fleet = cfg.fleet
    t = Table(title=f"{result.name}: {cmp.num_requests} requests at {rate} req/s ({cmp.load}); {m.name} on "
                    f"{hw.name}, {cfg.engine.label if cfg.engine is not None else 'no engine'}, {fleet.strategy}, "
                    f"{fleet.first.parallel.label()}, max batch {fleet.max_batch}, profile {pr.name}")
    for col in ("metric", "stat", "measured (ms)", "simulated (ms)", "error"):
        t.add_column(col, justify="left" if col in ("metric", "stat") else "right")
    for r in cmp.rows:
        t.add_row(r.metric, r.stat, f"{r.measured_s * 1e3:.2f}", f"{r.simulated_s * 1e3:.2f}",
                  f"{r.error:+.1%}" if r.error == r.error else "-")
    console().print(t)
    for rate_row in cmp.rates:
        err = f"{rate_row.error:+.1%}" if rate_row.error == rate_row.error else "-"
        console().print(f"{rate_row.metric}: measured {rate_row.measured:,.2f} {rate_row.unit}, simulated "
                        f"{rate_row.simulated:,.2f} {rate_row.unit} ({err})")
    for note in cmp.notes:
        console().print(f"note: {note}")
