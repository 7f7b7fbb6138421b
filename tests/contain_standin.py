"""An orchestrator stand-in for the containment tests: it waits for a line on stdin, runs the
checker exactly as the backends do (sandbox.run_child: own session, timeout, stripped
environment) with the checker's test seam passed explicitly, writes what came back to a JSON
file, and says it is alive. A worker that could stop or kill it would leave it hung or dead.

    python tests/contain_standin.py OUT.json TIMEOUT_S CWD seam|noseam -- judge command...
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from kernloop.backends.sandbox import run_child  # noqa: E402


def main(argv):
    out, timeout, cwd, seam = argv[1], float(argv[2]), argv[3], argv[4] == "seam"
    cmd = argv[argv.index("--") + 1:]
    sys.stdin.readline()   # the test writes the kernel file (with this pid in it) first
    r = run_child(cmd, timeout, cwd=cwd,
                  env_extra={"KERNLOOP_TEST_SEAM": "arbitrary-python"} if seam else None)
    with open(out, "w") as f:
        json.dump({"stdout": r.stdout, "stderr": r.stderr[-8000:], "rc": r.returncode,
                   "timed_out": r.timed_out}, f)
    print("stand-in alive", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
