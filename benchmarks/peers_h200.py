#!/usr/bin/env python3
"""Peers a kernel engineer can trust, on the H200: per spec, the loop (tuner) from its naive
baseline, then the champion against its best peer, every peer named or its skip explained.

For each spec the whole loop runs as a user runs it (`orchestrator.py --backend local --proposer
tuner`): the baseline's job times the peers (the spec's `compare:` entries, Liger-Kernel and
QuACK where they import, torch.compile of the reference, eager torch), and after a promotion a
final job times the champion beside them again. From each run.jsonl it keeps: the baseline's
and the champion's medians, every peer's median, spread, 95% CI of its median, rounds timed and
why its timing stopped (and `unreliable`/`skipped` with their reasons and kinds), the log's
`best` peer as the checker chose it, the final line, and per job the whole job's wall time beside its verdict time.
The run folders (page included) go to a tarball.

Specs: the six shipped ones and two KernelBench-format problems made with `new
--from-kernelbench` (tests/kernelbench/softmax_wide.py and layernorm_affine.py), each given a
naive Triton baseline to tune (specs/softmax_naive.py and specs/layernorm_naive.py under the
problem's entry name; the LayerNorm one reshapes to rows first) and Liger/QuACK peers.

  KERNLOOP_NCU=off python3 benchmarks/peers_h200.py --out $OUT/peers_h200.json --tar $OUT/runs.tar.gz
  python3 benchmarks/peers_h200.py --dry --specs softmax --out /tmp/p.json     # CPU (SYNTHETIC) smoke

Budget: --spec-minutes per spec (the loop starts no iteration after it) and --max-minutes for the
whole call (a spec is not started after it; the JSON says which were left); the defaults fit
eight specs in about 8 minutes of an H200 (a job is ~4-5 s; the baseline's and the final job's
torch.compile peers compile for 10-30 s each on a cold inductor cache).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks import record  # noqa: E402  (commit, versions, device, command)

SHIPPED = ["softmax", "rmsnorm", "layernorm", "gemv", "matmul", "matmul_bias_gelu"]
KB = {   # KernelBench problem -> (naive baseline to adapt, its entry, extra compare entries)
    "kb_softmax": ("softmax_wide.py", "softmax_naive.py", "softmax", {
        "liger": "liger.softmax(x)", "quack": "quack.softmax(x)",
        "torch.softmax (eager)": "torch.softmax(x, dim=-1)"}),
    "kb_layernorm": ("layernorm_affine.py", "layernorm_naive.py", "layernorm", {
        "liger": "liger.layer_norm(x.reshape(x.shape[0], -1), ln_weight.reshape(-1), "
                 "ln_bias.reshape(-1), 1e-5).reshape(x.shape)",
        "quack": "quack.layer_norm(x.reshape(x.shape[0], -1), ln_weight.reshape(-1), "
                 "ln_bias.reshape(-1), 1e-5).reshape(x.shape)",
        "F.layer_norm (eager)": "F.layer_norm(x, x.shape[1:], ln_weight, ln_bias, eps=1e-5)"}),
}
ALL = SHIPPED + list(KB)


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def kb_spec(name: str, work: Path) -> Path:
    """`new --from-kernelbench` for the problem, then a naive Triton baseline under its entry
    name (the tuner needs a CONFIG to tune) with the shipped spec's search space, and the peers a
    user of that op would pick (Liger, QuACK, eager torch) beside the spec's own."""
    import yaml

    import orchestrator
    problem, naive, entry, extra = KB[name]
    if orchestrator.main(["new", name, "--from-kernelbench", str(ROOT / "tests" / "kernelbench" / problem),
                          "--dir", str(work), "--force"]) != 0:
        raise RuntimeError(f"new --from-kernelbench {problem} failed")
    path = work / f"{name}.yaml"
    d = yaml.safe_load(path.read_text())
    text = (ROOT / "specs" / naive).read_text()
    if name == "kb_softmax":
        text = text.replace(f"def {entry}(x):", f"def {name}(x):")
    else:   # normalised over the last three dims: rows of F*D1*D2, w and b flattened (views)
        text = text.replace(f"def {entry}(x, w, b):", "def _rows(x, w, b):") + (
            f"\n\ndef {name}(x, ln_weight, ln_bias):\n"
            "    y = _rows(x.reshape(x.shape[0], -1), ln_weight.reshape(-1), ln_bias.reshape(-1))\n"
            "    return y.reshape(x.shape)\n")
    if f"def {name}(" not in text:
        raise RuntimeError(f"could not adapt {naive} to the entry {name}")
    (work / f"{name}_naive.py").write_text(text)
    shipped = yaml.safe_load((ROOT / "specs" / f"{entry}.yaml").read_text())
    d.update(baseline=f"{name}_naive.py", search_space=shipped["search_space"],
             timing=shipped["timing"], loop=shipped["loop"])
    d["compare"] = {**(d.get("compare") or {}), **extra}
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    return path


