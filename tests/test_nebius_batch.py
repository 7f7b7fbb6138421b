"""Nebius batch jobs (--batch B) and concurrent jobs (KERNLOOP_NEBIUS_MAX_JOBS) against the
stand-in `nebius` CLI on PATH (tests/fake_nebius.py, real subprocesses; in the success scenario it
really runs the injected batch entry and one interpret-mode checker per candidate)."""
from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import fake_nebius  # noqa: E402
import nebius_jobs as nj  # noqa: E402
from kernloop.backends.nebius_batch import parse_batch_lines  # noqa: E402
from kernloop.backends.resultline import format_result_line  # noqa: E402
from kernloop.settings import SettingsError  # noqa: E402
from kernloop.spec import load_spec  # noqa: E402
from test_nebius_jobs import FAST, assert_backend_failure, commands, fake, flag_values  # noqa: E402,F401

SPEC = ROOT / "specs" / "matmul.yaml"


def tagged(cid: str, stdout: str, rc: int = 0) -> str:
    return f"\x1b[2m2025-01-01T00:00:01Z\x1b[0m KERNLOOP_BATCH {cid} {rc} " \
           + base64.b64encode(stdout.encode()).decode()


# ---------------------------------------------------------------- the tagged lines

def test_each_candidate_gets_its_own_result_or_its_own_reason():
    ok = format_result_line({"ok": True, "stage": "done"})
    text = "\n".join([
        "noise before", tagged("it0001", f"log line\n{ok}\n"),
        tagged("it0002", f"{ok}\n{ok}\n"),                     # a candidate faking a second line
        tagged("it0003", ok, rc=1), tagged("it0004", ok), tagged("it0004", ok),
        "KERNLOOP_BATCH it0005 0 not-base64!!", tagged("it0099", ok)])
    got = parse_batch_lines(nj.strip_ansi(text), ["it0001", "it0002", "it0003", "it0004",
                                                  "it0005", "it0006"])
    assert got["it0001"] == ({"ok": True, "stage": "done"}, "")
    assert got["it0002"][0] is None and "2 KERNLOOP_RESULT lines" in got["it0002"][1]
    assert got["it0003"][0] == {"ok": True, "stage": "done"} and "exited 1" in got["it0003"][1]
    assert got["it0004"][0] is None and "2 outputs for this candidate" in got["it0004"][1]
    assert got["it0005"][0] is None and "unusable" in got["it0005"][1]
    assert got["it0006"] == (None, "no output for this candidate in the job's logs")
    assert "it0099" not in got                                  # not one of this job's


# ---------------------------------------------------------------- one batch job

def batch(fake, n=2):
    spec = load_spec(SPEC)
    backend = nj.NebiusBackend(nj.settings_from_env(), say=lambda m: None)
    cands = [(f"it{i:04d}", spec.baseline) for i in range(1, n + 1)]
    return backend.evaluate_batch(spec, cands, spec.baseline, fake.workdir)


def test_a_batch_is_one_job_with_one_checker_per_candidate(fake):
    fake.scenario("success")
    res = batch(fake)
    creates = [c["argv"] for c in fake.calls() if c["argv"][:3] == ["ai", "job", "create"]]
    assert len(creates) == 1
    injected = [a.split(":")[0] for i, a in enumerate(creates[0]) if creates[0][i - 1] == "--inject-file"]
    package = [f"checker/{p.name}" for p in (ROOT / "checker").glob("*.py")]   # whole, its entries too
    assert sorted(injected) == sorted(["batch.json", "candidate-it0001.py", "candidate-it0002.py",
                                       "champion.py", "spec.json", *package])
    assert flag_values(creates[0], "--args")[0].startswith("/kernloop/checker/nebius_batch_entry.py ")
    assert [r["ok"] for r in res] == [True, True] and res[0] is not res[1]
    ids = {r["backend_meta"]["job_id"] for r in res}
    assert len(ids) == 1 and [r["backend_meta"]["batch_index"] for r in res] == [0, 1]
    assert all(r["backend_meta"]["batch"] == ["it0001", "it0002"] for r in res)


@pytest.mark.parametrize("scenario,needle", [
    ("failed", "ended FAILED"), ("error", "ended ERROR"),
    ("no_result", "COMPLETED without a usable result for it0001"), ("hang", "gave up on job")])
def test_every_batch_failure_names_its_job_for_every_candidate(fake, monkeypatch, scenario, needle):
    fake.scenario(scenario)
    if scenario == "hang":
        monkeypatch.setenv("KERNLOOP_NEBIUS_WAIT_S", "0.8")
    res = batch(fake)
    assert len(res) == 2
    job_id = res[0]["backend_meta"]["job_id"]
    assert job_id and job_id.startswith("aijob-")
    for r in res:
        assert_backend_failure(r, job_id)
    assert needle in res[0]["error"]
    if scenario == "hang":
        assert ["ai", "job", "cancel", "--id", job_id] in [c["argv"] for c in fake.calls()]


def test_a_rejected_batch_create_fails_every_candidate_cleanly(fake):
    fake.scenario("reject")
    res = batch(fake)
    for r in res:
        assert_backend_failure(r, "create rejected, no job was created", "InvalidArgument")


