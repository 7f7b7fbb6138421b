"""The warm judge (checker/serve.py, checker/pool.py, warmjudge.py) on the CPU, real Triton
kernels in the interpreter: it gives the verdicts the one-process-per-job judge gives (the whole
hostile suite included), a worker that dies or hangs is replaced and the judge goes on, a killed
judge fails only the job it held, a candidate never shares a process with another kernel, the
second look comes after the decision, and nothing outlives the loop that started it.
The GPU half (CUDA contexts opened only outside timing, A/A and power) is benchmarks/verdict_speed.py.
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import orchestrator
from kernloop.backends import warmjudge
from kernloop.backends.local import LocalBackend
from kernloop.propose.proposer import Proposal
from kernloop.spec import load_spec
from tests.hostile_cases import CASES, FAULTS, expected_in
from kernloop.trajectory import read_events

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
SPEC = load_spec(ROOT / "specs" / "matmul.yaml")
BASE = SPEC.baseline.read_text()
CHECKED = {k: v for k, v in CASES.items() if v[2] in ("any", "timed")}
INTERPRET = {"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}


@pytest.fixture
def warm(warm_judge):
    """The session's warm judge (tests/conftest.py), as a run keeps one (interpret mode, one spare)."""
    return warm_judge


def job(warm, tmp_path, code, timed=False, timeout_s=120.0, champion=BASE):
    """One job through the warm judge, with the flags tests/test_hostile.py gives the cold one."""
    judges, logs = warm
    spec = SPEC.to_checker()
    spec["check_shapes"] = [{"M": 37, "N": 45, "K": 29}] + ([] if timed else [{"M": 130, "N": 70, "K": 100}])
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    (tmp_path / "cand.py").write_text(code)
    (tmp_path / "champ.py").write_text(champion)
    argv = ["--spec", str(tmp_path / "spec.json"), "--candidate", str(tmp_path / "cand.py"),
            "--champion", str(tmp_path / "champ.py"), "--mode", "interpret", "--backend", "local"]
    argv += ["--host-clock", "--draws", "3", "--reps", "12", "--warmup", "2"] if timed else ["--draws", "2"]
    res, text, why = judges.job("cpu0", logs, argv, timeout_s)
    assert res is not None, why
    return res, text


@pytest.mark.parametrize("name", sorted(CHECKED))
def test_warm_judge_rejects_each_exploit_as_the_cold_judge_does(warm, tmp_path, name):
    """The same rejection, at the same stage, as tests/test_hostile.py asks of the cold judge."""
    make, expected, where = CHECKED[name]
    r, _ = job(warm, tmp_path, make(BASE), timed=where == "timed")
    assert r["ok"] is False and expected_in(expected, r["error"]), r["error"]
    if where == "timed":
        assert r["stage"] == "timing"


def test_a_forged_line_never_reaches_the_answers(warm, tmp_path):
    """The kernel prints a passing result line (and writes it to fds 1..10): the judge's answer
    for the job is its own, a failure; the forged text went to the judge's stderr."""
    r, text = job(warm, tmp_path, CASES["forges_result_line"][0](BASE))
    assert r["ok"] is False and r["job_id"]
    assert '"mean_ms": 0.001' in text


