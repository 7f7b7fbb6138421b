"""kernloop/loop/tree.py: the search tree's pure rules (parent selection by UCB1, repairs, chained times)."""

import pytest

from benchmarks.tree_vs_chain import scripted_world
from kernloop.loop import tree as T
from kernloop.settings import LOOP_DEFAULTS


def grow(*nodes):
    t = T.rooted()
    for n in nodes:
        t = T.add(t, n)
    return t


def node(nid, parent, time, verdict="rejected", **kw):
    dead = verdict in T.DEAD_VERDICTS
    return T.Node(nid, parent, verdict, None if dead else time, dead, f"candidates/{nid}.py",
                  error="wrong output" if dead else None, **kw)


def test_chained_time_multiplies_the_judges_ratio_by_the_champions_time():
    res = {"candidate": {"mean_ms": 1.5}, "champion": {"mean_ms": 2.0}}
    assert T.chained_time(res, 0.8) == 0.8 * 0.75
    assert T.chained_time({"ok": False}, 0.8) is None
    assert T.chained_time(res, None) is None


def test_it_exploits_the_fastest_lineage_when_exploration_is_off():
    t = grow(node("a", "baseline", 0.9), node("b", "baseline", 0.7), node("c", "a", 0.95))
    assert T.select(t, c=0.0).parent == "b"


def test_it_explores_a_young_slower_node_once_the_fastest_has_children():
    # the baseline (1.0) has 4 children; a 10%-slower leaf has none: the default knob tries it
    t = grow(*(node(f"d{i}", "baseline", None, verdict="incorrect") for i in range(3)),
             node("slow", "baseline", 1.1))
    ch = T.select(t)
    assert ch.parent == "slow"
    assert "UCB1" in ch.reason and "exploration" in ch.reason
    # the same tree with no exploration goes back to the fastest node
    assert T.select(t, c=0.0).parent == "baseline"


def test_dead_lineages_are_never_chosen():
    t = grow(node("bad", "baseline", 0.1, verdict="incorrect"), node("worse", "baseline", None, verdict="failed"))
    for c in (0.0, 0.3, 10.0):
        for seed in range(5):
            assert T.select(t, c=c, seed=seed).parent == "baseline"


def test_k_parents_in_flight_are_distinct_where_the_tree_offers_them():
    t = grow(node("a", "baseline", 0.9), node("b", "baseline", 0.95), node("x", "a", None, verdict="failed"))
    pending: list[str] = []
    for _ in range(3):
        pending.append(T.select(t, pending).parent)
    assert sorted(pending) == ["a", "b", "baseline"]
    # a fourth slot: every live node is busy, so one of them gets a second child
    assert T.select(t, pending).parent in {"a", "b", "baseline"}


def test_selection_is_deterministic_given_a_seed_and_ties_follow_the_seed():
    t = grow(node("a", "baseline", 1.0), node("b", "baseline", 1.0))
    picks = {seed: T.select(t, seed=seed).parent for seed in range(16)}
    assert picks == {seed: T.select(t, seed=seed).parent for seed in range(16)}
    assert len(set(picks.values())) == 2   # the tie between a and b goes either way by seed


def test_chain_search_always_extends_the_champion():
    t = grow(node("a", "baseline", 0.5))
    assert T.choose(t, "chain", champion="baseline").parent == "baseline"


def test_a_failed_idea_goes_back_to_its_parent_at_most_r_times():
    r = 2
    t = grow(node("a", "baseline", 0.9), node("x", "a", None, verdict="incorrect"))
    ch = T.choose(t, repairs=r)
    assert ch.parent == "a" and ch.repair.id == "x" and ch.reason.startswith("repair 1/2 of x")
    assert T.choose(t, repairs=r, pending_repairs={"x"}).repair is None   # one repair in flight
    t = T.add(t, node("x1", "a", None, verdict="failed", repair_of="x", attempt=1))
    ch = T.choose(t, repairs=r)
    assert ch.repair.id == "x1" and ch.reason.startswith("repair 2/2 of x")
    t = T.add(t, node("x2", "a", None, verdict="invalid", repair_of="x", attempt=2))
    assert T.choose(t, repairs=r).repair is None   # the idea is dead: the tree picks again
    assert T.choose(t, repairs=0).repair is None


def test_a_repair_that_works_ends_the_idea_s_repairs():
    t = grow(node("x", "baseline", None, verdict="incorrect"), node("x1", "baseline", 0.8, repair_of="x", attempt=1))
    assert T.repair_due(t, 2) is None


