"""Import public per-kernel measurements into the measurement format (:mod:`.measurements`).

Two sources are read, whatever subset of their tables a directory holds:

* **aiconfigurator** (NVIDIA, Apache-2.0; the ``aiconfigurator-core`` wheel, 0.12.0) keeps, per
  system, ``aiconfigurator_core/systems/data/<system>/<kind>/<framework>/<version>/*.parquet``:
  ``gemm_perf`` (``gemm_dtype, m, n, k, latency``), ``context_attention_perf`` and
  ``generation_attention_perf`` (``batch_size, isl, num_heads, num_key_value_heads, head_dim,
  kv_cache_dtype, step, window_size, latency``) and ``nccl_perf`` (``op_name, num_gpus,
  nccl_dtype, message_size, latency``), ``moe_perf`` (``moe_dtype, num_tokens, hidden_size,
  inter_size, topk, num_experts, moe_tp_size, moe_ep_size, distribution, kernel_source,
  latency``: one MoE layer's fused routed-expert kernel), and ``wideep_generation_moe_perf`` (the
  same columns: SGLang's DeepEP decode expert layer, DeepGEMM's masked grouped GEMM on one rank of
  ``moe_ep_size``, kind ``moe_ep``). Latencies are milliseconds; NCCL message sizes are
  elements (an all-gather of N half elements takes the time of 2N int8 elements in the tables).
  Older releases wrote the same columns as CSV text (``*.txt``/``*.csv``); both are read.
* **Vidur** (Microsoft, MIT; ``data/profiling``): ``compute/<gpu>/<model>/mlp.csv`` holds
  per-operator CUDA-event times (``time_stats.<op>.median``, milliseconds) of one layer at
  ``num_tokens`` with the model's ``n_embd``, ``n_expanded_embd``, ``n_head``, ``n_kv_head`` and
  ``num_tensor_parallel_workers``; ``network/<setup>/all_reduce.csv`` and ``send_recv.csv`` hold
  collective times (``time_stats.<op>.median``, ms) by ``size`` (elements of fp16) and
  ``num_workers``.

Each row becomes a :class:`~serveplan.calibrate.measurements.Measurement` whose work and traffic
are counted as the estimator counts the matching operator (``ops/graph.py``): a GEMM
``m x k`` by ``k x n`` does ``2 m n k`` FLOP and moves ``a (m k + m n) + w k n`` bytes (``a`` = 2
bytes of bf16 activations, ``w`` the weight format's bytes); fused prefill attention does
``(4 d_q + 5 h_q)`` FLOP per causal score and reads Q, K, V and writes O; decode attention reads
the KV cache. The shape is kept in ``name`` as ``key=value`` pairs
(:func:`shape_of`), which the kernel-curve fit (:mod:`serveplan.calibrate.kernel_fit`) reads.

Reading parquet needs ``pyarrow`` (``pip install 'serveplan[import]'``); nothing else does.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from serveplan.calibrate.measurements import Measurement, MeasurementSet
from serveplan.errors import SpecError
from serveplan.units import DType

#: Bytes per element of the formats that appear in the tables.
DTYPE_BYTES = {"bfloat16": 2.0, "bf16": 2.0, "float16": 2.0, "fp16": 2.0, "half": 2.0, "fp8": 1.0,
               "fp8_block": 1.0, "int8": 1.0, "nvfp4": 0.5625, "fp4": 0.5625, "float32": 4.0, "fp32": 4.0}
#: Canonical dtype names written to the measurement rows.
DTYPE_NAME = {"bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "fp16": "fp16", "half": "fp16",
              "fp8": "fp8", "fp8_block": "fp8_block", "int8": "int8", "nvfp4": "fp4", "fp4": "fp4",
              "float32": "fp32", "fp32": "fp32"}
#: Collective names of the tables, mapped to ours.
COLLECTIVES = {"all_reduce": "all_reduce", "allreduce": "all_reduce", "all_gather": "all_gather",
               "reduce_scatter": "reduce_scatter", "alltoall": "all_to_all", "all_to_all": "all_to_all",
               "send_recv": "send_recv"}
SOURCES = ("aiconfigurator", "vidur")
_ACT_BYTES = 2.0  # bf16/fp16 activations in every table read here


def shape_of(m: Measurement) -> dict[str, str]:
    """The ``key=value`` pairs of a row's ``name`` (``"m=1 n=4096 k=4096 dtype=bf16"``)."""
    out = {}
    for part in m.name.split():
        k, sep, v = part.partition("=")
        if sep:
            out[k] = v
    return out


