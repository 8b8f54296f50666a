"""Hypothesis strategies: ``serveplan`` invocations built from hostile CLI values and mutated
input files (``config.json``, hardware YAML, traces, profiles, hosts, offload policies).

Every strategy draws a :class:`Case`: the arguments, the files to write first, and whether the
input is *nonsense* (a value no answer can be built from: a zero, negative, NaN or infinite size,
an empty name, KV heads above query heads, a missing key ...), which must be refused (exit 2),
never answered. Values that are well formed but absurd (10^10 requests, 100,000 devices, a
10^9-instance strategy) are not nonsense: they may be refused or answered, in bounded time and
memory. Valid values are chosen so an accepted run is small (a 1B model, few requests).
"""

from __future__ import annotations

import copy
import json
import math
import os
from dataclasses import dataclass, field
from typing import Any

import yaml
from hypothesis import strategies as st

SMALL_MODEL = "llama-3.2-1b"
GPU = "h100-sxm"


@dataclass
class Case:
    family: str
    args: list[str]
    nonsense: bool = False
    label: str = ""  # which hostile choice made it (the grouping key of the report)
    files: dict[str, bytes] = field(default_factory=dict)

    def materialise(self, tmp: str) -> list[str]:
        """Write the case's files under ``tmp``; the arguments with ``{tmp}`` filled in."""
        for name, data in self.files.items():
            with open(os.path.join(tmp, name), "wb") as fh:
                fh.write(data)
        return [a.replace("{tmp}", tmp) for a in self.args]


# ----------------------------------------------------------------------------- CLI options
# option -> (valid values, nonsense values, absurd-but-well-formed values)
NAN, INF = "nan", "inf"
COUNT_NONSENSE = ["0", "-1", "-7"]
FLOAT_NONSENSE = ["0", "-1", NAN, "-inf", "-1e-9"]

