"""The worker fork server (checker/zygote.py): an interpreter worker is forked from it, answers the
judge as an exec'd worker does, ends as Popen says it did, and dies with the judge."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from checker import ROOT, channel, scratch
from checker import zygote as Z


def _worker(z: Z.Zygote, role: str) -> channel.WorkerProc:
    job = scratch.make_job()
    folder = scratch.make_worker(job, role, None)
    env = {**scratch.worker_env(os.environ, folder, True), "TRITON_INTERPRET": "1"}
    return channel.WorkerProc(role, folder, env, ["--interpret", "--layers", "none", "--uid", "-1"], zygote=z)


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


@pytest.fixture(scope="module")
def fork_server():
    z = Z.Zygote(scratch.fork_server_env(os.environ))
    yield z
    z.close()


def test_a_forked_worker_says_ready_as_an_execd_one_and_ends_as_popen_says(fork_server):
    w = _worker(fork_server, "candidate")
    ready = w.reply(300)
    assert ready["ready"] is True and ready["role"] == "candidate" and ready["pid"] == w.proc.pid
    assert ready["device"] == "CPU, Triton interpreter"
    with open(f"/proc/{w.proc.pid}/stat") as f:
        assert int(f.read().rsplit(")", 1)[1].split()[1]) == fork_server.pid   # its parent: the server
    with open(f"/proc/{w.proc.pid}/cmdline", "rb") as f:
        assert b"checker.zygote" in f.read()                                  # forked, never exec'd
    assert w.proc.poll() is None and w.why_dead() is None
    w.send("exit")                                    # the worker's own clean end: exit code 0
    assert w.proc.wait(300) == 0 and w.why_dead() == "exit code 0"

    killed = _worker(fork_server, "champion")
    assert killed.reply(300)["ready"] is True
    killed.kill()                                     # SIGKILL, reaped by the server, reported here
    assert killed.proc.returncode == -signal.SIGKILL and killed.why_dead() == "killed by SIGKILL"
    live = _worker(fork_server, "spare")
    with pytest.raises(subprocess.TimeoutExpired):    # Popen's wait(timeout) on one still running
        live.proc.wait(0.01)
    live.kill()


def test_the_fork_server_and_its_workers_die_with_the_judge(tmp_path):
    judge = tmp_path / "judge.py"
    judge.write_text(textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(os.path.dirname(__file__))!r})
        from test_zygote import _worker
        from checker import scratch, zygote as Z
        z = Z.Zygote(scratch.fork_server_env(os.environ))
        w = _worker(z, "candidate")
        assert w.reply(300)["ready"]
        print(z.pid, w.proc.pid, flush=True)
        sys.stdin.read()
    """))
    p = subprocess.Popen([sys.executable, str(judge)], cwd=ROOT, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    server, worker = map(int, p.stdout.readline().split())
    assert not _gone(server) and not _gone(worker)
    p.kill()                                          # the judge dies without a word
    p.wait()
    deadline = time.monotonic() + 120                 # a bound on a hang, not on speed
    while not (_gone(server) and _gone(worker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(server) and _gone(worker)
