#!/usr/bin/env python3
"""Evidence that the checker measures honestly, on a real GPU (issue: checker + local backend).

Runs, in one process unless noted, and writes one JSON file:
  ceilings   device-to-device copy bandwidth (read + write) and bf16 torch.mm 8192^3 rate
  flush      the same kernels timed with flush = none | zero | read | rotate, side by side
  tiny       a tiny kernel on an idle GPU vs behind the flush (launch gaps timed or not)
  aa         A/A: a baseline against an identical copy of itself, N decisions per spec
  power      a candidate truly ~5% faster (the champion is the same kernel plus a copy sized
             to ~5% of its time): promotions out of N decisions, and the gain measured
  cost       wall seconds of whole LocalBackend jobs (child process: import, compile,
             correctness on every shape x 3 draws, A/B timing), cold and warm Triton cache
  ncu        (separate processes) ncu's gpu__time_duration.sum for 3 kernels vs the checker

  python benchmarks/checker_validation.py --out benchmarks/results/checker_validation.json
"""
from __future__ import annotations

import argparse
import csv
import glob
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks import record  # noqa: E402  (commit, versions, device, command)

import torch  # noqa: E402

from benchmarks.inprocess import load_module, time_ab  # noqa: E402
from checker.contain import aten_recorder  # noqa: E402
from checker.timing import SETTLE_CYCLES, Flusher, summarize  # noqa: E402
from checker.validate import make_inputs  # noqa: E402
from kernloop.decision import decide  # noqa: E402
from kernloop.spec import load_spec  # noqa: E402

DEV = torch.device("cuda")


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def timed_inputs(spec, seed=1234):
    dt = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
    return make_inputs(torch, spec.to_checker(), spec.shapes[0], DEV, lambda n: dt[n], seed)


def entry(spec, path: Path, name: str):
    return getattr(load_module(str(path), name), spec.entry)


