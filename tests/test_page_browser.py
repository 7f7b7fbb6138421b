"""The trajectory page in headless Chromium: no errors, every iteration, hostile content inert,
screenshots. Chromium comes from the OS (`apt-get install chromium`); these tests skip, saying so,
only when none is installed (KERNLOOP_REQUIRE_CHROMIUM=1 fails them instead). Screenshots land in
test-artifacts/ (git-ignored)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from browser import Browser  # noqa: E402
from pagekit import (ARTIFACTS, ROOT, chromium_or_fail, copy_sample, make_hostile,  # noqa: E402
                     make_run, needs_chromium, sample_ids)
from pagekit import strict_templates  # noqa: E402,F401 - autouse: pages render with strict templates
from kernloop import page  # noqa: E402

pytestmark = [pytest.mark.browser]


# ----------------------------------------------------------------------------- in a real browser

@pytest.fixture(scope="module")
def browser():
    with Browser(chromium_or_fail(), width=1400, height=1000) as b:
        yield b


@needs_chromium
def test_in_chromium_no_errors_every_iteration_and_a_screenshot(browser, tmp_path):
    run = copy_sample(tmp_path)
    url = page.render_run(run).resolve().as_uri()
    mark = len(browser.events)
    browser.open(url)
    assert _problems_since(browser, mark) == []
    ids = sample_ids()
    assert browser.eval("Array.from(document.querySelectorAll('[data-iter]')).map(e => e.dataset.iter)") == \
        ["baseline"] + ids
    assert browser.eval("Array.from(document.querySelectorAll('tr[data-row]')).map(e => e.dataset.row)") == ids
    assert browser.eval("document.querySelectorAll('svg.chart a.mk').length") == len(ids)
    # the chart's markers are drawn (symbols resolve to real geometry), not zero-size
    assert browser.eval("document.querySelector('svg.chart a.mk').getBBox().width") >= 10
    # clicking a marker opens that iteration's card and scrolls to it
    browser.eval("document.querySelector('svg.chart a.mk[data-go=\"it0003\"]')"
                 ".dispatchEvent(new MouseEvent('click', {bubbles: true, cancelable: true}))")
    state = browser.eval("(() => { const d = document.getElementById('it0003');"
                         " const r = d.getBoundingClientRect();"
                         " return [d.open, r.top >= 0 && r.top < innerHeight, location.hash,"
                         " document.getElementById('row-it0003').classList.contains('sel')]; })()")
    assert state == [True, True, "#it0003", True]
    # clicking a table row does the same; "Expand all" opens every card
    browser.eval("document.getElementById('row-it0006').querySelector('td.why')"
                 ".dispatchEvent(new MouseEvent('click', {bubbles: true, cancelable: true}))")
    assert browser.eval("document.getElementById('it0006').open") is True
    browser.eval("document.querySelector('[data-expand=\"1\"]').click()")
    assert browser.eval("Array.from(document.querySelectorAll('#k-details details.card')).every(d => d.open)")
    # the tooltip follows the mouse over a marker
    browser.eval("(() => { const m = document.querySelector('svg.chart a.mk[data-go=\"it0009\"]');"
                 " const r = m.getBoundingClientRect();"
                 " m.dispatchEvent(new MouseEvent('mousemove', {bubbles: true, clientX: r.x + 3, clientY: r.y + 3})); })()")
    assert "it0009" in browser.eval("document.getElementById('k-tip').textContent")
    browser.eval("document.querySelector('[data-expand=\"0\"]').click(); window.scrollTo(0, 0)")
    shot = browser.screenshot(ARTIFACTS / "trajectory-sample.png")
    assert shot.stat().st_size > 50_000 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert _problems_since(browser, mark) == []


def _problems_since(browser, mark):
    keep = browser.events
    browser.events = keep[mark:]
    try:
        return browser.problems()
    finally:
        browser.events = keep


@needs_chromium
def test_in_chromium_synthetic_live_run_and_index(browser, tmp_path):
    runs = tmp_path / "runs"
    run = runs / "synthetic-live"
    make_run(run, 30, synthetic=True, live=True, llm_every=2, prompt_chars=3000)
    copy_sample(runs, "sample")
    url = page.render_run(run).resolve().as_uri()
    mark = len(browser.events)
    browser.open(url)
    assert browser.eval("document.getElementById('k-synthetic').getBoundingClientRect().height") > 20
    assert browser.eval("document.title").startswith("[SYNTHETIC]")
    assert browser.eval("!!document.querySelector('meta[http-equiv=refresh]')") is True
    assert browser.eval("document.querySelectorAll('[data-iter]').length") == 31
    browser.screenshot(ARTIFACTS / "trajectory-synthetic-live.png", full_page=False)
    # the live page reloads itself: the cards a reader opened, and where they were, survive it
    browser.eval("document.getElementById('it0004').open = true; document.getElementById('it0004-prompt').open = true;"
                 "document.getElementById('it0004').scrollIntoView()")
    y = browser.eval("scrollY")
    browser.open(url)                                   # what the meta refresh does, without the 5 s wait
    assert browser.eval("[document.getElementById('it0004').open, document.getElementById('it0004-prompt').open,"
                        " document.getElementById('it0006').open]") == [True, True, False]
    assert abs(browser.eval("scrollY") - y) < 5
    browser.open(page.render_index(runs).resolve().as_uri())
    assert browser.eval("document.querySelectorAll('tr[data-run]').length") == 2
    browser.screenshot(ARTIFACTS / "runs-index.png", full_page=False)
    assert _problems_since(browser, mark) == []


@needs_chromium
def test_in_chromium_hostile_content_does_not_run(browser, tmp_path):
    run = copy_sample(tmp_path)
    make_hostile(run)
    mark = len(browser.events)
    browser.open(page.render_run(run).resolve().as_uri())
    browser.eval("document.querySelector('[data-expand=\"1\"]').click()")
    browser.eval("document.querySelectorAll('svg.chart a.mk').forEach(m => m.dispatchEvent("
                 "new MouseEvent('mouseover', {bubbles: true})))")
    assert browser.eval("typeof window.__pwned") == "undefined"
    assert browser.eval("document.querySelectorAll('script').length") == 1
    assert _problems_since(browser, mark) == []


@needs_chromium
def test_cli_screenshot(tmp_path):
    chromium_or_fail()
    run = copy_sample(tmp_path)
    png = ARTIFACTS / "trajectory-cli.png"
    png.unlink(missing_ok=True)
    r = subprocess.run([sys.executable, str(ROOT / "orchestrator.py"), "page", "--screenshot", str(run), str(png),
                        "--height", "1400"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@needs_chromium
def test_the_browser_helper_sees_errors_and_network(browser, tmp_path):
    """Guard the guard: a page with a console error, an uncaught exception and an outside
    request must be reported, or the no-errors checks above would prove nothing."""
    bad = tmp_path / "bad.html"
    bad.write_text('<!doctype html><title>bad</title><img src="http://kernloop.invalid/x.png">'
                   '<script>console.error("boom"); undefinedFunction();</script>')
    mark = len(browser.events)
    browser.open(bad.resolve().as_uri())
    found = "\n".join(_problems_since(browser, mark))
    assert "console.error: boom" in found
    assert "uncaught: ReferenceError: undefinedFunction is not defined" in found
    assert "network request: http://kernloop.invalid/x.png" in found
