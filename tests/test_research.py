"""research.py: when research is due, the query, condensing, the builtin notes, and every Tavily
outcome through the real tavily-python client against a real HTTP server on 127.0.0.1."""
from __future__ import annotations

import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

import research  # noqa: E402
from loopback_tavily import MARKER, LoopbackTavily, delay, garbage, ok, status  # noqa: E402

KEY = "tvly-loopback-key"
MATMUL = SimpleNamespace(name="matmul", dtype="bfloat16", model="matmul",
                         description="C = A @ B, bf16 inputs, fp32 accumulation",
                         shapes=[{"M": 4096, "N": 4096, "K": 4096}, {"M": 4095, "N": 3001, "K": 1999}])
SOFTMAX = SimpleNamespace(name="softmax", dtype="float16", description="row-wise softmax",
                          shapes=[{"R": 8192, "C": 4096}])
REJECTED = [{"iteration": i, "verdict": "rejected", "reason": f"not faster: {1 + i / 100:.2f}x < 1.02x",
             "note": "BLOCK_M 64 -> 128"} for i in (1, 2, 3)]
FAILED = [{"iteration": 4, "verdict": "failed", "note": "",
           "reason": "/tmp/cand/it0004.py:31: CompilationError: out of resource: shared memory, "
                     "Required: 262144, Hardware limit: 232448"}]


@pytest.fixture(autouse=True)
def _no_proxy_for_loopback(monkeypatch):
    # A proxy from the developer's environment must not intercept 127.0.0.1.
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


def tavily_env(srv: LoopbackTavily, key: str = KEY, **extra) -> dict:
    env = {"TAVILY_API_KEY": key, "TAVILY_BASE_URL": srv.base_url, "KERNLOOP_RESEARCH_TIMEOUT_S": "2"}
    env.update(extra)
    return env


def assert_failed_cleanly(event: dict, prefix: str) -> None:
    assert event["error"].startswith(prefix), event["error"]
    assert event["notes"] == "" and event["urls"] == []
    assert event["source"] == "tavily" and event["query"]


# ---------------------------------------------------------------- research_due

@pytest.mark.parametrize("streak,due", [(0, False), (1, False), (2, False), (3, True), (4, False),
                                        (5, False), (6, True), (7, False), (9, True)])
def test_research_due_every_third_rejection_in_a_row(streak, due):
    assert research.research_due(False, streak, 3) is due


def test_research_due_at_start_and_edge_settings():
    assert research.research_due(True, 0, 3)
    assert research.research_due(True, 2, 3)            # start wins whatever the streak
    assert [research.research_due(False, s, 1) for s in (0, 1, 2)] == [False, True, True]
    assert not research.research_due(False, 3, 0)       # 0 turns streak research off
    assert not research.research_due(False, 3, -1)


# ---------------------------------------------------------------- the query

def test_query_names_op_dtype_timed_shape_and_gpu():
    q = research.build_query(MATMUL, [], "NVIDIA H200")
    assert q == "Triton matmul kernel optimization bf16 M=4096 N=4096 K=4096 NVIDIA H200 Hopper"


def test_query_adds_rejection_reasons_without_numbers_or_paths():
    q = research.build_query(MATMUL, REJECTED + FAILED, "NVIDIA H200")
    assert "compilationerror out of resource shared memory" in q
    assert "speedup beyond block size tuning" in q
    assert "262144" not in q and "/tmp" not in q


def test_query_leaves_out_a_synthetic_device_and_stays_under_tavily_limit():
    long_fail = [{"verdict": "failed", "reason": "word " * 400, "iteration": 1, "note": ""}]
    q = research.build_query(MATMUL, long_fail, "synthetic (deterministic model)")
    assert "synthetic" not in q
    assert all(len(c) <= research.MAX_QUERY_CHARS for c in research.query_candidates(MATMUL, long_fail, ""))


def test_op_family_from_model_or_name():
    assert research.op_family(MATMUL) == "matmul"
    assert research.op_family(SOFTMAX) == "rowwise"
    assert research.op_family(SimpleNamespace(name="rms_norm", description="")) == "rowwise"
    assert research.op_family(SimpleNamespace(name="add_relu", description="")) == "elementwise"


