"""``serveplan models``, ``serveplan hardware``, ``serveplan engines`` and ``serveplan hosts``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from serveplan.cli.base import app, console, emit_json, handle_errors
from serveplan.sim.schedulers import get_scheduler
from serveplan.specs.catalog import (
    aliases,
    get_hardware,
    get_model,
    get_profile,
    list_hardware,
    list_models,
    list_profiles,
)
from serveplan.specs.model import ModelSpec


@app.command("models")
@handle_errors
def models_cmd(json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the bundled models and their other names (any HF config.json, or a folder holding one, also works
    with --model PATH; a Hugging Face repository id names the bundled model that comes from it)."""
    rows: list[dict[str, Any]] = []
    other_names = aliases("models")
    for name in list_models():
        m = get_model(name)
        rows.append({
            "name": name, "aliases": other_names.get(name, []), "model_type": m.model_type,
            "params_b": m.num_parameters() / 1e9,
            "active_params_b": m.num_active_parameters() / 1e9, "layers": m.num_hidden_layers,
            "hidden_size": m.hidden_size, "heads": m.num_attention_heads, "kv_heads": m.num_key_value_heads,
            "attention": m.attention_variant, "experts": m.num_experts,
            "experts_per_token": m.num_experts_per_tok, "layer_mix": _layer_mix(m),
            "window": m.local_window or None, "dtype": m.dtype.value,
            "kv_bytes_per_token": m.kv_bytes_per_token(), "weight_bytes": m.weight_bytes(), "source": m.source,
        })
    if json_out:
        emit_json(rows)
        return
    t = Table(title="Bundled models (KV/token in the model's KV format, within every window)")
    for col in ("name", "aliases", "type", "params (B)", "active (B)", "layers", "heads/kv", "attention",
                "layers by kind", "experts", "format", "KV/token"):
        t.add_column(col, justify="right" if col not in ("name", "aliases", "type", "attention", "layers by kind",
                                                         "format") else "left")
    for r in rows:
        experts = f"{r['experts_per_token']}/{r['experts']}" if r["experts"] else "-"
        t.add_row(r["name"], ", ".join(r["aliases"]) or "-", r["model_type"], f"{r['params_b']:.2f}",
                  f"{r['active_params_b']:.2f}",
                  str(r["layers"]), f"{r['heads']}/{r['kv_heads']}", r["attention"], r["layer_mix"], experts,
                  r["dtype"], f"{r['kv_bytes_per_token'] / 1e3:.1f} KB")
    console().print(t)


def _layer_mix(m: ModelSpec) -> str:
    """``"18 full + 18 sliding(128)"``: layers per token mixer, with the local window."""
    from serveplan.specs.model import LayerType

    parts = []
    for kind in LayerType:
        n = m.count_layers(kind)
        if n:
            label = kind.value.split("_")[0]
            if kind.is_local:
                label += f"({m.local_window})"
            parts.append(f"{n} {label}")
    return " + ".join(parts)


HARDWARE_TEMPLATE = """\
# Hardware spec for serveplan (--hardware FILE). Values are datasheet numbers in SI units;
# efficiency factors (MFU, MBU, dispatch) live in a profile: run `serveplan profile` and
# `serveplan calibrate` on the device, or start from the bundled default-gpu profile.
name: my-device                 # id used in reports
description: My accelerator     # free text
source: https://example.com/datasheet.pdf   # where the numbers come from
peak_flops:                     # dense peak FLOP/s per dtype, without structured sparsity
  fp32: 19.5e+12                # datasheet "FP32" (CUDA cores); on a CPU: cores x FMA units x SIMD lanes x 2 x clock
  bf16: 312.0e+12               # datasheet "BF16 Tensor Core" dense (half the "with sparsity" number)
  fp16: 312.0e+12               # datasheet "FP16 Tensor Core" dense
  # fp8: 1979.0e+12             # uncomment for devices with FP8; list only dtypes the device has
  int8: 624.0e+12               # datasheet "INT8 Tensor Core" dense TOPS
memory_bytes: 80.0e+9           # device memory, bytes (datasheet GB x 1e9; GiB x 2^30)
memory_bandwidth: 2.039e+12     # peak memory bandwidth, bytes/s (datasheet GB/s x 1e9)
devices_per_node: 8             # accelerators in one server sharing the intra-node link
intra_node_link:                # link used by parallel groups inside one node
  name: NVLink                  # free text
  bandwidth: 300.0e+9           # bytes/s per direction per device (datasheet bidirectional / 2)
  latency_s: 3.0e-6             # start-up latency of one message, seconds (alpha of alpha-beta)
inter_node_link:                # optional: link used by groups spanning nodes (delete if none)
  name: InfiniBand
  bandwidth: 25.0e+9            # bytes/s per direction per device (e.g. 200 Gb/s NIC = 25e9)
  latency_s: 5.0e-6
tile_size: 128                  # optional: GEMM tile along tokens for tile quantization (0 = off)
sm_count: 108                   # optional: streaming multiprocessors (whitepaper), for measured decode curves
# l2_cache_mib: 40              # optional: L2 cache (whitepaper), MiB: the L2-resident regime of decode kernel tables
"""


