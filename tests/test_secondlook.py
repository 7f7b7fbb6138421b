"""The loop's half of the second look (loop/secondlook.py): asked only for a promotion and only of a
backend that takes it after the decision; one `sight` event per answer, after the iteration it
belongs to; a landed profile joins the champion's standing (what the prompt reads) and a resumed
run rebuilds the same; the page shows it on the promoted card, and says why when it was dropped.
The backend here is a stand-in that overrides the base Backend's second look (the real one: tests/
test_warm_judge.py)."""
from pathlib import Path

from kernloop.backends.local import Backend
from kernloop.loop import secondlook
from kernloop.loop.state import State
from kernloop.view import pageview
from kernloop.spec import load_spec
from kernloop.trajectory import RunLog, read_events

ROOT = Path(__file__).resolve().parent.parent
SPEC = load_spec(ROOT / "specs" / "matmul.yaml")
PROFILE = {"candidate": {"kernels": [{"name": "_matmul_kernel", "regs_per_thread": 128, "spills": 0,
                                      "shared_bytes": 49152, "num_warps": 8, "threads_per_block": 256,
                                      "grid": [256, 1, 1]}],
                         "launch": {"host_us": 12.0, "b2b_ms": 0.3}, "verdict": None,
                         "ncu": {"ok": False, "skipped": True, "error": "ncu is not on PATH"}}}


class After(Backend):
    """A backend that takes the second look after the decision and answers when told."""
    sight_after = True

    def __init__(self):
        self.asked, self.answers = [], []

    def second_look(self, spec, path, candidate_id, workdir, result):
        self.asked.append((candidate_id, Path(path).name, Path(workdir).name))
        return True

    def landed(self):
        out, self.answers = self.answers, []
        return out


def promoted_event(n: int, mean: float) -> dict:
    res = {"ok": True, "correct": True, "candidate": {"mean_ms": mean, "median_ms": mean, "std_ms": 0.001, "n": 50},
           "champion": {"mean_ms": 1.0, "median_ms": 1.0, "std_ms": 0.001, "n": 50}, "rel_l2": {},
           "roofline": None, "device": "NVIDIA H200", "backend": "local", "synthetic": False}
    return {"iteration": n, "candidate_id": f"it{n:04d}", "candidate_file": f"candidates/it{n:04d}.py",
            "parent_id": "baseline", "proposer": "tuner", "model": None, "note": "n", "proposal": {},
            "contract": {"ok": True, "reasons": []}, "result": res,
            "decision": {"verdict": "promoted", "promoted": True, "reason": "faster", "rule": None},
            "champion_id": f"it{n:04d}", "champion_mean_ms": mean, "speedup_vs_baseline": 1.0 / mean}


def test_asked_only_for_a_promotion_of_a_backend_that_looks_after(tmp_path):
    b = After()
    ev = promoted_event(3, 0.5)
    assert secondlook.ask(b, SPEC, ev, tmp_path)
    assert b.asked == [("it0003", "it0003.py", "it0003-sight")]
    rejected = {**ev, "decision": {**ev["decision"], "promoted": False, "verdict": "rejected"}}
    assert not secondlook.ask(b, SPEC, rejected, tmp_path)

    class Inside(Backend):   # the cold path and the synthetic backend: no second look after the decision
        pass
    assert not secondlook.ask(Inside(), SPEC, ev, tmp_path) and len(b.asked) == 1
    assert secondlook.join(Inside(), None, None) == []   # the base lands nothing: nothing logged


def test_a_landed_look_is_logged_after_its_iteration_and_joins_the_standing(tmp_path):
    log = RunLog(tmp_path / "run.jsonl", "r", "local", False)
    st = State(cost={"read": 1, "write": 1})
    ev = promoted_event(1, 0.5)
    log.append("iteration", **ev)
    st.apply(ev, None)
    st.stand(ev["result"])
    assert st.standing["profile"] is None
    b = After()
    b.answers = [{"candidate_id": "it0001", "status": "landed",
                  "result": {"ok": True, "kind": "sight", "profile": PROFILE, "sight_s": 1.2}}]
    (sight,) = secondlook.join(b, log, st)
    assert sight["event"] == "sight" and sight["after_iteration"] == 1 and sight["status"] == "landed"
    assert sight["candidate_file"] == "candidates/it0001.py" and sight["reason"] is None
    assert st.standing["profile"] == PROFILE["candidate"]   # what the next prompt reads
    assert [e["event"] for e in read_events(tmp_path / "run.jsonl")] == ["iteration", "sight"]
    # --resume rebuilds the same standing from the log
    again = State(cost={"read": 1, "write": 1})
    again.replay(read_events(tmp_path / "run.jsonl"), None)
    assert again.standing["profile"] == PROFILE["candidate"]


def test_a_look_at_a_champion_since_replaced_is_logged_but_not_joined(tmp_path):
    log = RunLog(tmp_path / "run.jsonl", "r", "local", False)
    st = State()
    for n, mean in ((1, 0.5), (2, 0.4)):
        ev = promoted_event(n, mean)
        log.append("iteration", **ev)
        st.apply(ev, None)
        st.stand(ev["result"])
    b = After()
    b.answers = [{"candidate_id": "it0001", "status": "landed", "result": {"ok": True, "profile": PROFILE}},
                 {"candidate_id": "it0002", "status": "dropped",
                  "result": {"ok": False, "error": "the run ended before the GPU was free for it"}}]
    evs = secondlook.join(b, log, st)
    assert [e["status"] for e in evs] == ["landed", "dropped"]
    assert evs[1]["reason"] == "the run ended before the GPU was free for it"
    assert st.champion_id == "it0002" and st.standing["profile"] is None


def test_the_page_shows_a_landed_look_on_its_card_and_why_a_dropped_one_is_missing(tmp_path):
    log = RunLog(tmp_path / "run.jsonl", "r", "local", False)
    st = State()
    for n, mean in ((1, 0.5), (2, 0.4)):
        log.append("iteration", **promoted_event(n, mean))
        st.apply(promoted_event(n, mean), None)
    b = After()
    b.answers = [{"candidate_id": "it0001", "status": "landed", "result": {"ok": True, "profile": PROFILE}},
                 {"candidate_id": "it0002", "status": "dropped",
                  "result": {"ok": False, "error": "superseded: another kernel was promoted"}}]
    secondlook.join(b, log, st)
    view = pageview.build_view(tmp_path)
    cards = {it["cid"]: it for it in view["iters"]}
    assert any("_matmul_kernel" in t and "128 registers" in t for t in cards["it0001"]["profile_lines"])
    assert cards["it0002"]["profile_lines"][-1].startswith("Second look not taken: superseded")
    assert not any("unknown" in w for w in view.get("warnings", []))