def _name(**kv: Any) -> str:
    return " ".join(f"{k}={v}" for k, v in kv.items())


# ---------------------------------------------------------------------------------- table reading
def _read_table(path: Path) -> Iterator[dict[str, Any]]:
    """Rows of one parquet or CSV table as dictionaries."""
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise SpecError(f"{path}: reading parquet tables needs pyarrow; "
                            "install it with: pip install 'serveplan[import]'") from None
        table = pq.read_table(path).to_pydict()
        cols = list(table)
        for i in range(len(table[cols[0]]) if cols else 0):
            yield {c: table[c][i] for c in cols}
        return
    with path.open(newline="") as f:
        yield from csv.DictReader(line for line in f if not line.startswith("#"))


def _num(row: Mapping[str, Any], key: str, where: Path) -> float:
    try:
        v = float(row[key])
    except KeyError:
        raise SpecError(f"{where}: column {key!r} is missing; found: {', '.join(row)}") from None
    except (TypeError, ValueError):
        raise SpecError(f"{where}: column {key!r}={row[key]!r} must be a number") from None
    return v


def _tables(root: Path, stem: str) -> list[Path]:
    found = [p for ext in ("parquet", "csv", "txt") for p in root.rglob(f"{stem}.{ext}")]
    return sorted(found)


def _runtime(path: Path, system_dir: Path) -> tuple[str, str]:
    """(framework, version) of a table at ``<system>/<kind>/<framework>/<version>/<table>``."""
    rel = path.relative_to(system_dir).parts
    return (rel[1], rel[2]) if len(rel) >= 4 else ("", "")


# ---------------------------------------------------------------------------------- aiconfigurator
def find_systems(root: str | Path) -> dict[str, Path]:
    """System directories under ``root``: the ``systems/data`` folder of an unpacked wheel, any
    folder above it, or one system's folder."""
    root = Path(root)
    if not root.is_dir():
        raise SpecError(f"aiconfigurator directory {str(root)!r} does not exist")
    for cand in (root / "aiconfigurator_core" / "systems" / "data", root / "systems" / "data", root / "data", root):
        if cand.is_dir():
            subs = {p.name: p for p in sorted(cand.iterdir())
                    if p.is_dir() and any(p.glob("*/*/*/*_perf.*"))}
            if subs:
                return subs
    if any(root.glob("*/*/*/*_perf.*")):
        return {root.name: root}
    raise SpecError(f"{root}: no aiconfigurator tables found (expected <system>/<kind>/<framework>/"
                    f"<version>/*_perf.parquet, e.g. aiconfigurator_core/systems/data/h100_sxm/gemm/...)")


