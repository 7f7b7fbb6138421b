"""A real chat-completions HTTP server on 127.0.0.1, scripted per test.

Why: the Nemotron client must be tested through the real `openai` package and a real socket,
not by monkeypatching. This server speaks just enough of the protocol (POST
/v1/chat/completions and /chat/completions, GET /v1/models) and answers each request from a
queue of behaviours the test scripts up front. Every request is recorded (path, headers,
parsed body) so a test can assert what the client sent and how many times.

    with LoopbackOpenAI() as srv:
        srv.push(reply("```python\\nx = 1\\n```"), error(429), reply("..."))
        env = {"KERNLOOP_LLM_BASE_URL": srv.base_url, ...}
        ...
        assert len(srv.requests) == 3

A behaviour is a dict built by reply()/error()/delay(), or a callable(request) -> behaviour
(for answers that depend on what was asked). When the queue is empty the `default`
behaviour answers; without one the server answers 500 "loopback script exhausted" and
counts it in `unscripted`, so an under-scripted test fails loudly instead of hanging.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any, Callable

try:
    from tests.loopback import LoopbackServer
except ImportError:   # run by hand as a script: python tests/loopback_*.py
    from loopback import LoopbackServer

CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")

# Error "type" strings as the OpenAI API spells them, so the client builds the right error.
_ERROR_TYPES = {400: "invalid_request_error", 401: "invalid_api_key", 403: "permission_denied",
                404: "not_found_error", 429: "rate_limit_exceeded", 500: "server_error",
                502: "bad_gateway", 503: "service_unavailable"}


# ---------------------------------------------------------------- behaviours

def reply(content: str | None, *, reasoning_content: str | None = None,
          reasoning_field: str = "reasoning_content", finish_reason: str | None = "stop",
          usage: tuple[int, int] | None = None) -> dict:
    """A 200 chat.completion; usage=(prompt_tokens, completion_tokens) or estimated."""
    return {"kind": "reply", "content": content, "reasoning": reasoning_content,
            "reasoning_field": reasoning_field, "finish_reason": finish_reason, "usage": usage}


def error(status: int, message: str | None = None, *, headers: dict | None = None) -> dict:
    """An HTTP error with an OpenAI-style {"error": {...}} body."""
    return {"kind": "error", "status": status,
            "message": message or f"loopback scripted HTTP {status}",
            "headers": dict(headers or {})}


def delay(seconds: float, then: dict | None = None) -> dict:
    """Hold the request `seconds` (longer than the client timeout), then answer `then`."""
    return {"kind": "delay", "seconds": seconds, "then": then or reply("```python\nx = 1\n```")}


Behaviour = dict | Callable[["Request"], dict]


@dataclass
class Request:
    path: str
    headers: dict
    body: Any          # parsed JSON (None when the body was not JSON)
    t: float           # time.monotonic() on arrival

    @property
    def messages(self) -> list[dict]:
        return (self.body or {}).get("messages") or []

    @property
    def text(self) -> str:
        """All message contents joined: what the model was shown."""
        return "\n".join(str(m.get("content") or "") for m in self.messages)


# ---------------------------------------------------------------- the server

class LoopbackOpenAI(LoopbackServer):
    def __init__(self, script: list[Behaviour] | None = None, default: Behaviour | None = None):
        super().__init__(script, default)

    def make_handler(self):
        return _make_handler(self)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def chat_requests(self) -> list[Request]:
        return [r for r in self.requests if r.path in CHAT_PATHS]

    def _next(self, req: Request) -> dict:
        with self._lock:
            self.requests.append(req)
            if self._queue:
                b = self._queue.popleft()
            elif self.default is not None:
                b = self.default
            else:
                self.unscripted += 1
                b = error(500, "loopback script exhausted")
        return b(req) if callable(b) else b


def _make_handler(server: LoopbackOpenAI):
    class Handler(BaseHTTPRequestHandler):
        # HTTP/1.0: one request per connection, so no idle keep-alive threads linger.
        protocol_version = "HTTP/1.0"

        def log_message(self, fmt, *args):   # keep test output clean
            pass

        def do_GET(self):
            if self.path.rstrip("/") in ("/v1/models", "/models"):
                self._send_json(200, {"object": "list", "data": [
                    {"id": "loopback-model", "object": "model", "created": 0, "owned_by": "test"}]})
            else:
                self._send_json(404, _error_body(404, f"no route {self.path}"))

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw.decode("utf-8")) if raw else None
            except (UnicodeDecodeError, json.JSONDecodeError):
                body = None
            path = self.path.split("?", 1)[0]
            req = Request(path=path, headers={k.lower(): v for k, v in self.headers.items()},
                          body=body, t=time.monotonic())
            if path not in CHAT_PATHS:
                with server._lock:
                    server.requests.append(req)
                self._send_json(404, _error_body(404, f"no route {path}"))
                return
            self._answer(server._next(req), req)

        def _answer(self, b: dict, req: Request) -> None:
            kind = b.get("kind")
            if kind == "delay":
                # Event.wait, not sleep: stop() releases held requests at once.
                if server._stop.wait(b["seconds"]):
                    return
                self._answer(b["then"], req)
            elif kind == "error":
                self._send_json(b["status"], _error_body(b["status"], b["message"]), b["headers"])
            elif kind == "reply":
                self._send_json(200, _completion(b, req))
            else:
                self._send_json(500, _error_body(500, f"loopback: unknown behaviour {b!r}"))

        def _send_json(self, status: int, obj: dict, headers: dict | None = None) -> None:
            data = json.dumps(obj).encode("utf-8")
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, str(v))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass   # the client gave up (timeout): nothing to tell it

    return Handler


def _error_body(status: int, message: str) -> dict:
    return {"error": {"message": message, "type": _ERROR_TYPES.get(status, "api_error"),
                      "param": None, "code": str(status)}}


def _completion(b: dict, req: Request) -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": b["content"]}
    if b["reasoning"] is not None:
        message[b["reasoning_field"]] = b["reasoning"]
    if b["usage"] is not None:
        p, c = b["usage"]
    else:   # rough estimate, like a real server would count
        p = max(1, len(req.text) // 4)
        c = max(0, len((b["content"] or "") + (b["reasoning"] or "")) // 4)
    return {
        "id": f"chatcmpl-loopback-{len(req.text)}-{int(req.t * 1000)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": (req.body or {}).get("model", "loopback-model"),
        "choices": [{"index": 0, "message": message, "finish_reason": b["finish_reason"],
                     "logprobs": None}],
        "usage": {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c},
    }
