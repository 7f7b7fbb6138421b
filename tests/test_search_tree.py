"""kernloop/loop/tree.py: the search tree's pure rules (parent selection by UCB1, repairs, chained times)."""
from kernloop.loop import tree as T


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
    assert T.choose(t, repairs=r).repair is None and T.idea_dead(t, t.nodes["x2"], r)
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
    assert T.chain_of(T.add(t, T.node_of(ev2, t)), "it0002") == ["baseline", "it0001", "it0002"]
