#!/usr/bin/env python3
"""The LLM path end to end with a scripted model: a loopback chat server whose first answer is
benchmarks/by_hand/softmax.py, the real client, contract, backend and judge; what it was told, and
where the result stands against the peers.

  python benchmarks/llm_by_hand.py --out $OUT/llm_by_hand.json                    (GPU: --backend local)
  python benchmarks/llm_by_hand.py --backend synthetic --out /tmp/llm_by_hand.json (CPU smoke test)

Writes: the run folder's events (baseline, the iteration, run_end), the verdict of the scripted
answer, the prompt the server received, and the run's final terminal line.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
from contextlib import redirect_stdout
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks import record  # noqa: E402  (commit, versions, device, command)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "llm_by_hand.json"))
    ap.add_argument("--backend", default="local", choices=["local", "synthetic"])
    ap.add_argument("--spec", default="softmax")
    ap.add_argument("--runs", default=None, help="folder for the run folder (default: a temp dir)")
    a = ap.parse_args(argv)
    import tempfile

    import orchestrator
    from tests.loopback_openai import LoopbackOpenAI, reply
    from kernloop.trajectory import read_events
    answer = (ROOT / "benchmarks" / "by_hand" / f"{a.spec}.py").read_text()
    runs = Path(a.runs or tempfile.mkdtemp(prefix="llm_by_hand_"))
    t0 = time.monotonic()
    with LoopbackOpenAI() as srv:
        srv.push(reply(f"```python\n{answer}```"))
        keep = {k: os.environ.get(k) for k in ("KERNLOOP_LLM_BASE_URL", "KERNLOOP_LLM_API_KEY")}
        os.environ.update(KERNLOOP_LLM_BASE_URL=srv.base_url, KERNLOOP_LLM_API_KEY="loopback")
        buf = io.StringIO()
        try:
            with redirect_stdout(buf):
                rc = orchestrator.main(["--spec", str(ROOT / "specs" / f"{a.spec}.yaml"), "--backend",
                                        a.backend, "--proposer", "llm", "--iterations", "1",
                                        "--out", str(runs)])
        finally:
            for k, v in keep.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        prompt = srv.requests[0].messages if srv.requests else None
    run_dir = sorted(p.parent for p in runs.glob("*/run.jsonl"))[-1]
    events = read_events(run_dir / "run.jsonl")
    its = [e for e in events if e["event"] == "iteration"]
    out = {"argv": sys.argv if argv is None else argv, "rc": rc, "backend": a.backend,
           "run_dir": str(run_dir), "wall_s": time.monotonic() - t0,
           "verdict": (its[0].get("decision") if its else None),
           "terminal": buf.getvalue().splitlines()[-5:], "prompt_messages": prompt,
           "events": [{k: v for k, v in e.items() if k != "result"} | {"result": e.get("result")}
                      for e in events]}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    record.write(a.out, out, argv, default=str)
    print("\n".join(out["terminal"]))
    print(f"verdict: {(out['verdict'] or {}).get('verdict')}; wrote {a.out}", file=sys.stderr)
    return 0 if rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
