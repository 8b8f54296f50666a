"""Shared by the web planner's benchmark and screenshot scripts: a `serveplan ui` server on a free
loopback port, and Debian's Chromium driven by Playwright (no browser download)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def chromium() -> str:
    path = os.environ.get("SERVEPLAN_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        sys.exit("no Chromium: apt-get install chromium (or set SERVEPLAN_CHROMIUM)")
    return path


@contextmanager
def ui_server() -> Iterator[str]:
    """Start `serveplan ui` and yield its URL once it answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, PYTHONPATH=str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "serveplan", "ui", "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(url + "/api/schema", timeout=2).read()
                break
            except OSError:
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)