def new_hardware_yaml(name: str, *, flops: dict[str, float | None], memory_gb: float, bandwidth_gbs: float,
                      devices_per_node: int,
                      link_gbs: float, link_latency_us: float, inter_node_gbs: float | None, source: str,
                      description: str, tile_size: int) -> str:
    """A hardware YAML from datasheet values (units as printed on datasheets), validated by
    loading it back."""
    import yaml

    from serveplan.errors import SpecError
    from serveplan.specs.hardware import hardware_from_dict

    peak = {k: v * 1e12 for k, v in flops.items() if v}
    if not peak:
        raise SpecError("give at least one peak: --fp32-tflops, --bf16-tflops, --fp16-tflops, --fp8-tflops "
                        "or --int8-tops")
    raw: dict[str, Any] = {
        "name": name, "description": description or name,
        "source": source or "datasheet values given to serveplan hardware --new",
        "peak_flops": peak, "memory_bytes": memory_gb * 1e9, "memory_bandwidth": bandwidth_gbs * 1e9,
        "devices_per_node": devices_per_node,
        "intra_node_link": {"name": "intra-node", "bandwidth": link_gbs * 1e9, "latency_s": link_latency_us * 1e-6},
    }
    if inter_node_gbs:
        raw["inter_node_link"] = {"name": "inter-node", "bandwidth": inter_node_gbs * 1e9, "latency_s": 5e-6}
    if tile_size:
        raw["tile_size"] = tile_size
    hardware_from_dict(raw, name=name)   # raises SpecError on a bad value
    return "# created by serveplan hardware --new from datasheet values\n" + str(yaml.safe_dump(raw, sort_keys=False))


