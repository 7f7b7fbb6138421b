#!/usr/bin/env python3
"""Evidence that the judge/worker checker measures honestly on a GPU: A/A, power, fidelity
against Nsight Compute, and the cost per candidate, every number through the judge's own path.

Each A/A or power section is ONE judge job (`--rounds N`): the judge starts its two workers once
and then runs N complete A/B rounds between them (warmup, interleaved reps with inputs refilled
by the judge, every timed output checked, the clock cross-check), and each round is decided by
decision.decide. Only the worker start-up is shared between rounds; everything a decision rests
on is measured anew each round.

  aa_<spec>      candidate and champion are copies of the same file: every promotion is false
  power_<spec>   the champion is the same kernel followed by a Triton copy sized to ~5% of its
                 time (a kernel file, run in its own worker like any champion): promotions / N
  ncu            3 kernels: ncu's gpu__time_duration.sum (separate process) vs the judge's mean
  cost           whole LocalBackend jobs (judge + 2 workers): cold and warm Triton cache

  python3 benchmarks/judge_validation.py --aa 100 --power 30 --out $OUT/judge_validation.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks import record  # noqa: E402  (commit, versions, device, command)

from kernloop.backends.local import LocalBackend  # noqa: E402
from benchmarks.checker_validation import cost, ncu_times  # noqa: E402
from kernloop.decision import decide  # noqa: E402
from kernloop.spec import load_spec  # noqa: E402
from kernloop.propose.tuner import replace_config  # noqa: E402

TUNED = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3)
PAD_GBPS = 3000.0   # a copy this small runs below the 4.2 TB/s ceiling; the true gain is measured

PAD = '''

@triton.jit
def _kl_pad_copy(src, dst, n, BLOCK: tl.constexpr):
    # Real extra work for the power test: the champion = the kernel + this copy.
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(dst + offs, tl.load(src + offs, mask=m), mask=m)


PAD_N = {pad_n}


def {entry}({params}):
    out = _kl_inner({params})
    src = torch.empty(PAD_N, device={first}.device, dtype=torch.float32)
    dst = torch.empty(PAD_N, device={first}.device, dtype=torch.float32)
    _kl_pad_copy[(triton.cdiv(PAD_N, 4096),)](src, dst, PAD_N, BLOCK=4096)
    return out
'''


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def padded(spec, code: str, pad_n: int) -> str:
    """The same kernel file with the entry renamed and a wrapper that adds a copy of pad_n floats."""
    head = f"def {spec.entry}("
    assert code.count(head) == 1, f"expected one '{head}' in the kernel file"
    params = ", ".join(spec.input_names)
    return code.replace(head, "def _kl_inner(") + PAD.format(
        pad_n=pad_n, entry=spec.entry, params=params, first=spec.input_names[0])


def rounds_job(spec, cand: Path, champ: Path, work: Path, n: int) -> dict:
    be = LocalBackend(device="local", timeout_s=580, extra_args=("--rounds", str(n), "--draws", "1"))
    t0 = time.monotonic()
    try:
        res = be.evaluate(spec, cand, champ, work)
    finally:
        be.close()   # a warm judge (the default) ends with its one job
    res["bench_wall_s"] = round(time.monotonic() - t0, 2)
    if not res.get("ok"):
        raise RuntimeError(f"judge job failed: {res.get('stage')}: {res.get('error')}")
    return res


def decisions(spec, res: dict) -> dict:
    out = []
    for r in res.get("rounds") or [{"candidate": res["candidate"], "champion": res["champion"]}]:
        d = decide({"ok": True, "correct": True, "candidate": r["candidate"], "champion": r["champion"]},
                   min_gain=spec.loop["min_gain"], sigma=spec.loop.get("sigma", 2.0))
        out.append({"promoted": d["promoted"], "gain": (d["rule"] or {}).get("gain"),
                    "cand_mean_ms": r["candidate"]["mean_ms"], "champ_mean_ms": r["champion"]["mean_ms"],
                    "cand_median_ms": r["candidate"]["median_ms"],
                    "champ_median_ms": r["champion"]["median_ms"]})
    gains = [d["gain"] for d in out if d["gain"] is not None]
    return {"n": len(out), "promotions": sum(d["promoted"] for d in out),
            "gain_median": statistics.median(gains) if gains else None,
            "gain_min": min(gains) if gains else None, "gain_max": max(gains) if gains else None,
            "judge_wall_s": res.get("wall_s"), "bench_wall_s": res.get("bench_wall_s"),
            "containment": res.get("containment"), "device": res.get("device"), "decisions": out}


def aa(spec_path: Path, n: int) -> dict:
    spec = load_spec(spec_path)
    work = Path(tempfile.mkdtemp())
    copy = work / "copy.py"
    copy.write_text(spec.baseline.read_text())
    r = decisions(spec, rounds_job(spec, copy, spec.baseline, work / "job", n))
    r["spec"] = spec.name
    log(f"A/A {spec.name}: {r['promotions']}/{r['n']} false promotions, median gain {r['gain_median']:+.3%}")
    return r


def power(spec_path: Path, n: int, target: float = 0.05) -> dict:
    spec = load_spec(spec_path)
    work = Path(tempfile.mkdtemp())
    code = spec.baseline.read_text()
    probe = rounds_job(spec, spec.baseline, spec.baseline, work / "probe", 1)
    base_ms = probe["champion"]["median_ms"]
    pad_n = max(int(target * base_ms / 1e3 * PAD_GBPS * 1e9 / 8), 4096)   # fp32 read + write
    champ = work / "slowed.py"
    champ.write_text(padded(spec, code, pad_n))
    r = decisions(spec, rounds_job(spec, spec.baseline, champ, work / "job", n))
    true = [d["champ_median_ms"] / d["cand_median_ms"] - 1 for d in r["decisions"]]
    r.update(spec=spec.name, target_gain=target, pad_floats=pad_n, base_median_ms=base_ms,
             true_gain_median=statistics.median(true) if true else None)
    log(f"power {spec.name}: {r['promotions']}/{r['n']} promoted, true gain (medians) "
        f"{r['true_gain_median']:+.3%}")
    return r


def fidelity(targets) -> list[dict]:
    rows = []
    for spec_path, path, regex in targets:
        spec = load_spec(spec_path)
        ncu = ncu_times(spec_path, path, regex)
        res = rounds_job(spec, path, path, Path(tempfile.mkdtemp()), 3)
        means = [r["candidate"]["mean_ms"] for r in res["rounds"]]
        row = {"spec": spec.name, "file": path.name, **{k: v for k, v in ncu.items() if k != "vals"},
               "judge_means_ms": means, "judge_mean_ms": statistics.fmean(means)}
        if ncu.get("ncu_mean_ms"):
            row["ratio_judge_over_ncu"] = row["judge_mean_ms"] / ncu["ncu_mean_ms"]
        rows.append(row)
        log(f"ncu {spec.name} {path.name}: ncu {ncu.get('ncu_mean_ms')} vs judge {row['judge_mean_ms']:.4f}")
    return rows


def summary(res: dict) -> None:
    print("\n== judge validation ==")
    for k, v in res.items():
        if k.startswith(("aa_", "power_")) and isinstance(v, dict) and "n" in v:
            extra = f", true gain {v['true_gain_median']:+.2%}" if "true_gain_median" in v else ""
            print(f"{k:<16} {v['promotions']:>3}/{v['n']:<3} promoted, median gain "
                  f"{v['gain_median']:+.3%}{extra}")
    for row in res.get("ncu") or []:
        if "ratio_judge_over_ncu" in row:
            print(f"ncu {row['spec']:<8} {row['file']:<18} ncu {row['ncu_mean_ms']:.4f} ms, judge "
                  f"{row['judge_mean_ms']:.4f} ms, ratio {row['ratio_judge_over_ncu']:.3f}")
        else:
            print(f"ncu {row.get('spec')}: {row.get('error') or row.get('ncu_stderr_tail', '')[-200:]}")
    c = res.get("cost") or {}
    for k in ("champion_only_prewarm", "cold_prewarm", "warm"):
        if isinstance(c.get(k), dict):
            print(f"cost {k:<22} {c[k]['wall_s']:.2f} s  ok={c[k]['ok']}")
    print("section seconds:", res.get("section_seconds"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/results/judge_validation.json")
    ap.add_argument("--aa", type=int, default=100)
    ap.add_argument("--power", type=int, default=30)
    ap.add_argument("--skip", default="", help="comma list of sections to skip")
    a = ap.parse_args()
    skip = set(filter(None, a.skip.split(",")))
    res = {"argv": sys.argv, "date": time.strftime("%Y-%m-%d %H:%M:%S"),
           "judge": LocalBackend().judge}   # KERNLOOP_JUDGE: warm-fresh (GPU default), warm or cold
    out = Path(a.out)

    def section(name, f):
        if name in skip:
            return
        t0 = time.monotonic()
        try:
            res[name] = f()
        except Exception as e:   # noqa: BLE001 - one failed section must not lose the others
            res[name] = {"error": f"{type(e).__name__}: {e}"}
            log(f"section {name} failed: {e}")
        res.setdefault("section_seconds", {})[name] = round(time.monotonic() - t0, 1)
        out.parent.mkdir(parents=True, exist_ok=True)
        record.write(out, res)

    mm, sm = ROOT / "specs" / "matmul.yaml", ROOT / "specs" / "softmax.yaml"
    tuned = Path(tempfile.mkdtemp()) / "matmul_tuned.py"
    tuned.write_text(replace_config(load_spec(mm).baseline.read_text(), TUNED))
    section("aa_softmax", lambda: aa(sm, a.aa))
    section("aa_matmul", lambda: aa(mm, a.aa))
    section("power_softmax", lambda: power(sm, a.power))
    section("power_matmul", lambda: power(mm, a.power))
    section("ncu", lambda: fidelity([(mm, load_spec(mm).baseline, "matmul"),
                                     (sm, load_spec(sm).baseline, "softmax"),
                                     (mm, tuned, "matmul")]))
    section("cost", lambda: cost(mm, dict(TUNED, BLOCK_N=128)))
    summary(res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
