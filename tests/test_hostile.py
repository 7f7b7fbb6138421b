"""Hostile candidates and faults, on the CPU through the Triton interpreter.

Each exploit goes to the checker directly (the static contract is bypassed on purpose) so every
run-time defence is shown to stand alone; a few then go through the whole loop to show it goes
on and the champion never changes because of them. The "timed" cases run the A/B against the
champion in the interpreter too (the judge's --host-clock: host clocks, the rules only). The
GPU-only cases (side streams, forged events, illegal memory access, out of memory) run on the
H200 in benchmarks/hostile_gpu.py and benchmarks/judge_smoke.py.
bf16 is checked as fp16 here: the interpreter's tl.dot is wrong for bf16 operands.
"""
import json
import sys
from pathlib import Path

import pytest

import orchestrator
from kernloop.loop.state import State
from kernloop.backends.local import parse_child
from kernloop.backends.synthetic import SyntheticBackend
from kernloop.backends.sandbox import run_child, stripped_env
from kernloop.spec import load_spec
from tests import judges
from tests.hostile_cases import ALLOC, CASES, FAULTS, expected_in
from tests.scripted_proposer import Scripted

ROOT = Path(__file__).resolve().parent.parent
SPEC = load_spec(ROOT / "specs" / "matmul.yaml")
BASE = SPEC.baseline.read_text()
CPU_CASES = {k: v for k, v in CASES.items() if v[2] == "any"}


def check(tmp_path, code, timeout=120):
    spec = SPEC.to_checker()
    spec["check_shapes"] = [{"M": 37, "N": 45, "K": 29}, {"M": 130, "N": 70, "K": 100}]
    return judges.judge_files(tmp_path, spec, code, BASE, ["--mode", "interpret", "--draws", "2", "--backend",
                                                          "synthetic"], timeout)


def check_timed(tmp_path, code, reps=12, extra=(), champion=BASE):
    """The judge with the A/B against the champion run in the interpreter (--host-clock:
    host clocks, the rules only), 3 draws of one check shape, `reps` timed reps."""
    spec = SPEC.to_checker()
    spec["check_shapes"] = [{"M": 37, "N": 45, "K": 29}]
    return judges.judge_files(tmp_path, spec, code, champion, ["--mode", "interpret", "--host-clock", "--draws", "3",
                                                               "--reps", str(reps), "--warmup", "2", "--backend",
                                                               "synthetic", *extra])


TIMED_CASES = {k: v for k, v in CASES.items() if v[2] == "timed"}


def test_every_timed_output_is_checked(tmp_path):
    """The A/B checks the candidate's output of every timed rep, not a sample of them."""
    r = check_timed(tmp_path, BASE, extra=["--no-early-reject"])   # a loaded host clock can end it early
    assert r["ok"], r["error"]
    assert r["checked_reps"] == list(range(12)) and r["even"] == ["arena", "reads"]   # the default
    assert r["candidate"]["n"] == r["champion"]["n"] == 12 and r["wall_probe_ms"]


def test_a_candidate_clearly_slower_ends_its_a_b_early_and_is_rejected_either_way(tmp_path):
    """A candidate with 16x16 tiles (about 4x the interpreter's work of the 32x32 champion):
    its A/B ends once it is clearly slower (timing.clearly_slower, from the 10th rep), every rep
    it ran checked; with --no-early-reject all 30 reps run. Both are rejections."""
    from kernloop import decision
    slow = BASE.replace("BLOCK_M=32, BLOCK_N=32, BLOCK_K=32", "BLOCK_M=16, BLOCK_N=16, BLOCK_K=16")
    assert slow != BASE
    (tmp_path / "a").mkdir()
    r = check_timed(tmp_path / "a", slow, reps=30)
    assert r["ok"], r["error"]
    n = r["ended_early"]["after_reps"]
    assert 10 <= n < 30 and r["candidate"]["n"] == r["champion"]["n"] == n and r["checked_reps"] == list(range(n))
    assert decision.decide(r)["verdict"] == "rejected"
    (tmp_path / "b").mkdir()
    r = check_timed(tmp_path / "b", slow, reps=30, extra=("--no-early-reject",))
    assert r["ok"], r["error"]
    assert "ended_early" not in r and r["candidate"]["n"] == 30
    assert decision.decide(r)["verdict"] == "rejected"


def test_both_sides_are_even_by_default_and_a_champion_wrong_when_timed_fails_the_job(tmp_path):
    """By default (--even arena,reads) the champion's arena is the candidate's size and its timed
    outputs are read and judged as the candidate's: a champion wrong on timed reps fails the job
    as a harness failure. With --even none nothing reads them and the same job passes."""
    wrong_when_timed = TIMED_CASES[sorted(TIMED_CASES)[0]][0](BASE)
    (tmp_path / "b").mkdir()
    r = check_timed(tmp_path / "b", BASE, champion=wrong_when_timed)
    assert r["ok"] is False and r["stage"] == "harness", r
    assert "the champion's output of timed call" in r["error"]
    (tmp_path / "c").mkdir()
    r = check_timed(tmp_path / "c", BASE, extra=("--even", "none"), champion=wrong_when_timed)
    assert r["ok"], r["error"]
    assert r["even"] == []


