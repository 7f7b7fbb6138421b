"""Loop runs the MCP server starts in the background: each one an ordinary `orchestrator.py run` child, found by the folder it announces, read back through the run log's one reader, stopped as Ctrl-C would stop it."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from kernloop.errors import KernLoopError
from kernloop.view.pageview import LOG_NAME

ANNOUNCE_WAIT_S = 600.0   # a run's folder exists once its spec, backend and proposer are checked


class RunToolError(KernLoopError):
    """A run the server cannot start, find or stop (one line, as a tool error)."""


@dataclass
class Started:
    run_dir: Path
    proc: subprocess.Popen
    output: Path   # the child's terminal output (stdout and stderr together)


def run_argv(spec: str, out: Path, backend: str, proposer: str, iterations: int | None,
             parallel: int | None, seed: int) -> list[str]:
    """The command line of one run, exactly as a user would type it."""
    argv = [sys.executable, "-m", "orchestrator", "run", "--spec", spec, "--out", str(out),
            "--backend", backend, "--proposer", proposer, "--seed", str(seed)]
    argv += ["--iterations", str(iterations)] if iterations is not None else []
    return argv + (["--parallel", str(parallel)] if parallel is not None else [])


class Runs:
    """The runs this server started (the only ones it may stop), by their folder."""

    def __init__(self, root: Path, out: Path):
        self.root, self.out = root, out
        self.started: dict[Path, Started] = {}
        self.lock = threading.Lock()

    def start(self, argv: list[str]) -> Started:
        """Start a run and wait until its folder holds its log; a run that ends before (a bad spec, a
        backend this machine cannot run) is a RunToolError with its one error line."""
        self.out.mkdir(parents=True, exist_ok=True)
        fd, announce = tempfile.mkstemp(prefix="kernloop-run-", suffix=".path")
        os.close(fd)
        logs = self.out / ".mcp"
        logs.mkdir(exist_ok=True)
        output = logs / f"run-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{len(self.started)}.log"
        env = {**os.environ, "KERNLOOP_RUN_DIR_FILE": announce}
        with open(output, "wb") as sink:
            proc = subprocess.Popen(argv, cwd=self.root, env=env, stdin=subprocess.DEVNULL, stdout=sink,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        try:
            run_dir = self._wait_announced(Path(announce), proc, output)
        finally:
            Path(announce).unlink(missing_ok=True)
        started = Started(run_dir, proc, output)
        with self.lock:
            self.started[run_dir] = started
        return started

    @staticmethod
    def _wait_announced(announce: Path, proc: subprocess.Popen, output: Path) -> Path:
        deadline = time.monotonic() + ANNOUNCE_WAIT_S
        while time.monotonic() < deadline:
            text = announce.read_text(encoding="utf-8").strip() if announce.is_file() else ""
            if text and (Path(text) / LOG_NAME).is_file():   # its run_start is written
                return Path(text)
            if proc.poll() is not None:
                tail = output.read_text(encoding="utf-8", errors="replace").strip().splitlines()
                why = next((ln for ln in reversed(tail) if ln.startswith("error:")), tail[-1] if tail else "")
                raise RunToolError(f"the run ended before it began (exit {proc.returncode}): {why}")
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        raise RunToolError(f"the run made no folder within {ANNOUNCE_WAIT_S:g} s; it was interrupted")

    def folder(self, run_dir: str) -> Path:
        """A run folder named by the caller: absolute, or relative to the runs folder or the root."""
        p = Path(run_dir)
        for cand in ([p] if p.is_absolute() else [self.out / p, self.root / p]):
            if (cand / LOG_NAME).is_file():
                return cand.resolve()
        raise RunToolError(f"{run_dir} is not a run folder (no {LOG_NAME} there or under {self.out})")

    def process(self, run_dir: Path) -> dict:
        """Whether this server started the run, and whether its process is still running."""
        with self.lock:
            s = self.started.get(run_dir)
        if s is None:
            return {"started_here": False}
        code = s.proc.poll()
        return {"started_here": True, "running": code is None, "exit_code": code, "output": str(s.output)}

    def stop(self, run_dir: Path) -> dict:
        """End a run this server started as Ctrl-C would, then wait for its run_end: SIGTERM, which a run
        handles as Ctrl-C and always hears (a server started in the background, `&` or nohup, passes
        its runs SIGINT ignored)."""
        with self.lock:
            s = self.started.get(run_dir)
        if s is None:
            raise RunToolError(f"{run_dir.name} was not started by this server: stop it where it runs "
                               "(Ctrl-C, or kill -INT its process)")
        if s.proc.poll() is None:
            s.proc.send_signal(signal.SIGTERM)
        try:
            code = s.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:   # an interrupt ends a run within one job; this is not that
            os.killpg(s.proc.pid, signal.SIGKILL)
            code = s.proc.wait()
        return {"run_dir": str(run_dir), "exit_code": code}

    def close(self) -> None:
        """The server is going away: runs it started are interrupted (resumable), not orphaned."""
        with self.lock:
            left = [s for s in self.started.values() if s.proc.poll() is None]
        for s in left:
            s.proc.send_signal(signal.SIGTERM)   # as stop: heard even where SIGINT is ignored
        for s in left:
            try:
                s.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(s.proc.pid, signal.SIGKILL)
