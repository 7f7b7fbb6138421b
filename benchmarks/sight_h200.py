#!/usr/bin/env python3
"""What the agent is shown, measured on a real GPU: diagnoses side by side, and every spec's peers.

  1. softmax 4096x8192: the naive baseline, the tuner's champion config (BLOCK_SIZE=2048, ROWS=1,
     8 warps) and benchmarks/by_hand/softmax.py, timed interleaved with the peers; for each kernel the
     profile (registers, spills, shared memory, occupancy, host launch µs, back-to-back ms), ncu's
     counters of one call where ncu is on PATH (KERNLOOP_NCU), the diagnosis, and the GPU
     seconds the profile and ncu cost. Plus the launch-bound case: the same kernels and
     torch.softmax on 64x8192.
  2. every spec: its naive baseline and its peers (the spec's compare: entries, torch.compile of
     the reference, Liger where installed) timed interleaved with the checker's flush and timer:
     median, mean, std per peer, skipped peers with their reason.

  python benchmarks/sight_h200.py --out $OUT/sight.json          (GPU, about 3-6 minutes)
  python benchmarks/sight_h200.py --dry --out /tmp/sight.json    (CPU smoke test: Triton interpreter
                                                             on check shapes, host clock, no
                                                             profile, no ncu; numbers meaningless)
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPECS = ("softmax", "rmsnorm", "layernorm", "gemv", "matmul", "matmul_bias_gelu")
TUNED_SOFTMAX = {"BLOCK_SIZE": 2048, "ROWS": 1, "num_warps": 8}   # the H200 tuner run's champion


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def checker_parts():
    """The checker's timing and input helpers (the judge's modules)."""
    from types import SimpleNamespace
    from checker import timing, validate
    return SimpleNamespace(Flusher=timing.Flusher, SETTLE_CYCLES=timing.SETTLE_CYCLES,
                           summarize=timing.summarize, roofline=timing.roofline,
                           timed_call=timing.timed_call, make_inputs=validate.make_inputs,
                           reference=validate.reference, torch_dtype=validate.torch_dtype)


def load_entry(path, name: str, entry: str):
    import importlib.util
    ms = importlib.util.spec_from_file_location(name, str(path))
    mod = importlib.util.module_from_spec(ms)
    ms.loader.exec_module(mod)
    return getattr(mod, entry), mod


def clean(x):
    """JSON without NaN/Inf tokens."""
    import math
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [clean(v) for v in x]
    return x


class Bench:
    def __init__(self, dry: bool, reps: int):
        self.dry, self.reps = dry, reps
        import torch
        from checker import kernelprofile as profile, peers
        self.torch, self.check, self.peers, self.profile = torch, checker_parts(), peers, profile
        self.dev = torch.device("cpu") if dry else torch.device("cuda")
        self.flush = (lambda: None) if dry else \
            self.check.Flusher(torch, self.dev, "read", settle_cycles=self.check.SETTLE_CYCLES)

    def inputs(self, spec_d: dict, shape: dict, seed: int = 777):
        c, t = self.check, self.torch
        sub = spec_d.get("check_dtype") or "float16"
        dt = (lambda n: c.torch_dtype(t, sub if n == "bfloat16" else n)) if self.dry else \
            (lambda n: c.torch_dtype(t, n))
        return c.make_inputs(t, spec_d, shape, self.dev, dt, seed)

    def shape(self, spec_d: dict) -> dict:
        return spec_d["check_shapes"][0] if self.dry else spec_d["shapes"][0]

    def sync(self):
        if not self.dry:
            self.torch.cuda.synchronize()

    def call(self, fn, args):
        """One timed call: CUDA events after the checker's flush, or (--dry) the host clock."""
        if not self.dry:
            return self.peers.event_call(self.torch, fn, args, self.flush, self.check.timed_call)

        def host():
            t0 = time.perf_counter()
            fn(*args)
            return (time.perf_counter() - t0) * 1e3
        return host

    def time(self, kernels: dict, peer_fns: dict, args: list) -> tuple[dict, dict]:
        calls = {k: self.call(f, args) for k, f in {**kernels, **peer_fns}.items()}
        samples, failed, w = self.peers.interleave(calls, 10, self.reps,
                                                   min_warm_s=0.0 if self.dry else 0.05,
                                                   optional=set(peer_fns))
        return {k: self.check.summarize(v, w) for k, v in samples.items()}, failed

    def peer_set(self, spec_d: dict, args: list, ref) -> dict:
        t0 = time.monotonic()
        built, skipped = self.peers.build(self.torch, spec_d, backend="eager" if self.dry else "inductor")
        kept, why, rel = self.peers.screen(self.torch, built, args, ref)   # compiles torch.compile's
        self.sync()
        return {"fns": kept, "skipped": {**skipped, **why}, "rel_l2": rel,
                "build_and_compile_s": time.monotonic() - t0}


