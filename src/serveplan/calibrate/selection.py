"""Which rows of a kernel table describe one kernel.

aiconfigurator's tables hold, for some systems, several collections (engine versions) of the same
shapes, several fused-MoE kernel paths per format, and (TensorRT-LLM, SGLang) FP8-KV context
attention timed with two kernels. One curve fitted to a mixture describes none of them, so before
a fit every table is cut to one kernel (:func:`one_kernel_per_table`); ``benchmarks/kernel_profiles.py``
(the bundled profiles) and ``serveplan calibrate --from aiconfigurator`` apply the same rules.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from typing import Any

from serveplan.calibrate.importers import MXFP8_KERNEL_SUFFIX, shape_of
from serveplan.calibrate.measurements import Measurement, MeasurementSet


def one_kernel_per_table(ms: MeasurementSet) -> MeasurementSet:
    """:func:`one_moe_path_per_format`, then :func:`one_collection_per_table`."""
    return one_collection_per_table(one_moe_path_per_format(ms))


#: Kernel paths of a checkpoint tool's own quantization method (vLLM's ModelOpt and
#: compressed-tensors MoE methods): the checkpoint picks them, not the format. Kept for a format
#: only where the engine's tables time no other path for it.
CHECKPOINT_METHODS = ("modelopt", "compressedtensors")
#: Formats that only a checkpoint tool produces (weight-only INT4: compressed-tensors, AWQ, GPTQ):
#: there the tool's method is how a served checkpoint runs, and is taken where it is timed. vLLM's
#: tables time INT4 experts two ways on H200 and B200: 0.24's compressed-tensors WNA16 Marlin
#: method, which aiconfigurator's collector builds from a ``pack-quantized`` compressed-tensors
#: config as a checkpoint loads (``collector/vllm/collect_moe.py``), and 0.19's bare
#: ``vllm_marlin_int4_moe`` rows, 2.1-2.6x slower at Kimi-K2's layer (TP 8 on H200, 8 tokens:
#: 230 us against 110 us) while SGLang 0.5.14's Marlin MoE agrees with the former (92 us).
CHECKPOINT_FORMATS = ("w4a16",)


#: Engines whose MXFP4 experts compute on MXFP8 activations where the GPU has such kernels
#: (Blackwell; Hopper tables time only 16-bit activations). TensorRT-LLM:
#: ``_torch/model_config.py`` ``ModelConfig.get_mxfp4_quant_algo`` returns ``W4A8_MXFP4_MXFP8`` on
#: SM 100 and later for every MoE backend but Triton (``W4A16_MXFP4`` below SM 100) unless
#: ``OVERRIDE_QUANT_ALGO`` is set, and ``examples/models/core/gpt_oss/README.md`` lists only MXFP8
#: activations for Blackwell (1.0-1.3); SGLang: server
#: argument ``flashinfer_mxfp4_moe_precision`` = ``"default"`` (choices ``default``, ``bf16``),
#: which quantizes the activations to MXFP8 on Blackwell (``server_args.py``, 0.5.x; aiconfigurator-
#: core 0.12.0 ``sdk/models/helpers.py`` files those runs under ``w4a8_mxfp4_mxfp8``). vLLM keeps
#: BF16 activations unless ``VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1`` (``quantization/mxfp4.py``
#: ``get_mxfp4_backend``: ``SM100_FI_MXFP4_BF16`` by default).
MXFP8_ACTIVATION_ENGINES = ("trtllm", "sglang")


#: Opt-in fused-MoE backends, by name: ``(weight format, kernel path substring)`` of the table rows
#: that time them. Each is fitted to its own curve (``moe["<format>@<name>"]``,
#: :meth:`~serveplan.specs.kernels.KernelCurves.moe_curve`) beside the format's default path, and an
#: engine file (``moe_backends``) or a deployment selects it. ``marlin``: vLLM's Marlin W4A16 MoE for
#: MXFP4 experts, which ``VLLM_MXFP4_USE_MARLIN=1`` forces (``model_executor/layers/quantization/
#: mxfp4.py`` ``get_mxfp4_backend``); aiconfigurator times it on H100 and H200 through vLLM 0.24's
#: compressed-tensors MXFP4 method (``compressedtensorsw4a4mxfp4moe_marlin``) for one model's layer.
MOE_BACKENDS: dict[str, tuple[str, str]] = {"marlin": ("mxfp4", "marlin")}


def moe_backend_rows(ms: MeasurementSet, backend: str) -> MeasurementSet:
    """The fused-MoE rows that time ``backend`` (:data:`MOE_BACKENDS`), one collection (the newest of
    those timing it), with their format renamed ``<format>@<backend>`` so that a curve fitted to them
    is keyed apart from the format's default path."""
    fmt, kernel = MOE_BACKENDS[backend]
    rows = [r for r in ms.rows if r.kind == "moe" and shape_of(r)["dtype"] == fmt and kernel in shape_of(r)["kernel"]]
    if not rows:
        return MeasurementSet((), ms.metadata)
    newest = max({shape_of(r).get("runtime", "") for r in rows}, key=_version_order)
    key = f"{fmt}@{backend}"
    return MeasurementSet(tuple(_with_dtype(r, key) for r in rows if shape_of(r).get("runtime", "") == newest),
                          ms.metadata)


def _with_dtype(r: Measurement, dtype: str) -> Measurement:
    return dataclasses.replace(r, name=re.sub(r"\bdtype=\S+", f"dtype={dtype}", r.name))


