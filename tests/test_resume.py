"""Ctrl-C and SIGTERM end a run with run_end stopped=interrupted (the page stops refreshing);
--resume continues it exactly: the tuner's initial spread and RNG pick up where the
uninterrupted run would have gone, from another working directory, and the final run_end's
duration covers both parts and records the interruption. Real subprocesses, synthetic backend."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from columns import unwrap  # noqa: E402

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
PY = [sys.executable, str(ROOT / "orchestrator.py")]
ENV = {k: v for k, v in os.environ.items() if not k.startswith(("KERNLOOP_", "TAVILY", "NVIDIA_API"))}
ENV["PYTHONUNBUFFERED"] = "1"


def small_spec(folder: Path) -> Path:
    """specs/matmul.yaml with one small check shape: a fast synthetic iteration."""
    folder.mkdir(parents=True, exist_ok=True)
    text = (ROOT / "specs" / "matmul.yaml").read_text()
    head, rest = text.split("check_shapes:", 1)
    rest = rest.split("cost:", 1)[1]
    (folder / "s.yaml").write_text(head + "check_shapes:\n  - {M: 37, N: 45, K: 29}\ncost:" + rest)
    shutil.copyfile(ROOT / "specs" / "matmul_naive.py", folder / "matmul_naive.py")
    return folder / "s.yaml"


def events(run: Path) -> list[dict]:
    return [json.loads(ln) for ln in (run / "run.jsonl").read_text().splitlines()]


def configs(run: Path) -> list:
    return [e.get("candidate_config") for e in events(run) if e["event"] == "iteration"]


def only_run(out: Path) -> Path:
    (run,) = [d for d in out.iterdir() if d.is_dir()]
    return run


def tree(run: Path) -> list:
    return [(e["parent_id"], e["selection"], e["node_time"]) for e in events(run) if e["event"] == "iteration"]


def start_and_interrupt(args, cwd, out: Path, after_iterations: int, sig) -> Path:
    # as from a terminal: Ctrl-C raises KeyboardInterrupt even when this test runs in a
    # background job (which starts children with SIGINT ignored)
    proc = subprocess.Popen([*PY, *args], cwd=cwd, env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 240
    run = None
    while time.monotonic() < deadline:
        logs = list(out.glob("*/run.jsonl"))
        if logs:
            text = logs[0].read_text()
            n = text.count('"event": "iteration"')
            if (n >= after_iterations if after_iterations else '"event": "baseline"' in text):
                run = logs[0].parent
                break
        time.sleep(0.1)
    assert run is not None, "the run did not get that far"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == (143 if sig == signal.SIGTERM else 130), err
    assert "--resume" in err and "Traceback" not in err
    return run, err


def test_sigterm_writes_run_end_interrupted_and_the_page_stops_refreshing(tmp_path):
    spec = small_spec(tmp_path / "spec")
    out = tmp_path / "runs"
    run, _ = start_and_interrupt(["--spec", str(spec), "--iterations", "30", "--out", str(out)],
                                 ROOT, out, 0, signal.SIGTERM)
    end = events(run)[-1]
    assert end["event"] == "run_end" and end["stopped"] == "interrupted"
    assert end["stop_reason"] == "interrupted by SIGTERM" and end["duration_s"] > 0
    assert events(run)[0]["search"] == "tree"   # the spec's loop.search, no --search given
    html = (run / "trajectory.html").read_text()
    assert 'http-equiv="refresh"' not in html
    # --resume keeps the run's backend: another one is refused in one line, nothing written
    other = subprocess.run([*PY, "--resume", str(run), "--backend", "local", "--iterations", "0"], cwd=ROOT,
                           env=ENV, capture_output=True, text=True, timeout=600)
    assert other.returncode == 2 and events(run)[-1] == end
    line, = unwrap(other.stderr.strip())
    assert line.startswith("error: --resume") and "synthetic backend" in line and "--backend local" in line
    # the same run resumed says where its backend came from (not "chosen on the command line")
    again = subprocess.run([*PY, "--resume", str(run), "--iterations", "0"], cwd=ROOT, env=ENV,
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert "the resumed run's backend, from its log: synthetic" in again.stdout.splitlines()[0]


def test_interrupted_tuner_run_resumes_exactly_as_the_uninterrupted_one(tmp_path):
    spec = small_spec(tmp_path / "spec")
    n = 7
    # seed 3: without replaying the tuner's RNG on resume, candidate 6 differs (checked); 7 in all,
    # cut after 5 (two iterations' margin for the signal to land before the budget ends the run)
    args = ["--iterations", str(n), "--seed", "3", "--quiet"]
    full_out = tmp_path / "full"   # the uninterrupted run, side by side with the one cut below
    full_p = subprocess.Popen([*PY, "--spec", str(spec), *args, "--out", str(full_out)], cwd=ROOT,
                              env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    # the same run, started with a RELATIVE spec path, Ctrl-C after iteration 5 (past the
    # tuner's initial spread of 4: its seeded moves have drawn from the RNG), then resumed
    # from another working directory
    out = tmp_path / "cut"
    run, err = start_and_interrupt(["--spec", "spec/s.yaml", *args, "--out", str(out)], tmp_path,
                                   out, 5, signal.SIGINT)
    _, full_err = full_p.communicate(timeout=600)
    assert full_p.returncode == 0, full_err
    (full,) = [d for d in full_out.iterdir() if d.is_dir()]
    expected = configs(full)
    assert len(expected) == n and all(expected)
    cut = events(run)
    assert cut[-1]["event"] == "run_end" and cut[-1]["stopped"] == "interrupted"
    k = cut[-1]["iterations_done"]
    assert 5 <= k < n and configs(run) == expected[:k]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # the command the interrupted page shows is the one the terminal printed, and it works
    shown = re.search(r"python orchestrator\.py --resume (\S+)</code>", (run / "trajectory.html").read_text())
    assert shown and f"python orchestrator.py --resume {shown[1]}" in err
    p = subprocess.run([*PY, "--resume", shown[1]], cwd=elsewhere, env=ENV, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert configs(run) == expected            # same candidates, same order
    # the same search tree: every node's parent, the rule's reason for it, its chained time
    assert tree(run) == tree(full) and len({p for p, _, _ in tree(full)}) > 1
    evs = events(run)
    ends = [e for e in evs if e["event"] == "run_end"]
    assert len(ends) == 2 and ends[-1]["stopped"] == "budget" and ends[-1]["iterations_done"] == n
    (resumed,) = [e for e in evs if e["event"] == "resume"]
    assert resumed["after_iteration"] == k and resumed["previous"] == "interrupted"
    (stop,) = ends[-1]["interruptions"]
    assert stop["after_iteration"] == k and stop["how"] == "interrupted"
    assert "Ctrl-C" in stop["reason"]
    # the duration covers both parts: at least the first part's plus the resumed iterations
    assert ends[-1]["duration_s"] > ends[0]["duration_s"] > 0
    full_end = events(full)[-1]
    assert ends[-1]["champion_id"] == full_end["champion_id"]
    assert abs(ends[-1]["speedup"] - full_end["speedup"]) < 1e-9   # modeled: identical numbers
    html = (run / "trajectory.html").read_text()
    assert 'http-equiv="refresh"' not in html
    # the page lists the interruption the log records: how, after which iteration, why
    part = html.split('id="k-interruptions">', 1)[1].split("</div>", 1)[0]
    assert part.startswith("resumed 1×: interrupted after iteration %d" % k) and "Ctrl-C" in part


def interrupts_child(body: str) -> subprocess.CompletedProcess:
    """`body` run in a fresh Python with loop.interrupts installed (os, signal, subprocess, sys
    imported): signals are process-wide, so each case gets its own process."""
    code = ("import os, signal, subprocess, sys; sys.path.insert(0, sys.argv[1]); from kernloop.loop import interrupts\n"
            "interrupts.install()\n" + body)
    return subprocess.run([sys.executable, "-c", code, str(ROOT)], capture_output=True, text=True,
                          timeout=60)


def test_a_signal_swallowed_while_a_child_is_spawned_is_raised_later_and_not_printed():
    """Python runs handlers inside logging's at-fork hook too, which swallows the exception:
    interrupts.check() raises it between iterations, and nothing is printed for it."""
    p = interrupts_child(
        "os.register_at_fork(after_in_parent=lambda: interrupts._on_signal(signal.SIGTERM, None))\n"
        "subprocess.run(['true'], preexec_fn=lambda: None)   # like sandbox.run_child\n"
        "try:\n    interrupts.check()\nexcept interrupts.Terminated:\n    print('raised later')\n")
    assert p.stdout.strip() == "raised later" and p.stderr == "", p.stderr


def test_a_signal_inside_a_held_block_is_raised_when_the_block_ends():
    """CI once caught Ctrl-C between an iteration's log line and the state that counts it:
    run_end said 4 iterations over a log of 5. Inside interrupts.held() the signal waits."""
    p = interrupts_child("steps = []\n"
                         "try:\n"
                         "    with interrupts.held():\n"
                         "        os.kill(os.getpid(), signal.SIGTERM)\n"
                         "        steps.append('logged')\n"
                         "        steps.append('counted')\n"
                         "    steps.append('after')\n"
                         "except interrupts.Terminated:\n"
                         "    print(' '.join(steps))\n")
    assert p.stdout.strip() == "logged counted" and p.stderr == "", p.stderr


def test_search_chain_from_the_command_line_is_logged_and_kept_on_resume(tmp_path):
    from kernloop.loop import resume
    from orchestrator import parse_args
    spec = small_spec(tmp_path / "spec")
    out = tmp_path / "runs"
    p = subprocess.run([*PY, "--spec", str(spec), "--search", "chain", "--iterations", "3", "--seed", "3",
                        "--quiet", "--out", str(out)], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    evs = events(only_run(out))
    assert evs[0]["event"] == "run_start" and evs[0]["search"] == "chain"
    its = [e for e in evs if e["event"] == "iteration"]
    champion = "baseline"
    for e in its:   # every one from the champion of its time
        assert (e["parent_id"], e["selection"]) == (champion, "chain: the champion")
        champion = e["candidate_id"] if e["decision"]["promoted"] else champion
    assert len(its) == 3
    # --resume takes the run's own search unless given again
    again = resume.take_options(parse_args(["--resume", "R"]), evs[0], out)
    assert again.search == "chain"
    assert resume.take_options(parse_args(["--resume", "R", "--search", "tree"]), evs[0], out).search == "tree"
