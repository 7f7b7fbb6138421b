"""Timing primitives and statistics: the L2 flush with its settle spin, one timed call, the
prewarm, summaries and roofline ceilings (the judge's clock cross-check is clock.py).

Leaf module (stdlib; torch is passed in): imported by the judge, the worker, the backends and
the benches, always as `checker.timing` (in a job too: the package is shipped whole).
"""
from __future__ import annotations

import contextlib
import copy
import gc
import os
import statistics
import threading
import time

# GPU spin after each flush (see Flusher), in SM clock cycles: longer than the host needs from
# the start event to the candidate's launch, including Python dispatch under the op recorder
# (200 us at 2.5 GHz; 253 us at the H200's 1.98 GHz boost). One fixed count, the judge's, for
# both workers of an A/B (each worker once calibrated its own; with one count the honest
# overhead spread on the H200 stayed at about +-0.25 ms per call: benchmarks/results/session7).
SETTLE_CYCLES = 500_000

# Two ceilings per device, never mixed: the DATASHEET peak (dense bf16 tensor-core TFLOP/s, no
# sparsity; DRAM GB/s), named with its source, and the MEASURED ceiling (bf16 torch.mm 8192^3's
# rate; device-to-device copy GB/s counting read + write), where one was measured. A roofline
# says "% of the datasheet peak" and "% of the measured ceiling", each with its own number.
DATASHEET = [   # (name in the device string, TFLOP/s dense bf16, GB/s, source)
    ("H200", 989.0, 4800.0, "NVIDIA H200 SXM datasheet: 989 TFLOP/s dense bf16, 4.8 TB/s HBM3e"),
    ("H100", 989.0, 3350.0, "NVIDIA H100 SXM datasheet: 989 TFLOP/s dense bf16, 3.35 TB/s HBM3"),
    ("A100", 312.0, 2039.0, "NVIDIA A100 SXM 80GB datasheet: 312 TFLOP/s bf16, 2.04 TB/s HBM2e"),
    ("L40S", 362.0, 864.0, "NVIDIA L40S datasheet: 362 TFLOP/s dense bf16, 864 GB/s GDDR6"),
    ("4090", 165.0, 1008.0, "NVIDIA RTX 4090 (Ada whitepaper): 165 TFLOP/s bf16 with fp32 accumulate, 1008 GB/s"),
    ("5090", 209.5, 1792.0, "NVIDIA RTX 5090 (Blackwell whitepaper): 209.5 TFLOP/s bf16 with fp32 accumulate, 1792 GB/s"),
]
MEASURED = [   # (name, TFLOP/s of bf16 torch.mm 8192^3, copy GB/s read + write, source)
    ("H200", 790.0, 4200.0, "measured on this project's H200 (torch.mm 8192^3 bf16: 785-793 TFLOP/s; "
                            "device-to-device copy 4.23-4.26 TB/s read + write; benchmarks/results/)"),
]



# A candidate clearly slower than its champion ends its A/B early (a rejection needs no more
# reps; a promotion always runs them all): after EARLY_REPS timed reps of each, when its median
# is more than EARLY_MARGIN above the champion's and it was the slower in EARLY_SHARE of the
# rep pairs. The promotion rule needs a median 2% BELOW the champion's, so a candidate stopped
# here is one the full A/B rejects too; a real 5% win reads 10% slow in 90% of 10 pairs never.
EARLY_REPS, EARLY_MARGIN, EARLY_SHARE = 10, 0.10, 0.9


def clearly_slower(cand_ms, champ_ms, reps: int = EARLY_REPS, margin: float = EARLY_MARGIN,
                   share: float = EARLY_SHARE) -> bool:
    """Whether the A/B so far (per-rep ms, in its order) may end as a rejection now (pure)."""
    n = min(len(cand_ms), len(champ_ms))
    if n < reps:
        return False
    c, b = list(cand_ms[:n]), list(champ_ms[:n])
    slower = sum(x > y for x, y in zip(c, b))
    return statistics.median(c) > statistics.median(b) * (1 + margin) and slower >= share * n


def summarize(samples_ms, warmup: int) -> dict:
    xs = [float(x) for x in samples_ms]
    if not xs:
        return {"mean_ms": None, "min_ms": None, "median_ms": None, "std_ms": None, "n": 0,
                "warmup": warmup}
    return {"mean_ms": statistics.fmean(xs), "min_ms": min(xs), "median_ms": statistics.median(xs),
            "std_ms": statistics.stdev(xs) if len(xs) > 1 else 0.0, "n": len(xs), "warmup": warmup}