def test_warm_and_cold_give_the_same_verdicts(tmp_path):
    """LocalBackend both ways on the interpreter, with the A/B on the host clock: the passing
    baseline, a wrong kernel, a file that does not load."""
    spec = load_spec(ROOT / "specs" / "matmul.yaml")
    spec.check_shapes = [{"M": 37, "N": 45, "K": 29}]
    spec.timing = {"warmup": 1, "reps": 6}
    wrong = CASES["returns_zeros"][0](BASE)
    codes = {"base": BASE, "wrong": wrong, "broken": BASE.replace("def matmul(", "def matmul(((")}
    seen = {}
    for kind in ("cold", "warm"):
        b = LocalBackend(device="CPU (test)", mode="interpret-timed", judge=kind)
        try:
            for name, code in codes.items():
                (tmp_path / f"{name}.py").write_text(code)
                r = b.evaluate(spec, tmp_path / f"{name}.py", spec.baseline, tmp_path / kind / name)
                seen[kind, name] = (r["ok"], r["stage"], r["correct"], (r["error"] or "")[:40])
                assert r["backend_meta"].get("judge") == ("warm" if kind == "warm" else None)
        finally:
            b.close()
    for name in codes:
        assert seen["cold", name] == seen["warm", name], name
    assert seen["warm", "base"][:2] == (True, "done") and seen["warm", "wrong"][1] == "correctness"
    assert seen["warm", "broken"][1] == "load"


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_a_worker_that_dies_or_hangs_is_replaced_and_the_judge_goes_on(warm, tmp_path, name):
    make, _ = FAULTS[name]
    hang = name == "infinite_loop"
    r, text = job(warm, tmp_path, make(BASE), timeout_s=15 if hang else 120)
    if name == "huge_stdout":   # drained and capped: no file limit kills the worker, or the judge
        assert len(text) <= warmjudge.JOB_TAIL and len(json.dumps(r)) < 2_000_000
        assert (warm[1] / "judge-cpu0.log").stat().st_size < warmjudge.LOG_CAP + 4096
    else:
        assert r["ok"] is False
        assert "timed out: it did not answer within" in r["error"] if hang else "killed by SIGSEGV" in r["error"]
    judge_pid = r["judge"]["pid"]
    again, _ = job(warm, tmp_path, BASE)   # the next candidate: a fresh worker, the same judge
    assert again["ok"], again["error"]
    assert again["judge"]["pid"] == judge_pid
    assert again["workers"]["candidate"]["pid"] != r.get("workers", {}).get("candidate", {}).get("pid")


def test_a_killed_judge_fails_the_job_it_held_and_the_next_starts_a_new_one(tmp_path):
    judges = warmjudge.WarmJudges(["--mode", "interpret", "--spares", "1"], lambda slot: INTERPRET)
    try:
        (tmp_path / "a").mkdir()
        first, _ = job((judges, tmp_path), tmp_path / "a", BASE)
        pid = first["judge"]["pid"]
        # A candidate that never returns holds the judge; the judge is killed meanwhile.
        timer = subprocess.Popen([sys.executable, "-c", f"import os, time, signal; time.sleep(4); "
                                                        f"os.kill({pid}, signal.SIGKILL)"])
        (tmp_path / "b").mkdir()
        res, _, why = judges.job("cpu0", tmp_path, _argv(tmp_path / "b", FAULTS["infinite_loop"][0](BASE)), 120)
        timer.wait(30)
        assert res is None and "warm judge died (killed by SIGKILL)" in why, why
        (tmp_path / "c").mkdir()
        res, _, why = judges.job("cpu0", tmp_path, _argv(tmp_path / "c", BASE), 120)
        assert res is not None and res["ok"], why or res["error"]
        assert res["judge"]["pid"] != pid
        assert [s["why"] for s in judges.starts][-1].startswith("the previous judge died")
    finally:
        judges.close()


def _argv(d: Path, code: str) -> list[str]:
    spec = SPEC.to_checker()
    spec["check_shapes"] = [{"M": 37, "N": 45, "K": 29}]
    (d / "spec.json").write_text(json.dumps(spec))
    (d / "cand.py").write_text(code)
    return ["--spec", str(d / "spec.json"), "--candidate", str(d / "cand.py"), "--champion",
            str(SPEC.baseline), "--mode", "interpret", "--draws", "1", "--backend", "local"]


def test_a_worker_holds_one_kernel_for_its_whole_life(tmp_path):
    """worker.py refuses a load before its first arena (its late locks), a second arena (the
    locks are applied once; a kept worker's later arenas come by `remap`), a remap before its
    first arena and load, and a second `load` ever: a kept worker is only its own kernel's."""
    import hashlib

    import torch
    from checker import channel
    (tmp_path / "scratch").mkdir()
    w = channel.WorkerProc("candidate", str(tmp_path / "scratch"), {**os.environ, **INTERPRET},
                           ["--interpret"])
    arena = channel.Arena(torch, torch.device("cpu"), 1 << 16, folder=str(tmp_path))
    try:
        assert w.reply(120).get("ready")
        raw = SPEC.baseline.read_bytes()
        payload = {"source": raw, "sha256": hashlib.sha256(raw).hexdigest(),
                   "filename": "<kernloop-test>", "entry": "matmul"}
        assert "before this worker's arena" in w.call("load", payload, 120)["error"]
        assert "remap before" in w.call("remap", None, 120)["error"]
        assert w.call("arena", arena.handle(), 120).get("ok")
        assert "already mapped" in w.call("arena", arena.handle(), 120)["error"]
        r = w.call("load", payload, 120)
        assert r.get("ok"), r
        assert w.call("load", payload, 120).get("error") == "this worker already holds a kernel"
        assert w.call("remap", None, 120).get("ok")
    finally:
        w.kill()
        arena.unlink()


