"""The first hour on a busy machine: the README's test command on fresh clones, and the worker-leak
tests over and over, while two busy processes take the cores (issue: worker processes outliving
a killed search).

Two CPU-bound processes (``while True: pass``) run beside everything. Then:

* ``--kill N``: ``tests/optimize/test_lifecycle.py`` (SIGKILL of a fast, an exhaustive and a Ray
  search, each landing inside a pool of workers, and a check that no worker or Ray process is left)
  ``N`` times in a row with this checkout's interpreter;
* ``--readme N``: ``N`` fresh clones of this repository (``git clone``, with ``../shared`` beside
  each as CI has it), each running the test command README.md prints, exactly, in a shell.

Each run's exit status and time are written to ``benchmarks/results/first-hour-load.md`` with the
machine noted. The busy processes are ended by their PIDs whatever happens.

    PYTHONPATH=src .venv/bin/python benchmarks/first_hour_load.py --kill 20 --readme 3
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine_info import describe

ROOT = Path(__file__).resolve().parent.parent
BUSY = "while True:\n    pass\n"


def readme_test_command() -> str:
    """The test command README.md prints (the fenced block after "Run the tests")."""
    text = (ROOT / "README.md").read_text()
    m = re.search(r"Run the tests:\s*```bash\n(.+?)\n```", text, re.S)
    if m is None:
        raise SystemExit("README.md prints no test command after 'Run the tests:'")
    return m.group(1).strip()


def summary_line(out: str) -> str:
    """pytest's last summary line (``N passed, M skipped in T s``)."""
    lines = [ln for ln in out.splitlines() if re.search(r"\b(passed|failed|error)", ln)]
    return lines[-1].strip("= ") if lines else "(no pytest summary)"


def run(cmd: list[str] | str, cwd: Path, *, shell: bool = False, env: dict[str, str] | None = None,
        timeout: float = 7200) -> tuple[int, float, str]:
    t0 = time.monotonic()
    p = subprocess.run(cmd, cwd=cwd, shell=shell, env=env, capture_output=True, text=True, timeout=timeout,
                       executable="/bin/bash" if shell else None)
    return p.returncode, time.monotonic() - t0, p.stdout + p.stderr


def kill_loop(n: int) -> list[str]:
    rows = []
    for i in range(1, n + 1):
        rc, dt, out = run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                           "tests/optimize/test_lifecycle.py"], ROOT)
        rows.append(f"| kill {i} | {rc} | {dt:.0f} | {summary_line(out)} |")
        print(rows[-1], flush=True)
    return rows


def readme_loop(n: int, cmd: str) -> list[str]:
    rows = []
    for i in range(1, n + 1):
        base = Path(tempfile.mkdtemp(prefix="serveplan-clone-"))
        try:
            subprocess.run(["git", "clone", "-q", str(ROOT), str(base / "main")], check=True)
            shared = ROOT.parent / "shared"
            if shared.exists():
                (base / "shared").symlink_to(shared)
            env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
            rc, dt, out = run(cmd, base / "main", shell=True, env=env)
            rows.append(f"| README {i} | {rc} | {dt:.0f} | {summary_line(out)} |")
            print(rows[-1], flush=True)
            if rc != 0:  # the whole output, for the failures' tracebacks
                log = Path(tempfile.gettempdir()) / f"first-hour-README-{i}.log"
                log.write_text(out)
                print(f"(full output: {log})", out[-4000:], sep="\n", flush=True)
        finally:
            shutil.rmtree(base, ignore_errors=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kill", type=int, default=20, help="runs of the SIGKILL tests")
    ap.add_argument("--readme", type=int, default=3, help="fresh clones running the README's test command")
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args()
    machine = describe()
    busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(2)]
    cmd = readme_test_command()
    try:
        rows = kill_loop(a.kill) + readme_loop(a.readme, cmd)
    finally:
        for p in busy:
            p.kill()
            p.wait()
    lines = [f"`benchmarks/first_hour_load.py --kill {a.kill} --readme {a.readme}` on {machine}, "
             "two CPU-bound processes running beside every run.", "",
             f"README test command: `{cmd}`", "",
             "| run | exit | seconds | pytest |", "|---|---|---|---|", *rows]
    ok = all(r.split("|")[2].strip() == "0" for r in rows)
    lines += ["", f"all passed: {ok}"]
    print("\n".join(lines))
    if not a.no_write:
        (ROOT / "benchmarks" / "results" / "first-hour-load.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