def _mxfp4_activations_match(path: tuple[str, str, str]) -> bool:
    """Whether an MXFP4 fused-MoE path computes on the activations its engine uses by default."""
    engine = path[1].split("-", 1)[0]
    return path[2].endswith(MXFP8_KERNEL_SUFFIX) == (engine in MXFP8_ACTIVATION_ENGINES)


def one_moe_path_per_format(ms: MeasurementSet) -> MeasurementSet:
    """The measurements with one fused-MoE kernel path per weight format: among every collection
    (engine version) and kernel path timed for the format, the one timed on the most shapes, newest
    version first on a tie, leaving out a checkpoint tool's own method where another path exists
    (:data:`CHECKPOINT_METHODS`; for the formats of :data:`CHECKPOINT_FORMATS` that method first),
    and for MXFP4 the path on the engine's default activations
    (:data:`MXFP8_ACTIVATION_ENGINES`) where one is timed. Several collections of the same shapes
    would otherwise be fitted together, and vLLM's and SGLang's tables time several backends for
    some formats (vLLM 0.24 on B200: FlashInfer's TensorRT-LLM and CUTLASS MoE for NVFP4; SGLang
    0.5.14 on B200: FlashInfer-TRT-LLM and Triton for block FP8), whose choice depends on the
    version, the GPU and flags (vLLM's MoE backend oracle, SGLang ``--moe-runner-backend auto``).
    One rule for every engine, GPU and format, chosen without any serving row. The DeepEP expert
    tables (kind ``moe_ep``) take the same rule on their own."""
    best: dict[tuple[str, str], tuple[str, str, str]] = {}
    for kind in ("moe", "moe_ep"):
        counts = Counter(moe_path(r) for r in ms.rows if r.kind == kind)
        for dt_ in sorted({d for d, _, _ in counts}):
            cands = [(k, n) for k, n in counts.items() if k[0] == dt_]
            if dt_ == "mxfp4":
                cands = [kn for kn in cands if _mxfp4_activations_match(kn[0])] or cands
            tool = [(k, n) for k, n in cands if any(m in k[2] for m in CHECKPOINT_METHODS)]
            preferred = tool if dt_ in CHECKPOINT_FORMATS else [kn for kn in cands if kn not in tool]
            best[kind, dt_] = max(preferred or cands, key=lambda kn: (kn[1], _version_order(kn[0][1])))[0]
    return MeasurementSet(tuple(r for r in ms.rows if r.kind not in ("moe", "moe_ep")
                                or best[r.kind, shape_of(r)["dtype"]] == moe_path(r)), ms.metadata)


def table_key(r: Measurement) -> tuple[str, str, str]:
    """``(kind, phase, format)`` of a GEMM or attention row: one table of one collection."""
    sh = shape_of(r)
    if r.kind == "attention":
        return r.kind, r.phase, sh.get("kv_dtype", "")
    return r.kind, "", sh.get("dtype", "")


def variant(r: Measurement) -> tuple[str, str]:
    """``(runtime, compute format)`` of a GEMM or attention row: the collection, and for a context
    attention row the format its kernel computes in (``q_dtype``; the KV format where the table
    does not say)."""
    sh = shape_of(r)
    return sh.get("runtime", ""), sh.get("q_dtype", sh.get("kv_dtype", ""))


def one_collection_per_table(ms: MeasurementSet) -> MeasurementSet:
    """The measurements with one collection (engine version) and one kernel per GEMM and attention
    table: for each kind, phase and format, the context kernel that computes in the KV cache's
    format where the table times one (TensorRT-LLM's and SGLang's tables time an FP8 KV cache
    with both a 16-bit and an FP8 context kernel; an FP8 checkpoint with an FP8 cache runs the FP8
    one: TensorRT-LLM's FP8 context FMHA, SGLang's FA3 FP8 path), then the version timed on the
    most rows, newest first on a tie: the rule :func:`one_moe_path_per_format` applies to the
    fused-MoE tables. vLLM's B200 tables hold two collections of every attention table (vLLM
    0.22.0 and 0.24.0, whose kernels differ: the 0.22.0 prefill rows run 34% faster than a curve
    fitted to both), and SGLang's H100 GEMM tables two (0.5.6.post2 and 0.5.14); one curve fitted
    to both describes neither."""
    def versioned(r: Measurement) -> bool:
        return r.kind in ("gemm", "attention")

    counts = Counter((table_key(r), variant(r)) for r in ms.rows if versioned(r))

    def rank(item: Any) -> tuple[bool, int, tuple[int, ...]]:
        (key, (runtime, q)), n = item
        return (q == key[2], n, _version_order(runtime))

    best: dict[tuple[str, str, str], tuple[str, str]] = {}
    for (key, var), _n in sorted(counts.items(), key=rank):
        best[key] = var    # ascending: the last one written is the best
    return MeasurementSet(tuple(r for r in ms.rows if not versioned(r) or best[table_key(r)] == variant(r)),
                          ms.metadata)


def _version_order(runtime: str) -> tuple[int, ...]:
    """``vllm-0.24.0`` -> ``(0, 24, 0)`` (a runtime's version for ordering; non-digits are dropped)."""
    return tuple(int(x) for x in re.findall(r"\d+", runtime.split("-", 1)[-1])[:4])


def moe_path(r: Measurement) -> tuple[str, str, str]:
    """``(format, runtime, kernel)`` of a fused-MoE row."""
    sh = shape_of(r)
    return sh["dtype"], sh.get("runtime", ""), sh.get("kernel", "")


