#!/usr/bin/env python3
"""What each OS layer of a worker costs at start-up (issue 23 B), on this machine: a worker
started as the judge starts one (checker/channel.py), per layer set, interleaved round by round
so that the machine's load falls on every set alike. Measures the worker's own start-up (to its
first reply), the arena request (where the late layers are applied), the kernel file's load, and
the seconds each layer's own call took (containment.cost_s). On the GPU run it with --gpu (the
arena is then a CUDA tensor shared by IPC, as in a job).

  python benchmarks/contain_cost.py [--rounds 3] [--gpu] [--out $OUT/contain_cost.json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from checker import channel, lockdown, scratch  # noqa: E402

SETS = ["none", "landlock", "landlock,proc", "seccomp", "uid", "no_bytecode", "own_cache", "all"]


def one(layers: str, gpu: bool, torch, device) -> dict:
    job = scratch.make_job()
    uid = 0x40000000 + os.getpid() % 1000 if "uid" in lockdown.parse_layers(layers) else -1
    d = scratch.make_worker(job, "candidate", uid)
    env = scratch.worker_env(os.environ, d, "own_cache" in lockdown.parse_layers(layers))
    if not gpu:
        env["TRITON_INTERPRET"] = "1"
    extra = ([] if gpu else ["--interpret"]) + ["--layers", layers, "--uid", str(uid)]
    t0 = time.monotonic()
    w = channel.WorkerProc("candidate", d, env, extra)
    try:
        ready = w.reply(300)
        t_ready = time.monotonic() - t0
        arena = channel.Arena(torch, device, 1 << 20, folder=d)
        t1 = time.monotonic()
        r = w.call("arena", arena.handle(), 300)
        t_arena = time.monotonic() - t1
        arena.unlink()
        t2 = time.monotonic()
        load = w.call("load", {"path": str(_baseline()), "entry": "matmul"}, 300)
        t_load = time.monotonic() - t2
    finally:
        w.kill()
        scratch.remove(job)
    c = r.get("containment") or {}
    return {"layers": layers, "startup_s": ready.get("startup_s"), "to_ready_s": round(t_ready, 3),
            "arena_s": round(t_arena, 4), "load_s": round(t_load, 3), "load_error": load.get("error"),
            "cost_s": c.get("cost_s"), "held": {k: c.get(k) for k in lockdown.LAYERS}}


def _baseline() -> Path:
    from kernloop.spec import load_spec
    return load_spec(ROOT / "specs" / "matmul.yaml").baseline


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--gpu", action="store_true")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "contain_cost.json"))
    a = ap.parse_args()
    import torch
    device = torch.device("cuda", 0) if a.gpu else torch.device("cpu")
    rows = []
    for _ in range(a.rounds):
        for layers in SETS:
            rows.append(one(layers, a.gpu, torch, device))
            print(json.dumps(rows[-1])[:300], flush=True)
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    out = {"command": " ".join([sys.executable, *sys.argv]), "commit": commit, "python": platform.python_version(),
           "torch": torch.__version__, "device": torch.cuda.get_device_name(0) if a.gpu else f"CPU ({os.cpu_count()} cores)",
           "load_avg": os.getloadavg(), "rows": rows}
    Path(a.out).write_text(json.dumps(out, indent=1))
    print(f"\n{'layers':<16}{'startup_s':>10}{'arena_s':>9}{'load_s':>8}  layer's own call (median s)")
    for layers in SETS:
        rs = [r for r in rows if r["layers"] == layers]
        med = lambda k: statistics.median(r[k] for r in rs if r[k] is not None)  # noqa: E731
        own = {k: statistics.median((r["cost_s"] or {}).get(k, 0) for r in rs) for k in ("landlock", "seccomp", "uid")}
        print(f"{layers:<16}{med('startup_s'):>10.3f}{med('arena_s'):>9.4f}{med('load_s'):>8.3f}  {own}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
