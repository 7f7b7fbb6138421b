"""Transport between the judge and one worker: the worker process, its request pipe, and the
arena of tensors they share (CUDA IPC on the GPU, a shared file mapping on the CPU).

Judge -> worker messages are pickled (the judge is trusted; a CUDA tensor travels as an IPC
handle through torch's reductions). Worker -> judge replies are JSON bytes only: the judge never
unpickles anything a worker sends, so a hostile worker cannot run code in the judge.
Leaf module but for the package's `command` (stdlib; torch is passed in or imported lazily).
"""
from __future__ import annotations

import json
import mmap
import os
import signal
import subprocess
import sys
import tempfile
import time
from multiprocessing.connection import Connection, Pipe

from . import ROOT, command

ALIGN = 1024          # offsets of arena slots: at least the CUDA allocator's own alignment
BASE_ALIGN = 2 * 2**20   # where the first slot of a GPU arena starts (absolute address)
MAX_REPLY = 4 << 20   # bytes; a longer reply is a broken worker
# CUDA IPC maps the whole cudaMalloc segment a tensor lives in, not the tensor: the caching
# allocator packs blocks under 10 MiB into shared 20 MiB segments and splits larger cached ones,
# so an arena must be a segment of its own (sizes: multiples of 2 MiB, above that 10 MiB line).
SEGMENT_ROUND = 2 << 20
OWN_SEGMENT_MIN = 12 << 20


class WorkerGone(Exception):
    """The worker died, closed its pipe, sent garbage, or did not answer in time; `role` names
    the worker (None: a spare, or not known)."""

    def __init__(self, msg: str, role: str | None = None):
        super().__init__(msg)
        self.role = role


def shm_dir() -> str | None:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


