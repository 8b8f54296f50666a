"""Time to the default plan: `serveplan optimize` from the shell against the web planner, where the
clock runs from pressing Run on the loaded page until the ranking table is drawn (issue target:
the page within the CLI's time plus 1 s). Both runs are cold (the page's cache is empty), on the
same machine, one after the other, repeated and reported as medians.

Run: .venv/bin/python benchmarks/bench_ui.py [--repeat 3]   (needs the ui extra, Playwright and
Debian's chromium). Writes benchmarks/results/ui.txt.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine_info import describe  # noqa: E402
from ui_common import SRC, chromium, ui_server  # noqa: E402

RESULTS = Path(__file__).parent / "results"


def cli_seconds() -> float:
    env = dict(os.environ, PYTHONPATH=str(SRC))
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "serveplan", "optimize", "--no-progress"], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def page_seconds(browser, url: str, seed: int) -> float:
    """Default plan in the page; a different --seed each time keeps the server's cache out of it
    (the plan's work does not depend on the seed's value)."""
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.goto(url + "/")
    page.wait_for_selector("#form [name=seed]")
    page.fill("#form [name=seed]", str(seed))
    page.wait_for_timeout(400)  # the input check settles
    t0 = time.perf_counter()
    page.click("#run")
    page.wait_for_selector("#ranking tbody tr", timeout=300_000)
    elapsed = time.perf_counter() - t0
    page.close()
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    cli, web = [], []
    with ui_server() as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), headless=True, args=["--no-sandbox"])
        for i in range(args.repeat):
            cli.append(cli_seconds())
            web.append(page_seconds(browser, url, seed=1000 + i))
        browser.close()
    c, w = statistics.median(cli), statistics.median(web)
    lines = [
        f"machine: {describe()}",
        "default plan (CodeLlama-34B, up to 8 x Ascend 910B3, op2, 2000 requests per simulation)",
        f"CLI `serveplan optimize` wall time (process start to exit): {', '.join(f'{x:.2f}' for x in cli)} s; "
        f"median {c:.2f} s",
        f"page, Run pressed to ranking drawn: {', '.join(f'{x:.2f}' for x in web)} s; median {w:.2f} s",
        f"page - CLI = {w - c:+.2f} s (target: at most +1.00 s) -> {'met' if w <= c + 1 else 'MISSED'}",
    ]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "ui.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
