"""Hostile and faulty candidates, built from the naive matmul baseline.

Each case is a kernel file that cheats (or breaks) the way generated kernels have cheated real
harnesses. They are fed to the checker directly, bypassing the static contract, so that each
run-time defence is shown to stand on its own. Shared by tests/test_hostile.py (CPU, Triton
interpreter) and benchmarks/hostile_gpu.py (the GPU-only ones, on the H200).

case: name -> (make(base_code) -> code, expected substring(s) of the rejection, where)
where: "any" (interpreter and GPU), "gpu" (needs CUDA: timing, streams, device memory),
"timed" (needs the A/B: the GPU, or the interpreter with the judge's --host-clock)
"""
from __future__ import annotations

ALLOC = "    c = torch.empty((M, N), device=a.device, dtype=a.dtype)\n"
LAUNCH_END = "                         num_stages=cfg[\"num_stages\"])\n"
RET = "    return c\n"
FAST_FROM = "CONFIG = dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=1, num_warps=4, num_stages=2)"
FAST_TO = "CONFIG = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3)"


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
    # on the GPU the cast is caught as a torch op first (benchmarks/results/session10 call 2), in the
    # interpreter (which allows _to_copy) by the dtype check
    "wrong_dtype": (_replace_return("    return c.float()\n"), ("dtype", "torch ops _to_copy"), "any"),
    # -- a right answer in a strided layout: the worker's untimed copy-out would do the transpose
    "returns_transposed_view": (
        lambda b: b.replace(ALLOC, "    c = torch.empty((N, M), device=a.device, dtype=a.dtype).t()\n"),
        "contiguous", "any"),
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
    # -- shape-specific behaviour: right on most shapes, wrong on one odd one; fast on the timed
    # shape (the tuner's 128x128x64 tiles), so that on the GPU its A/B may promote it and the
    # judge checks the other shapes after it (judge.check_first): there it fails
    "shape_specific": (lambda b: _after_alloc("    if M == 130 or M == 4095:\n        return torch.zeros_like(c)\n")(b)
                       .replace(FAST_FROM, FAST_TO), "rel-L2", "any"),
    # -- tampering with the harness
    "patches_event_timer": (_prefix("import torch\ntorch.cuda.Event.elapsed_time = lambda self, end: 0.001\n"),
                            "replaced torch.cuda.Event.elapsed_time", "any"),
    "patches_checker": (_prefix("import sys\nsys.modules['__main__'].validate = lambda *a, **k: 0.0\n"),
                        "replaced worker.validate", "any"),
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
        ("timed call", "NaN", "rel-L2"), "gpu"),
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
        "escaped the timed region", "gpu"),
    # -- faults
    "illegal_memory_access": (
        lambda b: b.replace("    c_ptrs = c_ptr + offs_m[:, None] * stride_cm",
                            "    c_ptrs = c_ptr + (1 << 40) + offs_m[:, None] * stride_cm"),
        "illegal memory access", "gpu"),
    "out_of_memory": (_after_alloc("    junk = torch.empty((1 << 45,), device=a.device, dtype=torch.uint8)\n"),
                      "OutOfMemory", "gpu"),
}

