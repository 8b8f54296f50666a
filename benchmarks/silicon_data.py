"""NVIDIA aiconfigurator's measured serving rows, mapped onto serveplan's specs.

The development set is ``silicon_sample.csv`` inside the ``aiconfigurator-core`` 0.12.0 wheel on
PyPI (Apache-2.0): about 5,200 TTFT/TPOT measurements of vLLM, SGLang and TensorRT-LLM at a fixed
concurrency (closed loop) on H100, H200, B200, B300, GB200 and GB300. The wheel is fetched once
with ``pip download --no-deps`` into a cache directory (``$SERVEPLAN_BENCH_CACHE``, default
``~/.cache/serveplan-bench``) and read in place with :mod:`zipfile`; nothing here runs in tests.

API::

    rows = load_rows()                  # list of dicts, the CSV's columns as strings
    case = map_row(rows[0])             # SiliconCase, or raises NotStatable(cause, detail)
    cases, skipped = map_rows(rows)

Command line::

    python benchmarks/silicon_data.py --coverage          # statable share and what is left, by cause
    python benchmarks/silicon_data.py --coverage --json

How a row is stated (each choice is the row's own field unless said otherwise):

* model: ``model_path`` -> a bundled catalog id (:data:`MODELS`; NVIDIA's re-quantised
  checkpoints map to the model they were made from, the format comes from the row).
* hardware: ``system`` -> catalog id (:data:`SYSTEMS`).
* weight format: ``moe_quant_mode`` for MoE models (the experts hold almost all weight bytes),
  else ``gemm_quant_mode``; ``fp8`` per-tensor, ``fp8_block`` 128x128 block scales, ``nvfp4``,
  ``int4_wo`` (weight-only int4) -> ``w4a16``; empty -> the checkpoint's bf16.
* KV-cache format: fp8 for fp8/fp4 runs, as NVIDIA's ModelOpt checkpoints declare
  (``hf_quant_config.json``: ``"kv_cache_quant_algo": "FP8"``, e.g. nvidia/DeepSeek-V3.1-NVFP4
  and Qwen3-32B-FP8-Static-PerTensor bundled in the same wheel); bf16 otherwise. The CSV has no KV
  column, so this is an assumption.
* layout: aggregated rows use ``tp_size``, ``pp_size``, ``attention_dp_size`` (serveplan ``dp``)
  and ``moe_ep_size`` (``ep``); aiconfigurator's ``moe_tp_size * moe_ep_size`` must equal
  ``tp_size * attention_dp_size`` (serveplan's expert split is ``tp*dp/ep``); rows of two
  collections that record a ``tp N, ep N`` run as ``N * N`` ranks with ``moe_tp = moe_ep = N`` are
  stated on ``N`` GPUs (:func:`folded_expert_parallelism`). Dense models ignore the MoE fields.
  Disaggregated rows give a prefill and a decode layout and worker counts.
* engine: ``backend`` (vllm, sglang, trtllm) and ``backend_version``.
* load: ``isl``, ``osl`` and the closed-loop concurrency (``silicon_concurrency=`` in
  ``silicon_data_source``; else ``_c<N>_`` in the row id; else ``batch_size``).
* measured: ``silicon_ttft_ms``, ``silicon_tpot_ms`` (converted to seconds).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import subprocess
import sys
import zipfile
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from serveplan import ParallelConfig, SpecError, get_hardware, get_model
from serveplan.specs.model import SUPPORTED_MODEL_TYPES, ModelSpec
from serveplan.units import MS, DType

WHEEL = "aiconfigurator-core==0.12.0"
WHEEL_GLOB = "aiconfigurator_core-0.12.0-*.whl"
CSV_MEMBER = "aiconfigurator_core/systems/silicon_sample.csv"
CACHE_ENV = "SERVEPLAN_BENCH_CACHE"

#: ``model_path`` -> (catalog id, HF model_type of the checkpoint's config.json).
MODELS: dict[str, tuple[str, str]] = {
    "deepseek-ai/DeepSeek-R1": ("deepseek-r1", "deepseek_v3"),
    "deepseek-ai/DeepSeek-V3": ("deepseek-v3", "deepseek_v3"),
    "nvidia/DeepSeek-R1-NVFP4": ("deepseek-r1", "deepseek_v3"),
    "nvidia/DeepSeek-V3.1-NVFP4": ("deepseek-v3.1", "deepseek_v3"),
    "MiniMaxAI/MiniMax-M2.5": ("minimax-m2.5", "minimax_m2"),
    "openai/gpt-oss-120b": ("gpt-oss-120b", "gpt_oss"),
    "meta-llama/Llama-3.1-70B": ("llama-3.1-70b", "llama"),
    "meta-llama/Llama-3.1-8B-Instruct": ("llama-3.1-8b", "llama"),
    "nvidia/Llama-3.1-8B-Instruct-FP8": ("llama-3.1-8b", "llama"),
    "Qwen/Qwen3-32B": ("qwen3-32b", "qwen3"),
    "nvidia/Qwen3-32B-NVFP4": ("qwen3-32b", "qwen3"),
    "Qwen/Qwen3-235B-A22B-FP8": ("qwen3-235b-a22b", "qwen3_moe"),
    "Qwen/Qwen3.5-397B-A17B": ("qwen3.5-397b-a17b", "qwen3_5_moe"),
    "moonshotai/Kimi-K2.5": ("kimi-k2.5", "kimi_k2"),
    "zhipuai/GLM-5": ("glm-5", "glm_moe_dsa"),
}

#: ``system`` -> catalog id.
SYSTEMS = {
    "h100_sxm": "h100-sxm",
    "h200_sxm": "h200",
    "b200_sxm": "b200",
    "b300_sxm": "b300",
    "gb200": "gb200",
    "gb300": "gb300",
}

#: aiconfigurator quant mode -> serveplan weight format.
QUANT_MODES = {
    "": DType.BF16,
    "bf16": DType.BF16,
    "fp16": DType.FP16,
    "fp8": DType.FP8,
    "fp8_block": DType.FP8_BLOCK,
    "nvfp4": DType.NVFP4,
    "mxfp4": DType.MXFP4,
    "int4_wo": DType.W4A16,
    "int8_wo": DType.W8A16,
}

ENGINES = ("vllm", "sglang", "trtllm")


class NotStatable(Exception):
    """A row serveplan cannot state; ``cause`` groups rows for the coverage table."""

    def __init__(self, cause: str, detail: str = "") -> None:
        super().__init__(f"{cause}: {detail}" if detail else cause)
        self.cause = cause
        self.detail = detail


@dataclass(frozen=True, slots=True)
class Layout:
    """One instance kind: its parallel layout and how many instances run it."""

    parallel: ParallelConfig
    instances: int = 1

    def to_dict(self) -> dict[str, Any]:
        p = self.parallel
        return {"tp": p.tp, "pp": p.pp, "dp": p.dp, "ep": p.ep, "instances": self.instances}


@dataclass(frozen=True, slots=True)
class SiliconCase:
    """One measured row stated in serveplan terms (SI units)."""

    row_id: str
    model: str                # catalog id
    hardware: str             # catalog id
    dtype: DType              # weight format
    kv_dtype: DType           # KV-cache format
    engine: str               # vllm | sglang | trtllm
    engine_version: str
    mode: str                 # "agg" (collocated) or "disagg"
    layout: Layout | None     # aggregated: the one instance kind
    prefill: Layout | None    # disaggregated: prefill instances
    decode: Layout | None     # disaggregated: decode instances
    isl: int
    osl: int
    concurrency: int
    ttft_s: float
    tpot_s: float
    batch_size: int = 0       # the measured configuration's max batch (``batch_size``; 0: not given)
    #: the benchmark client's length spread: each request's prompt and output lengths drawn
    #: uniformly from ``[int(L r), L]`` (1: every request ``isl``/``osl``; :func:`length_ratio`)
    length_ratio: float = 1.0
    #: the day the run was measured (``measured=`` in ``silicon_data_source``, InferenceMAX rows;
    #: ``""``: not recorded)
    measured: str = ""

    @property
    def parallel(self) -> ParallelConfig:
        """The aggregated layout (raises for a disaggregated row)."""
        if self.layout is None:
            raise ValueError(f"{self.row_id} is disaggregated: use .prefill and .decode")
        return self.layout.parallel

    @property
    def num_devices(self) -> int:
        if self.layout is not None:
            return self.layout.parallel.num_devices * self.layout.instances
        assert self.prefill is not None and self.decode is not None
        return (self.prefill.parallel.num_devices * self.prefill.instances
                + self.decode.parallel.num_devices * self.decode.instances)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["dtype"], d["kv_dtype"] = self.dtype.value, self.kv_dtype.value
        for k in ("layout", "prefill", "decode"):
            lay = getattr(self, k)
            d[k] = lay.to_dict() if lay is not None else None
        return d


# ------------------------------------------------------------------------------ loading
def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "serveplan-bench")


def wheel_path(download: bool = True) -> Path:
    """The cached wheel; downloaded once with ``pip download --no-deps`` when missing."""
    d = cache_dir() / "wheels"
    found = sorted(d.glob(WHEEL_GLOB))
    if found:
        return found[-1]
    if not download:
        raise FileNotFoundError(f"{WHEEL} is not in {d}; run without --offline to download it")
    d.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                    "-d", str(d), WHEEL], check=True)
    found = sorted(d.glob(WHEEL_GLOB))
    if not found:
        raise FileNotFoundError(f"pip download left no {WHEEL_GLOB} in {d}")
    return found[-1]


def load_rows(path: str | Path | None = None) -> list[dict[str, str]]:
    """Rows of ``silicon_sample.csv`` (from the cached wheel, or a CSV/wheel at ``path``)."""
    p = Path(path) if path is not None else wheel_path()
    if p.suffix == ".csv":
        text = p.read_text()
    else:
        with zipfile.ZipFile(p) as z:
            text = z.read(CSV_MEMBER).decode()
    return list(csv.DictReader(io.StringIO(text)))


# ------------------------------------------------------------------------------ mapping
def _int(row: dict[str, str], key: str, default: int | None = None) -> int:
    raw = (row.get(key) or "").strip()
    if not raw:
        if default is None:
            raise NotStatable("missing field", f"{key} is empty")
        return default
    try:
        return int(float(raw))
    except ValueError:
        raise NotStatable("missing field", f"{key}={raw!r} is not a number") from None


def concurrency_of(row: dict[str, str]) -> int:
    m = re.search(r"silicon_concurrency=(\d+)", row.get("silicon_data_source", ""))
    if m:
        return int(m.group(1))
    m = re.search(r"_c(\d+)_", row.get("id", ""))
    if m:
        return int(m.group(1))
    return _int(row, "batch_size")


def _layout(row: dict[str, str], model: ModelSpec, prefix: str) -> Layout:
    tp = _int(row, prefix + "tp_size")
    pp = _int(row, prefix + "pp_size", 1) or 1  # 0 marks a field the run did not set
    dp = _int(row, prefix + "attention_dp_size", 1) or 1
    if min(tp, pp, dp) < 1:
        raise NotStatable("layout", f"{prefix}tp/pp/attention_dp = {tp}/{pp}/{dp} (0 is not a size)")
    ep = 1
    if model.is_moe:
        moe_ep = _int(row, prefix + "moe_ep_size", 1) or 1
        moe_tp = _int(row, prefix + "moe_tp_size", 0) or (tp * dp) // moe_ep
        if folded_expert_parallelism(row, tp, dp, moe_tp, moe_ep):
            n = moe_ep
            tp, dp, moe_tp = (n, dp, 1) if tp == n * n else (tp, n, 1)
        if min(moe_tp, moe_ep) < 1 or moe_tp * moe_ep != tp * dp:
            raise NotStatable(
                "layout", f"{prefix}moe_tp x moe_ep = {moe_tp} x {moe_ep} differs from tp x attention_dp = {tp} x {dp}"
            )
        ep = moe_ep
    try:
        par = ParallelConfig(tp=tp, pp=pp, dp=dp, ep=ep)
        par.validate_for(model)
    except SpecError as exc:
        raise NotStatable("layout", str(exc)) from None
    workers = _int(row, prefix + "num_workers", 1) if prefix else 1
    return Layout(par, workers)


#: Collections whose layouts were written from an engine's ``tp N, ep N`` launch (the
#: InferenceMAX-style database dump and its CSV export, ``silicon_data_source`` starting with these).
FOLDED_EP_SOURCES = ("db-dump/", "source_file=20")
#: SemiAnalysis InferenceMAX's benchmark client (README "Benchmark Client Configuration":
#: ``benchmark_serving.py --dataset-name random --random-range-ratio 0.8 --num-prompts 10 C
#: --max-concurrency C --ignore-eos`` over the (ISL, OSL) grid 1024/1024, 1024/8192, 8192/1024):
#: its ``sample_random_requests`` draws each prompt and output length uniformly from the integers
#: ``[int(L * 0.8), L]``. The two collections of :data:`FOLDED_EP_SOURCES` are its runs (only that
#: grid of lengths appears in them: 2,850 rows).
INFERENCEMAX_RANGE_RATIO = 0.8


def length_ratio(row: dict[str, str]) -> float:
    """The row's benchmark length spread (:data:`INFERENCEMAX_RANGE_RATIO` for InferenceMAX runs;
    1: fixed lengths, as aiconfigurator's gap-analysis runner sends them)."""
    return INFERENCEMAX_RANGE_RATIO if row.get("silicon_data_source", "").startswith(FOLDED_EP_SOURCES) else 1.0


