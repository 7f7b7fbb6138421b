"""The judge and its workers, one self-contained package (stdlib, torch, Triton) shipped whole to where a kernel is timed.

Its modules import each other relatively and nothing of `kernloop`; every process of it starts as
a module (`python -m checker.check`, `checker.serve`, `checker.worker`, `checker.ncu`) with its
working directory the folder that holds this package. The helpers below are what every backend
uses to ship it, start it and read what its processes printed (stdlib only: importing the package
runs nothing else).
"""
from __future__ import annotations

import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))   # this package's folder
ROOT = os.path.dirname(HERE)                         # the folder that holds it: a process's cwd


def files() -> list[str]:
    """Every .py file of the package (absolute paths, sorted): what a job needs of the checker,
    new modules included without a list to keep."""
    return sorted(os.path.join(HERE, n) for n in os.listdir(HERE) if n.endswith(".py"))


def ship(folder) -> str:
    """Copy the package into `folder` as `folder/checker/` (its .py files only; an older copy
    there is replaced); return that path. `folder` is then the cwd of `command`'s processes."""
    dest = os.path.join(os.fspath(folder), "checker")
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(dest)
    for src in files():
        shutil.copyfile(src, os.path.join(dest, os.path.basename(src)))
    return dest


def command(module: str, *flags: str) -> list[str]:
    """The argv that starts `checker.<module>` with this Python; run it with cwd = the folder
    that holds the package (ROOT, or the job folder `ship` copied it into)."""
    return [sys.executable, "-m", f"checker.{module}", *map(str, flags)]


OUTPUT_CAP = 1_000_000   # bytes kept of a process's stream (a candidate may print gigabytes)


def read_capped(f, cap: int = OUTPUT_CAP) -> str:
    """A binary file of a process's output, its first and last `cap`/2 bytes when longer."""
    f.seek(0, os.SEEK_END)
    size = f.tell()
    f.seek(0)
    head = f.read(cap // 2)
    if size > cap:
        f.seek(size - cap // 2)
        head += b"\n[... output truncated ...]\n" + f.read()
    return head.decode("utf-8", "replace")