def _children(pid: int) -> set[int]:
    kids = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            kids |= {int(x) for x in open(f"/proc/{pid}/task/{tid}/children").read().split()}
        except OSError:
            pass
    return kids


def _below(pid: int) -> set[int]:
    """Every descendant: the judge's fork server and the workers forked from it."""
    below, todo = set(), [pid]
    while todo:
        kids = _children(todo.pop()) - below
        below |= kids
        todo += kids
    return below


def _alive(pid: int) -> bool:
    try:
        return "State:\tZ" not in open(f"/proc/{pid}/status").read()
    except FileNotFoundError:
        return False


class Saboteur:
    """The run's proposer: hands out the baseline's own code, and before some proposals kills
    what the warm judge keeps (its workers, the judge itself) from outside, as an OOM killer or
    a crash would. It reads the pids from the run's own log."""
    name, model = "saboteur", None

    def __init__(self, run_root: Path, plan: list[str]):
        self.root, self.plan = run_root, list(plan)
        self.killed: list[tuple[str, int]] = []

    def describe(self):
        return {"proposer": "saboteur", "model": None, "endpoint_host": None}

    def propose(self, ctx):
        act = self.plan.pop(0)
        (run,) = [d for d in self.root.iterdir() if d.is_dir() and not d.name.startswith(".")]
        last = [e for e in read_events(run / "run.jsonl") if (e.get("result") or {}).get("judge")][-1]
        judge = last["result"]["judge"]["pid"]
        if act == "workers":   # the champion's worker, the spares, the fork server they come from
            for pid in sorted(_below(judge)):
                os.kill(pid, signal.SIGKILL)
                self.killed.append(("worker", pid))
        elif act == "judge":
            os.kill(judge, signal.SIGKILL)
            self.killed.append(("judge", judge))
        time.sleep(0.5)
        return Proposal(code=BASE, note=f"baseline again ({act})", proposer="saboteur")


def test_killed_workers_and_a_killed_judge_are_replaced_and_the_run_goes_on(tmp_path, monkeypatch):
    """A whole run on the local backend's warm path (interpreter, A/B on the host clock):
    between iterations the champion's worker and the spares are killed, then the judge. Every
    iteration is still decided by a real verdict, each candidate in a process of its own."""
    spec_dir = tmp_path / "spec"
    spec_dir.mkdir()
    text = (ROOT / "specs" / "matmul.yaml").read_text()
    text = text.replace("timing: {warmup: 10, reps: 50}", "timing: {warmup: 1, reps: 6}")
    start, end = text.index("check_shapes:"), text.index("cost:")
    text = text[:start] + "check_shapes:\n  - {M: 37, N: 45, K: 29}\n" + text[end:]
    (spec_dir / "matmul.yaml").write_text(text)
    (spec_dir / "matmul_naive.py").write_text(BASE)
    out = tmp_path / "runs"
    backend = LocalBackend(device="CPU (test), warm judge", mode="interpret-timed")
    prop = Saboteur(out, ["none", "workers", "none", "judge", "none"])
    monkeypatch.setattr(orchestrator, "make_backend", lambda name, seed=0: (backend, "test: the warm judge"))
    monkeypatch.setattr(orchestrator, "make_proposer", lambda kind, spec, seed: (prop, "test"))
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        rc = orchestrator.main(["--spec", str(spec_dir / "matmul.yaml"), "--out", str(out),
                                "--iterations", "5", "--quiet"])
    finally:
        for sig, h in handlers.items():
            signal.signal(sig, h)
    assert rc == 0
    (run,) = [d for d in out.iterdir() if d.is_dir() and not d.name.startswith(".")]
    evs = read_events(run / "run.jsonl")
    its = [e for e in evs if e["event"] == "iteration"]
    assert len(its) == 5 and evs[-1]["event"] == "run_end" and evs[-1]["stopped"] == "budget"
    results = [e["result"] for e in evs if e["event"] in ("baseline", "iteration")]
    assert all(r["ok"] for r in results), [r.get("error") for r in results]
    assert [k for k, _ in prop.killed].count("worker") >= 2 and ("judge", results[3]["judge"]["pid"]) in prop.killed
    assert results[4]["judge"]["pid"] != results[3]["judge"]["pid"]   # a new judge after the kill
    assert results[4]["judge"]["job"] == 1   # the job found the judge dead and started on a new one
    champs = [r["workers"]["champion"]["pid"] for r in results]
    assert champs[2] != champs[1] and champs[1] == champs[0]   # kept, then replaced once killed
    # A candidate never shares a process with another kernel: a fresh pid every job, never a
    # champion's (the champion is the baseline throughout: the copies are not faster).
    cands = [r["workers"]["candidate"]["pid"] for r in results]
    assert len(set(cands)) == len(cands) and not set(cands) & set(champs)
    assert not _alive(results[-1]["judge"]["pid"])   # the run closed its judge


