#!/usr/bin/env python3
"""Tree against chain on the CPU synthetic backend (issue 45): the loop's own iteration (contract, the real checker in the Triton interpreter, modeled time, the promotion rule, the tree) against a scripted proposer whose good kernel needs two steps through a slower parent; 5 seeds, 40 candidates each.

    python3 benchmarks/tree_vs_chain_synthetic.py --seeds 0,1,2,3,4 --iterations 40 --out t.json

Every number it writes is SYNTHETIC (perfmodel.py's modeled times), labelled so in the JSON. The
world, per seed: proposal 2 + seed % 3 is the slower idea (specs/matmul.yaml's baseline with 2
warps: modeled about 3% slower); a candidate written from that idea (its parent) is the good kernel
(64-row tiles: modeled faster than the baseline by more than the 2% bar); every other proposal is
its parent's file again under another note (a tie, rejected). benchmarks/tree_vs_chain.py
--scripted is the same world on the selection rule alone.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks import record  # noqa: E402  (commit, versions, device, command)

SEARCHES = ("tree", "chain")
CFG = dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=1, num_warps=4, num_stages=2)


class SlowerParentWorld:
    """The scripted proposer: ties until proposal `idea_at`, then the slower idea; from the
    idea, the good kernel; from anything else, a tie."""
    name, model = "scripted", None

    def __init__(self, base: str, idea_at: int):
        from kernloop.propose.tuner import replace_config
        self.base, self.idea_at, self.idea_id = base, idea_at, None
        self.slow = replace_config(base, {**CFG, "num_warps": 2})
        self.good = replace_config(base, {**CFG, "BLOCK_M": 64})

    def describe(self):
        return {"proposer": "scripted", "model": None, "endpoint_host": None}

    def propose(self, ctx):
        from kernloop.propose.proposer import Proposal
        if ctx.iteration == self.idea_at:
            self.idea_id = f"it{ctx.iteration:04d}"
            return Proposal(code=self.slow, note="a different, slower idea", proposer="scripted")
        if self.idea_id is not None and ctx.parent_id == self.idea_id:
            return Proposal(code=self.good, note="the idea's second step", proposer="scripted")
        return Proposal(code=f"# NOTE: again {ctx.iteration}\n{self.base}", note="a tie", proposer="scripted")


def world(seed: int, search: str, budget: int, backend, tmp: Path) -> dict:
    """One run of the world: the iteration that found the good kernel (None: not found) and the
    modeled times of the idea and the champion."""
    import orchestrator
    from kernloop.loop.state import State
    from kernloop.spec import load_spec
    spec = load_spec(ROOT / "specs" / "matmul.yaml")
    spec.loop["search"] = search
    base = spec.baseline.read_text()
    prop = SlowerParentWorld(base, idea_at=2 + seed % 3)
    run = tmp / f"{search}-{seed}"
    (run / "candidates").mkdir(parents=True)
    (run / "baseline.py").write_text(base)
    st = State()
    st.configure(spec, tuner=False, seed=seed)
    found = None
    for n in range(1, budget + 1):
        ev, _ = orchestrator.run_iteration(n, st, spec, prop, backend, run, 0.02, 2.0)
        st.apply(st.place(ev), None)
        if ev.get("note") == "the idea's second step" and (ev.get("result") or {}).get("ok"):
            found = n
            break
    idea = st.tree.nodes.get(prop.idea_id) if prop.idea_id else None
    return {"found_at": found, "candidates": n, "champion": st.champion_id,
            "idea_time_vs_baseline": None if idea is None else idea.time,
            "champion_time_vs_baseline": st.tree.nodes[st.champion_id].time if st.champion_id in st.tree.nodes else 1.0}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0,1,2,3,4", type=lambda v: [int(x) for x in v.split(",")])
    ap.add_argument("--iterations", type=int, default=40)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    from kernloop.backends.synthetic import SyntheticBackend
    res = {"what": "tree vs chain on the synthetic backend: the scripted world through the loop's own iteration; "
                   "found_at is the candidate that found the two-step kernel (null: not in the budget)",
           "synthetic": True, "timing": "SYNTHETIC (modeled by kernloop/backends/perfmodel.py)",
           "budget": a.iterations, "runs": {s: {} for s in SEARCHES}}
    backend = SyntheticBackend()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for seed in a.seeds:
                for s in SEARCHES:
                    r = world(seed, s, a.iterations, backend, Path(tmp))
                    res["runs"][s][str(seed)] = r
                    print(f"SYNTHETIC seed {seed} {s}: found at {r['found_at']} of {r['candidates']}", flush=True)
    finally:
        backend.close()
    res["found_in"] = {s: sum(r["found_at"] is not None for r in res["runs"][s].values()) for s in SEARCHES}
    record.write(a.out, res, [sys.argv[0], *(argv if argv is not None else sys.argv[1:])])
    print("SYNTHETIC", res["found_in"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