SIMULATE = {
    "--num-requests": (["20", "50"], COUNT_NONSENSE, ["10000000000", "1e10"]),
    "--rate": (["0.5", "3", "40"], FLOAT_NONSENSE, ["1e308", "1e-300", INF]),
    "--seed": (["0", "7"], ["-1", "-99999999999"], ["99999999999999999999"]),
    "--cv": (["0.5", "2"], FLOAT_NONSENSE + [INF], ["1e308", "1e-300"]),
    "--arrival": (["poisson", "gamma"], ["", "bogus"], []),
    "--input-len": (["64", "512"], COUNT_NONSENSE, ["100000000", "999999999999"]),
    "--output-len": (["8", "32"], COUNT_NONSENSE, ["100000000"]),
    "--max-batch": (["1", "16"], COUNT_NONSENSE, ["1000000000"]),
    "--tp": (["1", "2"], COUNT_NONSENSE + ["3"], ["100000", "4096"]),
    "--pp": (["1"], COUNT_NONSENSE, ["100000"]),
    "--strategy": (["1m", "2m", "1p1d"], ["0m", "-1m", "m", "1x", "0p1d", "", "1p0d"],
                   ["999999999m", "100000p100000d", "99999999999999999999m"]),
    "--slo-ttft": (["1", "0.2"], FLOAT_NONSENSE, [INF, "1e308"]),
    "--slo-tpot": (["0.07"], FLOAT_NONSENSE, [INF]),
    "--percentile": (["90", "50", "99.9"], ["0", "-5", "101", "1e9", NAN, INF], []),
    "--prefix-hit": (["0", "0.5"], ["-0.1", "1.5", NAN, INF, "1"], []),
    "--chunk-size": (["256"], COUNT_NONSENSE, ["10000000000"]),
    "--token-budget": (["512"], COUNT_NONSENSE, ["10000000000"]),
    "--concurrency": (["2", "1,4"], ["0", "-1", "a", ",", "1,0"], ["100000000"]),
    "--rate-sweep": (["1,2"], ["0", "-1,2", NAN, "a"], []),
    "--band": (["0"], ["-1"], []),
    "--engine": (["vllm", "sglang", "trtllm"], ["", "vlm", "../../etc/passwd"], []),
    "--router": (["round_robin", "least_outstanding"], ["", "bogus"], []),
    "--fidelity": (["iteration"], ["", "bogus"], []),
    "--scenario": (["op2", "op3"], ["", "op9"], []),
    "--dtype": (["bf16", "fp8"], ["", "fp7", "int3"], []),
    "--kv-dtype": (["bf16", "fp8"], ["", "fp7"], []),
    "--model": ([SMALL_MODEL], ["", "no-such-model", "/nonexistent/config.json"], []),
    "--hardware": ([GPU, "a100-80g"], ["", "h10", "/nonexistent.yaml"], []),
}
ESTIMATE = {
    "--tp": (["1", "2"], COUNT_NONSENSE + ["3"], ["100000"]),
    "--pp": (["1", "2"], COUNT_NONSENSE, ["100000"]),
    "--dp": (["1"], COUNT_NONSENSE, ["100000"]),
    "--ep": (["1"], COUNT_NONSENSE, ["100000"]),
    "--batch": (["1", "8"], COUNT_NONSENSE, ["100000000", "999999999999"]),
    "--input-len": (["1", "128", "2048"], COUNT_NONSENSE, ["100000000", "999999999999999"]),
    "--output-len": (["16"], COUNT_NONSENSE, ["100000000"]),
    "--context-len": (["512"], ["-1", "-7"], ["100000000000"]),
    "--phase": (["prefill", "decode"], ["", "both", "DECODE!"], []),
    "--band-samples": (["20"], COUNT_NONSENSE, ["1000000000"]),
    "--seed": (["0", "3"], ["-1"], ["99999999999999999999"]),
    "--dtype": (["bf16", "fp8"], ["", "fp7"], []),
    "--kv-dtype": (["bf16", "fp8"], ["", "fp7"], []),
    "--model": ([SMALL_MODEL, "llama-3.1-8b", "opt-6.7b"], ["", "nope"], []),
    "--hardware": ([GPU], ["", "nope"], []),
}
ESTIMATE_OP = {
    "--m": (["16", "4096"], COUNT_NONSENSE, ["10000000000000"]),
    "--n": (["4096"], COUNT_NONSENSE, ["10000000000000"]),
    "--k": (["4096"], COUNT_NONSENSE, ["10000000000000"]),
    "--heads": (["32"], COUNT_NONSENSE, ["100000000"]),
    "--kv-heads": (["8"], COUNT_NONSENSE + ["64"], []),
    "--head-dim": (["128"], COUNT_NONSENSE, ["100000000"]),
    "--bytes": (["1e6"], ["-1", NAN, INF, "-inf"], ["1e300"]),
    "--ranks": (["2", "8"], COUNT_NONSENSE + ["1"], ["100000000"]),
}
OPTIMIZE = {
    "--devices": (["1", "2"], COUNT_NONSENSE, ["100000", "1000000000"]),
    "--num-requests": (["60", "100"], COUNT_NONSENSE, ["15", "1", "10000000000"]),
    "--tp": (["1", "1,2"], ["0", "-1", "a", "", "1,,0"], ["100000"]),
    "--max-batch": (["16", "8,16"], ["0", "-2", "x"], ["1000000000"]),
    "--slo-ttft": (["1.5"], FLOAT_NONSENSE, [INF]),
    "--slo-tpot": (["0.07"], FLOAT_NONSENSE, [INF]),
    "--percentile": (["90"], ["0", "150", NAN], []),
    "--relaxation": (["0", "0.1"], ["-0.5", NAN, INF, "2"], []),
    "--tolerance": (["0.05"], ["0", "-1", NAN, INF], ["1e-300"]),
    "--seeds": (["1"], COUNT_NONSENSE, ["1000000000"]),
    "--seed": (["0"], ["-1"], ["99999999999999999999"]),
    "--jobs": (["1"], ["-1", "-5"], ["100000"]),
    "--band": (["0"], ["-1"], []),
    "--scenario": (["op2", "op3"], ["", "op9"], []),
}
OFFLOAD = {
    "--input-len": (["64", "512"], COUNT_NONSENSE, ["100000000", "999999999999"]),
    "--output-len": (["8", "32"], COUNT_NONSENSE, ["100000000"]),
    "--max-latency": (["100", "1000"], ["0", "-1", NAN, "-inf"], [INF, "1e308", "1e-300"]),
    "--memory-headroom": (["0", "0.1"], ["-0.1", "1", "1.5", NAN, INF], []),
    "--policy": (["8x1,100,0,100,0,100,0", "48x3,20,80,0,100,0,100"],
                 ["0x1,100,0,100,0,100,0", "8x0,100,0,100,0,100,0", "8x1,150,0,100,0,100,0",
                  "8x1,-5,0,100,0,100,0", "8x1,nan,0,100,0,100,0", "8x1,inf,0,100,0,100,0", "garbage", ""],
                 ["99999999999x1,100,0,100,0,100,0", "8x99999999999,100,0,100,0,100,0"]),
    "--host": (["flexgen-t4", "flexgen-3090"], ["", "nohost"], []),
    "--model": (["opt-6.7b", "opt-30b"], ["", "nope"], []),
}
PROFILE = {
    "--device": (["cpu"], ["cuda:-1", "cuda:x", "", "tpu", "cuda:99999999999999999999"], []),
    "--threads": (["1"], ["-1"], ["1000000"]),
    "--repeats": (["1"], COUNT_NONSENSE, ["1000000000"]),
    "--dtype": (["fp32"], ["", "fp7"], []),
    "--out": (["{tmp}/m.csv"], ["{tmp}/missing/dir/m.csv", "{tmp}"], []),
    "--hardware-out": (["{tmp}/hw.yaml"], ["{tmp}/missing/dir/hw.yaml"], []),
    "--clock": (["wall"], ["", "sundial"], []),
}

