"""The trajectory page: rendered from a recorded run, checked as HTML (test_page_browser.py: in
headless Chromium)."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pagekit import (FIXTURE, ROOT, Parsed, assert_self_contained, copy_sample,  # noqa: E402
                     make_hostile, make_run, read_events, sample_ids, write_events)
from pagekit import strict_templates  # noqa: E402,F401 - autouse: pages render with strict templates
from kernloop import page  # noqa: E402
from kernloop.view import htmlfmt  # noqa: E402


# ----------------------------------------------------------------------------- the page as HTML

def test_renders_the_recorded_run(tmp_path):
    run = copy_sample(tmp_path)
    out = page.render_run(run)
    assert out == run / "trajectory.html" and out.is_file()
    assert not [p for p in run.iterdir() if p.name.endswith(".tmp")], "the atomic write left a temp file"
    html = out.read_text()
    p = Parsed(html)
    assert_self_contained(p)
    ids = sample_ids()
    assert len(ids) == 9
    cards = p.attr_values("data-iter")
    rows = p.attr_values("data-row")
    for cid in ids:
        assert cid in cards, f"{cid} has no detail card"
        assert cid in rows, f"{cid} has no table row"
    assert len(set(p.ids())) == len(p.ids()), "duplicate DOM ids"
    # chart: one marker per iteration, shape per verdict, research lines
    marks = [a for t, a in p.elements if t == "a" and "mk" in a.get("class", "").split()]
    assert [m["data-go"] for m in marks] == ids
    verdicts = [e["decision"]["verdict"] for e in read_events(FIXTURE) if e["event"] == "iteration"]
    assert [m["class"].split()[1] for m in marks] == [f"v-{v}" for v in verdicts]
    assert {"promoted", "rejected", "incorrect", "failed", "invalid"} <= set(verdicts)
    uses = [a["href"] for t, a in p.elements if t == "use" and a.get("href", "").startswith("#m-")]
    assert {"#m-promoted", "#m-rejected", "#m-incorrect", "#m-failed", "#m-invalid"} <= set(uses)
    assert len([a for t, a in p.elements if t == "a" and "rs" in a.get("class", "").split()]) == 2
    # header: the headline numbers and why it stopped
    text = re.sub(r"\s+", " ", p.text())
    for needle in ("matmul", "NVIDIA H200", "local", "nemotron", "nvidia/llama-3.3-nemotron-super-49b-v1.5",
                   "7.16×", "1.874", "0.2617", "53.1%", "of datasheet FLOP/s", "budget: 9 of 9 iterations done",
                   "2025-11-29 11:33:51 UTC", "9 min 53 s", "Finished"):
        assert needle in text, needle
    # per iteration: reason, rel-L2 per shape, both sides' timing, rule inputs, note, diff, prompt
    assert "incorrect: rel_l2 0.0412 &gt; 0.01" in html or "incorrect: rel_l2 0.0412 > 0.01" in text
    assert "0.0412" in text and "✗ fail" in text and "✓ pass" in text
    assert "significance (2σ)" in text and "min_gain (threshold)" in text
    assert "128x128x64 tiles, GROUP_M=8 swizzle" in text
    assert "line 68: calls torch.matmul" in text
    assert "make_tensor_descriptor" in text and "ReadTimeout" in text
    assert '<span class="l a">' in html and '<span class="l r">' in html and '<span class="k">def</span>' in html
    assert "Per the research notes the tutorial" in text          # it0009's response, inline and collapsible
    assert 'href="candidates/it0009.prompt.txt"' in html
    assert "no candidate file" in text                            # it0007: the proposal produced no code
    assert 'http-equiv="refresh"' not in html
    assert "SYNTHETIC" not in html and 'class="modeled"' not in html


def test_refresh_meta_only_while_no_run_end(tmp_path):
    run = copy_sample(tmp_path)
    events = read_events(run)
    write_events(run, [e for e in events if e["event"] != "run_end"])
    html = page.render_run(run).read_text()
    metas = [a for t, a in Parsed(html).elements if t == "meta" and a.get("http-equiv") == "refresh"]
    assert len(metas) == 1 and metas[0]["content"] == "5"
    assert "Live · refreshes every 5 s" in html and "Running" in html
    write_events(run, events)
    html = page.render_run(run).read_text()
    assert not [a for t, a in Parsed(html).elements if t == "meta" and a.get("http-equiv") == "refresh"]
    # a page of a run that has logged nothing yet is live too
    empty = tmp_path / "empty"
    empty.mkdir()
    html = page.render_run(empty).read_text()
    assert 'http-equiv="refresh"' in html and "No iteration yet" in html


def test_synthetic_banner_and_modeled_labels(tmp_path):
    run = copy_sample(tmp_path)
    events = read_events(run)
    for e in events:
        e["synthetic"] = True
        e["backend"] = "synthetic"
        if isinstance(e.get("result"), dict):
            e["result"]["synthetic"] = True
            e["result"]["mode"] = "interpret"
    events[0]["device"] = "SYNTHETIC: modeled NVIDIA H200 (timing modeled, correctness via Triton interpreter on CPU)"
    write_events(run, events)
    html = page.render_run(run).read_text()
    p = Parsed(html)
    assert p.attr_values("id").count("k-synthetic") == 1
    assert "SYNTHETIC RUN" in html and html.count("SYNTHETIC") >= 3
    assert "<title>[SYNTHETIC]" in html
    assert "SYNTHETIC · MODELED" in html                    # the chart's watermark
    assert "modeled mean time, ms" in html                  # the chart's axis
    # every timing block on the page carries a "modeled" label: header, table columns, cards
    n_cards_timed = sum(1 for e in events if e["event"] == "iteration" and (e.get("result") or {}).get("candidate"))
    assert html.count('class="modeled"') >= 4 + 2 * n_cards_timed
    assert "Triton interpreter on the CPU" in html
    # and a real run says none of it
    plain = copy_sample(tmp_path, "plain")
    html = page.render_run(plain).read_text()
    p = Parsed(html)
    assert "SYNTHETIC" not in html and "modeled" not in p.text().lower()
    assert not [a for _, a in p.elements if "modeled" in a.get("class", "")]


def test_a_100_iteration_run_stays_under_2_mb(tmp_path):
    run = tmp_path / "big"
    events = make_run(run, 100, llm_every=1, prompt_chars=14_000)
    t0 = time.process_time()   # this process's CPU time: a loaded machine's waits are not the page's
    out = page.render_run(run)
    took = time.process_time() - t0
    size = out.stat().st_size
    assert size < 2_000_000, f"{size} bytes"
    p = Parsed(out.read_text())
    assert_self_contained(p)
    cards = p.attr_values("data-iter")
    for e in events:
        if e["event"] == "iteration":
            assert e["candidate_id"] in cards
    assert len([1 for t, a in p.elements if t == "a" and "mk" in a.get("class", "").split()]) == 100
    assert took < 15, f"rendering took {took:.1f} s of CPU"
    # a light run (tuner only, small diffs) keeps its full texts
    light = tmp_path / "light"
    make_run(light, 100, llm_every=0)
    html = page.render_run(light).read_text()
    assert "long texts shortened" not in html and len(html.encode()) < 2_000_000


def test_index_lists_every_run(tmp_path):
    runs = tmp_path / "runs"
    a = copy_sample(runs, "20251129-113351-matmul-h200")
    b = runs / "20251130-090000-live"
    make_run(b, 12, synthetic=True, live=True, run_id="20251130-090000-live", llm_every=3, prompt_chars=500)
    (runs / "not-a-run").mkdir()
    (runs / "stray.txt").write_text("x")
    out = page.render_index(runs)
    assert out == runs / "index.html"
    html = out.read_text()
    p = Parsed(html)
    assert_self_contained(p)
    hrefs = p.attr_values("href")
    assert "20251129-113351-matmul-h200/trajectory.html" in hrefs
    assert "20251130-090000-live/trajectory.html" in hrefs
    assert not [h for h in hrefs if "not-a-run" in h]
    assert (a / "trajectory.html").is_file() and (b / "trajectory.html").is_file()   # every link works
    rows = p.attr_values("data-run")
    assert rows == ["20251130-090000-live", "20251129-113351-matmul-h200"]          # newest first
    text = re.sub(r"\s+", " ", p.text())
    assert "7.16×" in text and "1.874 → 0.2617 ms" in text and "budget: 9 of 9 iterations done" in text
    assert "live / unfinished" in text and "modeled" in text and "12 / 12" in text
    # an empty runs folder still gets an index
    assert "No runs yet" in page.render_index(tmp_path / "none").read_text()


def test_hostile_content_is_escaped(tmp_path):
    run = copy_sample(tmp_path)
    make_hostile(run)
    html = page.render_run(run).read_text()
    p = Parsed(html)
    assert len(p.scripts) == 1 and "__pwned" not in p.scripts[0], "only the page's own script may run"
    assert_self_contained(p)                        # also: no on* handler, no javascript: href
    assert "<script>window.__pwned" not in html
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in html
    assert "root:" not in html                      # a log cannot make the page read outside the run folder
    assert "javascript:window.__pwned=3" in p.text()  # shown as text, not as a link


def test_defensive_against_broken_and_partial_logs(tmp_path):
    base = read_events(FIXTURE)
    start, it = base[0], next(e for e in base if e["event"] == "iteration" and e["iteration"] == 2)
    cases = {
        "missing": None,
        "empty": [],
        "only_start": [start],
        "bare_keys": [{"event": "run_start"}, {"event": "baseline"}, {"event": "research"}, {"event": "iteration"},
                      {"event": "run_end"}, {"event": "mystery"}, {}],
        "nulls": [{k: None for k in start} | {"event": "run_start"},
                  {k: None for k in it} | {"event": "iteration"},
                  {"event": "run_end", "speedup": None, "duration_s": None}],
        "wrong_types": [start | {"spec": "matmul", "argv": "python x", "versions": [1, 2], "iterations": "ten"},
                        {"event": "baseline", "result": "crashed"},
                        it | {"iteration": "two", "result": [1, 2], "decision": ["promoted"], "contract": "ok",
                              "proposal": 5, "candidate_file": 42, "parent_id": {"a": 1}},
                        it | {"result": {"rel_l2": [0.1, "NaN", None], "candidate": {"mean_ms": "fast"},
                                         "roofline": {"candidate": 3}, "tolerance": "tight"},
                              "decision": {"verdict": "PROMOTED", "rule": {"gain": "big", "sigma": None}}},
                        {"event": "run_end", "speedup": "lots", "duration_s": -5, "champion_mean_ms": float("nan")}],
        "nan_and_inf": [start, it | {"result": {"rel_l2": {"4096x4096x4096": float("nan")},
                                                "candidate": {"mean_ms": float("inf"), "std_ms": float("nan")},
                                                "champion": {"mean_ms": 0.0}},
                                     "decision": {"verdict": "incorrect", "rule": {"gain": float("-inf")}}}],
        "duplicates": [start, it, it, it | {"candidate_id": "k-chart"}, it | {"candidate_id": ""},
                       it | {"candidate_id": "it0002-prompt"}, it | {"candidate_id": "row-it0002"},
                       {"event": "research"}, it | {"candidate_id": "research-1"}],
        "resumed_twice": [start, base[1], it, start, it | {"iteration": 3, "candidate_id": "it0003"}],
    }
    for name, events in cases.items():
        run = tmp_path / name
        shutil.copytree(FIXTURE, run)
        (run / "run.jsonl").unlink()
        if events is not None:
            (run / "run.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
        html = page.render_run(run).read_text()
        p = Parsed(html)
        assert len(set(p.ids())) == len(p.ids()), f"{name}: duplicate DOM ids"
        assert "k-chart" in p.ids() and "k-table" in p.ids(), name
    # a torn last line (killed mid-write) and a garbled middle line are reported, not fatal
    run = copy_sample(tmp_path, "torn")
    text = (run / "run.jsonl").read_text().splitlines(keepends=True)
    (run / "run.jsonl").write_text("".join(text[:5]) + "{not json\n" + "".join(text[5:-1]) + text[-1][:40])
    html = page.render_run(run).read_text()
    assert "line 6 is not valid JSON: skipped" in html and "is torn" in html
    assert 'http-equiv="refresh"' in html                     # the torn run_end does not count


def test_a_page_bug_never_stops_the_run(tmp_path, monkeypatch, capsys):
    run = copy_sample(tmp_path)
    monkeypatch.setattr(page, "STRICT", False)

    def boom(*a, **k):
        raise RuntimeError("<b>a page bug</b>")
    monkeypatch.setattr(page, "build_view", boom)
    html = page.render_run(run).read_text()
    assert "The trajectory page failed to render" in html and "&lt;b&gt;a page bug&lt;/b&gt;" in html
    assert "could not render" in capsys.readouterr().err
    monkeypatch.setattr(page, "STRICT", True)
    with pytest.raises(RuntimeError):
        page.render_run(run)


_BOUNDED = r"""
import sys, time
sys.path.insert(0, {root!r})
from kernloop.view import htmlfmt
from kernloop.propose import extract
t0 = time.monotonic()
lines = htmlfmt.highlight_python("X = " + "1" * 60000 + "x\n" + "".join("Y = %s1if True else 0\n" % ("1" * 1500) for _ in range(40)) + "z = 12")
assert str(lines[0]).startswith("X = 111") and "<span" not in str(lines[0])   # too long: escaped only
assert '<span class="k">if</span>' in str(lines[1]) and '<span class="n">12</span>' in str(lines[-1])
rows, added, removed = htmlfmt.diff_rows("a\n" * 1500, "b\n" * 1500)
assert (added, removed) == (0, 0) and "too many to compare" in rows[0]
big = "```python\n" + "x = 1\n" * 10 + "# " + "y" * 98 + "\n" * 1 + ("# " + "y" * 98 + "\n") * 10500 + "```"
assert "kernel files are at most" in extract.extract_code(big, None, "stop")[1]
assert extract.extract_code("<think>" * 150000 + "x = 1", None, "stop")[0] is None
assert extract.extract_code("```" + " " * 150000 + "`\nx = 1\n", None, "stop")[1].startswith("no code found")
assert extract.extract_code("x" * 4_000_001, None, "stop")[1].startswith("the answer is 4000001 characters long")
assert extract.extract_code("```python\r\nx = 1\r\n```", None, "stop")[0] == "x = 1\n"
print(round(time.monotonic() - t0, 2))
"""


def test_text_work_is_linear_and_capped():
    """The highlighter split a 60,000-digit run followed by a letter every possible way
    (minutes: the loop waited on its page); extraction rescanned the answer for each unclosed
    <think> and each fence line of blanks. All are linear now and capped; this runs them on
    such inputs in a child that would be killed if they were not (a liveness check, not a
    timing: benchmarks/text_bounds.py measures)."""
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-c", _BOUNDED.format(root=str(ROOT))], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]


def test_highlighter_and_diff():
    lines = htmlfmt.highlight_python('x = "a # not a comment"  # real\ns = """doc\n<b>still doc</b>\n"""\ndef f(): return None')
    assert str(lines[0]) == ('x = <span class="s">&#34;a # not a comment&#34;</span>  '
                             '<span class="c"># real</span>')
    assert str(lines[2]) == '<span class="s">&lt;b&gt;still doc&lt;/b&gt;</span>'
    assert '<span class="f">f</span>' in str(lines[4]) and '<span class="k">None</span>' in str(lines[4])
    body, added, removed, shown, total = htmlfmt.render_diff("a = 1\nb = 2\n", "a = 1\nb = 3\nc = 4\n", 100)
    assert (added, removed) == (2, 1) and shown == total
    assert body.count('class="l a"') == 2 and body.count('class="l r"') == 1
    body, *_, shown, total = htmlfmt.render_diff("\n".join(f"a{i}" for i in range(50)), "\n".join(f"b{i}" for i in range(50)), 10)
    assert shown == 10 and total > 10


def test_cli_renders_a_run_and_the_index(tmp_path):
    runs = tmp_path / "runs"
    run = copy_sample(runs, "r1")
    py = sys.executable
    r = subprocess.run([py, str(ROOT / "orchestrator.py"), "page", str(run)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert (run / "trajectory.html").is_file() and not (runs / "index.html").exists()
    r = subprocess.run([py, str(ROOT / "orchestrator.py"), "page", str(runs), "--index"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "r1/trajectory.html" in (runs / "index.html").read_text()
    r = subprocess.run([py, str(ROOT / "orchestrator.py"), "page", str(tmp_path / "nothing")], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "no run.jsonl" in r.stderr