def folded_expert_parallelism(row: dict[str, str], tp: int, dp: int, moe_tp: int, moe_ep: int) -> bool:
    """Whether an aggregated row's layout holds its expert parallelism twice: ``moe_tp = moe_ep = N > 1``
    with ``N * N`` attention ranks, for a run on ``N`` GPUs launched with ``tp N`` (or attention DP
    ``N``) and ``ep N``. In the two collections of :data:`FOLDED_EP_SOURCES` every row with both MoE
    sizes above 1 has them equal (329 rows, none with a mixed split), and 89 of them carry exactly the
    TTFT and TPOT (to the microsecond) of another row of the same model, system, engine and lengths
    laid out on ``N`` GPUs with ``moe_tp = 1, moe_ep = N`` (e.g. SGLang 0.5.9, DeepSeek on B200,
    1024/1024 at 4 clients: 189 ms / 8.0 ms recorded both as ``tp 64, moe 8 x 8`` and as ``tp 8,
    ep 8``; gpt-oss-120b, a one-GPU model, appears at ``tp 64`` on H200). Those rows are stated on
    ``N`` GPUs (:func:`_layout`); the gap-analysis collection's ``tp 4, moe 2 x 2`` rows (Qwen3-235B
    FP8 on H100, which needs all four GPUs) keep their layout."""
    n = moe_ep
    if not (moe_tp == n > 1 and tp * dp == n * n and 1 in (tp, dp)):
        return False
    return row.get("silicon_data_source", "").startswith(FOLDED_EP_SOURCES)


