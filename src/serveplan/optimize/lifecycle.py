"""Worker processes that never outlive their parent, and a checkpoint file that survives kills.

Every process pool of the package comes from :func:`worker_pool` (a test fails on any other
``ProcessPoolExecutor`` in ``src/``). Its workers watch their parent: when it ends for any reason (a SIGKILL included,
which runs no clean-up in the parent), each worker exits within :data:`POLL_S` seconds instead of
simulating on for an answer nobody will read. On Linux the kernel's parent-death signal
(``prctl(PR_SET_PDEATHSIG)``) ends them at once; a thread polling ``os.getppid()`` covers other
systems and a parent that already died before the worker started.

A Ray instance a search starts for itself is guarded by :func:`reap_on_exit`: a small watchdog
process (this file run as a script, so it imports nothing of the package) records the search's
descendant processes while the search lives and SIGKILLs those still running once it is gone.
Ray's own fate sharing ends its raylet and workers with the driver, but not the per-node agents
the raylet starts (``ray::DashboardAgent``, ``ray::RuntimeEnvAgent``: seen outliving a SIGKILLed
driver by minutes with Ray 2.60).

The checkpoint is JSON lines, one finished evaluation each, appended with a single ``write`` to a
file opened for appending (``O_APPEND``), so a kill leaves at most one partial last line. Loading
drops partial and duplicate lines and rewrites the file atomically when it had any, so appends
always start on a fresh line and no evaluation is recorded twice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor

#: How often a worker checks that its parent is alive (s).
POLL_S = 0.2


def _set_parent_death_signal() -> None:
    """Linux: ask the kernel to SIGKILL this process when its parent thread ends."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - no libc prctl: the polling thread remains
        pass


def watch_parent(parent_pid: int) -> None:
    """Pool initializer: end this worker when process ``parent_pid`` ends."""
    _set_parent_death_signal()
    if os.getppid() != parent_pid:  # the parent died before this worker started
        os._exit(1)

    def poll() -> None:
        while True:
            time.sleep(POLL_S)
            if os.getppid() != parent_pid:  # re-parented: the parent is gone
                os._exit(1)

    threading.Thread(target=poll, name="serveplan-parent-watch", daemon=True).start()


def worker_pool(jobs: int) -> ProcessPoolExecutor:
    """A pool of ``jobs`` worker processes that end with this process, SIGKILL included
    (:func:`watch_parent`). Use it as a context manager, like any executor."""
    from concurrent.futures import ProcessPoolExecutor  # multiprocessing: only when a pool is used

    return ProcessPoolExecutor(max_workers=max(1, int(jobs)), initializer=watch_parent, initargs=(os.getpid(),))


def _descendants(root: int) -> dict[int, str]:
    """Linux: every live descendant of process ``root``, with its start time (``/proc/PID/stat``
    field 22), which tells a process from a later one that reused its PID."""
    children: dict[int, list[tuple[int, str]]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append((int(entry), fields[19]))
    out: dict[int, str] = {}
    todo = [root]
    while todo:
        for pid, start in children.get(todo.pop(), ()):
            if pid not in out:
                out[pid] = start
                todo.append(pid)
    return out


def _start_time(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else fields[19]


def _reap(parent: int, poll_s: float = 0.5) -> None:
    """Watchdog body: record ``parent``'s descendants until it ends, then SIGKILL the survivors."""
    seen: dict[int, str] = {}
    me = os.getpid()
    while os.getppid() == parent:
        seen.update(_descendants(parent))
        time.sleep(poll_s)
    for pid, start in seen.items():
        if pid != me and _start_time(pid) == start:
            for p in (pid, *_descendants(pid)):
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass


class reap_on_exit:  # noqa: N801 - a context manager used like a function
    """Context manager: while it is open, a watchdog process SIGKILLs every process this one
    started (directly or not) once this one ends, SIGKILL included (module doc). Linux only; a
    no-op elsewhere. On a normal exit the watchdog is stopped and kills nothing."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> reap_on_exit:
        if sys.platform.startswith("linux"):
            # -I -S: no site, and not this folder on sys.path (its modules could shadow the stdlib)
            args = [sys.executable, "-I", "-S", os.path.abspath(__file__), "--reap", str(os.getpid())]
            self._proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL, start_new_session=True)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()


def read_checkpoint(path: Path) -> list[dict[str, Any]]:
    """The valid records of a checkpoint, each (fingerprint, name) once; the file is rewritten
    atomically without partial or duplicate lines when it had any."""
    if not path.exists():
        return []
    text = path.read_text()
    records: list[dict[str, Any]] = []
    seen: set[tuple[Any, Any]] = set()
    clean = text.endswith("\n") or not text
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            clean = False  # a line cut short by a kill: that candidate is simply evaluated again
            continue
        if not isinstance(rec, dict):
            clean = False
            continue
        key = (rec.get("fingerprint"), rec.get("name"))
        if key in seen:
            clean = False
            continue
        seen.add(key)
        records.append(rec)
    if not clean:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("".join(json.dumps(r, allow_nan=False) + "\n" for r in records))
        os.replace(tmp, path)
    return records


def append_checkpoint(path: Path, record: dict[str, Any]) -> None:
    """Append one record as one line with a single write (see the module docstring)."""
    data = (json.dumps(record, allow_nan=False) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        written = os.write(fd, data)
        while written < len(data):  # pragma: no cover - a short write to a local file
            written += os.write(fd, data[written:])
        os.fsync(fd)
    finally:
        os.close(fd)


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "--reap":  # reap_on_exit's watchdog
    _reap(int(sys.argv[2]))
