"""Every example command of README.md runs as written (from a scratch folder, so ``--out`` and
``--deploy`` paths land there) and exits 0. The two set-up commands at the top (they build a
virtual environment), the web page (a server) and the lint line are run by CI itself."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SRC = ROOT / "src"
#: seconds one example may take on a busy 2-core machine
TIMEOUT_S = 600


def readme_commands(text: str) -> list[str]:
    """``serveplan ...`` command lines of the README's ``bash`` and ``console`` blocks, continuation
    lines joined and comments dropped (a console block's lines start with ``$ ``)."""
    out = []
    for lang, body in re.findall(r"```(bash|console)\n(.*?)```", text, re.S):
        joined = re.sub(r"\s*\\\n\s*", " ", body)
        for line in joined.splitlines():
            line = line.strip()
            if lang == "console":
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            line = re.sub(r"\s+#.*$", "", line) if not line.startswith("#") else ""
            if line.startswith("serveplan "):
                out.append(line)
    return out


def test_the_readme_has_examples_and_the_parser_finds_them():
    cmds = readme_commands(README.read_text())
    assert len(cmds) >= 15 and all(c.startswith("serveplan ") for c in cmds)
    text = "```bash\nserveplan simulate --rate 1 \\\n    --num-requests 10   # a comment\n# only a comment\n```"
    assert readme_commands(text) == ["serveplan simulate --rate 1 --num-requests 10"]


@pytest.mark.slow
@pytest.mark.parametrize("command", readme_commands(README.read_text()))
def test_every_readme_example_runs(command, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(SRC))
    argv = shlex.split(command)
    out = subprocess.run([sys.executable, "-m", "serveplan", *argv[1:], *(["--no-progress"] if argv[1] == "optimize"
                                                                          else [])],
                         capture_output=True, text=True, cwd=tmp_path, env=env, timeout=TIMEOUT_S)
    assert out.returncode == 0, f"{command}\n{out.stderr[-2000:]}"
    assert "Traceback" not in out.stderr


@pytest.mark.slow
def test_the_readme_main_command_compares_collocated_with_disaggregated(tmp_path):
    """The README's first command (``serveplan optimize``, the built-in default scenario) shows the
    best collocated and the best disaggregated strategy simulated whole, and which wins."""
    assert "&& .venv/bin/serveplan optimize\n" in README.read_text()
    env = dict(os.environ, PYTHONPATH=str(SRC), COLUMNS="200")
    out = subprocess.run([sys.executable, "-m", "serveplan", "optimize", "--no-progress"], capture_output=True,
                         text=True, cwd=tmp_path, env=env, timeout=TIMEOUT_S)
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert "llama-3.1-70b (bf16 weights, bf16 KV) on up to 8 x h100-sxm" in text and "engine vllm 0.33.0" in text
    assert re.search(r"best collocated \S+: [\d.]+/device; best disaggregated \S+: [\d.]+/device \(both simulated "
                     r"whole\) -> (collocated|disaggregated) wins here", text), text[-1500:]
