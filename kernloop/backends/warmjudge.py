"""The local backend's warm judge: one `python -m checker.serve` process per GPU slot for a whole run,
driven over pipes (one JSON request a line in; one KERNLOOP_RESULT line per request out, read
by resultline.py's parser like every checker's line).

A judge that dies or stops answering is killed with its workers (its own process group), the
job in flight fails with the reason, and the next job starts a new judge: the run goes on. The
judge's stderr (its workers' output included) is a pipe drained here: into one log file up to
LOG_CAP bytes (a kernel printing gigabytes fills neither the disk nor a file-size limit that
would kill the judge), and each job's last JOB_TAIL bytes into its folder's checker.log. The
judge gets the environment every checker child gets (sandbox.stripped_env: no keys), and ends by
itself when this process goes (EOF on its stdin).
"""
from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import threading
import time
from pathlib import Path

import checker
from kernloop.backends.resultline import ResultLineError, parse_result_line
from kernloop.backends.sandbox import FILE_LIMIT, stripped_env

ANSWER_GRACE_S = 60.0   # beyond a job's own limit (the judge enforces that one on its workers)
START_S = 600.0         # a judge that has not said hello by then is broken
LOG_CAP = 64 << 20      # bytes of a judge's stderr kept in its log file
JOB_TAIL = 200_000      # bytes of a job's stderr kept for its checker.log


def _limits():   # in the judge's process, between fork and exec (as sandbox.run_child's)
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, FILE_LIMIT))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


class JudgeGone(Exception):
    """The judge process died or stopped answering; the message says how."""


class JudgeProcess:
    """One live checker/serve.py and the answers it has sent."""

    def __init__(self, flags: list[str], env_extra: dict, log_path: Path):
        self.log_path = Path(log_path)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.t0 = time.monotonic()
        # run from the folder holding the package (its jobs' paths are absolute: stage_job)
        self.proc = subprocess.Popen(checker.command("serve", *flags), cwd=checker.ROOT, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=stripped_env(env_extra), start_new_session=True,
                                     preexec_fn=_limits)
        self.logged = 0
        self.capture = bytearray()
        self.cond = threading.Condition()
        self.answers: dict[str, dict] = {}
        self.sights: list[dict] = []
        self.hello: dict | None = None
        self.began: set[str] = set()   # jobs the judge said it started (serve.py: `began`)
        self.dead: str | None = None
        self.lock = threading.Lock()   # one writer of requests at a time
        self.reader = threading.Thread(target=self._read, daemon=True, name="kernloop-judge-answers")
        self.reader.start()
        threading.Thread(target=self._drain, daemon=True, name="kernloop-judge-log").start()

    def _drain(self) -> None:
        """The judge's stderr: into the log (up to LOG_CAP), and the current job's tail."""
        with open(self.log_path, "ab") as log:
            while True:
                chunk = self.proc.stderr.read1(1 << 16)
                if not chunk:
                    return
                with self.cond:
                    self.capture += chunk
                    if len(self.capture) > 2 * JOB_TAIL:
                        del self.capture[:-JOB_TAIL]
                if self.logged < LOG_CAP:
                    keep = chunk[:LOG_CAP - self.logged]
                    log.write(keep)
                    if len(keep) < len(chunk):
                        log.write(b"\n[... the rest of this judge's output is not kept ...]\n")
                    log.flush()
                self.logged += len(chunk)

    def take_capture(self) -> str:
        """What the judge wrote to stderr since the last call (its last JOB_TAIL bytes)."""
        with self.cond:
            out, self.capture = bytes(self.capture[-JOB_TAIL:]), bytearray()
        return out.decode("utf-8", "replace")

    def _read(self) -> None:
        for raw in self.proc.stdout:
            try:
                res = parse_result_line(raw.decode("utf-8", "replace"))
            except ResultLineError:
                continue   # only the judge writes here; a line it did not mean is skipped
            with self.cond:
                if res.get("kind") == "hello":
                    self.hello = res
                elif res.get("kind") == "began":
                    self.began.add(str(res.get("job_id")))
                elif res.get("kind") == "sight":
                    self.sights.append(res)
                else:
                    self.answers[str(res.get("job_id"))] = res
                    if (res.get("judge") or {}).get("ending"):   # it ends after this answer
                        self.dead = f"ended: {res['judge']['ending']}"
                self.cond.notify_all()
        rc = self.proc.wait()
        with self.cond:
            self.dead = self.dead or _how(rc)
            self.cond.notify_all()

    def send(self, req: dict) -> None:
        line = (json.dumps(req) + "\n").encode()
        with self.lock:
            try:
                self.proc.stdin.write(line)
                self.proc.stdin.flush()
            except (OSError, ValueError) as e:
                raise JudgeGone(f"the warm judge is gone ({self.dead or e})") from None

    def wait_for(self, job_id: str, timeout_s: float) -> dict:
        end = time.monotonic() + timeout_s
        with self.cond:
            while job_id not in self.answers:
                if self.dead:
                    raise JudgeGone(f"the warm judge died ({self.dead})")
                left = end - time.monotonic()
                if left <= 0:
                    raise JudgeGone(f"the warm judge did not answer within {timeout_s:.0f} s (killed)")
                self.cond.wait(min(left, 1.0))
            return self.answers.pop(job_id)

    def wait_hello(self) -> dict:
        end = time.monotonic() + START_S
        with self.cond:
            while self.hello is None:
                if self.dead:
                    raise JudgeGone(f"the warm judge died while starting ({self.dead})")
                if time.monotonic() > end:
                    raise JudgeGone(f"the warm judge did not start within {START_S:.0f} s")
                self.cond.wait(1.0)
            return self.hello

    def take_sights(self) -> list[dict]:
        with self.cond:
            out, self.sights = self.sights, []
        return out

    def alive(self) -> bool:
        return self.dead is None and self.proc.poll() is None

    def ending(self) -> bool:
        return str(self.dead or "").startswith("ended:")

    def close(self, wait_s: float = 5.0) -> None:
        """Ask the judge to end (it says which second looks it drops), then make sure."""
        try:
            self.send({"op": "exit"})
            self.proc.wait(wait_s)
        except (JudgeGone, subprocess.TimeoutExpired):
            pass
        self.kill("closed")
        self.reader.join(5.0)   # its last lines read

    def kill(self, why: str) -> None:
        with self.cond:
            self.dead = self.dead or why
            self.cond.notify_all()
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)   # the judge and every worker it started
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _how(rc) -> str:
    if rc is not None and rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit code {rc}"