def part_softmax(b: Bench, spec, out: dict) -> None:
    from kernloop.standing.diagnosis import compulsory_bytes, diagnose
    from kernloop.propose.tuner import replace_config
    from checker.ncu import find_ncu, run_ncu
    spec_d = spec.to_checker()
    spec_d["compare"] = spec.compare
    tmp = Path(tempfile.mkdtemp(prefix="sight_"))
    naive = (ROOT / "specs" / "softmax_naive.py").read_text()
    files = {"naive baseline": ROOT / "specs" / "softmax_naive.py",
             "tuned config": tmp / "softmax_tuned.py",
             "by hand": ROOT / "benchmarks" / "by_hand" / "softmax.py"}
    files["tuned config"].write_text(replace_config(naive, TUNED_SOFTMAX))
    (tmp / "spec.json").write_text(json.dumps(spec_d))
    loaded = {k: load_entry(p, f"sight_{i}", spec.entry) for i, (k, p) in enumerate(files.items())}
    fns = {k: fm[0] for k, fm in loaded.items()}
    args = b.inputs(spec_d, b.shape(spec_d))
    ref = b.check.reference(b.torch, spec_d, args, b.torch.float64 if b.dry else b.torch.float32)
    rel = {}
    for k, f in fns.items():
        o = f(*args)
        rel[k] = float(b.torch.linalg.vector_norm(o.to(ref.dtype) - ref) / b.torch.linalg.vector_norm(ref))
    peers = b.peer_set(spec_d, args, ref)
    b.sync()
    stats, failed = b.time(fns, peers["fns"], args)
    res = {"shape": b.shape(spec_d), "config_tuned": TUNED_SOFTMAX, "rel_l2": {**rel, **peers["rel_l2"]},
           "stats": stats, "peers_skipped": {**peers["skipped"], **failed}, "kernels": {}}
    if b.dry:
        res["note"] = "dry run: interpreter on a check shape, host clock; no profile, no ncu"
        out["softmax_side_by_side"] = res
        return
    from benchmarks.checker_validation import ceilings
    meas = ceilings()
    ceil = {"gbps": meas["copy_gbps_read_plus_write"], "tflops": meas["mm_bf16_8192_tflops"],
            "source": "measured in this job (device-to-device copy; torch.mm 8192^3 bf16)"}
    res["ceilings"] = meas
    cost = spec_d["cost_timed"]
    ncu = find_ncu()
    res["ncu"] = ncu
    for k, f in fns.items():
        gpu_ms = stats[k]["median_ms"]
        prof = b.profile.profile(b.torch, f, args, gpu_ms, module=loaded[k][1])
        counters = None
        nc = run_ncu(tmp / "spec.json", files[k]) if ncu else {"ok": False, "skipped": True}
        if nc.get("ok"):
            counters = nc["counters"]
        roof = b.check.roofline(stats[k], cost, ceil)
        finds = diagnose(roof, ceil, compulsory_bytes(spec), prof, counters)
        res["kernels"][k] = {"profile": prof, "ncu": nc, "roofline": roof, "diagnosis": finds,
                             "profile_gpu_s": prof["cost_s"], "ncu_s": nc.get("cost_s")}
        log(f"softmax {k}: {gpu_ms:.4f} ms; profile {prof['cost_s']:.2f} s, ncu {nc.get('cost_s') or 0:.1f} s")
        for x in finds:
            log(f"   - {x['text']}")
    # the launch-bound case: a small input where the host's launch work exceeds the kernel
    small = {"M": 64, "N": 8192}
    sargs = b.inputs(spec_d, small, seed=5)
    sfns = {**fns, "torch.softmax": lambda x: b.torch.softmax(x, dim=-1)}
    sstats, _ = b.time(sfns, {}, sargs)
    res["small_64x8192"] = {}
    for k, f in sfns.items():
        lc = b.profile.launch_cost(b.torch, f, sargs)
        v = b.profile.launch_bound(sstats[k]["median_ms"], lc["b2b_ms"], lc["host_us"])
        res["small_64x8192"][k] = {"stats": sstats[k], "launch": lc, "verdict": v}
        log(f"64x8192 {k}: gpu {sstats[k]['median_ms'] * 1e3:.1f} us, b2b {lc['b2b_ms'] * 1e3:.1f} us, "
            f"host {lc['host_us']:.1f} us, launch-bound {v['launch_bound']}")
    out["softmax_side_by_side"] = res


