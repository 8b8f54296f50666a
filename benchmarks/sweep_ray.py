"""``serveplan sweep`` on a two-node Ray cluster with one node killed mid-run, against a local run.

A sweep of 24 small questions (3 models x 2 accelerators x 2 SLOs x 2 workloads, each one search
of serveplan optimize) runs twice:

1. locally (``--jobs 2``: a pool of two worker processes);
2. on a Ray cluster of two nodes on this machine (two ``ray start --block`` on 127.0.0.1, one CPU
   each, token authentication, every port chosen free), the sweep's driver connected to the head
   with ``--ray-address``. Once a few questions are answered and a question's task is running on
   the second node, that node's raylet is SIGKILLed: the node dies with the task, and Ray reruns
   it on the head (``--retries``).

The two summaries (``--json`` rows: every question's best plan, goodput, goodput per device,
$/Mtok, $/month; no timings) must be equal, and so must every question's whole answer (its
``serveplan optimize --json`` document) once its times are dropped. The result, the times and the
machine are written to ``benchmarks/results/sweep-ray-<date>.md``.

Every process this script starts is ended by its PID (the ``ray start`` processes and every
process they started, recorded while they ran); it never runs ``ray stop``.

    PYTHONPATH=src .venv/bin/python benchmarks/sweep_ray.py
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from machine_info import describe, report

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
RAY = Path(sys.executable).with_name("ray")

SWEEP = """\
# 24 small questions: 3 models x 2 accelerators x 2 SLOs x 2 workloads
common:
  devices: 2
  tp: 1
  num_requests: 150
grid:
  model: [llama-3.1-8b, qwen3-8b, mistral-7b-v0.1]
  hardware: [h100-sxm, a100-80g]
  slo:
    - {slo_ttft: 0.5, slo_tpot: 0.03}
    - {slo_ttft: 1.0, slo_tpot: 0.05}
  workload:
    - {input_len: 512, output_len: 64}
    - {input_len: 2048, output_len: 128}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def children() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            out.setdefault(int(fields[1]), []).append(int(entry))
    return out


def descendants(root: int) -> list[int]:
    kids = children()
    out, todo = [], [root]
    while todo:
        for pid in kids.get(todo.pop(), []):
            out.append(pid)
            todo.append(pid)
    return out


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