def import_aiconfigurator(root: str | Path, system: str, *, framework: str | None = None,
                          kinds: Iterable[str] = ("gemm", "context_attention", "generation_attention", "nccl"),
                          ) -> MeasurementSet:
    # ``kinds`` may add "moe" (the fused MoE tables; :func:`_moe_rows` says which rows are kept) and
    # "moe_ep" (DeepEP expert layers on one expert-parallel rank, :func:`_wideep_moe_rows`)
    """Read one system's GEMM, attention and NCCL tables into measurements.

    Parameters
    ----------
    root:
        Unpacked wheel, its ``systems/data`` folder, or the system's folder.
    system:
        aiconfigurator system name (``h100_sxm``, ``h200_sxm``, ``b200_sxm``, ``a100_sxm``, ``l40s``...).
    framework:
        Keep only tables of this runtime (``vllm``, ``sglang``, ``trtllm``); NCCL tables are kept
        whatever it is. Default: every runtime; each row's ``name`` says which.

    Raises
    ------
    SpecError
        Unknown system, no table found, or a table without its columns.
    """
    systems = find_systems(root)
    if system not in systems:
        raise SpecError(f"aiconfigurator system {system!r} not found under {root}; "
                        f"found: {', '.join(systems) or 'none'}")
    sdir = systems[system]
    rows: list[Measurement] = []
    used: list[str] = []
    kinds = tuple(kinds)
    for stem, kind, reader in (("gemm_perf", "gemm", _gemm_rows), ("context_attention_perf", "context_attention",
                                                                      _context_rows),
                               ("generation_attention_perf", "generation_attention", _generation_rows),
                               ("nccl_perf", "nccl", _nccl_rows), ("moe_perf", "moe", _moe_rows),
                               # decode only: the prefill table (``wideep_context_moe_perf``, DeepGEMM's
                               # contiguous layout) fits the routed-expert curve form 18-32% held out
                               # (docs/validation/deepseek-pools.md, "DeepEP expert curve")
                               ("wideep_generation_moe_perf", "moe_ep", _wideep_moe_rows)):
        if kind not in kinds:
            continue
        for path in _tables(sdir, stem):
            fw, ver = _runtime(path, sdir)
            if framework and stem != "nccl_perf" and fw != framework:
                continue
            before = len(rows)
            rows.extend(reader(path, f"{fw}-{ver}"))
            used.append(f"{path.relative_to(sdir)} ({len(rows) - before} rows)")
    if not rows:
        raise SpecError(f"{sdir}: no GEMM, attention or NCCL rows"
                        + (f" for framework {framework!r}" if framework else ""))
    meta = {"source": "aiconfigurator-core 0.12.0 (Apache-2.0), systems/data/" + system,
            "system": system, "tables": "; ".join(used), "time_unit_of_source": "ms"}
    return MeasurementSet(tuple(rows), meta)


def _gemm_rows(path: Path, runtime: str) -> Iterator[Measurement]:
    for r in _read_table(path):
        dt = str(r.get("gemm_dtype", ""))
        if dt not in DTYPE_BYTES:
            continue  # formats without a byte width here (e.g. w4a16 variants) are skipped
        m, n, k = (_num(r, c, path) for c in ("m", "n", "k"))
        t = _num(r, "latency", path) * 1e-3
        if t <= 0 or min(m, n, k) <= 0:
            continue
        yield _gemm_measurement(m, n, k, dt, t, kernel=str(r.get("kernel_source", "")), runtime=runtime)


def _gemm_measurement(m: float, n: float, k: float, dt: str, t: float, *, kernel: str, runtime: str,
                      weight_bytes: float | None = None, **extra: Any) -> Measurement:
    """One GEMM row: ``2 m n k`` FLOP; ``a_in m k + 2 m n + w k n`` bytes (``w``: the weight format's
    bytes, or ``weight_bytes``; activations of fp8/fp4 GEMMs are quantized too, so ``a_in = w``;
    the output stays bf16)."""
    wb = DTYPE_BYTES[dt] if weight_bytes is None else weight_bytes
    ab_in = wb if dt not in ("bfloat16", "float16", "bf16", "fp16") else _ACT_BYTES
    return Measurement(kind="gemm", phase="decode" if m <= 64 else "prefill", flops=2 * m * n * k,
                       bytes=ab_in * m * k + _ACT_BYTES * m * n + wb * k * n, time_s=t, rows=m,
                       name=_name(m=int(m), n=int(n), k=int(k), dtype=DTYPE_NAME[dt],
                                  kernel=kernel.replace(" ", "_"), runtime=runtime, **extra))


#: Routing of the fused-MoE table rows the curves are fitted to. The tables time each shape under
#: ``balanced`` routing (every expert the same number of rows) and under token-to-expert loads drawn
#: from a power law (``power_law_1.01``, ``power_law_1.2``: aiconfigurator's collector
#: ``collector/<engine>/collect_moe.py``). Real routing is skewed, and aiconfigurator predicts with
#: the power law (``sdk/config.py`` ``workload_distribution = "power_law"``; alpha 1.2 for its
#: generic MoE model, ``sdk/models/moe.py``, 1.01 for DeepSeek's). Chosen on H100 silicon rows
#: (docs/validation/moe-kernels.md, "Routing skew"): 1.2 and 1.01 tie on TTFT there and both beat balanced
#: routing; 1.2, the generic default, is taken.
MOE_DISTRIBUTION = "power_law_1.2"
#: Kernel paths of the MoE tables that are not an engine's default for a gated expert MLP:
#: TensorRT-LLM's opt-in min-latency mode and the kernels for non-gated (ReLU^2) experts.
MOE_SKIPPED_KERNELS = ("min_latency", "nongated")