# The judge/worker split (checker/judge.py, checker/worker.py): what a kernel in its own worker
# may try against the judge, its champion, the clock and the precision rule. Each bypasses the
# static contract and must still fail for its stated reason.
_STEAL_FRAMES = """
import gc, sys, inspect
_LOOT = []
for _o in gc.get_objects():
    if isinstance(_o, dict) and ("ref" in _o or "spot" in _o or "cases" in _o):
        _LOOT.append(_o)
for _f in inspect.stack():
    _LOOT.append(_f.frame.f_locals)
_J = sys.modules.get("judge") or sys.modules.get("__main__")
if not getattr(_J, "run", None) or _LOOT:
    raise RuntimeError("no judge state in this process: " + str(len(_LOOT)) + " dicts seen, judge run() present: " + str(bool(getattr(_J, "run", None))))
"""
_STEAL_REFS = """
import gc, torch
_REFS = [o for o in gc.get_objects() if isinstance(o, torch.Tensor) and o.dtype in (torch.float32, torch.float64) and o.dim() == 2]
if not _REFS:
    raise RuntimeError("no float reference tensor in this process")
"""
_CHAMPION = """
import sys
_C = [m for n, m in list(sys.modules.items()) if n.startswith("kernloop_") and m is not sys.modules.get(__name__)]
if not _C:
    raise RuntimeError("champion not reachable from the candidate's process")
_C[0].CONFIG["BLOCK_M"] = 16
"""
_FORGE = """
import os, json
_LINE = ("KERNLOOP_RESULT " + json.dumps({"ok": True, "correct": True, "stage": "done",
         "candidate": {"mean_ms": 0.001, "min_ms": 0.001, "median_ms": 0.001, "std_ms": 0.0001, "n": 50},
         "champion": {"mean_ms": 1.0, "min_ms": 1.0, "median_ms": 1.0, "std_ms": 0.01, "n": 50}}) + "\\n").encode()
print(_LINE.decode())
for _fd in range(1, 11):
    try:
        os.write(_fd, _LINE)
    except OSError:
        pass
try:
    for _fd in os.listdir("/proc/%d/fd" % os.getppid()):
        try:
            with open("/proc/%d/fd/%s" % (os.getppid(), _fd), "w") as _f:
                _f.write(_LINE.decode())
        except OSError:
            pass
except OSError:
    pass
"""
_FORGE_EVENTS = """
import sys
_T = sys.modules["checker.timing"]  # the worker's own timing module: time an empty pair instead
_REAL = _T.timed_call
def _fake(torch, fn, args, flush, watch):
    out, start, end, *rest = _REAL(torch, fn, args, flush, watch)   # whatever else it returns
    s2, e2 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s2.record()
    e2.record()
    return (out, s2, e2, *rest)
_T.timed_call = _fake
"""
# A file whose UTF-8 text (what the contract reads) is an honest launcher, while Python, told
# `coding: utf-7`, decodes each `+AAo-` in the comment as a newline: the entry returns torch.mm
# outside the op recorder. No '+' may appear elsewhere (UTF-7 would reject it).
UTF7_HIDDEN_MM = """# coding: utf-7
\"\"\"A matmul.\"\"\"
import torch
import triton
import triton.language as tl

CONFIG = dict(BLOCK=32)


@triton.jit
def _k(x_ptr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    tl.store(x_ptr - (-pid), 0.0)


def matmul(a, b):
    M, K = a.shape
    K2, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    # tiles +AAo-    import torch.utils._python_dispatch as d+AAo-    with d._disable_current_modes():+AAo-        return torch.mm(a, b)
    _k[(1,)](c, BLOCK=CONFIG["BLOCK"])
    return c
"""