def test_the_second_look_lands_after_the_decision(tmp_path):
    """LocalBackend's warm path: the verdict comes back without a profile; the second look asked
    afterwards runs on the kept worker once the judge is idle, and is handed back as landed."""
    spec = load_spec(ROOT / "specs" / "matmul.yaml")
    spec.check_shapes = [{"M": 37, "N": 45, "K": 29}]
    spec.timing = {"warmup": 1, "reps": 6}
    b = LocalBackend(device="CPU (test)", mode="interpret-timed")
    try:
        r = b.evaluate(spec, spec.baseline, spec.baseline, tmp_path / "jobs" / "it0001")
        assert r["ok"] and "profile" not in r and "sight" not in r.get("phase_s", {})
        assert b.second_look(spec, spec.baseline, "it0001", tmp_path / "jobs" / "it0001-sight", r)
        end = time.monotonic() + 300
        got = []
        while not got and time.monotonic() < end:
            got = b.landed()
            time.sleep(0.2)
        (s,) = got
        assert s["candidate_id"] == "it0001" and s["status"] == "landed", s
        assert s["result"]["ok"] and "candidate" in s["result"]["profile"] and s["result"]["sight_s"] > 0
        assert s["result"]["workers"]["champion"]["pid"] == r["workers"]["champion"]["pid"]
    finally:
        b.close()


def test_second_looks_not_taken_are_said_dropped(tmp_path):
    """A second look still waiting when the judge ends (or replaced by a newer one) comes back
    `dropped` with the reason, so the log can say why a promoted card has no profile."""
    spec = load_spec(ROOT / "specs" / "matmul.yaml")
    spec.check_shapes = [{"M": 37, "N": 45, "K": 29}]
    # never idle long enough for a look: a loaded CPU can take a second between the job and close()
    b = LocalBackend(device="CPU (test)", mode="interpret", judge_args=("--sight-idle-s", "600"))
    r = b.evaluate(spec, spec.baseline, spec.baseline, tmp_path / "jobs" / "it0001")
    assert r["ok"]
    for cid in ("it0001", "it0002"):
        assert b.second_look(spec, spec.baseline, cid, tmp_path / "jobs" / f"{cid}-sight", r)
    b.close()   # both looks still wait
    got = {s["candidate_id"]: s for s in b.landed()}
    assert got["it0001"]["status"] == "dropped" and "superseded" in got["it0001"]["result"]["error"]
    assert got["it0002"]["status"] == "dropped" and "run ended" in got["it0002"]["result"]["error"]


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "soon"])
def test_the_judge_refuses_an_idle_wait_that_is_not_seconds(value):
    p = subprocess.run([sys.executable, "-m", "checker.serve", "--sight-idle-s", value],
                       capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, cwd=ROOT)
    assert p.returncode == 2 and f"{value!r} is not a number of seconds, 0 or more" in p.stderr, p.stderr


