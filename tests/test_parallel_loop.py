"""--parallel / --batch through the real CLI on the synthetic backend (Triton interpreter, modeled
timing): K=1 is the one-at-a-time loop unchanged, and a run killed with candidates in flight
resumes with no iteration lost or logged twice."""
import json
import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from columns import too_wide
from kernloop.trajectory import read_events

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
NO_LLM = {k: v for k, v in os.environ.items()
          if not k.startswith(("KERNLOOP_LLM", "TAVILY", "NVIDIA_API"))}
VOLATILE = {"ts", "run_id", "latency_s", "wall_s", "duration_s", "argv", "t_s", "phases_s",
            "compile_s", "elapsed_s", "phase_s", "rel_l2",   # the checker draws fresh inputs
            "floors", "floor_ratio", "workers",   # rounding floors of those inputs; worker pids
            "cost_s", "folder",   # what each containment layer took to apply; the job's scratch folder
            "references_ms",   # how long the inputs and references took
            "finish_s", "uptime_s", "pid"}   # the warm judge's own: its job's end, its age, its process


def run_cli(args, timeout=600):
    return subprocess.run([sys.executable, str(ROOT / "orchestrator.py"), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, env=NO_LLM)


def only_run(out: Path) -> Path:
    (run,) = [d for d in out.iterdir() if d.is_dir()]
    return run


def stable(events, run_dir: Path):
    """The events without what differs between two identical runs (times, the run's path)."""
    def strip(x):
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if k not in VOLATILE}
        if isinstance(x, list):
            return [strip(v) for v in x]
        return x
    text = json.dumps([strip(e) for e in events]).replace(str(run_dir), "RUN")
    return json.loads(re.sub(r"\d+\.\d+ ?s\b", "T s", text))


def test_parallel_1_is_the_one_at_a_time_loop_event_for_event(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    with ThreadPoolExecutor(2) as pool:   # two independent runs: side by side, not one after the other
        fa = pool.submit(run_cli, ["--spec", "specs/matmul.yaml", "--iterations", "4", "--out", str(a), "--quiet"])
        pb = run_cli(["--spec", "specs/matmul.yaml", "--iterations", "4", "--out", str(b), "--quiet",
                      "--parallel", "1", "--batch", "1"])
        pa = fa.result()
    assert pa.returncode == 0 and pb.returncode == 0, pa.stderr + pb.stderr
    ra, rb = only_run(a), only_run(b)
    ea, eb = read_events(ra / "run.jsonl"), read_events(rb / "run.jsonl")
    assert [e["event"] for e in ea] == ["run_start", "baseline"] + ["iteration"] * 4 + ["run_end"]
    assert stable(ea, ra) == stable(eb, rb)
    assert "parallel" not in ea[0] and "evaluations" not in ea[2]   # no new fields at K=1


def test_parallel_run_logs_each_iteration_once_in_decided_order(tmp_path):
    p = run_cli(["--spec", "specs/matmul.yaml", "--iterations", "6", "--parallel", "3",
                 "--out", str(tmp_path)])
    assert p.returncode == 0, p.stderr
    assert "3 in flight, batches of 1" in p.stdout and "in flight:" in p.stdout
    lines = p.stdout.splitlines()
    assert all(ln.startswith("SYNTHETIC") for ln in lines) and too_wide(lines) == [], lines
    progress = [int(m[1]) for ln in lines if (m := re.search(r" (\d+)/6 it\d{4} ", ln))]
    assert progress == [1, 2, 3, 4, 5, 6]     # decided so far: never backwards, out of order or not
    evs = read_events(only_run(tmp_path) / "run.jsonl")
    its = [e for e in evs if e["event"] == "iteration"]
    assert sorted(e["iteration"] for e in its) == list(range(1, 7))
    assert evs[0]["parallel"] == 3 and evs[0]["batch"] == 1
    champion = "baseline"
    for e in its:   # each is judged against a champion that existed when its job started
        assert e["evaluations"] and e["evaluations"][0]["against"] == e["evaluated_against"]
        if e["decision"]["promoted"]:
            assert e["evaluations"][-1]["against"] == champion   # timed against the current one
            champion = e["candidate_id"]
        assert e["champion_id"] == champion
    assert evs[-1]["champion_id"] == champion and evs[-1]["iterations_done"] == 6


def test_bad_parallel_and_batch_values_are_one_clear_error():
    for flag in ("--parallel", "--batch"):
        p = run_cli(["--spec", "specs/matmul.yaml", flag, "0"], timeout=60)
        assert p.returncode == 2 and f"{flag} must be >= 1" in p.stderr


def test_kill_9_with_candidates_in_flight_then_resume(tmp_path):
    out = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, str(ROOT / "orchestrator.py"), "--spec", "specs/matmul.yaml",
                             "--iterations", "8", "--parallel", "3", "--out", str(out), "--quiet"],
                            cwd=ROOT, env=NO_LLM, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 240
    log = None
    while time.monotonic() < deadline and log is None:
        for f in out.glob("*/run.jsonl"):
            if sum('"event": "iteration"' in ln for ln in f.read_text().splitlines()) >= 2:
                log = f
        time.sleep(0.1)
    assert log is not None, "run did not reach 2 decided iterations"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = read_events(log)
    decided = {e["iteration"] for e in before if e["event"] == "iteration"}
    proposed = {int(p.stem[2:]) for p in (log.parent / "candidates").glob("it*.py")}
    assert proposed - decided, "nothing was in flight at the kill"
    assert not any(e["event"] == "run_end" for e in before)
    p = run_cli(["--resume", str(log.parent)])
    assert p.returncode == 0, p.stderr
    evs = read_events(log)
    its = [e["iteration"] for e in evs if e["event"] == "iteration"]
    assert sorted(its) == list(range(1, 9))                  # none lost, none duplicated
    assert evs[:len(before)] == before
    assert sum(e["event"] == "run_start" for e in evs) == 1
    assert evs[-1]["event"] == "run_end" and evs[-1]["iterations_done"] == 8
