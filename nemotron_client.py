"""Nemotron proposer: the OpenAI-compatible chat transport (config, retries, redaction) under the code-only contract.

What the model is told lives in prompt.py, how its answer is read in extract.py.
One proposal = build a bounded prompt (spec, champion code and profile, recent rejections,
research notes, the contract) -> one chat completion (with our own bounded retries so every
attempt is logged) -> extract exactly one Python file from the answer (reasoning stripped)
-> on a parse failure, one immediate repair request that states the reason.

It never raises for HTTP or parse problems: it returns Proposal(code=None, error=reason).
Only an authentication failure or an unknown model/endpoint (404) is fatal (Proposal.fatal=True):
retrying a bad key or a model id the server does not serve is futile.
The API key never leaves the Authorization header: not in describe(), meta, prompt,
response or error text (server messages that echo it are redacted).

Configuration is environment only (see ENV_VARS); the same code talks to NVIDIA's API
catalog, Nebius Token Factory, vLLM, Ollama or any OpenAI-compatible server.

Proposal.meta: model, endpoint_host, latency_s, attempts (HTTP requests made, retries and
repairs included), repairs, prompt_tokens and completion_tokens (server-reported, summed; None
when the server reports none), finish_reason, prompt_tokens_est, prompt_over_budget; on
failure also error_kind ("parse" | "transport" | "request" | "auth" | "config"), error_class,
status_code, connection_refused and endpoint_answered. "transport" = 429/5xx/timeout/connection
failure after every retry (a refused connection before any answer is not retried). A "parse" error is the model's fault: its text belongs in the next
ProposalContext.last_parse_error.
"""
from __future__ import annotations

import logging
import os
import random
import re
import time
from dataclasses import dataclass, field
from typing import Any, Mapping
from urllib.parse import urlsplit

from kernloop import settings
from kernloop.propose.extract import extract_code, note_from_code
from kernloop.propose.prompt import build_prompt, messages_tokens, render_messages, repair_messages
from kernloop.propose.proposer import Proposal, ProposalContext

try:   # imported lazily in effect: a tuner-only run must not need the package
    import openai
except ImportError:   # pragma: no cover - exercised only without the package
    openai = None

log = logging.getLogger("kernloop.nemotron")

DEFAULT_BASE_URL = settings.LLM_BASE_URL
# Nemotron 3 Super on NVIDIA's API catalog (build.nvidia.com), reasoning toggled by
# chat_template_kwargs.enable_thinking.
DEFAULT_MODEL = settings.LLM_MODEL
PLACEHOLDER_KEY = settings.LLM_PLACEHOLDER_KEY   # local servers (vLLM, Ollama) accept any bearer token
BACKOFF_CAP_S = settings.LLM_BACKOFF_CAP_S

ENV_VARS: dict[str, str] = settings.group("KERNLOOP_LLM_", "NVIDIA_API_KEY")   # documented in settings.py



# ================================================================ configuration

@dataclass(frozen=True)
class LLMConfig:
    base_url: str = DEFAULT_BASE_URL
    model: str = DEFAULT_MODEL
    api_key: str = field(default=PLACEHOLDER_KEY, repr=False)   # never printed
    temperature: float | None = 1.0
    top_p: float | None = 0.95
    max_tokens: int = 16384
    reasoning: str | None = None        # "on" | "off" | None
    timeout_s: float = 300.0
    max_retries: int = 3
    backoff_s: float = 2.0
    repair_retries: int = 1
    prompt_tokens: int = 16000


