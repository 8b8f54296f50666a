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


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to find the worker processes")
def test_sigkill_of_an_optimizer_run_leaves_no_worker_processes():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH")) if p))
    args = [sys.executable, "-m", "serveplan", "optimize", "--devices", "8", "--tp", "2,4,8", "--scenario", "op3",
            "--num-requests", "3000", "--jobs", "2", "--no-progress"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    workers: set[int] = set()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            workers = _children(proc.pid)
            if len(workers) >= 2:
                break
            time.sleep(0.05)
        assert proc.poll() is None and len(workers) >= 2, "the search ended before its pool started"
        time.sleep(0.5)  # the workers are simulating
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(_alive(w) for w in workers):
            time.sleep(0.05)
        left = [w for w in workers if _alive(w)]
        assert not left, f"worker processes {left} outlived their SIGKILLed parent"
    finally:
        for w in workers:
            if _alive(w):
                os.kill(w, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()


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
