"""Triton's compiler warmed in a warm judge's spare, on a kernel of the judge's own, before any
candidate exists: the first compile in a process pays once for what every later one reuses
(the compiler's modules and backend, its MLIR and LLVM set-up, ptxas read from disk), and a
spare pays it while it waits instead of inside a candidate's job. With the signatures of recent
jobs' kernels, the spare also builds their C launchers ahead (build_launchers).

Compiled for an explicit target (`cuda`, the judge's compute capability): nothing touches the
device, so a spare may do it while another candidate is timed (it is CPU work, like the torch
import the spare already does then). The result goes nowhere but the worker's own Triton cache.
Flat sibling of worker.py; Triton is imported only when `warm` runs.
"""
from __future__ import annotations

import re
import time


def _kernels(tl, triton):
    """A tile product (tl.dot: the tensor-core path) and a row softmax (reductions, exp): the
    two code paths the specs' kernels take, each a few lines."""

    @triton.jit
    def _warm_dot(a_ptr, b_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
            b = tl.load(b_ptr + (k + rk)[:, None] * BN + rn[None, :])
            acc += tl.dot(a, b)
        tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc.to(c_ptr.dtype.element_ty))

    @triton.jit
    def _warm_rows(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        cols = tl.arange(0, BLOCK)
        row = tl.program_id(0)
        x = tl.load(x_ptr + row * n + cols, mask=cols < n, other=-float("inf")).to(tl.float32)
        e = tl.exp(x - tl.max(x, axis=0))
        tl.store(y_ptr + row * n + cols, (e / tl.sum(e, axis=0)).to(y_ptr.dtype.element_ty),
                 mask=cols < n)

    dot = (_warm_dot, {"a_ptr": "*bf16", "b_ptr": "*bf16", "c_ptr": "*bf16", "K": "i32",
                       "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"},
           {"BM": 64, "BN": 64, "BK": 32})
    rows = (_warm_rows, {"x_ptr": "*bf16", "y_ptr": "*bf16", "n": "i32", "BLOCK": "constexpr"},
            {"BLOCK": 1024})
    return dot, rows


def warm(capability: int) -> dict:
    """Compile both kernels for `cuda` at this compute capability (e.g. 90). Returns
    {"seconds": wall} or {"failed": why, "seconds": wall}: never raises (a spare that could not
    warm is a spare that compiles cold, as before)."""
    t0 = time.monotonic()
    try:
        import triton
        import triton.language as tl
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
        target = GPUTarget("cuda", int(capability), 32)
        for fn, sig, consts in _kernels(tl, triton):
            triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts), target=target)
    except Exception as e:   # noqa: BLE001 - reported in the spare's held reply
        _forget_tools()
        return {"failed": f"{type(e).__name__}: {str(e)[:300]}", "seconds": round(time.monotonic() - t0, 3)}
    return {"seconds": round(time.monotonic() - t0, 3)}


def _forget_tools() -> None:
    """Triton caches its `ptxas --version` probe for the process, a failed one too ("Cannot find
    ptxas" ever after): after a failed warm-up the candidate's compile probes afresh."""
    try:
        import triton.knobs as knobs
        knobs.NvidiaTool.from_path.cache_clear()
    except Exception:   # noqa: BLE001 - an older Triton without the cache: nothing to forget
        pass


# Triton 3.6 builds a C launcher per kernel signature (the ordered argument types) with the
# host's C compiler, ~0.2 s on the H200, into the process's Triton cache keyed by the generated
# source; a fresh worker builds it inside its prewarm. A spare can build it ahead for the
# signatures of recent jobs (the tuner's candidates all share the baseline's): Triton's own
# generator on a list of type names, so a worker's report can name a signature, never a source.
_SCALARS = "i1|i8|i16|i32|i64|u1|u8|u16|u32|u64|fp8e4nv|fp8e5|fp8e4b15|fp8e4b8|fp8e5b16|fp16|bf16|fp32|f32|fp64"
SIG_TYPE = re.compile(rf"(?:\*k?)?(?:{_SCALARS})|constexpr")
MAX_LAUNCHERS = 4   # signatures a spare builds ahead (each a C compile while it waits)
MAX_ARGS = 64       # arguments of one signature


def launcher_hints(sigs) -> list[list[str]]:
    """Of `sigs` (a worker's report: untrusted data), those that are lists of at most MAX_ARGS
    Triton type names, distinct, in order, at most MAX_LAUNCHERS."""
    out: list[list[str]] = []
    for sig in sigs if isinstance(sigs, list) else []:
        if not (isinstance(sig, list) and 0 < len(sig) <= MAX_ARGS):
            continue
        if all(isinstance(t, str) and SIG_TYPE.fullmatch(t) for t in sig) and sig not in out:
            out.append(list(sig))
        if len(out) == MAX_LAUNCHERS:
            break
    return out


def record_launchers() -> list:
    """From now on, the signature of every launcher Triton generates in this process is appended
    to the returned list (none on a Triton without per-signature launchers)."""
    seen: list = []
    try:
        from triton.backends.nvidia import driver
        real = driver.make_launcher
    except (ImportError, AttributeError):
        return seen

    def make_launcher(constants, signature, tensordesc_meta, *rest):
        if not tensordesc_meta and len(seen) < MAX_LAUNCHERS:
            seen.append(list(signature.values()))
        return real(constants, signature, tensordesc_meta, *rest)
    driver.make_launcher = make_launcher
    return seen


def build_launchers(sigs) -> dict:
    """Build Triton's launcher for each valid signature of `sigs` into this process's Triton
    cache, as Triton would on a first launch, without loading it (nothing touches the device).
    Returns {"built": n, "seconds": wall} (with "failed": why): never raises."""
    t0, built = time.monotonic(), 0
    try:
        sigs = launcher_hints(sigs)
        if sigs:
            from triton.backends.nvidia import driver
            from triton.runtime import build
            from triton.runtime.cache import get_cache_manager
            if not hasattr(driver, "make_launcher"):   # Triton 3.8: one generic launcher
                return {"built": 0, "seconds": round(time.monotonic() - t0, 3),
                        "skipped": "this Triton builds no launcher per signature"}
            for sig in sigs:
                built += _build_one(driver, build, get_cache_manager, sig)
    except Exception as e:   # noqa: BLE001 - reported in the spare's held reply
        return {"failed": f"{type(e).__name__}: {str(e)[:300]}", "built": built,
                "seconds": round(time.monotonic() - t0, 3)}
    return {"built": built, "seconds": round(time.monotonic() - t0, 3)}


def _build_one(driver, build, get_cache_manager, sig: list) -> int:
    """triton.runtime.build.compile_module_from_src up to its cache put (1), or 0 when cached."""
    import hashlib
    import os
    import sysconfig
    import tempfile
    src = driver.make_launcher({}, dict(enumerate(sig)), None)
    name = "__triton_launcher" + sysconfig.get_config_var("EXT_SUFFIX")
    cache = get_cache_manager(hashlib.sha256((src + build.platform_key()).encode("utf-8")).hexdigest())
    if cache.get_file(name) is not None:
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "__triton_launcher.c")
        with open(path, "w") as f:
            f.write(src)
        so = build._build("__triton_launcher", path, tmp, driver.library_dirs(), driver.include_dirs,
                          driver.libraries, [])
        with open(so, "rb") as f:
            cache.put(f.read(), name, binary=True)
    return 1