# ---------------------------------------------------------------- condense

RESULTS = [
    {"title": "Low", "url": "https://a.test/low", "score": 0.1, "content": "Low score text about tiles."},
    {"title": "High", "url": "https://a.test/high", "score": 0.9,
     "content": "Intro sentence here. Another filler sentence. Set num_warps=8 for 128x256 tiles. "
                "Yet more filler. Use GROUP_M=8 swizzle to reuse L2. " + "Padding words. " * 30},
    {"title": "High dup", "url": "https://a.test/high", "score": 0.8, "content": "same url again"},
    "not a dict",
]


def test_condense_keeps_title_url_and_the_relevant_lines_best_first():
    text = research.condense(RESULTS, 400)
    lines = text.splitlines()
    assert lines[0] == "- High <https://a.test/high>"
    assert "  Set num_warps=8 for 128x256 tiles." in lines
    assert "  Use GROUP_M=8 swizzle to reuse L2." in lines
    assert "Intro sentence" not in text            # filler loses to lines with Triton terms
    assert text.index("High") < text.index("Low")
    assert "same url again" not in text            # one entry per URL


@pytest.mark.parametrize("budget", [0, 5, 20, 40, 80, 400])
def test_condense_stays_within_budget_and_never_ends_on_a_bare_title(budget):
    text = research.condense(RESULTS, budget)
    assert len(text) <= budget * research.CHARS_PER_TOKEN
    if text:
        assert text.splitlines()[-1].startswith("  ")


def test_condense_flattens_code_fences_and_control_characters():
    evil = [{"title": "T\x00itle", "url": "https://x.test", "content": "```python\nimport os\n```\x1b[31m"}]
    text = research.condense(evil, 200)
    assert "```" not in text and "\x00" not in text and "\x1b" not in text
    assert "  python" in text and "  import os" in text


# ---------------------------------------------------------------- builtin notes (no key)

def test_no_key_uses_shipped_notes_labelled_builtin():
    r = research.Researcher.from_env({})
    ev = r.research(MATMUL, "start", [], "NVIDIA H200")
    assert r.source == "builtin" and ev["source"] == "builtin"
    assert ev["error"] is None and ev["urls"] == [] and ev["trigger"] == "start"
    assert ev["notes"].startswith("source: builtin")
    assert ev["query"] in ev["notes"].splitlines()[0]
    assert "- Matmul tiling on Hopper" in ev["notes"]
    assert "- Masks, odd shapes and offsets" in ev["notes"]   # the spec has odd shapes
    assert len(ev["notes"]) <= research.DEFAULTS["budget_tokens"] * research.CHARS_PER_TOKEN


def test_builtin_follows_the_op_and_the_rejection_reasons():
    ev = research.Researcher.from_env({}).research(SOFTMAX, "start", [], "NVIDIA H100 80GB HBM3")
    assert ev["notes"].splitlines()[1] == "- Row-wise reductions: softmax, RMSNorm, LayerNorm"
    r = research.Researcher.from_env({})
    r.research(MATMUL, "start", [], "H200")
    ev = r.research(MATMUL, "streak", REJECTED, "H200")
    # Stuck: the "rejected" advice first, and sections not shown yet before those already shown.
    assert ev["notes"].splitlines()[1] == "- When candidates keep being rejected"
    assert ev["notes"].index("- Persistent kernels") < ev["notes"].index("- Matmul tiling on Hopper")


def test_builtin_budget_is_respected():
    r = research.Researcher.from_env({"KERNLOOP_RESEARCH_TOKENS": "100"})
    ev = r.research(MATMUL, "start", [], "H200")
    assert ev["notes"] and len(ev["notes"]) <= 400


def test_notes_file_has_keywords_and_content_in_every_section():
    sections = research.load_sections()
    assert len(sections) >= 10
    for s in sections:
        assert s["keywords"] and s["content"].startswith("- "), s["title"]
    assert 80 <= len(research.BUILTIN_NOTES.read_text().splitlines()) <= 150


# ---------------------------------------------------------------- Tavily through the real client