class Arena:
    """One block of memory the judge allocates and a single worker also maps. The judge carves
    inputs and output slots out of it; everything else the judge keeps stays outside."""

    def __init__(self, torch, device, nbytes: int, folder: str | None = None):
        self.torch, self.device = torch, device
        self.nbytes = max(int(nbytes), ALIGN)
        self.used, self.path, self.mm = 0, None, None
        if device.type == "cuda":
            # Slots start at the same address alignment in every arena (2 MiB): where a kernel's
            # inputs sit relative to pages is part of its time, so the candidate's and the
            # champion's must not differ there (with the timed sets first in both arenas, this
            # took the H200 matmul A/A from -1.6% to +0.2%: benchmarks/results/session4/README.md).
            self.nbytes += BASE_ALIGN
            self.base = own_segment(torch, device, self.nbytes)[:self.nbytes]
            self.used = (-self.base.data_ptr()) % BASE_ALIGN
            self.isolation = "own CUDA segment"
        else:
            self.isolation = "own file"
            # in the worker's own folder when given: the one place its Landlock domain lets it
            # open a file for writing, and no other worker's (nor a later job's) to find
            fd, self.path = tempfile.mkstemp(prefix="kernloop-arena-", dir=folder or shm_dir())
            try:
                os.ftruncate(fd, self.nbytes)
                self.mm = mmap.mmap(fd, self.nbytes)
            finally:
                os.close(fd)
            self.base = torch.frombuffer(self.mm, dtype=torch.uint8)

    def give(self, uid: int) -> None:
        """A file arena for a worker that already runs under its own user id (a warm judge's
        kept worker, `remap`): the file becomes that user's, as its folder is."""
        if self.path is not None and uid is not None and uid >= 0:
            os.chown(self.path, uid, uid)

    def alloc(self, shape, dtype):
        """(tensor view, descriptor the worker resolves to the same memory)."""
        n = 1
        for d in shape:
            n *= int(d)
        nbytes = max(n, 1) * self.torch.empty((), dtype=dtype).element_size()
        off = -(-self.used // ALIGN) * ALIGN
        if off + nbytes > self.nbytes:
            raise MemoryError(f"arena of {self.nbytes} bytes is full")
        self.used = off + nbytes
        t = self.base[off:off + nbytes].view(dtype)[:n].view(tuple(int(d) for d in shape))
        return t, (off, tuple(int(d) for d in shape), str(dtype).replace("torch.", ""))

    def share(self, xs):
        """Copy tensors into fresh slots; return (views, descriptors)."""
        views, descs = [], []
        for x in xs:
            v, d = self.alloc(x.shape, x.dtype)
            v.copy_(x)
            views.append(v)
            descs.append(d)
        return views, descs

    def handle(self):
        return ("cuda", self.base) if self.path is None else ("file", self.path, self.nbytes)

    def unlink(self) -> None:
        """Once the worker has mapped it, the file needs no name (nothing else can open it)."""
        if self.path:
            try:
                os.unlink(self.path)
            except OSError:
                pass


def own_segment(torch, device, nbytes: int):
    """A uint8 CUDA buffer of at least `nbytes` that is alone in its cudaMalloc segment, so a
    worker given it through CUDA IPC maps nothing else of the judge's: not another side's arena
    (whose output slot holds the champion's answer to the same inputs), not an input or a
    reference. Checked in the allocator's own snapshot; a try that landed in a shared or larger
    segment is held until the end, so the next one cannot be handed the same block."""
    size = max(-(-nbytes // SEGMENT_ROUND) * SEGMENT_ROUND, OWN_SEGMENT_MIN)
    held = []
    for _ in range(4):
        t = torch.empty(size, dtype=torch.uint8, device=device)
        ptr = t.data_ptr()
        seg = next((g for g in torch.cuda.memory_snapshot()
                    if g["address"] <= ptr < g["address"] + g["total_size"]), None)
        if seg is not None and seg["address"] == ptr and seg["total_size"] == size:
            return t
        held.append(t)
    raise RuntimeError("no CUDA segment of its own for an arena (is PYTORCH_CUDA_ALLOC_CONF "
                       "setting expandable_segments?): a worker would map other judge memory")


def attach(torch, handle):
    """Worker side: the arena's base tensor from the judge's handle."""
    if handle[0] == "cuda":
        return handle[1]
    _, path, nbytes = handle
    with open(path, "r+b") as f:
        mm = mmap.mmap(f.fileno(), nbytes)
    return torch.frombuffer(mm, dtype=torch.uint8)


def view(torch, base, desc):
    off, shape, dtype = desc
    dt = getattr(torch, dtype)
    n = 1
    for d in shape:
        n *= d
    nbytes = max(n, 1) * torch.empty((), dtype=dt).element_size()
    return base[off:off + nbytes].view(dt)[:n].view(tuple(shape))


def send_reply(conn: Connection, obj: dict) -> None:
    conn.send_bytes(json.dumps(obj, default=str).encode())


class WorkerProc:
    """The judge's handle on one worker process: spawn, request, reply, kill."""

    def __init__(self, role: str, scratch: str, env: dict, extra: list[str] = (), zygote=None):
        """`python -m checker.worker` from the folder holding the package (ROOT: the package is
        all it imports of its own), or the same worker forked by `zygote` (checker/zygote.py);
        the worker moves into `scratch`, its own folder, itself before its first lock
        (worker.lock_early), so nothing it writes lands beside the package."""
        self.role = role
        self.conn, child = Pipe(duplex=True)
        fd = child.fileno()
        self.t0 = time.monotonic()
        # close_fds (the default) closes every descriptor but 0-2 and the pipe: the judge's
        # result descriptor never reaches a worker; its stdout is the judge's stderr.
        # -B: no bytecode written; the worker reads none from a kernel's folder either (lockdown)
        argv = command("worker", "--role", role, "--fd", str(fd), "--scratch", scratch, *extra)
        try:
            if zygote is not None:
                self.proc = zygote.spawn(argv[3:], env, ROOT, fd)
            else:
                self.proc = subprocess.Popen([argv[0], "-B", *argv[1:]],
                                             pass_fds=(fd,), stdin=subprocess.DEVNULL, cwd=ROOT,
                                             stdout=sys.stderr.fileno(), env=env, close_fds=True)
        finally:
            child.close()
        self.pending = 0
        self.ready: dict | None = None
        self.held: dict | None = None        # a warm judge's spare: its `held` reply (pool.Spare)
        self.deadline: float | None = None   # time.monotonic() by which every reply must come

    def send(self, op: str, payload=None) -> None:
        try:
            self.conn.send((op, payload))
        except (OSError, EOFError) as e:
            raise WorkerGone(f"{self.role} worker is gone ({self.why_dead() or e})", self.role) from None
        self.pending += 1

    def reply(self, timeout: float | None = None) -> dict:
        """The next reply, as a JSON object; WorkerGone on death, garbage or timeout (the
        shorter of `timeout` and what is left before `deadline`, a warm judge's job limit)."""
        if self.deadline is not None:
            left = max(0.0, self.deadline - time.monotonic())
            timeout = left if timeout is None else min(timeout, left)
        try:
            if timeout is not None and not self.conn.poll(timeout):
                raise WorkerGone(f"{self.role} worker timed out: it did not answer within {timeout:g} s", self.role)
            raw = self.conn.recv_bytes(MAX_REPLY)
        except (EOFError, OSError) as e:
            # A closed pipe means the process is ending; one with a CUDA context can take a
            # while to be reaped (seen on the H200: "died (EOFError)" with no signal named).
            dead = self.why_dead(wait_s=2.0 if isinstance(e, EOFError) else 0.05)
            if dead is None and isinstance(e, OSError):   # alive, but its pipe holds no message
                raise WorkerGone(f"{self.role} worker sent a malformed message on its pipe ({e})", self.role) from None
            raise WorkerGone(f"{self.role} worker died ({dead or type(e).__name__})", self.role) from None
        self.pending -= 1
        try:
            obj = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise WorkerGone(f"{self.role} worker sent a reply that is not JSON", self.role) from None
        if not isinstance(obj, dict):
            raise WorkerGone(f"{self.role} worker sent a reply that is not a JSON object", self.role)
        return obj

    def call(self, op: str, payload=None, timeout: float | None = None) -> dict:
        self.send(op, payload)
        return self.reply(timeout)

    def why_dead(self, wait_s: float = 0.0) -> str | None:
        """How the process ended ("killed by SIGSEGV", "exit code 3"), waiting up to `wait_s`
        for it to be reaped; None while it lives."""
        try:
            rc = self.proc.wait(wait_s) if wait_s > 0 else self.proc.poll()
        except subprocess.TimeoutExpired:
            rc = None
        if rc is None:
            return None
        if rc < 0:
            try:
                return f"killed by {signal.Signals(-rc).name}"
            except ValueError:
                return f"killed by signal {-rc}"
        return f"exit code {rc}"

    def kill(self, wait: bool = True) -> None:
        """SIGKILL; with `wait`, reap it (up to 5 s). Without, the caller reaps it later (reap):
        a process that holds a CUDA context takes about 0.1 s to exit on the H200, and it runs
        no code of its own once the signal is sent."""
        try:
            self.proc.kill()
        except OSError:
            pass
        if wait:
            self.reap(5)
        self.conn.close()

    def reap(self, within: float) -> None:
        try:
            self.proc.wait(within)
        except subprocess.TimeoutExpired:
            pass
