"""The fork server a judge starts its CPU workers from: one process that imports torch and Triton
once, holds nothing of any job, and forks each worker, so a worker costs a fork, not seconds of
imports (each `python -m checker.worker` spent about 2 s of CPU importing torch).

    python -m checker.zygote --fd N      # started by the judge (Zygote.start), never by hand

Why it is safe to fork from: it is started before the judge has any job, with the environment a
worker gets (no keys, no unsafe Triton variables), and it receives only a worker's command line,
environment and two descriptors, never inputs, references or results. It dies with the judge
(PR_SET_PDEATHSIG) and a worker dies with it, so a worker still dies with the judge. The forked
child closes every descriptor but 0-2 and its pipe, takes the worker's environment and
directory, and runs the same `checker.worker.main` an exec'd worker runs: its containment
(namespace, Landlock, user id, capabilities) is applied there, before any kernel is loaded.
Only the Triton interpreter's workers, and every worker on a machine without an NVIDIA device,
are forked: a GPU worker on a GPU machine is still its own `python -m` (forking after torch has
been imported is untested there: CUDA and its IPC).

The judge holds a forked worker through `ForkedProc`, which answers as `subprocess.Popen` does
(pid, poll, wait, kill, returncode): the zygote reaps its children and writes each exit status
to a pipe of that worker's own. Stdlib (torch only inside the zygote).
"""
from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time

from . import ROOT, command

MAX_REQUEST = 1 << 20   # bytes: a worker's argv and environment


class ForkedProc:
    """A worker forked by the zygote, as the judge holds it: Popen's pid, returncode, poll,
    wait, kill and send_signal (its exit status comes on `status`, a pipe of its own)."""

    def __init__(self, pid: int, status: int):
        self.pid, self.status, self.returncode = pid, status, None
        self.args = ["checker.worker (forked)"]

    def _read(self) -> None:
        try:
            raw = os.read(self.status, 64)
        except OSError:
            raw = b""
        os.close(self.status)
        try:
            self.returncode = int(raw)
        except ValueError:   # the zygote died first: the worker was re-parented to the judge
            self.returncode = _reap_orphan(self.pid)

    def poll(self):
        if self.returncode is None and select.select([self.status], [], [], 0)[0]:
            self._read()
        return self.returncode

    def wait(self, timeout: float | None = None):
        if self.returncode is None:
            if not select.select([self.status], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self._read()
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


def _reap_orphan(pid: int) -> int:
    """The status of a worker whose zygote died before reporting it: the judge (its subreaper)
    reaps it; one already gone counts as killed."""
    try:
        os.kill(pid, signal.SIGKILL)
        _, st = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(st)
    except (ProcessLookupError, ChildProcessError):
        return -int(signal.SIGKILL)


class Zygote:
    """The judge's end: start the fork server, ask it for workers."""

    def __init__(self, env: dict):
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        argv = command("zygote", "--fd", theirs.fileno())
        self.proc = subprocess.Popen([argv[0], "-B", *argv[1:]], pass_fds=(theirs.fileno(),),
                                     stdin=subprocess.DEVNULL, stdout=sys.stderr.fileno(), cwd=ROOT,
                                     env=env, close_fds=True)
        theirs.close()
        self.pid = self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def spawn(self, argv: list[str], env: dict, cwd: str, fd: int) -> ForkedProc:
        """A worker running `checker.worker.main(argv)` with the pipe end `fd` (its number in
        argv is rewritten to the child's own), `env` and `cwd`."""
        status_r, status_w = os.pipe()
        try:
            msg = json.dumps({"argv": argv, "env": env, "cwd": cwd}).encode()
            socket.send_fds(self.sock, [msg], [fd, status_w])
            got = self.sock.recv(256)
        finally:
            os.close(status_w)
        if not got:
            os.close(status_r)
            raise OSError(f"the worker fork server is gone ({self.proc.poll()})")
        return ForkedProc(json.loads(got)["pid"], status_r)

    def close(self) -> None:
        self.sock.close()
        try:
            self.proc.kill()
            self.proc.wait(5)
        except (OSError, subprocess.TimeoutExpired):
            pass


# -- the server (python -m checker.zygote)

def _child(req: dict, fds: list[int]) -> None:
    """In the forked child: become an exec'd worker as far as the worker can tell, and run it."""
    from . import contain
    from . import worker
    pipe_fd = fds[0]
    os.closerange(3, pipe_fd)             # as Popen(close_fds=True): 0-2 and the pipe stay
    os.closerange(pipe_fd + 1, 1 << 16)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    for sig in (signal.SIGCHLD, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    contain.set_dumpable(True)   # as after an exec: the worker's own layers decide from here
    _blas_threads()
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    argv = list(req["argv"])
    argv[argv.index("--fd") + 1] = str(pipe_fd)
    sys.argv = [worker.__file__, *argv]
    sys.modules["__main__"] = worker   # as under `python -m checker.worker`: a kernel that patches
                                       # __main__ patches the worker, and its guard sees it
    worker.T0 = time.monotonic()
    code = 1
    try:
        code = worker.main(argv)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:   # noqa: BLE001 - printed on the judge's stderr, then this child ends
        import traceback
        traceback.print_exc()
    finally:
        os._exit(code if isinstance(code, int) else 1)


def _blas_threads() -> None:
    """OpenBLAS (numpy's, loaded with torch) starts its thread pool when it loads, and a fork
    keeps none of it: the first threaded BLAS call would start it again inside the candidate's
    call (the worker's started-threads check). One such call now, as an exec'd worker has it."""
    try:
        import numpy
        a = numpy.ones((256, 256))
        a @ a
    except Exception:   # noqa: BLE001 - no numpy: no pool to restore
        pass


def _reap(children: dict) -> None:
    """Every ended child's exit status onto its status pipe (as Popen's returncode)."""
    while children:
        try:
            pid, st = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        w = children.pop(pid, None)
        if w is not None:
            try:
                os.write(w, str(os.waitstatus_to_exitcode(st)).encode())
            except OSError:
                pass
            os.close(w)


def serve(sock: socket.socket) -> None:
    """Fork a worker per request until the judge closes its end; reap them as they end."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)   # wakes the select below
    children: dict[int, int] = {}
    while True:
        ready = select.select([sock, wake_r], [], [])[0]
        if wake_r in ready:
            os.read(wake_r, 4096)
        _reap(children)
        if sock not in ready:
            continue
        msg, fds, _, _ = socket.recv_fds(sock, MAX_REQUEST, 2)
        if not msg:
            return   # the judge is gone: its workers die with this process (their death signal)
        pid = os.fork()
        if pid == 0:
            sock.close()
            os.close(fds[1])
            os.close(wake_r)
            os.close(wake_w)
            signal.set_wakeup_fd(-1)
            _child(json.loads(msg), fds)
        os.close(fds[0])   # the worker's pipe end: only the worker keeps it
        children[pid] = fds[1]
        sock.send(json.dumps({"pid": pid}).encode())


def main(argv=None) -> int:
    import argparse
    p = argparse.ArgumentParser(description="KernLoop worker fork server (started by the judge)")
    p.add_argument("--fd", type=int, required=True)
    args = p.parse_args(argv)
    from . import contain
    contain.die_with_parent()
    contain.make_judge_undumpable()   # a worker (its child) may not trace it and so reach later workers
    sys.dont_write_bytecode = True
    import torch                         # noqa: F401 - what every worker would import: once, here
    import torch.multiprocessing         # noqa: F401
    from . import worker
    worker._preimport(interpret=True)
    serve(socket.socket(fileno=args.fd))
    return 0


if __name__ == "__main__":
    sys.exit(main())
