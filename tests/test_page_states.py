"""The page's stop states, speed ratios, CONFIG and legend (as HTML), and its layout at 1024 and
1400 px in headless Chromium (screenshots land in test-artifacts/, git-ignored)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from kernloop import page  # noqa: E402
from browser import Browser, find_chromium  # noqa: E402
from columns import unwrap  # noqa: E402
from pagekit import NO_CHROMIUM, REQUIRE_CHROMIUM, Parsed, chromium_or_fail  # noqa: E402
from kernloop.trajectory import RunLog, end_run, read_events  # noqa: E402

SAMPLE = ROOT / "tests" / "fixtures" / "sample_run"
EXAMPLE = ROOT / "runs" / "example"
ARTIFACTS = Path(os.environ.get("KERNLOOP_TEST_ARTIFACTS", ROOT / "test-artifacts"))

def needs_chromium(test):
    """Marked `browser`; skipped without Chromium unless CI requires it."""
    return pytest.mark.browser(pytest.mark.skipif(find_chromium() is None and not REQUIRE_CHROMIUM, reason=NO_CHROMIUM)(test))


@pytest.fixture(autouse=True)
def strict_templates(monkeypatch):
    monkeypatch.setattr(page, "STRICT", True)


def copy_run(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("trajectory.html", "index.html"))
    return dst


def keep_events(run: Path, keep) -> list:
    """Rewrite run.jsonl with the events `keep` accepts, through the one writer."""
    events = [e for e in read_events(run / "run.jsonl") if keep(e)]
    (run / "run.jsonl").unlink()
    for e in events:
        log = RunLog(run / "run.jsonl", e["run_id"], e["backend"], e["synthetic"])
        log.append(e["event"], **{k: v for k, v in e.items() if k not in ("event", "ts", "run_id", "backend", "synthetic")})
    return events


def text_of(html: str) -> str:
    return re.sub(r"\s+", " ", Parsed(html).text())


def test_interrupted_run_says_so_and_stops_refreshing(tmp_path):
    run = copy_run(SAMPLE, tmp_path / "run")
    keep_events(run, lambda e: e["event"] != "run_end" and e.get("iteration", 0) <= 4)
    start = read_events(run / "run.jsonl")[0]
    end_run(RunLog(run / "run.jsonl", start["run_id"], "local", False), "interrupted",
            "interrupted by Ctrl-C after iteration 4", iterations_done=4, champion_id="it0002",
            champion_file="candidates/it0002.py", baseline_mean_ms=1.8742, champion_mean_ms=0.3121,
            duration_s=200.0)
    html = page.render_run(run).read_text()
    text = text_of(html)
    assert "Interrupted" in text and "interrupted by Ctrl-C after iteration 4" in text
    assert f"--resume {run.resolve()}" in text        # the path the terminal prints: it works anywhere
    assert "Running" not in text and "Live" not in text and "Finished" not in text
    assert 'http-equiv="refresh"' not in html
    idx = page.render_index(tmp_path).read_text()
    assert '<span class="pill stopped">interrupted</span>' in idx


def test_failed_baseline_reads_baseline_failed_in_red(tmp_path):
    run = tmp_path / "bad"
    run.mkdir()
    shutil.copy(SAMPLE / "baseline.py", run / "baseline.py")
    log = RunLog(run / "run.jsonl", "bad", "synthetic", True)
    log.append("run_start", spec={"name": "matmul"}, iterations=5)
    log.append("baseline", candidate_id="baseline", candidate_file="baseline.py",
               result={"ok": False, "correct": False, "error": "rel_l2 0.31 > 0.01 on 37x45x29"})
    end_run(log, "baseline_failed", "baseline failed: rel_l2 0.31 > 0.01 on 37x45x29", iterations_done=0)
    html = page.render_run(run).read_text()
    p = Parsed(html)
    status = [a for t, a in p.elements if a.get("id") == "k-status"]
    assert status and status[0]["class"] == "status failed"
    text = text_of(html)
    assert "Baseline failed" in text and "Finished" not in text
    assert "baseline failed: rel_l2 0.31 &gt; 0.01" in html or "baseline failed: rel_l2 0.31 > 0.01" in text
    assert '<div class="sub why bad">' in html               # the reason is shown in red
    assert 'http-equiv="refresh"' not in html


def test_speed_is_a_ratio_config_is_full_and_the_legend_lists_what_the_run_has(tmp_path):
    run = copy_run(EXAMPLE, tmp_path / "ex")
    events = read_events(run / "run.jsonl")
    its = [e for e in events if e["event"] == "iteration"]
    html = page.render_run(run).read_text()
    p = Parsed(html)
    # the table's speed column: champion / candidate as the decision logged it, as "2.20×"
    rule = its[0]["decision"]["rule"]
    assert f"{rule['champ_mean_ms'] / rule['cand_mean_ms']:.2f}×" in text_of(html)
    cells = re.findall(r'<td class="num(?: gain-pos| gain-neg)?">([^<]*)</td>', html)
    speeds = [c for c in cells if c.endswith("×")]
    assert len(speeds) == len([e for e in its if e["result"] and e["decision"]["rule"].get("speedup")])
    assert not [c for c in cells if c.endswith("%")]
    # every card shows the full CONFIG; the keys changed from its parent are highlighted
    second = its[1]
    parent = next(e for e in its if e["candidate_id"] == second["parent_id"])
    card = html[html.index(f'data-iter="{second["candidate_id"]}"'):]
    card = card[card.index('<table class="kv cfg">'):]
    card = card[:card.index("</table>")]
    for k, val in second["candidate_config"].items():
        assert f"<th>{k}</th><td>{val}" in card
    changed = {k for k, val in second["candidate_config"].items() if parent["candidate_config"].get(k) != val}
    assert changed and card.count('class="chg"') == len(changed)
    # the legend lists only the markers this run has
    legend = html[html.index('<span class="legend">'):]
    legend = legend[:legend.index("</h2>")]
    verdicts = {e["decision"]["verdict"] for e in its}
    for vd in ("promoted", "rejected", "incorrect", "failed", "invalid"):
        assert (f"#m-{vd}" in legend) == (vd in verdicts), vd
    assert "research" not in legend                          # the tuner run did no research
    assert p.attr_values("id").count("k-chart") == 1


def test_screenshot_of_a_folder_that_is_not_a_run(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "orchestrator.py"), "page", "--screenshot", str(tmp_path), str(tmp_path / "x.png")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stdout == ""
    assert unwrap(r.stderr) == [f"error: {tmp_path} is not a run folder (it holds no run.jsonl)"]
    assert not (tmp_path / "x.png").exists()
    run = copy_run(SAMPLE, tmp_path / "run")
    env = dict(os.environ, KERNLOOP_CHROMIUM=str(tmp_path / "no-such-chromium"))
    r = subprocess.run([sys.executable, str(ROOT / "orchestrator.py"), "page", "--screenshot", str(run), str(tmp_path / "x.png")],
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert unwrap(r.stderr) == ["error: no Chromium found: install it (apt-get install chromium) "
                                "or set KERNLOOP_CHROMIUM"]


# ----------------------------------------------------------------------------- in Chromium

@needs_chromium
def test_at_1024_px_the_reason_column_is_on_screen_and_a_marker_click_clears_the_banner(tmp_path):
    run = copy_run(EXAMPLE, tmp_path / "ex")
    url = page.render_run(run).resolve().as_uri()
    with Browser(chromium_or_fail(), width=1024, height=800) as b:
        b.open(url)
        b.eval("document.getElementById('k-table').scrollIntoView()")
        b.screenshot(ARTIFACTS / "page-1024-table.png", full_page=False)
        wrap = b.eval("(() => { const w = document.querySelector('.tablewrap');"
                      " const th = document.querySelector('table.iters thead th:last-child').getBoundingClientRect();"
                      " return [w.scrollWidth, w.clientWidth, th.left, th.right, innerWidth]; })()")
        assert wrap[0] <= wrap[1], f"the iterations table scrolls sideways: {wrap}"
        assert wrap[3] <= wrap[4] and wrap[4] - wrap[2] >= 180, f"the reason column is off-screen: {wrap}"
        # clicking a chart marker opens its card below the sticky SYNTHETIC banner, not under it
        cid = [e for e in read_events(run / "run.jsonl") if e["event"] == "iteration"][-3]["candidate_id"]
        b.eval("window.scrollTo(0, 0)")
        b.eval(f"document.querySelector('svg.chart a.mk[data-go=\"{cid}\"]').dispatchEvent("
               "new MouseEvent('click', {bubbles: true, cancelable: true}))")
        b.eval("new Promise(r => setTimeout(r, 300))")
        top, banner = b.eval(f"[document.getElementById('{cid}').getBoundingClientRect().top,"
                             " document.getElementById('k-synthetic').getBoundingClientRect().bottom]")
        b.screenshot(ARTIFACTS / "page-1024-after-marker-click.png", full_page=False)
        assert b.eval(f"document.getElementById('{cid}').open") is True
        assert top >= banner, f"card top {top} is under the banner (bottom {banner})"
        assert b.problems() == []


@needs_chromium
def test_at_1400_px_the_index_shows_every_column(tmp_path):
    runs = tmp_path / "runs"
    copy_run(SAMPLE, runs / "20251129-113351-matmul-h200")
    copy_run(EXAMPLE, runs / "example")
    url = page.render_index(runs).resolve().as_uri()
    with Browser(chromium_or_fail(), width=1400, height=700) as b:
        b.open(url)
        b.screenshot(ARTIFACTS / "index-1400.png", full_page=False)
        card = b.eval("(() => { const c = document.querySelector('.card');"
                      " const th = document.querySelector('#k-runs th:last-child').getBoundingClientRect();"
                      " return [c.scrollWidth, c.clientWidth, th.right, c.getBoundingClientRect().right]; })()")
        assert card[0] <= card[1] and card[2] <= card[3], f"the Started column is clipped: {card}"
        assert b.eval("document.querySelector('#k-runs th:last-child').textContent") == "started"
        assert b.problems() == []