def config_from_env(env: Mapping[str, str] = os.environ) -> LLMConfig | None:
    """The LLM settings, or None when no key and no base URL are configured.
    Raises settings.SettingsError (a ValueError) naming a malformed variable."""
    def val(name):
        return settings.get(name, env)
    key = val("KERNLOOP_LLM_API_KEY") or val("NVIDIA_API_KEY")
    base = val("KERNLOOP_LLM_BASE_URL")
    if key is None and base is None:
        return None
    reasoning = val("KERNLOOP_LLM_REASONING")
    return LLMConfig(
        base_url=base or DEFAULT_BASE_URL, model=val("KERNLOOP_LLM_MODEL"),
        api_key=key or PLACEHOLDER_KEY,
        temperature=val("KERNLOOP_LLM_TEMPERATURE"), top_p=val("KERNLOOP_LLM_TOP_P"),
        max_tokens=val("KERNLOOP_LLM_MAX_TOKENS"),
        reasoning=reasoning if reasoning in ("on", "off") else None,
        timeout_s=val("KERNLOOP_LLM_TIMEOUT_S"), max_retries=val("KERNLOOP_LLM_MAX_RETRIES"),
        backoff_s=val("KERNLOOP_LLM_BACKOFF_S"), repair_retries=val("KERNLOOP_LLM_REPAIR_RETRIES"),
        prompt_tokens=val("KERNLOOP_LLM_PROMPT_TOKENS"),
    )


def from_env(env: Mapping[str, str] = os.environ) -> "NemotronProposer | None":
    """A configured proposer, or None (the orchestrator then uses the tuner and says so).
    Raises ValueError naming the variable when a setting is malformed."""
    cfg = config_from_env(env)
    return None if cfg is None else NemotronProposer(cfg)


def endpoint_host(base_url: str) -> str:
    """host[:port] only: never user:password@ or a query string that might carry a token."""
    parts = urlsplit(base_url)
    host = parts.hostname or "?"
    return f"{host}:{parts.port}" if parts.port else host


# ================================================================ the proposer

_REASONING_TOGGLE_BY_PROMPT = re.compile(r"llama-3\.[13]-nemotron-(nano|super|ultra)-\d+b-v1$", re.I)


@dataclass
class _Call:
    """One chat request after retries: a completion, or why there is none."""
    completion: Any = None
    error: str | None = None
    error_class: str | None = None
    status: int | None = None
    auth: bool = False
    fatal: bool = False     # no later request can succeed either (bad key, unknown model)
    attempts: int = 0
    transport: bool = False  # 429/5xx/timeout/connection failure after every retry
    refused: bool = False    # the connection was refused (nothing listens at the base URL)