def test_tavily_success_logs_query_urls_latency_and_notes():
    with LoopbackTavily(api_key=KEY) as srv:
        r = research.Researcher.from_env(tavily_env(srv, KERNLOOP_RESEARCH_MAX_RESULTS="3"))
        ev = r.research(MATMUL, "start", [], "NVIDIA H200")
        (req,) = srv.search_requests
    assert r.source == "tavily" and ev["error"] is None
    assert req.headers["authorization"] == f"Bearer {KEY}"
    assert req.body["query"] == ev["query"]
    assert req.body["max_results"] == 3 and req.body["search_depth"] == "basic"
    assert ev["urls"] == [f"https://notes.example.test/1/{i}" for i in range(3)]
    assert ev["notes"].startswith("source: tavily")
    assert f"{MARKER}-1-0" in ev["notes"] and "<https://notes.example.test/1/0>" in ev["notes"]
    assert "Unrelated sentence" not in ev["notes"]
    assert 0 < ev["latency_s"] < 2


def test_tavily_notes_fit_the_token_budget():
    long = [{"title": f"T{i}", "url": f"https://l.test/{i}", "score": 1 - i / 10,
             "content": "Use BLOCK_M=128 tiles. " * 40} for i in range(5)]
    with LoopbackTavily([ok(long)]) as srv:
        ev = research.Researcher.from_env(tavily_env(srv, KERNLOOP_RESEARCH_TOKENS="80")).research(
            MATMUL, "start", [], "H200")
    assert ev["error"] is None and ev["notes"]
    assert len(ev["notes"]) <= 80 * research.CHARS_PER_TOKEN
    assert len(ev["urls"]) == 5       # the log keeps every result URL, the notes what fits


def test_base_url_trailing_slash_still_reaches_search():
    with LoopbackTavily() as srv:
        env = tavily_env(srv, TAVILY_BASE_URL=srv.base_url + "/")
        ev = research.Researcher.from_env(env).research(MATMUL, "start", [], "H200")
        assert ev["error"] is None and [q.path for q in srv.requests] == ["/search"]


def test_401_is_logged_and_later_searches_are_skipped():
    with LoopbackTavily(api_key=KEY) as srv:
        r = research.Researcher.from_env(tavily_env(srv, key="tvly-wrong"))
        first = r.research(MATMUL, "start", [], "H200")
        later = r.research(MATMUL, "streak", REJECTED, "H200")
        sent = len(srv.search_requests)
    assert_failed_cleanly(first, "401 invalid API key")
    assert later["error"] == "skipped: research disabled after 401 invalid API key"
    assert later["notes"] == "" and sent == 1      # a bad key does not get better within a run


@pytest.mark.parametrize("behaviour,prefix", [
    (status(429, "This request exceeds your plan's set usage limit."), "429 usage limit exceeded"),
    (garbage(), "malformed JSON response"),
    (ok(results="not a list"), "malformed response: no `results` list"),
    (garbage("[1, 2, 3]"), "AttributeError"),     # JSON, but not an object: the client chokes
    (status(500), "HTTP 500"),
])
def test_http_failures_are_logged_and_the_next_search_works(behaviour, prefix):
    with LoopbackTavily([behaviour]) as srv:
        r = research.Researcher.from_env(tavily_env(srv))
        failed = r.research(MATMUL, "start", [], "H200")
        after = r.research(MATMUL, "streak", REJECTED, "H200")
    assert_failed_cleanly(failed, prefix)
    assert after["error"] is None and MARKER in after["notes"]


def test_timeout_is_logged_quickly_and_the_next_search_works():
    with LoopbackTavily([delay(5)]) as srv:
        r = research.Researcher.from_env(tavily_env(srv, KERNLOOP_RESEARCH_TIMEOUT_S="0.3"))
        t0 = time.monotonic()
        failed = r.research(MATMUL, "start", [], "H200")
        waited = time.monotonic() - t0
        after = r.research(MATMUL, "streak", REJECTED, "H200")
    assert_failed_cleanly(failed, "timeout after 0.3 s")
    assert 0.25 <= failed["latency_s"] and waited < 4   # the server answers only after 5 s
    assert after["error"] is None and after["notes"]