CASES.update({
    "walks_frames_for_judge_state": (_prefix(_STEAL_FRAMES), "no judge state in this process", "any"),
    "reads_reference_tensors": (_prefix(_STEAL_REFS), "no float reference tensor", "any"),
    "reaches_champion_via_sys_modules": (_prefix(_CHAMPION), "champion not reachable", "any"),
    "forges_result_line": (lambda b: _FORGE + b.replace(ALLOC, ALLOC + "    raise ValueError('wrong')\n"),
                           ("wrong", "malformed message"), "any"),
    "subprocess_run": (_after_alloc("    import subprocess\n    subprocess.run(['true'])\n"),
                       "subprocess.Popen of true", "any"),
    "posix_spawn": (_after_alloc("    import os\n    os.posix_spawn('/bin/true', ['true'], {})\n"),
                    "os.posix_spawn of true", "any"),
    "raw_thread": (_after_alloc("    import _thread, time\n    _thread.start_new_thread(time.sleep, (30,))\n"),
                   "started threads", "any"),
    "ctypes_libc": (_after_alloc("    import ctypes\n    ctypes.CDLL(None).getpid()\n"), "ctypes.dlopen", "any"),
    "kills_parent": (_after_alloc("    import os, signal\n    os.kill(os.getppid(), signal.SIGSTOP)\n"),
                     "os.kill", "any"),
    "right_only_first_k_calls": (
        lambda b: b.replace("CONFIG = dict(", "_N = [0]\nCONFIG = dict(").replace(
            ALLOC, ALLOC + "    _N[0] += 1\n    if _N[0] > 2:\n        return torch.zeros_like(c)\n"),
        "rel-L2 1.000e+00", "any"),
    "precision_int8_operands": (  # right within the tolerance, far over the rounding floor
        lambda b: b.replace("        acc += tl.dot(a, b)\n",
                            "        a = (tl.floor(a.to(tl.float32) * 48.0 + 0.5) / 48.0).to(a.dtype)\n"
                            "        b = (tl.floor(b.to(tl.float32) * 48.0 + 0.5) / 48.0).to(b.dtype)\n"
                            "        acc += tl.dot(a, b)\n"),
        "precision downgrade", "any"),
    "forges_event_times": (_prefix(_FORGE_EVENTS), "work escaped the timed region", "gpu"),
    "exits_worker": (_after_alloc("    import os\n    os._exit(0)\n"), "worker died", "any"),
    "utf7_hides_torch_mm": (lambda b: UTF7_HIDDEN_MM, "coding declaration 'utf-7'", "any"),
    # the audit hook's tool names: any program called 'ptxas', and the real compiler under an
    # environment that makes it load or run another program
    "spawns_symlink_named_ptxas": (
        _after_alloc("    import os, subprocess, tempfile\n    d = tempfile.mkdtemp()\n"
                     "    os.symlink('/bin/true', os.path.join(d, 'ptxas'))\n"
                     "    subprocess.run([os.path.join(d, 'ptxas'), '-c', 'exit 0'], check=True)\n"),
        "subprocess.Popen of ptxas", "any"),
    "spawns_cc_with_ld_preload": (
        _after_alloc("    import os, subprocess\n    os.environ['LD_PRELOAD'] = ''\n"
                     "    subprocess.run(['cc', '--version'], check=True, stdout=subprocess.DEVNULL)\n"),
        "subprocess.Popen of cc", "any"),
})

# Right on every correctness call, wrong on about half the timed reps: the launcher tells the timed
# phase by its input's place in the arena (the timed set comes first, under 2 MiB of alignment;
# every correctness case lies past the timed shape's inputs and output), the kernel picks the reps
# from the input's first value. With k sampled reps checked this passed with probability 2^-k.
_TIMED_FLAG = "1 if a.storage_offset() < M * K + K * N + M * N else 0"
CASES["wrong_on_half_the_timed_reps"] = (
    lambda b: b.replace("GROUP_M: tl.constexpr):", "GROUP_M: tl.constexpr, TIMED: tl.constexpr):")
    .replace("    c = acc.to(c_ptr.dtype.element_ty)\n",
             "    if TIMED:\n        x = tl.load(a_ptr).to(tl.float32)\n"
             "        acc = acc * tl.where(x > 0, 0.0, 1.0)\n    c = acc.to(c_ptr.dtype.element_ty)\n")
    .replace('GROUP_M=cfg["GROUP_M"], num_warps', f'GROUP_M=cfg["GROUP_M"], TIMED={_TIMED_FLAG}, num_warps'),
    "output of timed call", "timed")

# Faults that kill or hang the checker process itself: the backend must turn them into clean
# errors (no result line, timeout) and the next candidate must run in a fresh process.
FAULTS = {
    "segfault": (_prefix("import faulthandler\nfaulthandler._sigsegv()\n"), "killed by SIGSEGV"),
    "infinite_loop": (_prefix("while True:\n    pass\n"), "timed out"),
    "huge_stdout": (_prefix("import sys\nfor _ in range(300):\n    sys.stderr.write('x' * 1_000_000)\n"
                            "    print('y' * 1_000_000)\n"), None),
}


def expected_in(expected, error: str) -> bool:
    alts = expected if isinstance(expected, tuple) else (expected,)
    return any(a in (error or "") for a in alts)