def _refused(exc: BaseException) -> bool:
    """True when a connection error was caused by a refused TCP connection."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, ConnectionRefusedError) or "connection refused" in str(exc).lower():
            return True
        exc = exc.__cause__ or exc.__context__
    return False


class NemotronProposer:
    name = "nemotron"

    def __init__(self, config: LLMConfig):
        if openai is None:
            raise RuntimeError("the Nemotron proposer needs the 'openai' package: pip install openai")
        self.config = config
        self.model = config.model
        self.host = endpoint_host(config.base_url)
        self.answered = False   # the endpoint has answered at least once in this run
        # max_retries=0: we retry ourselves so that every attempt is logged and bounded.
        self._client = openai.OpenAI(base_url=config.base_url, api_key=config.api_key,
                                     timeout=config.timeout_s, max_retries=0)

    def __repr__(self) -> str:
        return f"NemotronProposer(model={self.model!r}, endpoint_host={self.host!r})"

    def describe(self) -> dict:
        c = self.config
        return {"proposer": self.name, "model": self.model, "endpoint_host": self.host,
                "temperature": c.temperature, "top_p": c.top_p, "max_tokens": c.max_tokens,
                "reasoning": c.reasoning or "server default"}

    # -- request shaping
    def _reasoning_line(self) -> str | None:
        """Llama-Nemotron v1 models switch reasoning by a system-prompt line."""
        if self.config.reasoning and _REASONING_TOGGLE_BY_PROMPT.search(self.model):
            return f"detailed thinking {self.config.reasoning}"
        return None

    def _request_kwargs(self) -> dict:
        c = self.config
        kw: dict[str, Any] = {"model": c.model, "max_tokens": c.max_tokens, "stream": False}
        if c.temperature is not None:
            kw["temperature"] = c.temperature
        if c.top_p is not None:
            kw["top_p"] = c.top_p
        if c.reasoning and not self._reasoning_line():
            kw["extra_body"] = {"chat_template_kwargs": {"enable_thinking": c.reasoning == "on"}}
        return kw

    def _redact(self, text: str | None) -> str | None:
        """Servers sometimes echo the key in error messages; it must not reach any log."""
        key = self.config.api_key
        if text and key and key != PLACEHOLDER_KEY and len(key) >= 4:
            text = text.replace(key, "***")
        return text

    # -- transport with bounded retries
    def _backoff(self, retry: int, exc: Exception) -> float:
        delay = self.config.backoff_s * (2 ** (retry - 1))
        headers = getattr(getattr(exc, "response", None), "headers", None) or {}
        try:
            delay = max(delay, float(headers.get("retry-after", 0)))
        except (TypeError, ValueError):
            pass   # an HTTP-date Retry-After: keep our own schedule
        delay = min(delay, BACKOFF_CAP_S)
        return delay * (1 + 0.1 * random.random())   # jitter: don't retry in lockstep

    def _call(self, messages: list[dict]) -> _Call:
        cfg, attempts = self.config, 0
        while True:
            attempts += 1
            t0 = time.monotonic()
            try:
                completion = self._client.chat.completions.create(messages=messages,
                                                                  **self._request_kwargs())
                self.answered = True
                return _Call(completion=completion, attempts=attempts)
            except (openai.AuthenticationError, openai.PermissionDeniedError) as e:
                return _Call(error=f"authentication failed (HTTP {e.status_code}) at {self.host}: "
                                   f"{self._redact(_api_message(e))}; check KERNLOOP_LLM_API_KEY "
                                   "(or NVIDIA_API_KEY)",
                             error_class=type(e).__name__, status=e.status_code, auth=True,
                             fatal=True, attempts=attempts)
            except (openai.RateLimitError, openai.InternalServerError, openai.APITimeoutError,
                    openai.APIConnectionError) as e:
                status = getattr(e, "status_code", None)
                what = f"HTTP {status}" if status else type(e).__name__
                refused = isinstance(e, openai.APIConnectionError) and _refused(e)
                # A refused connection before any answer: nothing listens there; retrying
                # only delays the stop (the loop ends the run on it).
                if attempts > cfg.max_retries or (refused and not self.answered):
                    why = "connection refused" if refused else self._redact(_api_message(e))
                    return _Call(error=f"{what} from {self.host} after {attempts} attempt(s): {why}",
                                 error_class=type(e).__name__, status=status, attempts=attempts,
                                 transport=True, refused=refused)
                wait = self._backoff(attempts, e)
                log.warning("nemotron: attempt %d/%d to %s failed after %.2fs (%s); retrying in %.2fs",
                            attempts, cfg.max_retries + 1, self.host, time.monotonic() - t0,
                            what, wait)
                time.sleep(wait)
            except openai.NotFoundError as e:   # wrong model id or base URL: every request would fail
                return _Call(error=f"HTTP 404 from {self.host}: {self._redact(_api_message(e))}; "
                                   f"check KERNLOOP_LLM_MODEL ({self.model}) and KERNLOOP_LLM_BASE_URL",
                             error_class=type(e).__name__, status=404, fatal=True, attempts=attempts)
            except openai.APIStatusError as e:   # 400/422…: retrying the same request won't help
                return _Call(error=f"HTTP {e.status_code} from {self.host}: "
                                   f"{self._redact(_api_message(e))}",
                             error_class=type(e).__name__, status=e.status_code, attempts=attempts)
            except Exception as e:   # malformed body etc.: this iteration fails, the loop goes on
                return _Call(error=f"{type(e).__name__} talking to {self.host}: "
                                   f"{self._redact(str(e))[:500]}",
                             error_class=type(e).__name__, attempts=attempts)

    # -- one proposal
    def propose(self, ctx: ProposalContext) -> Proposal:
        t0 = time.monotonic()
        messages = build_prompt(ctx, self.config.prompt_tokens, self._reasoning_line())
        est = messages_tokens(messages)
        meta: dict[str, Any] = {
            "model": self.model, "endpoint_host": self.host, "attempts": 0, "repairs": 0,
            "prompt_tokens": None, "completion_tokens": None, "finish_reason": None,
            "prompt_tokens_est": est, "prompt_over_budget": est > self.config.prompt_tokens}
        responses: list[str] = []
        code = reason = None
        call = _Call()
        content = None
        for round_ in range(self.config.repair_retries + 1):
            if round_:   # the failed answer goes back as the assistant's turn, then the request
                messages = messages + repair_messages(content, reason)
                meta["repairs"] = round_
            call = self._call(messages)
            meta["attempts"] += call.attempts
            if call.completion is None:
                break
            content, reasoning_text, finish = _unpack(call.completion)
            _add_usage(meta, call.completion, finish)
            responses.append(_render_response(round_, finish, reasoning_text, content))
            code, reason = extract_code(content, reasoning_text, finish)
            if code is not None:
                break
        meta["latency_s"] = round(time.monotonic() - t0, 3)
        return self._finish(code, reason, call, meta, messages, responses)

    def _finish(self, code, parse_reason, call: _Call, meta, messages, responses) -> Proposal:
        if code is not None:
            error, note = None, note_from_code(code)
        elif parse_reason is not None and not call.fatal:   # answered unusably (repair may have failed)
            error = parse_reason + (f" (repair request failed: {call.error})" if call.error else "")
            meta.update(error_kind="parse", error_class="ParseError")
            note = "unparseable answer"
        else:
            error = call.error or "no answer"
            meta.update(error_kind="auth" if call.auth else "config" if call.fatal
                        else "transport" if call.transport else "request",
                        error_class=call.error_class, status_code=call.status,
                        connection_refused=call.refused, endpoint_answered=self.answered)
            note = "request failed"
        error = self._redact(error)
        level = logging.INFO if error is None else logging.WARNING
        log.log(level, "nemotron proposal: model=%s host=%s latency=%.2fs attempts=%d repairs=%d "
                "prompt_tokens=%s completion_tokens=%s finish_reason=%s%s",
                self.model, self.host, meta["latency_s"], meta["attempts"], meta["repairs"],
                meta["prompt_tokens"], meta["completion_tokens"], meta["finish_reason"],
                f" error={error}" if error else "")
        return Proposal(code=code, note=note, proposer=self.name, model=self.model, error=error,
                        prompt=self._redact(render_messages(messages)),
                        response=self._redact("\n".join(responses)) if responses else None,
                        meta=meta, fatal=call.fatal)


# ================================================================ response helpers

def _api_message(e: Exception) -> str:
    """The server's error message (OpenAI-style body), else the exception text."""
    body = getattr(e, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])[:500]
        if isinstance(inner, str):
            return inner[:500]
    return str(e)[:500]


