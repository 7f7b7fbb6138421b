"""The lifecycle every loopback test server shares: a real ThreadingHTTPServer on 127.0.0.1,
a scripted queue of behaviours, and every request recorded. Subclasses give the protocol."""
from __future__ import annotations

import threading
from collections import deque
from http.server import ThreadingHTTPServer


class LoopbackServer:
    def __init__(self, script=None, default=None, port: int = 0):
        self._queue: deque = deque(script or [])
        self.default = default
        self.requests: list = []
        self.unscripted = 0
        self._port = port
        self._lock = threading.Lock()
        self._stop = threading.Event()       # wakes delayed handlers at shutdown
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def make_handler(self):
        raise NotImplementedError

    def start(self):
        self._httpd = ThreadingHTTPServer(("127.0.0.1", self._port), self.make_handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return self._httpd.server_address[1]

    def push(self, *behaviours) -> None:
        with self._lock:
            self._queue.extend(behaviours)
