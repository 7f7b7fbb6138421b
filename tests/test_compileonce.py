"""A worker's prewarm threads share a specialization's compile (checker/compileonce.py): real
Triton JIT compiles for sm_90 (Triton's compiler and ptxas on the CPU, through a compile-only
driver: `warmup` never launches), racing threads in a fresh process, with and without the
wrapper; and the wrapper's own rules on plain functions (one run per key, other keys side by
side, a failure not cached)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
from checker import compileonce  # noqa: E402

# A fresh process (a file: Triton reads a @jit function's source from it): a compile-only Triton driver for a CUDA target, then `threads` threads that
# warm the kernel up at once on `sizes` (one specialization per size divisible by 16 or not).
RACE = r"""
import json, os, sys, threading, time
import torch, triton, triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.backends.driver import DriverBase
from triton.runtime import driver

class CompileOnly(DriverBase):
    @staticmethod
    def is_active(): return True
    def get_current_target(self): return GPUTarget("cuda", 90, 32)
    def get_current_device(self): return 0
    def get_current_stream(self, device=None): return 0
    def get_active_torch_device(self): return torch.device("cpu")
    def map_python_to_cpp_type(self, ty): return ty
    def get_benchmarker(self): raise NotImplementedError
    def get_device_interface(self): return torch.cpu
    def get_empty_cache_for_benchmark(self): raise NotImplementedError
    def clear_cache(self, cache): pass

driver.set_active(CompileOnly())
sys.path.insert(0, sys.argv[1])
from checker import compileonce
installed = compileonce.install() if sys.argv[2] == "on" else None
sizes = json.loads(sys.argv[3])
compiles = []
real = triton.compiler.compile
def counted(*a, **k):   # the JIT takes triton.compiler.compile at its first call (create_binder)
    compiles.append(1)
    return real(*a, **k)
triton.compiler.compile = counted

@triton.jit
def double(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + i, tl.load(x_ptr + i, mask=i < n) * 2, mask=i < n)

x, y = torch.empty(4096, dtype=torch.float16), torch.empty(4096, dtype=torch.float16)
errors = []
def one(n):
    try:
        double.warmup(x, y, n, BLOCK=256, grid=(1,))
    except BaseException as e:
        errors.append(repr(e))
ts = [threading.Thread(target=one, args=(n,)) for n in sizes]
[t.start() for t in ts]
[t.join() for t in ts]
print(json.dumps({"installed": installed, "compiles": len(compiles), "errors": errors,
                  "stats": compileonce.STATS, "kernels": len(double.device_caches[0][0])}))
