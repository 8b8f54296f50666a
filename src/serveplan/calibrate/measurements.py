"""Measurement files: one timed kernel or module per row, with the run's metadata.

A measurement file is a CSV whose leading ``# key: value`` lines hold metadata (device, CPU or
GPU model, torch version, thread count, measured peaks) and whose rows are:

============  ==============================================================================
``kind``      ``gemm``, ``gemv``, ``copy``, ``elementwise``, ``norm``, ``attention``, ``launch``,
              ``module`` (a whole module at a tiny shape: its dispatch time), ``collective`` or
              ``moe`` (one MoE layer's fused routed-expert kernel)
``phase``     ``prefill`` or ``decode``: which phase's efficiency factors the row informs
              (shapes of prefill steps: hundreds to thousands of tokens; of decode steps: 1-64);
              ``any`` for ``launch`` and ``module`` rows
``module``    for ``module`` rows: ``norm``, ``attention``, ``mlp``, ``moe`` or ``lm_head``
``name``      free text describing the shape
``flops``     work of one call, FLOP
``bytes``     memory traffic of one call, bytes (collectives: payload bytes)
``launches``  kernels launched by one call (the fixed cost of each is fitted)
``time_s``    seconds per call (median of the repeats); ``time_min_s``, ``repeats``
``rows``      for GEMMs: rows (tokens) of the left operand, read by the per-size curve
============  ==============================================================================

``kind``, ``phase``, ``flops``, ``bytes`` and ``time_s`` are required; the others default to
empty / 1. :func:`read_measurements` validates once, so the fit trusts its input.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from serveplan.errors import SpecError

KINDS = ("gemm", "gemv", "copy", "elementwise", "norm", "attention", "launch", "module", "collective", "moe",
         "moe_ep")
PHASES = ("prefill", "decode", "any")
MODULES = ("norm", "attention", "mlp", "moe", "lm_head")
REQUIRED = ("kind", "phase", "flops", "bytes", "time_s")
COLUMNS = ("kind", "phase", "module", "name", "flops", "bytes", "launches", "time_s", "time_min_s", "repeats", "rows")


@dataclass(frozen=True, slots=True)
class Measurement:
    """One timed call: a kernel, a tiny module, a launch or a collective."""

    kind: str
    phase: str
    flops: float
    bytes: float
    time_s: float
    module: str = ""
    name: str = ""
    launches: float = 1.0
    time_min_s: float = float("nan")
    repeats: int = 0
    rows: float = float("nan")

    def to_row(self) -> dict[str, Any]:
        return {
            "kind": self.kind, "phase": self.phase, "module": self.module, "name": self.name,
            "flops": f"{self.flops:.6g}", "bytes": f"{self.bytes:.6g}", "launches": f"{self.launches:g}",
            "time_s": f"{self.time_s:.6g}",
            "time_min_s": "" if math.isnan(self.time_min_s) else f"{self.time_min_s:.6g}",
            "repeats": str(self.repeats),
            "rows": "" if math.isnan(self.rows) else f"{self.rows:g}",
        }


@dataclass(frozen=True, slots=True)
class MeasurementSet:
    """Rows plus metadata (strings, as written in the file header)."""

    rows: tuple[Measurement, ...]
    metadata: Mapping[str, str] = field(default_factory=dict)

    def arrays(self) -> dict[str, np.ndarray]:
        """Columns as numpy arrays (strings as object arrays)."""
        return {
            "kind": np.array([r.kind for r in self.rows], dtype=object),
            "phase": np.array([r.phase for r in self.rows], dtype=object),
            "module": np.array([r.module for r in self.rows], dtype=object),
            "flops": np.array([r.flops for r in self.rows], dtype=float),
            "bytes": np.array([r.bytes for r in self.rows], dtype=float),
            "launches": np.array([r.launches for r in self.rows], dtype=float),
            "time_s": np.array([r.time_s for r in self.rows], dtype=float),
        }

    def subset(self, index: Iterable[int]) -> MeasurementSet:
        return MeasurementSet(tuple(self.rows[i] for i in index), self.metadata)

    def save(self, path: str | Path) -> None:
        """Write the CSV with a ``# key: value`` metadata header."""
        Path(path).write_text(self.to_csv())

    def to_csv(self) -> str:
        buf = io.StringIO()
        for k, v in self.metadata.items():
            buf.write(f"# {k}: {v}\n")
        w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
        w.writeheader()
        for r in self.rows:
            w.writerow(r.to_row())
        return buf.getvalue()


