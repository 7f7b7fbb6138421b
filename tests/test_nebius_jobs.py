"""nebius_jobs.py through the real subprocess path, against a stand-in `nebius` executable
(tests/fake_nebius.py) put first on PATH: success, FAILED/ERROR, no result line, timeout (the
stand-in must then receive a cancel), an interrupt, CLI missing, not logged in, create rejected,
an oversized file; then a whole orchestrator run with --backend nebius.

The stand-in really runs the injected entry script and checker (interpret mode, CPU) in the
success scenario; that is slow (~4 s a job), so only 4 such jobs run in this file.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import fake_nebius  # noqa: E402
import nebius_jobs as nj  # noqa: E402
from kernloop.backends.nebius_cli import normalize_state  # noqa: E402
from kernloop.spec import load_spec  # noqa: E402
from kernloop.settings import SettingsError  # noqa: E402
from kernloop.trajectory import read_events  # noqa: E402

SPEC = ROOT / "specs" / "matmul.yaml"
# The stand-in's `create` runs the container before it returns, so a busy host's slow container
# would pass for a stuck CLI under a short timeout: waits and CLI calls get 10 minutes here, and
# the tests of giving up set their own wait.
FAST = {"KERNLOOP_NEBIUS_CHECK_MODE": "interpret", "KERNLOOP_NEBIUS_POLL_S": "0.05",
        "KERNLOOP_NEBIUS_LOG_WAIT_S": "0.5", "KERNLOOP_NEBIUS_WAIT_S": "600",
        "KERNLOOP_NEBIUS_CLI_TIMEOUT_S": "600"}
# the job's files, then the whole checker package under checker/ (its launcher and the second
# look's modules among them): every .py file of checker/, no list to keep
INJECTED = ("spec.json", "candidate.py", "champion.py",
            *(f"checker/{p.name}" for p in sorted((ROOT / "checker").glob("*.py"))))


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """The stand-in first on PATH, its state folder, fast polling; no KERNLOOP_NEBIUS_* leaks in."""
    bin_dir = tmp_path / "bin"
    fake_nebius.install(bin_dir)
    for k in list(os.environ):
        if k.startswith(("KERNLOOP_NEBIUS_", "FAKE_NEBIUS_")):
            monkeypatch.delenv(k)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("FAKE_NEBIUS_STATE", str(tmp_path / "fake-state"))
    for k, v in FAST.items():
        monkeypatch.setenv(k, v)
    return SimpleNamespace(
        state=tmp_path / "fake-state", bin=bin_dir, workdir=tmp_path / "job",
        scenario=lambda s: monkeypatch.setenv("FAKE_NEBIUS_SCENARIO", s),
        calls=lambda: fake_nebius.calls(tmp_path / "fake-state"))


def evaluate(fake, candidate: Path | None = None, say=None):
    """One NebiusBackend.evaluate of (candidate or the baseline) against the baseline."""
    spec = load_spec(SPEC)
    said: list[str] = []
    backend = nj.NebiusBackend(nj.settings_from_env(), say=say or said.append)
    res = backend.evaluate(spec, candidate or spec.baseline, spec.baseline, fake.workdir)
    return res, said


def commands(calls: list[dict]) -> list[str]:
    return [" ".join(c["argv"][:3]) for c in calls]


def flag_values(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def assert_backend_failure(res: dict, *needles: str) -> None:
    assert res["ok"] is False and res["stage"] == "backend"
    assert res["backend"] == "nebius" and res["synthetic"] is False
    for n in needles:
        assert n in res["error"], (n, res["error"])


# ---------------------------------------------------------------- the real subprocess path

def test_success_injects_the_files_runs_the_checker_and_reads_coloured_logs(fake):
    fake.scenario("success")
    res, said = evaluate(fake)
    assert res["ok"] is True and res["correct"] is True, res.get("error")
    assert res["backend"] == "nebius" and res["synthetic"] is False
    assert res["mode"] == "interpret" and res["rel_l2"]          # the checker's own result line
    meta = res["backend_meta"]
    job_id = meta["job_id"]
    assert re.fullmatch(r"aijob-[a-z0-9]+", job_id)
    assert [s for _, s in meta["states"]] == ["PROVISIONING", "STARTING", "RUNNING", "COMPLETED"]
    assert meta["platform"] == "gpu-h100-sxm" and meta["preset"] == "1gpu-16vcpu-200gb"
    assert meta["image"].startswith("pytorch/pytorch:") and meta["wall_s"] > 0
    assert "interpret mode" in meta["note"]

    calls = fake.calls()
    create = calls[0]["argv"]
    assert commands(calls)[0] == "ai job create" and calls[0]["cwd"] == str(fake.workdir)
    # The injected entry script, its mode and options are the whole command line: no word holds
    # a space. KERNLOOP_NCU travels as a word (the container sees none of this machine's variables).
    assert flag_values(create, "--container-command") == ["python"]
    assert flag_values(create, "--args") == ["/kernloop/checker/nebius_entry.py interpret ncu=auto"]
    assert meta["entry_args"] == "interpret ncu=auto"
    injected = dict(v.split(":", 1) for v in flag_values(create, "--inject-file"))
    assert injected == {n: f"/kernloop/{n}" for n in INJECTED}
    assert {"checker/__init__.py", "checker/check.py", "checker/worker.py", "checker/sight.py"} <= set(injected)
    assert "--async" in create and flag_values(create, "--format") == ["json"]
    assert flag_values(create, "--timeout") == ["1h"] and flag_values(create, "--disk-size") == ["100Gi"]
    gets = [c["argv"] for c in calls if commands([c]) == ["ai job get"]]
    assert gets and all(g[3:5] == ["--id", job_id] for g in gets)
    logs = [c["argv"] for c in calls if commands([c]) == ["ai job logs"]]
    assert len(logs) >= 2 and all(l[3] == job_id for l in logs)   # the first read was empty
    assert "ai job cancel" not in commands(calls)

    assert any(job_id in m and "created" in m for m in said)        # logged as it happens
    journal = (fake.workdir / "nebius_job.log").read_text()
    assert job_id in journal and "COMPLETED" in journal
    checker_log = (fake.workdir / "checker.log").read_text()
    assert "KERNLOOP_RESULT" in checker_log and "\x1b[" not in checker_log


@pytest.mark.parametrize("scenario,state", [("failed", "FAILED"), ("error", "ERROR")])
def test_a_failed_job_is_a_clean_error_with_its_state_details(fake, scenario, state):
    fake.scenario(scenario)
    res, _ = evaluate(fake)
    job_id = res["backend_meta"]["job_id"]
    assert_backend_failure(res, f"job {job_id} ended {state}", "RuntimeError" if state == "FAILED"
                           else "the VM stopped unexpectedly")
    if state == "FAILED":
        assert "ContainerExitCode: container exited with code 1" in res["error"]
    assert res["backend_meta"]["states"][-1][1] == state
    assert "ai job cancel" not in commands(fake.calls())          # it ended by itself


def test_completed_without_a_result_line_rereads_logs_then_fails_naming_the_job(fake):
    fake.scenario("no_result")
    res, _ = evaluate(fake)
    job_id = res["backend_meta"]["job_id"]
    assert_backend_failure(res, f"job {job_id} COMPLETED without a usable result line",
                           "no KERNLOOP_RESULT line", "hello from the container")
    assert commands(fake.calls()).count("ai job logs") >= 3       # bounded re-reads


def test_over_the_time_limit_the_job_is_cancelled_and_reported(fake, monkeypatch):
    fake.scenario("hang")
    monkeypatch.setenv("KERNLOOP_NEBIUS_WAIT_S", "0.8")
    res, said = evaluate(fake)
    job_id = res["backend_meta"]["job_id"]
    assert_backend_failure(res, f"gave up on job {job_id}", "KERNLOOP_NEBIUS_WAIT_S=0.8", "cancel requested")
    # the state it was last seen in: how far the walk got in 0.8 s depends on the host's load
    last_seen = [s for _, s in res["backend_meta"]["states"] if s not in ("CANCELLING", "CANCELLED")][-1]
    assert last_seen in ("PROVISIONING", "STARTING", "RUNNING") and f"still {last_seen} after" in res["error"]
    calls = [c["argv"] for c in fake.calls()]
    assert ["ai", "job", "cancel", "--id", job_id] in calls
    assert res["backend_meta"]["states"][-1][1] == "CANCELLED"
    assert "ai job logs" not in commands(fake.calls())           # nothing to read: it never ended
    assert any("gave up" in m for m in said)


def test_an_unreadable_state_gives_up_and_cancels(fake):
    fake.scenario("flaky_get")
    res, _ = evaluate(fake)
    job_id = res["backend_meta"]["job_id"]
    assert_backend_failure(res, f"gave up on job {job_id}", "could not read the job state 5 times",
                           "Unavailable", "cancel requested")
    assert ["ai", "job", "cancel", "--id", job_id] in [c["argv"] for c in fake.calls()]


def test_a_create_without_a_job_id_in_its_output_finds_the_job_by_name(fake, monkeypatch):
    fake.scenario("failed")
    monkeypatch.setenv("FAKE_NEBIUS_CREATE_OUTPUT", "text")
    res, _ = evaluate(fake)
    lookup = [c["argv"] for c in fake.calls() if c["argv"][:3] == ["ai", "job", "get-by-name"]]
    assert len(lookup) == 1 and lookup[0][4] == res["backend_meta"]["job_name"]
    assert_backend_failure(res, f"job {res['backend_meta']['job_id']} ended FAILED")
    assert res["backend_meta"]["job_id"].startswith("aijob-")


def test_an_interrupt_while_waiting_cancels_the_job_then_propagates(fake):
    fake.scenario("hang")

    def say(msg):   # Ctrl-C arrives while the job is running
        if "state RUNNING" in msg:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        evaluate(fake, say=say)
    cancels = [c["argv"] for c in fake.calls() if c["argv"][:3] == ["ai", "job", "cancel"]]
    assert len(cancels) == 1 and cancels[0][4].startswith("aijob-")
    assert "KernLoop was interrupted" in (fake.workdir / "nebius_job.log").read_text()


def test_cli_missing_is_a_clean_error_before_any_job(fake, monkeypatch, tmp_path):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    res, _ = evaluate(fake)
    assert_backend_failure(res, "nebius CLI was not found", "KERNLOOP_NEBIUS_CLI='nebius'",
                           "no job was created")
    assert res["backend_meta"]["job_id"] is None and fake.calls() == []


def test_not_logged_in_says_how_to_log_in(fake):
    fake.scenario("not_logged_in")
    res, _ = evaluate(fake)
    assert_backend_failure(res, "not logged in, no job was created", "missing configuration",
                           "run `nebius profile create`")
    assert commands(fake.calls()) == ["ai job create"]


def test_a_rejected_create_reports_the_cli_plain_text_error(fake):
    fake.scenario("reject")
    res, _ = evaluate(fake)
    assert_backend_failure(res, "create rejected, no job was created", "InvalidArgument",
                           "'1gpu-16vcpu-200gb'")
    assert commands(fake.calls()) == ["ai job create"]


def test_an_oversized_file_is_refused_before_any_cli_call(fake, tmp_path):
    big = tmp_path / "big_candidate.py"
    big.write_text(load_spec(SPEC).baseline.read_text() + "#" * (70 * 1024) + "\n")
    res, _ = evaluate(fake, candidate=big)
    size = (fake.workdir / "candidate.py").stat().st_size
    assert_backend_failure(res, "refusing to submit", "64 KiB", f"candidate.py ({size} bytes)",
                           "no job was created")
    assert fake.calls() == []


# ---------------------------------------------------------------- pure pieces

def test_settings_defaults_overrides_and_bad_values():
    s = nj.settings_from_env({})
    assert (s.cli, s.platform, s.preset, s.check_mode) == ("nebius", "gpu-h100-sxm",
                                                           "1gpu-16vcpu-200gb", "gpu")
    s = nj.settings_from_env({"KERNLOOP_NEBIUS_PLATFORM": "gpu-h200-sxm",
                              "KERNLOOP_NEBIUS_POLL_S": "2.5", "KERNLOOP_NEBIUS_PARENT_ID": "project-x"})
    assert (s.platform, s.poll_s, s.parent_id) == ("gpu-h200-sxm", 2.5, "project-x")
    assert nj.NebiusBackend(s).device == "Nebius gpu-h200-sxm / 1gpu-16vcpu-200gb"
    with pytest.raises(SettingsError, match="KERNLOOP_NEBIUS_WAIT_S"):
        nj.settings_from_env({"KERNLOOP_NEBIUS_WAIT_S": "soon"})
    with pytest.raises(SettingsError, match="KERNLOOP_NEBIUS_CHECK_MODE"):
        nj.settings_from_env({"KERNLOOP_NEBIUS_CHECK_MODE": "cpu"})
    assert "interpret mode" in nj.NebiusBackend.from_env(
        {"KERNLOOP_NEBIUS_CHECK_MODE": "interpret"}).device


def test_spec_values_fill_what_the_environment_left_default():
    spec = SimpleNamespace(nebius={"platform": "gpu-h200-sxm", "preset": "8gpu-128vcpu-1600gb",
                                   "unknown": "ignored"})
    s = nj.settings_from_env({"KERNLOOP_NEBIUS_PRESET": "1gpu-16vcpu-200gb"}).for_spec(spec)
    assert (s.platform, s.preset) == ("gpu-h200-sxm", "1gpu-16vcpu-200gb")   # env wins
    assert nj.settings_from_env({}).for_spec(SimpleNamespace()) == nj.settings_from_env({})


def test_env_vars_table_matches_the_code_and_the_doc():
    read = set(re.findall(r'"(KERNLOOP_NEBIUS_[A-Z_]+)"', (ROOT / "kernloop" / "backends" / "nebius_settings.py").read_text()))
    doc = (ROOT / "README.md").read_text()
    rows = re.findall(r"^\| `(KERNLOOP_NEBIUS_[A-Z_]+)` \|", doc, re.M)
    assert read and sorted(rows) == sorted(read)          # every variable read has one row, once


@pytest.mark.parametrize("raw,want", [("RUNNING", "RUNNING"), ("STATE_COMPLETED", "COMPLETED"),
                                      (7, "FAILED"), ("cancelled", "CANCELLED"), (None, "")])
def test_state_names_are_normalized(raw, want):
    assert normalize_state(raw) == want


@pytest.mark.parametrize("out,want", [
    ('{"id": "aiop-1", "resource_id": "aijob-e00abc"}', "aijob-e00abc"),      # an operation
    ('{"metadata": {"id": "aijob-e00def"}}', "aijob-e00def"),                  # the job itself
    ("\x1b[32mcreated job aijob-e00ghi\x1b[0m\n", "aijob-e00ghi"),            # plain text
    ("{}", None)])
def test_job_id_is_found_in_create_output(out, want):
    assert nj.job_id_from_create(out) == want


def test_job_names_are_dns_safe_and_unique():
    a, b = nj.job_name("MatMul_v2", "it0001"), nj.job_name("MatMul_v2", "it0001")
    assert a != b and re.fullmatch(r"[a-z0-9-]{1,63}", a) and a.startswith("kernloop-matmul-v2-it0001-")
    assert len(nj.job_name("x" * 200, "y" * 50)) <= 63


# ---------------------------------------------------------------- a whole orchestrator run

def test_orchestrator_run_with_the_nebius_backend(tmp_path):
    """`orchestrator.py --backend nebius` end to end against the stand-in. The interpret-mode
    checker measures no time, so the stand-in adds constant timing labelled as emulated
    (FAKE_NEBIUS_TIMING=emulate): decisions run, and every one is a 0% 'rejected'."""
    bin_dir = tmp_path / "bin"
    fake_nebius.install(bin_dir)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KERNLOOP_", "FAKE_NEBIUS_")) and k not in ("TAVILY_API_KEY",)}
    env.update(FAST, PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", PYTHONUNBUFFERED="1",
               FAKE_NEBIUS_STATE=str(tmp_path / "fake-state"), FAKE_NEBIUS_SCENARIO="success",
               FAKE_NEBIUS_TIMING="emulate")
    p = subprocess.run([sys.executable, str(ROOT / "orchestrator.py"), "--spec", str(SPEC),
                        "--backend", "nebius", "--proposer", "tuner", "--iterations", "2",
                        "--out", str(tmp_path / "runs")], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    (run_dir,) = [d for d in (tmp_path / "runs").iterdir() if d.is_dir()]   # beside runs/index.html
    events = read_events(run_dir / "run.jsonl")      # every event fits the schema
    assert events and all(e["backend"] == "nebius" and e["synthetic"] is False for e in events)
    start = next(e for e in events if e["event"] == "run_start")
    assert start["device"] == "Nebius gpu-h100-sxm / 1gpu-16vcpu-200gb (checker in interpret " \
                              "mode: CPU, correctness only, no GPU timing)"
    jobs = [e for e in events if e["event"] in ("baseline", "iteration") and e.get("result")]
    assert [e["event"] for e in jobs] == ["baseline", "iteration", "iteration"]
    ids = [e["result"]["backend_meta"]["job_id"] for e in jobs]
    assert len(set(ids)) == 3 and all(i.startswith("aijob-") for i in ids)
    for e in jobs:
        r = e["result"]
        assert r["backend"] == "nebius" and r["mode"] == "interpret" and r["ok"] is True
        assert r["backend_meta"]["states"][-1][1] == "COMPLETED"
        assert "NOT a measurement" in r["timing_source"]
    iters = [e for e in events if e["event"] == "iteration"]
    assert [e["decision"]["verdict"] for e in iters] == ["rejected", "rejected"]
    assert events[-1]["event"] == "run_end"
    creates = [c for c in fake_nebius.calls(tmp_path / "fake-state")
               if c["argv"][:3] == ["ai", "job", "create"]]
    assert len(creates) == 3
    assert all(f"nebius: job {i} created" in p.stderr for i in ids)
