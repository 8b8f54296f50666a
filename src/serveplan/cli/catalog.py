"""``serveplan models`` and ``serveplan hardware``."""

from __future__ import annotations

import typer
from rich.table import Table

from serveplan.cli import app, console, emit_json, handle_errors
from serveplan.specs.catalog import get_hardware, get_model, list_hardware, list_models, list_profiles, get_profile


@app.command("models")
@handle_errors
def models_cmd(json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the bundled models (any HF config.json also works with --model PATH)."""
    rows = []
    for name in list_models():
        m = get_model(name)
        rows.append({
            "name": name, "model_type": m.model_type, "params_b": m.num_parameters() / 1e9,
            "active_params_b": m.num_active_parameters() / 1e9, "layers": m.num_hidden_layers,
            "hidden_size": m.hidden_size, "heads": m.num_attention_heads, "kv_heads": m.num_key_value_heads,
            "attention": m.attention.value, "experts": m.num_experts,
            "kv_bytes_per_token": m.kv_bytes_per_token(), "source": m.source,
        })
    if json_out:
        emit_json(rows)
        return
    t = Table(title="Bundled models")
    for col in ("name", "type", "params (B)", "active (B)", "layers", "hidden", "heads/kv", "attention", "KV/token"):
        t.add_column(col, justify="right" if col not in ("name", "type", "attention") else "left")
    for r in rows:
        t.add_row(r["name"], r["model_type"], f"{r['params_b']:.2f}", f"{r['active_params_b']:.2f}",
                  str(r["layers"]), str(r["hidden_size"]), f"{r['heads']}/{r['kv_heads']}", r["attention"],
                  f"{r['kv_bytes_per_token'] / 1e3:.1f} KB")
    console().print(t)


@app.command("hardware")
@handle_errors
def hardware_cmd(
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """List the bundled accelerators and efficiency profiles."""
    rows = []
    for name in list_hardware():
        hw = get_hardware(name)
        rows.append({
            "name": name, "description": hw.description,
            "peak_flops": {d.value: v for d, v in hw.peak_flops.items()},
            "memory_bytes": hw.memory_bytes, "memory_bandwidth": hw.memory_bandwidth,
            "devices_per_node": hw.devices_per_node,
            "intra_node_bandwidth": hw.intra_node_link.bandwidth,
            "inter_node_bandwidth": hw.inter_node_link.bandwidth if hw.inter_node_link else None,
            "source": hw.source,
        })
    if json_out:
        emit_json({"hardware": rows, "profiles": list_profiles()})
        return
    t = Table(title="Bundled hardware")
    for col in ("name", "bf16/fp16 TFLOP/s", "memory", "bandwidth", "per node", "intra-node", "description"):
        t.add_column(col)
    for r in rows:
        pf = r["peak_flops"]
        f16 = pf.get("bf16") or pf.get("fp16") or 0
        t.add_row(r["name"], f"{f16 / 1e12:.0f}", f"{r['memory_bytes'] / 1e9:.0f} GB",
                  f"{r['memory_bandwidth'] / 1e12:.2f} TB/s", str(r["devices_per_node"]),
                  f"{r['intra_node_bandwidth'] / 1e9:.0f} GB/s", r["description"])
    console().print(t)
    p = Table(title="Efficiency profiles")
    for col in ("name", "for", "prefill MFU/MBU", "decode MFU/MBU", "description"):
        p.add_column(col)
    for name in list_profiles():
        pr = get_profile(name)
        p.add_row(name, pr.hardware or "any", f"{pr.prefill.compute:.2f}/{pr.prefill.memory:.2f}",
                  f"{pr.decode.compute:.2f}/{pr.decode.memory:.2f}", pr.description)
    console().print(p)
