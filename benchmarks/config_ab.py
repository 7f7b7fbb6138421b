#!/usr/bin/env python3
"""Two configs of a spec's template judged against each other by the checker (both orders), and then timed in this process beside each other: where the judge and in-process timing disagree (issue 43).

Session 28's loop and `row_variants.py` disagreed on the same rmsnorm configs (one row and 8
warps: 0.0499 ms in the loop, 0.0397 in row_variants). This puts both measurements of the same
two files in one call, with what each judge job says about its workers (host ms between the
event records, overheads on the judge's clock):

  KERNLOOP_NCU=off python3 benchmarks/config_ab.py --spec specs/rmsnorm.yaml \
      --a ROWS=1,num_warps=8 --b ROWS=4,num_warps=32 --jobs 2 --rounds 3 --out $OUT/config_ab.json
"""
from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks import record  # noqa: E402  (commit, versions, device, command)
from benchmarks.judge_validation import decisions  # noqa: E402
from kernloop.backends.local import LocalBackend  # noqa: E402
from kernloop.families import template  # noqa: E402
from kernloop.spec import load_spec  # noqa: E402


def parse_config(text: str, base: dict) -> dict:
    cfg = dict(base)
    for part in text.split(","):
        k, v = part.split("=", 1)
        cfg[k.strip()] = int(v) if v.strip().lstrip("-").isdigit() else v.strip()
    return cfg


def judged(spec, cand: Path, champ: Path, rounds: int, settle: int, work: Path) -> dict:
    """One cold judge job of `rounds` A/B rounds with `settle` spin cycles after each flush:
    medians per side and the workers' own words."""
    be = LocalBackend(device="local", timeout_s=300,
                      extra_args=("--rounds", str(rounds), "--draws", "1", "--settle-cycles", str(settle)))
    res = be.evaluate(spec, cand, champ, work)
    if not res.get("ok"):
        return {"error": f"{res.get('stage')}: {str(res.get('error'))[:300]}"}
    d = decisions(spec, res)
    probes = [r.get("wall_probe_ms") or {} for r in res.get("rounds") or [res]]
    keys = ("candidate_host", "champion_host", "candidate_overhead", "champion_overhead")
    return {"cand_median_ms": [x["cand_median_ms"] for x in d["decisions"]],
            "champ_median_ms": [x["champ_median_ms"] for x in d["decisions"]],
            "gains": [x["gain"] for x in d["decisions"]],
            "probes": [{k: p.get(k) for k in keys} for p in probes]}


def in_process(spec, files: dict, reps: int) -> dict:
    """The same files imported here and timed interleaved (checker.timing's flush and spin, CUDA
    events), beside a copy of the same bytes: row_variants' way of timing."""
    import importlib.util
    import torch
    from checker import peers as P, timing
    from checker.floor import copy_of
    from checker.validate import make_inputs, torch_dtype
    dev = torch.device("cuda")
    cspec = spec.to_checker()
    args = make_inputs(torch, cspec, cspec["shapes"][0], dev, lambda n: torch_dtype(torch, n), 0)
    flush = timing.Flusher(torch, dev, "read", settle_cycles=timing.SETTLE_CYCLES)
    calls = {}
    for label, path in files.items():
        mspec = importlib.util.spec_from_file_location(f"cfg_{label}", path)
        mod = importlib.util.module_from_spec(mspec)
        mspec.loader.exec_module(mod)
        calls[label] = P.event_call(torch, getattr(mod, spec.entry), args, flush, timing.timed_call)
    nbytes = sum(a.numel() * a.element_size() for a in args) * 2
    calls["copy"] = P.event_call(torch, copy_of(torch, nbytes, dev), (), flush, timing.timed_call)
    samples, _failed, _w = P.interleave(calls, 10, reps)
    return {k: statistics.median(v) for k, v in samples.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", type=Path, required=True)
    ap.add_argument("--a", required=True, help="config A: K=V,K=V over the template's start")
    ap.add_argument("--b", required=True, help="config B")
    ap.add_argument("--jobs", type=int, default=2, help="judge jobs per order")
    ap.add_argument("--rounds", type=int, default=3, help="A/B rounds per judge job")
    ap.add_argument("--reps", type=int, default=200, help="in-process reps")
    ap.add_argument("--settle-cycles", default=None,
                    help="comma-separated spin lengths to judge under (default: the checker's)")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    spec = load_spec(a.spec)
    st = template.start(spec)
    work = Path(tempfile.mkdtemp())
    files = {}
    for label, text in (("A", a.a), ("B", a.b)):
        files[label] = work / f"{label}.py"
        files[label].write_text(template.instantiate(st.match, spec, parse_config(text, st.config)))
    res = {"what": "two template configs: cold judge jobs in both orders, then in-process interleaved",
           "synthetic": False, "spec": spec.name, "a": a.a, "b": a.b, "jobs": []}
    from checker.timing import SETTLE_CYCLES
    settles = [int(x) for x in a.settle_cycles.split(",")] if a.settle_cycles else [SETTLE_CYCLES]
    for j, settle, (cand, champ) in itertools.product(range(a.jobs), settles, (("A", "B"), ("B", "A"))):
        r = judged(spec, files[cand], files[champ], a.rounds, settle, work / f"job{j}{cand}{settle}")
        res["jobs"].append({"candidate": cand, "champion": champ, "settle_cycles": settle, **r})
        print(f"judge {cand} vs {champ}, settle {settle}: " + (r.get("error") or
              f"cand {r['cand_median_ms']} champ {r['champ_median_ms']} probes {r['probes']}"), flush=True)
        record.write(a.out, res, [sys.argv[0], *(argv if argv is not None else sys.argv[1:])])
    res["in_process_median_ms"] = in_process(spec, files, a.reps)
    record.write(a.out, res, [sys.argv[0], *(argv if argv is not None else sys.argv[1:])])
    print("in process: " + ", ".join(f"{k} {v:.4f}" for k, v in res["in_process_median_ms"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
