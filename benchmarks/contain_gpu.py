#!/usr/bin/env python3
"""Which of the worker's OS layers hold on a GPU machine, what they cost, and the judge's clock
against a worker that reports 5% low (issue 23 B). Runs the checker as the local backend does
(matmul spec, baseline against itself, ~1.1 ms timed kernel on the H200), in four parts:

  layers   one job per layer set (--no-timing: CUDA IPC, Triton compile and launch under it),
           then a timed job with no layers and one with all: ok, containment, start-up, wall
  hostile  through the test seam, the ATTACKS file (writes, signals, ptrace, /proc) and a
           daemon, under every layer (best-effort): each outcome, the stand-in orchestrator alive
  clock    honest A/A jobs (6 rounds each) and jobs whose candidate reports 5% low (--reps 100):
           the per-pair overhead differences, and the false-alarm and catch rates of
           clock.verdict's rule on 25-pair windows for a grid of (z, tol_abs, tol_frac); and each
           job's clock over bursts (--burst K: clock.burst_shift, the per-call shift, honest
           against 5% low)
  env      commit, versions, device, Landlock ABI, seccomp binding, command

Writes raw JSON to $OUT/contain_gpu.json (or --out) and prints a short table last. Stops
starting jobs after --budget-s. The bindings (landlockpy, pyseccomp) must be importable: e.g.
`pip install --target /tmp/site landlockpy-0.2.0-py3-none-any.whl pyseccomp-0.1.2-py3-none-any.whl`
and PYTHONPATH=/tmp/site.

  python benchmarks/contain_gpu.py [--budget-s 280] [--aa 2 --aa-rounds 6] [--forge 6] [--parts layers,hostile,clock]
  python benchmarks/contain_gpu.py --dry   # the CPU: interpreter, host clock (numbers meaningless)
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import sysconfig
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernloop.backends.local import stage_job  # noqa: E402
from benchmarks import record  # noqa: E402  (commit: KERNLOOP_BENCH_COMMIT before a device's stale .git)
from checker import clock  # noqa: E402
from kernloop.backends.resultline import parse_result_line  # noqa: E402
from kernloop.spec import load_spec  # noqa: E402
from tests.contain_attacks import ATTACKS, DAEMON, FIVE_PERCENT_LOW  # noqa: E402

STANDIN = ROOT / "tests" / "contain_standin.py"
LAYER_SETS = [("none", "none", "best-effort"), ("landlock", "landlock", "best-effort"),
              ("landlock+proc", "landlock,proc", "best-effort"), ("seccomp", "seccomp", "best-effort"),
              ("own_cache+no_bytecode", "own_cache,no_bytecode", "best-effort"),
              ("uid(named)", "uid", "best-effort"), ("all strict", "all", "strict")]
GRID = [(z, ta, tf) for z in (2.33, 2.58, 3.09) for ta in (0.01, 0.015, 0.02, 0.03)
        for tf in (0.01, 0.015, 0.02)]


class Bench:
    def __init__(self, a):
        self.a, self.t0 = a, time.monotonic()
        self.spec = load_spec(ROOT / "specs" / "matmul.yaml")
        self.base = self.spec.baseline.read_text()
        self.tmp = Path(tempfile.mkdtemp(prefix="contain-gpu-"))
        os.chmod(self.tmp, 0o755)
        self.mode = ["--mode", "interpret", "--host-clock"] if a.dry else ["--mode", "gpu"]
        self.n = 0

    def checker(self, d: Path, names: dict) -> list[str]:
        """`-m checker.check` (--judge cold; the stand-in's cwd is the staged folder holding
        checker/), or the same flags through a warm judge from that package (tests/warm_check.py:
        `-m checker.serve`, the local backend's default path)."""
        if self.a.judge == "cold":
            return [sys.executable, "-m", "checker.check"]
        return [sys.executable, str(ROOT / "tests" / "warm_check.py"), "--root", str(d)]

    def left(self) -> float:
        return self.a.budget_s - (time.monotonic() - self.t0)

    def job(self, code, args: list[str], env: dict | None = None, seam: bool = False,
            timeout: float = 150.0, want_rounds: bool = False) -> dict:
        """One checker job as the backends stage it, run by the stand-in orchestrator (the test
        seam passed only when `seam`). `code`: the kernel text, or a function of the stand-in's
        pid that returns it (an attack aimed at the orchestrator)."""
        self.n += 1
        d = self.tmp / f"job{self.n:03d}"
        out = self.tmp / f"standin{self.n}.json"
        names = {k: str(d / f"{k}.py") for k in ("spec", "candidate", "champion")}
        names["spec"] = str(d / "spec.json")
        cmd = [sys.executable, str(STANDIN), str(out), str(timeout), str(d), "seam" if seam else "noseam",
               "--", *self.checker(d, names), "--spec", names["spec"], "--candidate",
               names["candidate"], "--champion", names["champion"], *self.mode, "--backend", "local", *args]
        t = time.monotonic()
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=dict(os.environ, **(env or {})))
        (self.tmp / f"cand{self.n}.py").write_text(code(p.pid) if callable(code) else code)
        files = stage_job(self.spec, self.tmp / f"cand{self.n}.py", self.spec.baseline, d)
        if self.a.dry:
            sp = self.spec.to_checker()
            sp["check_shapes"] = sp["check_shapes"][:1]
            files["spec"].write_text(json.dumps(sp))
        try:
            so, se = p.communicate("go\n", timeout=timeout + 30)
        except subprocess.TimeoutExpired:
            p.kill()
            so, se = p.communicate()
        row = {"standin_rc": p.returncode, "standin_alive": "stand-in alive" in (so or ""),
               "wall_s": round(time.monotonic() - t, 3)}
        try:
            got = json.loads(out.read_text())
            res = parse_result_line(got["stdout"])
        except Exception as e:   # noqa: BLE001 - recorded
            row["error"] = f"no result: {type(e).__name__}: {e}; {(se or '')[-600:]}"
            return row
        row.update(ok=res.get("ok"), stage=res.get("stage"), error=res.get("error"),
                   containment=res.get("containment"), workers=res.get("workers"),
                   phase_s=res.get("phase_s"), judge_wall_s=res.get("wall_s"),
                   wall_probe_ms=res.get("wall_probe_ms"), clock_burst=res.get("clock_burst"),
                   cand_median_ms=(res.get("candidate") or {}).get("median_ms"),
                   champ_median_ms=(res.get("champion") or {}).get("median_ms"))
        if want_rounds:   # every finished round's clock numbers, then the failing round's
            probes = [x.get("wall_probe_ms") or {} for x in res.get("rounds") or []]
            if not res.get("ok") and res.get("wall_probe_ms") and res["wall_probe_ms"] not in probes:
                probes.append(res["wall_probe_ms"])
            row["round_probes"] = probes or None
        if not res.get("ok"):
            row["stderr_tail"] = got.get("stderr", "")[-1500:]
        return row

    def layers(self, out: dict) -> None:
        rows = out.setdefault("layers", [])
        for label, layers, mode in LAYER_SETS:
            if self.left() < 60:
                break
            r = self.job(self.base, ["--no-timing", "--layers", layers, "--contain", mode])
            rows.append({"set": label, "layers": layers, "mode": mode, **r})
            print(f"layers {label:<14} ok={r.get('ok')} wall={r['wall_s']}s {str(r.get('error'))[:160]}",
                  flush=True)
        if not any(r.get("ok") for r in rows if r["set"] == "landlock"):   # the two fallbacks
            for label, env in (("landlock+/dev/shm", {"KERNLOOP_CONTAIN_FALLBACK": "shm"}),
                               ("landlock late", {"KERNLOOP_CONTAIN_FALLBACK": "late"})):
                if self.left() > 60:
                    r = self.job(self.base, ["--no-timing", "--layers", "landlock", "--contain", "best-effort"],
                                 env=env)
                    rows.append({"set": label, "layers": "landlock", "mode": "best-effort", "env": env, **r})
        for label, layers in (("timed none", "none"), ("timed all", "all")):
            if self.left() < 60:
                break
            r = self.job(self.base, ["--layers", layers, "--contain", "best-effort"])
            rows.append({"set": label, "layers": layers, "mode": "best-effort", **r})
            print(f"{label:<21} ok={r.get('ok')} wall={r['wall_s']}s", flush=True)

    def hostile(self, out: dict) -> None:
        rows = out.setdefault("hostile", [])
        if self.left() < 60:
            return
        mark = "kernloop-planted-" + uuid.uuid4().hex[:10]
        later = self.tmp / "later"
        later.mkdir(exist_ok=True)
        cache = self.tmp / "champion-cache"
        cache.mkdir(exist_ok=True)
        site = sysconfig.get_paths()["purelib"]
        other = Path(tempfile.gettempdir()) / f"kernloop-job-{mark}"
        (other / "champion").mkdir(parents=True, exist_ok=True)
        (other / "champion" / "arena").write_bytes(b"champion output")
        code = lambda orch: ATTACKS.format(orch=orch, mark=mark, run=self.tmp, proj=ROOT, site=site,  # noqa: E731
                                           cache=cache, later=later, other_job=other) + self.base
        r = self.job(code, ["--no-timing", "--contain", "best-effort"], seam=True)
        m = re.search(r"ATTACKS (.*)", str(r.get("error")))
        r["outcomes"] = dict(kv.split("=", 1) for kv in m.group(1).split()) if m else None
        r["refused_all"] = bool(m) and all(v in ("1", "13") or (k.startswith("child_") and v not in ("rc0", "OK"))
                                           for k, v in r["outcomes"].items())
        r["planted"] = [str(p) for p in (self.tmp / f"{mark}.py", ROOT / f"{mark}.py", cache / f"{mark}.py",
                                         later / f"{mark}.py", Path("/tmp") / f"{mark}.py", Path(site) / f"{mark}.py",
                                         Path("/dev/shm") / f"{mark}.py", ROOT / f"{mark}.sh") if p.exists()]
        for p in r["planted"]:
            os.unlink(p)
        rows.append({"case": "attacks", **r})
        print(f"hostile attacks refused_all={r['refused_all']} planted={r['planted']} alive={r['standin_alive']}",
              flush=True)
        if self.left() > 60:
            r = self.job(DAEMON.format(mark=mark) + self.base, ["--no-timing", "--contain", "best-effort"],
                         seam=True)
            r["daemon_alive_after"] = _alive_with(mark)
            rows.append({"case": "daemon", **r})
            print(f"hostile daemon ok={r.get('ok')} error={str(r.get('error'))[:120]} "
                  f"alive_after={r['daemon_alive_after']}", flush=True)

    def clock(self, out: dict) -> None:
        """Honest A/A jobs of --aa-rounds rounds each (every round's per-pair numbers kept, a
        false alarm included), and 5%-low jobs (each caught, or not, in its first round)."""
        rows = out.setdefault("clock", [])
        layers = "all" if any(r.get("ok") for r in out.get("layers", []) if r["set"] == "timed all") else "none"
        base = ["--reps", str(self.a.reps), "--contain", "best-effort", "--layers", layers,
                "--clock-burst", str(self.a.burst), "--burst-spin", self.a.burst_spin, "--burst-every"]
        for i in range(max(self.a.aa, self.a.forge)):
            for kind, n, code, extra in (
                    ("honest", self.a.aa, self.base, ["--rounds", str(self.a.aa_rounds)]),
                    ("five_percent_low", self.a.forge, FIVE_PERCENT_LOW + self.base, [])):
                if i >= n or self.left() < 25:
                    continue
                r = self.job(code, base + extra, seam=kind != "honest", want_rounds=True)
                for i_wp, wp in enumerate(r.pop("round_probes", None) or [r.get("wall_probe_ms") or {}]):
                    rows.append({"kind": kind, "layers": layers, "ok": r.get("ok"), "error": r.get("error"),
                                 "pair_diffs": wp.get("pair_diffs"), "cand_events_ms": wp.get("candidate_events"),
                                 "overhead_shift": wp.get("overhead_shift"), "job_wall_s": r["wall_s"],
                                 "clock_burst": r.get("clock_burst") if i_wp == 0 else None})   # one per job
                    print(f"clock {kind:<16} ok={r.get('ok')} shift={wp.get('overhead_shift')} "
                          f"burst={(r.get('clock_burst') or {}).get('shift_ms')}", flush=True)
        out["clock_grid"] = grid(rows)


