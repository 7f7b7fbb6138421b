"""KernLoop's Nebius job entry: run the injected checker on the injected files, in the mode named by argv[1].

Injected as /kernloop/kernloop_entry.py beside check.py, spec.json, candidate.py and champion.py
(either of the last two absent for a torch side);
the job runs `python /kernloop/kernloop_entry.py gpu|interpret`. Every path is next to this file,
so nothing depends on the container's working directory.
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
MODES = ("gpu", "interpret")


def main(argv):
    mode = argv[1] if len(argv) > 1 else ""
    if mode not in MODES:
        print(f"kernloop entry: mode must be one of {', '.join(MODES)}, got {mode!r}", file=sys.stderr, flush=True)
        return 2
    p = lambda name: os.path.join(HERE, name)  # noqa: E731
    # A side whose file was not injected is the spec's reference run in torch (`baseline: torch`).
    sides = [a for side in ("candidate", "champion") for a in
             ((f"--{side}", p(f"{side}.py")) if os.path.exists(p(f"{side}.py")) else (f"--{side}-torch",))]
    cmd = [sys.executable, p("check.py"), "--spec", p("spec.json"), *sides, "--mode", mode,
           "--backend", "nebius"]
    print("kernloop entry: python", sys.version.split()[0], "checker mode", mode, file=sys.stderr, flush=True)
    # Injected files are read-only: run where writing is allowed, and write no bytecode.
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1")
    rc = subprocess.call(cmd, cwd=tempfile.gettempdir(), env=env)
    if rc:
        print("kernloop entry: checker exited with code", rc, file=sys.stderr, flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))