COMMANDS = {
    "simulate": (SIMULATE, ["simulate", "-m", SMALL_MODEL, "-H", GPU, "-n", "40", "--tp", "1", "--json"]),
    "estimate": (ESTIMATE, ["estimate", "-m", SMALL_MODEL, "-H", GPU, "--tp", "1", "--json"]),
    "estimate-op": (ESTIMATE_OP, ["estimate", "-H", GPU, "--json"]),
    "optimize": (OPTIMIZE, ["optimize", "-m", SMALL_MODEL, "-H", GPU, "--devices", "1", "--num-requests", "60",
                            "-j", "1", "--no-progress", "--json"]),
    "offload": (OFFLOAD, ["offload", "-m", "opt-6.7b", "-s", "64", "-n", "8", "--json"]),
}


@st.composite
def cli_case(draw: st.DrawFn, command: str | None = None) -> Case:
    """One subcommand with one to three options set: each valid, nonsense or absurd."""
    command = command or draw(st.sampled_from(sorted(COMMANDS)))
    table, base = COMMANDS[command]
    args = list(base)
    if command == "estimate-op":
        args += ["--op", draw(st.sampled_from(["gemm", "attention", "allreduce", "alltoall", "bogus"]))]
        if args[-1] == "gemm":
            args += ["--m", "16", "--n", "4096", "--k", "4096"]
        elif args[-1] == "attention":
            args += ["--heads", "32"]
        elif args[-1] != "bogus":
            args += ["--bytes", "1e6", "--ranks", "8"]
    keys = draw(st.lists(st.sampled_from(sorted(table)), min_size=1, max_size=3, unique=True))
    nonsense, labels = args[-1] == "bogus", []
    for key in keys:
        valid, bad, absurd = table[key]
        kind = draw(st.sampled_from(["valid", "nonsense", "absurd"] if absurd else ["valid", "nonsense"]))
        pool = {"valid": valid, "nonsense": bad, "absurd": absurd}[kind]
        value = draw(st.sampled_from(pool))
        nonsense |= kind == "nonsense"
        if kind != "valid":
            labels.append(f"{key} {value}")
        _set_option(args, key, value)
    return Case(command, args, nonsense, f"{command} " + (", ".join(labels) or "valid"))


