"""Nemotron client against a real chat-completions server on 127.0.0.1 (tests/loopback_openai.py).

No monkeypatching: the real `openai` package talks HTTP to a scripted server; the spec is a
plain SimpleNamespace carrying the attributes spec.Spec exposes. Timeouts and backoffs come
from the same env vars a user sets, made tiny so the file runs in seconds.
"""
from __future__ import annotations

import json
import logging
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import nemotron_client as nc                                       # noqa: E402
from kernloop.propose import extract  # noqa: E402
from kernloop.propose import prompt  # noqa: E402
from loopback_openai import LoopbackOpenAI, delay, error, reply    # noqa: E402
from kernloop.propose.proposer import ProposalContext                                # noqa: E402

KEY = "sk-test-SECRET123"

SPEC = SimpleNamespace(
    name="matmul", entry="matmul", dtype="float16", tolerance=0.01,
    description="C = A @ B for row-major fp16 matrices.",
    shapes=[{"M": 1024, "N": 1024, "K": 1024}, {"M": 257, "N": 129, "K": 77}],
    inputs=[{"name": "a", "shape": ["M", "K"], "dtype": "float16"},
            {"name": "b", "shape": ["K", "N"], "dtype": "float16"}])

CHAMPION = '''import torch
import triton
import triton.language as tl

pytestmark = [pytest.mark.llm]

CONFIG = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, num_warps=4, num_stages=3)


@triton.jit
def _kernel(a_ptr, b_ptr, c_ptr):
    pass  # CHAMPION_MARKER


def matmul(a, b):
    return a
'''

GOOD = CHAMPION.replace("BLOCK_M=64", "BLOCK_M=128").replace(
    "import torch\n", "# NOTE: bigger BLOCK_M for more reuse\nimport torch\n", 1)
FENCED_GOOD = f"```python\n{GOOD}```"


def make_ctx(**over) -> ProposalContext:
    base = dict(spec=SPEC, iteration=3, champion_code=CHAMPION, champion_id="it0002",
                champion_profile={"mean_ms": 1.2345, "min_ms": 1.1, "median_ms": 1.2,
                                  "std_ms": 0.05, "rel_l2": {"1024x1024x1024": 0.0012},
                                  "roofline": {"pct": 41.5}})
    base.update(over)
    return ProposalContext(**base)


def env_for(srv: LoopbackOpenAI, **over) -> dict:
    env = {"KERNLOOP_LLM_BASE_URL": srv.base_url, "KERNLOOP_LLM_API_KEY": KEY,
           "KERNLOOP_LLM_MODEL": "test/nemotron", "KERNLOOP_LLM_TIMEOUT_S": "5",
           "KERNLOOP_LLM_MAX_RETRIES": "2", "KERNLOOP_LLM_BACKOFF_S": "0.01"}
    env.update({k: str(v) for k, v in over.items()})
    return env


@pytest.fixture
def srv():
    with LoopbackOpenAI() as s:
        yield s


def propose(srv, ctx=None, **env_over):
    proposer = nc.from_env(env_for(srv, **env_over))
    return proposer.propose(ctx or make_ctx())


def assert_no_key(p):
    blob = json.dumps([p.code, p.note, p.error, p.prompt, p.response, p.meta], default=str)
    assert KEY not in blob


# ------------------------------------------------------------------ good answers

def test_good_answer_gives_code_note_and_meta(srv):
    srv.push(reply(FENCED_GOOD, usage=(1234, 567)))
    p = propose(srv)
    assert p.code == GOOD and p.error is None and not p.fatal
    assert p.note == "bigger BLOCK_M for more reuse"
    assert (p.proposer, p.model) == ("nemotron", "test/nemotron")
    m = p.meta
    assert m["model"] == "test/nemotron" and m["endpoint_host"] == f"127.0.0.1:{srv.port}"
    assert (m["attempts"], m["prompt_tokens"], m["completion_tokens"], m["finish_reason"]) == \
        (1, 1234, 567, "stop")
    assert m["latency_s"] >= 0
    # What the server received: model, sampling, bearer key, the contract and the full code.
    (req,) = srv.chat_requests
    assert req.body["model"] == "test/nemotron"
    assert (req.body["temperature"], req.body["top_p"], req.body["max_tokens"]) == (1.0, 0.95, 16384)
    assert "chat_template_kwargs" not in req.body     # reasoning unset: server default
    assert req.headers["authorization"] == f"Bearer {KEY}"
    assert prompt.CONTRACT in req.text and CHAMPION.rstrip() in req.text
    # The saved prompt/response are the full exchange.
    assert prompt.CONTRACT in p.prompt and FENCED_GOOD in p.response
    assert_no_key(p)