def test_max_jobs_setting():
    assert nj.settings_from_env({}).max_jobs == 4
    assert nj.settings_from_env({"KERNLOOP_NEBIUS_MAX_JOBS": "2"}).max_jobs == 2
    with pytest.raises(SettingsError, match="KERNLOOP_NEBIUS_MAX_JOBS='0': expected an integer in"):
        nj.settings_from_env({"KERNLOOP_NEBIUS_MAX_JOBS": "0"})
    assert nj.NebiusBackend(nj.settings_from_env({"KERNLOOP_NEBIUS_MAX_JOBS": "3"})).slots(8) == \
        ["job0", "job1", "job2"]


# ---------------------------------------------------------------- whole runs

def run(tmp_path, iterations, parallel, batch_size, max_jobs):
    bin_dir, state = tmp_path / "bin", tmp_path / "fake-state"
    fake_nebius.install(bin_dir)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KERNLOOP_", "FAKE_NEBIUS_", "TAVILY", "NVIDIA_API"))}
    env.update(FAST, PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", FAKE_NEBIUS_STATE=str(state),
               FAKE_NEBIUS_TIMING="emulate", KERNLOOP_NEBIUS_MAX_JOBS=str(max_jobs))
    p = subprocess.run([sys.executable, str(ROOT / "orchestrator.py"), "--spec", str(SPEC),
                        "--backend", "nebius", "--proposer", "tuner", "--iterations", str(iterations),
                        "--parallel", str(parallel), "--batch", str(batch_size), "--quiet",
                        "--out", str(tmp_path / "runs")], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    (log,) = (tmp_path / "runs").glob("*/run.jsonl")
    events = [json.loads(line) for line in log.read_text().splitlines()]
    creates = [c for c in fake_nebius.calls(state) if c["argv"][:3] == ["ai", "job", "create"]]
    return events, creates, fake_nebius.max_concurrent(state)


def test_8_candidates_parallel_4_batch_2_is_4_batch_jobs_within_max_jobs(tmp_path):
    # K=4, B=2 would keep 2 jobs running; KERNLOOP_NEBIUS_MAX_JOBS=1 must hold it to one.
    # (8 candidates in 4 batches: the rule of 24 in 6, at a third of the CI time)
    events, creates, top = run(tmp_path, 8, 4, 2, max_jobs=1)
    its = [e for e in events if e["event"] == "iteration"]
    assert sorted(e["iteration"] for e in its) == list(range(1, 9))
    confirmations = sum(len(e["evaluations"]) - 1 for e in its)
    assert len(creates) == 1 + 4 + confirmations        # baseline + 4 batches (+ confirmations)
    assert top == 1
    batches = {e["result"]["backend_meta"]["job_id"] for e in its}
    assert len(batches) == 4
    for e in its:
        assert e["evaluations"][0]["batch_size"] == 2 and e["result"]["backend_meta"]["batch"]


def test_jobs_do_run_at_once_up_to_max_jobs(tmp_path):
    events, creates, top = run(tmp_path, 4, 4, 2, max_jobs=2)
    assert len(creates) == 1 + 2 and top == 2


def test_ctrl_c_with_jobs_in_flight_cancels_every_one(tmp_path):
    """SIGINT to `orchestrator.py --parallel 2` while two Nebius jobs run: both are cancelled
    (never left billing), no iteration is logged, and the run can be resumed."""
    import signal
    import time
    bin_dir, state = tmp_path / "bin", tmp_path / "fake-state"
    fake_nebius.install(bin_dir)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KERNLOOP_", "FAKE_NEBIUS_", "TAVILY", "NVIDIA_API"))}
    env.update(FAST, PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", FAKE_NEBIUS_STATE=str(state),
               FAKE_NEBIUS_TIMING="emulate", FAKE_NEBIUS_HANG_AFTER="1",   # the baseline completes
               PYTHONFAULTHANDLER="1")
    proc = subprocess.Popen([sys.executable, str(ROOT / "orchestrator.py"), "--spec", str(SPEC),
                             "--backend", "nebius", "--proposer", "tuner", "--iterations", "4",
                             "--parallel", "2", "--quiet", "--out", str(tmp_path / "runs")],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True,   # Ctrl-C as at a terminal, even when pytest runs as a
                            # background job (whose children start with SIGINT ignored)
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        polled = {c["argv"][4] for c in fake_nebius.calls(state) if c["argv"][:3] == ["ai", "job", "get"]}
        if {"aijob-fake0001", "aijob-fake0002"} <= polled:
            break
        time.sleep(0.1)
    else:
        proc.kill()
        raise AssertionError("two jobs were never in flight")
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=240)   # the loop's grace for jobs to stop is 60 s
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)   # PYTHONFAULTHANDLER: every thread's stack, then it dies
        out, err = proc.communicate(timeout=60)
        raise AssertionError("no exit within 240 s of Ctrl-C; its threads:\n" + err[-6000:])
    assert proc.returncode != 0
    cancels = [c["argv"] for c in fake_nebius.calls(state) if c["argv"][:3] == ["ai", "job", "cancel"]]
    assert sorted(a[4] for a in cancels) == ["aijob-fake0001", "aijob-fake0002"], err[-2000:]
    (log,) = (tmp_path / "runs").glob("*/run.jsonl")
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert not [e for e in events if e["event"] == "iteration"]
    assert "--resume" in err
