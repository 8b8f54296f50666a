"""`serveplan ui` without its extra: one line saying what to install, exit code 2, no traceback."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

BLOCK = """
import sys
sys.modules[{name!r}] = None  # as if the package were not installed
sys.argv = ["serveplan", "ui", "--port", "1"]
from serveplan.cli import main
main()
"""


def _run(name: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCK.format(name=name)], capture_output=True, text=True,
                          env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"}, timeout=60)


def _installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def test_missing_web_framework_prints_the_install_hint():
    for name in ("fastapi", "uvicorn"):
        out = _run(name)
        assert out.returncode == 2
        # the hint names the module blocked here, or the first one this environment lacks
        missing = [n for n in ("fastapi", "uvicorn") if n == name or not _installed(n)]
        named = [n for n in missing if f"({n} is missing)" in out.stderr]
        assert len(named) == 1, out.stderr
        assert out.stderr.strip() == (f"error: serveplan ui needs the ui extra ({named[0]} is missing): "
                                      "pip install 'serveplan[ui]'")


def test_missing_plotting_library_prints_the_install_hint():
    out = _run("plotly")
    assert out.returncode == 2 and "pip install 'serveplan[ui]'" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.skipif(not all(_installed(n) for n in ("fastapi", "uvicorn", "plotly")),
                    reason="needs the ui extra: pip install 'serveplan[ui]'")
def test_a_busy_port_is_one_line_and_exit_code_2():
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = subprocess.run([sys.executable, "-m", "serveplan", "ui", "--port", str(port)], capture_output=True,
                             text=True, env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"}, timeout=60)
    assert out.returncode == 2
    assert out.stderr.strip() == f"error: cannot listen on 127.0.0.1:{port}: Address already in use"
