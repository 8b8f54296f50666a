"""Run one ``serveplan`` invocation under a time bound and a memory cap, and judge the outcome.

Each case runs in a forked child of the test process (the package is already imported, so a case
costs milliseconds, not an interpreter start): the child caps its address space with
``RLIMIT_AS``, points file descriptors 1 and 2 at temporary files and calls the console entry
point :func:`serveplan.cli.main` with the arguments, exactly as the ``serveplan`` script does.
The parent kills a child that outlives the time bound. A small sample is also run as real
subprocesses (``python -m serveplan``) to check what a user's shell sees.

An outcome is one of:

* ``ok``        exit 0, 2 or 3, no traceback (and, for a nonsense input, not 0);
* ``traceback`` any other exit status, or ``Traceback`` on stderr;
* ``hang``      still running at the time bound;
* ``memory``    ran out of the memory cap (``MemoryError`` or killed);
* ``accepted``  a nonsense input that exited 0 (the answer would be silent nonsense).
"""

from __future__ import annotations

import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass

#: wall-clock bound of one invocation (s); every case the strategies build is small, so a
#: healthy run takes well under a second and only a hang or an unbounded loop reaches this
TIME_BOUND_S = float(os.environ.get("SERVEPLAN_FUZZ_TIME_BOUND", "20"))
#: address space a case may add to the test process (bytes)
MEMORY_CAP_BYTES = int(float(os.environ.get("SERVEPLAN_FUZZ_MEMORY_CAP", str(3 * 2**30))))


@dataclass(frozen=True)
class Outcome:
    args: tuple[str, ...]
    code: int | None  # None: killed at the time bound
    stdout: str
    stderr: str
    wall_s: float

    @property
    def has_traceback(self) -> bool:
        return "Traceback (most recent call last)" in self.stderr or "Traceback (most recent call last)" in self.stdout

    def verdict(self, nonsense: bool) -> str:
        """``ok``, ``traceback``, ``hang``, ``memory`` or ``accepted`` (see the module docstring)."""
        if self.code is None:
            return "hang"
        if "MemoryError" in self.stderr or self.code in (-signal.SIGKILL, -signal.SIGSEGV, 137):
            return "memory"
        if self.has_traceback or self.code not in (0, 2, 3):
            return "traceback"
        if nonsense and self.code == 0:
            return "accepted"
        return "ok"

    def cause(self) -> str:
        """A short grouping key: the exception type and the innermost serveplan frame."""
        if self.code is None:
            return "hang: " + " ".join(self.args[:1])
        frames = re.findall(r'File "[^"]*?/(serveplan/[^"]+)", line \d+, in (\w+)', self.stderr)
        last = self.stderr.strip().splitlines()[-1] if self.stderr.strip() else f"exit {self.code}"
        exc = last.split(":")[0][:60]
        where = f" at {frames[-1][0]}:{frames[-1][1]}" if frames else ""
        return f"{exc}{where}"

    def describe(self) -> str:
        tail = (self.stderr.strip().splitlines() or [""])[-1][:300]
        return f"serveplan {' '.join(self.args)} -> exit {self.code} in {self.wall_s:.1f}s: {tail}"


def _vm_bytes() -> int:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:  # pragma: no cover - not Linux
        pass
    return 0


def run_forked(args: Sequence[str], *, time_bound_s: float = TIME_BOUND_S,
               memory_cap_bytes: int = MEMORY_CAP_BYTES) -> Outcome:
    """Run ``serveplan ARGS`` in a forked child (see the module docstring)."""
    import serveplan.cli  # noqa: F401  imported before the fork, so the child starts warm

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.monotonic()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # child
            code = 1
            try:
                os.setsid()
                limit = _vm_bytes() + memory_cap_bytes
                resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
                os.dup2(out.fileno(), 1)
                os.dup2(err.fileno(), 2)
                # the test runner may have replaced sys.stdout/err with its own capture objects
                sys.stdout = sys.__stdout__ = open(1, "w", closefd=False, encoding="utf-8", errors="replace")
                sys.stderr = sys.__stderr__ = open(2, "w", closefd=False, encoding="utf-8", errors="replace")
                sys.stdin = open(os.devnull)
                sys.argv = ["serveplan", *args]
                from serveplan.cli import main

                try:
                    main()
                    code = 0
                except SystemExit as exc:
                    c = exc.code
                    code = c if isinstance(c, int) else (0 if c is None else 1)
                    if not isinstance(c, int) and c is not None:
                        print(c, file=sys.stderr)
            except BaseException:  # the uncaught-exception path a user's shell would show
                import traceback

                traceback.print_exc()
                code = 1
            finally:
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(code)
        status = None
        deadline = t0 + time_bound_s
        while True:
            done, st = os.waitpid(pid, os.WNOHANG)
            if done:
                status = st
                break
            if time.monotonic() > deadline:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except OSError:
                    os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                break
            time.sleep(0.005)
        wall = time.monotonic() - t0
        try:  # a child that started worker processes: end its process group too
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace")
        stderr = err.read().decode(errors="replace")
    code: int | None
    if status is None:
        code = None
    elif os.WIFSIGNALED(status):
        code = -os.WTERMSIG(status)
    else:
        code = os.WEXITSTATUS(status)
    return Outcome(tuple(args), code, stdout, stderr, wall)


def run_subprocess(args: Sequence[str], *, time_bound_s: float = TIME_BOUND_S,
                   memory_cap_bytes: int = MEMORY_CAP_BYTES) -> Outcome:
    """Run ``python -m serveplan ARGS`` as a real process (memory capped, killed at the bound)."""

    def cap() -> None:  # pragma: no cover - runs in the child
        resource.setrlimit(resource.RLIMIT_AS, (memory_cap_bytes + 2**30, memory_cap_bytes + 2**30))

    t0 = time.monotonic()
    env = dict(os.environ)
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH", "")) if p)
    try:
        p = subprocess.run([sys.executable, "-m", "serveplan", *args], capture_output=True, text=True,
                           timeout=time_bound_s, preexec_fn=cap, env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        return Outcome(tuple(args), None, str(exc.stdout or ""), str(exc.stderr or ""), time.monotonic() - t0)
    return Outcome(tuple(args), p.returncode, p.stdout, p.stderr, time.monotonic() - t0)