#: Weight formats only the MoE tables carry: MXFP4 experts (gpt-oss's checkpoint format; 4-bit
#: values plus one 8-bit scale per 32, OCP MX v1.0), written ``mxfp4``, with 16-bit activations or
#: with activations quantized to MXFP8 (Blackwell's kernels; :data:`MXFP8_ACTIVATIONS`); and
#: weight-only INT4 experts (``int4_wo``: Marlin's W4A16 MoE, which vLLM and SGLang run for
#: compressed-tensors, AWQ and GPTQ INT4 checkpoints such as Kimi-K2.5's), written ``w4a16`` at that
#: format's width (:class:`~serveplan.units.DType`), so the curve prices the traffic the estimator counts.
MOE_ONLY_DTYPES = {"w4a16_mxfp4": ("mxfp4", DType.MXFP4.bytes), "w4a8_mxfp4_mxfp8": ("mxfp4", DType.MXFP4.bytes),
                   "int4_wo": ("w4a16", DType.W4A16.bytes)}
#: Table formats whose experts compute on MXFP8 activations: the same weights as ``mxfp4``, another
#: kernel, so their rows carry the suffix :data:`MXFP8_KERNEL_SUFFIX` on the kernel path
#: (``selection.moe_path``) and are never fitted together with the 16-bit-activation rows.
MXFP8_ACTIVATIONS = frozenset({"w4a8_mxfp4_mxfp8"})
MXFP8_KERNEL_SUFFIX = "+mxfp8_activations"


def _moe_format(table_dtype: str) -> tuple[str, float] | None:
    """(format name, bytes per weight) of a MoE table's ``moe_dtype``; ``None`` for formats not read."""
    if table_dtype in MOE_ONLY_DTYPES:
        return MOE_ONLY_DTYPES[table_dtype]
    return (DTYPE_NAME[table_dtype], DTYPE_BYTES[table_dtype]) if table_dtype in DTYPE_BYTES else None


def _moe_kernel(source: str, table_dtype: str) -> str:
    """Kernel path of a MoE table row: its ``kernel_source``, with :data:`MXFP8_KERNEL_SUFFIX` for
    the formats of :data:`MXFP8_ACTIVATIONS`."""
    return source.replace(" ", "_") + (MXFP8_KERNEL_SUFFIX if table_dtype in MXFP8_ACTIVATIONS else "")


def _moe_rows(path: Path, runtime: str) -> Iterator[Measurement]:
    """Fused routed-expert kernel of one MoE layer, :data:`MOE_DISTRIBUTION` routing, no expert
    parallelism (``moe_ep_size`` 1: every expert on the device; ``moe_tp_size`` splits each expert's
    intermediate size). Work and traffic as ``ops/graph.py`` counts ``experts.gate_up``,
    ``experts.silu_mul`` and ``experts.down`` together: ``c = tokens x top-k`` routed rows,
    ``i = inter / tp``, ``W = c (6 h i + 6 i)``, ``Q = 2 c (2 h + 8 i) + e_act w 3 h i`` with
    ``e_act = E (1 - (1 - k/E)^tokens)`` experts holding a token under uniform routing (the
    estimator's count; a skewed routing touches fewer at few tokens, which the fitted curve takes
    in). The shape given to the curve: ``m = c`` routed rows, ``n = 3 i`` (one expert's three
    projections), ``k = h``."""
    for r in _read_table(path):
        dt = str(r.get("moe_dtype", ""))
        src = str(r.get("kernel_source", ""))
        fmt = _moe_format(dt)
        if (fmt is None or str(r.get("distribution", MOE_DISTRIBUTION)) != MOE_DISTRIBUTION
                or any(s in src for s in MOE_SKIPPED_KERNELS)):
            continue
        tokens, h, inter, topk, E, tp, ep = (_num(r, c, path) for c in (
            "num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size"))
        t = _num(r, "latency", path) * 1e-3
        if ep != 1 or t <= 0 or min(tokens, h, inter, topk, E, tp) <= 0 or inter % tp:
            continue
        i = inter / tp
        c = tokens * topk
        eact = E * (1.0 - (1.0 - topk / E) ** tokens)
        name, wb = fmt
        yield Measurement(kind="moe", phase="decode" if tokens <= 64 else "prefill",
                          flops=c * (6 * h * i + 6 * i), bytes=_ACT_BYTES * c * (2 * h + 8 * i) + eact * wb * 3 * h * i,
                          time_s=t, rows=c,
                          name=_name(m=int(c), n=int(3 * i), k=int(h), dtype=name, tokens=int(tokens),
                                     experts=int(E), topk=int(topk), inter=int(inter), tp=int(tp),
                                     kernel=_moe_kernel(src, dt), runtime=runtime))