"""


def _race(tmp_path: Path, mode: str, sizes: list[int]) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / f"cache-{mode}")
    script = tmp_path / "race.py"
    script.write_text(RACE)
    p = subprocess.run([sys.executable, str(script), str(ROOT), mode, json.dumps(sizes)],
                       capture_output=True, text=True, env=env, timeout=300, cwd=str(tmp_path))
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_threads_racing_to_one_specialization_compile_it_once_with_the_wrapper(tmp_path):
    sizes = [1024, 2048, 3072, 1000]   # three divisible by 16 (one specialization), one not
    off = _race(tmp_path, "off", sizes)
    on = _race(tmp_path, "on", sizes)
    assert not off["errors"] and not on["errors"], (off, on)
    assert off["kernels"] == on["kernels"] == 2   # the same two specializations either way
    # Triton alone compiles once per thread that missed its cache: 4 here on every local run,
    # but a thread may start after another's compile landed, so the race is only reported
    print("compiles without the wrapper:", off["compiles"])
    assert on["installed"]["jit"] is True
    assert on["compiles"] == 2, on   # with the wrapper: exactly one per specialization
    assert on["stats"] == {"compiled": 2, "joined": 2, "launchers_ahead": 0}, on   # 3.8: no per-signature launcher


def test_equal_keys_run_once_and_wait_other_keys_run_side_by_side():
    store, running, peak, lock = {}, [0], [0], threading.Lock()
    both = threading.Barrier(2, timeout=60)   # a's and b's compiles: passed only side by side

    def real(key):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        both.wait()
        time.sleep(0.2)   # a's other callers arrive while it runs, and join it
        with lock:
            running[0] -= 1
        store[key] = f"kernel-{key}"
        return store[key]
    before = dict(compileonce.STATS)
    f = compileonce.once_per_key(real, lambda k: k, lambda k: store.get(k), ("compiled", "joined"))
    out = []
    ts = [threading.Thread(target=lambda k=k: out.append(f(k))) for k in "aaab"]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert sorted(out) == ["kernel-a"] * 3 + ["kernel-b"]
    assert compileonce.STATS["compiled"] - before["compiled"] == 2   # a once, b once
    assert compileonce.STATS["joined"] - before["joined"] == 2       # two threads took a's
    assert peak[0] == 2 and not both.broken              # a and b compiled side by side


def test_a_failed_run_is_not_cached_the_next_caller_runs_it_again():
    calls = []

    def real(key):
        calls.append(key)
        raise RuntimeError("compile failed")
    f = compileonce.once_per_key(real, lambda k: k, lambda k: None)
    for _ in range(2):
        try:
            f("a")
        except RuntimeError as e:
            assert "compile failed" in str(e)
    assert calls == ["a", "a"]   # as Triton alone: every call that finds no kernel compiles


def test_an_unbindable_call_or_a_missing_internal_is_left_to_triton():
    f = compileonce.once_per_key(lambda *a: ("ran", a), lambda *a: None, lambda *a: "never")
    assert f(1, 2) == ("ran", (1, 2))   # key None: the real function, unwrapped

    class Old:   # a Triton whose JIT has no _do_compile(self, key, ..., device)
        def _do_compile(self, spec):
            return spec
    assert compileonce._jit_part(Old) is False and Old._do_compile(Old(), 3) == 3


def test_the_launcher_build_is_serialized_per_source():
    """Triton 3.6 builds a C launcher per signature at first launch (not 3.8: no such module
    function there, so the part reports False on this machine's Triton)."""
    class Driver:   # a module-like stand-in with Triton 3.6's function signature
        running, peak, built = 0, 0, []

        @classmethod
        def compile_module_from_src(cls, src, name, library_dirs=None, include_dirs=None,
                                    libraries=None):
            cls.running += 1
            cls.peak = max(cls.peak, cls.running)
            time.sleep(0.1)
            cls.built.append((src, name))
            cls.running -= 1
            return name
    assert compileonce._launcher_part(Driver) is True
    ts = [threading.Thread(target=Driver.compile_module_from_src, args=("same C", "__triton_launcher"))
          for _ in range(3)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert Driver.peak == 1 and len(Driver.built) == 3   # one at a time; the later ones load it


def test_the_same_key_asked_again_inside_its_own_run_does_not_wait_for_itself():
    store, depth = {}, []

    def real(key):
        depth.append(key)
        if len(depth) == 1:   # e.g. a Triton hook that launches the kernel it is compiling
            inner = f(key)
            return f"outer({inner})"
        store[key] = "inner"
        return "inner"
    f = compileonce.once_per_key(real, lambda k: k, lambda k: store.get(k))
    t = threading.Thread(target=lambda: depth.append(f("a")), daemon=True)
    t.start()
    t.join(5)
    assert not t.is_alive(), "the wrapper deadlocked on its own key"
    assert depth == ["a", "a", "outer(inner)"]


def _driver_36():
    """A module-like stand-in with Triton 3.6's launcher functions (make_launcher reads only the
    signature's types; compile_module_from_src builds for 0.15 s, records what it built and sets
    `one_built`)."""
    class Driver:
        built, include_dirs, libraries = [], ["inc"], ["cuda"]
        one_built = threading.Event()

        @staticmethod
        def library_dirs():
            return ["lib"]

        @staticmethod
        def make_launcher(constants, signature, tensordesc_meta):
            return "C for " + ",".join(signature.values())

        @classmethod
        def compile_module_from_src(cls, src, name, library_dirs=None, include_dirs=None, libraries=None):
            time.sleep(0.15)
            cls.built.append((src, name, time.monotonic()))
            cls.one_built.set()
            return name
    return Driver


def test_launcher_types_take_pointers_scalars_and_constexprs_only():
    assert compileonce.launcher_types({"a": "*bf16", "n": "i32", "B": "constexpr"}) == ("*bf16", "i32", "constexpr")
    assert compileonce.launcher_types({"d": "tensordesc<bf16[64, 64]>", "n": "i32"}) is None   # needs metadata
    assert compileonce.launcher_types({"t": ("*fp16", "i32")}) is None   # a tuple argument
    assert compileonce.launcher_types({"x": "*fp16); system(\"id\"); (void"}) is None   # never C text
    assert compileonce.launcher_types({}) is None and compileonce.launcher_types(None) is None


def test_a_compile_starts_its_launcher_build_beside_it_once_per_signature():
    Driver = _driver_36()
    assert compileonce._launcher_part(Driver) is True
    ahead = compileonce.launcher_ahead(Driver)
    waited = {}

    class JIT:   # Triton 3.6's _do_compile(self, key, signature, device, ...)
        device_caches = {0: ({},)}

        def _do_compile(self, key, signature, device, constexprs=None, options=None, attrs=None, warmup=False):
            waited[key] = Driver.one_built.wait(60)   # the compile lasts until a launcher is built
            self.device_caches[device][0][key] = f"kernel-{key}"
            return self.device_caches[device][0][key]
    assert compileonce._jit_part(JIT, ahead) is True
    before = compileonce.STATS["launchers_ahead"]
    sig = {"a": "*bf16", "b": "*bf16", "n": "i32", "BLOCK": "constexpr"}
    fn = JIT()
    ts = [threading.Thread(target=fn._do_compile, args=(k, sig, 0)) for k in ("spec1", "spec2")]
    [t.start() for t in ts]
    [t.join() for t in ts]
    compileonce.settle()   # the worker joins them before each reply: the judge counts its threads
    assert not [t for t in threading.enumerate() if t.name == "launcher-ahead"]
    assert [b[:2] for b in Driver.built] == [("C for *bf16,*bf16,i32,constexpr", "__triton_launcher")]   # once
    assert waited == {"spec1": True, "spec2": True}   # built while the compiles ran, not after
    assert compileonce.STATS["launchers_ahead"] - before == 1
    # Triton's own build after the compile (same source) is serialized behind it and finds it
    Driver.compile_module_from_src(src="C for *bf16,*bf16,i32,constexpr", name="__triton_launcher")
    assert len(Driver.built) == 2


def test_no_launcher_ahead_without_triton_36s_per_signature_launcher():
    class Driver38:   # Triton 3.8: one generic launcher, no make_launcher
        pass
    assert compileonce.launcher_ahead(Driver38) is None