def grid(rows: list[dict], window: int = 25) -> list[dict]:
    """clock.verdict's rule on every `window`-pair slice of each job's pair differences."""
    out = []
    for z, ta, tf in GRID:
        fa = catch = n_h = n_f = 0
        for r in rows:
            d, ev = r.get("pair_diffs") or [], r.get("cand_events_ms")
            if not ev:
                continue
            tol = clock.tolerance_ms(ev, ta, tf)
            for k in range(0, len(d) - window + 1, window):
                iv = clock.hodges_lehmann(d[k:k + window], z)
                if iv is None:
                    continue
                if r["kind"] == "honest":
                    n_h += 1
                    fa += iv[0] > tol or iv[2] < -tol
                else:
                    n_f += 1
                    catch += iv[0] > tol
        out.append({"z": z, "tol_abs_ms": ta, "tol_frac": tf, "honest_windows": n_h,
                    "false_alarms": fa, "forged_windows": n_f, "caught": catch})
    return out


def _alive_with(mark: str) -> list[int]:
    pids = []
    for p in os.listdir("/proc"):
        try:
            if p.isdigit() and mark.encode() in Path(f"/proc/{p}/cmdline").read_bytes():
                pids.append(int(p))
        except OSError:
            pass
    return pids


def env_info(a) -> dict:
    info = {"command": " ".join([sys.executable, *sys.argv]), "python": platform.python_version(),
            "uname": platform.release(), "euid": os.geteuid(), "dry": a.dry}
    info["commit"] = record.commit(ROOT)["commit"]
    for mod in ("torch", "triton", "landlockpy", "pyseccomp"):
        try:
            info[mod] = getattr(__import__(mod), "__version__", "?")
        except Exception as e:   # noqa: BLE001
            info[mod] = f"unavailable: {type(e).__name__}: {e}"
    try:
        import landlockpy
        info["landlock_abi"] = landlockpy.abi_version()
    except Exception as e:   # noqa: BLE001
        info["landlock_abi"] = f"unavailable: {e}"
    if not a.dry:
        import torch
        info["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return info


def table(out: dict) -> None:
    print("\n== layers (matmul baseline vs itself) ==")
    for r in out.get("layers", []):
        w = (r.get("workers") or {}).get("candidate") or {}
        held = {k: v for k, v in ((r.get("containment") or {}).get("candidate") or {}).items()
                if k in ("landlock", "proc", "uid", "seccomp", "own_cache", "no_bytecode")}
        print(f"{r['set']:<18} ok={str(r.get('ok')):<5} job={r['wall_s']:>6}s startup={w.get('startup_s')}s "
              f"held={held} {'' if r.get('ok') else str(r.get('error'))[:140]}")
    for r in out.get("hostile", []):
        print(f"hostile {r['case']:<8} ok={r.get('ok')} alive={r.get('standin_alive')} "
              f"refused_all={r.get('refused_all')} error={str(r.get('error'))[:200]}")
    g = sorted(out.get("clock_grid", []), key=lambda x: (x["false_alarms"], -x["caught"]))[:6]
    print("== clock: best rules (false alarms / honest windows, caught / forged windows) ==")
    for x in g:
        print(f"z={x['z']} tol={x['tol_abs_ms']}ms/{x['tol_frac']}: false {x['false_alarms']}/"
              f"{x['honest_windows']} caught {x['caught']}/{x['forged_windows']}")
    for kind in ("honest", "five_percent_low"):
        b = sorted(r["clock_burst"]["shift_ms"] for r in out.get("clock", [])
                   if r["kind"] == kind and (r.get("clock_burst") or {}).get("shift_ms") is not None)
        if b:
            print(f"clock over bursts, {kind}: per-call shift {b[0]:+.4f} .. {b[-1]:+.4f} ms ({len(b)} values)")
        jobs = [r for r in out.get("clock", []) if r["kind"] == kind and r.get("clock_burst")]
        fr = sorted(r["clock_burst"]["frac"] for r in jobs if r["clock_burst"].get("frac") is not None)
        hit = sum(1 for r in jobs if "over bursts timed whole" in str(r.get("error")))
        ab = sorted(r["clock_burst"]["shift_ab_ms"] for r in jobs if r["clock_burst"].get("shift_ab_ms") is not None)
        if ab:
            print(f"bursts against the A/B's medians, {kind}: {ab[0]:+.4f} .. {ab[-1]:+.4f} ms")
        if jobs:
            print(f"burst rule, {kind}: rejected {hit}/{len(jobs)} jobs; shift/report "
                  f"{fr[0]:+.4f} .. {fr[-1]:+.4f}" if fr else f"burst rule, {kind}: rejected {hit}/{len(jobs)}")
    cur = [x for x in out.get("clock_grid", []) if (x["z"], x["tol_abs_ms"], x["tol_frac"]) ==
           (clock.Z, clock.TOL_ABS_MS, clock.TOL_FRAC)]
    if cur:
        x = cur[0]
        print(f"current rule: false {x['false_alarms']}/{x['honest_windows']} caught {x['caught']}/"
              f"{x['forged_windows']}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budget-s", type=float, default=280.0)
    ap.add_argument("--aa", type=int, default=2, help="honest A/A jobs")
    ap.add_argument("--aa-rounds", type=int, default=6, help="A/B rounds per honest job")
    ap.add_argument("--forge", type=int, default=6, help="jobs whose candidate reports 5%% low")
    ap.add_argument("--burst", type=int, default=20,
                    help="clock part: --clock-burst K for every job (the judge's clock over bursts)")
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--burst-spin", choices=["each", "once"], default="each",
                    help="clock part: the judge's --burst-spin for every job")
    ap.add_argument("--parts", default="layers,hostile,clock")
    ap.add_argument("--dry", action="store_true", help="CPU: interpreter and host clock")
    ap.add_argument("--judge", choices=["warm", "cold"], default="warm",
                    help="warm (default): each job through checker/serve.py, as the local backend "
                         "runs it; cold: checker/check.py, one process per job")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "contain_gpu.json"))
    a = ap.parse_args()
    b = Bench(a)
    out = {"env": env_info(a)}
    for part in a.parts.split(","):
        getattr(b, part)(out)
        record.write(a.out, out, default=str)   # after each part: nothing lost to a limit
    out["bench_wall_s"] = round(time.monotonic() - b.t0, 1)
    record.write(a.out, out, default=str)
    table(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
