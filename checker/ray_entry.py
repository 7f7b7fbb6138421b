"""KernLoop's Ray task body: run one evaluation job (the judge, once per candidate) on the node
Ray placed it on, each judge in a fresh child process, and return what each printed.

Ray ships this package to every node through the job's runtime environment (its working_dir holds
checker/ alone), so the task imports nothing of KernLoop but this package (as `checker.ray_entry`);
the driver (backends/ray.py) wraps `run_job` in `ray.remote`. The candidate's code runs only inside
the judge's own worker processes, never in the Ray worker that runs this function: the judge is
started as `python -m checker.check` from a fresh folder holding a copy of the package
(folder/checker/: `ship`), the spec and the kernel files, exactly as the local backend starts it, in its own session, killed with its process group at the time
limit, and killed by the kernel if this Ray worker dies (PR_SET_PDEATHSIG), so a node or worker
that dies mid-job leaves no judge behind to finish unseen.

The job (a dict, built once by the driver, so a retried task times the same bytes):
    {"job": id, "mode": "gpu"|"interpret", "flags": [checker flags], "timeout_s": float,
     "env": {name: value}, "spec": bytes, "champion": bytes | None (None: the torch reference),
     "candidates": [[candidate id, bytes | None], ...]}
The answer: {"node": {node_id, ip, host, pid, gpus}, "runs": [{id, returncode, stdout, stderr,
timed_out, wall_s, limit_s}], "python": version, "checker_dir": where this package ran from, "wall_s": float}. stdout holds the judge's result line;
the driver parses it with the parser every backend shares.
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from . import HERE, command, read_capped, ship

# Names that look like credentials never reach the judge (nor the candidate under it).
_SECRET = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE|SESSION)", re.I)


def node_info() -> dict:
    """Which node, process and GPUs run this task (Ray's runtime context when in a task)."""
    info = {"node_id": None, "ip": None, "host": socket.gethostname(), "pid": os.getpid(),
            "gpus": []}
    try:
        import ray
        ctx = ray.get_runtime_context()
        info["node_id"] = ctx.get_node_id()
        info["ip"] = ray.util.get_node_ip_address()
        info["gpus"] = [str(g) for g in ray.get_gpu_ids()]
    except Exception:   # noqa: BLE001 - outside a Ray task (a test calling it directly)
        pass
    return info


def judge_env(extra: dict) -> dict:
    """The node's environment without credentials, plus the driver's checker settings."""
    env = {k: v for k, v in os.environ.items() if not _SECRET.search(k)}
    env.update({k: str(v) for k, v in (extra or {}).items()})
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _die_with_parent():   # in the child between fork and exec
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def stage(folder: str, job: dict, candidate) -> list:
    """Write the checker (folder/checker/), spec and kernel files of one judge run into
    `folder`; return the judge's side arguments."""
    ship(folder)
    with open(os.path.join(folder, "spec.json"), "wb") as f:
        f.write(job["spec"])
    sides = []
    for side, data in (("candidate", candidate), ("champion", job.get("champion"))):
        if data is None:
            sides.append(f"--{side}-torch")
            continue
        path = os.path.join(folder, f"{side}.py")
        with open(path, "wb") as f:
            f.write(data)
        sides += [f"--{side}", path]
    return sides


def run_one(job: dict, cid: str, candidate) -> dict:
    """One judge process for one candidate against the champion, in a folder of its own."""
    folder = tempfile.mkdtemp(prefix=f"kernloop-{job['job']}-{cid}-")
    t0 = time.monotonic()
    try:
        sides = stage(folder, job, candidate)
        cmd = command("check", "--spec", os.path.join(folder, "spec.json"), *sides, "--mode",
                      job["mode"], *job["flags"])
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            p = subprocess.Popen(cmd, cwd=folder, env=judge_env(job.get("env")), stdout=out,
                                 stderr=err, stdin=subprocess.DEVNULL, start_new_session=True,
                                 preexec_fn=_die_with_parent)
            timed_out = False
            try:
                p.wait(timeout=job["timeout_s"])
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                try:   # forked grandchildren (the judge's workers) go with the group
                    os.killpg(p.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                p.wait()
            return {"id": cid, "returncode": None if timed_out else p.returncode,
                    "stdout": read_capped(out), "stderr": read_capped(err),
                    "timed_out": timed_out, "wall_s": round(time.monotonic() - t0, 3),
                    "limit_s": job["timeout_s"]}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def run_job(job: dict) -> dict:
    """The Ray task: every candidate of the job, one judge process after another."""
    t0 = time.monotonic()
    node = node_info()
    runs = [run_one(job, cid, data) for cid, data in job["candidates"]]
    return {"node": node, "runs": runs, "python": sys.version.split()[0], "checker_dir": HERE,
            "wall_s": round(time.monotonic() - t0, 3)}
