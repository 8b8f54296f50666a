"""``import serveplan`` (and so every CLI call) must not load the heavy optional libraries: they are
imported where they are used (scipy for the LP and the fits, matplotlib for plots, Ray, torch and
transformers for their backends). Time is measured in benchmarks/bench_startup.py, not here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import serveplan

HEAVY = ("scipy", "matplotlib", "ray", "torch", "transformers")


def _modules_after(code: str) -> set[str]:
    src = str(Path(serveplan.__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", f"{code}\nimport sys\nprint('\\n'.join(sys.modules))"],
                         env=env, capture_output=True, text=True, check=True).stdout
    return {m.split(".")[0] for m in out.split()}


def test_import_serveplan_loads_no_heavy_library():
    loaded = _modules_after("import serveplan")
    assert "serveplan" in loaded
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_the_cli_loads_no_heavy_library_before_a_command_runs():
    loaded = _modules_after("import serveplan.cli")
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))
