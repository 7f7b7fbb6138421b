#!/usr/bin/env python3
"""Nsight Compute on one call of a kernel entry: run ncu in a child process, read its raw CSV page.

  python -m checker.ncu --target --spec spec.json --kernel k.py     (what ncu runs, with cwd the
                                           folder holding the package; one call in a profiler range)

`run_ncu` is the runner (KERNLOOP_NCU=auto uses ncu when it is on PATH, off never does);
`parse_raw_csv` and `summarize_kernels` are pure. ncu runs with `--clock-control none` (the GPU
keeps its own clocks, as in the timed runs) and its default `--cache-control all` (caches flushed
before each replay pass, as the checker's flush does before each timed call).
"""
from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import ROOT   # the folder holding the package: the profiled child's cwd

# short name -> ncu metric (Nsight Compute metric names, sm_70 and later)
METRICS = {
    "dram_read_bytes": "dram__bytes_read.sum",
    "dram_write_bytes": "dram__bytes_write.sum",
    "time_ns": "gpu__time_duration.sum",
    "dram_pct": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "memory_pct": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "l2_pct": "lts__throughput.avg.pct_of_peak_sustained_elapsed",
    "l1_pct": "l1tex__throughput.avg.pct_of_peak_sustained_active",
    "sm_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "issue_active_pct": "smsp__issue_active.avg.pct_of_peak_sustained_active",
    "achieved_occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
}
# Warp stall reasons: warps stalled for that reason per issued instruction (ncu's WarpStateStats).
STALL_REASONS = ("long_scoreboard", "short_scoreboard", "wait", "barrier", "mio_throttle",
                 "lg_throttle", "math_pipe_throttle", "not_selected", "no_instruction",
                 "branch_resolving", "dispatch_stall", "membar", "drain", "imc_miss", "tex_throttle",
                 "sleeping", "misc")
STALL_METRIC = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
ALL_METRICS = list(METRICS.values()) + [STALL_METRIC.format(r) for r in STALL_REASONS]

# ncu's unit strings -> factor to base units (bytes, nanoseconds); "%" and ratios stay as they are
UNIT = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "Tbyte": 1e12,
        "nsecond": 1, "usecond": 1e3, "msecond": 1e6, "second": 1e9}
MODES = ("auto", "off")


class NcuError(Exception):
    """ncu could not be run or its output could not be read."""


def ncu_mode(env=None) -> str:
    v = (env if env is not None else os.environ).get("KERNLOOP_NCU", "auto").strip().lower() or "auto"
    if v not in MODES:
        raise NcuError(f"KERNLOOP_NCU must be one of {', '.join(MODES)}, got {v!r}")
    return v


def find_ncu(env=None) -> str | None:
    """The ncu binary to use, or None when KERNLOOP_NCU=off or ncu is not on PATH."""
    env = env if env is not None else os.environ
    if ncu_mode(env) == "off":
        return None
    return shutil.which("ncu", path=env.get("PATH"))


def _number(text: str):
    t = text.strip().replace(",", "")
    if not t or t.lower() in ("n/a", "nan", "-"):
        return None
    try:
        return float(t)
    except ValueError:
        return None