def ceilings() -> dict:
    n = 2 * 2**30  # 2 GiB each way
    x = torch.empty(n // 2, dtype=torch.bfloat16, device=DEV).normal_()
    y = torch.empty_like(x)
    for _ in range(3):
        y.copy_(x)
    s, e = torch.cuda.Event(True), torch.cuda.Event(True)
    torch.cuda.synchronize()
    s.record()
    for _ in range(10):
        y.copy_(x)
    e.record()
    torch.cuda.synchronize()
    copy_s = s.elapsed_time(e) / 1e3 / 10
    del x, y
    a = torch.randn(8192, 8192, device=DEV, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=DEV, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    s.record()
    for _ in range(10):
        a @ b
    e.record()
    torch.cuda.synchronize()
    mm_s = s.elapsed_time(e) / 1e3 / 10
    props = torch.cuda.get_device_properties(DEV)
    return {"copy_gbps_read_plus_write": 2 * n / copy_s / 1e9, "copy_bytes_each_way": n,
            "mm_bf16_8192_tflops": 2 * 8192**3 / mm_s / 1e12, "mm_ms": mm_s * 1e3,
            "device": torch.cuda.get_device_name(DEV), "sms": props.multi_processor_count,
            "l2_bytes": getattr(props, "L2_cache_size", None)}


def one_side(fn, args, method, warmup, reps, settle_cycles=0):
    """Time fn alone with a given flush method (rotate: input sets > 2x L2)."""
    fl = Flusher(torch, DEV, method, settle_cycles=settle_cycles)
    sets = [args]
    if method == "rotate":
        per = sum(x.numel() * x.element_size() for x in args)
        k = max(2, -(-2 * fl.l2_bytes // per) + 1)
        sets = [[x.clone().normal_() if x.is_floating_point() else x.clone() for x in args]
                for _ in range(k)]
    (samples,), *_ = time_ab(torch, [fn], sets, warmup, reps, fl, min_warm_s=0.05)
    return summarize(samples, warmup)


def checker_side(fn, args, method, runs=3, warmup=10, reps=50, settle_cycles=SETTLE_CYCLES, min_warm_s=0.05):
    """The checker's timing path for one kernel (inputs refilled every rep, op recorder, 50 ms
    warmup), `runs` times over: each run's stats plus the pooled mean of all samples."""
    fl = Flusher(torch, DEV, method, settle_cycles=settle_cycles)
    per_run, pooled = [], []
    for _ in range(runs):
        (s,), *_ = time_ab(torch, [fn], [args], warmup, reps, fl, refresh=refresh, min_warm_s=min_warm_s,
                           watch=[aten_recorder(torch)])
        per_run.append(summarize(s, warmup))
        pooled += s
    out = summarize(pooled, warmup)
    out["runs"] = per_run
    return out


def flush_table(kernels, warmup, reps) -> list[dict]:
    rows = []
    for label, fn, args in kernels:
        row = {"kernel": label}
        for m in ("none", "zero", "read", "rotate"):
            row[m] = one_side(fn, args, m, warmup, reps)
        row["read_settle"] = one_side(fn, args, "read", warmup, reps, settle_cycles=SETTLE_CYCLES)
        rows.append(row)
        log(f"flush {label}: " + ", ".join(f"{m} {row[m]['median_ms']:.4f}" for m in
                                           ("none", "zero", "read", "read_settle", "rotate")))
    return rows


def gap_table(kernels, idle_s=3.0) -> list[dict]:
    """The checker's timing path after the GPU sat idle (as between loop jobs, while the next
    candidate compiles), with and without the settle spin, with a short and a long warmup: does a
    launch gap or a cold clock leak into the numbers?"""
    rows = []
    for label, fn, args in kernels:
        for settle in (0, SETTLE_CYCLES):
            for warm_ms in (50, 500):
                torch.cuda.synchronize()
                time.sleep(idle_s)
                st = checker_side(fn, args, "read", runs=1, settle_cycles=settle, min_warm_s=warm_ms / 1e3)
                rows.append({"kernel": label, "settle_cycles": settle, "min_warm_ms": warm_ms,
                             "idle_s_before": idle_s, "stats": st})
                log(f"gap {label} settle={settle:g}us warm={warm_ms}ms: mean {st['mean_ms']:.4f} "
                    f"median {st['median_ms']:.4f} std {st['std_ms']:.4f}")
    return rows


def tiny_kernel() -> dict:
    x = torch.randn(1024, device=DEV)
    y = torch.empty_like(x)

    def fn(a):
        return torch.mul(a, 2.0, out=y)

    idle = {}
    # Idle GPU: sync before each call, so the launch gap is inside the events.
    s, e = torch.cuda.Event(True), torch.cuda.Event(True)
    ts = []
    for i in range(60):
        torch.cuda.synchronize()
        s.record()
        fn(x)
        e.record()
        torch.cuda.synchronize()
        if i >= 10:
            ts.append(s.elapsed_time(e))
    idle = summarize(ts, 10)
    behind = one_side(fn, [x], "read", 10, 50)
    settle = one_side(fn, [x], "read", 10, 50, settle_cycles=SETTLE_CYCLES)
    return {"idle_sync_each": idle, "behind_read_flush": behind, "behind_read_flush_and_settle": settle}


def refresh(xs):
    for x in xs:
        x.copy_(torch.randn_like(x))


def decisions(spec, fn_c, fn_b, args, n, warmup, reps, method="read") -> dict:
    fl = Flusher(torch, DEV, method, settle_cycles=SETTLE_CYCLES)
    out = []
    for _ in range(n):
        # The checker's own timing path: inputs refilled every rep, ops recorded, 50 ms warmup.
        (cs, bs), *_ = time_ab(torch, [fn_c, fn_b], [args], warmup, reps, fl, refresh=refresh,
                               min_warm_s=0.05, watch=[aten_recorder(torch), aten_recorder(torch)])
        res = {"ok": True, "correct": True, "candidate": summarize(cs, warmup),
               "champion": summarize(bs, warmup)}
        d = decide(res, min_gain=spec.loop["min_gain"], sigma=spec.loop["sigma"])
        out.append({"promoted": d["promoted"], "gain": d["rule"].get("gain"),
                    "significant": d["rule"].get("significant"),
                    "cand_mean_ms": res["candidate"]["mean_ms"], "champ_mean_ms": res["champion"]["mean_ms"],
                    "cand_std_ms": res["candidate"]["std_ms"], "champ_std_ms": res["champion"]["std_ms"]})
    gains = [d["gain"] for d in out]
    return {"n": n, "promotions": sum(d["promoted"] for d in out), "warmup": warmup, "reps": reps,
            "gain_median": statistics.median(gains), "gain_min": min(gains), "gain_max": max(gains),
            "decisions": out}


def aa(spec_path, n) -> dict:
    spec = load_spec(spec_path)
    tmp = Path(tempfile.mkdtemp())
    copy = tmp / "copy.py"
    shutil.copyfile(spec.baseline, copy)
    fn_b = entry(spec, spec.baseline, f"aa_base_{spec.name}")
    fn_c = entry(spec, copy, f"aa_copy_{spec.name}")
    args = timed_inputs(spec)
    r = decisions(spec, fn_c, fn_b, args, n, spec.timing["warmup"], spec.timing["reps"])
    r["spec"] = spec.name
    log(f"A/A {spec.name}: {r['promotions']}/{n} false promotions, median gain {r['gain_median']:+.3%}")
    return r


def power(spec_path, n, target=0.05) -> dict:
    """Champion = the same kernel followed by a device copy sized to ~target of its time."""
    spec = load_spec(spec_path)
    fn = entry(spec, spec.baseline, f"pw_{spec.name}")
    args = timed_inputs(spec)
    base = one_side(fn, args, "read", 10, 50)["median_ms"]
    bw = 3.6e12   # a copy this small runs below peak; the measured gain is reported below
    nbytes = int(target * base / 1e3 * bw / 2)
    src = torch.empty(max(nbytes // 2, 1), dtype=torch.bfloat16, device=DEV).normal_()
    dst = torch.empty_like(src)

    def slowed(*a):
        out = fn(*a)
        dst.copy_(src)
        return out
    r = decisions(spec, fn, slowed, args, n, spec.timing["warmup"], spec.timing["reps"])
    r.update(spec=spec.name, target_gain=target, pad_bytes=nbytes, base_median_ms=base)
    log(f"power {spec.name}: {r['promotions']}/{n} promoted, median true gain {r['gain_median']:+.3%}")
    return r


def cost(spec_path, candidate_cfg) -> dict:
    """Whole LocalBackend jobs as the loop runs them: the champion (baseline) already in the
    Triton cache, the candidate a config never compiled before. `prewarm` (the default) compiles
    all shapes at once; `serial` (--no-prewarm) shape by shape; `warm` repeats the prewarm job
    with everything cached. Each cold variant gets its own fresh Triton cache."""
    from kernloop.backends.local import LocalBackend
    from kernloop.propose.tuner import replace_config
    spec = load_spec(spec_path)
    tmp = Path(tempfile.mkdtemp())
    cand = tmp / "cand.py"
    cand.write_text(replace_config(spec.baseline.read_text(), candidate_cfg))
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-c", "import torch, triton"], check=True)
    out = {"python_import_torch_triton_s": round(time.monotonic() - t0, 3),
           "env_extra": LocalBackend(device="local").env_extra,
           "dont_write_bytecode_env": os.environ.get("PYTHONDONTWRITEBYTECODE")}
    caches = {"prewarm": tempfile.mkdtemp(), "serial": tempfile.mkdtemp()}
    plan = [("champion_only_prewarm", "prewarm", spec.baseline, ()),
            ("champion_only_serial", "serial", spec.baseline, ("--no-prewarm",)),
            ("cold_prewarm", "prewarm", cand, ()),
            ("cold_serial", "serial", cand, ("--no-prewarm",)),
            ("warm", "prewarm", cand, ())]
    env_old = os.environ.get("TRITON_CACHE_DIR")
    try:
        for label, cache, path, extra in plan:
            os.environ["TRITON_CACHE_DIR"] = caches[cache]
            be = LocalBackend(device="local", extra_args=extra, judge="cold")   # a whole cold job's cost
            t0 = time.monotonic()
            res = be.evaluate(spec, path, spec.baseline, tmp / f"job_{label}")
            wall = time.monotonic() - t0
            out[label] = {"wall_s": wall, "ok": res.get("ok"), "error": res.get("error"),
                          "checker_wall_s": res.get("wall_s"), "timing_wall_s": res.get("timing_wall_s"),
                          "candidate": res.get("candidate"), "champion": res.get("champion"),
                          "rel_l2": res.get("rel_l2"), "phase_s": res.get("phase_s"),
                          "prewarm": res.get("prewarm")}
            log(f"cost {spec.name} {label}: {wall:.2f} s wall, ok={res.get('ok')} phases={res.get('phase_s')} "
                f"{res.get('error') or ''}")
    finally:
        if env_old is None:
            os.environ.pop("TRITON_CACHE_DIR", None)
        else:
            os.environ["TRITON_CACHE_DIR"] = env_old
    return out


def find_ncu():
    for c in [shutil.which("ncu"), "/usr/local/cuda/bin/ncu", *glob.glob("/opt/nvidia/nsight-compute/*/ncu"),
              *glob.glob("/usr/local/cuda*/bin/ncu")]:
        if c and os.path.exists(c):
            return c
    return None


def ncu_times(spec_path, path, kernel_regex, reps=30) -> dict:
    """ncu's gpu__time_duration.sum of `reps` launches of the kernel (after 5 skipped), in a
    process of its own (this script's --ncu-target), L2 flushed by ncu before each."""
    ncu = find_ncu()
    if not ncu:
        return {"error": "ncu not found", "vals": []}
    cmd = [ncu, "--clock-control", "none", "--cache-control", "all", "--metrics",
           "gpu__time_duration.sum", "--csv", "-k", f"regex:{kernel_regex}",
           "--launch-skip", "5", "--launch-count", str(reps),
           sys.executable, str(Path(__file__).resolve()), "--ncu-target", str(spec_path), str(path)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    vals = []
    text = p.stdout[p.stdout.find('"ID"'):] if '"ID"' in p.stdout else ""
    for rec in csv.DictReader(io.StringIO(text)):
        if rec.get("Metric Name") == "gpu__time_duration.sum":
            v = float(rec["Metric Value"].replace(",", ""))
            unit = rec.get("Metric Unit", "ns")
            vals.append(v / {"nsecond": 1e6, "ns": 1e6, "usecond": 1e3, "us": 1e3, "msecond": 1,
                              "ms": 1}.get(unit, 1e6))
    return {"vals": vals, "ncu_n": len(vals), "ncu_mean_ms": statistics.fmean(vals) if vals else None,
            "ncu_median_ms": statistics.median(vals) if vals else None, "ncu_rc": p.returncode,
            "ncu_stderr_tail": p.stderr[-800:] if not vals else ""}


def ncu_fidelity(targets, reps=30) -> list[dict]:
    """ncu against this script's in-process copy of the checker's timing path."""
    rows = []
    for spec_path, path, kernel_regex in targets:
        spec = load_spec(spec_path)
        n = ncu_times(spec_path, path, kernel_regex, reps)
        if "error" in n:
            return [{"error": n["error"]}]
        fn = entry(spec, path, f"ncu_{spec.name}_{len(rows)}")
        args = timed_inputs(spec)
        ours = {m: checker_side(fn, args, m) for m in ("read", "zero")}
        row = {"spec": spec.name, "file": str(Path(path).relative_to(ROOT)) if str(path).startswith(str(ROOT)) else str(path),
               **{k: v for k, v in n.items() if k != "vals"},
               "checker_read_flush": ours["read"], "checker_zero_flush": ours["zero"]}
        if n["vals"]:
            row["ratio_checker_mean_over_ncu_mean"] = ours["read"]["mean_ms"] / row["ncu_mean_ms"]
        rows.append(row)
        log(f"ncu {spec.name}: ncu {row['ncu_mean_ms']} ms vs checker {ours['read']['mean_ms']:.4f} ms")
    return rows


def ncu_target(spec_path, path):
    spec = load_spec(spec_path)
    fn = entry(spec, Path(path), "ncu_target")
    args = timed_inputs(spec)
    for _ in range(40):
        fn(*args)
    torch.cuda.synchronize()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/checker_validation.json")
    ap.add_argument("--aa", type=int, default=100)
    ap.add_argument("--power", type=int, default=40)
    ap.add_argument("--membound", default="specs/softmax.yaml")
    ap.add_argument("--tuned", default="", help="a tuned matmul file for the flush/ncu rows")
    ap.add_argument("--skip", default="", help="comma list of sections to skip")
    ap.add_argument("--ncu-target", nargs=2)
    a = ap.parse_args()
    if a.ncu_target:
        return ncu_target(*a.ncu_target)
    skip = set(filter(None, a.skip.split(",")))
    res = {"argv": sys.argv, "date": time.strftime("%Y-%m-%d %H:%M:%S"), "torch": torch.__version__}
    import triton
    res["triton"] = triton.__version__

    def section(name, f):
        if name in skip:
            return
        t0 = time.monotonic()
        try:
            res[name] = f()
        except Exception as e:   # noqa: BLE001 - one failed section must not lose the others
            import traceback
            res[name] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]}
            log(f"section {name} failed: {e}")
        res.setdefault("section_seconds", {})[name] = round(time.monotonic() - t0, 1)
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        record.write(a.out, res)

    mm = ROOT / "specs" / "matmul.yaml"
    mem = ROOT / a.membound
    if not a.tuned:   # a well-tiled matmul (the tutorial's Hopper config) for the side-by-side rows
        from kernloop.propose.tuner import replace_config
        tuned = Path(tempfile.mkdtemp()) / "matmul_tuned.py"
        tuned.write_text(replace_config((ROOT / "specs" / "matmul_naive.py").read_text(), dict(
            BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3)))
        a.tuned = str(tuned)
    section("ceilings", ceilings)
    mms, mems = load_spec(mm), load_spec(mem)
    kernels = [("matmul naive 4096^3", entry(mms, mms.baseline, "fl_mm"), timed_inputs(mms)),
               (f"{mems.name} naive", entry(mems, mems.baseline, "fl_mem"), timed_inputs(mems))]
    if a.tuned:
        kernels.append(("matmul tuned 4096^3", entry(mms, Path(a.tuned), "fl_mmt"), timed_inputs(mms)))
    # Cheapest and newest evidence first: a call cut short by its time limit keeps those.
    section("gap", lambda: gap_table(kernels))
    tuned_cfg = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3)
    section("cost_matmul", lambda: cost(mm, tuned_cfg))
    targets = [(mm, mms.baseline, "matmul"), (mem, mems.baseline, mems.name)]
    if a.tuned:
        targets.append((mm, Path(a.tuned), "matmul"))
    section("ncu", lambda: ncu_fidelity(targets))
    section("flush", lambda: flush_table(kernels, 10, 50))
    section("tiny", tiny_kernel)
    section("aa_membound", lambda: aa(mem, a.aa))
    section("aa_matmul", lambda: aa(mm, a.aa))
    section("power_membound", lambda: power(mem, a.power))
    section("power_matmul", lambda: power(mm, a.power))
    print(json.dumps({k: v for k, v in res.items() if k in ("ceilings", "section_seconds")}, indent=1))
    summary(res)


def summary(res):
    print("\n== summary ==")
    c = res.get("ceilings", {})
    if "copy_gbps_read_plus_write" in c:
        print(f"copy {c['copy_gbps_read_plus_write']:.0f} GB/s  mm {c['mm_bf16_8192_tflops']:.0f} TFLOP/s  L2 {c['l2_bytes']}")
    for row in res.get("flush", []) if isinstance(res.get("flush"), list) else []:
        print(f"flush {row['kernel']:<22} " + " ".join(f"{m}={row[m]['median_ms']:.4f}" for m in ("none", "zero", "read", "read_settle", "rotate")))
    for row in res.get("gap", []) if isinstance(res.get("gap"), list) else []:
        print(f"gap {row['kernel']:<22} settle={row['settle_cycles']} warm={row['min_warm_ms']}ms "
              f"mean={row['stats']['mean_ms']:.4f} median={row['stats']['median_ms']:.4f} std={row['stats']['std_ms']:.4f}")
    t = res.get("tiny", {})
    if "idle_sync_each" in t:
        print(f"tiny idle {t['idle_sync_each']['median_ms']:.4f} ms  behind flush {t['behind_read_flush']['median_ms']:.4f} ms"
              f"  behind flush+settle {t['behind_read_flush_and_settle']['median_ms']:.4f} ms")
    for k in ("aa_membound", "aa_matmul", "power_membound", "power_matmul"):
        r = res.get(k, {})
        if "promotions" in r:
            print(f"{k:<15} {r['promotions']}/{r['n']} promoted, gain median {r['gain_median']:+.2%} [{r['gain_min']:+.2%}, {r['gain_max']:+.2%}]")
    cm = res.get("cost_matmul", {})
    if "python_import_torch_triton_s" in cm:
        print(f"cost: python -c 'import torch, triton' {cm['python_import_torch_triton_s']:.2f} s; "
              f"checker env {cm.get('env_extra')}; PYTHONDONTWRITEBYTECODE={cm.get('dont_write_bytecode_env')}")
    for lab in ("champion_only_prewarm", "champion_only_serial", "cold_prewarm", "cold_serial", "warm"):
        if lab in cm:
            ph = cm[lab].get("phase_s") or {}
            print(f"cost {lab:<22} {cm[lab]['wall_s']:.2f} s ok={cm[lab]['ok']} "
                  + " ".join(f"{k}={v}" for k, v in ph.items()))
    for row in res.get("ncu", []) if isinstance(res.get("ncu"), list) else []:
        if "ncu_mean_ms" in row:
            rd = row["checker_read_flush"]
            runs = " ".join(f"{r['mean_ms']:.4f}" for r in rd["runs"])
            print(f"ncu {row['spec']:<10} ncu mean {row['ncu_mean_ms']:.4f} med {row['ncu_median_ms']:.4f} | "
                  f"checker mean {rd['mean_ms']:.4f} med {rd['median_ms']:.4f} ratio {rd['mean_ms'] / row['ncu_mean_ms']:.3f} "
                  f"runs {runs} "
                  f"| zero {row['checker_zero_flush']['mean_ms']:.4f}")


if __name__ == "__main__":
    main()