def _wideep_moe_rows(path: Path, runtime: str) -> Iterator[Measurement]:
    """Routed experts of one MoE layer on one rank of an expert-parallel group, as SGLang runs them
    behind DeepEP in decode (aiconfigurator ``collector/wideep/sglang/collect_deepep_moe.py``:
    DeepGEMM's masked grouped GEMM on the low-latency layout), uniform routing only. ``num_tokens``
    counts the tokens of every rank (the collector writes ``num_token x moe_ep_size``); the latency
    is one rank's ``E / ep`` local experts. Work and traffic of that rank as :func:`_moe_rows` counts
    a layer: ``c = tokens x top-k / ep`` routed rows, and ``e_act = min(E / ep, c)`` local experts
    holding a token: the collector's "uniform" routing is balanced, not drawn (``tokens x top-k / E``
    rows per expert, or one row each on ``c`` experts when that is below one)."""
    for r in _read_table(path):
        dt = str(r.get("moe_dtype", ""))
        fmt = _moe_format(dt)
        if fmt is None or str(r.get("distribution", "uniform")) != "uniform":
            continue
        tokens, h, inter, topk, E, tp, ep = (_num(r, c, path) for c in (
            "num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size"))
        t = _num(r, "latency", path) * 1e-3
        if tp != 1 or ep < 2 or t <= 0 or min(tokens, h, inter, topk, E) <= 0 or E % ep:
            continue
        c = tokens * topk / ep
        eact = min(E / ep, c)
        name, wb = fmt
        yield Measurement(kind="moe_ep", phase="decode",
                          flops=c * (6 * h * inter + 6 * inter),
                          bytes=_ACT_BYTES * c * (2 * h + 8 * inter) + eact * wb * 3 * h * inter,
                          time_s=t, rows=c,
                          name=_name(m=round(c, 3), n=int(3 * inter), k=int(h), dtype=name, tokens=int(tokens),
                                     experts=int(E), topk=int(topk), inter=int(inter), tp=1, ep=int(ep),
                                     kernel=_moe_kernel(str(r.get("kernel_source", "")), dt), runtime=runtime))


def _attn_common(r: Mapping[str, Any], path: Path) -> tuple[float, float, float, float, float, str]:
    b, hq, hkv, d = (_num(r, c, path) for c in ("batch_size", "num_heads", "num_key_value_heads", "head_dim"))
    kv = str(r.get("kv_cache_dtype", "bfloat16"))
    win = float(r.get("window_size", 0) or 0)
    return b, hq, hkv, d, win, kv


def _query_dtype(r: Mapping[str, Any], kv: str) -> str:
    """The format the context kernel computes in (``attn_dtype``: TensorRT-LLM's and SGLang's
    tables time an FP8 KV cache both with a 16-bit and with an FP8 context kernel); tables
    without the column: the KV format's."""
    q = str(r.get("attn_dtype", "") or kv)
    return DTYPE_NAME.get(q, q)


def _context_rows(path: Path, runtime: str) -> Iterator[Measurement]:
    for r in _read_table(path):
        b, hq, hkv, d, win, kv = _attn_common(r, path)
        s = _num(r, "isl", path)
        t = _num(r, "latency", path) * 1e-3
        if win > 0 or t <= 0 or kv not in DTYPE_BYTES or hkv > hq:
            continue  # sliding-window rows: a different kernel path
        causal = b * s * (s + 1) / 2           # feature apc: causal score elements per head
        flops = causal * (4 * hq * d + 5 * hq)  # fused attention, ops/graph.py
        nbytes = b * s * 2 * _ACT_BYTES * hq * d + b * s * 2 * DTYPE_BYTES[kv] * hkv * d
        yield Measurement(kind="attention", phase="prefill", flops=flops, bytes=nbytes, time_s=t, rows=b * s,
                          name=_name(batch=int(b), seq=int(s), heads=int(hq), kv_heads=int(hkv), head_dim=int(d),
                                     kv_dtype=DTYPE_NAME[kv], q_dtype=_query_dtype(r, kv), runtime=runtime))