def test_nothing_outlives_a_killed_loop(tmp_path):
    """kill -9 of the process that started a warm judge: the judge reads EOF and ends, and its
    workers die with it."""
    marker = tmp_path / "pids.json"
    script = tmp_path / "loop.py"
    script.write_text(
        "import json, sys, time\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from pathlib import Path\nfrom kernloop.backends.local import LocalBackend\nfrom kernloop.spec import load_spec\n"
        f"spec = load_spec({str(ROOT / 'specs' / 'matmul.yaml')!r})\n"
        "spec.check_shapes = [{'M': 37, 'N': 45, 'K': 29}]\n"
        "b = LocalBackend(device='CPU', mode='interpret')\n"
        f"r = b.evaluate(spec, spec.baseline, spec.baseline, Path({str(tmp_path)!r}) / 'jobs' / 'j1')\n"
        f"open({str(marker)!r}, 'w').write(json.dumps(r['judge']['pid']))\n"
        "time.sleep(600)\n")
    p = subprocess.Popen([sys.executable, str(script)])
    end = time.monotonic() + 300
    while not (marker.exists() and marker.read_text()) and time.monotonic() < end:
        time.sleep(0.2)
    judge = json.loads(marker.read_text())
    kids = _below(judge)
    assert _alive(judge) and kids
    p.kill()
    p.wait()
    end = time.monotonic() + 30
    while any(_alive(x) for x in (judge, *kids)) and time.monotonic() < end:
        time.sleep(0.2)
    assert not any(_alive(x) for x in (judge, *kids))


def test_the_baselines_second_look_is_reused_by_a_later_run_with_the_same_key(tmp_path):
    """--sight-cache: the first run measures peers and profile and keeps them; a second run of
    the same spec, baseline, device, versions and code reuses them, labelled with when they were
    made; a changed baseline file is another key."""
    spec = SPEC.to_checker()
    spec["check_shapes"] = [{"M": 37, "N": 45, "K": 29}]
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    cache = tmp_path / "cache"

    def run(kernel: str) -> dict:
        (tmp_path / "k.py").write_text(kernel)
        p = subprocess.run([sys.executable, "-m", "checker.judge", "--spec", str(tmp_path / "spec.json"),
                            "--candidate", str(tmp_path / "k.py"), "--champion", str(tmp_path / "k.py"),
                            "--mode", "interpret", "--host-clock", "--peers", "--profile-kernel",
                            "--sight-cache", str(cache), "--draws", "1", "--reps", "3", "--warmup", "1",
                            "--min-warm-ms", "0"], capture_output=True, text=True, timeout=600, cwd=ROOT)
        line = p.stdout[p.stdout.index("{"):]
        return json.loads(line)
    first = run(BASE)
    assert first["ok"] and first["sight_cache"]["hit"] is False and first["sight_cache"]["written"]
    second = run(BASE)
    assert second["ok"] and second["sight_cache"]["hit"] is True
    assert second["sight_cache"]["key"] == first["sight_cache"]["key"]
    assert second["peers"]["peers"] == first["peers"]["peers"] and second["peers"]["cached"]["made_at"]
    # a changed baseline file is another key (the key's rule, without a third judge run)
    import types
    import torch
    from checker import sight
    args = types.SimpleNamespace(candidate_torch=False, flush="read", settle_cycles=0, warmup=1, reps=3,
                                 min_warm_ms=0, mode="interpret")
    key = lambda text: sight.cache_key(torch, spec, types.SimpleNamespace(**vars(args), sources={  # noqa: E731
        "candidate": ("k.py", text)}), {"device": "cpu", "versions": {}})
    edited = BASE.replace("A naive Triton matmul", "A naive Triton matmul (edited)")
    assert edited != BASE and key(BASE) == key(BASE) and key(edited) != key(BASE)