class WarmJudges:
    """The warm judges of one backend, one per slot, started on first use and after a death."""

    def __init__(self, flags: list[str], env_of):
        self.flags, self.env_of = list(flags), env_of   # env_of(slot) -> the judge's env_extra
        self.live: dict[str, JudgeProcess] = {}
        self.lock = threading.Lock()
        self.n = 0
        self.starts: list[dict] = []   # {slot, pid, startup_s, why}: every judge started
        self.left: list[dict] = []     # second looks answered by judges since closed

    def get(self, slot: str, log_dir: Path) -> JudgeProcess:
        with self.lock:
            jp = self.live.get(slot)
            if jp is not None and jp.alive() and os.path.exists(f"/proc/{jp.proc.pid}/status") \
                    and "State:\tZ" not in _read(f"/proc/{jp.proc.pid}/status"):
                return jp
            why = "first job" if jp is None else f"the previous judge {'' if jp.ending() else 'died: '}{jp.dead}"
            if jp is not None:
                jp.kill(jp.dead or "replaced")
                self.left += jp.take_sights()
            jp = JudgeProcess(self.flags, self.env_of(slot), Path(log_dir) / f"judge-{_safe(slot)}.log")
            self.live[slot] = jp
        hello = jp.wait_hello()
        self.starts.append({"slot": slot, "pid": hello.get("pid"), "startup_s": hello.get("startup_s"),
                            "why": why})
        return jp

    def job(self, slot: str, log_dir: Path, argv: list[str], timeout_s: float) -> tuple[dict | None, str, str]:
        """(the judge's result line for one job, its stderr, '') or (None, its stderr, why):
        the judge died or hung; it is killed, and the next job starts a new one."""
        with self.lock:
            self.n += 1
            jid = f"j{self.n}"
        for attempt in (1, 2):
            jp = None
            try:
                jp = self.get(slot, log_dir)
                jp.take_capture()   # what came before this job is not its
                jp.send({"op": "job", "id": jid, "argv": argv, "timeout_s": timeout_s})
                return jp.wait_for(jid, timeout_s + ANSWER_GRACE_S), jp.take_capture(), ""
            except JudgeGone as e:
                began = jp is not None and jid in jp.began
                if jp is not None:
                    jp.kill(jp.dead or "did not answer")
                # died before it began this job (between jobs): the job runs on a new judge
                if began or attempt == 2:
                    return None, jp.take_capture() if jp is not None else "", str(e)
        return None, "", "unreachable"

    def sight(self, slot: str, log_dir: Path, argv: list[str], tag: str, timeout_s: float) -> None:
        jp = self.get(slot, log_dir)
        jp.send({"op": "sight", "id": tag, "argv": argv, "timeout_s": timeout_s})

    def landed(self) -> list[dict]:
        with self.lock:
            judges, left, self.left = list(self.live.values()), self.left, []
        return left + [s for jp in judges for s in jp.take_sights()]

    def close(self) -> None:
        with self.lock:
            judges, self.live = list(self.live.values()), {}
        for jp in judges:
            jp.close()
            with self.lock:
                self.left += jp.take_sights()

    def kill(self) -> None:
        with self.lock:
            judges, self.live = list(self.live.values()), {}
        for jp in judges:
            jp.kill("interrupted")


def _safe(slot: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in slot)
