"""RayBackend: each evaluation job is one Ray task on an existing Ray cluster (or a local one).

One job = one task asking for one GPU (none in synthetic mode) and one CPU. The task's body is
checker/ray_entry.py, shipped with the rest of checker/ through the job's runtime environment
(its working_dir holds checker/ alone): on the node Ray chose, it runs the judge once per candidate in a fresh child
process, exactly as the local backend runs it, and returns what each judge printed; the result
line is parsed here by the parser every backend shares. K candidates in flight are K tasks in
flight: Ray places them and queues them while every GPU is busy; KernLoop keeps no queue of its
own beyond the loop's in-flight bookkeeping (scheduler.py).

Failures, each a failed result naming the node (never an exception into the loop):
  * the node or its worker dies mid-job, or the task's answer is lost with its node: the same
    job (the same bytes, against the same champion, so the loop's bookkeeping still holds) is
    submitted once more; a second loss fails it. Ray's own retries are off (max_retries=0), so
    a job runs at most twice and its result is taken once;
  * a judge runs past KERNLOOP_CHECK_TIMEOUT_S: the task kills it with its process group;
  * the task is not back within KERNLOOP_RAY_WAIT_S plus its judges' time: cancelled;
  * the node's Python cannot import what the judge needs: said, with the missing module.
An unreachable cluster is a BackendError before any run folder exists (the CLI exits 2).
"""
from __future__ import annotations

import json
import logging
import os
import re
import socket
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import checker
from kernloop import settings
from kernloop.backends.local import (SYNTHETIC_DEVICE, Backend, BackendError, failed_result,
                                     parse_child, stage_job)
from kernloop.backends.synthetic import SyntheticBackend
from kernloop.backends.sandbox import ChildResult

CONNECT_TIMEOUT_S = 5.0     # the TCP check of RAY_ADDRESS before Ray is asked to connect
ENTRY_SLACK_S = 5.0         # a task's own work around each judge (copying the checker's files)
POLL_S = 0.5                # how often a waiting job looks at the interrupt flag
STDERR_KEPT = 200_000       # of each judge's stderr, as the local backend keeps in checker.log
# What Ray raises when a task's worker or node died, or its answer was lost with its node: the
# job is run once more. Anything else (cancelled, the task's own error, a runtime environment
# that cannot be set up, unschedulable) fails the job at once.
RETRIED = ("WorkerCrashedError", "NodeDiedError", "LocalRayletDiedError", "OutOfMemoryError",
           "ObjectLostError", "ObjectFetchTimedOutError", "ObjectReconstructionFailedError",
           "RaySystemError")
JUDGE_NEEDS = ("torch", "triton", "numpy")   # what the judge itself imports (the project dependencies)


# ---------------------------------------------------------------- pure helpers

def split_address(address: str) -> tuple[str, int] | None:
    """(host, port) of a RAY_ADDRESS (`host:port` or `ray://host:port`); None for `auto` and
    `local`, which Ray resolves itself."""
    if address.strip().lower() in ("auto", "local"):
        return None
    parts = urlsplit(address if "://" in address else f"gcs://{address}")
    if not parts.hostname or parts.port is None:
        raise BackendError(f"RAY_ADDRESS={address!r}: expected host:port (the head node's GCS "
                           "address) or ray://host:port (Ray Client)")
    return parts.hostname, parts.port