def _generation_rows(path: Path, runtime: str) -> Iterator[Measurement]:
    for r in _read_table(path):
        b, hq, hkv, d, win, kv = _attn_common(r, path)
        # generation rows: one new token after isl + step cached ones (aiconfigurator's
        # generation attention is timed at step = context - isl)
        ctx = _num(r, "isl", path) + _num(r, "step", path)
        t = _num(r, "latency", path) * 1e-3
        if win > 0 or t <= 0 or kv not in DTYPE_BYTES or hkv > hq:
            continue
        flops = b * ctx * (4 * hq * d + 5 * hq)
        nbytes = b * 2 * _ACT_BYTES * hq * d + b * ctx * 2 * DTYPE_BYTES[kv] * hkv * d
        yield Measurement(kind="attention", phase="decode", flops=flops, bytes=nbytes, time_s=t, rows=b,
                          name=_name(batch=int(b), context=int(ctx), heads=int(hq), kv_heads=int(hkv),
                                     head_dim=int(d), kv_dtype=DTYPE_NAME[kv], runtime=runtime))


def _nccl_rows(path: Path, runtime: str) -> Iterator[Measurement]:
    for r in _read_table(path):
        op = COLLECTIVES.get(str(r.get("op_name", "")))
        dt = str(r.get("nccl_dtype", "half"))
        if op is None or dt not in DTYPE_BYTES:
            continue
        g = _num(r, "num_gpus", path)
        nbytes = _num(r, "message_size", path) * DTYPE_BYTES[dt]
        t = _num(r, "latency", path) * 1e-3
        if t <= 0 or g < 2:
            continue
        yield Measurement(kind="collective", phase="any", flops=0.0, bytes=nbytes, time_s=t,
                          name=_name(op=op, ranks=int(g), dtype=DTYPE_NAME[dt],
                                     runtime=f"nccl-{runtime.split('-')[-1]}"))


# ---------------------------------------------------------------------------------- Vidur
#: Vidur's MLP-side operators (``time_stats.<op>.median``) that are GEMMs: (rows, k, n) of each,
#: in terms of tokens ``t``, hidden ``h``, expanded ``f``, heads ``a``, kv heads ``kv``, head
#: dim ``d`` and tensor-parallel workers ``p`` (vidur/profiling/mlp/mlp_impl.py).
_VIDUR_GEMMS: dict[str, Callable[[float, float, float, float, float, float], tuple[float, float]]] = {
    "attn_pre_proj": lambda h, f, a, kv, d, p: (h, (a + 2 * kv) * d / p),
    "attn_post_proj": lambda h, f, a, kv, d, p: (a * d / p, h),
    "mlp_up_proj": lambda h, f, a, kv, d, p: (h, 2 * f / p),
    "mlp_down_proj": lambda h, f, a, kv, d, p: (f / p, h),
}