def test_a_candidate_is_kept_for_the_next_job_only_when_it_may_be_promoted(tmp_path):
    from checker import pool
    stats = lambda m, med: {"mean_ms": m, "median_ms": med}   # noqa: E731
    win = {"ok": True, "candidate": stats(0.90, 0.91), "champion": stats(1.0, 1.0)}
    assert pool.may_be_promoted(win, 0.02)
    assert not pool.may_be_promoted({**win, "ok": False}, 0.02)
    assert not pool.may_be_promoted({**win, "candidate": stats(0.90, 0.99)}, 0.02)   # the median too
    assert not pool.may_be_promoted({**win, "candidate": stats(0.99, 0.90)}, 0.02)
    assert not pool.may_be_promoted({**win, "candidate": None}, 0.02)
    spec = SPEC.to_checker()
    (tmp_path / "a.py").write_text(BASE)
    (tmp_path / "b.py").write_text(BASE)
    (tmp_path / "c.py").write_text(BASE + "\n")
    import hashlib
    import types

    def key(name):   # as the judge read the file once: its judged bytes and their sha256
        raw = (tmp_path / name).read_bytes()
        args = types.SimpleNamespace(candidate_torch=False,
                                     sources={"candidate": (raw, hashlib.sha256(raw).hexdigest())})
        return pool.kernel_key(args, "candidate", spec)
    keys = [key(n) for n in ("a.py", "b.py", "c.py")]
    assert keys[0] == keys[1] != keys[2]   # the bytes, not the path
    assert pool.kernel_key(types.SimpleNamespace(champion_torch=True), "champion", spec).startswith("torch:")


def test_who_failed_is_the_judges_evidence_never_the_words_of_an_error(warm, tmp_path):
    """A candidate whose error says "champion" leaves the kept champion's worker alone (the pool
    once read the error's text); a champion that itself fails is replaced."""
    liar = BASE + ("\n\ndef matmul(a, b):\n"
                   "    raise RuntimeError('champion worker died: harness failure in the champion')\n")
    pools = []
    for name, code, champion in (("first", BASE, BASE), ("liar", liar, BASE), ("after", BASE, BASE),
                                 ("broken", BASE, liar)):
        (tmp_path / name).mkdir()
        res, _ = job(warm, tmp_path / name, code, timed=True, champion=champion)
        pools.append((res, dict(res["judge"]["pool"])))
    (first, p0), (lied, p1), (after, p2), (broken, p3) = pools
    assert first["ok"] and after["ok"]
    assert not lied["ok"] and "champion worker died" in lied["error"] and lied["fault"] == "candidate"
    assert p1["replaced"] == p0["replaced"] and p2["champion_kept"] == p1["champion_kept"] + 1
    assert not broken["ok"] and broken["fault"] == "champion" and broken["stage"] == "harness"
    assert p3["replaced"] == p2["replaced"] + 1   # the failed champion's worker is not kept


def test_a_kept_champion_that_turns_wrong_once_it_knows_it_is_kept_is_caught_every_job(warm, tmp_path):
    """A kernel can tell it is the warm judge's kept champion (its worker lives across jobs: a
    call counter in the process passes what one job's calls reach) and then cut its work to half
    of K, faster and wrong, with no torch op to see. The judge checks the champion's output of
    every timed call, so the job fails on the champion's side (fault: champion), the worker is
    replaced, and no verdict rests on the lie."""
    sly = BASE.replace("CONFIG = dict(", "_N = [0]\nCONFIG = dict(", 1).replace(
        "    cfg = CONFIG\n", "    cfg = CONFIG\n    _N[0] += 1\n    K = K // 2 if _N[0] > 30 else K\n", 1)
    assert sly.count("_N[0] += 1") == 1
    seen = []
    for i in range(5):
        (tmp_path / str(i)).mkdir()
        res, _ = job(warm, tmp_path / str(i), BASE, timed=True, champion=sly)
        seen.append((res, dict(res["judge"]["pool"])))
    failed = [(i, r) for i, (r, _) in enumerate(seen) if not r["ok"]]
    assert failed, "the kept champion never crossed its count: raise the number of jobs"
    for i, r in failed:
        assert r["fault"] == "champion" and r["stage"] == "harness", r["error"]
        assert "champion's output of timed call" in r["error"] and r["correct"] is False
        if i + 1 < len(seen):   # its worker was replaced: the next job's champion is a fresh one
            assert seen[i + 1][1]["champion_fresh"] == seen[i][1]["champion_fresh"] + 1
    assert all(r["ok"] for r, _ in seen if r not in [f for _, f in failed])
