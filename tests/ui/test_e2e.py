"""The page in a real headless Chromium (Debian's ``chromium``, driven by Playwright's Python API; no
browser is downloaded): run a plan, read the ranking and the frontier, change inputs, reopen a
shared link, see a bad value's error, cancel a long search, and draw the other panels.

Plans here use a small device budget and few requests so the tests stay quick; the full default
plan is timed by ``benchmarks/bench_ui.py``.
"""

from __future__ import annotations

import os
import shutil

import pytest

CHROMIUM = os.environ.get("SERVEPLAN_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
if os.environ.get("SERVEPLAN_REQUIRE_BROWSER"):  # CI: a missing browser is a failure, not a skip
    assert CHROMIUM, "SERVEPLAN_REQUIRE_BROWSER is set but no chromium binary is on PATH"
sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed: pip install playwright")
if not CHROMIUM:
    pytest.skip("no Chromium binary (apt-get install chromium, or set SERVEPLAN_CHROMIUM)", allow_module_level=True)

SMALL = {"devices": "4", "tp": "2,4", "num-requests": "150"}


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def page(browser, server):
    ctx = browser.new_context(viewport={"width": 1280, "height": 800})
    pg = ctx.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.goto(server.url + "/")
    pg.wait_for_selector("#form [name=model]")
    yield pg
    ctx.close()
    assert not errors, errors


def fill(pg, values: dict[str, str]) -> None:
    for name, value in values.items():
        pg.fill(f"#form [name='{name}']", value)


def run_and_wait(pg, selector: str) -> None:
    pg.click("#run")
    pg.wait_for_selector(selector, timeout=120_000)


def test_default_plan_shows_ranking_frontier_and_deploy(page):
    fill(page, SMALL)
    run_and_wait(page, "#ranking tbody tr")
    rows = page.locator("#ranking tbody tr")
    assert rows.count() >= 2
    assert "best: " in page.inner_text("#best")
    page.wait_for_selector("#frontier .main-svg")
    assert page.locator("#frontier .scatterlayer .trace").count() >= 1
    assert "vllm serve" in page.inner_text("#deploy")
    assert page.inner_text("#command").startswith("serveplan optimize --devices 4")
    # choosing another strategy shows its commands
    second = rows.nth(1).get_attribute("data-strategy")
    rows.nth(1).click()
    page.wait_for_function("n => document.querySelector('#deploy-card h2').textContent.includes(n)", arg=second)


def test_a_switch_limits_the_plan_to_collocated_strategies(page):
    fill(page, SMALL)
    page.check("#form [name='no-disaggregated']")
    run_and_wait(page, "#ranking tbody tr")
    names = page.locator("#ranking tbody tr").evaluate_all("rows => rows.map(r => r.dataset.strategy)")
    assert names and all("m-" in n for n in names), names
    assert "--no-disaggregated" in page.inner_text("#command")


def test_changing_the_model_and_an_slo_changes_the_plan(page):
    fill(page, {**SMALL, "model": "llama-2-13b", "slo-ttft": "0.8"})
    run_and_wait(page, "#ranking tbody tr")
    title = page.inner_text("#results .card h2")
    assert "llama-2-13b" in title and "TTFT 0.8 s" in title
    assert "--model llama-2-13b" in page.inner_text("#command") and "--slo-ttft 0.8" in page.inner_text("#command")


def test_a_shared_link_reproduces_the_plan(page, browser):
    fill(page, {**SMALL, "slo-tpot": "0.09"})
    run_and_wait(page, "#ranking tbody tr")
    best = page.inner_text("#best")
    ranking = page.inner_text("#ranking tbody")
    page.click("#share")
    link = page.input_value("#share-link")
    assert "slo-tpot=0.09" in link and "run=1" in link
    other = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
    other.goto(link)
    other.wait_for_selector("#ranking tbody tr", timeout=120_000)
    assert other.input_value("#form [name='slo-tpot']") == "0.09"
    assert other.inner_text("#ranking tbody") == ranking
    assert other.inner_text("#best").split(";")[0] == best.split(";")[0]
    other.context.close()


def test_a_bad_value_shows_the_error_and_no_traceback(page):
    fill(page, {"devices": "abc"})
    page.wait_for_selector("#error:not([hidden])")
    text = page.inner_text("#error")
    assert "devices='abc' must be an integer" in text and "Traceback" not in text
    assert page.get_attribute("#form [name='devices']", "aria-invalid") == "true"
    page.click("#run")
    page.wait_for_timeout(300)
    assert "devices='abc' must be an integer" in page.inner_text("#error")
    fill(page, {"devices": "4", "model": "no-such-model"})
    page.wait_for_function("document.querySelector('#error').textContent.includes('unknown model')")


def test_a_long_search_shows_progress_and_can_be_cancelled(page):
    fill(page, {"num-requests": "6000", "max-batch": "8,16,32", "seed": "5"})
    page.click("#run")
    started = "/[1-9]\\d* \\/ \\d+ strategies/.test(document.querySelector('#progress .text').textContent)"
    page.wait_for_function(started, timeout=240_000)   # a busy 2-core machine: the first strategy settles late
    page.click("#cancel")
    page.wait_for_function("document.querySelector('#progress .text').textContent === 'cancelled'")
    assert page.is_enabled("#run")


@pytest.mark.parametrize(("tab", "fields", "selector"), [
    ("simulate", {"num-requests": "300", "rate-sweep": "1,2,3"}, "#sweep-tpot .main-svg"),
    ("step", {}, "#roofline .main-svg"),
    ("offload", {"model": "opt-6.7b"}, "#offload-frontier .main-svg"),
    ("day", {"model": "llama-3.1-8b", "devices": "1", "tp": "1", "num-requests": "200", "traffic": "azure-code-2023",
             "traffic-scale": "8", "sim-requests": "1000"}, "#day-chart .main-svg"),
])
def test_other_panels_draw(page, tab, fields, selector):
    page.click(f"#tab-{tab}")
    fill(page, fields)
    run_and_wait(page, selector)
    assert page.is_hidden("#error")


@pytest.mark.parametrize(("tab", "fields"), [
    ("simulate", {"num-requests": "200", "rate-sweep": ""}),
    ("step", {"output-len": "128"}),
])
def test_results_carry_their_confidence(page, tab, fields):
    page.click(f"#tab-{tab}")
    fill(page, fields)
    run_and_wait(page, "#confidence")
    text = page.inner_text("#confidence")
    assert text.startswith("confidence (P10-P90 of measured / predicted")
    assert "TTFT" in text
    if tab == "simulate":
        assert page.inner_text("#latency thead").count("P10-P90 band") == 1
        # the page's simulation records the inter-token latency (over tokens), as the CLI's does
        assert [r.split("\t")[0] for r in page.inner_text("#latency tbody").splitlines()] == \
            ["TTFT", "TPOT", "ITL", "E2E", "queueing"]


def test_the_plan_says_how_far_to_trust_its_goodput(page):
    fill(page, SMALL)
    run_and_wait(page, "#ranking tbody tr")
    assert "confidence (P10-P90" in page.inner_text("#results") and "goodput" in page.inner_text("#results")