def test_prose_around_one_fence_is_tolerated(srv):
    srv.push(reply(f"Here is the faster kernel.\n\n{FENCED_GOOD}\n\nIt uses bigger tiles."))
    p = propose(srv)
    assert p.code == GOOD and p.error is None


def test_think_block_is_stripped_even_with_code_inside(srv):
    think = "<think>Maybe this?\n```python\nnot( valid\n```\nNo, bigger tiles.</think>\n"
    srv.push(reply(think + FENCED_GOOD))
    p = propose(srv)
    assert p.code == GOOD and p.error is None
    assert "Maybe this?" in p.response            # the raw answer is still saved


def test_reasoning_content_is_not_code_and_is_saved(srv):
    srv.push(reply(FENCED_GOOD, reasoning_content="Let me think ```python\nx = (\n```"))
    p = propose(srv)
    assert p.code == GOOD and p.error is None
    assert "--- reasoning ---\nLet me think" in p.response


def test_reasoning_field_named_reasoning_is_read_too(srv):
    # Ollama and newer vLLM call it `reasoning`: an empty answer must say reasoning came back.
    srv.push(reply("", reasoning_content="all my thoughts", reasoning_field="reasoning"),
             reply("", reasoning_content="all my thoughts", reasoning_field="reasoning"))
    p = propose(srv)
    assert p.code is None and "only reasoning_content" in p.error


# ------------------------------------------------------------------ parse failures

def test_two_fences_is_a_parse_failure_then_one_repair_with_the_reason(srv):
    two = f"{FENCED_GOOD}\nor alternatively\n{FENCED_GOOD}"
    srv.push(reply(two), reply(two))
    p = propose(srv)
    assert p.code is None and not p.fatal
    assert "2 fenced code blocks" in p.error
    assert p.meta["error_kind"] == "parse" and p.meta["error_class"] == "ParseError"
    assert (p.meta["attempts"], p.meta["repairs"]) == (2, 1)
    first, repair = srv.chat_requests
    assert "2 fenced code blocks" not in first.text
    assert "Your answer could not be used: the answer held 2 fenced code blocks" in repair.text
    # same conversation + the failed answer as the assistant's turn + the repair request
    assert repair.messages[:-2] == first.messages
    assert repair.messages[-2] == {"role": "assistant", "content": two.strip()}
    assert "repair request 1" in p.response


def test_repair_that_succeeds_yields_the_code(srv):
    srv.push(reply(f"{FENCED_GOOD}\n{FENCED_GOOD}"), reply(FENCED_GOOD))
    p = propose(srv)
    assert p.code == GOOD and p.error is None and p.meta["repairs"] == 1


def test_repair_retries_zero_sends_one_request(srv):
    srv.push(reply(f"{FENCED_GOOD}\n{FENCED_GOOD}"))
    p = propose(srv, KERNLOOP_LLM_REPAIR_RETRIES=0)
    assert p.code is None and "2 fenced code blocks" in p.error
    assert len(srv.chat_requests) == 1 and srv.unscripted == 0


def test_empty_answer_is_a_parse_failure(srv):
    srv.push(reply(""), reply(None))
    p = propose(srv)
    assert p.code is None and p.error == "the answer was empty"
    assert len(srv.chat_requests) == 2 and p.meta["error_kind"] == "parse"