def torch_spec(name: str, work: Path) -> Path:
    """The shipped spec with `baseline: torch` and no search space: the tuner starts from its
    family template (kernloop/families), as for a spec `new` writes from a torch one-liner."""
    import yaml
    d = yaml.safe_load((ROOT / "specs" / f"{name}.yaml").read_text())
    d["baseline"] = "torch"
    d.pop("search_space", None)
    path = work / f"{name}_torch.yaml"
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    return path


def job_costs(ev: dict) -> dict:
    """A job's whole wall time (the backend's clock around the child: process start to result)
    beside the judge's verdict time (the second look's start, else the end)."""
    r = ev.get("result") or {}
    phase = r.get("phase_s") or {}
    return {"event": ev.get("event"), "id": ev.get("candidate_id"),
            "job_wall_s": (r.get("backend_meta") or {}).get("wall_s"), "judge_wall_s": r.get("wall_s"),
            "verdict_s": phase.get("sight", phase.get("end")), "second_look": "sight" in phase}


PEER_FIELDS = ("median_ms", "mean_ms", "std_ms", "rel_spread", "ci_half", "ci_low_ms", "ci_high_ms", "rounds",
               "stop", "n_timed", "champion_median_ms", "champion_ci_half", "compiles_timed")


def digest(events: list[dict]) -> dict:
    """What the table needs from one run.jsonl (pure): the baseline's and the champion's medians,
    the peers of the job that timed the champion (final, else baseline) with what was skipped
    or unreliable and why, the final line, and every job's costs."""
    base = next((e for e in events if e.get("event") == "baseline"), {})
    final = next((e for e in reversed(events) if e.get("event") == "final"), None)
    end = next((e for e in reversed(events) if e.get("event") == "run_end"), {})
    its = [e for e in events if e.get("event") == "iteration"]
    src = final if final and (final.get("result") or {}).get("peers") else base
    block = (src.get("result") or {}).get("peers") or {}
    champ = ((block.get("kernels") or {}).get("candidate") or {})
    peers = {k: {x: v.get(x) for x in PEER_FIELDS} for k, v in (block.get("peers") or {}).items()
             if isinstance(v, dict)}
    best = block.get("best") if isinstance(block.get("best"), dict) else None   # the checker's choice
    base_stats = ((base.get("result") or {}).get("candidate") or {})
    costs = [job_costs(e) for e in [base, *its, *([final] if final else [])] if e]
    walls = [c["job_wall_s"] for c in costs if c["job_wall_s"]]
    verdicts = [c["verdict_s"] for c in costs if c["verdict_s"]]
    cm = champ.get("median_ms")
    return {
        "baseline_median_ms": base_stats.get("median_ms"), "champion_median_ms": cm,
        "champion_id": end.get("champion_id"), "speedup_vs_baseline": end.get("speedup"),
        "peers_job": "final" if src is final else "baseline", "peers": peers,
        "best_peer": {"label": best["name"], "median_ms": best.get("median_ms"), "spread": best.get("spread"),
                      "ci": best.get("ci"), "n": best.get("n"), "rounds": best.get("rounds")} if best else None,
        "champion_vs_best_peer": (best["median_ms"] / cm) if best and best.get("median_ms") and cm else None,
        "skipped": block.get("skipped") or {}, "unreliable": block.get("unreliable") or {},
        "peers_error": block.get("error"), "rel_l2": block.get("rel_l2") or {},
        "final_line": end.get("final_line"), "stop_reason": end.get("stop_reason"),
        "iterations": len(its),
        "promotions": sum(1 for e in its if (e.get("decision") or {}).get("promoted")),
        "jobs": costs, "job_wall_s_median": statistics.median(walls) if walls else None,
        "verdict_s_median": statistics.median(verdicts) if verdicts else None}


def run_spec(name: str, work: Path, runs: Path, a) -> dict:
    import orchestrator
    from kernloop.trajectory import read_events
    spec_path = kb_spec(name, work) if name in KB else \
        torch_spec(name, work) if a.torch_start else ROOT / "specs" / f"{name}.yaml"
    before = set(runs.glob("*/run.jsonl")) if runs.exists() else set()
    t0 = time.monotonic()
    argv = ["--spec", str(spec_path), "--backend", "synthetic" if a.dry else "local", "--proposer", "tuner",
            "--iterations", str(a.iterations), "--out", str(runs), "--seed", str(a.seed),
            "--max-minutes", str(a.spec_minutes), *(["--search", a.search] if a.search else [])]
    rc = orchestrator.main(argv)
    new = sorted(set(runs.glob("*/run.jsonl")) - before)
    if not new:
        raise RuntimeError(f"the loop wrote no run (rc {rc})")
    out = digest(read_events(new[-1]))
    out.update(run_dir=new[-1].parent.name, loop_wall_s=round(time.monotonic() - t0, 1), rc=rc,
               spec=str(spec_path.relative_to(ROOT)) if spec_path.is_relative_to(ROOT) else spec_path.name)
    return out