def weight_format(row: dict[str, str], model: ModelSpec) -> DType:
    mode = (row.get("moe_quant_mode") if model.is_moe else row.get("gemm_quant_mode")) or ""
    if not mode and row.get("precision"):
        mode = row["precision"]
    if mode not in QUANT_MODES:
        raise NotStatable("precision", f"quant mode {mode!r}")
    dt = QUANT_MODES[mode]
    # the served weights are the checkpoint's: a row naming the family of a checkpoint's own
    # quantized format (same tensor-core arithmetic, DType.compute) runs that format's kernels, e.g.
    # an "fp8" row of DeepSeek-R1 or MiniMax-M2.5 (128x128 block scales) as fp8_block, an "nvfp4"
    # row of gpt-oss (MXFP4) as mxfp4
    return model.dtype if model.dtype.compute is dt.compute else dt


def kv_format(row: dict[str, str]) -> DType:
    return DType.FP8 if row.get("precision") in ("fp8", "fp4") else DType.BF16


def _batch_size(row: dict[str, str], layout: Layout | None) -> int:
    """The row's ``batch_size`` (per attention-DP rank) for the ranks it is stated with: a folded
    layout (:func:`folded_expert_parallelism`) has fewer ranks, each with more of the clients."""
    bs = _int(row, "batch_size", 0)
    recorded = _int(row, "attention_dp_size", 1) or 1
    if layout is not None and bs and layout.parallel.dp < recorded:
        return bs * (recorded // layout.parallel.dp)
    return bs


def map_row(row: dict[str, str]) -> SiliconCase:
    """State one CSV row in serveplan terms.

    Raises
    ------
    NotStatable
        With ``cause`` one of: ``model <type>`` (type or checkpoint not bundled), ``system <name>``,
        ``precision``, ``layout``, ``engine <name>``, ``missing field``.
    """
    path = row.get("model_path", "")
    if path not in MODELS:
        raise NotStatable(f"model {path}", "no catalog entry")
    model_id, model_type = MODELS[path]
    try:
        model = get_model(model_id)
    except SpecError as exc:
        supported = model_type in SUPPORTED_MODEL_TYPES
        raise NotStatable(f"model {model_id}" if supported else f"model type {model_type}", str(exc)) from None
    system = row.get("system", "")
    if system not in SYSTEMS:
        raise NotStatable(f"system {system}", "no catalog entry")
    try:
        hw = get_hardware(SYSTEMS[system])
    except SpecError as exc:
        raise NotStatable(f"system {system}", str(exc)) from None
    dtype = weight_format(row, model)
    try:
        hw.compute_format(dtype)
    except SpecError as exc:
        raise NotStatable("precision", str(exc)) from None
    engine = row.get("backend", "")
    if engine not in ENGINES:
        raise NotStatable(f"engine {engine}", "not an engine serveplan models")
    mode = row.get("mode", "agg")
    layout = prefill = decode = None
    if mode == "disagg":
        prefill = _layout(row, model, "prefill_")
        decode = _layout(row, model, "decode_")
    else:
        layout = _layout(row, model, "")
    try:
        ttft = float(row["silicon_ttft_ms"]) * MS
        tpot = float(row["silicon_tpot_ms"]) * MS
    except (KeyError, ValueError):
        raise NotStatable("missing field", "silicon_ttft_ms/silicon_tpot_ms") from None
    return SiliconCase(
        row_id=row.get("id", ""), model=model_id, hardware=hw.name, dtype=dtype, kv_dtype=kv_format(row),
        engine=engine, engine_version=row.get("backend_version", ""), mode=mode, layout=layout,
        prefill=prefill, decode=decode, isl=_int(row, "isl"), osl=_int(row, "osl"),
        concurrency=concurrency_of(row), ttft_s=ttft, tpot_s=tpot, batch_size=_batch_size(row, layout),
        length_ratio=length_ratio(row), measured=measured_day(row),
    )


def measured_day(row: dict[str, str]) -> str:
    """``YYYY-MM-DD`` of ``measured=`` in the row's ``silicon_data_source`` (``""`` when absent)."""
    m = re.search(r"measured=(\d{4}-\d{2}-\d{2})", row.get("silicon_data_source", ""))
    return m.group(1) if m else ""


# ---------------------------------------------------------------------- how the rows were deployed
#: aiconfigurator's generator (github.com/ai-dynamo/aiconfigurator, ``src/aiconfigurator/generator``)
#: writes the engine configuration every aggregated row was measured with; its settings beside the
#: row's ``batch_size`` (the configuration's max batch, equal to the concurrency in these rows):
#:
#: * TensorRT-LLM: ``max_batch_size = bs``, ``max_num_tokens = bs + isl + 1500`` (rounded up to the
#:   32-token block since 2026-01-29), ``enable_chunked_prefill: false``, overlap scheduler on,
#:   ``kv_cache_config.free_gpu_memory_fraction`` 0.80 (``generator/backends/trtllm.py`` and
#:   ``templates/trtllm/extra_engine_args.1.0.0rc3.yaml.j2`` at commit 9caa534, 2025-10-17; the same
#:   rule in ``rule_plugin/trtllm.rule`` and ``rule_plugin/benchmark/trtllm.rule`` of 2026).
#: * vLLM: ``max_num_seqs = bs``, ``max_num_batched_tokens = bs + isl + 1500``
#:   (``rule_plugin/vllm.rule``, ``rule_plugin/benchmark/vllm.rule``: "agg max_num_tokens").
#: * SGLang: ``max_running_requests = bs``, ``max_prefill_tokens = isl + 1500``,
#:   ``--enable-mixed-chunk`` (``rule_plugin/sglang.rule``, ``rule_plugin/benchmark/sglang.rule``).
#:
#: With attention data parallelism each of the ``dp`` ranks schedules its own batch with these
#: limits, so an instance's limits are ``dp`` times a rank's.
TOKEN_HEADROOM = 1500
TRTLLM_FREE_MEMORY_FRACTION = 0.80


@dataclass(frozen=True, slots=True)
class Deployment:
    """The engine settings one aggregated row ran with (see :data:`TOKEN_HEADROOM`)."""

    max_batch: int
    token_budget: int | None          # vLLM ``max_num_batched_tokens`` / TRT-LLM ``max_num_tokens``
    max_prefill_tokens: int | None    # SGLang ``max_prefill_tokens``
    mixed: bool | None                # SGLang ``--enable-mixed-chunk``
    memory_fraction: float | None     # TRT-LLM ``free_gpu_memory_fraction``


def deployment(case: SiliconCase) -> Deployment:
    """The engine configuration aiconfigurator's generator wrote for ``case`` (aggregated rows)."""
    par = case.parallel
    bs = case.batch_size or case.concurrency
    dp = par.dp
    if case.engine == "trtllm":
        return Deployment(max_batch=bs * dp, token_budget=(bs + case.isl + TOKEN_HEADROOM) * dp,
                          max_prefill_tokens=None, mixed=None, memory_fraction=TRTLLM_FREE_MEMORY_FRACTION)
    if case.engine == "vllm":
        return Deployment(max_batch=bs * dp, token_budget=(bs + case.isl + TOKEN_HEADROOM) * dp,
                          max_prefill_tokens=None, mixed=None, memory_fraction=None)
    return Deployment(max_batch=bs * dp, token_budget=None, max_prefill_tokens=(case.isl + TOKEN_HEADROOM) * dp,
                      mixed=True, memory_fraction=None)


#: InferenceMAX's launch scripts for Llama-3.3-70B on TensorRT-LLM (github.com/SemiAnalysisAI/InferenceX,
#: ``benchmarks/70b_fp8_b200_trt_slurm.sh``, ``70b_fp4_b200_trt_slurm.sh`` and ``70b_fp8_h200_trt_slurm.sh``
#: at commit 9596d23d7 of 2025-10-29, the day these rows record as ``measured``; Llama 70B left the
#: suite that day): ``trtllm-serve --max_num_tokens 16384`` and, for 1024/1024 below TP 8,
#: ``batch_wait_max_tokens_ratio: 0.9`` with ``batch_wait_timeout_iters: 20`` in the extra LLM-API
#: options ("will improve the performance" of 1k/1k, the script says); no ``max_batch_size``
#: (TensorRT-LLM's 2048) and no memory fraction (its 0.9).
INFERENCEMAX_LLAMA_TRTLLM_MAX_NUM_TOKENS = 16384
INFERENCEMAX_LLAMA_TRTLLM_BATCH_WAIT = (20, 0.9)


def inferencemax_trtllm_llama(case: SiliconCase) -> tuple[int, tuple[int, float]] | None:
    """``(max_num_tokens, (batch_wait_timeout_iters, batch_wait_max_tokens_ratio))`` InferenceMAX's
    script launched ``case``'s server with, for its TensorRT-LLM Llama-70B rows (None for any other
    row; (0, 0.0) where the script sets no batch waiting)."""
    if case.engine != "trtllm" or case.model != "llama-3.1-70b" or case.length_ratio == 1.0:
        return None
    wait = (INFERENCEMAX_LLAMA_TRTLLM_BATCH_WAIT if (case.isl, case.osl) == (1024, 1024) and case.parallel.tp < 8
            else (0, 0.0))
    return INFERENCEMAX_LLAMA_TRTLLM_MAX_NUM_TOKENS, wait


#: The day InferenceMAX's vLLM gpt-oss scripts for H100 and H200 started exporting
#: ``VLLM_MXFP4_USE_MARLIN=1`` (github.com/SemiAnalysisAI/InferenceX commit 4e52ed4c6 of 2026-01-02,
#: PR #327, ``benchmarks/gptoss_fp4_h100_docker.sh``, ``gptoss_fp4_h100_slurm.sh``,
#: ``gptoss_fp4_h200_slurm.sh``: "Add VLLM_MXFP4_USE_MARLIN=1 to H100 and H200 benchmark scripts",
#: with the move to vLLM 0.13, "Fix H100/H200 perf regression"); every later version of those scripts
#: keeps it (``benchmarks/single_node/gptoss_fp4_h100.sh``, ``gptoss_fp4_h200.sh``).
INFERENCEMAX_VLLM_MARLIN_FROM = "2026-01-02"


def moe_backends(case: SiliconCase) -> dict[str, str]:
    """Opt-in fused-MoE backends ``case``'s server ran (``EngineSpec.moe_backends``): Marlin for the
    MXFP4 experts of InferenceMAX's vLLM gpt-oss runs on H100 and H200 measured on or after
    :data:`INFERENCEMAX_VLLM_MARLIN_FROM`; none for any other row (its engine's default path)."""
    if (case.engine == "vllm" and case.model == "gpt-oss-120b" and case.hardware in ("h100-sxm", "h200")
            and case.measured >= INFERENCEMAX_VLLM_MARLIN_FROM):
        return {"mxfp4": "marlin"}
    return {}


#: vLLM turned asynchronous scheduling on by default in v0.14.0 (release notes, "Async scheduling is
#: now enabled by default", PR #27614; ``vllm/config/vllm.py`` resolves ``async_scheduling=None`` to
#: True for a supported executor without pipeline parallelism).
VLLM_ASYNC_DEFAULT_FROM = (0, 14)


def version_key(text: str) -> tuple[int, ...]:
    """``"0.8.1.post2"`` -> ``(0, 8, 1)``: the numeric release, suffixes dropped (``()`` for a
    nightly or an empty version)."""
    out: list[int] = []
    for part in text.split("."):
        digits = "".join(ch for ch in part if ch.isdigit()) if part[:1].isdigit() else ""
        if not digits:
            break
        out.append(int(digits))
    return tuple(out)


def overlap_scheduling(case: SiliconCase) -> bool | None:
    """Whether ``case``'s server overlapped scheduling with the device's step
    (:attr:`EngineSpec.overlap_scheduling`), where its engine file's default does not say it: a
    vLLM row measured with v0.14 or later (vLLM's default from then,
    :data:`VLLM_ASYNC_DEFAULT_FROM`; the bundled files describe v0.11, off, and v0.33, on) or any
    InferenceMAX vLLM run (``case.length_ratio < 1``), whose launch scripts set ``async-scheduling:
    true`` in the server config from 2025-09 on (github.com/SemiAnalysisAI/InferenceX at 9596d23d7 of
    2025-10-29: ``benchmarks/70b_fp8_h100_slurm.sh``, ``70b_fp8_h200_slurm.sh``,
    ``70b_fp8_b200_docker.sh``, ``70b_fp4_b200_docker.sh``, ``gptoss_fp4_h100_slurm.sh``,
    ``gptoss_fp4_h200_slurm.sh``, ``gptoss_fp4_b200_docker.sh``; still so at 84320a0aa of December
    2025), is True; aiconfigurator's vLLM 0.12.0 rows, launched without the flag
    (``generator/config/backend_templates/vllm/cli_args.0.12.0.j2``), ran without it (False).
    None for the other engines: TensorRT-LLM and SGLang overlap by default
    (``disable_overlap_scheduler`` / ``disable_overlap_schedule`` False), aiconfigurator's generator
    keeps it on for aggregated TensorRT-LLM workers (``rule_plugin/trtllm.rule``: ``agg
    disable_overlap_scheduler = false``), and no InferenceMAX script of these runs turns it off
    (the first to do so is of 2026-06), so their engine files apply."""
    if case.engine != "vllm":
        return None
    if case.length_ratio < 1.0:
        return True
    return version_key(case.engine_version)[:2] >= VLLM_ASYNC_DEFAULT_FROM


@dataclass(frozen=True, slots=True)
class TrtllmScript:
    """The server settings an InferenceMAX TensorRT-LLM launch script set (:func:`inferencemax_trtllm`),
    per attention-DP rank where attention DP is on."""

    max_num_tokens: int                          # --max_num_tokens
    max_batch: int | None = None                 # --max_batch_size (None: TensorRT-LLM's 2048)
    memory_fraction: float | None = None         # kv_cache_config.free_gpu_memory_fraction
    batch_wait: tuple[int, float] = (0, 0.0)     # batch_wait_timeout_iters, batch_wait_max_tokens_ratio
    adp_balance: tuple[int, int] | None = None   # attention_dp_config timeout_iters, batching_wait_iters


def _ceil64(n: int) -> int:
    return (n + 63) // 64 * 64


def inferencemax_trtllm(case: SiliconCase) -> TrtllmScript | None:
    """The settings InferenceMAX's launch script started ``case``'s TensorRT-LLM server with, for the
    rows whose script was read (None for any other row). github.com/SemiAnalysisAI/InferenceX,
    ``benchmarks/`` at the last commit on or before the row's ``measured`` day:

    - Llama-3.3-70B (B200, H200; 2025-10-29): :func:`inferencemax_trtllm_llama`.
    - DeepSeek-R1 (its rows also appear as DeepSeek-V3; ``dsr1_fp4_b200_trt_slurm.sh``,
      ``dsr1_fp8_b200_trt_slurm.sh``, ``dsr1_fp8_h200_trt_slurm.sh`` and, from 2026-01-28,
      ``dsr1_fp{4,8}_b200_trt.sh``, ``dsr1_fp8_h200_trt.sh``): ``--max_num_tokens`` ``(CONC + ISL + 64)``
      rounded up to 64 (FP8 on B200 from 2026-01-29: at least 8192); ``free_gpu_memory_fraction`` 0.8
      (H200: 0.75; FP8 on B200 from 2026-01-29: 0.7 at 1024/8192 from 256 clients, 0.75 at 8192/1024
      on TP 4); with attention DP ``attention_dp_config: {enable_balance: true, timeout_iters: 60,
      batching_wait_iters: 0}``; FP8 on B200 from 2026-01-29 at 1024/1024 from 64 clients
      ``batch_wait_timeout_iters: 40, batch_wait_max_tokens_ratio: 0.8``.
    - gpt-oss-120b (``gptoss_fp4_b200_trt*.sh``, ``gptoss_fp4_h200_trt*.sh``): ``--max_num_tokens
      20000``, ``free_gpu_memory_fraction`` 0.85; on B200 ``--max_batch_size 512`` and, with
      attention DP, ``attention_dp_config: {enable_balance: true}`` (TensorRT-LLM's timeout 50 and
      batching wait 10).

    Not read: the scripts' MTP variants (``*_mtp.sh``; the CSV does not say which rows used MTP), and
    each script's MoE backend (the profile's TensorRT-LLM MoE kernel is used)."""
    llama = inferencemax_trtllm_llama(case)
    if llama is not None:
        return TrtllmScript(max_num_tokens=llama[0], batch_wait=llama[1])
    if case.engine != "trtllm" or case.length_ratio == 1.0 or not case.measured:
        return None
    c, isl, osl = case.concurrency, case.isl, case.osl
    dp = case.parallel.dp
    if case.model in ("deepseek-r1", "deepseek-v3") and case.hardware in ("b200", "h200"):
        fp8_b200_2026 = case.hardware == "b200" and case.dtype is DType.FP8_BLOCK and case.measured >= "2026-01-29"
        tokens = _ceil64(c + isl + 64)
        frac = 0.75 if case.hardware == "h200" else 0.8
        wait: tuple[int, float] = (0, 0.0)
        if fp8_b200_2026:
            tokens = max(tokens, 8192)
            if (isl, osl) == (1024, 8192) and c >= 256:
                frac = 0.7
            elif (isl, osl) == (8192, 1024) and case.parallel.tp == 4:
                frac = 0.75
            if (isl, osl) == (1024, 1024) and c >= 64:
                wait = (40, 0.8)
        return TrtllmScript(max_num_tokens=tokens, memory_fraction=frac, batch_wait=wait,
                            adp_balance=(60, 0) if dp > 1 else None)
    if case.model == "gpt-oss-120b" and case.hardware in ("b200", "h200"):
        b200 = case.hardware == "b200"
        return TrtllmScript(max_num_tokens=20000, max_batch=512 if b200 else None, memory_fraction=0.85,
                            adp_balance=(50, 10) if dp > 1 and b200 else None)
    return None


@dataclass(frozen=True, slots=True)
class SGLangScript:
    """The server settings an InferenceMAX SGLang launch script set (:func:`inferencemax_sglang`)."""

    recv_interval: int          # --scheduler-recv-interval
    chunk_size: int             # --chunked-prefill-size
    max_prefill_tokens: int     # --max-prefill-tokens (SGLang's 16384 where the script sets none)
    max_running: int            # --max-running-requests


#: Models whose InferenceMAX SGLang scripts were read (catalog id -> script family): DeepSeek-R1's
#: rows appear in the CSV under DeepSeek-R1 and DeepSeek-V3 (the same runs, the same times).
INFERENCEMAX_SGLANG_FAMILIES = {"deepseek-r1": "dsr1", "deepseek-v3": "dsr1", "qwen3.5-397b-a17b": "qwen3.5"}
#: SGLang's ``max_prefill_tokens`` default (``server_args.py``), where a script sets none
SGLANG_MAX_PREFILL_TOKENS = 16384


def inferencemax_sglang(case: SiliconCase) -> SGLangScript | None:
    """The settings InferenceMAX's launch script started ``case``'s SGLang server with, for the rows
    whose script was read (None for any other row). github.com/SemiAnalysisAI/InferenceX,
    ``benchmarks/`` (``dsr1_fp4_b200_docker.sh``, ``dsr1_fp8_b200_docker.sh`` of 2025-11; from
    2026-02 ``benchmarks/single_node/dsr1_fp4_b200.sh``, ``dsr1_fp8_b200.sh``, ``dsr1_fp{4,8}_b300.sh``,
    ``qwen3.5_{bf16,fp8,fp4}_b200.sh``, ``qwen3.5_{bf16,fp4}_b300.sh``), each read at the last
    commit on or before the row's ``measured`` day. Every one passes ``--data-parallel-size=1
    --disable-radix-cache --scheduler-recv-interval`` 30 when ``CONC >= 16``, else 10 (DeepSeek-R1
    FP8 at TP 4: 10), and:

    - DeepSeek-R1 FP4 (B200, B300): ``--chunked-prefill-size 16384 --max-running-requests 256``;
    - DeepSeek-R1 FP8 at TP 8: ``--chunked-prefill-size 32768 --max-prefill-tokens 32768
      --max-running-requests 128``; at TP 4 (8192/1024 only): 8192, 8192 and 32;
    - Qwen3.5 (BF16, FP8, FP4): ``--chunked-prefill-size 32768 --max-prefill-tokens 32768
      --max-running-requests 128``;
    - Qwen3.5 FP8 on B300 of 2026-04-17 (``qwen3.5_fp8_b300.sh``, dd9c285b3): ``16384``, ``16384``,
      ``CONC`` and a fixed ``--scheduler-recv-interval 10``.

    Not read (None): H200 scripts (no recv interval), Qwen3.5 FP8 on B300 of 2026-04-03 (no B300
    script at that commit), and rows of more clients than the script's running-request limit
    (DeepSeek-R1 FP8 at 256 and 512 clients measure 2-3 s TTFT, where 128 running requests would
    queue half the clients for a whole request: another script ran them)."""
    fam = INFERENCEMAX_SGLANG_FAMILIES.get(case.model)
    if case.engine != "sglang" or fam is None or case.length_ratio == 1.0 or case.hardware not in ("b200", "b300"):
        return None
    c, tp = case.concurrency, case.parallel.tp
    recv = 30 if c >= 16 else 10
    script: SGLangScript | None
    if fam == "dsr1":
        if case.dtype is DType.NVFP4:
            script = SGLangScript(recv, 16384, SGLANG_MAX_PREFILL_TOKENS, 256)
        elif tp == 4:
            script = SGLangScript(10, 8192, 8192, 32)
        else:
            script = SGLangScript(recv, 32768, 32768, 128)
    elif case.hardware == "b300" and case.dtype not in (DType.BF16, DType.NVFP4):
        script = SGLangScript(10, 16384, 16384, c) if case.measured == "2026-04-17" else None
    else:
        script = SGLangScript(recv, 32768, 32768, 128)
    return script if script is not None and c <= script.max_running else None


def map_rows(rows: Iterable[dict[str, str]]) -> tuple[list[SiliconCase], list[tuple[dict[str, str], NotStatable]]]:
    """All rows: the stated cases and the rows left out with their reason."""
    cases, skipped = [], []
    for row in rows:
        try:
            cases.append(map_row(row))
        except NotStatable as exc:
            skipped.append((row, exc))
    return cases, skipped


def coverage(rows: list[dict[str, str]]) -> dict[str, Any]:
    """Statable share and rows left out by cause (largest first)."""
    cases, skipped = map_rows(rows)
    causes = Counter(exc.cause for _, exc in skipped)
    examples = {}
    for row, exc in skipped:
        examples.setdefault(exc.cause, f"{row.get('id', '')}: {exc.detail}")
    return {
        "rows": len(rows), "statable": len(cases), "share": len(cases) / len(rows) if rows else 0.0,
        "aggregated_statable": sum(c.mode == "agg" for c in cases),
        "left_out": [{"cause": c, "rows": n, "share": n / len(rows), "example": examples[c]}
                     for c, n in causes.most_common()],
        "by_model": dict(Counter(c.model for c in cases).most_common()),
        "by_system": dict(Counter(c.hardware for c in cases).most_common()),
        "by_dtype": dict(Counter(c.dtype.value for c in cases).most_common()),
        "by_engine": dict(Counter(c.engine for c in cases).most_common()),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--coverage", action="store_true", help="print the statable share and causes")
    ap.add_argument("--json", action="store_true", help="print JSON")
    ap.add_argument("--csv", help="read this silicon_sample.csv (or wheel) instead of the cached wheel")
    args = ap.parse_args(argv)
    rows = load_rows(args.csv)
    cov = coverage(rows)
    if args.json:
        print(json.dumps(cov, indent=2))
        return 0
    print(f"{cov['statable']:,} of {cov['rows']:,} rows statable ({cov['share']:.1%}); "
          f"aggregated {cov['aggregated_statable']:,}")
    print(f"{'cause':<40} {'rows':>6} {'share':>7}  example")
    for c in cov["left_out"]:
        print(f"{c['cause']:<40} {c['rows']:>6} {c['share']:>7.1%}  {c['example'][:110]}")
    if args.coverage:
        for key in ("by_model", "by_system", "by_dtype", "by_engine"):
            print(f"{key[3:]}: " + ", ".join(f"{k} {v}" for k, v in cov[key].items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
