"""Hostile and faulty candidates, built from the naive matmul baseline.

Each case is a kernel file that cheats (or breaks) the way generated kernels have cheated real
harnesses. They are fed to the checker directly, bypassing the static contract, so that each
run-time defence is shown to stand on its own. Shared by tests/test_hostile.py (CPU, Triton
interpreter) and bench/hostile_gpu.py (the GPU-only ones, on the H200).

case: name -> (make(base_code) -> code, expected substring(s) of the rejection, where)
where: "any" (interpreter and GPU), "gpu" (needs CUDA: timing, streams, device memory)
"""
from __future__ import annotations

ALLOC = "    c = torch.empty((M, N), device=a.device, dtype=a.dtype)\n"
LAUNCH_END = "                         num_stages=cfg[\"num_stages\"])\n"
RET = "    return c\n"


def _after_alloc(extra: str):
    return lambda base: base.replace(ALLOC, ALLOC + extra)


def _replace_return(new: str):
    return lambda base: base.replace(RET, new)


def _prefix(src: str):
    return lambda base: src + base


CASES = {
    # -- outputs that were never computed
    "returns_unwritten_buffer": (_after_alloc("    return c\n"), ("NaN", "rel-L2"), "any"),
    "writes_half_the_output": (
        lambda b: b.replace("tl.store(c_ptrs, c, mask=(offs_m[:, None] < M)",
                            "tl.store(c_ptrs, c, mask=(offs_m[:, None] < M // 2)"),
        ("NaN", "rel-L2"), "any"),
    "returns_zeros": (_after_alloc("    return torch.zeros((M, N), device=a.device, dtype=a.dtype)\n"),
                      "rel-L2 1.000e+00", "any"),
    "returns_constant": (_after_alloc("    return torch.full((M, N), 0.01, device=a.device, dtype=a.dtype)\n"),
                         "rel-L2", "any"),
    "returns_nan": (_after_alloc("    return torch.full((M, N), float('nan'), device=a.device, dtype=a.dtype)\n"),
                    "NaN", "any"),
    "wrong_dtype": (_replace_return("    return c.float()\n"), "dtype", "any"),
    "lazy_subclass": (lambda b: b.replace("def matmul(a, b):", "class Lazy(torch.Tensor):\n    pass\n\n\ndef matmul(a, b):")
                      .replace(RET, "    return c.as_subclass(Lazy)\n"), "plain torch.Tensor", "any"),
    # -- inputs
    "mutates_input": (  # the kernel itself writes into its input (no torch op to catch)
        lambda b: b.replace("        acc += tl.dot(a, b)\n",
                            "        acc += tl.dot(a, b)\n"
                            "        tl.store(a_ptrs, a * 2, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left))\n"),
        "input 0 was modified", "any"),
    # -- caching across calls
    "caches_by_shape": (
        lambda b: b.replace("CONFIG = dict(", "_CACHE = {}\nCONFIG = dict(").replace(
            "    M, K = a.shape\n", "    M, K = a.shape\n    if (tuple(a.shape), tuple(b.shape)) in _CACHE:\n"
            "        return _CACHE[(tuple(a.shape), tuple(b.shape))]\n").replace(
            RET, "    _CACHE[(tuple(a.shape), tuple(b.shape))] = c\n    return c\n"),
        "rel-L2", "any"),
    # -- torch doing the op
    "torch_fallback_matmul": (_after_alloc("    return a.__matmul__(b)\n"), "computed with torch ops", "any"),
    "torch_mm_via_getattr": (_after_alloc("    return getattr(torch, 'mm')(a, b)\n"), "computed with torch ops", "any"),
    "try_except_fallback": (_after_alloc("    try:\n        raise RuntimeError('kernel failed')\n"
                                         "    except RuntimeError:\n        return torch.mm(a, b)\n"),
                            "computed with torch ops", "any"),
    # -- shape-specific behaviour: right on most shapes, wrong on one odd one
    "shape_specific": (_after_alloc("    if M == 130 or M == 4095:\n        return torch.zeros_like(c)\n"),
                       "rel-L2", "any"),
    # -- tampering with the harness
    "patches_event_timer": (_prefix("import torch\ntorch.cuda.Event.elapsed_time = lambda self, end: 0.001\n"),
                            "replaced torch.cuda.Event.elapsed_time", "any"),
    "patches_checker": (_prefix("import sys\nsys.modules['__main__'].validate = lambda *a, **k: 0.0\n"),
                        "replaced checker.validate", "any"),
    "patches_sync": (_prefix("import torch\ntorch.cuda.synchronize = lambda *a, **k: None\n"),
                     "replaced torch.cuda.synchronize", "any"),
    # -- the outside world
    "network_access": (_after_alloc("    import socket\n    s = socket.socket()\n    s.connect(('127.0.0.1', 9))\n"),
                       "socket", "any"),
    "forks": (_after_alloc("    import os\n    os.fork()\n"), "os.fork", "any"),
    "starts_thread": (_after_alloc("    import threading, time\n    threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"),
                      "started threads", "any"),
    "shell_command": (_after_alloc("    import os\n    os.system('true')\n"), "os.system", "any"),
    # -- behaving only while checked: call counting, then stale or garbage outputs when timed
    "call_counting_then_garbage": (
        lambda b: b.replace("CONFIG = dict(", "_CALLS = [0]\nCONFIG = dict(").replace(
            ALLOC, ALLOC + "    _CALLS[0] += 1\n    if _CALLS[0] > 12:\n        return c\n"),
        "timed call", "gpu"),
    "caches_by_pointer_when_timed": (
        lambda b: b.replace("CONFIG = dict(", "_PTR = {}\nCONFIG = dict(").replace(
            "    M, K = a.shape\n", "    M, K = a.shape\n    key = (a.data_ptr(), b.data_ptr())\n"
            "    if key in _PTR:\n        return _PTR[key]\n").replace(
            RET, "    _PTR[key] = c\n    return c\n"),
        "timed call", "gpu"),
    "side_stream_work": (
        lambda b: b.replace("CONFIG = dict(", "_SIDE = []\nCONFIG = dict(").replace(
            "    grid = (", "    if not _SIDE:\n        _SIDE.append(torch.cuda.Stream())\n"
            "    _SIDE[0].wait_stream(torch.cuda.current_stream())\n    grid = (").replace(
            "    _matmul_kernel[grid](", "    with torch.cuda.stream(_SIDE[0]):\n        _matmul_kernel[grid](")
        .replace(LAUNCH_END, LAUNCH_END.replace("                         ", "                             ")),
        "escaped the timed stream", "gpu"),
    # -- faults
    "illegal_memory_access": (
        lambda b: b.replace("    c_ptrs = c_ptr + offs_m[:, None] * stride_cm",
                            "    c_ptrs = c_ptr + (1 << 40) + offs_m[:, None] * stride_cm"),
        "illegal memory access", "gpu"),
    "out_of_memory": (_after_alloc("    junk = torch.empty((1 << 45,), device=a.device, dtype=torch.uint8)\n"),
                      "OutOfMemory", "gpu"),
}

# Faults that kill or hang the checker process itself: the backend must turn them into clean
# errors (no result line, timeout) and the next candidate must run in a fresh process.
FAULTS = {
    "segfault": (_prefix("import ctypes\nctypes.string_at(0)\n"), "no KERNLOOP_RESULT line"),
    "infinite_loop": (_prefix("while True:\n    pass\n"), "timed out"),
    "huge_stdout": (_prefix("import sys\nfor _ in range(300):\n    sys.stderr.write('x' * 1_000_000)\n"
                            "    print('y' * 1_000_000)\n"), None),
}


def expected_in(expected, error: str) -> bool:
    alts = expected if isinstance(expected, tuple) else (expected,)
    return any(a in (error or "") for a in alts)
