"""A stand-in for the `nebius` CLI, for tests: `install(dir)` writes an executable `nebius`
there (shebang to this Python) that runs `main()` below.

It accepts the documented flags of the commands KernLoop uses (anything else: a plain-text error
and exit 1, like the real CLI), records every call as one JSON line, and behaves as the scenario
in FAKE_NEBIUS_SCENARIO says:

  success      create copies the injected files into a fake container root and REALLY runs the
               container command there (python <entry>, so the injected checker runs, in whatever
               mode the entry script says); get walks PROVISIONING, STARTING, RUNNING, then
               COMPLETED (FAILED if the container exited non-zero); the first `logs` call prints
               nothing (a job's logs start empty), later ones print the container's output with
               timestamps and ANSI colour codes. The container gets this process's environment
               without KernLoop's own KERNLOOP_* variables (a real one sees none of the host's).
  failed/error the container "crashes": FAILED / ERROR with state_details, a traceback in the logs
  no_result    COMPLETED, logs without any KERNLOOP_RESULT line
  hang         RUNNING forever, until `ai job cancel`: then CANCELLING, CANCELLED
  not_logged_in  every command fails with the real "missing configuration" plain-text error
  reject       create fails with a plain-text InvalidArgument error (even with --format json)
  flaky_get    like hang, but every `ai job get` fails with a plain-text Unavailable error

FAKE_NEBIUS_HANG_AFTER=N: in the success scenario, jobs after the first N hang like `hang`.

FAKE_NEBIUS_CREATE_OUTPUT=text makes create print a line without the job id (the caller must
then find the job with `ai job get-by-name`).

FAKE_NEBIUS_STATE is the folder for calls.jsonl and the jobs; active.jsonl records when each job
starts (create) and reaches a final state (the first `get` that shows one, or its cancel), so a
test can tell how many jobs were billing at once (max_concurrent). FAKE_NEBIUS_TIMING=emulate adds
constant, clearly labelled timing stats to the result line (an interpret-mode checker has none),
standing in for what a GPU container would measure: for tests of the loop, never a measurement.
"""
from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MARKER = "KERNLOOP_RESULT "
BATCH_MARKER = "KERNLOOP_BATCH "
INJECT_LIMIT = 64 * 1024
NOT_LOGGED_IN = ("Error: missing configuration: open /root/.nebius/config.yaml: no such file or "
                 "directory\nTo configure nebius, run:\n\t$ nebius profile create\n")

# Documented flags per command (value-taking unless listed in BOOL); global: --format, --profile.
FLAGS = {
    ("ai", "job", "create"): {"--parent-id", "--name", "--image", "--platform", "--preset",
                              "--args", "--container-command", "--container-port", "--disk-size",
                              "--env", "--env-secret", "--inject-file", "--preemptible",
                              "--registry-secret", "--restart-policy", "--shm-size", "--ssh-key",
                              "--subnet-id", "--timeout", "--volume", "--working-dir", "--async",
                              "--dry-run"},
    ("ai", "job", "get"): {"--id"},
    ("ai", "job", "get-by-name"): {"--name", "--parent-id"},
    ("ai", "job", "logs"): {"--tail", "--since", "--until", "--timestamps"},
    ("ai", "job", "cancel"): {"--id"},
}
BOOL = {"--async", "--dry-run", "--preemptible", "--timestamps"}
REPEATABLE = {"--inject-file", "--env", "--env-secret", "--volume", "--ssh-key", "--container-port"}
EMULATED = {"mean_ms": 1.0, "min_ms": 0.98, "median_ms": 1.0, "std_ms": 0.01, "n": 50, "warmup": 10}