def ceilings_for(device_name: str) -> dict | None:
    """{"match", "peak": {tflops, gbps, source} (datasheet), "measured": {...} or None} for a
    device name, or None for a device in neither table."""
    def pick(table):
        for key, tflops, gbps, source in table:
            if key in (device_name or ""):
                return key, {"tflops": tflops, "gbps": gbps, "source": source}
        return None, None
    key, peak = pick(DATASHEET)
    mkey, measured = pick(MEASURED)
    if peak is None and measured is None:
        return None
    return {"match": key or mkey, "peak": peak, "measured": measured}


def roofline(stats: dict | None, cost: dict, ceil: dict | None) -> dict | None:
    """The achieved rates of one side (by its mean) and their percentages of the datasheet peak
    (`pct_peak_*`) and of the measured ceiling (`pct_measured_*`: torch.mm's rate, the copy
    bandwidth), with the bound at this arithmetic intensity (the measured ridge, else the
    datasheet's)."""
    if not stats or not stats.get("mean_ms"):
        return None
    s = stats["mean_ms"] / 1e3
    tflops, gbps = cost["flops"] / s / 1e12, cost["bytes"] / s / 1e9
    out = {"tflops": tflops, "gbps": gbps, "pct_peak_flops": None, "pct_peak_bw": None,
           "pct_measured_flops": None, "pct_measured_bw": None, "bound": None}
    ridge_of = None
    for kind in ("peak", "measured"):
        c = (ceil or {}).get(kind)
        if c:
            out[f"pct_{kind}_flops"] = 100.0 * tflops / c["tflops"]
            out[f"pct_{kind}_bw"] = 100.0 * gbps / c["gbps"]
            ridge_of = c   # measured wins where both exist
    if ridge_of:
        ridge = ridge_of["tflops"] * 1e12 / (ridge_of["gbps"] * 1e9)
        out["bound"] = "compute" if cost["flops"] / max(cost["bytes"], 1) > ridge else "memory"
    return out


class Flusher:
    """Evict L2 before every timed call without leaving dirty lines behind.

    read:   read a buffer >= 2x L2 (a reduction into one preallocated scalar): clean lines only,
            and the GPU stays busy up to the timed launch, so launch gaps are not timed.
    zero:   write zeros over the buffer (leaves dirty lines whose write-back lands inside the
            timed region; kept for comparison only).
    rotate: no flush kernel; the caller rotates input sets whose total exceeds 2x L2.
    none:   no flush (for comparison only).

    After a read or zero flush, a spin kernel of `settle_cycles` keeps the GPU busy while the
    host records the start event and runs the candidate's launcher (Python, an op recorder,
    Triton's launch path): otherwise, when that host work outlasts the flush, the GPU idles
    inside the timed region and the launch gap is measured as kernel time.
    """

    def __init__(self, torch, device, method: str, settle_cycles: int = 0):
        self.torch, self.method = torch, method
        self.cuda = device.type == "cuda"   # False: interpret mode, timed on the host clock
        spins = device.type == "cuda" and method in ("read", "zero")
        self.settle_cycles = max(0, int(settle_cycles)) if spins else 0
        l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 50 * 2**20) \
            if device.type == "cuda" else 0
        self.l2_bytes = l2
        self.nbytes = max(4 * l2, 256 * 2**20) if device.type == "cuda" else 0
        self.buf = torch.ones(self.nbytes // 4, device=device, dtype=torch.float32) \
            if method in ("read", "zero") and self.nbytes else None
        self.sink = torch.zeros((), device=device, dtype=torch.float32)   # 0-dim: sum over dim 0

    def __call__(self):
        if self.buf is None:
            return
        if self.method == "read":
            self.torch.sum(self.buf, dim=0, dtype=self.torch.float32, out=self.sink)
        else:
            self.buf.zero_()
        self.spin()

    def spin(self):
        if self.settle_cycles:
            self.torch.cuda._sleep(self.settle_cycles)

    def spin_ms(self, n: int = 3) -> float | None:
        """How long the settle spin keeps the GPU busy (the median of n spins between CUDA
        events): a timed call whose host time from start event to end event outlasts it left the
        GPU idle inside its timing (host_over_spin). None without a spin."""
        if not self.settle_cycles:
            return None
        times = []
        for _ in range(n):
            a, b = self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True)
            a.record()
            self.spin()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        return statistics.median(times)

    def without_spin(self) -> "Flusher":
        """This flusher (the same buffer) with no spin after its flush: a burst that spun once
        before its first call (--burst-spin once)."""
        other = copy.copy(self)
        other.settle_cycles = 0
        return other


