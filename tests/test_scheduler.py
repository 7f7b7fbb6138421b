"""Many candidates in flight: the pure rules of scheduler.Flight, and the driver end to end on
its two real thread pools with the orchestrator's own state, proposal and contract code. The
backend here is scripted data (each candidate's speed, and which decisions it waits for), so
the order jobs finish in is fixed by the test, not by the machine's load."""
from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import pytest

from kernloop.loop.iteration import candidate_event, proposal_context
from kernloop.loop.state import State
from kernloop.loop import scheduler
from kernloop.backends.local import Backend, SYNTHETIC_DEVICE
from kernloop.spec import load_spec
from tests.scripted_proposer import Scripted
from kernloop.propose.tuner import replace_config

ROOT = Path(__file__).resolve().parent.parent
SPEC = load_spec(ROOT / "specs" / "matmul.yaml")
BASE = (ROOT / "specs" / "matmul_naive.py").read_text()
CFG = dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=1, num_warps=4, num_stages=2)


def kernel(i: int) -> str:
    """A distinct, contract-clean candidate (its CONFIG differs)."""
    cfg = dict(CFG, BLOCK_M=[32, 64, 128, 256][i % 4], BLOCK_N=[32, 64, 128, 256][i // 4 % 4],
               GROUP_M=[1, 4, 8, 16][i // 16 % 4])
    return replace_config(BASE, cfg)


class ScriptedBackend(Backend):
    """Times nothing: a candidate's mean is speed[its id] (baseline 1.0). waits[cid] names the
    candidate (or tuple of them) whose decision must be logged before this one's job returns; crash names ids
    whose job raises (a worker that crashes)."""
    name, synthetic, device = "scripted", True, SYNTHETIC_DEVICE

    def __init__(self, speed, waits=None, crash=(), workers=2):
        self.speed, self.crash, self.workers = speed, set(crash), workers
        self.waits = {c: (w,) if isinstance(w, str) else w for c, w in (waits or {}).items()}
        self.decided: dict[str, threading.Event] = {}
        self.jobs: list[tuple] = []
        self.lock = threading.Lock()

    def slots(self, parallel):
        return [f"w{i}" for i in range(self.workers)]

    def event(self, cid):
        with self.lock:
            return self.decided.setdefault(cid, threading.Event())

    def evaluate(self, spec, candidate, champion, workdir, slot=None):
        return self.evaluate_batch(spec, [(Path(candidate).stem, candidate)], champion, workdir, slot)[0]

    def evaluate_batch(self, spec, candidates, champion, workdir, slot=None):
        champ = Path(champion).stem
        with self.lock:
            self.jobs.append(([c for c, _ in candidates], champ, slot))
        out = []
        # like a judge, it reports the hash of the bytes it read (decision.same_bytes holds it)
        sha = lambda f: hashlib.sha256(Path(f).read_bytes()).hexdigest()  # noqa: E731
        for cid, path in candidates:
            for other in self.waits.get(cid, ()):
                assert self.event(other).wait(30), f"{cid} waited in vain for {other}"
            if cid in self.crash:
                raise RuntimeError(f"worker died on {cid}")
            stat = lambda m: {"mean_ms": m, "std_ms": 0.001, "n": 50}  # noqa: E731
            out.append({"ok": True, "correct": True, "stage": "done", "rel_l2": {},
                        "candidate": stat(self.speed.get(cid, 1.0)),
                        "champion": stat(self.speed.get(champ, 1.0)), "backend": self.name,
                        "source_sha256": {"candidate": sha(path), "champion": sha(champion)}})
        return out


class Counting(Scripted):
    """Scripted answers; notes how many candidates were in flight as each proposal starts."""
    def __init__(self, items, logged):
        super().__init__(items)
        self.logged, self.started, self.flight, self.lock = logged, 0, [], threading.Lock()

    def propose(self, ctx):
        with self.lock:
            self.started += 1
            self.flight.append(self.started - len(self.logged))
        return super().propose(ctx)


def drive(tmp_path, backend, n, parallel, batch=1, budget=None, research_after=None,
          with_flight=False):
    """Run the driver with the orchestrator's State and event code; returns (events, research)."""
    run_dir = tmp_path / "run"
    (run_dir / "candidates").mkdir(parents=True)
    (run_dir / "baseline.py").write_text(BASE)
    st = State()
    st.baseline_done, st.champion_profile = True, {"mean_ms": 1.0}
    logged, research = [], []
    budget = n if budget is None else budget

    def record(ev, fatal):
        ev["champion_id"] = ev["candidate_id"] if ev["decision"]["promoted"] else st.champion_id
        logged.append(ev)
        st.apply(ev, None)
        backend.event(ev["candidate_id"]).set()
        if research_after and st.streak and st.streak % research_after == 0:
            research.append((len(logged), [e["candidate_id"] for e in logged]))

    class Stand(scheduler.Hooks):   # the run around the loop: this test's state and log
        def context(self, i):
            return proposal_context(i, st, SPEC, run_dir)

        def prepare(self, i, ctx, prop, t0):
            return candidate_event(i, ctx, prop, SPEC, run_dir, t0)

        def record(self, ev, fatal):
            record(ev, fatal)

        def stop(self):
            return "budget" if len(st.seen) >= budget else None

        def seen(self):
            return st.seen

        def champion(self):
            return st.champion_id, st.champion_file, None

    hooks = Stand()
    fl = scheduler.Flight(parallel, batch, backend.slots(parallel))
    proposer = Counting([kernel(i) for i in range(n)], logged)
    scheduler.Driver(fl, hooks, proposer, False, backend, SPEC, run_dir, budget, 0.02, 2.0).run()
    return (logged, research, proposer.flight) if with_flight else (logged, research)


def ids(evs):
    return [e["candidate_id"] for e in evs]


# ---------------------------------------------------------------- pure rules

def test_flight_starts_a_batch_when_full_or_when_it_can_no_longer_fill():
    fl = scheduler.Flight(k=8, batch=4, slots=["j0", "j1"])
    fl.queue = [scheduler.Cand(i, {"candidate_id": f"it{i:04d}"}, Path("x"), 0.0) for i in (1, 2, 3)]
    fl.proposing = {4: 0.0}
    assert fl.next_job(decided=0, budget=24, champion_id="baseline", champion_file="b.py", now=0) is None
    fl.proposing = {}   # nothing more will come: budget 3
    job = fl.next_job(decided=0, budget=3, champion_id="baseline", champion_file="b.py", now=0)
    assert [c.n for c in job.cands] == [1, 2, 3] and job.slot == "j0" and job.id == "batch0001"


def test_flight_bounds_in_flight_by_k_and_budget_and_retimes_first():
    fl = scheduler.Flight(k=3, batch=1, slots=["w0"], missing=[2, 5], next_n=7)
    assert fl.room(decided=0, budget=10) == 3 and fl.room(decided=9, budget=10) == 1
    assert [fl.take_number() for _ in range(3)] == [2, 5, 7]   # resumed: in-flight ones first
    c1, c2 = (scheduler.Cand(i, {"candidate_id": f"it{i:04d}"}, Path("x"), 0.0) for i in (1, 2))
    fl.queue, fl.retime = [c1], [c2]
    c2.retimes = 1
    job = fl.next_job(0, 10, "it0001", "c.py", 0)
    assert job.cands == [c2] and job.retime and job.id == "it0002-r1"
    assert fl.next_job(0, 10, "it0001", "c.py", 0) is None   # the one worker is busy
    fl.finish_job(job)
    assert fl.next_job(0, 10, "it0001", "c.py", 0).cands == [c1]


def test_missing_numbers_are_the_gaps_below_the_highest_decided():
    assert scheduler.missing_numbers({1, 2, 4, 7}) == ([3, 5, 6], 8)
    assert scheduler.missing_numbers(set()) == ([], 1)


# ---------------------------------------------------------------- the driver

def test_decisions_follow_the_order_jobs_finish(tmp_path):
    # it0001's job returns only after it0002 is decided: it0002 is logged first.
    backend = ScriptedBackend({"it0001": 1.5, "it0002": 1.4}, waits={"it0001": "it0002"})
    evs, _ = drive(tmp_path, backend, n=2, parallel=2)
    assert ids(evs) == ["it0002", "it0001"]
    assert all(e["decision"]["verdict"] == "rejected" for e in evs)


def test_a_winner_whose_champion_was_replaced_is_retimed_against_the_new_one(tmp_path):
    # Both beat the baseline; it0002 is decided first and promoted, so it0001 (timed against the
    # baseline) must be timed again against it0002 before it may be promoted.
    backend = ScriptedBackend({"it0001": 0.5, "it0002": 0.8}, waits={"it0001": "it0002"})
    evs, _ = drive(tmp_path, backend, n=2, parallel=2)
    assert ids(evs) == ["it0002", "it0001"]
    first, second = evs
    assert first["decision"]["promoted"] and first["evaluated_against"] == "baseline"
    assert second["decision"]["promoted"] and second["champion_id"] == "it0001"
    assert [(e["job"], e["against"]) for e in second["evaluations"]] == [
        ("it0001", "baseline"), ("it0001-r1", "it0002")]
    assert "replaced (baseline -> it0002)" in second["evaluations"][1]["why"]
    assert (["it0001"], "it0002", "w0") in backend.jobs or (["it0001"], "it0002", "w1") in backend.jobs


def test_a_retimed_candidate_that_loses_to_the_new_champion_is_rejected(tmp_path):
    backend = ScriptedBackend({"it0001": 0.8, "it0002": 0.5}, waits={"it0001": "it0002"})
    evs, _ = drive(tmp_path, backend, n=2, parallel=2)
    second = evs[1]
    assert second["candidate_id"] == "it0001" and second["decision"]["verdict"] == "rejected"
    assert second["evaluations"][0]["verdict"] == "promoted"   # it did beat the old champion
    assert second["champion_id"] == "it0002"


def test_batch_winners_are_confirmed_alone_best_first(tmp_path):
    # One batch of 4: three beat the baseline. The best (it0003) is re-timed alone first and
    # promoted (confirmed); the next ones are then re-timed, one at a time, against it: both lose.
    speed = {"it0001": 0.9, "it0002": 0.6, "it0003": 0.5, "it0004": 1.1}
    backend = ScriptedBackend(speed, workers=1)
    evs, _ = drive(tmp_path, backend, n=4, parallel=4, batch=4)
    assert backend.jobs[0] == (["it0001", "it0002", "it0003", "it0004"], "baseline", "w0")
    assert [j[:2] for j in backend.jobs[1:]] == [(["it0003"], "baseline"), (["it0002"], "it0003"),
                                                (["it0001"], "it0003")]
    by = {e["candidate_id"]: e for e in evs}
    assert ids(evs) == ["it0004", "it0003", "it0002", "it0001"]
    assert by["it0004"]["confirmed"] is None and by["it0004"]["decision"]["verdict"] == "rejected"
    assert by["it0003"]["confirmed"] is True and by["it0003"]["decision"]["promoted"]
    for cid in ("it0002", "it0001"):
        assert by[cid]["confirmed"] is False and "did not confirm" in by[cid]["decision"]["reason"]
        assert by[cid]["evaluations"][1]["against"] == "it0003"
    assert by["it0003"]["evaluations"][0]["batch_size"] == 4


def test_a_batch_winner_that_fails_its_confirmation_is_not_promoted(tmp_path):
    class Lucky(ScriptedBackend):   # wins inside the batch, loses when timed alone
        def evaluate_batch(self, spec, candidates, champion, workdir, slot=None):
            out = super().evaluate_batch(spec, candidates, champion, workdir, slot)
            if len(candidates) == 1:
                out[0]["candidate"]["mean_ms"] = 1.0
            return out
    evs, _ = drive(tmp_path, Lucky({"it0001": 0.9}, workers=1), n=2, parallel=2, batch=2)
    first = next(e for e in evs if e["candidate_id"] == "it0001")
    assert first["confirmed"] is False and not first["decision"]["promoted"]
    assert first["evaluations"][0]["verdict"] == "promoted" and first["champion_id"] == "baseline"


def test_a_worker_that_crashes_fails_its_candidate_and_the_loop_goes_on(tmp_path):
    backend = ScriptedBackend({"it0002": 0.5}, crash={"it0001"})
    evs, _ = drive(tmp_path, backend, n=3, parallel=2)
    by = {e["candidate_id"]: e for e in evs}
    assert sorted(by) == ["it0001", "it0002", "it0003"]
    assert by["it0001"]["decision"]["verdict"] == "failed"
    assert "evaluation worker crashed in job it0001: RuntimeError: worker died on it0001" \
        in by["it0001"]["decision"]["reason"]
    assert by["it0002"]["decision"]["promoted"]


def test_the_rejection_streak_counts_in_decided_order(tmp_path):
    # it0001 finishes last (it waits for both others: under load it0002's job may start after
    # it0003's ends); the streak of 3 closes on the third DECIDED rejection.
    backend = ScriptedBackend({}, waits={"it0001": ("it0002", "it0003")}, workers=3)
    evs, research = drive(tmp_path, backend, n=3, parallel=3, research_after=3)
    assert ids(evs)[-1] == "it0001"
    assert research == [(3, ids(evs))]


@pytest.mark.parametrize("parallel", [1, 3])
def test_never_more_in_flight_than_k(tmp_path, parallel):
    backend = ScriptedBackend({}, workers=2)
    evs, _, flight = drive(tmp_path, backend, n=7, parallel=parallel, with_flight=True)
    assert sorted(e["iteration"] for e in evs) == list(range(1, 8))
    # in flight when each proposal started = proposals started so far - decided so far
    assert max(flight) <= parallel and (parallel == 1 or max(flight) > 1)


def test_the_page_marks_confirmed_unconfirmed_and_retimed_candidates(tmp_path):
    from kernloop import page
    from kernloop.trajectory import RunLog
    speed = {"it0001": 0.9, "it0002": 0.6, "it0003": 0.5, "it0004": 1.1}
    evs, _ = drive(tmp_path, ScriptedBackend(speed, workers=1), n=4, parallel=4, batch=4)
    run_dir = tmp_path / "run"
    log = RunLog(run_dir / "run.jsonl", "test-run", "scripted", True)
    log.append("run_start", spec={"name": "matmul"}, parallel=4, batch=4)
    for ev in evs:
        log.append("iteration", **ev)
    html = page.render_run(run_dir).read_text()
    assert html.count(">confirmed<") == 1 * 2 and html.count(">not confirmed<") == 2 * 2   # table + card
    assert "re-timed x1" in html