def parse_raw_csv(text: str) -> list[dict]:
    """Kernels in ncu's `--csv --page raw` output (one row per profiled kernel after a units row).

    Lines before the header (ncu's ==PROF== notes, the program's own output) are skipped.
    Values are converted to bytes and nanoseconds from the units row; thousands separators are
    removed. Raises NcuError if there is no header row."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID",')), None)
    if start is None:
        raise NcuError("no ncu raw CSV header in the output")
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    head, body = rows[0], rows[1:]
    units = {}
    if body and body[0] and body[0][0] == "":
        units = dict(zip(head, body[0]))
        body = body[1:]
    short = {v: k for k, v in METRICS.items()}
    stall = {STALL_METRIC.format(r): r for r in STALL_REASONS}
    kernels = []
    for row in body:
        if len(row) < len(head) or not row[0].strip():
            continue
        d = dict(zip(head, row))
        k = {"name": d.get("Kernel Name", ""), "block": d.get("Block Size"), "grid": d.get("Grid Size"),
             "metrics": {}, "stalls": {}}
        for col, val in d.items():
            if col not in short and col not in stall:
                continue
            x = _number(val)
            if x is not None:
                x *= UNIT.get(units.get(col, "").strip(), 1)
            if col in short:
                k["metrics"][short[col]] = x
            else:
                k["stalls"][stall[col]] = x
        kernels.append(k)
    return kernels


def summarize_kernels(kernels: list[dict], top: int = 3) -> dict | None:
    """Counters of one call: DRAM bytes and time summed over its kernels; throughputs, occupancy
    and the top stall reasons of its longest kernel (the one that sets the time)."""
    if not kernels:
        return None

    def total(key):
        xs = [k["metrics"].get(key) for k in kernels]
        return sum(xs) if all(x is not None for x in xs) else None
    main = max(kernels, key=lambda k: k["metrics"].get("time_ns") or 0.0)
    stalls = sorted(((r, v) for r, v in main["stalls"].items() if v), key=lambda rv: -rv[1])
    out = {"kernels": len(kernels), "main_kernel": main["name"],
           "dram_read_bytes": total("dram_read_bytes"), "dram_write_bytes": total("dram_write_bytes"),
           "time_ns": total("time_ns"),
           "top_stalls": [{"reason": r, "per_issue": v} for r, v in stalls[:top]]}
    for key in ("dram_pct", "memory_pct", "l2_pct", "l1_pct", "sm_pct", "issue_active_pct",
                "achieved_occupancy_pct"):
        out[key] = main["metrics"].get(key)
    return out


def child_env(env=None) -> dict:
    """What the profiled child gets: the CUDA/Triton setup, never keys or tokens."""
    env = env if env is not None else os.environ
    keep = ("PATH", "HOME", "LANG", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_HOME",
            "TRITON_CACHE_DIR", "TRITON_HOME", "TORCHINDUCTOR_CACHE_DIR", "PYTHONPATH",
            "PYTHONPYCACHEPREFIX", "TMPDIR")
    return {k: env[k] for k in keep if k in env}


def ncu_command(ncu: str, spec_path, kernel_path, log_path, sha256: str | None = None) -> list[str]:
    return [ncu, "--clock-control", "none", "--profile-from-start", "off", "--target-processes", "all",
            "--csv", "--page", "raw", "--print-units", "base", "--metrics", ",".join(ALL_METRICS),
            "--log-file", str(log_path),
            sys.executable, "-m", "checker.ncu", "--target", "--spec", str(Path(spec_path).resolve()),
            "--kernel", str(Path(kernel_path).resolve()), *(["--sha256", sha256] if sha256 else [])]



def run_ncu(spec_path, kernel_path, ncu: str | None = None, timeout_s: float = 120.0,
            sha256: str | None = None, stop=None) -> dict:
    """Profile one call of the kernel file's entry on the spec's timed shape. Never raises for a
    kernel or ncu failure: the result says `ok` false and why (the profile is optional).
    `stop()` true (a warm judge has a job waiting for the GPU): ncu is killed, `preempted`."""
    ncu = ncu or find_ncu()
    if not ncu:
        why = "KERNLOOP_NCU=off" if ncu_mode() == "off" else \
            "ncu (Nsight Compute) is not on PATH on this machine: no hardware counters"
        return {"ok": False, "skipped": True, "error": why}
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kernloop_ncu_") as tmp:
        log = Path(tmp) / "ncu.csv"
        cmd = ncu_command(ncu, spec_path, kernel_path, log, sha256)
        # its own Triton cache and no bytecode: the kernel file runs here outside a worker
        env = dict(child_env(), TRITON_CACHE_DIR=str(Path(tmp) / "triton"), PYTHONDONTWRITEBYTECODE="1")
        p, why = _run(cmd, timeout_s, stop, env)
        if why:
            return {"ok": False, "error": why, "cost_s": time.monotonic() - t0,
                    "preempted": why.startswith("preempted")}
        text = log.read_text() if log.exists() else p.stdout
    res = {"ok": False, "cost_s": time.monotonic() - t0, "returncode": p.returncode}
    try:
        kernels = parse_raw_csv(text)
    except NcuError as e:
        res["error"] = f"{e} (rc {p.returncode}): {(p.stderr or text)[-500:]}"
        return res
    res.update(ok=bool(kernels), kernels=kernels, counters=summarize_kernels(kernels),
               error=None if kernels else "ncu profiled no kernel")
    return res


def _run(cmd, timeout_s: float, stop, env: dict):
    """(finished process with its stdout/stderr text, None) or (None, why it was stopped)."""
    if stop is None:
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                                  env=env, cwd=ROOT), None
        except subprocess.TimeoutExpired:
            return None, f"ncu timed out after {timeout_s:g} s"
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, env=env, cwd=ROOT)
        end = time.monotonic() + timeout_s
        while p.poll() is None:
            why = "preempted: a job is waiting for the GPU" if stop() else \
                f"ncu timed out after {timeout_s:g} s" if time.monotonic() > end else None
            if why:
                p.kill()
                p.wait()
                return None, why
            time.sleep(0.05)
        out.seek(0)
        err.seek(0)
        p.stdout, p.stderr = out.read(), err.read()
        return p, None


def _target(spec_path: str, kernel_path: str, sha256: str | None = None) -> int:
    """One warm call of the entry inside cudaProfilerStart/Stop (what ncu profiles). The file is
    read once and loaded as the worker loads it (identity.py): with `sha256`, only the bytes the
    contract judged, and only if Triton would compile the defs that were judged."""
    import json
    import secrets
    import torch

    from . import identity
    from .validate import make_inputs, torch_dtype
    spec = json.loads(Path(spec_path).read_text())
    dev = torch.device("cuda", torch.cuda.current_device())
    args = make_inputs(torch, spec, spec["shapes"][0], dev, lambda n: torch_dtype(torch, n),
                       secrets.randbits(62))
    raw = Path(kernel_path).read_bytes()
    _, fn, _ = identity.load(raw, sha256, f"<kernloop-ncu-{identity.digest(raw)[:16]}>",
                             "kernloop_ncu_target", spec["entry"])
    for _ in range(2):   # compile, then one warm call: the profiled call launches only
        fn(*args)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    fn(*args)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    return 0


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", action="store_true", required=True)
    ap.add_argument("--spec", required=True)
    ap.add_argument("--kernel", required=True)
    ap.add_argument("--sha256")
    a = ap.parse_args()
    sys.exit(_target(a.spec, a.kernel, a.sha256))