def host_over_spin(host_ms, spin_ms: float | None) -> int | None:
    """How many timed calls took the host longer from start event to end event than the settle
    spin lasts: in those the GPU waited for the launch inside the timed region, and the launch
    gap was timed as the kernel's. None when there is no spin to compare with. Pure."""
    if spin_ms is None:
        return None
    return sum(1 for h in host_ms if h > spin_ms)


@contextlib.contextmanager
def no_gc():
    """Python's cyclic garbage collector off for a timed region, as timeit does: a collection's
    pause inside a burst of timed calls idles the GPU, and the judge's clock takes it for that
    worker's overhead. On the H200 one burst of two jumped by 0.03-0.11 ms a call in every burst
    rejection of the power test, five of six at a kept worker's tenth job (benchmarks/results/session11
    call 1; read as its full collection)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class HostEvent:
    """The host clock with a CUDA event's two calls (record, elapsed_time in ms): the timer of
    `--host-clock` in interpret mode, where nothing runs on a GPU. Never a GPU measurement."""
    host = True

    def __init__(self):
        self.t = None

    def record(self):
        self.t = time.perf_counter()

    def elapsed_time(self, end: "HostEvent") -> float:
        return (end.t - self.t) * 1e3


def timed_call(torch, fn, args, flush: Flusher | None, watch):
    """One call between a CUDA event pair, after the flush and its settle spin, under `watch`
    (the op recorder). Returns (output, start event, end event, host ms between the two
    records: when it outlasts the settle spin, the GPU idled inside the timed region); the
    caller syncs. Without a CUDA flush (`flush` None or on the CPU: interpret mode with
    --host-clock) the pair is the host clock's (HostEvent)."""
    if flush is None or not getattr(flush, "cuda", True):
        start, end = HostEvent(), HostEvent()
    else:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    if flush is not None:
        flush()
    with watch:
        start.record()
        t0 = time.perf_counter()
        out = fn(*args)
        end.record()
        host_ms = (time.perf_counter() - t0) * 1e3
    return out, start, end, host_ms


def prewarm(fn, arg_lists, timeout_s: float = 600.0) -> dict:
    """Call `fn` once on each argument list, all at once, one thread each, and wait.

    Why: each distinct shape can be a separate Triton specialization (divisibility by 16 of
    sizes and strides), hence a separate compile. Triton compiles outside the GIL for much of the
    time (MLIR passes, ptxas), so the compiles overlap instead of queueing. Outputs and errors are
    discarded: every real call afterwards is checked as before, and an error reproduces there.
    Returns {"threads": n, "seconds": wall, "errors": k, "stuck": threads still running}."""
    errors = []

    def one(args):
        try:
            fn(*args)
        except BaseException as e:   # noqa: BLE001 - reported by the checked call that follows
            errors.append(type(e).__name__)
    t0 = time.perf_counter()
    threads = [threading.Thread(target=one, args=(a,), daemon=True) for a in arg_lists]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s)
    gone_or_waited([t.native_id for t in threads if not t.is_alive()])
    return {"threads": len(threads), "seconds": round(time.perf_counter() - t0, 3),
            "errors": len(errors), "stuck": sum(t.is_alive() for t in threads)}


def gone_or_waited(native_ids: list, limit_s: float = 2.0) -> bool:
    """Wait until these joined threads have left /proc/self/task, up to `limit_s`. join()
    returns when a thread's Python state is released, a moment before the OS thread exits: the
    judge, reading the worker's tasks right after its reply, saw one such thread as "started
    threads" (the H200, benchmarks/results/session7). True when all are gone (or /proc is absent)."""
    end = time.monotonic() + limit_s
    while True:
        left = [n for n in native_ids if n and os.path.exists(f"/proc/self/task/{n}")]
        if not left:
            return True
        if time.monotonic() > end:
            return False
        time.sleep(0.002)
