"""Screenshots of the web planner's four panels at 1280x800, for the README.

Run: .venv/bin/python benchmarks/ui_screenshots.py   (needs the ui extra, Playwright and Debian's
chromium). Writes docs/img/ui-plan.png, ui-simulate.png, ui-step.png and ui-offload.png.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ui_common import chromium, ui_server  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "docs" / "img"

# panel, URL query (the page runs it at once with run=1), element that shows the result is drawn
SHOTS = [
    ("plan", "panel=plan&run=1", "#frontier .main-svg"),
    ("simulate", "panel=simulate&run=1", "#sweep-tpot .main-svg"),
    ("step", "panel=step&model=llama-3.1-70b&hardware=h100-sxm&tp=4&batch=16&input-len=2048&run=1",
     "#roofline .main-svg"),
    ("offload", "panel=offload&run=1", "#offload-frontier .main-svg"),
]


def main() -> None:
    from playwright.sync_api import sync_playwright

    OUT.mkdir(parents=True, exist_ok=True)
    with ui_server() as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), headless=True, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        for name, query, ready in SHOTS:
            page.goto(f"{url}/?{query}")
            page.wait_for_selector(ready, timeout=300_000)
            page.wait_for_timeout(800)  # let plotly finish its layout
            path = OUT / f"ui-{name}.png"
            page.screenshot(path=str(path))
            print(f"wrote {path}")
        browser.close()


if __name__ == "__main__":
    main()
