"""Command-line flags of the serving engines that ``serveplan optimize --deploy`` targets, read from
their released source, written as data for ``tests/report/test_deploy.py``.

The engines are not installed (they need GPUs and CUDA); their wheels are fetched from PyPI with
``pip download --no-deps`` into ``$SERVEPLAN_BENCH_CACHE/engines`` (default ``~/.cache/serveplan-bench``) and the
flag definitions are read with :mod:`ast`, never imported:

* vLLM: every option string of ``add_argument`` in ``vllm/engine/arg_utils.py`` and
  ``vllm/entrypoints/common/cli_args.py``, plus the frontend dataclass fields that
  ``FrontendArgs.add_cli_args`` turns into ``--field-name``; options backed by a ``bool`` field get
  argparse's ``BooleanOptionalAction`` (``--x`` and ``--no-x``), as ``_compute_kwargs`` does.
* SGLang: every ``A[T, "help"]`` / ``A[T, Arg(...)]`` field of ``sglang/srt/arg_groups/fields/*.py``
  (``--field-name`` or ``cli_name``, plus ``aliases``, skipping ``no_cli``), as
  ``add_cli_args_from_dataclass`` registers them, plus the explicit ``add_argument`` calls of
  ``ServerArgs.add_cli_args`` in ``sglang/srt/server_args.py``.
* NVIDIA Dynamo: the ``flag_name=`` options of ``dynamo/vllm/backend_args.py`` (its vLLM worker
  also takes every vLLM engine option).

Run: ``python benchmarks/engine_flags.py`` (rewrites ``tests/report/data/engine_flags.json``).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

VERSIONS = {"vllm": "0.33.0", "sglang": "0.5.23", "ai-dynamo": "1.6.1"}
CACHE = Path(os.environ.get("SERVEPLAN_BENCH_CACHE", Path.home() / ".cache" / "serveplan-bench")) / "engines"
OUT = Path(__file__).resolve().parents[1] / "tests" / "report" / "data" / "engine_flags.json"


def _wheel(name: str) -> Path:
    version = VERSIONS[name]
    stem = name.replace("-", "_")
    found = sorted(CACHE.glob(f"{stem}-{version}-*.whl"))
    if not found:
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(CACHE),
                        f"{name}=={version}"], check=True)
        found = sorted(CACHE.glob(f"{stem}-{version}-*.whl"))
    return found[0]


def _read(whl: zipfile.ZipFile, path: str) -> ast.Module:
    return ast.parse(whl.read(path).decode())


def _option_strings(tree: ast.AST) -> list[tuple[list[str], ast.Call]]:
    """(option strings, call) of every ``*.add_argument("--x", "-y", ...)`` call."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            opts = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
                    and a.value.startswith("-")]
            if opts:
                out.append((opts, node))
    return out


