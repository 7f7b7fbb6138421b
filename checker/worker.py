#!/usr/bin/env python3
"""KernLoop worker: imports ONE kernel file and calls its entry on tensors the judge shares.

Started by the judge (checker/judge.py), one per kernel file, with the pipe's descriptor in
--fd. It holds no reference, no other kernel, no secret and no handle on the result line: its
stdout is the judge's stderr. Before torch is imported it puts itself under Landlock, and once
its arena is mapped under its own user id (CPU path), a seccomp filter and no bytecode
(lockdown.py), in its own scratch folder; before the kernel file is imported it contains itself
further (contain.py) and from then on every call is watched (aten ops, audit events, replaced functions; the judge
itself reads the worker's threads and children from /proc) and reported with the call's
output, which it copies into the judge's output slot. On the GPU it times its own calls (flush, settle spin, CUDA events) and
syncs the device before it replies, so the judge's clock covers all of its work.
"""
from __future__ import annotations

import argparse
import gc
import os
import sys
import time
import traceback

T0 = time.monotonic()
from . import compileonce  # noqa: E402
from . import compilewarm  # noqa: E402
from . import contain  # noqa: E402
from . import lockdown  # noqa: E402
from . import identity  # noqa: E402


def _args(argv=None):
    p = argparse.ArgumentParser(description="KernLoop worker (started by the judge)")
    p.add_argument("--role", required=True)
    p.add_argument("--fd", type=int, required=True)
    p.add_argument("--flush", default="read")
    p.add_argument("--settle-cycles", type=int, default=0)
    p.add_argument("--interpret", action="store_true")
    p.add_argument("--scratch", required=True, help="its own folder: cwd (from its first lock on), "
                   "TMPDIR, Triton cache; its cwd at start is the folder holding the package")
    p.add_argument("--layers", default="none", help="OS layers to apply (lockdown.LAYERS)")
    p.add_argument("--strict", action="store_true", help="refuse to run if a layer did not hold")
    p.add_argument("--uid", type=int, default=-1, help="become this user id once the arena is mapped")
    p.add_argument("--test-seam", action="store_true",
                   help="TESTS ONLY (the judge passes it under KERNLOOP_TEST_SEAM): load the kernel "
                        "file with the audit hook disarmed, so the OS layers meet arbitrary code")
    p.add_argument("--hold", action="store_true",
                   help="a warm judge's spare: say `held` once torch is imported, touch the device "
                        "only after the judge's `go` (never while it times)")
    p.add_argument("--warm-cc", type=int, default=0,
                   help="with --hold: compile a kernel of the judge's own for `cuda` at this compute "
                        "capability before saying `held` (compilewarm.py; CPU only)")
    return p.parse_args(argv)