class Node:
    """One ``ray start --block`` and the processes it starts (recorded so they can be ended by PID)."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log.open("w")
        self.proc = subprocess.Popen([str(RAY), "start", "--block", *args], env=env, stdout=self.log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.seen: set[int] = set()

    def record(self) -> None:
        if alive(self.proc.pid):
            self.seen.update(descendants(self.proc.pid))

    def raylet(self) -> int | None:
        self.record()
        return next((p for p in sorted(self.seen) if alive(p) and "raylet/raylet" in cmdline(p)), None)

    def running_task(self, name: str) -> bool:
        self.record()
        return any(alive(p) and cmdline(p).startswith(f"ray::{name}") for p in self.seen)

    def end(self) -> list[int]:
        """SIGTERM the ``ray start`` (it stops what it started), then SIGKILL any survivor by PID."""
        self.record()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        time.sleep(1.0)
        survivors = [p for p in self.seen if alive(p)]
        for p in survivors:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        self.log.close()
        return survivors


def node_args(cpus: int) -> list[str]:
    return ["--num-cpus", str(cpus), "--node-ip-address", "127.0.0.1", "--disable-usage-stats",
            "--object-store-memory", str(200 * 2**20),
            "--node-manager-port", str(free_port()), "--object-manager-port", str(free_port()),
            "--dashboard-agent-listen-port", str(free_port()), "--dashboard-agent-grpc-port", str(free_port()),
            "--runtime-env-agent-port", str(free_port()), "--metrics-export-port", str(free_port())]


def sweep(file: Path, out: Path, env: dict[str, str], *args: str) -> tuple[dict[str, Any], float]:
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "serveplan", "sweep", str(file), "--out", str(out), "--json",
                        "--no-progress", *args], capture_output=True, text=True, env=env, timeout=1800)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"sweep {' '.join(args)} failed ({r.returncode}):\n{r.stderr[-3000:]}")
    return json.loads(r.stdout), wall


def answers(out: Path) -> dict[str, Any]:
    """Every question's whole answer, its times dropped."""
    def drop(o: Any) -> Any:
        if isinstance(o, dict):
            return {k: drop(v) for k, v in o.items() if k != "elapsed_s"}
        if isinstance(o, list):
            return [drop(v) for v in o]
        return o

    return {p.stem: drop(json.loads(p.read_text())) for p in sorted((out / "questions").glob("*.json"))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kill-after", type=int, default=4, help="questions answered before the second node is killed")
    ap.add_argument("--no-write", action="store_true", help="print the record instead of writing it")
    ap.add_argument("--reuse-local", type=Path, help="a local run's --out folder to resume (while trying the script)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sweep-ray-"))
    ray_tmp = Path(tempfile.mkdtemp(prefix="r", dir="/tmp"))   # short: Ray's socket paths must stay short
    file = work / "sweep.yaml"
    file.write_text(SWEEP)
    env = dict(os.environ, PYTHONPATH=str(SRC), RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32),
               RAY_USAGE_STATS_ENABLED="0")
    env.pop("RAY_ADDRESS", None)
    lines = [f"# `serveplan sweep` on two Ray nodes with one killed mid-run, {datetime.date.today()}", "",
             f"Machine: {describe()}; Ray {ray_version()}.", "",
             "Command: `PYTHONPATH=src .venv/bin/python benchmarks/sweep_ray.py`", "", "The sweep:", "",
             "```yaml", SWEEP.rstrip(), "```", ""]

    if args.reuse_local:   # a local run's folder from before (the same sweep): its answers are resumed
        shutil.copytree(args.reuse_local, work / "local")
    local, local_s = sweep(file, work / "local", env, "--jobs", "2")
    print(f"local: {local['num_run']} questions in {local_s:.1f} s", flush=True)

    port = free_port()
    head = Node(["--head", "--port", str(port), "--temp-dir", str(ray_tmp), "--include-dashboard", "false",
                 *node_args(1)], env, work / "head.log")
    worker: Node | None = None
    killed = ""
    try:
        wait_for(lambda: head.raylet() is not None, 60, "the head's raylet")
        worker = Node(["--address", f"127.0.0.1:{port}", *node_args(1)], env, work / "worker.log")
        wait_for(lambda: worker is not None and worker.raylet() is not None, 60, "the worker node's raylet")
        time.sleep(3.0)   # the node registers with the head
        out = work / "ray"
        t0 = time.perf_counter()
        driver = subprocess.Popen([sys.executable, "-m", "serveplan", "sweep", str(file), "--out", str(out), "--json",
                                   "--no-progress", "--backend", "ray", "--ray-address", f"127.0.0.1:{port}",
                                   "--retries", "3"], stdout=(work / "driver.out").open("w"),
                                  stderr=(work / "driver.err").open("w"), env=env)
        kill_at = None
        while driver.poll() is None:
            done = len(list((out / "questions").glob("*.json"))) if (out / "questions").is_dir() else 0
            head.record()
            if kill_at is None and done >= args.kill_after and worker.running_task("answer"):
                raylet = worker.raylet()
                if raylet is not None:
                    os.kill(raylet, signal.SIGKILL)
                    kill_at = time.perf_counter() - t0
                    killed = (f"the second node's raylet (PID {raylet}) SIGKILLed at {kill_at:.1f} s, after {done} of "
                              f"{local['num_questions']} questions were answered, while a question's task ran on it")
                    print(killed, flush=True)
            time.sleep(0.2)
        ray_s = time.perf_counter() - t0
        stdout, stderr = (work / "driver.out").read_text(), (work / "driver.err").read_text()
        if driver.returncode != 0:
            raise SystemExit(f"the Ray sweep failed ({driver.returncode}):\n{stderr[-3000:]}")
        remote = json.loads(stdout[stdout.index("{"):])   # Ray may print a line before it
        print(f"ray: {remote['num_run']} questions in {ray_s:.1f} s", flush=True)
    finally:
        survivors = (worker.end() if worker is not None else []) + head.end()
        shutil.rmtree(ray_tmp, ignore_errors=True)

    rows_equal = local["rows"] == remote["rows"]
    docs_equal = answers(work / "local") == answers(work / "ray")
    lines += [
        "| run | questions | wall s | summary equal to the local run's | answers equal (times dropped) |",
        "|---|---|---|---|---|",
        f"| local, `--jobs 2` | {local['num_run']} | {local_s:.1f} | - | - |",
        f"| Ray, two nodes of 1 CPU, one killed | {remote['num_run']} | {ray_s:.1f} | "
        f"{'**yes**' if rows_equal else '**NO**'} | {'yes' if docs_equal else 'NO'} |",
        "",
        f"Kill: {killed or 'NOT DONE (the sweep ended before a task ran on the second node)'}.",
        f"Processes left by the two `ray start` and SIGKILLed by PID at the end: {len(survivors)}.",
        "",
        "Both runs answer two questions at a time (two worker processes; two nodes of one CPU each, one after the "
        "kill) on a machine shared with other jobs (load average above), so their wall times say more about the "
        "load than about the backends. Summary: each question's best plan, goodput, goodput per device, $/Mtok "
        "and $/month (`--json` rows); answers: each question's whole `serveplan optimize --json` document.",
        "",
        "Best plan per question (the local run's summary):",
        "",
        "| # | model | hardware | SLO TTFT / TPOT | workload | best | goodput req/s | per device | $/Mtok out "
        "| $/month |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in local["rows"]:
        wl = r.get("workload") or "-"
        lines.append(f"| {r['question']} | {r['model']} | {r['hardware']} | {r['slo_ttft']:g} s / "
                     f"{r['slo_tpot']:g} s | {wl} | {r['best'] or r['status']} | {fmt(r['goodput_rps'], '.2f')} | "
                     f"{fmt(r['goodput_per_device'], '.3f')} | {fmt(r['usd_per_mtok_output'], '.3f')} | "
                     f"{fmt(r['usd_per_month'], ',.0f')} |")
    if args.no_write:
        print("\n".join(lines))
    else:
        report(lines, f"sweep-ray-{datetime.date.today().strftime('%Y%m%d')}.md")
    shutil.rmtree(work, ignore_errors=True)
    if not (rows_equal and killed):
        raise SystemExit(1)


def fmt(v: Any, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def ray_version() -> str:
    import ray

    return str(ray.__version__)


def wait_for(check: Any, timeout_s: float, what: str) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.5)
    raise SystemExit(f"{what} did not start within {timeout_s:.0f} s")


if __name__ == "__main__":
    main()