def _annotations(tree: ast.AST) -> dict[str, str]:
    """field name -> annotation source of every class-level annotated field."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for stmt in node.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    out.setdefault(stmt.target.id, ast.unparse(stmt.annotation))
    return out


def _kwargs_key(call: ast.Call) -> str | None:
    """The field behind ``**group_kwargs["field"]`` (or ``**{**group_kwargs["field"], ...}``)."""
    for kw in call.keywords:
        if kw.arg is not None:
            continue
        subs = [kw.value] if not isinstance(kw.value, ast.Dict) else [
            v for k, v in zip(kw.value.keys, kw.value.values, strict=True) if k is None]
        for sub in subs:
            if isinstance(sub, ast.Subscript) and isinstance(sub.slice, ast.Constant):
                return str(sub.slice.value)
    return None


def _is_bool(annotation: str) -> bool:
    parts = {p.strip() for p in annotation.replace("Optional[", "").replace("]", "").split("|")}
    return "bool" in parts


def _literal_choices(tree: ast.AST, alias: str) -> list[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == alias for t in node.targets):
            src = node.value
            if isinstance(src, ast.Subscript):
                elts = src.slice.elts if isinstance(src.slice, ast.Tuple) else [src.slice]
                return [e.value for e in elts if isinstance(e, ast.Constant)]
    return []


def vllm_flags() -> dict:
    whl = zipfile.ZipFile(_wheel("vllm"))
    arg_utils = _read(whl, "vllm/engine/arg_utils.py")
    cli_args = _read(whl, "vllm/entrypoints/common/cli_args.py")
    fields: dict[str, str] = {}
    for name in whl.namelist():
        if name.startswith("vllm/config/") and name.endswith(".py"):
            fields.update({k: v for k, v in _annotations(_read(whl, name)).items() if k not in fields})
    fields.update(_annotations(arg_utils))
    flags: set[str] = set()
    booleans: set[str] = set()
    for opts, call in _option_strings(arg_utils) + _option_strings(cli_args):
        flags.update(opts)
        key = _kwargs_key(call)
        explicit_action = any(kw.arg == "action" for kw in call.keywords)
        switch = ("store_true", "store_false")
        if any(kw.arg == "action" and isinstance(kw.value, ast.Constant) and kw.value.value in switch
               for kw in call.keywords):
            booleans.update(opts)
        if key and not explicit_action and _is_bool(fields.get(key, "")):
            long = next(o for o in opts if o.startswith("--"))
            booleans.add(long)
            flags.add("--no-" + long[2:])
    # FrontendArgs / BaseFrontendArgs: one --field-name per dataclass field (cli_args.add_cli_args)
    for node in ast.walk(cli_args):
        if isinstance(node, ast.ClassDef) and node.name in ("BaseFrontendArgs", "FrontendArgs"):
            for stmt in node.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    long = "--" + stmt.target.id.replace("_", "-")
                    flags.add(long)
                    if _is_bool(ast.unparse(stmt.annotation)):
                        booleans.add(long)
                        flags.add("--no-" + long[2:])
    cache = _read(whl, "vllm/config/cache.py")
    return {
        "version": VERSIONS["vllm"],
        "source": f"vllm {VERSIONS['vllm']} wheel (PyPI): vllm/engine/arg_utils.py, "
                  "vllm/entrypoints/common/cli_args.py, vllm/config/*.py",
        "flags": sorted(flags),
        "boolean": sorted(booleans),
        "choices": {
            "--kv-cache-dtype": _literal_choices(cache, "CacheDType"),
            "--dtype": _literal_choices(_read(whl, "vllm/config/model.py"), "ModelDType"),
        },
    }


def _arg_meta(ann: ast.expr) -> tuple[str | None, bool, ast.Call | None] | None:
    """(type source, is bool, Arg call) of an ``A[T, ...]`` annotation, or None when not a CLI field."""
    if not (isinstance(ann, ast.Subscript) and isinstance(ann.value, ast.Name) and ann.value.id in ("A", "Annotated")):
        return None
    elts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else []
    if len(elts) < 2:
        return None
    typ = ast.unparse(elts[0])
    meta = elts[1]
    if isinstance(meta, ast.Constant) and isinstance(meta.value, str):
        return typ, _is_bool(typ), None
    if isinstance(meta, ast.BinOp):  # "help" + "more help"
        return typ, _is_bool(typ), None
    if isinstance(meta, ast.JoinedStr):
        return typ, _is_bool(typ), None
    if isinstance(meta, ast.Call) and isinstance(meta.func, ast.Name) and meta.func.id == "Arg":
        return typ, _is_bool(typ), meta
    return None


def _sglang_field(stmt: ast.AnnAssign, named: dict[str, list[str]]) -> tuple[list[str], bool, list[str]] | None:
    """(option strings, is a switch, choices) of one ``A[T, ...]`` field, as
    ``add_cli_args_from_dataclass`` registers it; None when it has no CLI option."""
    meta = _arg_meta(stmt.annotation)
    if meta is None or not isinstance(stmt.target, ast.Name):
        return None
    typ, is_bool, call = meta
    kw = {k.arg: k.value for k in (call.keywords if call else []) if k.arg}
    if "no_cli" in kw and isinstance(kw["no_cli"], ast.Constant) and kw["no_cli"].value:
        return None
    long = (kw["cli_name"].value if "cli_name" in kw and isinstance(kw["cli_name"], ast.Constant)
            else "--" + stmt.target.id.replace("_", "-"))
    names = [long]
    if "aliases" in kw and isinstance(kw["aliases"], ast.List):
        names += [e.value for e in kw["aliases"].elts if isinstance(e, ast.Constant)]
    choices: list[str] = []
    if "choices" in kw and isinstance(kw["choices"], ast.List):
        choices = [e.value for e in kw["choices"].elts if isinstance(e, ast.Constant)]
    elif "choices" in kw and isinstance(kw["choices"], ast.Name):
        choices = named.get(kw["choices"].id, [])
    elif typ and typ.startswith("Literal["):
        lit = ast.parse(typ, mode="eval").body
        if isinstance(lit, ast.Subscript):
            elts = lit.slice.elts if isinstance(lit.slice, ast.Tuple) else [lit.slice]
            choices = [e.value for e in elts if isinstance(e, ast.Constant)]
    return names, is_bool and "action" not in kw, choices  # bool fields become store_true switches


def sglang_flags() -> dict:
    whl = zipfile.ZipFile(_wheel("sglang"))
    flags: set[str] = set()
    booleans: set[str] = set()
    choices: dict[str, list[str]] = {}
    named = {t.id: [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
             for node in _read(whl, "sglang/srt/arg_groups/choices.py").body
             if isinstance(node, ast.Assign) and isinstance(node.value, ast.List)
             for t in node.targets if isinstance(t, ast.Name)}
    for name in sorted(whl.namelist()):
        if not (name.startswith("sglang/srt/arg_groups/fields/") and name.endswith(".py")):
            continue
        for node in ast.walk(_read(whl, name)):
            for stmt in node.body if isinstance(node, ast.ClassDef) else []:
                got = _sglang_field(stmt, named) if isinstance(stmt, ast.AnnAssign) else None
                if got is None:
                    continue
                names, switch, field_choices = got
                flags.update(names)
                if switch:
                    booleans.update(names)
                if field_choices:
                    choices[names[0]] = field_choices
    for opts, _ in _option_strings(_read(whl, "sglang/srt/server_args.py")):
        flags.update(opts)
    return {
        "version": VERSIONS["sglang"],
        "source": f"sglang {VERSIONS['sglang']} wheel (PyPI): sglang/srt/arg_groups/fields/*.py, "
                  "sglang/srt/server_args.py (ServerArgs.add_cli_args)",
        "flags": sorted(flags),
        "boolean": sorted(booleans),
        "choices": {k: v for k, v in choices.items()
                    if k in ("--kv-cache-dtype", "--disaggregation-mode", "--disaggregation-transfer-backend",
                             "--quantization", "--dtype")},
    }


def dynamo_flags() -> dict:
    whl = zipfile.ZipFile(_wheel("ai-dynamo"))
    tree = _read(whl, "dynamo/vllm/backend_args.py")
    flags: set[str] = set()
    booleans: set[str] = set()
    choices: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg == "flag_name" and isinstance(kw.value, ast.Constant):
                    flags.add(kw.value.value)
                    if isinstance(node.func, ast.Name) and node.func.id == "add_negatable_bool_argument":
                        flags.add("--no-" + kw.value.value[2:])
                        booleans.update((kw.value.value, "--no-" + kw.value.value[2:]))
    for opts, _ in _option_strings(tree):
        flags.update(opts)
    # DisaggregationMode values live in an enum; the prefill/decode roles are the ones we emit
    choices["--disaggregation-mode"] = ["agg", "pd", "prefill", "decode", "encode"]
    return {
        "version": VERSIONS["ai-dynamo"],
        "source": f"ai-dynamo {VERSIONS['ai-dynamo']} wheel (PyPI): dynamo/vllm/backend_args.py "
                  "(the worker also accepts every vLLM engine option)",
        "flags": sorted(flags),
        "boolean": sorted(booleans),
        "choices": choices,
    }


#: TensorRT-LLM's ``trtllm-serve`` options, read by hand from ``tensorrt_llm/commands/serve.py`` (``serve``) at
#: main revision 00209af149e7774406881a37283dce303571eb11, the 1.2/1.3 boundary: the 1.2 wheel is published
#: on NVIDIA's own package index only, which this script cannot reach
TRTLLM = {
    "version": "1.2",
    "source": "hand-read from NVIDIA/TensorRT-LLM tensorrt_llm/commands/serve.py (serve command) at main revision "
              "00209af149e7774406881a37283dce303571eb11, the 1.2/1.3 boundary: the 1.2 wheel is on NVIDIA's own "
              "index only, not PyPI",
    "flags": sorted(["--backend", "--host", "--port", "--log_level", "--tp_size", "--tensor_parallel_size", "--pp_size",
                     "--pipeline_parallel_size", "--ep_size", "--moe_expert_parallel_size", "--cluster_size",
                     "--cp_size", "--gpus_per_node", "--max_beam_width", "--max_batch_size", "--max_num_tokens",
                     "--max_seq_len", "--kv_cache_free_gpu_memory_fraction", "--free_gpu_memory_fraction",
                     "--num_postprocess_workers", "--trust_remote_code", "--reasoning_parser", "--tool_parser",
                     "--metadata_server_config_file", "--server_role", "--extra_llm_api_options", "--config",
                     "--chat_template", "--enable_chunked_prefill", "--otlp_traces_endpoint",
                     "--disagg_cluster_uri"]),
    "boolean": ["--enable_chunked_prefill", "--trust_remote_code"],
    "choices": {"--backend": ["pytorch", "tensorrt", "trt", "_autodeploy"], "--server_role": ["CONTEXT", "GENERATION"]},
}


def main() -> None:
    data = {"vllm": vllm_flags(), "sglang": sglang_flags(), "dynamo": dynamo_flags(), "trtllm": TRTLLM}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {OUT}: " + ", ".join(f"{k} {v['version']} ({len(v['flags'])} flags)" for k, v in data.items()))


if __name__ == "__main__":
    main()
