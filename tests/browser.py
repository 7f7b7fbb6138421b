"""Drive the OS's headless Chromium over the DevTools protocol, with the standard library only.

    with Browser() as b:
        b.open(Path("runs/x/trajectory.html").resolve().as_uri())
        b.eval("document.querySelectorAll('[data-iter]').length")
        b.screenshot("test-artifacts/page.png")
        b.problems()          # console errors, uncaught exceptions, failed loads, network requests

No pip packages: a minimal RFC 6455 websocket client (text frames, masking, continuation, ping)
is enough for the DevTools protocol. Chromium comes from the OS (`apt-get install chromium`);
find_chromium() returns None when there is none, so tests can skip with a clear reason.
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
# The flags that keep a headless Chromium quiet and offline in a sandboxed container: without the
# background-networking ones it tries to phone home and its connections get refused.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--disable-extensions", "--mute-audio", "--hide-scrollbars",
         "--no-default-browser-check", "--force-device-scale-factor=1", "--disable-features=Translate")


def find_chromium():
    env = os.environ.get("KERNLOOP_CHROMIUM")
    if env:
        return env if (Path(env).is_file() or shutil.which(env)) else None
    for name in NAMES:
        p = shutil.which(name)
        if p:
            return p
    return None


class BrowserError(RuntimeError):
    pass


class _WebSocket:
    def __init__(self, url: str, timeout: float):
        assert url.startswith("ws://"), url
        hostport, _, path = url[5:].partition("/")
        host, _, port = hostport.partition(":")
        self.sock = socket.create_connection((host, int(port or 80)), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        req = (f"GET /{path} HTTP/1.1\r\nHost: {hostport}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n")
        self.sock.sendall(req.encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise BrowserError("websocket handshake: connection closed")
            head += chunk
        status = head.split(b"\r\n", 1)[0]
        if b" 101 " not in status + b" ":
            raise BrowserError(f"websocket handshake refused: {status!r}")
        self.buf = head.split(b"\r\n\r\n", 1)[1]

    def _read(self, n: int) -> bytes:
        while len(self.buf) < n:
            chunk = self.sock.recv(max(65536, n - len(self.buf)))
            if not chunk:
                raise BrowserError("websocket closed by the browser")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def _send_frame(self, opcode: int, payload: bytes) -> None:
        n = len(payload)
        head = bytes([0x80 | opcode])
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 65536:
            head += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(head + mask + masked)

    def send(self, text: str) -> None:
        self._send_frame(0x1, text.encode("utf-8"))

    def recv(self) -> str:
        parts = []
        while True:
            b0, b1 = self._read(2)
            fin, opcode, n = b0 & 0x80, b0 & 0x0F, b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            mask = self._read(4) if b1 & 0x80 else None
            data = self._read(n)
            if mask:
                data = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
            if opcode == 0x8:
                raise BrowserError("websocket closed by the browser")
            if opcode == 0x9:
                self._send_frame(0xA, data)
                continue
            if opcode == 0xA:
                continue
            parts.append(data)
            if fin:
                return b"".join(parts).decode("utf-8")

    def close(self) -> None:
        try:
            self._send_frame(0x8, b"")
        except OSError:
            pass
        self.sock.close()


class Browser:
    """One headless Chromium with one page, a fresh profile, and every problem it saw recorded."""

    def __init__(self, binary=None, width: int = 1400, height: int = 1000, timeout: float = 30.0):
        self.binary = binary or find_chromium()
        if not self.binary:
            raise BrowserError("no Chromium found (apt-get install chromium, or set KERNLOOP_CHROMIUM)")
        self.width, self.height, self.timeout = width, height, timeout
        self.proc = None
        self.ws = None
        self.profile = None
        self._id = 0
        self.events: list = []

    # -- lifecycle
    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.close()

    def start(self) -> None:
        self.profile = tempfile.mkdtemp(prefix="kernloop-chrome-")
        self._stderr = open(Path(self.profile) / "chrome-stderr.log", "w+b")
        cmd = [self.binary, *FLAGS, "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1",
               f"--user-data-dir={self.profile}", f"--window-size={self.width},{self.height}", "about:blank"]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._stderr)
        port_file = Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + self.timeout
        while True:
            if port_file.is_file():
                lines = port_file.read_text().split("\n")
                if len(lines) >= 2 and lines[0].strip().isdigit():
                    port = int(lines[0])
                    break
            if self.proc.poll() is not None:
                raise BrowserError(f"chromium exited with {self.proc.returncode}: {self._stderr_tail()}")
            if time.monotonic() > deadline:
                raise BrowserError(f"chromium did not open its DevTools port: {self._stderr_tail()}")
            time.sleep(0.05)
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))   # never via a proxy
        targets = []
        while time.monotonic() < deadline:
            with opener.open(f"http://127.0.0.1:{port}/json/list", timeout=self.timeout) as r:
                targets = [t for t in json.loads(r.read()) if t.get("type") == "page"]
            if targets:
                break
            time.sleep(0.05)
        if not targets:
            raise BrowserError("chromium has no page target")
        self.ws = _WebSocket(targets[0]["webSocketDebuggerUrl"], self.timeout)
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable")

    def close(self) -> None:
        if self.ws is not None:
            try:
                self.ws.close()
            except OSError:
                pass
            self.ws = None
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
            self.proc = None
        if self.profile:
            try:
                self._stderr.close()
            except OSError:
                pass
            shutil.rmtree(self.profile, ignore_errors=True)
            self.profile = None

    def _stderr_tail(self) -> str:
        try:
            self._stderr.flush()
            self._stderr.seek(0)
            return self._stderr.read()[-3000:].decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""

    # -- the protocol
    def call(self, method: str, **params):
        self._id += 1
        mid = self._id
        self.ws.send(json.dumps({"id": mid, "method": method, "params": params}))
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == mid:
                if "error" in msg:
                    raise BrowserError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)
        raise BrowserError(f"{method}: no answer within {self.timeout} s")

    def wait_event(self, method: str, since: int = 0):
        deadline = time.monotonic() + self.timeout
        while True:
            for ev in self.events[since:]:
                if ev.get("method") == method:
                    return ev
            if time.monotonic() > deadline:
                raise BrowserError(f"no {method} within {self.timeout} s")
            msg = json.loads(self.ws.recv())
            if "method" in msg:
                self.events.append(msg)

    # -- what tests use
    def open(self, url: str) -> None:
        mark = len(self.events)
        self.call("Page.navigate", url=url)
        self.wait_event("Page.loadEventFired", since=mark)
        self.eval("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")

    def eval(self, expression: str):
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if r.get("exceptionDetails"):
            raise BrowserError(f"evaluate failed: {json.dumps(r['exceptionDetails'])[:2000]}")
        return r.get("result", {}).get("value")

    def dom(self) -> str:
        return self.eval("document.documentElement.outerHTML")

    def screenshot(self, path, full_page: bool = True) -> Path:
        params = {"format": "png"}
        if full_page:
            m = self.call("Page.getLayoutMetrics")
            size = m.get("cssContentSize") or m.get("contentSize")
            params.update(captureBeyondViewport=True,
                          clip={"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], 16000), "scale": 1})
        data = self.call("Page.captureScreenshot", **params)["data"]
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def problems(self) -> list:
        """Everything a person would call an error: console errors and warnings, uncaught
        exceptions, failed loads, and any request that left the page's own file or data: URLs."""
        out = []
        for ev in self.events:
            m, p = ev.get("method"), ev.get("params", {})
            if m == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                out.append("uncaught: " + (d.get("exception", {}).get("description") or d.get("text", "")))
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "warning", "assert"):
                args = " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
                out.append(f"console.{p.get('type')}: {args}")
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") in ("error", "warning"):
                e = p["entry"]
                out.append(f"log {e.get('level')}: {e.get('text')} {e.get('url', '')}".strip())
            elif m == "Network.requestWillBeSent":
                url = p.get("request", {}).get("url", "")
                if not (url.startswith("file:") or url.startswith("data:") or url == "about:blank"):
                    out.append(f"network request: {url}")
            elif m == "Network.loadingFailed" and not p.get("canceled"):
                out.append(f"load failed: {p.get('errorText')}")
        return out

    def console(self) -> list:
        """Every console message (any level), for debugging."""
        return [ev["params"] for ev in self.events if ev.get("method") == "Runtime.consoleAPICalled"]