def unreachable(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> str | None:
    """Why the cluster at `address` cannot be reached, or None. A plain TCP connect: Ray itself
    would retry an absent address for minutes before it gives up."""
    hp = split_address(address)
    if hp is None:
        return None
    try:
        socket.create_connection(hp, timeout=timeout_s).close()
    except socket.gaierror as e:
        return f"cannot resolve {hp[0]}: {e.strerror or e}"
    except socket.timeout:
        return f"no answer from {hp[0]}:{hp[1]} within {timeout_s:g} s"
    except OSError as e:
        return f"{hp[0]}:{hp[1]}: {e.strerror or e}"
    return None


def parse_resources(text: str | None) -> dict:
    """KERNLOOP_RAY_RESOURCES (a JSON object of resource name -> amount) as a dict."""
    if not text:
        return {}
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise BackendError(f"KERNLOOP_RAY_RESOURCES is not JSON ({e}); expected e.g. "
                           '{"accelerator_type:H200": 0.001}') from None
    if not isinstance(obj, dict) or not all(
            isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
            for k, v in obj.items()):
        raise BackendError("KERNLOOP_RAY_RESOURCES must be a JSON object of resource name -> "
                           f"positive amount, got {text!r}")
    return obj


def node_label(node: dict) -> str:
    """How the log, terminal and page name a node: its host and the start of its Ray node id."""
    nid = (node or {}).get("node_id") or "?"
    return f"{(node or {}).get('host') or (node or {}).get('ip') or '?'}/{nid[:8]}"


def missing_package(text: str) -> str | None:
    """The import error of a judge whose node lacks what it needs (`ModuleNotFoundError: No
    module named 'torch'`, as the judge's result line or its traceback says it), or None.
    Only the judge's own packages: a candidate's bad import is the candidate's fault."""
    for line in reversed(text.splitlines()):
        line = line.strip()
        if not line.startswith(("ModuleNotFoundError", "ImportError")):
            continue
        named = re.search(r"No module named '([\w.]+)'|cannot import name '\w+' from '([\w.]+)'", line)
        if named and (named.group(1) or named.group(2)).split(".")[0] in JUDGE_NEEDS:
            return line
    return None


def cluster_summary(nodes: list[dict]) -> dict:
    """{nodes, gpus, cpus} of the alive nodes (ray.nodes())."""
    alive = [n for n in nodes if n.get("Alive")]
    res = [n.get("Resources") or {} for n in alive]
    return {"nodes": len(alive), "gpus": int(sum(r.get("GPU", 0) for r in res)),
            "cpus": int(sum(r.get("CPU", 0) for r in res))}


def retried(exc: BaseException) -> bool:
    """A lost worker, node or answer: worth one more run of the same job."""
    return any(t.__name__ in RETRIED for t in type(exc).__mro__)


def first_line(exc: BaseException, limit: int = 400) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {(text[0] if text else '')[:limit]}"


# ---------------------------------------------------------------- connecting

def connect(env=None, seed: int = 0) -> tuple["RayBackend", str]:
    """Connect to RAY_ADDRESS, or start a local cluster when it is unset; (backend, the line
    that says which). BackendError (nothing started) when Ray is missing or the cluster is
    unreachable or cannot run a job of this mode."""
    try:
        import ray
    except ImportError:
        raise BackendError("--backend ray needs Ray: pip install kernloop[ray]") from None
    # Ray's own variable (Ray reads it too), not one of KernLoop's settings: passed through
    address = (os.environ if env is None else env).get("RAY_ADDRESS", "").strip() or None
    if address and address.lower() == "local":   # Ray's word for "start one here"
        address = None
    mode = settings.get("KERNLOOP_RAY_MODE", env)
    resources = parse_resources(settings.get("KERNLOOP_RAY_RESOURCES", env))
    if address:
        why = unreachable(address)
        if why:
            raise BackendError(f"--backend ray: the Ray cluster at RAY_ADDRESS={address} is "
                               f"unreachable ({why}); start it, or unset RAY_ADDRESS to run a "
                               "local one")
    start = {} if address else {"include_dashboard": False}
    if not address:   # a cluster of our own: Ray's usage report off, unless the user says
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        with tempfile.TemporaryDirectory(prefix="kernloop-ray-") as tmp:
            # Ray uploads the job's working_dir at init; the nodes unpack it and run from it.
            # "local": a new cluster, never one that `ray start` left running on this machine
            ray.init(address=address or "local", namespace="kernloop", log_to_driver=False,
                     runtime_env={"working_dir": ship_checker(Path(tmp))},
                     logging_level=logging.WARNING, **start)
        summary = cluster_summary(ray.nodes())
    except Exception as e:   # noqa: BLE001 - version mismatch, refused handshake, ...
        _shutdown(ray)
        what = f"connect to the Ray cluster at {address}" if address else "start a local Ray cluster"
        raise BackendError(f"--backend ray: could not {what}: {first_line(e)}") from None
    if mode == "gpu" and not summary["gpus"]:
        _shutdown(ray)
        raise BackendError(f"--backend ray: the cluster has no GPU ({summary['nodes']} node(s), "
                           f"{summary['cpus']} CPU(s)); KERNLOOP_RAY_MODE=synthetic runs the "
                           "checker in the interpreter with modeled timing")
    where = (f"connected to the Ray cluster at {address}" if address
             else "RAY_ADDRESS unset: started a local Ray cluster on this machine")
    reason = (f"ray: {where} ({summary['nodes']} node(s), {summary['gpus']} GPU(s), "
              f"{summary['cpus']} CPU(s); Ray {ray.__version__}; "
              + ("SYNTHETIC mode: the checker in the interpreter, timing modeled)" if mode == "synthetic"
                 else "one GPU per job)"))
    return RayBackend(ray, mode, address, summary, resources, seed=seed, env=env), reason


def ship_checker(folder: Path) -> str:
    """The job's working_dir: checker/'s modules and nothing else (no run folders, no results).
    A working_dir, not py_modules, also stops Ray from putting this machine's own paths on the
    nodes' sys.path, so every node runs the checker shipped with the job, never a stale copy."""
    checker.ship(folder)
    return str(folder)


def _shutdown(ray) -> None:
    try:
        ray.shutdown()
    except Exception:   # noqa: BLE001 - nothing to clean up after a failed init
        pass


# ---------------------------------------------------------------- the backend

class RayBackend(Backend):
    """The judge in a Ray task on whichever node Ray places it (see the module docstring)."""
    name = "ray"

    def __init__(self, ray, mode: str, address: str | None, summary: dict, resources: dict,
                 seed: int = 0, env=None):
        from checker import ray_entry   # the task body, shipped to the nodes in the working_dir
        self.ray, self.mode, self.address, self.summary = ray, mode, address, summary
        self.synthetic = mode == "synthetic"
        self.times_peers = not self.synthetic   # the modeled runs time no peers
        self._model = SyntheticBackend(seed=seed) if self.synthetic else None
        self.timeout_s = settings.get("KERNLOOP_CHECK_TIMEOUT_S", env)
        self.wait_s = settings.get("KERNLOOP_RAY_WAIT_S", env)
        self.checker_env = {"KERNLOOP_NCU": settings.get("KERNLOOP_NCU", env),
                            "KERNLOOP_PREWARM": settings.get("KERNLOOP_PREWARM", env)}
        self._interrupted = threading.Event()
        where = f"Ray cluster at {address}" if address else "local Ray cluster"
        self.device = (f"{SYNTHETIC_DEVICE}; jobs on a {where}" if self.synthetic
                       else f"{where}: one GPU per job ({summary['gpus']} GPU(s) on "
                            f"{summary['nodes']} node(s))")
        self._task = ray.remote(ray_entry.run_job).options(
            num_cpus=1, num_gpus=0 if self.synthetic else 1, resources=resources or None,
            max_retries=0, retry_exceptions=False, scheduling_strategy="SPREAD")

    def slots(self, parallel: int) -> list[str]:
        """K tasks in flight: Ray queues what the cluster cannot start yet."""
        return [f"ray{i}" for i in range(max(1, parallel))]

    def interrupt(self) -> None:
        """Jobs waited on in other threads are cancelled now (their judges die with them)."""
        self._interrupted.set()

    # -- the job a task runs

    def _flags(self, peers: bool) -> tuple[str, list[str], dict]:
        """(checker mode, checker flags, environment) of every judge run of a job."""
        if self.synthetic:
            return "interpret", ["--backend", self.name, "--synthetic"], {
                "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
        return "gpu", ["--backend", self.name, "--profile-kernel", *(["--peers"] if peers else [])], \
            dict(self.checker_env)   # the nodes see this machine's checker settings

    def _job(self, spec, jid: str, staged: list[tuple[str, dict]], peers: bool) -> dict:
        """The task's argument, built once: a retry sends the very same bytes."""
        mode, flags, env = self._flags(peers)
        first = staged[0][1]
        return {"job": jid, "mode": mode, "flags": flags, "env": env, "timeout_s": self.timeout_s,
                "spec": first["spec"].read_bytes(),
                "champion": first["champion"].read_bytes() if "champion" in first else None,
                "candidates": [[cid, f["candidate"].read_bytes() if "candidate" in f else None]
                               for cid, f in staged]}

    # -- evaluate

    def evaluate(self, spec, candidate, champion, workdir, configs=None, peers=False, slot=None):
        workdir = Path(workdir)
        return self._run(spec, [(workdir.name, candidate, workdir, configs)], champion, workdir,
                         peers and self.times_peers)[0]

    def evaluate_batch(self, spec, candidates, champion, workdir, slot=None):
        """B candidates in ONE task (one GPU), each judged in its own process, one after another."""
        workdir = Path(workdir)
        return self._run(spec, [(cid, path, workdir / cid, None) for cid, path in candidates],
                         champion, workdir, False)

    def _run(self, spec, cands: list, champion, workdir: Path, peers: bool) -> list[dict]:
        workdir.mkdir(parents=True, exist_ok=True)
        staged = [(cid, stage_job(spec, _path(path), _path(champion), wd, checker=False))   # the task ships
                  for cid, path, wd, _ in cands]                                         # its own package
        journal = _Journal(workdir / "ray_job.log")
        answer, attempts, error = self._submit(self._job(spec, workdir.name, staged, peers), journal,
                                               len(cands))
        if answer is None:
            return [failed_result(self.name, self.synthetic, "backend", f"ray: job {workdir.name}: {error}",
                                  attempts=attempts, ray_job=workdir.name) for _ in cands]
        runs = {r["id"]: r for r in answer.get("runs") or []}
        out = []
        for (cid, _, wd, configs), (_, files) in zip(cands, staged):
            run = runs.get(cid)
            if run is None:   # the entry answered for other candidates: never pass one off
                out.append(failed_result(self.name, self.synthetic, "backend",
                                         f"ray: job {workdir.name} returned no run for {cid}",
                                         attempts=attempts, ray_job=workdir.name))
                continue
            out.append(self._result(spec, answer, run, wd, files, configs, attempts, workdir.name))
        return out

    def _result(self, spec, answer: dict, run: dict, wd: Path, files: dict, configs, attempts,
                jid: str) -> dict:
        """One judge's output as a result: the shared parser, the node, the model (synthetic)."""
        node = answer.get("node") or {}
        label = node_label(node)
        child = ChildResult(run.get("returncode"), run.get("stdout") or "",
                            (run.get("stderr") or "")[-STDERR_KEPT:], bool(run.get("timed_out")),
                            float(run.get("wall_s") or 0.0), run.get("limit_s"))
        res = parse_child(child, self.name, self.synthetic, wd / "checker.log")
        if not res.get("ok"):
            missing = None if child.timed_out else (
                missing_package(str(res.get("error") or "")) or missing_package(child.stderr))
            if missing:
                res["error"] = (f"ray: node {label} lacks a package the judge needs ({missing}); "
                                f"install torch, triton and numpy in that node's Python {answer.get('python')}")
            elif res.get("stage") == "backend":
                res["error"] = f"ray: on node {label}: {res.get('error')}"
        res.setdefault("backend_meta", {}).update(
            node=label, node_id=node.get("node_id"), node_ip=node.get("ip"), gpus=node.get("gpus"),
            ray_job=jid, attempts=attempts, task_wall_s=answer.get("wall_s"),
            node_python=answer.get("python"), checker_dir=answer.get("checker_dir"))
        if self._model is not None:
            res = self._model.model(res, spec, files, configs, wd.name)
        return res

    # -- one task, retried once when its node or worker is lost

    def _submit(self, job: dict, journal: "_Journal", n: int) -> tuple[dict | None, list, str | None]:
        """(the task's answer or None, one record per attempt, why it failed)."""
        ray = self.ray
        limit = self.wait_s + n * (self.timeout_s + ENTRY_SLACK_S)
        attempts: list[dict] = []
        for attempt in (1, 2):
            t0 = time.monotonic()
            ref = self._task.remote(job)
            journal.log(f"attempt {attempt}: task {_task_id(ref)} submitted "
                        f"({n} candidate(s), limit {limit:.0f} s)")
            answer, error, again = self._wait(ray, ref, t0 + limit, limit)
            rec = {"attempt": attempt, "wall_s": round(time.monotonic() - t0, 3)}
            if answer is not None:
                rec["node"] = node_label(answer.get("node") or {})
                attempts.append(rec)
                journal.log(f"attempt {attempt}: done on node {rec['node']} in {rec['wall_s']:.1f} s")
                return answer, attempts, None
            rec["error"] = error
            attempts.append(rec)
            journal.log(f"attempt {attempt}: {error}")
            if not again:
                return None, attempts, error
        return None, attempts, f"{attempts[-1]['error']} (after a retry: the first attempt: " \
                               f"{attempts[0]['error']})"

    def _wait(self, ray, ref, deadline: float, limit: float) -> tuple[dict | None, str | None, bool]:
        """(answer, error, run it again?) of one submitted task."""
        while True:
            if self._interrupted.is_set():
                ray.cancel(ref, force=True)
                return None, "KernLoop was interrupted; the task was cancelled", False
            left = deadline - time.monotonic()
            if left <= 0:
                ray.cancel(ref, force=True)
                return None, (f"the task was not back within {limit:.0f} s (KERNLOOP_RAY_WAIT_S="
                              f"{self.wait_s:g} s to find a free node, plus KERNLOOP_CHECK_TIMEOUT_S "
                              "per candidate): no node free to run it, or its node hung; "
                              "cancelled"), False
            ready, _ = ray.wait([ref], timeout=min(POLL_S, left))
            if not ready:
                continue
            try:
                return ray.get(ref), None, False
            except Exception as e:   # noqa: BLE001 - every Ray error becomes a named failure
                if retried(e):
                    return None, f"the task's node or worker was lost ({first_line(e)})", True
                return None, f"the task failed ({first_line(e)})", False


class _Journal:
    """ray_job.log in the job's folder: every attempt, where it ran, how it ended."""

    def __init__(self, path: Path):
        self.path, self.t0 = path, time.monotonic()

    def log(self, msg: str) -> None:
        try:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(f"[{time.monotonic() - self.t0:9.2f}s] {msg}\n")
        except OSError:
            pass


def _task_id(ref) -> str:
    try:
        return ref.task_id().hex()[:16]
    except Exception:   # noqa: BLE001 - a Ray Client reference may not expose it
        return "?"


def _path(p) -> Path | None:
    return None if p is None else Path(p)