@app.command("hardware")
@handle_errors
def hardware_cmd(
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
    template: bool = typer.Option(
        False, "--template", help="Print a hardware YAML template with every field explained."),
    new: str | None = typer.Option(
        None, "--new", help="Create a device YAML named NEW from datasheet values (with --out)."),
    out: Path | None = typer.Option(None, "--out", "-o", help="File for --new (default: NEW.yaml)."),
    fp32_tflops: float = typer.Option(0.0, "--fp32-tflops", help="Datasheet dense FP32 TFLOPS."),
    bf16_tflops: float = typer.Option(0.0, "--bf16-tflops", help="Datasheet dense BF16 TFLOPS (no sparsity)."),
    fp16_tflops: float = typer.Option(0.0, "--fp16-tflops", help="Datasheet dense FP16 TFLOPS (no sparsity)."),
    fp8_tflops: float = typer.Option(0.0, "--fp8-tflops", help="Datasheet dense FP8 TFLOPS (no sparsity)."),
    int8_tops: float = typer.Option(0.0, "--int8-tops", help="Datasheet dense INT8 TOPS (no sparsity)."),
    memory_gb: float = typer.Option(0.0, "--memory-gb", help="Device memory, GB."),
    bandwidth_gbs: float = typer.Option(0.0, "--bandwidth-gbs", help="Peak memory bandwidth, GB/s."),
    devices_per_node: int = typer.Option(8, "--devices-per-node", help="Devices per server."),
    link_gbs: float = typer.Option(0.0, "--link-gbs", help="Intra-node link, GB/s per direction per device."),
    link_latency_us: float = typer.Option(3.0, "--link-latency-us", help="Intra-node message latency, us."),
    inter_node_gbs: float | None = typer.Option(
        None, "--inter-node-gbs", help="Inter-node link, GB/s per direction per device."),
    tile_size: int = typer.Option(0, "--tile-size", help="GEMM tile along tokens (0: unknown)."),
    source: str = typer.Option("", "--source", help="Datasheet URL."),
    description: str = typer.Option("", "--description", help="Free text."),
) -> None:
    """List the bundled accelerators and efficiency profiles; --template prints a spec template;
    --new NAME --out FILE writes a device from datasheet values."""
    if template:
        typer.echo(HARDWARE_TEMPLATE, nl=False)
        return
    if new:
        from serveplan.errors import SpecError

        missing = [f for f, v in (("--memory-gb", memory_gb), ("--bandwidth-gbs", bandwidth_gbs),
                                  ("--link-gbs", link_gbs)) if not v > 0]
        if missing:
            raise SpecError(f"hardware --new {new}: give positive {', '.join(missing)}")
        text = new_hardware_yaml(new, flops={"fp32": fp32_tflops, "bf16": bf16_tflops, "fp16": fp16_tflops,
                                             "fp8": fp8_tflops, "int8": int8_tops},
                                 memory_gb=memory_gb, bandwidth_gbs=bandwidth_gbs, devices_per_node=devices_per_node,
                                 link_gbs=link_gbs, link_latency_us=link_latency_us, inter_node_gbs=inter_node_gbs,
                                 source=source, description=description, tile_size=tile_size)
        path = out or Path(f"{new}.yaml")
        path.write_text(text)
        typer.echo(f"wrote {path}; use it with --hardware {path}")
        return
    rows: list[dict[str, Any]] = []
    other_names = aliases("hardware")
    for name in list_hardware():
        hw = get_hardware(name)
        rows.append({
            "name": name, "aliases": other_names.get(name, []), "description": hw.description,
            "peak_flops": {d.value: v for d, v in hw.peak_flops.items()},
            "memory_bytes": hw.memory_bytes, "memory_bandwidth": hw.memory_bandwidth,
            "devices_per_node": hw.devices_per_node, "domain_size": hw.domain_size,
            "intra_node_bandwidth": hw.intra_node_link.bandwidth,
            "host_memory_bytes": hw.host_memory_bytes or None,
            "inter_node_bandwidth": hw.inter_node_link.bandwidth if hw.inter_node_link else None,
            "source": hw.source,
            **_default_profile(name),
        })
    if json_out:
        emit_json({"hardware": rows, "profiles": list_profiles()})
        return
    t = Table(title="Bundled hardware (dense peak TFLOP/s by format; - = not native)")
    for col in ("name", "aliases", "bf16", "fp8", "fp4", "int8", "memory", "bandwidth", "per node", "domain",
                "scale-up link", "default profile", "description"):
        t.add_column(col, justify="left" if col in ("name", "aliases", "description") else "right")

    def peak(pf: dict[str, float], key: str) -> str:
        v = pf.get(key) or (pf.get("fp16") if key == "bf16" else None)
        return f"{v / 1e12:,.0f}" if v else "-"

    for r in rows:
        pf = r["peak_flops"]
        prof = r["profile"] + (" (measured)" if r["profile_measured_from"] else " (assumed factors)")
        t.add_row(r["name"], ", ".join(r["aliases"]) or "-", peak(pf, "bf16"), peak(pf, "fp8"), peak(pf, "fp4"),
                  peak(pf, "int8"),
                  f"{r['memory_bytes'] / 1e9:.0f} GB", f"{r['memory_bandwidth'] / 1e12:.2f} TB/s",
                  str(r["devices_per_node"]), str(r["domain_size"]),
                  f"{r['intra_node_bandwidth'] / 1e9:.0f} GB/s", prof, r["description"])
    console().print(t)
    measured = [r for r in rows if r["profile_measured_from"] and not r["profile_note"]]
    if measured:
        console().print("measured profiles: " + "; ".join(f"{r['profile']} from {r['profile_measured_from']}"
                                                           for r in measured))
    for r in rows:
        if r["profile_note"]:
            console().print(f"{r['name']} uses {r['profile']}: {r['profile_note']}")
    p = Table(title="Efficiency profiles")
    for col in ("name", "for", "prefill MFU/MBU", "decode MFU/MBU", "kernel curves", "description"):
        p.add_column(col)
    for name in list_profiles():
        pr = get_profile(name)
        k = pr.kernels
        curves = (f"GEMM {'/'.join(k.gemm)}; attention {len(k.attention)}; collectives "
                  f"{sum(len(v) for v in k.collectives.values())}" if k is not None else "-")
        p.add_row(name, pr.hardware or "any", f"{pr.prefill.compute:.2f}/{pr.prefill.memory:.2f}",
                  f"{pr.decode.compute:.2f}/{pr.decode.memory:.2f}", curves, pr.description)
    console().print(p)


