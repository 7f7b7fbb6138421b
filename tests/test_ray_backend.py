"""--backend ray on a real Ray cluster of two worker nodes on this CPU (Ray's own test utility,
tests/ray_cluster.py), in synthetic mode: each job is a Ray task that runs the real judge in
the Triton interpreter, in a fresh process on the node Ray chose, and the timing is modeled
(perfmodel.py). The runs go through the real CLI (orchestrator.py in a subprocess, a Ray driver
of its own); the backend-level checks connect this test process as a second driver."""
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ray_cluster import LocalCluster, age_s, judges_under  # before ray: it keeps Ray on 127.0.0.1

ray = pytest.importorskip("ray")

from kernloop.trajectory import read_events  # noqa: E402
from columns import unwrap  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
SYNTH = {"KERNLOOP_RAY_MODE": "synthetic"}


@pytest.fixture(scope="module")
def cluster():
    c = LocalCluster(nodes=2, cpus=2)
    yield c
    c.shutdown()


def cli(args, env, timeout=900):
    return subprocess.run([sys.executable, str(ROOT / "orchestrator.py"), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def start(args, env):
    return subprocess.Popen([sys.executable, str(ROOT / "orchestrator.py"), *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def only_run(out: Path) -> Path:
    (run,) = [d for d in out.iterdir() if d.is_dir()]
    return run


def iterations(run: Path) -> list[dict]:
    return [e for e in read_events(run / "run.jsonl") if e["event"] == "iteration"]


def decided(out: Path) -> int:
    logs = list(out.glob("*/run.jsonl"))
    return sum('"event": "iteration"' in ln for ln in logs[0].read_text().splitlines()) if logs else 0


def ids(nodes) -> set[str]:
    return {n.node_id[:8] for n in nodes}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------- the cluster cannot be reached

def test_unreachable_address_is_one_error_line_and_exit_2(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KERNLOOP_", "RAY_"))}
    env.update(RAY_ADDRESS=f"127.0.0.1:{free_port()}", RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",
               RAY_USAGE_STATS_ENABLED="0", **SYNTH)
    p = cli(["--spec", "specs/matmul.yaml", "--backend", "ray", "--out", str(tmp_path / "runs")],
            env, timeout=120)
    assert p.returncode == 2, p.stdout + p.stderr
    lines = unwrap(p.stderr.strip())
    assert len(lines) == 1 and lines[0].startswith("error: --backend ray: the Ray cluster at "
                                                   "RAY_ADDRESS=127.0.0.1:"), p.stderr
    assert "unreachable" in lines[0] and "Connection refused" in lines[0]
    assert not (tmp_path / "runs").exists()          # before any run folder (cli's 120 s: a hang guard only)


def test_without_ray_address_a_local_cluster_is_started_and_said_first(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KERNLOOP_", "RAY_"))}
    env.update(RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", **SYNTH)   # its addresses on 127.0.0.1
    p = cli(["--spec", "specs/softmax.yaml", "--backend", "ray", "--iterations", "1",
             "--out", str(tmp_path)], env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    first = p.stdout.splitlines()[0]
    assert first.startswith("SYNTHETIC kernloop: ray: RAY_ADDRESS unset: started a local Ray "
                            "cluster on this machine (1 node(s), 0 GPU(s), "), first
    (it,) = iterations(only_run(tmp_path))
    assert it["node"] == it["result"]["backend_meta"]["node"] and it["result"]["backend"] == "ray"


# ---------------------------------------------------------------- 8 candidates over two nodes

def test_8_candidates_4_in_flight_spread_over_both_nodes(cluster, tmp_path):
    p = cli(["--spec", "specs/matmul.yaml", "--backend", "ray", "--iterations", "8", "--patience", "0",
             "--parallel", "4", "--out", str(tmp_path)], cluster.env(**SYNTH))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    first = p.stdout.splitlines()[0]
    assert f"ray: connected to the Ray cluster at {cluster.address} (3 node(s)" in first, first
    run = only_run(tmp_path)
    evs = read_events(run / "run.jsonl")
    its = [e for e in evs if e["event"] == "iteration"]
    assert sorted(e["iteration"] for e in its) == list(range(1, 9))       # each once
    assert evs[0]["backend"] == "ray" and evs[0]["synthetic"] is True and evs[0]["parallel"] == 4
    assert evs[0]["versions"]["ray"] == ray.__version__
    nodes = {e["node"].rsplit("/", 1)[1] for e in its}
    assert nodes == ids(cluster.nodes), nodes                               # both nodes ran jobs
    for e in its:
        meta = e["result"]["backend_meta"]
        assert e["node"] == meta["node"] == e["evaluations"][-1]["node"]
        assert meta["attempts"] == [{"attempt": 1, "wall_s": meta["attempts"][0]["wall_s"],
                                     "node": e["node"]}]
        # the checker came with the job (Ray's runtime environment), not from this checkout
        assert "runtime_resources" in meta["checker_dir"] and str(ROOT) not in meta["checker_dir"]
        assert e["result"]["mode"] == "interpret" and e["result"]["synthetic"] is True
        assert (run / "jobs" / meta["ray_job"] / "ray_job.log").read_text().count("attempt 1: done") == 1
    status = [ln for ln in p.stdout.splitlines() if "/8 it00" in ln]
    assert len(status) == 8 and all(f"on {e['node']}: " in p.stdout for e in its)
    page = (run / "trajectory.html").read_text()
    assert all(f"on {e['node']}" in page for e in its)


# ---------------------------------------------------------------- a node dies mid-job

def test_check_runs_one_kernel_on_the_cluster_as_documented(cluster):
    """README's `check --backend ray` (issue 47: the CLI refused it): the verdict of a job on a node."""
    p = cli(["check", "--spec", "specs/softmax.yaml", "specs/softmax_naive.py", "--backend", "ray", "--json", "-"],
            cluster.env(**SYNTH))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    line = json.loads(p.stdout.strip().splitlines()[-1])
    assert line["correct"] is True and line["backend"] == "ray" and line["synthetic"] is True


def test_a_node_killed_mid_job_loses_nothing_and_duplicates_nothing(cluster, tmp_path):
    doomed = cluster.add(cpus=2)
    raylet = cluster.raylet_pid(doomed)
    proc = start(["--spec", "specs/matmul.yaml", "--backend", "ray", "--iterations", "6",
                  "--patience", "0", "--parallel", "4", "--out", str(tmp_path)], cluster.env(**SYNTH))
    deadline, killed = time.monotonic() + 600, False
    while time.monotonic() < deadline and proc.poll() is None:
        # a judge started on it under a second ago: far from done (a job takes seconds), so the
        # kill lands mid-job, not after the answer came back (a race on a loaded CI machine)
        if decided(tmp_path) >= 1 and any(age_s(j) < 1.0 for j in judges_under(raylet)):
            cluster.kill(doomed)
            killed = True
            break
        time.sleep(0.2)
    out, _ = proc.communicate(timeout=900)
    assert killed, "no judge ever ran on the third node\n" + out[-3000:]
    assert proc.returncode == 0, out[-3000:]
    run = only_run(tmp_path)
    its = iterations(run)
    assert sorted(e["iteration"] for e in its) == list(range(1, 7))   # none lost, none twice
    label = doomed.node_id[:8]
    # The job on the killed node may be any job of an iteration (its first, or a re-run against a
    # new champion), so it is found by its journal, and its record among the iteration's jobs.
    logs = {d.name: (d / "ray_job.log").read_text() for d in (run / "jobs").iterdir()
            if (d / "ray_job.log").exists()}
    retried = [j for j, log in logs.items() if "attempt 2:" in log]
    assert retried, "the job on the killed node was not retried\n" + "\n".join(logs.values())
    jobs = {ev["job"]: ev for e in its for ev in e.get("evaluations") or [{"job": e["candidate_id"],
                                                                           "node": e.get("node")}]}
    for j in retried:
        assert "attempt 1: the task's node or worker was lost" in logs[j] and "attempt 2: done" in logs[j]
        assert j in jobs and not jobs[j]["node"].endswith(label)   # its answer came from elsewhere
    assert not judges_under(raylet)                                   # no judge left behind


# ---------------------------------------------------------------- --resume

def test_resume_reruns_the_jobs_in_flight_when_the_driver_was_killed(cluster, tmp_path):
    env = cluster.env(**SYNTH)
    proc = start(["--spec", "specs/matmul.yaml", "--backend", "ray", "--iterations", "5",
                  "--patience", "0", "--parallel", "3", "--out", str(tmp_path)], env)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None and decided(tmp_path) < 2:
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    run = only_run(tmp_path)
    before = read_events(run / "run.jsonl")
    done = {e["iteration"] for e in before if e["event"] == "iteration"}
    proposed = {int(p.stem[2:]) for p in (run / "candidates").glob("it*.py")}
    assert len(done) >= 2 and proposed - done, "nothing was in flight at the kill"
    raylets = [cluster.raylet_pid(n) for n in cluster.nodes]
    gone = time.monotonic() + 60   # Ray ends a dead driver's tasks; their judges die with them
    while time.monotonic() < gone and any(judges_under(r) for r in raylets):
        time.sleep(0.5)
    assert not any(judges_under(r) for r in raylets), "a dead driver's judge kept running"
    p = cli(["--resume", str(run)], env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "connected to the Ray cluster" in p.stdout.splitlines()[0]
    evs = read_events(run / "run.jsonl")
    assert evs[:len(before)] == before
    assert sorted(e["iteration"] for e in evs if e["event"] == "iteration") == list(range(1, 6))
    assert evs[-1]["event"] == "run_end" and evs[-1]["iterations_done"] == 5


# ---------------------------------------------------------------- one job's failures, named

def test_a_judge_past_its_time_a_lost_task_and_a_node_without_torch(cluster, tmp_path):
    """Each is a failed result that says what happened and where; the batch is one task."""
    from kernloop.backends.local import BackendError
    from kernloop.backends.ray import connect
    from kernloop.spec import load_spec
    shadow = tmp_path / "shadow" / "torch"   # this node's Python cannot import torch, as if it
    shadow.mkdir(parents=True)               # were not installed there
    (shadow / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'torch'\", "
                                        "name='torch')\n")
    spec = load_spec(ROOT / "specs" / "softmax.yaml")
    base = spec.baseline
    broken = None
    try:
        with pytest.raises(BackendError, match=r"the cluster has no GPU \(3 node\(s\), 4 CPU\(s\)\); "
                                               "KERNLOOP_RAY_MODE=synthetic"):
            connect(cluster.env())   # gpu mode (the default) on a cluster of CPUs: said at once
        assert not ray.is_initialized()
        env = cluster.env(KERNLOOP_CHECK_TIMEOUT_S="2", **SYNTH)
        backend, why = connect(env)
        assert why.startswith(f"ray: connected to the Ray cluster at {cluster.address}")
        res = backend.evaluate(spec, base, base, tmp_path / "slow")
        assert not res["ok"] and res["error"].startswith("ray: on node ")
        assert "checker timed out after 2 s" in res["error"]
        assert res["backend_meta"]["node"].rsplit("/", 1)[1] in ids(cluster.nodes)
        ray.shutdown()

        backend, _ = connect(cluster.env(KERNLOOP_RAY_WAIT_S="1", KERNLOOP_CHECK_TIMEOUT_S="1",
                                         KERNLOOP_RAY_RESOURCES='{"kernloop_nowhere": 1}', **SYNTH))
        res = backend.evaluate(spec, base, base, tmp_path / "never")
        assert not res["ok"] and "the task was not back within 7 s" in res["error"]
        assert "cancelled" in res["error"] and len(res["backend_meta"]["attempts"]) == 1
        ray.shutdown()

        # added only now: a job that asks for no resource of its own may land on any node
        broken = cluster.add(cpus=1, env_vars={"PYTHONPATH": str(shadow.parent)},
                             resources={"kernloop_test_broken": 1})

        backend, _ = connect(cluster.env(KERNLOOP_RAY_RESOURCES='{"kernloop_test_broken": 1}', **SYNTH))
        res = backend.evaluate(spec, base, base, tmp_path / "broken")
        label = res["backend_meta"]["node"]
        assert label.endswith(broken.node_id[:8])
        assert not res["ok"] and res["error"].startswith(
            f"ray: node {label} lacks a package the judge needs (ModuleNotFoundError: No module "
            "named 'torch')"), res["error"]
        ray.shutdown()
        cluster.kill(broken)   # gone before the batch below, which may land on any node
        broken = None

        backend, _ = connect(cluster.env(**SYNTH))
        a, b = backend.evaluate_batch(spec, [("itA", base), ("itB", base)], base, tmp_path / "batch0001")
        assert a["ok"] and b["ok"] and a["backend_meta"]["ray_job"] == b["backend_meta"]["ray_job"] == "batch0001"
        assert a["backend_meta"]["node"] == b["backend_meta"]["node"]   # one task, one node
        assert (tmp_path / "batch0001" / "itA" / "checker.log").exists()
    finally:
        ray.shutdown()
        if broken is not None:
            cluster.kill(broken)
