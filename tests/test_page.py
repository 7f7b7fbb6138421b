"""The trajectory page: rendered from a recorded run, checked as HTML and in headless Chromium.

The browser tests need Chromium from the OS (`apt-get install chromium`); they skip, saying so,
only when no Chromium is installed. Screenshots land in test-artifacts/ (git-ignored).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from view import htmlfmt  # noqa: E402
import page  # noqa: E402
import trajectory  # noqa: E402
from browser import Browser, find_chromium  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "sample_run"
ARTIFACTS = Path(os.environ.get("KERNLOOP_TEST_ARTIFACTS", ROOT / "test-artifacts"))
CHROMIUM = find_chromium()
NO_CHROMIUM = "Chromium is not installed (apt-get install chromium; .ci/run installs it)"
# CI can insist: with KERNLOOP_REQUIRE_CHROMIUM=1 a missing Chromium fails instead of skipping.
REQUIRE_CHROMIUM = os.environ.get("KERNLOOP_REQUIRE_CHROMIUM", "") not in ("", "0")
needs_chromium = pytest.mark.skipif(CHROMIUM is None and not REQUIRE_CHROMIUM, reason=NO_CHROMIUM)


def chromium_or_fail() -> str:
    if CHROMIUM is None:
        pytest.fail(NO_CHROMIUM + " and KERNLOOP_REQUIRE_CHROMIUM is set")
    return CHROMIUM


@pytest.fixture(autouse=True)
def strict_templates(monkeypatch):
    # A template typo must fail the tests, not render as an empty string.
    monkeypatch.setattr(page, "STRICT", True)


# ----------------------------------------------------------------------------- helpers

def read_events(run_dir: Path) -> list:
    return trajectory.read_events(run_dir / "run.jsonl")


def write_events(run_dir: Path, events: list) -> None:
    (run_dir / "run.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))


def copy_sample(tmp_path: Path, name: str = "run") -> Path:
    dst = tmp_path / name
    shutil.copytree(FIXTURE, dst)
    for stale in ("trajectory.html", "index.html"):
        (dst / stale).unlink(missing_ok=True)
    return dst


def sample_ids() -> list:
    return [e["candidate_id"] for e in read_events(FIXTURE) if e["event"] == "iteration"]


class Parsed(HTMLParser):
    """Every element with its attributes, the text, and the inline scripts."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.elements, self.scripts, self.texts = [], [], []
        self._in_script = self._in_style = False
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))
        self._in_script = tag == "script"
        self._in_style = tag == "style"
        if self._in_script:
            self.scripts.append("")

    def handle_startendtag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        if tag in ("script", "style"):
            self._in_script = self._in_style = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts[-1] += data
        elif not self._in_style:
            self.texts.append(data)

    def ids(self) -> list:
        return [a["id"] for _, a in self.elements if "id" in a]

    def attr_values(self, name: str) -> list:
        return [a[name] for _, a in self.elements if name in a]

    def text(self) -> str:
        return " ".join(self.texts)


def assert_self_contained(p: Parsed) -> None:
    for tag, a in p.elements:
        assert not (tag == "script" and a.get("src")), f"external script: {a}"
        assert tag not in ("link", "iframe", "object", "embed", "img"), f"external resource element <{tag}>: {a}"
        for k in ("src", "srcset", "data", "poster", "action", "formaction"):
            assert k not in a, f"<{tag} {k}=…> loads something: {a}"
        for k, val in a.items():
            assert not k.lower().startswith("on"), f"inline event handler on <{tag}>: {k}={val}"
            if k in ("href", "xlink:href") and val:
                assert val.startswith(("#", "http://", "https://")) or "://" not in val, val
                assert not val.lower().lstrip().startswith(("javascript:", "data:", "vbscript:")), val
                if val.startswith(("http://", "https://")):
                    assert tag == "a" and a.get("target") == "_blank", f"an outside link must be a plain link: {a}"


# ----------------------------------------------------------------------------- generated runs

BASE_CODE = (FIXTURE / "baseline.py").read_text()


def rewrite(code: str, k: int) -> str:
    """A full rewrite of the kernel (every identifier renamed): the largest diff a proposer makes."""
    out = code
    for name in ("offs_m", "offs_n", "offs_k", "a_ptrs", "b_ptrs", "acc", "pid_m", "pid_n", "k_left",
                 "num_pid_m", "num_pid_n", "group_id", "first_pid_m", "group_size_m", "stride_am", "stride_ak",
                 "stride_bk", "stride_bn", "stride_cm", "stride_cn", "num_pid_in_group", "c_ptrs"):
        out = out.replace(name, f"{name}_v{k}")
    return out + f"\n# rewrite {k}: " + ("padding comment " * 20) + "\n"


