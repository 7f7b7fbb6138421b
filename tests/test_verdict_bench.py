"""benchmarks/verdict_speed.py reads a real run folder (what it reports from the H200): a synthetic
run of the loop is written by the orchestrator, then read back; per job it says whether the
candidate's spare had warmed Triton's compiler (never, on the synthetic backend); and the order
of its runs with --beside (another checkout's default command in alternate rounds)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks import verdict_speed  # noqa: E402
from tests.test_resume import small_spec  # noqa: E402


def test_the_bench_reads_a_run_the_loop_wrote(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KERNLOOP_", "TAVILY", "NVIDIA_API"))}
    spec = small_spec(tmp_path / "spec")   # one small check shape: a fast synthetic iteration
    out = tmp_path / "runs"
    p = subprocess.run([sys.executable, str(ROOT / "orchestrator.py"), "--spec", str(spec),
                        "--backend", "synthetic", "--iterations", "4", "--quiet", "--out", str(out)],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    (run,) = [d for d in out.iterdir() if d.is_dir() and not d.name.startswith(".")]
    r = verdict_speed.read_run(run)
    assert r["iterations"] == 4 and r["stopped"] == "budget"
    assert r["rejected_n"] + r["promoted_n"] == r["jobs"] == len(r["per_job"]) > 0
    assert [j["iteration"] for j in r["per_job"]] == sorted(j["iteration"] for j in r["per_job"])
    assert all(j["compile_warm"] is None for j in r["per_job"]) and r["compile_warmed_jobs"] == 0
    assert r["compile_warm_failed"] == 0 and r["ended_early"] == 0   # the synthetic backend times nothing
    # The same log with two jobs' spares warmed, one of them failed (as a spare whose ptxas was
    # killed says it): counted apart.
    lines = (run / "run.jsonl").read_text().splitlines()
    its = [i for i, x in enumerate(lines) if json.loads(x)["event"] == "iteration" and json.loads(x).get("result")]
    for i, warm in zip(its, ({"seconds": 0.8}, {"failed": "PTXASError: error code -9", "seconds": 0.9})):
        e = json.loads(lines[i])
        e["result"].setdefault("workers", {}).setdefault("candidate", {})["compile_warm"] = warm
        e["result"]["ended_early"] = {"after_reps": 10, "of": 50}   # as an early-rejected A/B says
        lines[i] = json.dumps(e)
    b = next(i for i, x in enumerate(lines) if json.loads(x)["event"] == "baseline")
    e = json.loads(lines[b])
    e["result"]["phase_s"] = {"timing": 1.0, "sight": 3.5, "end": 28.2}   # where a baseline job's time went
    lines[b] = json.dumps(e)
    (run / "run.jsonl").write_text("\n".join(lines) + "\n")
    r = verdict_speed.read_run(run)
    assert (r["compile_warmed_jobs"], r["compile_warm_failed"], r["ended_early"]) == (1, 1, 2)
    assert r["baseline_phase_s"] == {"timing": 1.0, "sight": 3.5, "end": 28.2}


def test_beside_runs_the_other_checkout_and_this_one_in_turn_into_one_runs_folder(tmp_path):
    other = tmp_path / "old"
    main_plan, ROOT = verdict_speed.main_plan, verdict_speed.ROOT
    plan = main_plan(["warm"], False, other, 2, tmp_path)
    assert [(label, root) for label, _, _, root in plan] == [
        ("warm", ROOT), ("warm @beside round 1", other), ("warm round 1", ROOT),
        ("warm @beside round 2", other), ("warm round 2", ROOT)]
    assert {judge for _, judge, _, _ in plan} == {"warm"}
    assert {out for _, _, out, _ in plan} == {tmp_path / "warm"}   # one cache of the baseline's look
    assert main_plan(["warm", "cold"], True, None, 2, tmp_path) == [
        ("warm", "warm", tmp_path / "warm", ROOT), ("cold", "cold", tmp_path / "cold", ROOT),
        ("warm, cached", "warm", tmp_path / "warm", ROOT)]
