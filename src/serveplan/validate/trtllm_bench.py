"""The batch limits ``trtllm-bench throughput`` (TensorRT-LLM v1.0) chooses when it is given none.

Without ``--max_batch_size`` and ``--max_num_tokens``, trtllm-bench sizes both from the KV cache it
expects (``tensorrt_llm/bench/build/tuning.py`` ``calc_engine_setting`` and ``finetune_setting``)
and, with chunked prefill off, raises ``max_num_tokens`` to at least the longest prompt plus the
batch size (``tensorrt_llm/bench/benchmark/utils/general.py`` ``get_settings``). Its inputs are the
GPU memory NVML reports (the catalog's driver total), the checkpoint's parameter count as stored in
its safetensors files (:func:`checkpoint_param_count`) and ``--kv_cache_free_gpu_mem_fraction``,
default 0.90, which is also the share of the free memory the runtime gives the KV cache.

Used by :mod:`~serveplan.validate.mapping` for rows that state a trtllm-bench run with these
defaults (``load.batch_limits: trtllm-bench``) and by ``benchmarks/validate_offline_trtllm.py``;
hand-checked in ``tests/benchmarks/test_offline_trtllm.py``. Nothing here is fitted.
"""

from __future__ import annotations

import math
from typing import Any

GIB = float(1 << 30)
#: trtllm-bench ``BYTES_PER_ELEM`` (tuning.py): bytes per stored weight and KV element by format
BYTES_PER_ELEM = {"bf16": 2.0, "fp8": 1.0, "nvfp4": 0.5}
#: ``--kv_cache_free_gpu_mem_fraction`` default of ``trtllm-bench throughput`` (v1.0)
KV_FRACTION = 0.90


def checkpoint_param_count(model: Any, dtype: str) -> float:
    """Elements stored in the checkpoint's safetensors files (what trtllm-bench sums as the
    parameter count, ``ModelConfig.get_param_count``). ModelOpt keeps the embeddings and the LM
    head in 16 bits; an FP8 checkpoint stores one element per linear weight, an NVFP4 one packs two
    4-bit weights per byte and adds one FP8 scale per 16 weights (0.5 + 1/16 elements per weight).
    An approximation: norms and per-tensor scales (under 0.1% of the elements) are not counted apart."""
    total = float(model.num_parameters())
    embed = float(model.embedding_params())   # token embedding and the untied LM head (kept in 16 bits)
    linear = total - embed
    per_weight = {"nvfp4": 0.5 + 1 / 16}.get(dtype, 1.0)
    return embed + linear * per_weight


def bench_settings(model: Any, hardware: Any, *, tp: int, pp: int, dtype: str, isl: int, osl: int,
                   kv_fraction: float = KV_FRACTION, kv_dtype: str = "fp8") -> tuple[int, int]:
    """``max_batch_size`` and ``max_num_tokens`` trtllm-bench chooses for a run of ``model`` (a
    :class:`~serveplan.specs.model.ModelSpec`) on ``hardware`` (a
    :class:`~serveplan.specs.hardware.DeviceSpec`) at TP ``tp``, PP ``pp``, weight format ``dtype``
    and fixed lengths ``isl``/``osl`` (v1.0: ``tuning.py`` ``calc_engine_setting`` ->
    ``finetune_setting``, then ``general.py`` ``get_settings``: chunked prefill off, so
    ``max_num_tokens >= max ISL + max batch``)."""
    kv_heads = max(tp, model.num_key_value_heads)   # "each GPU in TP group has at least 1 kv head"
    byte_per_token = 2 * model.num_attention_layers * kv_heads * model.head_dim * BYTES_PER_ELEM[kv_dtype] / GIB
    engine_size = checkpoint_param_count(model, dtype) * BYTES_PER_ELEM[dtype] / GIB
    total_memory = hardware.engine_memory_bytes / GIB * tp * pp    # NVML total, GiB
    cache_memory = (total_memory - engine_size) * kv_fraction
    kv_max_requests = cache_memory / (byte_per_token * (isl + osl))
    raw_bs = min(kv_max_requests, 4096) / pp
    raw_token = min(raw_bs * (1 + isl / osl), 32768)
    max_bs = max(64, _round_up(raw_bs, ((256, 32), (1024, 128)), 256))           # at least 64 sequences
    max_token = max(2048, _round_up(raw_token, ((4096, 256), (8192, 512)), 1024))  # at least 2048 tokens
    return max_bs, max(max_token, isl + max_bs)


def _round_up(x: float, bands: tuple[tuple[float, int], ...], last: int) -> int:
    """``x`` rounded up to a multiple of the step of the first band whose bound it is under
    (``finetune_setting``'s ladders), else of ``last``."""
    step = next((st for bound, st in bands if x < bound), last)
    return step * math.ceil(x / step)