def make_run(run_dir: Path, n: int = 100, *, synthetic: bool = False, live: bool = False, llm_every: int = 1,
             prompt_chars: int = 14_000, research_every: int = 10, run_id: str = "gen") -> list:
    """A generated run: n iterations, every verdict, LLM prompts and responses of realistic size."""
    (run_dir / "candidates").mkdir(parents=True, exist_ok=True)
    (run_dir / "baseline.py").write_text(BASE_CODE)
    t = [0.0]

    def ev(event, **f):
        t[0] += 17.3
        rec = {"event": event, "ts": f"2025-11-29T12:{int(t[0] // 60) % 60:02d}:{t[0] % 60:06.3f}+00:00",
               "run_id": run_id, "backend": "synthetic" if synthetic else "local", "synthetic": synthetic}
        rec.update(f)
        return rec

    device = ("SYNTHETIC: modeled NVIDIA H200 (timing modeled, correctness via Triton interpreter on CPU)"
              if synthetic else "NVIDIA H200")
    events = [ev("run_start", spec={"name": "matmul", "path": "specs/matmul.yaml", "entry": "matmul",
                                    "dtype": "bfloat16", "shapes": [{"M": 4096, "N": 4096, "K": 4096},
                                                                    {"M": 37, "N": 45, "K": 29}],
                                    "tolerance": 0.01, "description": "C = A @ B"},
                 proposer="nemotron", model="nvidia/nemotron", endpoint_host="integrate.api.nvidia.com",
                 proposer_note="", device=device, seed=7, iterations=n, min_gain=0.02,
                 argv=["orchestrator.py", "--spec", "specs/matmul.yaml"],
                 versions={"python": "3.11.7", "torch": "2.5.1", "triton": "3.1.0"})]

    def res(cm, hm, ok=True, stage="done"):
        stats = (lambda m: {"mean_ms": m, "min_ms": m * 0.98, "median_ms": m, "std_ms": m * 0.01, "n": 50,
                            "warmup": 10}) if cm else None
        return {"ok": ok, "stage": stage, "error": None if ok else "boom", "correct": ok,
                "rel_l2": {"4096x4096x4096": 0.003, "37x45x29": 0.0029}, "tolerance": 0.01,
                "candidate": stats(cm) if cm else None, "champion": stats(hm) if cm else None,
                "roofline": {"candidate": {"tflops": 300.0, "gbps": 200.0, "pct_flops": 30.3, "pct_bw": 4.2,
                                           "bound": "compute"},
                             "champion": {"tflops": 290.0, "gbps": 190.0, "pct_flops": 29.3, "pct_bw": 4.0,
                                          "bound": "compute"}} if cm else None,
                "device": device, "versions": {}, "mode": "interpret" if synthetic else "gpu",
                "check_dtype": "bfloat16", "backend": "local", "synthetic": synthetic, "wall_s": 3.2,
                "backend_meta": {}}

    champ_ms, champ_id, champ_code = 2.0, "baseline", BASE_CODE
    events.append(ev("baseline", result=res(2.0, 2.0), candidate_id="baseline", candidate_file="baseline.py"))
    cycle = ("promoted", "rejected", "incorrect", "failed", "invalid", "rejected")
    for i in range(1, n + 1):
        if research_every and i % research_every == 1:
            events.append(ev("research", trigger="start" if i == 1 else "streak", source="tavily",
                             query=f"triton matmul tuning {i}", urls=[f"https://example.org/{i}"],
                             latency_s=1.5, notes="notes " * 200, error=None, before_iteration=i))
        cid = f"it{i:04d}"
        verdict = cycle[i % len(cycle)]
        llm = bool(llm_every and i % llm_every == 0)
        # an LLM rewrites the whole file (the largest diff there is); the tuner changes CONFIG only
        code = rewrite(champ_code, i) if llm else champ_code.replace("num_warps=", f"num_warps={i % 3}*0+", 1)
        (run_dir / "candidates" / f"{cid}.py").write_text(code)
        proposal = {"latency_s": 20.0, "prompt_tokens": 3000, "completion_tokens": 1200, "finish_reason": "stop",
                    "error": None, "prompt_file": None, "response_file": None}
        if llm:
            prompt = (f"Iteration {i}. Champion code:\n{champ_code}\n" + "context " * (prompt_chars // 8))[:prompt_chars]
            (run_dir / "candidates" / f"{cid}.prompt.txt").write_text(prompt)
            (run_dir / "candidates" / f"{cid}.response.txt").write_text(f"```python\n{code}```\nNOTE: rewrite {i}\n")
            proposal.update(prompt_file=f"candidates/{cid}.prompt.txt", response_file=f"candidates/{cid}.response.txt")
        cm = champ_ms * (0.9 if verdict == "promoted" else 1.01) if verdict in ("promoted", "rejected") else None
        result = res(cm, champ_ms) if cm else (res(None, None, ok=False, stage="correctness")
                                                if verdict in ("incorrect", "failed") else None)
        rule = ({"cand_mean_ms": cm, "champ_mean_ms": champ_ms, "gain": (champ_ms - cm) / champ_ms, "min_gain": 0.02,
                 "delta_ms": champ_ms - cm, "significance_ms": 0.01, "sigma": 2.0,
                 "significant": verdict == "promoted", "n": 50} if cm else None)
        parent = champ_id
        if verdict == "promoted":
            champ_ms, champ_id, champ_code = cm, cid, code
        events.append(ev("iteration", iteration=i, candidate_id=cid, candidate_file=f"candidates/{cid}.py",
                         parent_id=parent, proposer="nemotron", model="nvidia/nemotron", note=f"rewrite {i}",
                         proposal=proposal,
                         contract={"ok": verdict != "invalid", "reasons": ["calls torch.matmul"] if verdict == "invalid" else []},
                         result=result, decision={"verdict": verdict, "promoted": verdict == "promoted",
                                                  "reason": f"{verdict} because {i}", "rule": rule},
                         champion_id=champ_id, champion_mean_ms=champ_ms))
    if not live:
        events.append(ev("run_end", stop_reason=f"budget: {n} of {n} iterations", iterations_done=n,
                         champion_id=champ_id, baseline_mean_ms=2.0, champion_mean_ms=champ_ms,
                         speedup=2.0 / champ_ms, duration_s=t[0]))
    write_events(run_dir, events)
    return events


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
    t0 = time.monotonic()
    out = page.render_run(run)
    took = time.monotonic() - t0
    size = out.stat().st_size
    assert size < 2_000_000, f"{size} bytes"
    p = Parsed(out.read_text())
    assert_self_contained(p)
    cards = p.attr_values("data-iter")
    for e in events:
        if e["event"] == "iteration":
            assert e["candidate_id"] in cards
    assert len([1 for t, a in p.elements if t == "a" and "mk" in a.get("class", "").split()]) == 100
    assert took < 15, f"rendering took {took:.1f} s"
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


HOSTILE = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">"\'&</textarea>]]>'


def make_hostile(run: Path) -> None:
    events = read_events(run)
    for e in events:
        if e["event"] == "run_start":
            e["spec"]["name"] = "matmul" + HOSTILE
            e["spec"]["description"] = HOSTILE
            e["model"] = HOSTILE
            e["proposer_note"] = HOSTILE
            e["device"] = HOSTILE
            e["argv"] = [HOSTILE]
        elif e["event"] == "research":
            e["query"] = HOSTILE
            e["notes"] = HOSTILE
            e["urls"] = ["javascript:window.__pwned=3", 'https://ok.example/"><script>window.__pwned=4</script>']
        elif e["event"] == "iteration":
            e["note"] = HOSTILE
            e["decision"]["reason"] = HOSTILE
            e["decision"]["verdict"] = e["decision"]["verdict"] if e["iteration"] % 2 else HOSTILE
            if e.get("contract"):
                e["contract"]["reasons"] = [HOSTILE]
            if e.get("result"):
                e["result"]["error"] = HOSTILE
                e["result"]["rel_l2"] = {HOSTILE: 0.5}
            if e["iteration"] == 4:
                e["candidate_id"] = 'x" onmouseover="window.__pwned=5'
            if e["iteration"] == 5:
                e["proposal"]["prompt_file"] = "../../../../etc/passwd"
        elif e["event"] == "run_end":
            e["stop_reason"] = HOSTILE
    write_events(run, events)
    cand = run / "candidates" / "it0001.py"
    cand.write_text(cand.read_text() + '\nX = "</pre><script>window.__pwned=6</script>"\n')
    (run / "candidates" / "it0002.response.txt").write_text(HOSTILE)


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
from view import htmlfmt
from propose import extract
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
    timing: bench/text_bounds.py measures)."""
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
    r = subprocess.run([py, str(ROOT / "page.py"), str(run)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert (run / "trajectory.html").is_file() and not (runs / "index.html").exists()
    r = subprocess.run([py, str(ROOT / "page.py"), str(runs), "--index"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "r1/trajectory.html" in (runs / "index.html").read_text()
    r = subprocess.run([py, str(ROOT / "page.py"), str(tmp_path / "nothing")], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "no run.jsonl" in r.stderr


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
    r = subprocess.run([sys.executable, str(ROOT / "page.py"), "--screenshot", str(run), str(png),
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