def test_unreachable_server_is_a_connection_error():
    srv = LoopbackTavily().start()
    env = tavily_env(srv)
    srv.stop()                                   # nothing listens on that port any more
    ev = research.Researcher.from_env(env).research(MATMUL, "start", [], "H200")
    assert_failed_cleanly(ev, "connection error")


def test_no_results_is_recorded_not_injected():
    with LoopbackTavily([ok([])]) as srv:
        ev = research.Researcher.from_env(tavily_env(srv)).research(MATMUL, "start", [], "H200")
    assert ev["error"] == "no results" and ev["notes"] == ""


# ---------------------------------------------------------------- a query is sent once per run

def test_a_repeated_query_moves_to_the_next_angle_then_is_skipped():
    angles = research._ANGLES["matmul"]
    with LoopbackTavily() as srv:
        r = research.Researcher.from_env(tavily_env(srv))
        events = [r.research(MATMUL, "streak", REJECTED, "H200") for _ in range(len(angles) + 2)]
        sent = [q.query for q in srv.search_requests]
    assert len(sent) == len(set(sent)) == len(angles) + 1
    assert sent == [e["query"] for e in events[:-1]]
    assert sent[1].endswith(angles[0])
    assert events[-1]["error"] == research.DUPLICATE and events[-1]["notes"] == ""


def test_a_failed_query_is_not_retried():
    with LoopbackTavily([status(429)]) as srv:
        r = research.Researcher("tavily", _client(srv), angles=())
        first = r.research(MATMUL, "start", [], "H200")
        again = r.research(MATMUL, "start", [], "H200")
        assert len(srv.search_requests) == 1
    assert first["error"].startswith("429") and again["error"] == research.DUPLICATE


def test_remember_carries_sent_queries_and_shown_notes_across_a_resume():
    first = research.Researcher.from_env({})
    ev = dict(first.research(MATMUL, "start", [], "H200"), event="research")
    resumed = research.Researcher.from_env({})
    resumed.remember([{"event": "iteration"}, ev])
    again = resumed.research(MATMUL, "start", [], "H200")
    assert again["query"] != ev["query"] and again["query"].startswith(ev["query"])
    assert again["notes"].splitlines()[1] not in ev["notes"]    # a section not shown before


def _client(srv):
    from tavily import TavilyClient
    return TavilyClient(api_key=KEY, api_base_url=srv.base_url)


# ---------------------------------------------------------------- settings and robustness

@pytest.mark.parametrize("name,value", [("KERNLOOP_RESEARCH_TIMEOUT_S", "soon"),
                                        ("KERNLOOP_RESEARCH_TIMEOUT_S", "nan"),
                                        ("KERNLOOP_RESEARCH_MAX_RESULTS", "0"),
                                        ("KERNLOOP_RESEARCH_TOKENS", "1.5")])
def test_bad_settings_name_the_variable(name, value):
    with pytest.raises(ValueError, match=name):
        research.Researcher.from_env({name: value})


def test_settings_and_docs():
    r = research.Researcher.from_env({"KERNLOOP_RESEARCH_TIMEOUT_S": "0.5",
                                      "KERNLOOP_RESEARCH_MAX_RESULTS": "7",
                                      "KERNLOOP_RESEARCH_TOKENS": "300"})
    assert (r.timeout_s, r.max_results, r.budget_tokens) == (0.5, 7, 300)
    assert set(research.ENV_VARS) == {"TAVILY_API_KEY", "TAVILY_BASE_URL", "KERNLOOP_RESEARCH_TIMEOUT_S",
                                      "KERNLOOP_RESEARCH_MAX_RESULTS", "KERNLOOP_RESEARCH_TOKENS"}
    assert "tuner does not use research notes" in research.TUNER_NOTE
    assert r.describe()["source"] == "builtin" and "key" not in str(r.describe()).lower()


def test_research_never_raises_on_a_broken_spec():
    ev = research.Researcher.from_env({}).research(None, "start", [], "H200")
    assert ev["error"].startswith("unexpected AttributeError") and ev["notes"] == ""
    assert set(ev) == {"trigger", "source", "query", "urls", "latency_s", "notes", "error"}