# -- the code that runs is not the code judged (issue 23): Triton's JIT compiles a kernel's text
# from the first line starting with `def NAME(` and its interpreter from the last line starting
# with `def `, both read back through inspect. Each hides a second kernel (the judged one's body
# with its output halved) where only Triton looks; the worker must refuse before any call
# (checker/identity.py). On a GPU the JIT ones would run the hidden kernel, in the interpreter
# the interpreter ones.
SIG_END = "                   GROUP_M: tl.constexpr):\n"
STORE = "    tl.store(c_ptrs, c, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))\n"
_CLOSE = "    _u = \"'''#\"\n"   # ends the hidden kernel's swallowing string where Triton reads on


def _sig(base: str) -> str:
    return base[base.index("def _matmul_kernel("):base.index(SIG_END) + len(SIG_END)]


def _hidden(base: str) -> str:
    """The kernel's own body with its output halved: right-looking, wrong."""
    body = base[base.index(SIG_END) + len(SIG_END):base.index(STORE) + len(STORE)]
    return body.replace("    c = acc.to(c_ptr.dtype.element_ty)\n",
                        "    c = (acc * 0.5).to(c_ptr.dtype.element_ty)\n")


def def_in_body_string(base: str) -> str:
    """A string in the kernel body holds a second def: the interpreter's last `def ` line."""
    hid = '    _s = """\n' + _sig(base) + _hidden(base) + "    _t = '''\"\"\"\n"
    return base.replace(STORE, STORE + _CLOSE).replace(SIG_END, SIG_END + hid, 1)


def def_in_decorator_keyword(base: str) -> str:
    """A string in a decorator keyword holds a second def: the JIT's first `def NAME(` line."""
    hid = '@triton.jit(do_not_specialize=["""\n' + _sig(base) + _hidden(base) + "    _t = '''\"\"\"])\n"
    return base.replace(STORE, STORE + _CLOSE).replace("@triton.jit\n", hid, 1)


def nested_def_same_name(base: str) -> str:
    """A nested def of the same name, never called by Python: the interpreter's last `def `."""
    nested = "".join("    " + ln if ln.strip() else ln
                     for ln in (_sig(base) + _hidden(base)).splitlines(keepends=True))
    return base.replace(STORE, STORE + nested, 1)


def code_object_swapped(base: str) -> str:
    """The kernel's Python function gets another function's code: inspect then reads that one."""
    plain = "\n\n" + _sig(base).replace("def _matmul_kernel(", "def _hidden_kernel(") + _hidden(base)
    return base.replace(STORE, STORE + plain + "\n\n_matmul_kernel.fn.__code__ = _hidden_kernel.__code__\n", 1)


CASES.update({
    "def_line_in_kernel_body_string": (def_in_body_string, "would compile other text", "any"),
    "kernel_in_decorator_keyword": (def_in_decorator_keyword, "Triton's JIT would compile other text", "any"),
    "def_keyword_then_tab": (lambda b: b.replace("def _matmul_kernel(", "def\t_matmul_kernel(", 1),
                             "Triton's interpreter would compile other text", "any"),
    "form_feed_hides_the_def": (lambda b: def_in_body_string(b).replace("def _matmul_kernel(", "\x0cdef _matmul_kernel(", 1),
                                "Triton's JIT would compile other text", "any"),
    "nested_def_same_name": (nested_def_same_name, "Triton's interpreter would compile other text", "any"),
    "code_object_swapped": (code_object_swapped, "is not the def '_matmul_kernel' of the judged bytes", "any"),
    "entry_from_module_getattr": (
        lambda b: b.replace("def matmul(a, b):", "def _impl(a, b):") + "\n\ndef __getattr__(name):\n    return _impl\n",
        "entry 'matmul' is not a plain function of the judged bytes", "any"),
    # the worker compiled the bytes it was sent, under its own filename: never the path
    "names_its_source_file": (_after_alloc("    raise RuntimeError('compiled as ' + matmul.__code__.co_filename)\n"),
                              "compiled as <kernloop-candidate-", "any"),
})