@pytest.mark.parametrize("name", sorted(TIMED_CASES))
def test_timed_phase_exploit_rejected(tmp_path, name):
    """Passes the contract, is right on every correctness call, wrong on some timed reps."""
    from kernloop import contract
    make, expected, _ = TIMED_CASES[name]
    code = make(BASE)
    assert code != BASE and contract.check(code, SPEC) == []
    r = check_timed(tmp_path, code)
    assert r["ok"] is False and expected_in(expected, r["error"]), r["error"]
    assert r["stage"] == "timing"


def test_a_softmax_right_only_for_small_logits_fails_the_stress_draw(tmp_path):
    """The naive softmax without its max pass reads each row twice, not three times, and is
    right for normal(0, 1) logits (exp cannot overflow); softmax.yaml's stress_scale draw (logits
    of std 50) is where it must still be right, and it returns inf/inf there."""
    from kernloop import contract
    sspec = load_spec(ROOT / "specs" / "softmax.yaml")
    base = sspec.baseline.read_text()
    start, end = base.index("    # Pass 1: the row maximum."), base.index("    # Pass 2")
    code = base[:start] + "    m = tl.zeros((ROWS,), dtype=tl.float32)\n" + base[end:]
    assert contract.check(code, sspec) == []
    spec = sspec.to_checker()
    spec["check_shapes"] = [{"M": 9, "N": 100}]
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    (tmp_path / "cand.py").write_text(code)
    out = run_child([*judges.check_cmd(), "--spec", str(tmp_path / "spec.json"),
                     "--candidate", str(tmp_path / "cand.py"), "--champion", str(sspec.baseline),
                     "--mode", "interpret", "--draws", "2", "--backend", "synthetic"], 120, cwd=str(tmp_path))
    r = parse_child(out, "synthetic", True, tmp_path / "checker.log")
    assert r["ok"] is False and "NaN or Inf" in r["error"], r["error"]
    (tmp_path / "cand.py").write_text(base)   # the honest baseline passes the same draws
    out = run_child([*judges.check_cmd(), "--spec", str(tmp_path / "spec.json"),
                     "--candidate", str(tmp_path / "cand.py"), "--champion", str(sspec.baseline),
                     "--mode", "interpret", "--draws", "2", "--backend", "synthetic"], 120, cwd=str(tmp_path))
    assert parse_child(out, "synthetic", True, tmp_path / "checker.log")["ok"]


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory, warm_judge):
    """Every CPU exploit judged, one job after another, by ONE warm judge, the session's (as a
    run's judge meets hostile candidates in sequence): the same flags as check()."""
    spec = SPEC.to_checker()
    spec["check_shapes"] = [{"M": 37, "N": 45, "K": 29}, {"M": 130, "N": 70, "K": 100}]
    warm, logs = warm_judge
    out = {}
    for name, (make, _, _) in sorted(CPU_CASES.items()):
        argv = [*judges.job_files(tmp_path_factory.mktemp(name), spec, make(BASE), BASE),
                "--mode", "interpret", "--draws", "2", "--backend", "synthetic"]
        res, _, why = warm.job("cpu0", logs, argv, 120)
        assert res is not None, (name, why)
        out[name] = res
    return out


@pytest.mark.parametrize("name", sorted(CPU_CASES))
def test_exploit_rejected_with_specific_reason(verdicts, name):
    make, expected, _ = CPU_CASES[name]
    assert make(BASE) != BASE, f"{name}: the exploit did not apply to the baseline"
    r = verdicts[name]
    assert r["ok"] is False, f"{name} passed the checker"
    assert expected_in(expected, r["error"]), f"{name}: {r['error']}"


ORDER_SHAPES = [{"M": 37, "N": 45, "K": 29}, {"M": 64, "N": 64, "K": 64}, {"M": 130, "N": 70, "K": 100},
                {"M": 33, "N": 40, "K": 24}]


