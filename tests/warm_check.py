"""checker/check.py's command line through a warm judge (checker/serve.py): the job runs as the
loop's warm path runs it (its workers from the pool: a spare started ahead, with its own OS
layers and folder) and its one result line is printed on stdout, so a test written against
check.py holds the warm judge to the same verdicts (tests/judges.py picks it by default).

  python tests/warm_check.py [--root FOLDER_HOLDING_checker/] <check.py's flags>
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

MARKER = "KERNLOOP_RESULT "


def _flag(argv: list[str], name: str, default: str) -> str:
    return argv[argv.index(name) + 1] if name in argv[:-1] else default


def main(argv: list[str]) -> int:
    root = Path(__file__).resolve().parent.parent   # the folder holding the package
    if argv[:1] == ["--root"]:
        root, argv = Path(argv[1]), argv[2:]
    flags = ["--mode", _flag(argv, "--mode", "gpu"), "--spares", "1",
             "--flush", _flag(argv, "--flush", "read")]
    if "--settle-cycles" in argv:
        flags += ["--settle-cycles", _flag(argv, "--settle-cycles", "0")]
    p = subprocess.Popen([sys.executable, "-m", "checker.serve", *flags], cwd=str(root), stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, env=os.environ)
    p.stdin.write(json.dumps({"op": "job", "id": "1", "argv": argv,
                              "timeout_s": float(os.environ.get("KERNLOOP_CHECK_TIMEOUT_S") or 300)}) + "\n")
    p.stdin.flush()
    line = None
    for raw in p.stdout:
        if raw.startswith(MARKER):
            res = json.loads(raw[len(MARKER):])
            if res.get("job_id") == "1" and res.get("kind") != "began":
                line = raw
                break
    try:
        p.stdin.write(json.dumps({"op": "exit"}) + "\n")
        p.stdin.close()
    except OSError:
        pass
    try:
        p.wait(30)
    except subprocess.TimeoutExpired:
        p.kill()
    if line is None:
        print(f"warm_check: the warm judge gave no answer (exit {p.returncode})", file=sys.stderr)
        return 1
    sys.stdout.write(line)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
