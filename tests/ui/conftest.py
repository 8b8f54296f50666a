"""A real `serveplan ui` server on a free loopback port, for the API and browser tests."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, url: str) -> None:
        self.url = url

    def request(self, method: str, path: str, body: object | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, object]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json", **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                raw = r.read()
                status = r.status
        except urllib.error.HTTPError as e:
            raw, status = e.read(), e.code
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode(errors="replace")

    def raw(self, method: str, path: str) -> tuple[int, str]:
        """The response body as text (no JSON parsing: the tests check what clients would parse)."""
        req = urllib.request.Request(self.url + path, method=method)
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")

    def run(self, kind: str, fields: dict[str, str], timeout: float = 240) -> tuple[dict, dict]:
        """Start a job, wait for it; (status, document-or-error)."""
        code, st = self.request("POST", f"/api/run/{kind}", fields)
        assert code == 200, st
        deadline = time.monotonic() + timeout
        while st["state"] == "running":
            assert time.monotonic() < deadline, st
            time.sleep(0.1)
            _, st = self.request("GET", f"/api/jobs/{st['job']}")
        _, doc = self.request("GET", f"/api/jobs/{st['job']}/result")
        return st, doc


@pytest.fixture(scope="session")
def server():
    for module in ("fastapi", "uvicorn", "plotly"):
        pytest.importorskip(module, reason="the ui extra is not installed: pip install 'serveplan[ui]'")
    port = _free_port()
    env = dict(os.environ, PYTHONPATH=str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "serveplan", "ui", "--port", str(port)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(url + "/api/schema", timeout=2).read()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                out = proc.stdout.read() if proc.stdout else ""
                raise RuntimeError("serveplan ui did not start:\n" + out) from None
            time.sleep(0.2)
    yield Server(url)
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
