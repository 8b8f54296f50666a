"""Start-up cost: ``import serveplan`` and a whole ``serveplan estimate`` process (target <= 0.5 s).

Run: .venv/bin/python benchmarks/bench_startup.py [--runs N]
Measures, in fresh processes with compiled bytecode (as an installed package has; the cache goes
to a temporary directory, never into the source tree):

* ``python -X importtime -c "import serveplan"``: the slowest imports, and whether scipy,
  matplotlib, Ray, torch or transformers are among the modules loaded (they must not be);
* the README's ``serveplan estimate`` example as a whole process: wall time and CPU time (user +
  system; on a loaded machine the wall time waits for a core, the CPU time does not), the minimum
  over ``--runs`` runs.

With ``--baseline SRC`` (the ``src`` folder of another checkout, e.g. the previous release) the
same numbers are measured for it in the same run, so the two compare on the same load.

Results are written to benchmarks/results/startup.txt with the machine description.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling machine_info module
from machine_info import describe, report  # noqa: E402

README_ESTIMATE = ["estimate", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--tp", "2", "--batch", "8",
                   "--input-len", "1024", "-n", "128"]
HEAVY = ("scipy", "matplotlib", "ray", "torch", "transformers")
TARGET_S = 0.5


SRC = str(Path(__file__).resolve().parent.parent / "src")


def _env(cache: str, src: str = SRC) -> dict[str, str]:
    env = dict(os.environ, PYTHONPYCACHEPREFIX=cache)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def import_profile(env: dict[str, str]) -> tuple[list[tuple[int, str]], list[str]]:
    """(cumulative microseconds, module) of the slowest imports, and the heavy modules loaded."""
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", "import serveplan"], env=env,
                         capture_output=True, text=True, check=True).stderr
    rows = []
    for line in out.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cum, name = (p.strip() for p in line.removeprefix("import time:").split("|"))
        if cum.isdigit():
            rows.append((int(cum), name))
    heavy = sorted({name.split(".")[0] for _, name in rows if name.split(".")[0] in HEAVY})
    return sorted(rows, reverse=True)[:12], heavy


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--baseline", help="src folder of another checkout, measured in the same run")
    args = ap.parse_args()
    lines = [f"machine: {describe()}"]
    cli = [sys.executable, "-m", "serveplan", *README_ESTIMATE]
    with tempfile.TemporaryDirectory() as cache:
        env = _env(cache)
        _timed(cli, env)  # compile the bytecode once
        top, heavy = import_profile(env)
        lines.append("python -X importtime -c 'import serveplan': slowest imports (cumulative ms)")
        lines += [f"  {us / 1e3:7.1f}  {name}" for us, name in top]
        lines.append(f"heavy modules loaded by import serveplan: {', '.join(heavy) or 'none'} "
                     f"(checked: {', '.join(HEAVY)})")
        trees = [("this tree", env)]
        if args.baseline:
            base = _env(cache + "-baseline", str(Path(args.baseline).resolve()))
            _timed(cli, base)
            trees.append((f"baseline {args.baseline}", base))
        bare = min(_timed([sys.executable, "-c", "pass"], env) for _ in range(args.runs))
        lines += [f"minimum over {args.runs} runs (wall s / CPU s):",
                  f"  python -c pass                   {bare[0]:.3f} / {bare[1]:.3f}"]
        for label, e in trees:
            imp = min(_timed([sys.executable, "-c", "import serveplan"], e) for _ in range(args.runs))
            runs = [_timed(cli, e) for _ in range(args.runs)]
            wall, cpu = min(w for w, _ in runs), min(c for _, c in runs)
            lines += [f"  {label}:",
                      f"    python -c 'import serveplan'   {imp[0]:.3f} / {imp[1]:.3f}",
                      f"    serveplan {' '.join(README_ESTIMATE)}: {wall:.3f} / {cpu:.3f}"]
            if label == "this tree":
                verdict = (f"whole-process estimate: CPU {cpu:.3f} s, wall {wall:.3f} s (target <= {TARGET_S} s on an "
                           f"idle 2-core machine, where wall ~ CPU): {'PASS' if cpu <= TARGET_S else 'FAIL'} on CPU "
                           f"time, {'PASS' if wall <= TARGET_S else 'FAIL'} on wall time here")
    lines.append(verdict)
    report(lines, "startup.txt")


if __name__ == "__main__":
    main()