def import_vidur(root: str | Path, *, gpu: str | None = None) -> MeasurementSet:
    """Read Vidur's ``data/profiling`` tables (GEMMs of ``mlp.csv``; ``all_reduce.csv`` and
    ``send_recv.csv``) into measurements. ``gpu`` keeps one compute folder (``h100``, ``a100``)
    and the network folders whose name starts with it.

    Raises
    ------
    SpecError
        No Vidur table found under ``root``, or a table without its columns.
    """
    root = Path(root)
    if not root.is_dir():
        raise SpecError(f"vidur directory {str(root)!r} does not exist")
    base = next((c for c in (root / "data" / "profiling", root / "profiling", root) if c.is_dir()
                 and (any(c.glob("compute/*/**/mlp.csv")) or any(c.glob("network/*/*.csv")))), None)
    if base is None:
        raise SpecError(f"{root}: no Vidur tables found (expected data/profiling/compute/<gpu>/<model>/mlp.csv "
                        f"or data/profiling/network/<setup>/all_reduce.csv)")
    rows: list[Measurement] = []
    used = []
    for path in sorted(base.glob("compute/*/**/mlp.csv")):
        dev = path.relative_to(base).parts[1]
        if gpu and dev != gpu:
            continue
        model = "/".join(path.relative_to(base).parts[2:-1])
        before = len(rows)
        rows.extend(_vidur_mlp(path, dev, model))
        used.append(f"{path.relative_to(base)} ({len(rows) - before} rows)")
    for stem in ("all_reduce", "send_recv"):
        for path in sorted(base.glob(f"network/*/{stem}.csv")):
            setup = path.parent.name
            if gpu and not setup.startswith(gpu):
                continue
            before = len(rows)
            rows.extend(_vidur_network(path, stem, setup))
            used.append(f"{path.relative_to(base)} ({len(rows) - before} rows)")
    if not rows:
        raise SpecError(f"{base}: no Vidur rows" + (f" for gpu {gpu!r}" if gpu else ""))
    return MeasurementSet(tuple(rows), {"source": "Vidur data/profiling (MIT)", "tables": "; ".join(used),
                                        "time_unit_of_source": "ms"})


def _vidur_mlp(path: Path, dev: str, model: str) -> Iterator[Measurement]:
    for r in _read_table(path):
        h, f, a, kv, p, tok = (_num(r, c, path) for c in ("n_embd", "n_expanded_embd", "n_head", "n_kv_head",
                                                        "num_tensor_parallel_workers", "num_tokens"))
        d = h / a
        for op, dims in _VIDUR_GEMMS.items():
            key = f"time_stats.{op}.median"
            if not r.get(key):
                continue
            t = float(r[key]) * 1e-3
            k, n = dims(h, f, a, kv, d, p)
            if t <= 0 or not math.isfinite(t):
                continue
            yield Measurement(kind="gemm", phase="decode" if tok <= 64 else "prefill", flops=2 * tok * n * k,
                              bytes=_ACT_BYTES * tok * (k + n) + _ACT_BYTES * k * n, time_s=t, rows=tok,
                              name=_name(m=int(tok), n=int(n), k=int(k), dtype="fp16", op=op, gpu=dev,
                                         model=model.replace(" ", "_"), tp=int(p), runtime="vidur"))


def _vidur_network(path: Path, stem: str, setup: str) -> Iterator[Measurement]:
    for r in _read_table(path):
        key = next((c for c in r if c.startswith("time_stats.") and c.endswith(".median")), None)
        if key is None or not r.get(key):
            continue
        g = _num(r, "num_workers", path)
        nbytes = _num(r, "size", path) * 2.0   # fp16 elements
        t = float(r[key]) * 1e-3
        if t <= 0 or g < 2:
            continue
        nodes = int(float(r.get("devices_per_node", g) or g))
        yield Measurement(kind="collective", phase="any", flops=0.0, bytes=nbytes, time_s=t,
                          name=_name(op=stem, ranks=int(g), dtype="fp16", setup=setup,
                                     per_node=nodes, runtime=f"vidur-{setup}"))


# ---------------------------------------------------------------------------------- AITER
#: AITER tuning tables' ``errRatio`` above which a row's kernel is wrong, not slow (the tuner's own
#: tolerance: ``aiter/utility/mp_tuner.py`` ``worker(tol_err_ratio=0.05)``).
AITER_MAX_ERR_RATIO = 0.05


def _aiter_format(path: Path, r: Mapping[str, Any]) -> tuple[str, float] | None:
    """(format, weight bytes per value) of a row of an AITER tuned-GEMM table, from the table's
    name and its dtype columns; ``None`` for tables and rows no curve describes (batched GEMMs,
    fused MoE, untuned shape lists, bf16 rows with bias, scales or an fp32 output)."""
    name = path.name
    if not name.endswith(".csv") or any(s in name for s in ("batched", "fmoe", "untuned")) or "gemm" not in name:
        return None
    if "a4w4" in name:   # FP4 E2M1 weights and activations, one E8M0 scale per 1 x 32 (``per1x32Fp4``): MXFP4
        return "fp4", DType.MXFP4.bytes
    if "a8w8_blockscale" in name:   # FP8 with one scale per 1 x 128 activations and 128 x 128 weights
        return "fp8_block", DTYPE_BYTES["fp8_block"]
    if "a8w8" in name:   # per-token activation and per-channel weight scales (CK ``a8w8_rowwise``, asm, FlyDSL)
        q = str(r.get("q_dtype_w", "") or "")
        return ("fp8", 1.0) if "float8" in q else ("int8", 1.0) if "int8" in q else None
    if "bf16" in name:
        plain = (str(r.get("dtype", "")) == "torch.bfloat16" and str(r.get("outdtype", "")) == "torch.bfloat16"
                 and str(r.get("bias", "False")) == "False" and str(r.get("scaleAB", "False")) == "False")
        return ("bf16", 2.0) if plain else None
    return None


