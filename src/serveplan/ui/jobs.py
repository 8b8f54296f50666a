"""Runs the page's requests as jobs: each in its own process group, so it reports progress, can be
cancelled at once (its worker processes included) and cannot outlive its time limit; finished
results are cached by their inputs.

Processes come from a fork server that has imported serveplan once (started with the web server),
so a job starts in milliseconds rather than paying for the imports.
"""

from __future__ import annotations

import itertools
import logging
import multiprocessing as mp
import os
import signal
import threading
import time
import traceback
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from serveplan.errors import PlannerError
from serveplan.ui import service

log = logging.getLogger("serveplan.ui")

_PRELOAD = ["serveplan.ui.service", "serveplan.optimize.search", "serveplan.sim", "serveplan.offload.search",
            "serveplan.report.deploy", "serveplan.report.documents", "serveplan.estimator.api"]


class BusyError(Exception):
    """Too many jobs running; the page should wait or cancel one."""


@dataclass
class Job:
    """One request's work and its outcome."""

    id: str
    prepared: service.Prepared
    state: str = "running"            # running, done, error, cancelled
    done: int = 0
    total: int = 0
    started: float = field(default_factory=time.monotonic)
    elapsed_s: float = 0.0
    error: str | None = None
    exit_code: int = 0
    document: dict[str, Any] | None = None
    extra: dict[str, Any] | None = None
    pid: int | None = None

    def status(self) -> dict[str, Any]:
        elapsed = self.elapsed_s if self.state != "running" else time.monotonic() - self.started
        return {"job": self.id, "kind": self.prepared.request.kind, "state": self.state, "done": self.done,
                "total": self.total, "elapsed_s": round(elapsed, 3), "error": self.error,
                "exit_code": self.exit_code, "command": self.prepared.request.command}


def _work(prep: service.Prepared, conn: Any) -> None:
    """Job process: run, sending progress and the outcome over ``conn``."""
    os.setpgid(0, 0)  # its own group: a cancel ends the job and the search's worker processes together
    # the search's worker pool forks from this process, which has everything imported already (a
    # fork server inherited from the parent would start afresh and import serveplan again)
    mp.set_start_method("fork", force=True)
    try:
        def progress(done: int, total: int) -> None:
            conn.send(("progress", done, total))

        document, extra = service.run(prep, progress)
        conn.send(("done", document, extra))
    except PlannerError as exc:
        conn.send(("error", *service.error_text(exc)))
    except Exception:  # a bug: the page says so, the server log keeps the traceback
        conn.send(("error", "internal error (see the server log): " + traceback.format_exc().splitlines()[-1], 1))
        traceback.print_exc()
    finally:
        conn.close()


class JobManager:
    """Starts, tracks, caches and cancels jobs.

    Parameters
    ----------
    max_jobs:
        Jobs allowed to run at once (more are refused with :class:`BusyError`).
    time_limit_s:
        Wall-clock limit of one job; it is killed after that.
    cache_size:
        Finished jobs kept (and reused for the same inputs).
    """

    def __init__(self, *, max_jobs: int = 2, time_limit_s: float = 600.0, cache_size: int = 64) -> None:
        self.max_jobs, self.time_limit_s, self.cache_size = max_jobs, time_limit_s, cache_size
        self._ctx = mp.get_context("forkserver")
        self._ctx.set_forkserver_preload(_PRELOAD)
        self._lock = threading.Lock()
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._by_key: dict[Any, str] = {}
        self._ids = itertools.count(1)

    def warm(self) -> None:
        """Start the fork server now (it imports serveplan once), so the first job starts at once."""
        p = self._ctx.Process(target=os.getpid)
        p.start()
        p.join()

    def submit(self, prep: service.Prepared) -> tuple[Job, bool]:
        """The job for ``prep``'s inputs: a finished or running one with the same inputs (``True``), or
        a new one.

        Raises
        ------
        BusyError
            ``max_jobs`` jobs are running already.
        """
        key = prep.request.key
        with self._lock:
            jid = self._by_key.get(key)
            if jid is not None and self._jobs[jid].state in ("running", "done"):
                self._jobs.move_to_end(jid)
                return self._jobs[jid], True
            running = sum(j.state == "running" for j in self._jobs.values())
            if running >= self.max_jobs:
                raise BusyError(f"{running} jobs are running (this server's limit); wait or cancel one")
            job = Job(id=f"j{next(self._ids)}-{os.getpid()}", prepared=prep)
            self._jobs[job.id] = job
            self._by_key[key] = job.id
            self._evict()
        parent, child = self._ctx.Pipe(duplex=False)
        proc = self._ctx.Process(target=_work, args=(prep, child))  # not daemonic: a search starts worker processes
        proc.start()
        child.close()
        job.pid = proc.pid
        threading.Thread(target=self._watch, args=(job, proc, parent), daemon=True).start()
        return job, False

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            return self._jobs.get(job_id)

    def cancel(self, job_id: str) -> Job | None:
        """Stop a running job (and every process it started)."""
        job = self.get(job_id)
        if job is None or job.state != "running":
            return job
        self._finish(job, "cancelled", error="cancelled")
        self._kill(job)
        return job

    def shutdown(self) -> None:
        for job in list(self._jobs.values()):
            if job.state == "running":
                self.cancel(job.id)

    # ------------------------------------------------------------------ internals
    def _kill(self, job: Job) -> None:
        if job.pid is None:
            return
        try:
            os.killpg(job.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):  # already gone, or never got its own group
            try:
                os.kill(job.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def _finish(self, job: Job, state: str, **changes: Any) -> None:
        with self._lock:
            if job.state != "running":
                return
            for k, v in changes.items():
                setattr(job, k, v)
            job.elapsed_s = time.monotonic() - job.started
            job.state = state
            if state != "done" and self._by_key.get(job.prepared.request.key) == job.id:
                del self._by_key[job.prepared.request.key]  # only successes are reused

    def _watch(self, job: Job, proc: Any, conn: Any) -> None:
        deadline = job.started + self.time_limit_s
        try:
            while job.state == "running":
                if time.monotonic() > deadline:
                    self._finish(job, "error", error=f"stopped after {self.time_limit_s:g} s (this server's "
                                                     "limit per request); run the command from the CLI", exit_code=1)
                    self._kill(job)
                    break
                if not conn.poll(0.1):
                    continue
                try:
                    msg = conn.recv()
                except EOFError:
                    self._finish(job, "error", error="the job's process ended without an answer", exit_code=1)
                    break
                if msg[0] == "progress":
                    job.done, job.total = msg[1], msg[2]
                elif msg[0] == "done":
                    self._finish(job, "done", document=msg[1], extra=msg[2], done=job.total or 1,
                                 total=job.total or 1)
                elif msg[0] == "error":
                    self._finish(job, "error", error=msg[1], exit_code=msg[2])
        finally:
            conn.close()
            proc.join(timeout=5)
            if proc.is_alive():
                self._kill(job)

    def _evict(self) -> None:
        finished = [j for j in self._jobs.values() if j.state != "running"]
        for j in finished[: max(0, len(finished) - self.cache_size)]:
            del self._jobs[j.id]
            if self._by_key.get(j.prepared.request.key) == j.id:
                del self._by_key[j.prepared.request.key]
