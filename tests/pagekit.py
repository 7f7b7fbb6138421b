"""What the page tests share: recorded and generated runs, an HTML parser with the
self-containment check, hostile content, and the Chromium switch (tests/test_page*.py)."""
from __future__ import annotations

import json
import os
import shutil
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kernloop import page  # noqa: E402
from kernloop import trajectory  # noqa: E402
from browser import find_chromium  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "sample_run"
ARTIFACTS = Path(os.environ.get("KERNLOOP_TEST_ARTIFACTS", ROOT / "test-artifacts"))
CHROMIUM = find_chromium()
NO_CHROMIUM = "Chromium is not installed (apt-get install chromium; .ci/run installs it)"
# CI can insist: with KERNLOOP_REQUIRE_CHROMIUM=1 a missing Chromium fails instead of skipping.
REQUIRE_CHROMIUM = os.environ.get("KERNLOOP_REQUIRE_CHROMIUM", "") not in ("", "0")

def needs_chromium(test):
    """Marked `browser`; skipped without Chromium unless CI requires it."""
    return pytest.mark.browser(pytest.mark.skipif(CHROMIUM is None and not REQUIRE_CHROMIUM, reason=NO_CHROMIUM)(test))


def chromium_or_fail() -> str:
    if CHROMIUM is None:
        pytest.fail(NO_CHROMIUM + " and KERNLOOP_REQUIRE_CHROMIUM is set")
    return CHROMIUM


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


def _result(cm, hm, device: str, synthetic: bool, ok=True, stage="done") -> dict:
    """A checker result line of the generated run: candidate mean `cm` against champion `hm`."""
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
    res = lambda cm, hm, **kw: _result(cm, hm, device, synthetic, **kw)  # noqa: E731
    events = [ev("run_start", spec={"name": "matmul", "path": "specs/matmul.yaml", "entry": "matmul",
                                    "dtype": "bfloat16", "shapes": [{"M": 4096, "N": 4096, "K": 4096},
                                                                    {"M": 37, "N": 45, "K": 29}],
                                    "tolerance": 0.01, "description": "C = A @ B"},
                 proposer="nemotron", model="nvidia/nemotron", endpoint_host="integrate.api.nvidia.com",
                 proposer_note="", device=device, seed=7, iterations=n, min_gain=0.02,
                 argv=["orchestrator.py", "--spec", "specs/matmul.yaml"],
                 versions={"python": "3.11.7", "torch": "2.5.1", "triton": "3.1.0"})]

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


# ----------------------------------------------------------------------------- hostile content

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


@pytest.fixture(autouse=True)   # autouse where imported: test_page.py, test_page_browser.py
def strict_templates(monkeypatch):
    # A template typo must fail the tests, not render as an empty string.
    monkeypatch.setattr(page, "STRICT", True)
