"""KernLoop's Nebius batch job entry: several candidates in one container, each timed against the
champion, one after another, in the mode named by argv[1], by one warm judge (checker/serve.py:
torch and the CUDA context once, the champion's worker kept, each candidate's worker started
ahead, each candidate still in a fresh process of its own); argv[2] `cold` runs one checker
process per candidate instead (the path before the warm judge). A judge that dies fails the
candidate it held (a failed line written here, saying so) and a new one takes the rest.

Injected with the whole checker package (/kernloop/checker/<name>.py) beside /kernloop/spec.json,
champion.py, batch.json (the candidate ids, in order) and candidate-<id>.py for each, and run as a
script, `python /kernloop/checker/nebius_batch_entry.py MODE [warm|cold]` (a launcher: stdlib
only); it starts `python -m checker.serve` (or `checker.check`) with cwd /kernloop. Without
champion.py the champion is the spec's reference run in torch (`baseline: torch`). Each checker's stdout is printed as ONE
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

JOB = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # /kernloop: holds checker/
MODES = {"gpu": ["--mode", "gpu"], "interpret": ["--mode", "interpret"],
         "interpret-timed": ["--mode", "interpret", "--host-clock"]}
TAG = "KERNLOOP_BATCH "   # nebius_batch.BATCH_MARKER
RESULT = "KERNLOOP_RESULT "   # resultline.MARKER


def warm_lines(p, cids, champion, mode, env):
    """(candidate id, exit code, result line bytes) for each candidate, through one warm judge."""
    judge = None
    for cid in cids:
        if judge is None or judge.poll() is not None:
            judge = subprocess.Popen([sys.executable, "-m", "checker.serve", "--mode", MODES[mode][1]],
                                     cwd=JOB, env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE)
        print("kernloop batch entry: candidate", cid, "(warm judge", judge.pid, ")", file=sys.stderr, flush=True)
        argv = ["--spec", p("spec.json"), "--candidate", p(f"candidate-{cid}.py"), *champion,
                *MODES[mode], "--backend", "nebius"]
        line = b""
        try:
            judge.stdin.write((json.dumps({"op": "job", "id": cid, "argv": argv}) + "\n").encode())
            judge.stdin.flush()
            while True:
                line = judge.stdout.readline()
                if not line or (f'"job_id": {json.dumps(cid)}'.encode() in line
                                and b'"kind": "began"' not in line):   # its result, not its start
                    break
        except OSError:
            line = b""
        if not line:   # the judge died with this candidate: a failed line, and a new judge
            rc = judge.wait()
            judge = None
            fail = {"ok": False, "stage": "backend", "error": f"the warm judge died (exit code {rc}) "
                    "during this candidate; a new one took the rest", "correct": None, "rel_l2": {},
                    "candidate": None, "champion": None, "roofline": None}
            line = (RESULT + json.dumps(fail) + "\n").encode()
        yield cid, 0, line
    if judge is not None and judge.poll() is None:   # EOF: the judge ends, and its workers
        judge.stdin.close()
        try:
            judge.wait(30)
        except subprocess.TimeoutExpired:
            judge.kill()


def cold_lines(p, cids, champion, mode, env):
    for cid in cids:
        print("kernloop batch entry: candidate", cid, file=sys.stderr, flush=True)
        cmd = [sys.executable, "-m", "checker.check", "--spec", p("spec.json"), "--candidate",
               p(f"candidate-{cid}.py"), *champion, *MODES[mode], "--backend", "nebius"]
        out = subprocess.run(cmd, cwd=JOB, env=env, stdout=subprocess.PIPE,
                             stdin=subprocess.DEVNULL)
        yield cid, out.returncode, out.stdout


def main(argv):
    mode = argv[1] if len(argv) > 1 else ""
    judge = argv[2] if len(argv) > 2 else "warm"
    if mode not in MODES or judge not in ("warm", "cold"):
        print(f"kernloop batch entry: mode must be one of {', '.join(MODES)} (then warm or cold), "
              f"got {' '.join(argv[1:])!r}", file=sys.stderr, flush=True)
        return 2
    p = lambda name: os.path.join(JOB, name)  # noqa: E731
    with open(p("batch.json"), encoding="utf-8") as f:
        cids = json.load(f)
    # Injected files are read-only: no bytecode written; the judges write only under TMPDIR.
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1")
    print("kernloop batch entry: python", sys.version.split()[0], "checker mode", mode, judge,
          "judge,", len(cids), "candidates", file=sys.stderr, flush=True)
    champion = ["--champion", p("champion.py")] if os.path.exists(p("champion.py")) else ["--champion-torch"]
    lines = (warm_lines if judge == "warm" else cold_lines)(p, cids, champion, mode, env)
    for cid, rc, out in lines:
        print(f"{TAG}{cid} {rc} {base64.b64encode(out).decode('ascii')}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
