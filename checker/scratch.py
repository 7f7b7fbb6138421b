"""Each worker's own scratch folder, fresh for every job: its working directory, TMPDIR and
Triton cache, the one place its Landlock domain lets it write. Made by the judge (given to the
worker's user id where the worker runs under its own), removed at the end of the job, and
reported if anything is left. Also the environment a worker starts with: no Triton override,
dump or preload variables that would make the compiler or the loader run something else.
Leaf module (stdlib).
"""
from __future__ import annotations

import os
import shutil
import tempfile

# Variables that change what Triton compiles or runs, or what a spawned tool loads.
UNSAFE_ENV = ("TRITON_KERNEL_OVERRIDE", "TRITON_OVERRIDE_DIR", "TRITON_KERNEL_DUMP",
              "TRITON_DUMP_DIR", "TRITON_CACHE_MANAGER", "TRITON_REMOTE_CACHE_BACKEND",
              "LD_PRELOAD", "LD_AUDIT", "GCC_EXEC_PREFIX", "COMPILER_PATH", "PYTHONSTARTUP",
              "PYTHONINSPECT", "PYTHONBREAKPOINT")
TEST_SEAM_ENV = "KERNLOOP_TEST_SEAM"


def make_job(base: str | None = None) -> str:
    """A fresh folder for one job's workers (mode 0711: each worker's own below it is 0700)."""
    d = tempfile.mkdtemp(prefix="kernloop-job-", dir=base)
    os.chmod(d, 0o711)
    return d


def make_worker(job: str, role: str, uid: int | None) -> str:
    """The worker's folder with tmp/ and triton/ in it, owned by `uid` when given."""
    d = os.path.join(job, role)
    for sub in ("", "tmp", "triton"):
        p = os.path.join(d, sub)
        os.makedirs(p, mode=0o700, exist_ok=True)
        if uid is not None and uid >= 0:
            os.chown(p, uid, uid)
    return d


def worker_env(base: dict, scratch: str, own_cache: bool) -> dict:
    """The worker's environment: the judge's, less UNSAFE_ENV and the test seam, with its
    TMPDIR (and, with `own_cache`, TRITON_CACHE_DIR) in its scratch folder."""
    env = {k: v for k, v in base.items() if k not in UNSAFE_ENV and k != TEST_SEAM_ENV}
    env.update(TMPDIR=os.path.join(scratch, "tmp"), PYTHONDONTWRITEBYTECODE="1")
    if own_cache:
        env["TRITON_CACHE_DIR"] = os.path.join(scratch, "triton")
    return env


def fork_server_env(base: dict) -> dict:
    """The worker fork server's environment (checker/zygote.py): the judge's, less UNSAFE_ENV and
    the test seam, as a worker's (each forked worker then takes its own, worker_env's)."""
    env = {k: v for k, v in base.items() if k not in UNSAFE_ENV and k != TEST_SEAM_ENV}
    # Triton reads TRITON_INTERPRET when it is imported (here, once): its workers run the interpreter,
    # or have no GPU to run anything else on (sides.spawn)
    env.update(PYTHONDONTWRITEBYTECODE="1", TRITON_INTERPRET="1")
    return env


def remove(job: str) -> list[str]:
    """Remove the job's folder; return what could not be removed (empty when all went)."""
    shutil.rmtree(job, ignore_errors=True)
    left = []
    for root, dirs, files in os.walk(job):
        left += [os.path.join(root, n) for n in dirs + files]
    return left[:20] + ([job] if os.path.exists(job) and not left else [])