def test_a_kernel_right_only_in_the_specs_order_of_shapes_is_rejected(tmp_path):
    """Issue 42: correctness is checked in an order no kernel can predict. This kernel is right
    only while the shapes arrive as the spec lists them, each for its draws in a row (the order the
    judge once used): it passed then; now the order is drawn anew each job (4 shapes x 3 draws:
    the spec's order is one of 369,600, so it passes one job in about 370,000)."""
    expect = [(s["M"], s["N"], s["K"]) for s in ORDER_SHAPES for _ in range(3)]
    code = BASE.replace("CONFIG = dict(", f"_EXPECT = {expect!r}\n_CALLS = [0]\nCONFIG = dict(").replace(
        ALLOC, ALLOC + "    i = _CALLS[0]\n    _CALLS[0] += 1\n"
        "    if (M, N, K) != _EXPECT[i % len(_EXPECT)]:\n        return torch.zeros_like(c)\n")
    assert "_EXPECT" in code and "_CALLS[0] += 1" in code
    spec = SPEC.to_checker()
    spec["check_shapes"] = ORDER_SHAPES
    args = ["--mode", "interpret", "--draws", "3", "--backend", "synthetic"]
    r = judges.judge_files(tmp_path, spec, code, BASE, args, 300)
    assert r["ok"] is False and "rel-L2" in r["error"], r.get("error")
    (tmp_path / "honest").mkdir()
    assert judges.judge_files(tmp_path / "honest", spec, BASE, BASE, args, 300)["ok"]   # the same judge, honest


def test_baseline_still_passes(tmp_path):
    r = check(tmp_path, BASE)
    assert r["ok"] and r["correct"] and r["aten_ops"]   # the recorder saw the launcher's ops


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_faults_become_clean_errors(tmp_path, name, monkeypatch):
    make, expected = FAULTS[name]
    r = check(tmp_path, make(BASE), timeout=15 if name == "infinite_loop" else 120)
    assert r["ok"] is False and r["stage"] in ("backend", "load")
    if expected:
        assert expected in r["error"], r["error"]
    if name == "huge_stdout":   # bounded: we keep at most the capped tail, never the gigabytes
        assert len(json.dumps(r)) < 2_000_000
    # the next candidate runs in a fresh process and is unaffected
    assert check(tmp_path, BASE)["ok"]


def test_secrets_never_reach_candidate_code(monkeypatch):
    monkeypatch.setenv("KERNLOOP_LLM_API_KEY", "sk-live-123")
    monkeypatch.setenv("TAVILY_API_KEY", "tvly-123")
    monkeypatch.setenv("SOME_TOKEN", "t")
    monkeypatch.setenv("HARMLESS", "ok")
    env = stripped_env()
    assert "KERNLOOP_LLM_API_KEY" not in env and "TAVILY_API_KEY" not in env and "SOME_TOKEN" not in env
    assert env["HARMLESS"] == "ok"
    out = run_child([sys.executable, "-c", "import os; print(sorted(os.environ))"], 30)
    assert "KERNLOOP_LLM_API_KEY" not in out.stdout and "HARMLESS" in out.stdout


def test_loop_goes_on_and_champion_never_changes(tmp_path):
    """Hostile candidates through the whole iteration path (contract + backend + decision)."""
    run = tmp_path / "run"
    (run / "candidates").mkdir(parents=True)
    (run / "baseline.py").write_text(BASE)
    picks = ["returns_zeros", "torch_fallback_matmul", "patches_event_timer", "mutates_input"]
    codes = [(n, CASES[n][0](BASE)) for n in picks] + [("segfault", FAULTS["segfault"][0](BASE))]
    prop = Scripted(codes)
    st = State()
    st.champion_profile = {"mean_ms": 1.0}
    backend = SyntheticBackend()
    for i in range(1, len(codes) + 1):
        ev, fatal = orchestrator.run_iteration(i, st, SPEC, prop, backend, run, 0.02, 2.0)
        ev["champion_id"] = st.champion_id
        st.apply(ev, None)
        assert not fatal and not ev["decision"]["promoted"]
        assert ev["decision"]["verdict"] in ("invalid", "incorrect", "failed")
        assert ev["decision"]["reason"]
        assert st.champion_id == "baseline"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return "State:\tZ" not in f.read()   # a zombie is dead, merely not yet reaped
    except FileNotFoundError:
        return False


def test_checker_child_dies_with_a_killed_kernloop(tmp_path):
    """kill -9 of KernLoop leaves no candidate running: nothing else would enforce its timeout."""
    import subprocess
    import time
    marker = tmp_path / "child.pid"
    child = tmp_path / "child.py"
    child.write_text(f"import os, time\nopen({str(marker)!r}, 'w').write(str(os.getpid()))\ntime.sleep(120)\n")
    kernloop = tmp_path / "kernloop.py"
    kernloop.write_text(f"import sys\nsys.path.insert(0, {str(ROOT)!r})\nfrom kernloop.backends.sandbox import run_child\n"
                        f"run_child([sys.executable, {str(child)!r}], 300)\n")
    code_path = str(kernloop)
    parent = subprocess.Popen([sys.executable, code_path])
    deadline = time.monotonic() + 30
    while not (marker.exists() and marker.read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    pid = int(marker.read_text())
    assert _alive(pid)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid)
