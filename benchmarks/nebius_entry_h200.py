#!/usr/bin/env python3
"""A Nebius job's container path on this machine's GPU, without Nebius: the files a job injects,
staged read-only in a folder standing for /kernloop (the package as its checker/), and the
package's launcher run on them the way the container runs it (`python
/kernloop/checker/nebius_entry.py <words>`, the words from
nebius_jobs.entry_words, the environment without any KERNLOOP_* variable as in a container).

Two jobs, softmax (specs/softmax.yaml):
  baseline   the naive baseline against itself with `peers`: the peers timed beside it, and its
             profile (compiled kernel, occupancy, launch cost; ncu where it is on PATH, else the
             reason), as the baseline job of a Nebius run;
  candidate  benchmarks/by_hand/softmax.py (one read of each row) against the naive champion: a
             candidate that may be promoted, so the judge profiles it in the same job.
Each prints its result line's gist; the whole lines go to --out.

  python3 benchmarks/nebius_entry_h200.py --out $OUT/nebius_entry.json      (GPU, under 90 s)
  python3 benchmarks/nebius_entry_h200.py --mode interpret-timed --out /tmp/x.json
                                      (CPU: the interpreter on the host clock; numbers meaningless)
Exit status 1 when a job gives no usable result line or lacks what it must carry.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks import record  # noqa: E402  (commit, versions, device, command)

from kernloop import settings  # noqa: E402
from kernloop.backends.local import stage_job  # noqa: E402
from nebius_jobs import CONTAINER_DIR, ENTRY, MAX_INJECT_BYTES, entry_words, oversized  # noqa: E402
from kernloop.backends.nebius_settings import NebiusSettings  # noqa: E402
from kernloop.backends.resultline import parse_result_line, validate_result  # noqa: E402
from kernloop.spec import load_spec  # noqa: E402

SPEC = ROOT / "specs" / "softmax.yaml"
BY_HAND = ROOT / "benchmarks" / "by_hand" / "softmax.py"


def stage(spec, candidate: Path, champion: Path, root: Path) -> dict[str, Path]:
    """The files one job injects, under `root` (the container's /kernloop), read-only."""
    files = stage_job(spec, candidate, champion, root)
    big = oversized(files)
    if big:
        raise SystemExit(f"over the {MAX_INJECT_BYTES // 1024} KiB inject limit: {', '.join(big)}")
    for p in files.values():
        p.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    return files


def run_job(name: str, words: list[str], root: Path, timeout_s: float) -> dict:
    """The container's command on the staged folder; its result line and what came with it."""
    argv = [sys.executable, str(root / ENTRY), *words]   # the job: python /kernloop/checker/nebius_entry.py
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNLOOP_")}
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         cwd=tempfile.gettempdir(), stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        stdout, stderr = p.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:   # the entry, its checker and the workers: the whole group
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        return {"name": name, "ok": False, "error": f"timed out after {timeout_s:g} s",
                "args": " ".join([f"{CONTAINER_DIR}/{ENTRY}", *words])}
    out = {"name": name, "args": " ".join([f"{CONTAINER_DIR}/{ENTRY}", *words]),
           "returncode": p.returncode, "wall_s": round(time.monotonic() - t0, 2),
           "stderr_tail": stderr[-3000:]}
    try:
        res = parse_result_line(stdout)
    except Exception as e:   # noqa: BLE001 - reported, and the exit status says so
        return {**out, "ok": False, "error": f"no usable result line: {e}"}
    out.update(result=res, problems=validate_result(res))
    return out


def _ms(x) -> str:
    return f"{x:.4f} ms" if isinstance(x, (int, float)) else "-"


def gist(job: dict) -> str:
    r = job.get("result") or {}
    if not r:
        return f"{job['name']}: FAILED {job.get('error')}"
    c, b = r.get("candidate") or {}, r.get("champion") or {}
    line = (f"{job['name']}: python {job['args']} -> ok={r.get('ok')} stage={r.get('stage')} "
            f"[{job['wall_s']} s] on {r.get('device')}; candidate {_ms(c.get('median_ms'))}, "
            f"champion {_ms(b.get('median_ms'))} (medians)")
    if r.get("error"):
        line += f"; error: {r['error']}"
    blk = r.get("peers")
    if blk:
        line += "; peers " + ", ".join(f"{k} {_ms(v.get('median_ms'))}" for k, v in
                                       (blk.get("peers") or {}).items())
        line += "".join(f"; skipped {k} ({v.get('kind')}): {str(v.get('reason'))[:80]}" if isinstance(v, dict)
                        else f"; skipped {k}: {str(v)[:80]}" for k, v in (blk.get("skipped") or {}).items())
        line += f"; peers error: {blk['error']}" if blk.get("error") else ""
    prof = (r.get("profile") or {}).get("candidate")
    if prof:
        ks = prof.get("kernels") or []
        launch = prof.get("launch") or {}
        line += (f"; profile: {len(ks)} kernel(s)"
                 + (f" {ks[0].get('name')} {ks[0].get('regs_per_thread')} regs" if ks else "")
                 + f", host launch {launch.get('host_us') or 0:.1f} us"
                 + (f", error: {prof['error']}" if prof.get("error") else ""))
        n = prof.get("ncu")
        line += "; ncu: not run (KERNLOOP_NCU=off)" if n is None else (
            f"; ncu ok, main kernel {(n.get('counters') or {}).get('main_kernel')}" if n.get("ok")
            else f"; ncu not ok: {str(n.get('error'))[:160]}")
    else:
        line += "; no profile"
    if r.get("sight_error"):
        line += f"; sight_error: {r['sight_error']}"
    return line


def check(job: dict, want_peers: bool) -> list[str]:
    """What the job must carry: a passing result, peers when asked, a profile."""
    r = job.get("result") or {}
    bad = [f"{job['name']}: {p}" for p in job.get("problems") or []]
    if not r.get("ok"):
        bad.append(f"{job['name']}: not ok ({r.get('error') or job.get('error')})")
    if want_peers and not ((r.get("peers") or {}).get("peers")):
        bad.append(f"{job['name']}: no peers timed")
    if r.get("ok") and not (r.get("profile") or {}).get("candidate"):
        bad.append(f"{job['name']}: no profile (a peers job always profiles; the candidate is "
                   "faster than the naive champion)")
    if r.get("sight_error"):
        bad.append(f"{job['name']}: sight_error {r['sight_error']}")
    return bad


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--mode", default="gpu", choices=["gpu", "interpret-timed"])
    ap.add_argument("--timeout", type=float, default=42.0,
                    help="seconds per job (two jobs: the whole script stays under 90 s)")
    a = ap.parse_args(argv)
    spec = load_spec(SPEC)
    ns = NebiusSettings(check_mode=a.mode, ncu=settings.get("KERNLOOP_NCU"))
    jobs, bad, t0 = [], [], time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kernloop_container_") as tmp:
        for name, cand, peers in (("baseline", spec.baseline, True), ("candidate", BY_HAND, False)):
            root = Path(tmp) / name / CONTAINER_DIR.strip("/")
            files = stage(spec, cand, spec.baseline, root)
            if name == "baseline":
                print(f"staged {len(files)} files as a job injects them (largest "
                      f"{max(p.stat().st_size for p in files.values()) / 1024:.1f} KiB of "
                      f"{MAX_INJECT_BYTES // 1024}): {' '.join(sorted(p.name for p in files.values()))}",
                      flush=True)
            job = run_job(name, entry_words(ns, peers), root, a.timeout)
            jobs.append(job)
            print(gist(job), flush=True)
            bad += check(job, peers)
            for p in (q for q in root.rglob("*") if q.is_file()):   # writable again, for the clean-up
                p.chmod(stat.S_IRUSR | stat.S_IWUSR)
    summary = {"mode": a.mode, "KERNLOOP_NCU": ns.ncu, "ncu_on_path": shutil.which("ncu"),
               "total_s": round(time.monotonic() - t0, 1), "problems": bad, "jobs": jobs}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    record.write(a.out, summary, default=str)
    print(f"{'OK' if not bad else 'PROBLEMS: ' + '; '.join(bad)} in {summary['total_s']} s; "
          f"wrote {a.out}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