def _set_option(args: list[str], key: str, value: str) -> None:
    """Replace ``key``'s value in ``args`` (or its short alias for this command), or append it."""
    cmd = args[0]
    alias = {"--model": "-m", "--hardware": "-H"}.get(key)
    if cmd == "simulate":
        alias = {"--num-requests": "-n", "--strategy": "-s"}.get(key, alias)
    elif cmd in ("estimate", "offload"):
        alias = {"--output-len": "-n", "--input-len": "-s"}.get(key, alias)
    for k in (key, alias):
        if k and k in args:
            args[args.index(k) + 1] = value
            return
    args += [key, value]


# ----------------------------------------------------------------------------- files
#: hostile replacements of a numeric field; the bool says whether the value is nonsense
NUMERIC_MUTATIONS: list[tuple[Any, bool]] = [
    (0, True), (-1, True), (math.nan, True), (math.inf, True), (-math.inf, True), ("abc", True),
    (True, True), ([], True), ({}, True), (1.5, True), ("", True), (10**30, False), (1e308, False),
]
BASE_CONFIG: dict[str, Any] = {
    "model_type": "llama", "hidden_size": 512, "intermediate_size": 1376, "num_hidden_layers": 4,
    "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 32000, "max_position_embeddings": 4096,
    "torch_dtype": "bfloat16",
}
CONFIG_REQUIRED = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size")


def _dump_json(obj: Any) -> bytes:
    return json.dumps(obj, allow_nan=True).encode()  # NaN/Infinity literals, as some exporters write


@st.composite
def config_case(draw: st.DrawFn) -> Case:
    """A mutated HF ``config.json`` through ``estimate``."""
    cfg = copy.deepcopy(BASE_CONFIG)
    how = draw(st.sampled_from(["field", "field", "field", "drop", "heads", "bytes", "shape"]))
    nonsense, label = True, how
    if how == "field":
        key = draw(st.sampled_from(sorted(cfg) + ["head_dim"]))
        value, nonsense = draw(st.sampled_from(NUMERIC_MUTATIONS))
        if key == "torch_dtype":
            value, nonsense = draw(st.sampled_from([("fp7", False), ("", False), (1, False)]))
        cfg[key] = value
        label = f"config {key}={value!r}"
    elif how == "drop":
        key = draw(st.sampled_from(sorted(cfg)))
        del cfg[key]
        nonsense = key in CONFIG_REQUIRED or key == "model_type"
        label = f"config without {key}"
    elif how == "heads":
        heads, kv = draw(st.sampled_from([(8, 16), (8, 3), (6, 4), (7, 7), (8, 8), (8, 1), (3, 3)]))
        cfg.update(num_attention_heads=heads, num_key_value_heads=kv)
        # heads must divide hidden_size=512 (no head_dim given) and KV heads divide heads
        nonsense = 512 % heads != 0 or heads % kv != 0 or kv > heads
        label = f"config heads={heads} kv_heads={kv}"
    elif how == "shape":
        label = "config not a mapping"
        cfg = draw(st.sampled_from([[], "llama", 3, None]))  # type: ignore[assignment]
    data = _dump_json(cfg)
    if how == "bytes":
        data = draw(st.sampled_from([b"\x00\xff\xfe\x01binary", b'{"model_type": "llama", "hidden', b"",
                                     b"\x89PNG\r\n\x1a\n" + bytes(range(256))]))
        label = f"config bytes {data[:8]!r}"
    args = ["estimate", "-m", "{tmp}/config.json", "-H", GPU, "--tp", "1", "-s", "128", "--json"]
    return Case("config.json", args, nonsense, label, {"config.json": data})


def _bundled(kind: str, name: str) -> dict[str, Any]:
    from importlib import resources

    text = (resources.files("serveplan") / "specs" / "data" / kind / f"{name}.yaml").read_text()
    out: dict[str, Any] = yaml.safe_load(text)
    return out