def _default_profile(hardware: str) -> dict[str, str]:
    """The profile a device uses by default, what it was measured from ("" when assumed), and why
    when it is another device's ("" when it is the device's own)."""
    from serveplan.specs.catalog import hardware_profile_note

    pr = get_profile(None, hardware)
    return {"profile": pr.name, "profile_measured_from": pr.measured_from,
            "profile_note": hardware_profile_note(hardware)}


@app.command("engines")
@handle_errors
def engines_cmd(
    hardware: str = typer.Option("h100-sxm", "--hardware", "-H", help="Device whose limits to show."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """List the bundled serving engines and their defaults on one device (each cited in its data file)."""
    from serveplan.specs.catalog import get_engine, list_engines

    hw = get_hardware(hardware)
    rows = []
    for name in list_engines():
        e = get_engine(name)
        if e.name != name:
            continue  # a family name: the versioned file is listed
        on, off = e.limits(hw), e.limits(hw, offline=True)
        rows.append({**e.describe(), "admission": get_scheduler(e.scheduler).admission,
                     "max_batch": on.max_num_seqs, "token_budget_online": on.token_budget,
                     "token_budget_offline": off.token_budget, "chunk_size": on.chunk_size,
                     "default_for": e.engine if e.is_default else None})
    if json_out:
        emit_json(rows)
        return
    t = Table(title=f"serving engines, limits on {hw.name} (--engine NAME; data files in specs/data/engines)")
    for col in ("engine", "version", "scheduler", "max batch", "tokens/step online / offline", "chunk", "KV block",
                "memory", "admission", "opt-in comm"):
        t.add_column(col)
    for r in rows:
        mem = f"{r['memory_basis']} {r['memory_fraction']}" if r["memory_fraction"] else r["memory_basis"]
        t.add_row(r["name"], r["version"], r["scheduler"]["policy"], str(r["max_batch"] or "from KV"),
                  f"{r['token_budget_online'] or '-'} / {r['token_budget_offline'] or '-'}",
                  str(r["chunk_size"] or "-"),
                  str(r["kv_block_size"]), mem, r["admission"], ", ".join(r.get("comm_options", {})) or "-")
    console().print(t)


@app.command("hosts")
@handle_errors
def hosts_cmd(json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the bundled hosts (CPU memory, disk and links per GPU): offload --host and simulate --kv-tiers."""
    from serveplan.specs.catalog import get_host, list_hosts

    rows: list[dict[str, Any]] = []
    for name in list_hosts():
        h = get_host(name)
        rows.append({"name": name, "gpu": h.gpu.name, "cpu_memory_bytes": h.cpu_memory_bytes,
                     "disk_bytes": h.disk_bytes, "ctog_cache_bandwidth": h.ctog_cache_bandwidth,
                     "disk_read_bandwidth": h.disk_read_bandwidth, "description": h.description,
                     "source": h.source})
    if json_out:
        emit_json(rows)
        return
    t = Table(title="hosts per GPU (--host NAME; data files in specs/data/hosts)")
    for col in ("host", "GPU", "CPU memory", "disk", "CPU->GPU", "disk read", "description"):
        t.add_column(col)
    for r in rows:
        t.add_row(r["name"], r["gpu"], f"{r['cpu_memory_bytes'] / 1e9:,.0f} GB", f"{r['disk_bytes'] / 1e12:,.2f} TB",
                  f"{r['ctog_cache_bandwidth'] / 1e9:,.1f} GB/s", f"{r['disk_read_bandwidth'] / 1e9:,.1f} GB/s",
                  r["description"])
    console().print(t)