class Worker:
    """The worker's state between requests (one object, not module globals, so that the
    globals the kernel must not touch stay fixed)."""

    def __init__(self, torch, channel, timing, device, args, containment):
        self.torch, self.channel, self.timing = torch, channel, timing
        self.device, self.args, self.containment = device, args, containment
        self.base = self.fn = self.guards = self.module = None
        self.audit = contain.AuditGuard()
        sys.addaudithook(self.audit)   # cannot be removed; armed just before the kernel import
        containment["audit_hook"] = "armed before the kernel import: sockets, shells, forks, " \
                                    "signals, ctypes; spawns only Triton's compiler"
        self.flush = timing.Flusher(torch, device, args.flush, settle_cycles=args.settle_cycles) \
            if device.type == "cuda" else None
        self.rec = contain.aten_recorder(torch)
        self.timed_before = False   # the first timed call lets the allocator's cache go
        self.locked = False         # lock_late ran (the first `arena`): once, before any load
        self.load_tried = False     # one kernel per process, for its whole life

    def sync(self):
        if self.device.type == "cuda":
            self.torch.cuda.synchronize()

    def watched(self) -> dict:
        """What the OS and the hooks saw since the kernel file was imported (the launcher builds
        this worker started beside its compiles joined first: harness threads, never the kernel's)."""
        compileonce.settle()
        return {"ops": sorted(self.rec.ops), "audit": sorted(set(self.audit.seen)),
                "guards": contain.changed_guards(self.guards, self.torch, globals())
                if self.guards is not None else []}

    # -- requests

    def op_arena(self, handle):
        if self.locked:   # a kept worker's later arenas come by `remap`; the lock is applied once
            return {"error": "this worker already mapped its first arena", "containment": self.containment}
        self.base = self.channel.attach(self.torch, handle)
        self.arena_ptr = self.base.untyped_storage().data_ptr()
        lock_late(self.args, self.containment)
        self.locked = True
        refused = lockdown.check_held(self.containment, lockdown.parse_layers(self.args.layers),
                                      self.args.strict)
        if refused:
            return {"error": refused, "containment": self.containment}
        return {"ok": True, "containment": self.containment}

    def op_remap(self, handle):
        """A warm worker's next job (checker/serve.py): the previous arena is let go, the new
        one mapped (None: map nothing between jobs), and the first timed call lets the
        allocator's cache go again, as in a fresh worker. Only after the first `arena` (the
        late locks) and a load: a fresh worker never skips its lock this way."""
        if not (self.locked and self.load_tried):
            return {"error": "remap before this worker's first arena and load"}
        self.base = None
        if handle is not None:
            self.base = self.channel.attach(self.torch, handle)
            self.arena_ptr = self.base.untyped_storage().data_ptr()
        self.timed_before = False
        return {"ok": True}

    def op_load(self, payload):
        if self.load_tried:   # one kernel per process, for its whole life
            return {"error": "this worker already holds a kernel", **self.watched()}
        if not self.locked:   # the late locks first (op_arena), whatever the judge sent
            return {"error": "load before this worker's arena (its late locks)", **self.watched()}
        self.load_tried = True
        if self.device.type == "cuda":   # Triton's driver loads libcuda (ctypes) before the hook arms
            triton_driver(self.containment)   # done at start-up; a no-op here unless that failed
        if payload.get("torch_side") is None:
            identity.prepare()
        self.guards = contain.guard_targets(self.torch, globals())
        if not self.args.test_seam:   # the seam: the OS layers alone against arbitrary code
            self.audit.arm()
        try:
            if payload.get("torch_side") is not None:   # the spec's reference in torch, no file
                from . import validate
                self.fn = validate.torch_side(self.torch, payload["torch_side"],
                                              getattr(self.torch, payload["out_dtype"]))
                return {"ok": True, **self.watched()}
            # The judged bytes, never a path: compiled here under a filename of their own, and
            # refused unless every Triton function in them is, as Triton's JIT and interpreter
            # would compile it, the def that was judged (identity.py). No call before that.
            self.module, self.fn, checked = identity.load(
                payload["source"], payload.get("sha256"), payload["filename"], "kernloop_kernel",
                payload["entry"])
        except identity.IdentityError as e:
            return {"error": f"kernel file refused: {str(e)[:1500]}", "identity_error": True,
                    **self.watched()}
        except BaseException as e:   # noqa: BLE001 - SystemExit from kernel code included
            return {"error": f"{type(e).__name__}: {str(e)[:500]}", **self.watched()}
        gc.freeze()   # what exists now (torch, Triton, the kernel) is never scanned again
        return {"ok": True, "identity": checked, **self.watched()}

    def _views(self, descs):
        return [self.channel.view(self.torch, self.base, d) for d in descs]

    def op_prewarm(self, payload):
        copies = [[x.clone() for x in self._views(descs)] for descs in payload]
        r = self.timing.prewarm(self.fn, copies)
        self.sync()
        if not self.args.interpret:   # JIT compiles run and shared, over this worker's life
            r["compiles"] = dict(compileonce.STATS)
        return {"ok": True, "prewarm": r, **self.watched()}

    def op_profile(self, payload):
        """checker/kernelprofile.py on this worker's kernel (after the verdict; informational)."""
        from . import kernelprofile
        prof = kernelprofile.profile(self.torch, self.fn, self._views(payload["args"]),
                                     payload.get("gpu_ms"), module=self.module)
        self.sync()
        return {"ok": True, "profile": prof, **self.watched()}

    def op_call(self, payload):
        torch = self.torch
        args = self._views(payload["args"])
        if payload.get("poison"):
            self._poison(64 * 2**20 if self.device.type == "cuda" else 4 * 2**20)
        ms = host_ms = None
        try:
            if payload.get("timed"):
                if not self.timed_before and self.device.type == "cuda":
                    self.timed_before = True   # both allocators enter the A/B alike: what the
                    torch.cuda.synchronize()   # correctness calls left cached is let go
                    torch.cuda.empty_cache()
                with self.timing.no_gc():   # a collection's pause is not the kernel's time
                    out, start, end, host_ms = self.timing.timed_call(torch, self.fn, args, self.flush, self.rec)
            else:
                with self.rec:
                    out = self.fn(*args)
            self.sync()
        except BaseException as e:   # noqa: BLE001 - the judge turns it into a rejection
            return {"error": f"{type(e).__name__}: {str(e)[:500]}", **self.watched()}
        meta = self._describe(out)
        slot = self.channel.view(torch, self.base, payload["out"])
        if meta["type"] == "Tensor" and tuple(meta["shape"]) == tuple(slot.shape) \
                and out.dtype == slot.dtype and out.device == slot.device:
            slot.copy_(out)
        if payload.get("timed"):
            ms = start.elapsed_time(end)
        del out
        self.sync()
        return {"ok": True, "ms": ms, "host_ms": host_ms, "meta": meta, **self.watched()}

    def op_burst(self, payload):
        """`k` timed calls back to back, each with its flush and settle spin as in op_call (spin
        "once": one spin before the first flush, none after each), one sync at the end: the judge
        times the whole request on its own clock (checker/clock.py burst_shift). The outputs are
        let go: the timed reps before it were checked."""
        torch = self.torch
        args = self._views(payload["args"])
        flush = self.flush
        pairs = []
        try:
            if payload.get("spin") == "once" and flush is not None:
                flush.spin()   # lets the host get ahead of the GPU once for the whole burst
                flush = flush.without_spin()
            with self.timing.no_gc():   # a collection's pause inside a burst idles the GPU
                for _ in range(int(payload["k"])):
                    out, start, end, _host = self.timing.timed_call(torch, self.fn, args, flush, self.rec)
                    pairs.append((start, end))
                    del out
                self.sync()
        except BaseException as e:   # noqa: BLE001 - the judge turns it into a rejection
            return {"error": f"{type(e).__name__}: {str(e)[:500]}", **self.watched()}
        return {"ok": True, "ms": [a.elapsed_time(b) for a, b in pairs], **self.watched()}

    def _describe(self, out) -> dict:
        torch = self.torch
        if type(out) is not torch.Tensor:   # subclasses and lazy wrappers can fake values
            return {"type": type(out).__name__}
        ptr = out.untyped_storage().data_ptr()
        return {"type": "Tensor", "shape": list(out.shape), "dtype": str(out.dtype).replace("torch.", ""),
                "device": str(out.device), "contiguous": bool(out.is_contiguous()),
                "aliases": ptr == self.arena_ptr}

    def _poison(self, nbytes: int) -> None:
        """Fill freed allocator blocks with NaN so an output left unwritten (torch.empty that is
        never stored to) reads back NaN instead of a stale correct answer."""
        try:
            junk = self.torch.full((max(nbytes // 4, 1),), float("nan"), device=self.device,
                                   dtype=self.torch.float32)
            del junk
        except RuntimeError:
            pass


def lock_early(args, containment: dict) -> None:
    """Before torch (one thread: all later threads and children inherit it): Landlock."""
    layers = lockdown.parse_layers(args.layers)
    os.chdir(args.scratch)   # started where the package is: from here on its own folder
    if not _landlock_late(args):
        apply_landlock(args, layers, containment)


def _landlock_late(args) -> bool:
    """On the GPU, or with KERNLOOP_CONTAIN_FALLBACK=late: Landlock once the CUDA context and the
    arena are up. Applied before torch, the domain makes CUDA's initialisation fail on the H200
    (cudaGetDeviceCount: error 304, benchmarks/results/session5 call 2). Without Landlock ABI 8's TSYNC it
    then binds this thread and what it starts later, not the threads CUDA started before."""
    return not args.interpret or "late" in os.environ.get("KERNLOOP_CONTAIN_FALLBACK", "").split(",")


def apply_landlock(args, layers: set, containment: dict) -> None:
    t0 = time.monotonic()
    if "landlock" in layers:
        held = lockdown.landlock(args.scratch, "proc" in layers,
                                 ("/dev/shm",) if "shm" in os.environ.get("KERNLOOP_CONTAIN_FALLBACK", "").split(",")
                                 else (), jobs=os.path.dirname(args.scratch))
        containment["landlock"] = held
        if "proc" in layers:
            containment["proc"] = held
        containment["landlock_applied"] = "late: after the arena, this thread" if _landlock_late(args) \
            else "early: before torch, every thread"
    for k in ("landlock", "proc"):
        containment.setdefault(k, "off")
    containment.setdefault("cost_s", {})["landlock"] = round(time.monotonic() - t0, 4)


def lock_late(args, containment: dict) -> None:
    """Once the arena is mapped: another user id, no capabilities, the system-call filter, no
    bytecode from here on, and the Triton cache checked to be its own."""
    layers = lockdown.parse_layers(args.layers)
    if _landlock_late(args):
        apply_landlock(args, layers, containment)
    cost = containment.setdefault("cost_s", {})
    t0 = time.monotonic()
    containment["uid"] = lockdown.change_uid(args.uid) if "uid" in layers else "off"
    containment["capabilities_dropped"] = contain.drop_capabilities()
    t1 = time.monotonic()
    containment["seccomp"] = lockdown.seccomp_filter() if "seccomp" in layers else "off"
    cost.update(uid=round(t1 - t0, 4), seccomp=round(time.monotonic() - t1, 4))
    containment["no_bytecode"] = lockdown.no_bytecode(args.scratch) \
        if "no_bytecode" in layers else "off"
    cache = os.path.realpath(os.environ.get("TRITON_CACHE_DIR") or "~")
    containment["own_cache"] = ("off" if "own_cache" not in layers else True
                                if cache.startswith(os.path.realpath(args.scratch) + os.sep)
                                else f"failed: TRITON_CACHE_DIR is {cache}")
    if args.test_seam:
        containment["test_seam"] = "audit hook disarmed for the kernel file (tests only)"


def _preimport(interpret: bool) -> None:
    """Triton's modules a kernel import or its first launch would load: imported now, so that
    with no bytecode from the lock on they are not compiled from source in every worker."""
    import importlib
    names = ["triton", "triton.language"] + (["triton.runtime.interpreter"] if interpret else
                                             ["triton.compiler.compiler", "triton.runtime.build",
                                              "triton.tools.tensor_descriptor"])
    for n in names:
        try:
            importlib.import_module(n)
        except Exception:   # noqa: BLE001 - the kernel's own import reports a broken install
            pass


def triton_driver(containment: dict) -> None:
    """Triton's CUDA driver and its C helper (built into this worker's own, empty Triton cache:
    a C compile), once per process. At start-up, after the CUDA context: a spare does it before
    any job takes it, not inside a candidate's load."""
    import triton
    try:
        triton.runtime.driver.active.get_current_device()
        triton.runtime.driver.active.utils  # noqa: B018 - builds/loads its helper once
        containment.pop("triton_driver_warm", None)
    except Exception as e:   # noqa: BLE001 - reported; the kernel's own launch will fail too
        containment["triton_driver_warm"] = f"failed: {e}"


def _hold(conn, channel, containment: dict, args) -> None:
    """A spare (--hold): say `held` once torch is imported (and, with --warm-cc, Triton's
    compiler warmed on a kernel of the judge's own), then wait for `go`. It waits beside
    running candidates: nothing of the same user may trace it meanwhile."""
    containment["undumpable_while_held"] = contain.make_judge_undumpable()
    warm = compilewarm.warm(args.warm_cc) if args.warm_cc and not args.interpret else None
    channel.send_reply(conn, {"held": True, "pid": os.getpid(), "compile_warm": warm,
                              "import_s": round(time.monotonic() - T0, 3)})
    try:
        op, _ = conn.recv()
    except (EOFError, OSError):
        os._exit(0)
    if op != "go":
        os._exit(0)


def main(argv=None) -> int:
    args = _args(argv)
    os.dup2(2, 1)   # whatever this process prints lands on the judge's stderr
    containment = contain.apply_early()
    lock_early(args, containment)
    from multiprocessing.connection import Connection
    conn = Connection(args.fd)
    import torch
    import torch.multiprocessing  # noqa: F401 - rebuilds the judge's CUDA tensors (IPC handles)
    from . import channel
    from . import timing
    _preimport(args.interpret)   # before no_bytecode: their bytecode is read from site-packages
    # Before any kernel: racing prewarm threads share a specialization's compile (compileonce.py)
    compile_once = None if args.interpret else compileonce.install()
    if args.hold:   # started ahead by a warm judge: the device is touched only after its `go`
        _hold(conn, channel, containment, args)
    if args.interpret:
        device = torch.device("cpu")
        name = "CPU, Triton interpreter"
    else:
        device = torch.device("cuda", torch.cuda.current_device())
        torch.zeros(1, device=device)   # the CUDA context, now rather than at the first call
        triton_driver(containment)
        name = torch.cuda.get_device_name(device)
    # One intra-op thread: a worker computes nothing on the CPU itself, and torch's pool would
    # otherwise start its threads lazily inside the kernel's first call (counted as the kernel's).
    torch.set_num_threads(1)
    torch.full((4096,), 1.0, device=device).sum()
    w = Worker(torch, channel, timing, device, args, containment)
    channel.send_reply(conn, {"ready": True, "role": args.role, "pid": os.getpid(), "device": name,
                              "startup_s": round(time.monotonic() - T0, 3),
                              "containment": containment, "compile_once": compile_once,
                              "flush": None if w.flush is None else
                              {"bytes": w.flush.nbytes, "settle_cycles": w.flush.settle_cycles,
                               "spin_ms": w.flush.spin_ms()}})
    handlers = {"arena": w.op_arena, "load": w.op_load, "prewarm": w.op_prewarm, "call": w.op_call,
                "profile": w.op_profile, "remap": w.op_remap, "burst": w.op_burst}
    while True:
        try:
            op, payload = conn.recv()
        except (EOFError, OSError):
            os._exit(0)
        if op == "exit":
            os._exit(0)
        try:
            reply = handlers[op](payload)
        except BaseException as e:   # noqa: BLE001 - a broken request is the judge's to report
            reply = {"error": f"worker: {type(e).__name__}: {e}",
                     "traceback": traceback.format_exc()[-1500:]}
        channel.send_reply(conn, reply)


if __name__ == "__main__":
    sys.exit(main())