def write_tar(path: Path, runs: Path) -> None:
    with tarfile.open(path, "w:gz") as t:
        for d in sorted(p.parent for p in runs.glob("*/run.jsonl")):
            for f in ("run.jsonl", "trajectory.html", "champion.py", "baseline.py"):
                if (d / f).exists():
                    t.add(d / f, arcname=f"{d.name}/{f}")


def _noise(bp: dict | None) -> str:
    """'8.3%, ±0.8%, 6r': the best peer's spread, its median's 95% CI half-width and rounds."""
    if not bp:
        return "-"
    pct = lambda x: "?" if x is None else f"{x * 100:.1f}%"   # noqa: E731
    return f"{pct(bp.get('spread'))}, ±{pct(bp.get('ci'))}, {bp.get('rounds') or '?'}r"


def table(res: dict) -> str:
    lines = [f"{'spec':<18} {'naive':>9} {'champion':>9} {'best peer':>32} {'spread, CI, rounds':>18} {'vs best':>7}  "
             f"{'job s':>6} {'verdict s':>9}  without"]
    for name, r in res["specs"].items():
        if "error" in r:
            lines.append(f"{name:<18} ERROR {r['error'][:120]}")
            continue
        bp = r["best_peer"]
        f = lambda x, n=4: "?" if x is None else f"{x:.{n}f}"   # noqa: E731
        lines.append(f"{name:<18} {f(r['baseline_median_ms']):>9} {f(r['champion_median_ms']):>9} "
                     f"{(bp['label'][:20] + ' ' + f(bp['median_ms'])) if bp else 'none timed':>32} "
                     f"{_noise(bp):>18} "
                     f"{f(r['champion_vs_best_peer'], 2):>7}  {f(r['job_wall_s_median'], 1):>6} "
                     f"{f(r['verdict_s_median'], 1):>9}  {', '.join(sorted(r['skipped'])) or '-'}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--specs", default=",".join(ALL), help=f"comma-separated, from {', '.join(ALL)}")
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--spec-minutes", type=float, default=0.35)
    ap.add_argument("--max-minutes", type=float, default=8.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--search", choices=["tree", "chain"], help="as `run --search` (default: the spec's, tree)")
    ap.add_argument("--torch-start", action="store_true",
                    help="shipped specs as `baseline: torch`: the tuner starts from its family template")
    ap.add_argument("--runs", default=None, help="folder for the run folders (default: a temporary one)")
    ap.add_argument("--tar", type=Path, default=None)
    ap.add_argument("--dry", action="store_true", help="SYNTHETIC backend on the CPU: a smoke test, "
                    "no peer is timed and no number is a measurement")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    names = [s for s in a.specs.split(",") if s]
    bad = [s for s in names if s not in ALL]
    if bad:
        ap.error(f"unknown spec(s) {bad}: choose from {ALL}")
    t0 = time.monotonic()
    res = {"what": "champion vs best peer per spec, peers timed in the loop's own jobs",
           "synthetic": a.dry, "torch_start": a.torch_start, "specs": {}, "not_run": []}
    with tempfile.TemporaryDirectory() as tmp:
        work, runs = Path(tmp) / "specs", Path(a.runs or Path(tmp) / "runs")
        work.mkdir()
        for name in names:
            if time.monotonic() - t0 > a.max_minutes * 60:
                res["not_run"].append(name)
                continue
            try:
                res["specs"][name] = run_spec(name, work, runs, a)
                log(f"{name}: {res['specs'][name]['final_line']}")
            except Exception as e:   # noqa: BLE001 - one spec failing must not lose the others
                import traceback
                res["specs"][name] = {"error": f"{type(e).__name__}: {e}",
                                      "traceback": traceback.format_exc()[-3000:]}
                log(f"{name} failed: {e}")
            res["wall_s"] = round(time.monotonic() - t0, 1)
            record.write(a.out, res, [sys.argv[0], *(argv if argv is not None else sys.argv[1:])])
            if a.tar:
                write_tar(a.tar, runs)
    record.write(a.out, res)
    print("\n== champion vs best peer ==" + (" (SYNTHETIC: no peer timed)" if a.dry else ""))
    print(table(res))
    if res["not_run"]:
        print("not run (time):", ", ".join(res["not_run"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
