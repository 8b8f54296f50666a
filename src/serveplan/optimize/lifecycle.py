"""Worker processes that never outlive their parent, and a checkpoint file that survives kills.

A search's pool workers watch their parent: when it ends for any reason (a SIGKILL included,
which runs no clean-up in the parent), each worker exits within :data:`POLL_S` seconds instead of
simulating on for an answer nobody will read. On Linux the kernel's parent-death signal
(``prctl(PR_SET_PDEATHSIG)``) ends them at once; a thread polling ``os.getppid()`` covers other
systems and a parent that already died before the worker started.

The checkpoint is JSON lines, one finished evaluation each, appended with a single ``write`` to a
file opened for appending (``O_APPEND``), so a kill leaves at most one partial last line. Loading
drops partial and duplicate lines and rewrites the file atomically when it had any, so appends
always start on a fresh line and no evaluation is recorded twice.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

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
        tmp.write_text("".join(json.dumps(r) + "\n" for r in records))
        os.replace(tmp, path)
    return records


def append_checkpoint(path: Path, record: dict[str, Any]) -> None:
    """Append one record as one line with a single write (see the module docstring)."""
    data = (json.dumps(record) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        written = os.write(fd, data)
        while written < len(data):  # pragma: no cover - a short write to a local file
            written += os.write(fd, data[written:])
        os.fsync(fd)
    finally:
        os.close(fd)
