#!/usr/bin/env python3
"""`check` over MCP against `kernloop check` on the same kernels, on the GPU: the same verdict, and within noise the same times (issue 46).

Each round runs every kernel once through the CLI (`python -m orchestrator check ... --json -`, a
process and a judge of its own) and once through one `kernloop mcp` server (the official MCP
client over stdio; the server keeps its backend warm between checks). Per kernel it keeps both
verdicts, both times and ratios of every round, and their medians.

  KERNLOOP_NCU=off python3 benchmarks/mcp_check.py --out $OUT/mcp_check.json      # GPU, ~3 min
  python3 benchmarks/mcp_check.py --backend synthetic --rounds 1 --out /tmp/m.json  # CPU smoke (SYNTHETIC)
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks import record  # noqa: E402  (commit, versions, device, command)

KERNELS = ("specs/softmax_naive.py", "benchmarks/by_hand/softmax.py")
KEEP = ("correct", "ok", "stage", "candidate_ms", "baseline_ms", "speedup", "synthetic", "device")


def cli_check(spec: str, kernel: str, backend: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "orchestrator", "check", "--spec", spec, kernel, "--backend",
                          backend, "--json", "-"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    try:
        line = json.loads(out.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return {"error": f"exit {out.returncode}: {out.stderr.strip()[-300:]}"}
    return {k: line.get(k) for k in KEEP}


async def mcp_checks(spec: str, kernels: list[str], rounds: int, backend: str) -> list[list[dict]]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client
    import os
    params = StdioServerParameters(command=sys.executable, args=["-m", "orchestrator", "mcp", "--backend", backend,
                                                                 "--runs", "/tmp/kernloop-mcp-bench"],
                                   cwd=str(ROOT), env=dict(os.environ))
    got = []
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            for _ in range(rounds):
                row = []
                for k in kernels:
                    res = await s.call_tool("check", {"spec": spec, "kernel_path": k}, read_timeout_seconds=900)
                    body = "".join(getattr(c, "text", "") for c in res.content)
                    row.append({"error": body} if res.is_error else {k2: json.loads(body).get(k2) for k2 in KEEP})
                got.append(row)
    return got


def median(rows: list[dict], key: str):
    vals = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
    return statistics.median(vals) if vals else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default="specs/softmax.yaml")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--backend", default="local", choices=["local", "synthetic"])
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    cli = [[cli_check(a.spec, k, a.backend) for k in KERNELS] for _ in range(a.rounds)]
    over_mcp = asyncio.run(mcp_checks(a.spec, list(KERNELS), a.rounds, a.backend))
    kernels = {}
    for i, k in enumerate(KERNELS):
        c, m = [r[i] for r in cli], [r[i] for r in over_mcp]
        kernels[k] = {"cli": c, "mcp": m, "same_verdict": {x.get("correct") for x in c + m} in ({True}, {False}),
                      "median": {side: {key: median(rows, key) for key in ("candidate_ms", "baseline_ms", "speedup")}
                                 for side, rows in (("cli", c), ("mcp", m))}}
    # record's device is this process's, which times nothing; the judges' lines say where the kernels ran
    judged_on = sorted({str(x.get("device")) for r in cli + over_mcp for x in r})
    doc = {"spec": a.spec, "rounds": a.rounds, "backend": a.backend, "judged_on": judged_on, "kernels": kernels}
    record.write(Path(a.out), doc)
    print(f"{'kernel':<34} {'verdicts':>9} {'cli ms':>9} {'mcp ms':>9} {'cli x':>7} {'mcp x':>7}")
    for k, v in kernels.items():
        mc, mm = v["median"]["cli"], v["median"]["mcp"]
        f = lambda x, p: "--" if x is None else f"{x:.{p}f}"   # noqa: E731
        print(f"{k:<34} {'same' if v['same_verdict'] else 'DIFFER':>9} {f(mc['candidate_ms'], 4):>9} "
              f"{f(mm['candidate_ms'], 4):>9} {f(mc['speedup'], 2):>7} {f(mm['speedup'], 2):>7}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
