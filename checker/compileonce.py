"""One Triton compile per specialization and one C launcher build per source among a worker's
prewarm threads (timing.prewarm calls the kernel on every shape at once, one thread each).

Why: Triton's JIT looks a specialization up in its kernel cache and compiles on a miss, with no
lock, so two threads whose shapes share a specialization both compile it (the matmul spec's
1000^3 and 4095x3001x1999 shapes: four threads, three specializations, four compiles on the
H200 in results/session13). Triton 3.6 then builds one C launcher per signature at the first
launch, also with no lock: threads that finish their compiles close together each run the C
compiler on the same source, and the last of those builds was what ended 3 of 11 traced prewarms,
0.1-0.23 s after the last compile. Here a thread that would repeat a compile or a launcher build
already under way waits for it and takes its result, as a later call would. Different
specializations still compile side by side; what is compiled, and from which source, is Triton's
own (the identity checks of identity.py run before any call, as before).

Harness code, installed by the worker at start-up, before any kernel exists (`install`); a
Triton without these internals is left as it is (`installed` says which parts took). Flat
sibling of worker.py; stdlib at import, Triton only inside `install`.
"""
from __future__ import annotations

import functools
import inspect
import threading

STATS = {"compiled": 0, "joined": 0}   # JIT compiles run, and calls that took one under way
_STATS_LOCK = threading.Lock()


class KeyedLocks:
    """A lock per key, made on first use (the map itself under one lock). Re-entrant: a compile
    that, through a hook, asks for the same kernel again in its own thread goes on as it would
    without the wrapper instead of waiting for itself."""

    def __init__(self):
        self._guard, self._locks = threading.Lock(), {}

    def __call__(self, key):
        with self._guard:
            return self._locks.setdefault(key, threading.RLock())


def _count(name) -> None:
    if name:
        with _STATS_LOCK:
            STATS[name] += 1


def once_per_key(real, key_of, cached, counts=(None, None)):
    """`real` wrapped so that calls with equal `key_of(*a, **k)` run one at a time, and a call
    for which `cached(*a, **k)` (read under that key's lock) is not None returns that instead of
    running `real` again. `key_of` returning None: `real` runs as it would unwrapped. `counts`:
    the STATS entries counting calls that ran `real` and calls answered from `cached`."""
    locks = KeyedLocks()

    @functools.wraps(real)
    def wrapped(*a, **k):
        key = key_of(*a, **k)
        if key is None:
            return real(*a, **k)
        with locks(key):
            hit = cached(*a, **k)
            if hit is not None:
                _count(counts[1])
                return hit
            _count(counts[0])
            return real(*a, **k)
    return wrapped


def _binder(real, *names):
    """A function of real's call arguments returning the named ones (None if they do not bind)."""
    sig = inspect.signature(real)

    def pick(*a, **k):
        try:
            b = sig.bind(*a, **k).arguments
            return tuple(b[n] for n in names)
        except (TypeError, KeyError):
            return None
    return pick


def _hashable(x):
    try:
        hash(x)
        return x
    except TypeError:
        return repr(x)


def _jit_part(JITFunction) -> bool:
    real = getattr(JITFunction, "_do_compile", None)
    if real is None or not {"self", "key", "device"} <= set(inspect.signature(real).parameters):
        return False
    pick = _binder(real, "self", "key", "device")

    def key_of(*a, **k):
        got = pick(*a, **k)
        return None if got is None else (id(got[0]), _hashable(got[2]), _hashable(got[1]))

    def cached(*a, **k):
        fn, key, device = pick(*a, **k)
        return fn.device_caches[device][0].get(key)
    JITFunction._do_compile = once_per_key(real, key_of, cached, ("compiled", "joined"))
    return True


def _launcher_part(driver) -> bool:
    real = getattr(driver, "compile_module_from_src", None)
    if real is None or "src" not in inspect.signature(real).parameters:
        return False
    pick = _binder(real, "src", "name")

    def key_of(*a, **k):
        got = pick(*a, **k)
        return None if got is None else got   # (source text, module name)
    # Serialized only: the waiting call then finds the built module in Triton's cache and loads it.
    driver.compile_module_from_src = once_per_key(real, key_of, lambda *a, **k: None)
    return True


def install() -> dict:
    """Wrap Triton's JIT compile and its CUDA launcher build in this process. Returns
    {"jit": bool, "launcher": bool}; never raises."""
    out = {"jit": False, "launcher": False}
    try:
        from triton.runtime.jit import JITFunction
        out["jit"] = _jit_part(JITFunction)
    except Exception:   # noqa: BLE001 - a Triton without these internals compiles as it always did
        pass
    try:
        from triton.backends.nvidia import driver
        out["launcher"] = _launcher_part(driver)
    except Exception:   # noqa: BLE001
        pass
    return out
