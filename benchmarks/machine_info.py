"""Description of the machine a benchmark ran on, recorded next to every result."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

import numpy as np


def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    except OSError:
        return platform.processor() or "?"
    return next((ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("Model name")), "?")


def describe() -> str:
    """One line: CPU model, cores, Python and numpy versions, load average at the start."""
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return (f"{cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}, numpy {np.__version__}, "
            f"load average {load}")


def report(lines: list[str], name: str) -> str:
    """Print a benchmark's lines and write them to ``benchmarks/results/<name>``; returns the text."""
    text = "\n".join(lines)
    print(text)
    out = Path(__file__).parent / "results" / name
    out.parent.mkdir(exist_ok=True)
    out.write_text(text + "\n")
    return text
