#!/usr/bin/env python3
"""A/A with batches: how often does the best of B identical copies of the champion get promoted,
with and without the confirmation rule (issue: many candidates in flight)?

Each round times B copies of the champion against the champion, each in its own checker process
on the same worker, one after another (Backend.evaluate_batch), and decides each
(decision.decide). Every promotion is false: the copies are the champion.
  without confirmation  the best winner of the batch is promoted at once (the rule it replaces)
  with confirmation     the winners, best first (decision.batch_winners), are each re-timed
                        alone in a fresh job; the first that wins again is promoted
Rates are per decision (one decision per copy timed: rounds x B), and per round.

  python benchmarks/aa_batch.py --mode gpu --out benchmarks/results/session3/aa_batch_h200.json  # H200
  python benchmarks/aa_batch.py --mode interpret --rounds 2 --out /tmp/aa.json                   # CPU smoke

--mode gpu uses the local backend (a CUDA GPU). --mode interpret uses the SYNTHETIC backend:
Triton interpreter correctness on the CPU, MODELED timing with modeled noise, labelled synthetic.
At ~4 s a checker job, the default 25 rounds of 4 (100 decisions, plus any confirmation jobs)
take about 5-7 minutes on an H200; --max-minutes stops starting rounds after that long and the
JSON says how many decisions were made.
"""
from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks import record  # noqa: E402  (commit, versions, device, command)

from kernloop import decision  # noqa: E402
from kernloop.spec import load_spec  # noqa: E402


def make(mode: str, checker_args: list[str], judge: str | None = None):
    if mode == "gpu":
        from kernloop.backends.local import LocalBackend, cuda_visible
        ok, why = cuda_visible()
        if not ok:
            raise SystemExit(f"error: --mode gpu needs a CUDA GPU ({why}); try --mode interpret")
        return LocalBackend(device=why.split(": ", 1)[-1], extra_args=tuple(checker_args), judge=judge)
    from kernloop.backends.synthetic import SyntheticBackend
    return SyntheticBackend(seed=0)


def summary(d: dict) -> dict:
    r = d.get("rule") or {}
    return {"verdict": d["verdict"], "gain": r.get("gain"), "reason": d["reason"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=["gpu", "interpret"], default="gpu")
    ap.add_argument("--spec", default="specs/matmul.yaml")
    ap.add_argument("--champion", help="the kernel file copied (default: the spec's baseline)")
    ap.add_argument("--rounds", type=int, default=25)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--max-minutes", type=float, default=7.0)
    ap.add_argument("--checker-args", default="--draws 1",
                    help="extra checker flags for --mode gpu (default '--draws 1': one input draw "
                         "per shape for correctness; timing is unchanged)")
    ap.add_argument("--min-gain", type=float, help="override the spec's loop.min_gain (a looser "
                    "bar makes more copies win, to see the confirmation rule work)")
    ap.add_argument("--sigma", type=float, help="override the spec's loop.sigma")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    spec = load_spec(ROOT / a.spec if not Path(a.spec).is_absolute() else a.spec)
    backend = make(a.mode, shlex.split(a.checker_args))
    champion = Path(a.champion) if a.champion else spec.baseline
    min_gain = float(spec.loop["min_gain"] if a.min_gain is None else a.min_gain)
    sigma = float(spec.loop.get("sigma", 2.0) if a.sigma is None else a.sigma)
    t0 = time.monotonic()
    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        champ = work / "champion.py"
        champ.write_text(champion.read_text())
        copies = []
        for i in range(a.batch):
            copies.append((f"copy{i}", work / f"copy{i}.py"))
            copies[-1][1].write_text(champ.read_text())
        for r in range(a.rounds):
            if time.monotonic() - t0 > a.max_minutes * 60:
                break
            res = backend.evaluate_batch(spec, copies, champ, work / f"round{r}")
            decs = [(cid, decision.decide(x, min_gain=min_gain, sigma=sigma))
                    for (cid, _), x in zip(copies, res)]
            failed = [cid for cid, d in decs if d["verdict"] not in ("promoted", "rejected")]
            winners = decision.batch_winners(decs)
            confirmations = []
            for cid in winners:   # best first, each alone in a fresh job, until one confirms
                again = backend.evaluate(spec, work / f"{cid}.py", champ, work / f"round{r}-{cid}-c")
                d = decision.decide(again, min_gain=min_gain, sigma=sigma)
                confirmations.append({"copy": cid, **summary(d)})
                if d["promoted"]:
                    break
            rounds.append({"round": r, "decisions": {cid: summary(d) for cid, d in decs},
                           "failed": failed, "winners": winners, "confirmations": confirmations,
                           "false_promotion_without": bool(winners),
                           "false_promotion_with": any(c["verdict"] == "promoted"
                                                       for c in confirmations)})
            print(f"round {r + 1}: {len(winners)} of {a.batch} copies won"
                  + (f", confirmation: {[c['verdict'] for c in confirmations]}" if winners else ""),
                  flush=True)
    n_dec = sum(len(x["decisions"]) - len(x["failed"]) for x in rounds)
    without = sum(x["false_promotion_without"] for x in rounds)
    with_ = sum(x["false_promotion_with"] for x in rounds)
    raw_wins = sum(len(x["winners"]) for x in rounds)
    doc = {
        "what": f"A/A: batches of {a.batch} copies of the champion timed against it; every "
                "promotion is false", "mode": a.mode, "synthetic": backend.synthetic,
        "device": backend.device, "spec": spec.name, "champion": str(champion.name),
        "rule": {"min_gain": min_gain, "sigma": sigma}, "rounds": len(rounds),
        "decisions": n_dec, "failed_jobs": sum(len(x["failed"]) for x in rounds),
        "copies_that_won_in_their_batch": raw_wins,
        "false_promotions_without_confirmation": without,
        "false_promotions_with_confirmation": with_,
        "false_promotion_rate_without": round(without / n_dec, 4) if n_dec else None,
        "false_promotion_rate_with": round(with_ / n_dec, 4) if n_dec else None,
        "per_round_rate_without": round(without / len(rounds), 4) if rounds else None,
        "per_round_rate_with": round(with_ / len(rounds), 4) if rounds else None,
        "confirmation_jobs": sum(len(x["confirmations"]) for x in rounds),
        "wall_s": round(time.monotonic() - t0, 1), "python": platform.python_version(),
        "command": "python benchmarks/aa_batch.py " + " ".join(argv or sys.argv[1:]),
        "detail": rounds}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    record.write(a.out, doc, [sys.argv[0], *(argv or sys.argv[1:])])
    print(json.dumps({k: v for k, v in doc.items() if k != "detail"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
