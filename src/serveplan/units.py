"""SI constants, dtype byte widths and formatting helpers.

Everything inside serveplan is SI: seconds, bytes, FLOP, FLOP/s, bytes/s. Convert only at the
report/CLI edge with the helpers below.
"""

from __future__ import annotations

import math
from enum import Enum
from typing import Any

from serveplan.errors import SpecError

KB = 1e3
MB = 1e6
GB = 1e9
TB = 1e12
KiB = 1024
MiB = 1024**2
GiB = 1024**3
TFLOPS = 1e12
MS = 1e-3
US = 1e-6


class DType(str, Enum):
    """Numeric formats, carrying their storage width and the arithmetic they run at.

    ``bytes`` is the storage per value *including block scales*, so weight and KV sizes are exact
    products (``params * dtype.bytes``). ``compute`` is the format whose peak FLOP/s a matrix
    product in this format runs at when the device has it natively (:meth:`DeviceSpec.flops
    <serveplan.specs.hardware.DeviceSpec.flops>` falls back to the closest format it has).

    Block-scaled and weight-only formats (sources of the layouts):

    * ``nvfp4``: FP4 E2M1 values with one FP8 E4M3 scale per 16 values (and one FP32 scale per
      tensor, negligible): ``0.5 + 1/16 = 0.5625`` bytes (NVIDIA, "Introducing NVFP4", 2025;
      TensorRT Model Optimizer ``NVFP4`` block size 16).
    * ``mxfp4``: FP4 E2M1 with one E8M0 (8-bit) scale per 32 values: ``0.5 + 1/32 = 0.53125``
      bytes (OCP Microscaling Formats MX v1.0, Table 1: k = 32, scale E8M0).
    * ``fp8_block``: FP8 E4M3 with one FP32 scale per 128x128 weight block (DeepSeek-V3 and
      Qwen3-FP8 ``weight_block_size: [128, 128]``): ``1 + 4/16384`` bytes.
    * ``w4a16``: 4-bit integer weights (AWQ, GPTQ) with an fp16 scale and a packed 4-bit zero
      point per group of 128 (the AutoAWQ/GPTQ default ``group_size: 128``):
      ``0.5 + (2 + 0.5)/128`` bytes; dequantised to 16 bits, so compute runs at the fp16 peak.
    * ``w8a16``: 8-bit integer weights, same group layout: ``1 + (2 + 1)/128`` bytes, fp16 compute.
    * ``int4``/``int8``: plain 4/8-bit storage without scales (``int8`` computes at the INT8 peak,
      W8A8 SmoothQuant style; ``int4`` at fp16).
    """

    FP32 = "fp32"
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"
    FP8_BLOCK = "fp8_block"
    INT8 = "int8"
    INT4 = "int4"
    FP4 = "fp4"
    NVFP4 = "nvfp4"
    MXFP4 = "mxfp4"
    W4A16 = "w4a16"
    W8A16 = "w8a16"

    @property
    def bytes(self) -> float:
        """Storage bytes per value, block scales included."""
        return _DTYPE_BYTES[self]

    @property
    def compute(self) -> DType:
        """Format of the tensor-core arithmetic (the peak FLOP/s key) when the device has it."""
        return _DTYPE_COMPUTE.get(self, self)

    @property
    def is_weight_only(self) -> bool:
        """Weights stored narrow but multiplied at 16 bits (AWQ/GPTQ-style)."""
        return self in (DType.W4A16, DType.W8A16, DType.INT4)

    @property
    def is_kv_format(self) -> bool:
        """Usable as a KV-cache format (engines store K/V in 16/32-bit, FP8, INT8 or NVFP4)."""
        return self in KV_DTYPES

    @classmethod
    def parse(cls, value: str | DType) -> DType:
        if isinstance(value, DType):
            return value
        key = str(value).lower().strip().replace("-", "_")
        key = _DTYPE_ALIASES.get(key, key)
        try:
            return cls(key)
        except ValueError:
            raise SpecError(
                f"unknown dtype {value!r}; expected one of: {', '.join(d.value for d in cls)}"
            ) from None

    @classmethod
    def parse_kv(cls, value: str | DType) -> DType:
        """Parse a KV-cache format; weight-only and weight block formats are refused."""
        dt = cls.parse(value)
        if not dt.is_kv_format:
            raise SpecError(
                f"kv_dtype={dt.value!r} is not a KV-cache format; expected one of: "
                f"{', '.join(d.value for d in KV_DTYPES)}"
            )
        return dt


_DTYPE_BYTES = {
    DType.FP32: 4.0,
    DType.BF16: 2.0,
    DType.FP16: 2.0,
    DType.FP8: 1.0,
    DType.FP8_BLOCK: 1.0 + 4.0 / (128 * 128),
    DType.INT8: 1.0,
    DType.INT4: 0.5,
    DType.FP4: 0.5,
    DType.NVFP4: 0.5 + 1.0 / 16,
    DType.MXFP4: 0.5 + 1.0 / 32,
    DType.W4A16: 0.5 + 2.5 / 128,
    DType.W8A16: 1.0 + 3.0 / 128,
}
_DTYPE_COMPUTE = {
    DType.FP8_BLOCK: DType.FP8,
    DType.NVFP4: DType.FP4,
    DType.MXFP4: DType.FP4,
    DType.W4A16: DType.FP16,
    DType.W8A16: DType.FP16,
}
#: Formats a KV cache can be stored in (vLLM ``kv_cache_dtype`` auto/fp8; TensorRT-LLM adds
#: INT8 and, on Blackwell, NVFP4 KV caches).
KV_DTYPES = (DType.FP32, DType.BF16, DType.FP16, DType.FP8, DType.INT8, DType.NVFP4)
_DTYPE_ALIASES = {
    "float32": "fp32",
    "float": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "float8": "fp8",
    "e4m3": "fp8",
    "float8_e4m3fn": "fp8",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
    "fp8_blockwise": "fp8_block",
    "fp8_block_scaled": "fp8_block",
    "e2m1": "fp4",
    "nvfp4_kv": "nvfp4",
    "mx_fp4": "mxfp4",
    "awq": "w4a16",
    "gptq": "w4a16",
    "int4_awq": "w4a16",
    "int4_gptq": "w4a16",
    "w4a16_awq": "w4a16",
    "int8_weight_only": "w8a16",
}


def fmt_ms(seconds: float, digits: int = 3) -> str:
    """Format seconds as milliseconds for tables."""
    return f"{seconds / MS:.{digits}f}"


def fmt_bytes(n: float) -> str:
    """Human readable decimal byte size (GB = 1e9 bytes)."""
    for unit, scale in (("TB", TB), ("GB", GB), ("MB", MB), ("KB", KB)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} B"


def ceil_div(a: int, b: int) -> int:
    """``ceil(a / b)`` for integers, exact (no float rounding): ``-(-a // b)``."""
    return -(-a // b)


def json_safe(obj: Any) -> Any:
    """``obj`` with every non-finite float replaced by ``None`` (lists, tuples and dicts walked;
    numpy scalars and arrays become Python numbers and lists), ready for ``json.dumps(...,
    allow_nan=False)``: a statistic of nothing is ``null``, never NaN or Infinity, which
    ``JSON.parse``, jq and web clients refuse."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_safe(v) for v in obj]
    if hasattr(obj, "tolist"):  # numpy scalar or array
        return json_safe(obj.tolist())
    return obj
