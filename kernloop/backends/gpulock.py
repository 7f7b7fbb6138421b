"""One lock per GPU across processes, so that two runs, or a run and an MCP `check`, time their jobs one after the other instead of side by side.

    with gpulock.held("0"):      # the GPU that CUDA_VISIBLE_DEVICES=0 pins
        ...one timed job...

The lock is an advisory `flock` on a file per GPU in KERNLOOP_GPU_LOCK_DIR (default: a
`kernloop-gpu-locks` folder in the system's temporary folder). The kernel drops it when the
holder exits, killed or not, so a crashed run never leaves a GPU locked.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import re
import tempfile
from pathlib import Path

from kernloop import settings


def lock_dir() -> Path:
    return Path(settings.get("KERNLOOP_GPU_LOCK_DIR") or Path(tempfile.gettempdir()) / "kernloop-gpu-locks")


def lock_path(slot: str) -> Path:
    """The lock file of one GPU, named by the CUDA_VISIBLE_DEVICES entry (an index or a UUID)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", str(slot))[:100] or "0"
    return lock_dir() / f"gpu-{safe}.lock"


@contextlib.contextmanager
def held(slot: str):
    """Hold the GPU's lock for the body; waits while another process holds it."""
    path = lock_path(slot)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)   # blocks until the holder releases it or exits
        yield path
    finally:
        os.close(fd)   # closing the descriptor releases the flock
