"""A real HTTP server on 127.0.0.1 speaking Tavily's `/search` protocol, scripted per test.

Why: research.py must be tested through the real `tavily-python` client (reached with its
`api_base_url`, which KernLoop sets from TAVILY_BASE_URL) and a real socket, not by
monkeypatching. The protocol as the client uses it: POST {base}/search with a JSON body
({"query", "max_results", "search_depth", ...}) and `Authorization: Bearer <key>`; a 200 answers
{"query", "answer", "images", "results": [{"title", "url", "content", "score", "raw_content"}],
"response_time"}; errors answer {"detail": {"error": "..."}} with 401 (bad key), 429 (usage
limit), 400, 403/432/433. Every request is recorded (path, headers, parsed body).

    with LoopbackTavily(api_key="tvly-test") as srv:
        srv.push(status(429), delay(5), garbage())   # then the default: ok()
        env = {"TAVILY_API_KEY": "tvly-test", "TAVILY_BASE_URL": srv.base_url}

A behaviour is a dict built by ok()/status()/delay()/garbage(), or a callable(request) ->
behaviour. When the queue is empty the `default` answers (ok() unless given); default=None makes
an unscripted request a 500 counted in `unscripted`. With `api_key` set, a request carrying
another key gets the real 401 before any script runs.

Run by hand (for a demo or a manual proxy test): python tests/loopback_tavily.py [--port N]
"""
from __future__ import annotations

import argparse
import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any, Callable

try:
    from tests.loopback import LoopbackServer
except ImportError:   # run by hand as a script: python tests/loopback_*.py
    from loopback import LoopbackServer

SEARCH_PATH = "/search"
MARKER = "LOOPBACK-NOTE"   # in every generated result, so a test can find the notes in a prompt


# ---------------------------------------------------------------- behaviours

def ok(results: list[dict] | None = None, answer: str | None = None) -> dict:
    """A 200 search answer; results=None generates sample results from the query."""
    return {"kind": "ok", "results": results, "answer": answer}


def status(code: int, message: str | None = None) -> dict:
    """An HTTP error with Tavily's {"detail": {"error": ...}} body."""
    return {"kind": "status", "status": code, "message": message or f"loopback scripted HTTP {code}"}


def delay(seconds: float, then: dict | None = None) -> dict:
    """Hold the request `seconds` (beyond the client timeout), then answer `then`."""
    return {"kind": "delay", "seconds": seconds, "then": then or ok()}


def garbage(body: str = "<html><body>502 Bad Gateway</body></html>", code: int = 200) -> dict:
    """A body that is not JSON, e.g. a proxy's HTML page, with a success status by default."""
    return {"kind": "garbage", "status": code, "body": body}


def sample_results(query: str, seq: int, n: int = 3) -> list[dict]:
    """Deterministic results mentioning the query; the MARKER and `seq` tell searches apart."""
    topics = ("GROUP_M swizzle for L2 reuse", "num_stages=4 and num_warps=8 on 128x256 tiles",
              "split-K with an fp32 workspace")
    return [{
        "title": f"Triton note {seq}.{i}: {topics[i % len(topics)]}",
        "url": f"https://notes.example.test/{seq}/{i}",
        "content": (f"{MARKER}-{seq}-{i}: for '{query}', try {topics[i % len(topics)]}. "
                    "Accumulate in fp32 and mask the last K tile. "
                    "Unrelated sentence about something else entirely."),
        "score": round(0.9 - 0.1 * i, 3),
        "raw_content": None,
    } for i in range(n)]


Behaviour = dict | Callable[["Request"], dict]


@dataclass
class Request:
    path: str
    headers: dict      # lower-cased names
    body: Any          # parsed JSON (None when the body was not JSON)
    t: float           # time.monotonic() on arrival

    @property
    def query(self) -> str | None:
        return (self.body or {}).get("query") if isinstance(self.body, dict) else None


# ---------------------------------------------------------------- the server

class LoopbackTavily(LoopbackServer):
    def __init__(self, script: list[Behaviour] | None = None, default: Behaviour | None = ok(),
                 api_key: str | None = None, port: int = 0):
        super().__init__(script, default, port)
        self.api_key = api_key

    def make_handler(self):
        return _make_handler(self)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def search_requests(self) -> list[Request]:
        return [r for r in self.requests if r.path == SEARCH_PATH]

    def _next(self, req: Request) -> dict:
        with self._lock:
            self.requests.append(req)
            seq = len(self.search_requests)
            if self.api_key is not None and req.headers.get("authorization") != f"Bearer {self.api_key}":
                return status(401, "Unauthorized: missing or invalid API key.")
            if self._queue:
                b = self._queue.popleft()
            elif self.default is not None:
                b = self.default
            else:
                self.unscripted += 1
                b = status(500, "loopback script exhausted")
        b = b(req) if callable(b) else b
        return dict(b, seq=seq)


def _make_handler(server: LoopbackTavily):
    class Handler(BaseHTTPRequestHandler):
        # HTTP/1.0: one request per connection, so no idle keep-alive threads linger.
        protocol_version = "HTTP/1.0"

        def log_message(self, fmt, *args):   # keep test output clean
            pass

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw.decode("utf-8")) if raw else None
            except (UnicodeDecodeError, json.JSONDecodeError):
                body = None
            req = Request(path=self.path.split("?", 1)[0],
                          headers={k.lower(): v for k, v in self.headers.items()},
                          body=body, t=time.monotonic())
            if req.path != SEARCH_PATH:
                with server._lock:
                    server.requests.append(req)
                self._send(404, _error_body(f"no route {req.path}"))
                return
            self._answer(server._next(req), req)

        def _answer(self, b: dict, req: Request) -> None:
            kind = b.get("kind")
            if kind == "delay":
                # Event.wait, not sleep: stop() releases held requests at once.
                if server._stop.wait(b["seconds"]):
                    return
                self._answer(dict(b["then"], seq=b["seq"]), req)
            elif kind == "ok":
                self._send(200, _search_body(b, req))
            elif kind == "status":
                self._send(b["status"], _error_body(b["message"]))
            elif kind == "garbage":
                self._send(b["status"], b["body"], content_type="text/html")
            else:
                self._send(500, _error_body(f"loopback: unknown behaviour {b!r}"))

        def _send(self, code: int, payload, content_type: str = "application/json") -> None:
            data = (payload if isinstance(payload, str) else json.dumps(payload)).encode("utf-8")
            try:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass   # the client gave up (timeout): nothing to tell it

    return Handler


def _error_body(message: str) -> dict:
    return {"detail": {"error": message}}


def _search_body(b: dict, req: Request) -> dict:
    query = req.query or ""
    n = int((req.body or {}).get("max_results") or 5) if isinstance(req.body, dict) else 5
    results = b["results"] if b["results"] is not None else sample_results(query, b["seq"], min(n, 3))
    return {"query": query, "follow_up_questions": None, "answer": b["answer"], "images": [],
            "results": results, "response_time": 0.01, "request_id": f"loopback-{b['seq']}"}


def main() -> None:
    ap = argparse.ArgumentParser(description="Serve Tavily's /search on 127.0.0.1 with sample results.")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--api-key", default=None, help="answer 401 to any other key")
    args = ap.parse_args()
    with LoopbackTavily(api_key=args.api_key, port=args.port) as srv:
        print(f"TAVILY_BASE_URL={srv.base_url}", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