def install(bin_dir: Path) -> Path:
    """Write the `nebius` executable into bin_dir; return its path."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    exe = bin_dir / "nebius"
    exe.write_text(f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(HERE)!r})\n"
                   "import fake_nebius\nsys.exit(fake_nebius.main(sys.argv[1:]))\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return exe


def max_concurrent(state_dir: Path) -> int:
    """The most jobs that were between create and their final state at the same time."""
    f = Path(state_dir) / "active.jsonl"
    evs = [json.loads(l) for l in f.read_text().splitlines()] if f.exists() else []
    now = top = 0
    for e in sorted(evs, key=lambda e: (e["t"], e["event"] == "start")):   # ends first on ties
        now += 1 if e["event"] == "start" else -1
        top = max(top, now)
    return top


def calls(state_dir: Path) -> list[dict]:
    """Every recorded call, in order."""
    f = Path(state_dir) / "calls.jsonl"
    return [json.loads(l) for l in f.read_text().splitlines()] if f.exists() else []


class Usage(Exception):
    pass


def parse(argv: list[str]) -> tuple[tuple, dict, list]:
    """(command words, flags, positionals); unknown flags raise Usage like the real CLI."""
    cmd = tuple(argv[:3])
    if cmd not in FLAGS:
        raise Usage(f"unknown command \"{' '.join(argv[:3])}\" for \"nebius\"")
    allowed = FLAGS[cmd] | {"--format", "--profile"}
    flags: dict = {}
    pos: list = []
    it = iter(argv[3:])
    for a in it:
        if not a.startswith("--"):
            pos.append(a)
            continue
        if a == "--follow":
            raise Usage("the stand-in refuses --follow (it would stream forever)")
        if a not in allowed:
            raise Usage(f"unknown flag: {a}")
        value = True if a in BOOL else next(it, None)
        if value is None:
            raise Usage(f"flag needs an argument: {a}")
        if a in REPEATABLE:
            flags.setdefault(a, []).append(value)
        elif a in flags:
            raise Usage(f"flag given twice: {a}")
        else:
            flags[a] = value
    return cmd, flags, pos


class Fake:
    def __init__(self):
        self.state = Path(os.environ["FAKE_NEBIUS_STATE"])
        self.state.mkdir(parents=True, exist_ok=True)
        self.scenario = os.environ.get("FAKE_NEBIUS_SCENARIO", "success")

    def record(self, argv: list[str]) -> None:
        with open(self.state / "calls.jsonl", "a") as f:
            f.write(json.dumps({"argv": argv, "cwd": os.getcwd(), "t": time.time()}) + "\n")

    def job_dir(self, job_id: str) -> Path:
        d = self.state / "jobs" / job_id
        if not d.is_dir():
            raise Usage(f"rpc error: code = NotFound desc = job {job_id} not found")
        return d

    def load(self, job_id: str) -> dict:
        return json.loads((self.job_dir(job_id) / "job.json").read_text())

    def save(self, job: dict) -> None:
        (self.state / "jobs" / job["id"] / "job.json").write_text(json.dumps(job))

    # -- commands

    def create(self, f: dict) -> int:
        if self.scenario == "reject":
            sys.stderr.write("Error: rpc error: code = InvalidArgument desc = validation error: "
                             f"unknown preset {f.get('--preset')!r} for platform "
                             f"{f.get('--platform')!r}\nrequest ID: fake-req-1\n")
            return 1
        for need in ("--name", "--image"):
            if need not in f:
                raise Usage(f"required flag {need} not set")
        jobs = self.state / "jobs"
        jobs.mkdir(exist_ok=True)
        for i in itertools.count(len(list(jobs.iterdir()))):   # several creates may race
            job_id = f"aijob-fake{i:04d}"   # real ids: aijob-e00...
            try:
                (jobs / job_id).mkdir()
                break
            except FileExistsError:
                continue
        self.active(job_id, "start")
        root = jobs / job_id / "root"
        root.mkdir(parents=True)
        injected = []
        for spec in f.get("--inject-file", []):
            local, _, target = spec.partition(":")
            if not target.startswith("/"):
                raise Usage(f"--inject-file {spec}: container path must be absolute")
            size = Path(local).stat().st_size
            if size > INJECT_LIMIT:
                raise Usage(f"--inject-file {local}: file is {size} bytes, the limit is 64 KiB")
            dest = root / target.lstrip("/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(local, dest)
            injected.append({"container_path": target, "bytes": size})
        job = {"id": job_id, "name": f["--name"], "image": f["--image"],
               "platform": f.get("--platform"), "preset": f.get("--preset"),
               "container_command": f.get("--container-command"), "args": f.get("--args", ""),
               "injected_files": injected, "polls": 0, "log_reads": 0, "cancelled": False}
        hang_after = os.environ.get("FAKE_NEBIUS_HANG_AFTER")
        if hang_after is not None and int(job_id[len("aijob-fake"):]) >= int(hang_after):
            job.update(exit=None, out="", err="", hang=True)
        else:
            job.update(self.run_container(job, root))
        self.save(job)
        op = {"id": f"aiop-{job_id[6:]}", "description": "create job", "resource_id": job_id,
              "created_at": "2025-01-01T00:00:00Z"}
        if os.environ.get("FAKE_NEBIUS_CREATE_OUTPUT") == "text":
            print("\x1b[32m✔\x1b[0m operation submitted")
        else:
            print(json.dumps(op, indent=2))
        return 0

    def run_container(self, job: dict, root: Path) -> dict:
        """What the container does, per scenario: outputs and an exit code."""
        if self.scenario in ("failed", "error"):
            return {"exit": 1, "out": "", "err": "kernloop entry: python 3.11 checker mode gpu\n"
                    "Traceback (most recent call last):\n  File \"/kernloop/checker/check.py\", line 1\n"
                    "RuntimeError: CUDA error: no kernel image is available\n"}
        if self.scenario == "no_result":
            return {"exit": 0, "out": "hello from the container\n", "err": "warming up\n"}
        if self.scenario != "success":
            return {"exit": None, "out": "", "err": ""}
        # --args is ONE string split on spaces (verified); the image entrypoint is replaced by
        # --container-command. `python` is this Python; absolute paths live under the fake root.
        argv = [a for a in job["args"].split(" ") if a]
        exe = sys.executable if job["container_command"] == "python" else job["container_command"]
        argv = [str(root / a.lstrip("/")) if a.startswith("/") else a for a in argv]
        # A real container sees none of this machine's variables: KernLoop's own are left out, so
        # whatever the job needs from them must come through its arguments.
        env = {k: v for k, v in os.environ.items() if not k.startswith("KERNLOOP_")}
        p = subprocess.run([exe, *argv], capture_output=True, text=True, timeout=600,
                           cwd=str(root), stdin=subprocess.DEVNULL, env=env)
        out = p.stdout
        if os.environ.get("FAKE_NEBIUS_TIMING") == "emulate":
            out = emulate_timing(out)
        return {"exit": p.returncode, "out": out, "err": p.stderr}

    def active(self, job_id: str, event: str) -> None:
        with open(self.state / "active.jsonl", "a") as fh:
            fh.write(json.dumps({"job": job_id, "event": event, "t": time.time()}) + "\n")

    def get(self, f: dict) -> int:
        if self.scenario == "flaky_get":
            sys.stderr.write("Error: rpc error: code = Unavailable desc = connection refused\n")
            return 1
        job = self.load(f["--id"])
        job["polls"] += 1
        state, details = self.state_of(job)
        if state in ("COMPLETED", "FAILED", "CANCELLED", "ERROR") and not job.get("ended"):
            job["ended"] = True
            self.active(job["id"], "end")
        self.save(job)
        print(json.dumps({"metadata": {"id": job["id"], "name": job["name"],
                                       "parent_id": "project-fake"},
                          "spec": {"image": job["image"], "platform": job["platform"],
                                   "preset": job["preset"]},
                          "status": {"state": state, "state_details": details}}, indent=2))
        return 0

    def state_of(self, job: dict) -> tuple[str, dict]:
        if job["cancelled"]:
            return ("CANCELLING", {}) if job["polls"] <= job["cancelled"] else (
                "CANCELLED", {"code": "Cancelled", "message": "cancelled by user"})
        walk = ["PROVISIONING", "STARTING", "RUNNING"]
        if job["polls"] <= len(walk) or self.scenario == "hang" or job.get("hang"):
            return walk[min(job["polls"], len(walk)) - 1], {}
        if self.scenario == "error":
            return "ERROR", {"code": "InstanceError", "message": "the VM stopped unexpectedly"}
        if job["exit"] == 0:
            return "COMPLETED", {}
        return "FAILED", {"code": "ContainerExitCode", "message": f"container exited with code {job['exit']}"}

    def get_by_name(self, f: dict) -> int:
        for d in sorted((self.state / "jobs").glob("*")):
            job = json.loads((d / "job.json").read_text())
            if job["name"] == f["--name"]:
                print(json.dumps({"metadata": {"id": job["id"], "name": job["name"]}}))
                return 0
        sys.stderr.write(f"Error: rpc error: code = NotFound desc = job {f['--name']} not found\n")
        return 1

    def logs(self, pos: list) -> int:
        if len(pos) != 1:
            raise Usage("logs takes exactly one job id (positional)")
        job = self.load(pos[0])
        job["log_reads"] += 1
        self.save(job)
        if job["log_reads"] == 1 or job["exit"] is None:
            return 0   # empty with exit 0, like a job whose logs have not arrived
        for n, (stream, line) in enumerate(interleave(job["out"], job["err"])):
            stamp = f"2025-01-01T00:00:{n % 60:02d}.{n:06d}Z"
            colour = "\x1b[31m" if stream == "stderr" else "\x1b[37m"
            print(f"\x1b[2m{stamp}\x1b[0m {colour}{line}\x1b[0m")
        return 0

    def cancel(self, f: dict) -> int:
        job = self.load(f["--id"])
        job["cancelled"] = job["polls"] + 1   # one more CANCELLING poll, then CANCELLED
        self.save(job)
        print(f"job {job['id']} cancellation requested")
        return 0


def interleave(out: str, err: str):
    """stderr lines first, then stdout: the result line comes last, as in a real run."""
    for line in err.splitlines():
        yield "stderr", line
    for line in out.splitlines():
        yield "stdout", line


def emulate_timing(stdout: str) -> str:
    """Add labelled constant timing to the result line (see the module docstring); in a batch
    job's tagged lines (KERNLOOP_BATCH <id> <rc> <base64 stdout>) too."""
    lines = []
    for line in stdout.splitlines():
        if line.startswith(BATCH_MARKER):
            tag, cid, rc, b64 = (line.split(" ") + ["", "", ""])[:4]
            inner = emulate_timing(base64.b64decode(b64).decode())
            line = " ".join([tag, cid, rc, base64.b64encode(inner.encode()).decode()])
        elif line.startswith(MARKER):
            res = json.loads(line[len(MARKER):])
            if res.get("ok"):
                res["candidate"], res["champion"] = dict(EMULATED), dict(EMULATED)
                res["timing_source"] = "fake_nebius stand-in: constant emulated timing, NOT a measurement"
            line = MARKER + json.dumps(res, sort_keys=True)
        lines.append(line)
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    fake = Fake()
    fake.record(argv)
    if fake.scenario == "not_logged_in":
        sys.stderr.write(NOT_LOGGED_IN)
        return 1
    try:
        cmd, flags, pos = parse(argv)
        if flags.get("--format", "json") != "json":
            raise Usage("the stand-in only speaks --format json")
        action = {"create": lambda: fake.create(flags), "get": lambda: fake.get(flags),
                  "get-by-name": lambda: fake.get_by_name(flags), "logs": lambda: fake.logs(pos),
                  "cancel": lambda: fake.cancel(flags)}[cmd[2]]
        return action()
    except Usage as e:   # plain text on stderr, even with --format json, like the real CLI
        sys.stderr.write(f"Error: {e}\n")
        return 1