def _unpack(completion) -> tuple[str | None, str | None, str | None]:
    """(content, reasoning, finish_reason) from choice 0; reasoning under either field name
    (vLLM/NIM: reasoning_content; Ollama and newer vLLM: reasoning)."""
    if not getattr(completion, "choices", None):
        return None, None, None
    choice = completion.choices[0]
    msg = choice.message
    reasoning = getattr(msg, "reasoning_content", None) or getattr(msg, "reasoning", None)
    return msg.content, reasoning if isinstance(reasoning, str) else None, choice.finish_reason


def _add_usage(meta: dict, completion, finish: str | None) -> None:
    usage = getattr(completion, "usage", None)
    for k in ("prompt_tokens", "completion_tokens"):
        v = getattr(usage, k, None) if usage is not None else None
        if v is not None:
            meta[k] = (meta[k] or 0) + v   # summed over the repair round too
    meta["finish_reason"] = finish


def _render_response(round_: int, finish, reasoning_text, content) -> str:
    head = "response" if round_ == 0 else f"response to repair request {round_}"
    parts = [f"### {head} (finish_reason={finish})"]
    if reasoning_text:
        parts.append(f"--- reasoning ---\n{reasoning_text}")
    parts.append(f"--- content ---\n{content if content is not None else '(null)'}")
    return "\n".join(parts) + "\n"