def _mutate_path(doc: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    d = doc
    for k in path[:-1]:
        d = d[k]
    d[path[-1]] = value


def _yaml(obj: Any) -> bytes:
    return yaml.safe_dump(obj).encode()


@st.composite
def hardware_case(draw: st.DrawFn) -> Case:
    """A mutated hardware YAML through ``estimate``."""
    hw = _bundled("hardware", GPU)
    paths = [("memory_bytes",), ("memory_bandwidth",), ("peak_flops", "bf16"), ("intra_node_link", "bandwidth"),
             ("intra_node_link", "latency_s"), ("inter_node_link", "bandwidth"), ("devices_per_node",),
             ("tile_size",), ("scale_up_domain",)]
    how = draw(st.sampled_from(["field", "field", "field", "name", "drop", "bytes"]))
    nonsense, label = True, how
    if how == "field":
        path = draw(st.sampled_from(paths))
        value, nonsense = draw(st.sampled_from(NUMERIC_MUTATIONS))
        if path in (("intra_node_link", "latency_s"), ("tile_size",), ("scale_up_domain",)) and value == 0:
            nonsense = False  # zero latency, no tile, no separate domain are meaningful
        if path in (("devices_per_node",), ("tile_size",), ("scale_up_domain",)) and value in (1e308, 10**30):
            nonsense = False
        if path not in (("devices_per_node",), ("tile_size",), ("scale_up_domain",)) and value == 1.5:
            nonsense = False  # a tiny but meaningful bandwidth, memory or latency
        _mutate_path(hw, path, value)
        label = f"hardware {'.'.join(path)}={value!r}"
    elif how == "name":
        hw["name"] = draw(st.sampled_from(["", "   ", "\n"]))
        label = f"hardware name={hw['name']!r}"
    elif how == "drop":
        key = draw(st.sampled_from(["memory_bytes", "memory_bandwidth", "peak_flops", "intra_node_link"]))
        del hw[key]
        label = f"hardware without {key}"
    data = _yaml(hw) if how != "bytes" else draw(st.sampled_from([b"\x00\xff\x01", b"peak_flops: [", b"- 1\n- 2"]))
    args = ["estimate", "-m", SMALL_MODEL, "-H", "{tmp}/hw.yaml", "--tp", "1", "-s", "128", "--json"]
    return Case("hardware", args, nonsense, label, {"hw.yaml": data})


@st.composite
def profile_case(draw: st.DrawFn) -> Case:
    """A mutated efficiency-profile YAML through ``estimate``."""
    pr = _bundled("profiles", "default-gpu")
    paths = [("prefill", "compute"), ("prefill", "memory"), ("decode", "comm"), ("dispatch_s", "attention"),
             ("expert_imbalance",), ("kappa_update",)]
    path = draw(st.sampled_from(paths))
    value, nonsense = draw(st.sampled_from(NUMERIC_MUTATIONS + [(2.0, True)]))
    if path[0] in ("dispatch_s", "kappa_update") and value == 0:
        nonsense = False
    if path[0] in ("dispatch_s", "kappa_update") and value in (1e308, 10**30):
        nonsense = False
    if path == ("expert_imbalance",) and value in (1.5, 2.0, 1e308, 10**30):
        nonsense = False  # >= 1 is the documented range; 1e308 is absurd, not malformed
    if path[0] in ("dispatch_s", "kappa_update") and value in (1.5, 2.0):
        nonsense = False  # slow, but meaningful
    if path == ("expert_imbalance",) and value is True:
        nonsense = True
    if path[0] in ("prefill", "decode") and value in (1e308, 10**30):
        nonsense = True  # an efficiency factor lies in (0, 1]
    _mutate_path(pr, path, value)
    args = ["estimate", "-m", SMALL_MODEL, "-H", GPU, "-p", "{tmp}/prof.yaml", "--tp", "1", "-s", "128", "--json"]
    return Case("profile", args, nonsense, f"profile {'.'.join(path)}={value!r}", {"prof.yaml": _yaml(pr)})


@st.composite
def host_case(draw: st.DrawFn) -> Case:
    """A mutated offloading host YAML through ``offload``."""
    host = _bundled("hosts", "flexgen-t4")
    paths = [("cpu_memory_bytes",), ("disk_bytes",), ("ctog_bandwidth",), ("disk_read_bandwidth",),
             ("cpu_attention_flops",), ("gpu_reserved_bytes",), ("runtime", "mm_decode_flops"),
             ("runtime", "memory_efficiency")]
    path = draw(st.sampled_from(paths))
    value, nonsense = draw(st.sampled_from(NUMERIC_MUTATIONS))
    if path in (("disk_bytes",), ("gpu_reserved_bytes",)) and value == 0:
        nonsense = False
    if value == 1.5:
        nonsense = False  # tiny but meaningful bytes, bandwidth or FLOP/s
    if path == ("runtime", "memory_efficiency") and value in (1.5, 1e308, 10**30):
        nonsense = True  # a fraction of the datasheet bandwidth
    _mutate_path(host, path, value)
    args = ["offload", "-m", "opt-6.7b", "--host", "{tmp}/host.yaml", "-s", "64", "-n", "8", "--json"]
    return Case("host", args, nonsense, f"host {'.'.join(path)}={value!r}", {"host.yaml": _yaml(host)})


TRACE_COLS = ("arrival_s", "input_len", "output_len")


@st.composite
def trace_case(draw: st.DrawFn) -> Case:
    """A mutated CSV or JSONL trace through ``simulate``."""
    rows: list[dict[str, Any]] = [{"arrival_s": 0.2 * i, "input_len": 128 + 16 * i, "output_len": 8 + i}
                                  for i in range(6)]
    fmt = draw(st.sampled_from(["csv", "jsonl"]))
    how = draw(st.sampled_from(["value", "value", "missing", "empty", "bytes", "valid"]))
    nonsense, label = how != "valid", how
    if how == "value":
        i = draw(st.integers(0, len(rows) - 1))
        col = draw(st.sampled_from(TRACE_COLS))
        value, nonsense = draw(st.sampled_from(NUMERIC_MUTATIONS))
        if col == "arrival_s" and value == 0:
            nonsense = False
        if col == "arrival_s" and value in (1e308, 10**30):
            nonsense = False
        if col == "arrival_s" and value in (1.5, -1):
            nonsense = False  # a time needs no integer; times are shifted so the first arrives at 0
        rows[i][col] = value
        label = f"trace {col}={value!r}"
    elif how == "missing":
        i = draw(st.integers(0, len(rows) - 1))
        col = draw(st.sampled_from(TRACE_COLS))
        del rows[i][col]
        label = f"trace row without {col}"
    if fmt == "csv":
        lines = [",".join(TRACE_COLS)] + [",".join(str(r.get(c, "")) for c in TRACE_COLS if c in r) for r in rows]
        data = ("\n".join(lines) + "\n").encode()
    else:
        data = ("\n".join(json.dumps(r, allow_nan=True) for r in rows) + "\n").encode()
    if how == "empty":
        data = b"" if fmt == "jsonl" else (",".join(TRACE_COLS) + "\n").encode()
    elif how == "bytes":
        data = b"\x00\xff\xfe garbage \x01\n\x02"
    name = f"trace.{fmt}"
    args = ["simulate", "-m", SMALL_MODEL, "-H", GPU, "--tp", "1", "--trace", "{tmp}/" + name, "--json"]
    return Case("trace", args, nonsense, f"{fmt} {label}", {name: data})


@st.composite
def profile_cmd_case(draw: st.DrawFn) -> Case:
    """``serveplan profile`` arguments that must be refused before anything is measured."""
    return draw(cli_case_from(PROFILE, ["profile", "--quick", "--no-progress", "--out", "{tmp}/m.csv"], "profile"))


@st.composite
def cli_case_from(draw: st.DrawFn, table: dict[str, Any], base: list[str], family: str) -> Case:
    args = list(base)
    keys = draw(st.lists(st.sampled_from(sorted(table)), min_size=1, max_size=2, unique=True))
    nonsense, labels = False, []
    for key in keys:
        valid, bad, absurd = table[key]
        kind = draw(st.sampled_from(["nonsense", "absurd"] if absurd else ["nonsense"]))
        value = draw(st.sampled_from(bad if kind == "nonsense" else absurd))
        nonsense |= kind == "nonsense"
        labels.append(f"{key} {value}")
        _set_option(args, key, value)
    return Case(family, args, nonsense, f"{family} " + ", ".join(labels))


#: every family, for the report script and the tests
FAMILIES = {
    "cli": cli_case(),
    "config.json": config_case(),
    "hardware": hardware_case(),
    "profile": profile_case(),
    "host": host_case(),
    "trace": trace_case(),
}