def part_peers(b: Bench, name: str) -> dict:
    from kernloop.spec import load_spec
    spec = load_spec(ROOT / "specs" / f"{name}.yaml")
    spec_d = spec.to_checker()
    spec_d["compare"] = spec.compare
    base, _ = load_entry(spec.baseline, f"sight_base_{name}", spec.entry)
    args = b.inputs(spec_d, b.shape(spec_d))
    ref = b.check.reference(b.torch, spec_d, args, b.torch.float64 if b.dry else b.torch.float32)
    peers = b.peer_set(spec_d, args, ref)
    base(*args)
    b.sync()
    t0 = time.monotonic()
    stats, failed = b.time({"naive baseline": base}, peers["fns"], args)
    best = b.peers.best_peer({k: v for k, v in stats.items() if k != "naive baseline"})
    r = {"shape": b.shape(spec_d), "stats": stats, "rel_l2": peers["rel_l2"],
         "skipped": {**peers["skipped"], **failed}, "build_and_compile_s": peers["build_and_compile_s"],
         "timing_s": time.monotonic() - t0, "best_peer": best[0] if best else None}
    log(f"{name}: " + ", ".join(f"{k} {v['median_ms']:.4f} ms" for k, v in stats.items())
        + (f"; skipped {sorted(r['skipped'])}" if r["skipped"] else ""))
    return r


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "sight.json"))
    ap.add_argument("--dry", action="store_true", help="CPU smoke test (interpreter, no profile/ncu)")
    ap.add_argument("--specs", default=",".join(SPECS))
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--skip-softmax", action="store_true")
    a = ap.parse_args(argv)
    if a.dry:
        os.environ["TRITON_INTERPRET"] = "1"   # before triton is imported
    sys.path.insert(0, str(ROOT))
    from benchmarks import record  # commit, versions, device, command
    from kernloop.spec import load_spec
    t0 = time.monotonic()
    b = Bench(a.dry, a.reps)
    import triton
    out = {"argv": sys.argv if argv is None else argv, "date": time.strftime("%Y-%m-%d %H:%M:%S"),
           "dry": a.dry, "torch": b.torch.__version__, "triton": triton.__version__,
           "device": "cpu (interpreter)" if a.dry else b.torch.cuda.get_device_name(0),
           "liger": b.peers.liger_namespace()[0] is not None, "peers": {}}

    def save():
        out["wall_s"] = time.monotonic() - t0
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        record.write(a.out, clean(out), argv)
    if not a.skip_softmax:
        try:
            part_softmax(b, load_spec(ROOT / "specs" / "softmax.yaml"), out)
        except Exception as e:   # noqa: BLE001 - keep the peers part
            import traceback
            out["softmax_side_by_side"] = {"error": f"{type(e).__name__}: {e}",
                                           "traceback": traceback.format_exc()[-3000:]}
            log(f"softmax side by side failed: {e}")
        save()
    for name in [s for s in a.specs.split(",") if s]:
        try:
            out["peers"][name] = part_peers(b, name)
        except Exception as e:   # noqa: BLE001 - one spec failing must not lose the others
            import traceback
            out["peers"][name] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]}
            log(f"{name} failed: {e}")
        save()
    log(f"wrote {a.out} in {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
