"""SI constants, dtype byte widths and formatting helpers.

Everything inside serveplan is SI: seconds, bytes, FLOP, FLOP/s, bytes/s. Convert only at the
report/CLI edge with the helpers below.
"""

from __future__ import annotations

from enum import Enum

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
    """Numeric formats, carrying their byte width (weights and KV use the same format)."""

    FP32 = "fp32"
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"
    INT8 = "int8"
    INT4 = "int4"

    @property
    def bytes(self) -> float:
        return _DTYPE_BYTES[self]

    @classmethod
    def parse(cls, value: str | DType) -> DType:
        from serveplan.errors import SpecError

        if isinstance(value, DType):
            return value
        key = str(value).lower().strip()
        key = _DTYPE_ALIASES.get(key, key)
        try:
            return cls(key)
        except ValueError:
            raise SpecError(
                f"unknown dtype {value!r}; expected one of: {', '.join(d.value for d in cls)}"
            ) from None


_DTYPE_BYTES = {
    DType.FP32: 4.0,
    DType.BF16: 2.0,
    DType.FP16: 2.0,
    DType.FP8: 1.0,
    DType.INT8: 1.0,
    DType.INT4: 0.5,
}
_DTYPE_ALIASES = {
    "float32": "fp32",
    "float": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "float8": "fp8",
    "e4m3": "fp8",
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
