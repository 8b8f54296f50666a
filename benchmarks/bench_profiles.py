"""Size and load time of the bundled profiles, and the estimator's cost with measured curves.

    python benchmarks/bench_profiles.py   # writes benchmarks/results/profiles.txt
"""

from __future__ import annotations

import platform
import statistics
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from serveplan import ParallelConfig, StepBatch, get_hardware, get_model, get_profile  # noqa: E402
from serveplan.estimator.step import Estimator  # noqa: E402
from serveplan.specs.profile import profile_from_dict  # noqa: E402

DATA = ROOT / "src" / "serveplan" / "specs" / "data" / "profiles"


def best(fn, n: int = 20) -> float:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return min(out), statistics.median(out)


def main() -> None:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    lines = [f"# bundled profiles: size and load time ({platform.processor() or platform.machine()}, "
             f"python {platform.python_version()}, PyYAML {yaml.__version__}, loader {loader.__name__})", "",
             "| profile | KB | load: YAML parse + build, best / median (ms) |", "|---|---|---|"]
    for f in sorted(DATA.glob("*.yaml")):
        text = f.read_text()
        b, m = best(lambda text=text, f=f: profile_from_dict(yaml.load(text, Loader=loader), name=f.stem))
        lines.append(f"| {f.stem} | {len(text.encode()) / 1024:.1f} | {b * 1e3:.2f} / {m * 1e3:.2f} |")
    model, hw = get_model("llama-3.1-8b"), get_hardware("h100-sxm")
    lines += ["", "| estimator (llama-3.1-8b, h100-sxm, tp 2) | build (ms) | one step, uncached (us) |",
              "|---|---|---|"]
    for name in ("default-gpu", "measured-h100-sxm"):
        prof = get_profile(name)
        b, _ = best(lambda prof=prof: Estimator(model, hw, prof, ParallelConfig(tp=2)), 10)
        est = Estimator(model, hw, prof, ParallelConfig(tp=2))
        x = est.features(StepBatch.decode(32, 2048))
        s, _ = best(lambda est=est, x=x: est.step_time(x), 200)
        lines.append(f"| {name} | {b * 1e3:.2f} | {s * 1e6:.1f} |")
    out = ROOT / "benchmarks" / "results" / "profiles.txt"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
