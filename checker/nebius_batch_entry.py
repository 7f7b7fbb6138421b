"""KernLoop's Nebius batch job entry: several candidates in one container, each timed against the
champion by its own checker process, one after another, in the mode named by argv[1].

Injected as /kernloop/kernloop_entry.py beside check.py, spec.json, champion.py, batch.json (the
candidate ids, in order) and candidate-<id>.py for each; without champion.py the champion is the
spec's reference run in torch (`baseline: torch`). Each checker's stdout is printed as ONE
line, base64, tagged with its candidate: `KERNLOOP_BATCH <id> <exit code> <base64>`, so one
candidate's output can never pass for another's (nebius_batch.parse_batch_lines reads them).

No second look here (no --profile-kernel, no --peers): a batch winner is promoted only after it
is confirmed alone in a fresh single-candidate job (checker/nebius_entry.py), and that job's
result, profile included, is the one the run logs; a profile taken here would be thrown away.
`interpret-timed` times the interpreter on the host clock (--host-clock; never a measurement).
"""
import base64
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
MODES = {"gpu": ["--mode", "gpu"], "interpret": ["--mode", "interpret"],
         "interpret-timed": ["--mode", "interpret", "--host-clock"]}
TAG = "KERNLOOP_BATCH "   # nebius_batch.BATCH_MARKER


def main(argv):
    mode = argv[1] if len(argv) > 1 else ""
    if mode not in MODES:
        print(f"kernloop batch entry: mode must be one of {', '.join(MODES)}, got {mode!r}",
              file=sys.stderr, flush=True)
        return 2
    p = lambda name: os.path.join(HERE, name)  # noqa: E731
    with open(p("batch.json"), encoding="utf-8") as f:
        cids = json.load(f)
    # Injected files are read-only: run where writing is allowed, and write no bytecode.
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1")
    print("kernloop batch entry: python", sys.version.split()[0], "checker mode", mode,
          len(cids), "candidates", file=sys.stderr, flush=True)
    champion = ["--champion", p("champion.py")] if os.path.exists(p("champion.py")) else ["--champion-torch"]
    for cid in cids:
        print("kernloop batch entry: candidate", cid, file=sys.stderr, flush=True)
        cmd = [sys.executable, p("check.py"), "--spec", p("spec.json"), "--candidate",
               p(f"candidate-{cid}.py"), *champion, *MODES[mode], "--backend", "nebius"]
        out = subprocess.run(cmd, cwd=tempfile.gettempdir(), env=env, stdout=subprocess.PIPE,
                             stdin=subprocess.DEVNULL)
        print(f"{TAG}{cid} {out.returncode} {base64.b64encode(out.stdout).decode('ascii')}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