def _float(value: str, col: str, line: int, where: str) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise SpecError(f"{where} line {line}: column {col!r}={value!r} must be a number") from None
    if not math.isfinite(v):
        raise SpecError(f"{where} line {line}: column {col!r}={value!r} must be finite")
    return v


def parse_measurements(text: str, where: str = "measurements") -> MeasurementSet:
    """Parse the CSV text of a measurement file.

    Raises
    ------
    SpecError
        Missing columns, unknown kinds or phases, non-numeric, negative or zero times.
    """
    meta, body, header_line = _split_metadata(text)
    if not body:
        raise SpecError(f"{where}: no header row; expected columns {', '.join(REQUIRED)}")
    reader = csv.DictReader(io.StringIO("\n".join(body)))
    cols = [c.strip() for c in (reader.fieldnames or [])]
    missing = [c for c in REQUIRED if c not in cols]
    if missing:
        raise SpecError(f"{where}: missing column(s) {', '.join(missing)}; "
                        f"required: {', '.join(REQUIRED)}; found: {', '.join(cols) or 'none'}")
    rows = [_row({(k or "").strip(): (v or "").strip() for k, v in raw.items()}, header_line + 1 + j, where)
            for j, raw in enumerate(reader)]
    if not rows:
        raise SpecError(f"{where}: no measurement rows after the header")
    return MeasurementSet(tuple(rows), meta)


def _split_metadata(text: str) -> tuple[dict[str, str], list[str], int]:
    """``# key: value`` metadata lines, the CSV lines, and the line number of the header."""
    meta: dict[str, str] = {}
    body: list[str] = []
    header_line = 0
    for i, line in enumerate(text.splitlines(), start=1):
        if line.startswith("#"):
            key, sep, val = line[1:].partition(":")
            if sep:
                meta[key.strip()] = val.strip()
            continue
        if not line.strip():
            continue
        if not body:
            header_line = i
        body.append(line)
    return meta, body, header_line


def _row(raw: dict[str, str], line: int, where: str) -> Measurement:
    """One validated measurement row (``line``: its line in the file, for messages)."""
    kind, phase, module = raw["kind"], raw["phase"], raw.get("module", "")
    if kind not in KINDS:
        raise SpecError(f"{where} line {line}: kind={kind!r}; expected one of: {', '.join(KINDS)}")
    if phase not in PHASES:
        raise SpecError(f"{where} line {line}: phase={phase!r}; expected one of: {', '.join(PHASES)}")
    if kind == "module" and module not in MODULES:
        raise SpecError(f"{where} line {line}: module={module!r} for a module row; "
                        f"expected one of: {', '.join(MODULES)}")
    flops = _float(raw["flops"], "flops", line, where)
    nbytes = _float(raw["bytes"], "bytes", line, where)
    t = _float(raw["time_s"], "time_s", line, where)
    if t <= 0:
        raise SpecError(f"{where} line {line}: time_s={raw['time_s']} must be a positive number of seconds")
    if flops < 0 or nbytes < 0:
        raise SpecError(f"{where} line {line}: flops={raw['flops']}, bytes={raw['bytes']} must be >= 0")
    launches = _float(raw["launches"], "launches", line, where) if raw.get("launches") else 1.0
    if launches < 0:
        raise SpecError(f"{where} line {line}: launches={raw['launches']} must be >= 0")
    tmin = _float(raw["time_min_s"], "time_min_s", line, where) if raw.get("time_min_s") else float("nan")
    reps = int(_float(raw["repeats"], "repeats", line, where)) if raw.get("repeats") else 0
    m_rows = _float(raw["rows"], "rows", line, where) if raw.get("rows") else float("nan")
    return Measurement(kind=kind, phase=phase, flops=flops, bytes=nbytes, time_s=t, module=module,
                       name=raw.get("name", ""), launches=launches, time_min_s=tmin, repeats=reps, rows=m_rows)


def read_measurements(path: str | Path) -> MeasurementSet:
    """Read and validate a measurement CSV (see the module docstring for the format)."""
    p = Path(path)
    if not p.is_file():
        raise SpecError(f"measurement file {str(path)!r} does not exist")
    try:
        text = p.read_text()
    except UnicodeDecodeError:
        raise SpecError(f"measurement file {str(path)!r} is not a text CSV file") from None
    return parse_measurements(text, where=str(path))