def test_a_log_from_before_the_tree_reads_as_a_chain():
    t = T.rooted()
    ev = {"candidate_id": "it0001", "candidate_file": "candidates/it0001.py", "parent_id": "baseline",
          "decision": {"verdict": "promoted"}, "result": {"candidate": {"mean_ms": 1.0}, "champion": {"mean_ms": 2.0}}}
    n = T.node_of(ev, t)
    assert n.time == 0.5 and n.parent == "baseline" and not n.dead
    t = T.add(t, n)
    ev2 = {**ev, "candidate_id": "it0002", "parent_id": "it0001", "decision": {"verdict": "rejected"}}
    assert T.node_of(ev2, t).time == 0.25
    assert T.node_of({**ev, "candidate_file": None}, t) is None


# ---------------------------------------------------------------- the tree in the loop's State

def _ev(n, parent, verdict, cand=1.0, champ=1.0):
    promoted = verdict == "promoted"
    return {"iteration": n, "candidate_id": f"it{n:04d}", "candidate_file": f"candidates/it{n:04d}.py",
            "parent_id": parent, "decision": {"verdict": verdict, "promoted": promoted, "reason": verdict},
            "result": {"candidate": {"mean_ms": cand}, "champion": {"mean_ms": champ}}, "proposal": {}}


def _state():
    from kernloop.loop.state import State
    from kernloop.spec import load_spec
    from tests.conftest import ROOT
    st = State()
    st.configure(load_spec(ROOT / "specs" / "matmul.yaml"), tuner=False, seed=0)
    return st


def test_research_streak_counts_rejections_in_decision_order_across_parents():
    import research
    st = _state()
    due = []
    for n, (parent, verdict) in enumerate([("baseline", "promoted"), ("baseline", "rejected"),
                                           ("it0001", "rejected"), ("it0002", "incorrect"),
                                           ("baseline", "promoted"), ("it0005", "rejected")], 1):
        st.apply(st.place(_ev(n, parent, verdict, cand=0.5 if verdict == "promoted" else 1.2)), None)
        due.append(research.research_due(False, st.streak, LOOP_DEFAULTS["research_after"]))
    # three rejections in a row, from three different parents, are due; a promotion resets it
    assert due == [False, False, False, True, False, False]
    assert st.tree.nodes["it0004"].dead and st.tree.nodes["it0002"].parent == "baseline"


def test_state_keeps_parents_in_flight_distinct_and_releases_them_when_decided():
    st = _state()
    st.apply(st.place(_ev(1, "baseline", "rejected", cand=1.1)), None)
    first, second = st.choose(2).parent, st.choose(3).parent
    assert {first, second} == {"baseline", "it0001"} and set(st.pending) == {2, 3}
    st.apply(st.place(_ev(2, first, "rejected", cand=1.3)), None)
    assert set(st.pending) == {3} and st.tree.nodes["it0002"].parent == first
    # a node's chained time: the judge's ratio times the time of the champion it was timed against
    assert st.tree.nodes["it0002"].time == pytest.approx(1.3) and st.tree.nodes["it0001"].time == pytest.approx(1.1)


def test_replaying_the_events_rebuilds_the_same_tree():
    st = _state()
    evs = []
    for n, (parent, verdict, cand) in enumerate([("baseline", "promoted", 0.5), ("it0001", "rejected", 1.1),
                                                 ("it0002", "failed", 1.0), ("baseline", "rejected", 2.2)], 1):
        ev = st.place(_ev(n, parent, verdict, cand=cand, champ=1.0))
        st.apply(ev, None)
        evs.append({"event": "iteration", **ev})
    again = _state()
    again.replay(evs, None)
    assert again.tree == st.tree and again.tree.nodes["it0002"].time == pytest.approx(0.55)


# ---------------------------------------------------------------- tree against chain, at equal budget

def test_the_tree_finds_a_kernel_two_steps_through_a_slower_parent_and_the_chain_does_not():
    # the world of benchmarks/tree_vs_chain.py --scripted (its JSON: benchmarks/results/session25)
    tree = [scripted_world(seed, "tree") for seed in range(5)]
    chain = [scripted_world(seed, "chain") for seed in range(5)]
    assert sum(n is not None for n in tree) >= 4, tree
    assert sum(n is not None for n in chain) <= 1, chain