def import_aiter(root: str | Path, *, cu_num: int, gfx: str, runtime: str = "aiter") -> MeasurementSet:
    """Read AMD AITER's tuned-GEMM tables (``ROCm/aiter``, MIT: ``aiter/configs/*tuned*gemm*.csv``
    and ``aiter/configs/model_configs/``) into GEMM measurements of one device.

    Each table row is one shape ``(M, N, K)`` (``M`` token rows, an ``N x K`` weight) with the time
    ``us`` of the fastest kernel AITER's tuner found on a device of ``cu_num`` compute units of
    architecture ``gfx`` (``gfx942``, 304 CUs: MI300X and MI325X; ``gfx950``, 256 CUs: MI355X and
    MI350X). ``us`` is the kernel's device time (torch profiler, mean of 100 calls on the same
    inputs after warm-up: ``aiter/test_common.py`` ``run_perftest``). Formats
    (:func:`_aiter_format`): ``bf16``, ``fp8`` (per-token scaled), ``fp8_block`` (1 x 128 / 128 x
    128 block scales), ``fp4`` (MXFP4, ``a4w4``) and ``int8``. A shape tuned in several tables of
    one format (a kernel family each, e.g. CK and pre-shuffled asm) keeps its fastest row, the one
    AITER's dispatch would run; rows whose ``errRatio`` exceeds :data:`AITER_MAX_ERR_RATIO` are
    left out. The activations arrive quantized: no quantization pass is in ``us``. Each row's
    ``name`` carries its table as ``table=<file stem>``.

    Raises
    ------
    SpecError
        No AITER table under ``root``, or none with rows of ``cu_num`` and ``gfx``.
    """
    root = Path(root)
    base = next((c for c in (root / "aiter" / "configs", root / "configs", root) if c.is_dir()), None)
    if base is None:
        raise SpecError(f"aiter directory {str(root)!r} does not exist")
    paths = sorted(p for p in base.rglob("*.csv") if "gemm" in p.name and "tuned" in p.name)
    best: dict[tuple[str, int, int, int], Measurement] = {}
    used: list[str] = []
    for path in paths:
        kept = 0
        for r in _read_table(path):
            if str(r.get("gfx", "")) != gfx or str(r.get("cu_num", "")) != str(cu_num):
                continue
            fmt = _aiter_format(path, r)
            if fmt is None:
                continue
            try:
                m, n, k, us = (float(r[c]) for c in ("M", "N", "K", "us"))
                err = float(r.get("errRatio", r.get("err_ratio", 0.0)) or 0.0)
            except (KeyError, TypeError, ValueError):
                continue
            if not (math.isfinite(us) and us > 0 and min(m, n, k) > 0) or err > AITER_MAX_ERR_RATIO:
                continue
            dt, wb = fmt
            row = _gemm_measurement(m, n, k, dt, us * 1e-6, weight_bytes=wb, runtime=runtime,
                                    kernel=str(r.get("libtype", "") or r.get("kernelName", "")).split("_")[0],
                                    table=path.stem)
            key = (dt, int(m), int(n), int(k))
            if key not in best or row.time_s < best[key].time_s:
                best[key] = row
            kept += 1
        if kept:
            used.append(f"{path.relative_to(base)} ({kept} rows)")
    if not best:
        raise SpecError(f"{base}: no AITER tuned-GEMM rows for {gfx} with {cu_num} CUs")
    return MeasurementSet(tuple(best.values()),
                          {"source": f"ROCm/aiter tuned GEMM tables ({runtime})", "gfx": gfx, "cu_num": str(cu_num),
                           "tables": "; ".join(used), "time_unit_of_source": "us"})
