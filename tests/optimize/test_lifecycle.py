"""Long runs lose nothing: pool workers end with their parent (even on SIGKILL), and the
checkpoint holds each finished evaluation once, whatever was killed mid-write."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from serveplan.optimize.lifecycle import append_checkpoint, read_checkpoint
from serveplan.optimize.search import CHECKPOINT, search
from serveplan.optimize.space import SearchSpace

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _children(pid: int) -> set[int]:
    """Processes whose parent is ``pid`` (Linux /proc)."""
    out = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            out.add(int(entry))
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _descendants(pid: int) -> set[int]:
    """Every live process below ``pid``."""
    out: set[int] = set()
    todo = [pid]
    while todo:
        for c in _children(todo.pop()):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


SEARCHES = {
    # the default (fast) search: its pool is the whole-fleet confirmation's
    "fast": ["--num-requests", "3000"],
    "exhaustive": ["--num-requests", "3000", "--exhaustive"],
    # a local Ray instance of the search's own: its raylet, agents and workers
    "ray": ["--num-requests", "20000", "--exhaustive", "--backend", "ray"],
}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to find the worker processes")
@pytest.mark.parametrize("kind", list(SEARCHES))
def test_sigkill_of_an_optimizer_run_leaves_no_worker_processes(kind):
    if kind == "ray":
        pytest.importorskip("ray")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH")) if p))
    args = [sys.executable, "-m", "serveplan", "optimize", "--engine", "bestserve", "--model", "codellama-34b",
            "--hardware", "ascend-910b3", "--devices", "8", "--tp", "2,4,8", "--scenario", "op3", "--jobs", "2",
            "--no-progress", *SEARCHES[kind]]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    seen: set[int] = set()
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            kids = _descendants(proc.pid)
            seen |= kids
            # a pool of two workers (Ray: its raylet and at least one task worker besides the watchdog)
            if len(_children(proc.pid)) >= 2 and (kind != "ray" or len(kids) >= 5):
                break
            time.sleep(0.05)
        assert proc.poll() is None and len(_children(proc.pid)) >= 2, "the search ended before its pool started"
        time.sleep(0.5 if kind != "ray" else 2.0)  # the workers are simulating
        seen |= _descendants(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(_alive(w) for w in seen):
            time.sleep(0.1)
        left = {w: _comm(w) for w in seen if _alive(w)}
        assert not left, f"processes {left} outlived their SIGKILLed parent"
    finally:
        for w in seen:
            if _alive(w):
                os.kill(w, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as fh:
            return fh.read().strip()
    except OSError:
        return "?"


def test_every_process_pool_of_the_package_ends_with_its_parent():
    """Pools come from worker_pool (its workers watch their parent); no other ProcessPoolExecutor."""
    src = Path(SRC) / "serveplan"
    offenders = [str(p.relative_to(src)) for p in src.rglob("*.py")
                 if "ProcessPoolExecutor(" in p.read_text() and p.name != "lifecycle.py"]
    assert not offenders, f"process pools made without optimize.lifecycle.worker_pool: {offenders}"


def test_checkpoint_drops_partial_and_duplicate_lines_and_appends_on_a_fresh_line(tmp_path):
    path = tmp_path / CHECKPOINT
    a = {"fingerprint": "f", "name": "1m", "result": {"x": 1}}
    b = {"fingerprint": "f", "name": "2m", "result": {"x": 2}}
    # a duplicate, then a line cut short by a kill (no newline)
    path.write_text(json.dumps(a) + "\n" + json.dumps(a) + "\n" + json.dumps(b)[:20])
    assert read_checkpoint(path) == [a]
    assert path.read_text() == json.dumps(a) + "\n"  # rewritten without the bad lines
    append_checkpoint(path, b)
    assert read_checkpoint(path) == [a, b]
    assert path.read_text().splitlines() == [json.dumps(a), json.dumps(b)]


def test_resumed_search_after_a_cut_line_has_no_duplicates_and_the_same_ranking(tmp_path):
    from test_optimize import settings

    space = SearchSpace(devices=4, tp_sizes=(2, 4), max_batches=(16,))
    s = settings()
    full = search(space, s, jobs=1, progress=False)
    search(space, s, jobs=1, progress=False, out_dir=tmp_path, max_new_evaluations=3)
    ckpt = tmp_path / CHECKPOINT
    lines = ckpt.read_text().splitlines()
    ckpt.write_text("\n".join(lines + [lines[0]]) + "\n" + lines[1][: len(lines[1]) // 2])  # duplicate + cut line
    resumed = search(space, s, jobs=1, progress=False, out_dir=tmp_path)
    names = [json.loads(ln)["name"] for ln in ckpt.read_text().splitlines()]
    assert len(names) == len(set(names)) == len(full.strategies) + len(full.rejected)
    assert [r.name for r in resumed.strategies] == [r.name for r in full.strategies]
    assert [r.goodput_rps for r in resumed.strategies] == pytest.approx([r.goodput_rps for r in full.strategies])