def test_truncated_answer_is_a_parse_failure(srv):
    cut = FENCED_GOOD[: len(FENCED_GOOD) // 2]
    srv.push(reply(cut, finish_reason="length"), reply(cut, finish_reason="length"))
    p = propose(srv)
    assert p.code is None and "finish_reason=length" in p.error
    assert p.meta["finish_reason"] == "length"


def test_parse_error_from_previous_iteration_is_in_the_prompt(srv):
    srv.push(reply(FENCED_GOOD))
    propose(srv, make_ctx(last_parse_error="the answer held 2 fenced code blocks (python, python)"))
    assert "Reason: the answer held 2 fenced code blocks (python, python)" in srv.chat_requests[0].text


# ------------------------------------------------------------------ transport errors

def test_429_then_success_is_retried(srv):
    srv.push(error(429, "slow down"), reply(FENCED_GOOD))
    p = propose(srv)
    assert p.code == GOOD and p.meta["attempts"] == 2
    assert len(srv.chat_requests) == 2


def test_500_forever_gives_a_clean_error_and_the_loop_goes_on(srv):
    srv.default = error(500, "boom")
    proposer = nc.from_env(env_for(srv, KERNLOOP_LLM_MAX_RETRIES=2))
    p = proposer.propose(make_ctx())
    assert p.code is None and not p.fatal
    assert p.error.startswith(f"HTTP 500 from 127.0.0.1:{srv.port} after 3 attempt(s)")
    assert "boom" in p.error
    assert (p.meta["error_kind"], p.meta["error_class"], p.meta["status_code"]) == \
        ("transport", "InternalServerError", 500)
    assert not p.meta["connection_refused"]
    assert len(srv.chat_requests) == 3              # 1 try + MAX_RETRIES, bounded
    # The next iteration still works with the same proposer.
    srv.default = None
    srv.push(reply(FENCED_GOOD))
    assert proposer.propose(make_ctx()).code == GOOD


def test_backoff_doubles_between_retries(srv):
    srv.default = error(503)
    propose(srv, KERNLOOP_LLM_MAX_RETRIES=2, KERNLOOP_LLM_BACKOFF_S=0.2)
    t = [r.t for r in srv.chat_requests]
    gaps = [b - a for a, b in zip(t, t[1:])]
    assert gaps[0] >= 0.2 and gaps[1] >= 0.4       # 0.2 then 0.4 (+ jitter)


def test_timeout_is_retried_then_a_clean_error(srv):
    srv.default = delay(3.0)
    p = propose(srv, KERNLOOP_LLM_TIMEOUT_S=0.3, KERNLOOP_LLM_MAX_RETRIES=1)
    assert p.code is None and not p.fatal
    assert "APITimeoutError" in p.error and p.meta["error_class"] == "APITimeoutError"
    assert len(srv.chat_requests) == 2 and p.meta["attempts"] == 2


def test_connection_refused_is_a_clean_error():
    with LoopbackOpenAI() as s:
        env = env_for(s)
    p = nc.from_env(env).propose(make_ctx())       # server gone: nothing listens on the port
    assert p.code is None and not p.fatal and p.meta["error_class"] == "APIConnectionError"
    assert p.meta["error_kind"] == "transport" and p.meta["connection_refused"] is True
    assert not p.meta["endpoint_answered"] and "connection refused" in p.error
    assert p.meta["attempts"] == 1   # not retried before any answer (counted, never timed)


def test_401_is_fatal_not_retried_and_never_echoes_the_key(srv, caplog):
    srv.push(error(401, f"Incorrect API key provided: {KEY}"))
    with caplog.at_level(logging.DEBUG):
        p = propose(srv)
    assert p.fatal and p.code is None
    assert p.error.startswith(f"authentication failed (HTTP 401) at 127.0.0.1:{srv.port}")
    assert "KERNLOOP_LLM_API_KEY" in p.error and "***" in p.error
    assert len(srv.chat_requests) == 1 and p.meta["error_kind"] == "auth"
    assert_no_key(p)
    assert KEY not in caplog.text


def test_401_on_the_repair_request_is_fatal_too(srv):
    srv.push(reply(f"{FENCED_GOOD}\n{FENCED_GOOD}"), error(401, "key revoked"))
    p = propose(srv)
    assert p.fatal and p.meta["error_kind"] == "auth" and "authentication failed" in p.error


def test_403_is_fatal_too(srv):
    srv.push(error(403, "forbidden"))
    p = propose(srv)
    assert p.fatal and "authentication failed (HTTP 403)" in p.error


def test_404_unknown_model_is_fatal_and_names_the_variables(srv):
    srv.push(error(404, "model nvidia/no-such-model does not exist"))
    p = propose(srv)
    assert p.fatal and p.code is None and len(srv.chat_requests) == 1
    assert p.error.startswith("HTTP 404") and "KERNLOOP_LLM_MODEL" in p.error
    assert p.meta["error_kind"] == "config"


def test_400_is_not_retried_and_not_fatal(srv):
    srv.push(error(400, "bad request: unknown field"))
    p = propose(srv)
    assert not p.fatal and p.error.startswith("HTTP 400") and len(srv.chat_requests) == 1


# ------------------------------------------------------------------ logging and secrets

def test_one_log_line_per_proposal_without_the_key(srv, caplog):
    srv.push(reply(FENCED_GOOD, usage=(10, 20)))
    with caplog.at_level(logging.INFO, logger="kernloop.nemotron"):
        propose(srv)
    (rec,) = [r for r in caplog.records if r.name == "kernloop.nemotron"]
    line = rec.getMessage()
    for part in ("model=test/nemotron", f"host=127.0.0.1:{srv.port}", "latency=",
                 "prompt_tokens=10", "completion_tokens=20", "finish_reason=stop"):
        assert part in line
    assert KEY not in caplog.text


def test_describe_and_repr_never_hold_the_key(srv):
    proposer = nc.from_env(env_for(srv))
    text = json.dumps(proposer.describe()) + repr(proposer) + repr(proposer.config)
    assert KEY not in text
    assert proposer.describe()["endpoint_host"] == f"127.0.0.1:{srv.port}"
    assert nc.endpoint_host("https://user:pw@integrate.api.nvidia.com/v1?key=x") == \
        "integrate.api.nvidia.com"


# ------------------------------------------------------------------ configuration

def test_no_key_and_no_base_url_means_tuner():
    assert nc.from_env({}) is None
    assert nc.from_env({"KERNLOOP_LLM_MODEL": "x", "KERNLOOP_LLM_API_KEY": "  "}) is None


def test_nvidia_api_key_fallback_and_defaults():
    p = nc.from_env({"NVIDIA_API_KEY": "nvapi-xyz"})
    assert p.describe()["endpoint_host"] == "integrate.api.nvidia.com"
    assert p.model == nc.DEFAULT_MODEL and p.config.api_key == "nvapi-xyz"
    assert nc.from_env({"NVIDIA_API_KEY": "a", "KERNLOOP_LLM_API_KEY": "b"}).config.api_key == "b"


def test_base_url_only_sends_a_placeholder_key(srv):
    srv.push(reply(FENCED_GOOD))
    env = {"KERNLOOP_LLM_BASE_URL": srv.base_url}
    assert nc.from_env(env).propose(make_ctx()).code == GOOD
    assert srv.chat_requests[0].headers["authorization"] == f"Bearer {nc.PLACEHOLDER_KEY}"


@pytest.mark.parametrize("name,value", [("KERNLOOP_LLM_TEMPERATURE", "hot"),
                                        ("KERNLOOP_LLM_MAX_TOKENS", "1.5"),
                                        ("KERNLOOP_LLM_TOP_P", "2"),
                                        ("KERNLOOP_LLM_REASONING", "maybe")])
def test_malformed_setting_names_the_variable(name, value):
    with pytest.raises(ValueError, match=name):
        nc.from_env({"KERNLOOP_LLM_API_KEY": "k", name: value})


def test_sampling_none_leaves_it_to_the_server(srv):
    srv.push(reply(FENCED_GOOD))
    propose(srv, KERNLOOP_LLM_TEMPERATURE="none", KERNLOOP_LLM_TOP_P="none",
            KERNLOOP_LLM_MAX_TOKENS=777)
    body = srv.chat_requests[0].body
    assert "temperature" not in body and "top_p" not in body and body["max_tokens"] == 777


@pytest.mark.parametrize("setting,expected", [("on", True), ("off", False)])
def test_reasoning_toggle_goes_in_chat_template_kwargs(srv, setting, expected):
    srv.push(reply(FENCED_GOOD))
    propose(srv, KERNLOOP_LLM_REASONING=setting)
    assert srv.chat_requests[0].body["chat_template_kwargs"] == {"enable_thinking": expected}


def test_llama_nemotron_v1_gets_the_system_prompt_toggle(srv):
    srv.push(reply(FENCED_GOOD))
    propose(srv, KERNLOOP_LLM_REASONING="off",
            KERNLOOP_LLM_MODEL="nvidia/llama-3.3-nemotron-super-49b-v1")
    body = srv.chat_requests[0].body
    assert body["messages"][0]["content"].startswith("detailed thinking off\n")
    assert "chat_template_kwargs" not in body


# ------------------------------------------------------------------ build_prompt (pure)

def test_prompt_carries_spec_profile_rejections_notes_and_contract():
    rej = [{"iteration": 2, "verdict": "incorrect", "reason": "rel_l2 0.3 > 0.01 at M=257",
            "note": "BLOCK_K=128"}]
    msgs = prompt.build_prompt(make_ctx(rejections=rej, research_notes="Use GROUP_M swizzle."), 16000)
    system, user = (m["content"] for m in msgs)
    assert prompt.CONTRACT in system
    for part in ("Entry function: `matmul`", "float16", "rel-L2 error <= 0.01",
                 "Timed shape: M=1024, N=1024, K=1024", "M=257, N=129, K=77",
                 "a: shape [M, K], dtype float16", "mean 1.234 ms", "min 1.1 ms", "median 1.2 ms",
                 "% of roofline", "41.5", "rel-L2 per shape", "iteration 2 [incorrect]",
                 "rel_l2 0.3 > 0.01 at M=257", "Use GROUP_M swizzle.", CHAMPION.rstrip()):
        assert part in user, part


def test_budget_shortens_history_then_notes_never_code_or_contract():
    rej = [{"iteration": i, "verdict": "slower", "reason": f"R{i:02d} " + "x" * 500, "note": ""}
           for i in range(1, 21)]
    notes = "NOTES " + "n" * 4000
    ctx = make_ctx(rejections=rej, research_notes=notes)
    full = prompt.build_prompt(ctx, 10**6)
    assert "R12 " not in full[1]["content"]          # bounded history: last 8 only
    assert "R13 " in full[1]["content"] and "R20 " in full[1]["content"]

    fixed = prompt.messages_tokens(prompt.build_prompt(make_ctx(), 10**6))
    tight = prompt.build_prompt(ctx, fixed + 1400)     # room for notes + a few rejections
    user = tight[1]["content"]
    assert prompt.messages_tokens(tight) <= fixed + 1400
    assert "R20 " in user and "R13 " not in user   # oldest dropped first, newest kept
    assert "older rejection(s) omitted" in user
    assert prompt.CONTRACT in tight[0]["content"] and CHAMPION.rstrip() in user

    bare = prompt.build_prompt(ctx, 10)                  # impossible budget
    assert "NOTES" not in bare[1]["content"] and "R20 " not in bare[1]["content"]
    assert prompt.CONTRACT in bare[0]["content"] and CHAMPION.rstrip() in bare[1]["content"]


def test_over_budget_prompt_still_carries_code_and_is_flagged(srv):
    srv.push(reply(FENCED_GOOD))
    p = propose(srv, KERNLOOP_LLM_PROMPT_TOKENS=500)
    assert p.meta["prompt_over_budget"] and p.meta["prompt_tokens_est"] > 500
    assert CHAMPION.rstrip() in srv.chat_requests[0].text


# ------------------------------------------------------------------ extract_code (pure)

@pytest.mark.parametrize("content,finish,code", [
    ("x = 1\n", "stop", "x = 1\n"),                                    # bare file
    ("```\nx = 1\n```", "stop", "x = 1\n"),                            # untagged fence
    ("```py\nx = 1\n```", "stop", "x = 1\n"),
    ("Sure:\n```python\nx = 1\n", "stop", "x = 1\n"),                  # unclosed but valid
    ("reasoning here\n</think>\n```python\nx = 1\n```", "stop", "x = 1\n"),  # template-opened think
    ("```python\nx = 1\n```", None, "x = 1\n"),                        # no finish_reason given
])
def test_extract_accepts(content, finish, code):
    assert extract.extract_code(content, None, finish) == (code, None)


@pytest.mark.parametrize("content,reasoning,finish,reason", [
    ("I would tile it differently.", None, "stop", "no code found"),
    ("```bash\nls\n```", None, "stop", "tagged 'bash'"),
    ("```python\ndef f(:\n```", None, "stop", "not valid Python: SyntaxError at line 1"),
    ("```python\n\n```", None, "stop", "code block was empty"),
    ("<think>still thinking ```python\nx = 1\n```", None, "stop", "only reasoning"),
    ("", "thoughts", "stop", "only reasoning_content"),
    ("   ", None, "stop", "the answer was empty"),
    ("```python\nx = 1\n```", None, "length", "finish_reason=length"),
    ("```python\nx = 1\n```", None, "content_filter", "content filter"),
])
def test_extract_rejects_with_a_reason(content, reasoning, finish, reason):
    code, why = extract.extract_code(content, reasoning, finish)
    assert code is None and reason in why


def test_note_falls_back_to_first_comment():
    assert extract.note_from_code("# NOTE: split-K by 4\nx = 1\n") == "split-K by 4"
    assert extract.note_from_code("#!/usr/bin/env python\n# tiled matmul\nx = 1\n") == "tiled matmul"
    assert extract.note_from_code("x = 1\n") == "nemotron proposal (no # NOTE line)"


def test_env_vars_documented_for_every_name_used():
    used = set(re.findall(r"KERNLOOP_LLM_[A-Z_]+", (ROOT / "nemotron_client.py").read_text()))
    assert used and used <= set(nc.ENV_VARS), used - set(nc.ENV_VARS)
