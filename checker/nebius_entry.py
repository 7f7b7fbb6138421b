"""KernLoop's Nebius job entry: run the injected checker on the injected files, in the mode and with the options named by its arguments.

Injected with the whole checker package (/kernloop/checker/<name>.py, the second look's modules
among them) beside /kernloop/spec.json, candidate.py and champion.py (either of the last two
absent for a torch side); the job runs this file as a script (a launcher: stdlib only, no import
of the package)

    python /kernloop/checker/nebius_entry.py gpu|interpret|interpret-timed [peers] [ncu=auto|off]

and it starts `python -m checker.check` with cwd /kernloop, the folder holding the package.

(`--args` is one string split on spaces: every word here is free of them). The checker runs as
the local backend runs it: `--profile-kernel` always (the judge itself profiles a candidate that
may be promoted, after its verdict, in this same job), `--peers` when asked (the baseline and
final jobs), KERNLOOP_NCU as the host set it; `interpret-timed` is the interpreter timed on the
host clock (`--host-clock`: a CPU test of that path, never a measurement). Every path is found
from this file's own, so nothing depends on the container's working directory.
"""
import os
import subprocess
import sys

JOB = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # /kernloop: holds checker/
MODES = {"gpu": ["--mode", "gpu"], "interpret": ["--mode", "interpret"],
         "interpret-timed": ["--mode", "interpret", "--host-clock"]}
NCU_MODES = ("auto", "off")


def parse(words):
    """(checker mode flags, --peers?, KERNLOOP_NCU) from the entry's arguments; ValueError names
    the bad word."""
    if not words or words[0] not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {(words or [''])[0]!r}")
    peers, ncu = False, "auto"
    for w in words[1:]:
        if w == "peers":
            peers = True
        elif w.startswith("ncu=") and w[4:] in NCU_MODES:
            ncu = w[4:]
        else:
            raise ValueError(f"unknown option {w!r} (peers, ncu=auto, ncu=off)")
    return MODES[words[0]], peers, ncu


def checker_command(words, p):
    """The checker's command line and KERNLOOP_NCU for these entry arguments (`p`: a path in the
    job folder)."""
    mode, peers, ncu = parse(words)
    # A side whose file was not injected is the spec's reference run in torch (`baseline: torch`).
    sides = [a for side in ("candidate", "champion") for a in
             ((f"--{side}", p(f"{side}.py")) if os.path.exists(p(f"{side}.py")) else (f"--{side}-torch",))]
    return ([sys.executable, "-m", "checker.check", "--spec", p("spec.json"), *sides, *mode,
             "--backend", "nebius", "--profile-kernel", *(["--peers"] if peers else [])], ncu)


def main(argv):
    p = lambda name: os.path.join(JOB, name)  # noqa: E731
    try:
        cmd, ncu = checker_command(argv[1:], p)
    except ValueError as e:
        print(f"kernloop entry: {e}", file=sys.stderr, flush=True)
        return 2
    print("kernloop entry: python", sys.version.split()[0], " ".join(cmd[1:]),
          "KERNLOOP_NCU=" + ncu, file=sys.stderr, flush=True)
    # Injected files are read-only: no bytecode written; the judge writes only under TMPDIR.
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1", KERNLOOP_NCU=ncu)
    rc = subprocess.call(cmd, cwd=JOB, env=env)
    if rc:
        print("kernloop entry: checker exited with code", rc, file=sys.stderr, flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))
