"""The page's search tree (kernloop/view/treeview.py): each candidate under the parent the log names, the champion's lineage heavy, drawn from the log alone."""
from __future__ import annotations

import re

from pagekit import Parsed, assert_self_contained, copy_sample, read_events, write_events
from kernloop import page
from kernloop.view import treeview


def item(cid, parent, verdict="rejected", ms=1.0, selection=None):
    return {"cid": cid, "parent": parent, "verdict": verdict, "dom": f"k-{cid}", "cand_ms": ms,
            "selection": selection}


def test_nodes_sit_one_step_right_of_their_parent_and_the_champion_lineage_is_marked():
    iters = [item("a", "baseline", "promoted"), item("b", "baseline"), item("c", "a", "incorrect"),
             item("d", "a", "promoted", selection="UCB1 0.91"), item("e", "d")]
    t = treeview.build_tree(iters, "d")
    at = {n["id"]: n for n in t["nodes"]}
    assert set(at) == {"baseline", "a", "b", "c", "d", "e"}
    assert at["baseline"]["x"] < at["a"]["x"] == at["b"]["x"] < at["c"]["x"] == at["d"]["x"] < at["e"]["x"]
    assert {n for n in at if at[n]["path"]} == {"baseline", "a", "d"}
    assert at["d"]["champion"] and not at["e"]["champion"]
    assert "UCB1 0.91" in at["d"]["tip"] and "parent a" in at["d"]["tip"] and "modeled" not in at["d"]["tip"]
    assert "ms (modeled)" in {n["id"]: n for n in treeview.build_tree(iters, "d", synthetic=True)["nodes"]}["d"]["tip"]
    # a parent sits between its first and last child; leaves take distinct rows
    assert at["c"]["y"] < at["a"]["y"] < at["e"]["y"] and at["a"]["y"] < at["b"]["y"]
    assert len({at[x]["y"] for x in ("b", "c", "e")}) == 3
    assert len(t["edges"]) == 5 and sum(e["path"] for e in t["edges"]) == 2
    assert (t["depth"], t["leaves"], t["path_len"]) == (3, 3, 2)


def test_a_log_without_parents_draws_no_tree_and_an_unknown_parent_hangs_from_the_baseline():
    assert treeview.build_tree([item("a", None), item("b", None)], "a") is None
    assert treeview.build_tree([], None) is None
    t = treeview.build_tree([item("a", "baseline"), item("b", "gone"), item("c", "c")], None)
    at = {n["id"]: n for n in t["nodes"]}
    assert at["b"]["x"] == at["c"]["x"] == at["a"]["x"]   # both hang from the baseline
    assert {n for n in at if at[n]["path"]} == {"baseline"}


def test_a_long_chain_is_laid_out_without_recursion_and_a_huge_tree_is_not_drawn():
    chain = [item(f"n{i}", f"n{i - 1}" if i else "baseline") for i in range(treeview.MAX_NODES)]
    t = treeview.build_tree(chain, f"n{treeview.MAX_NODES - 1}")
    assert t["depth"] == treeview.MAX_NODES and t["path_len"] == treeview.MAX_NODES
    assert all(n["x"] <= treeview.W for n in t["nodes"])
    big = treeview.build_tree(chain + [item("extra", "baseline")], None)
    assert big == {"too_many": treeview.MAX_NODES + 1, "max": treeview.MAX_NODES}


def test_the_page_draws_the_tree_of_its_log(tmp_path):
    run = copy_sample(tmp_path)
    events = read_events(run)
    its = [e for e in events if e["event"] == "iteration"]
    its[2]["parent_id"] = its[0]["candidate_id"]   # a branch: the third candidate from the first
    its[2]["selection"] = "UCB1: from it0001 (exploration)"
    write_events(run, events)
    html = page.render_run(run).read_text()
    p = Parsed(html)
    assert_self_contained(p)
    tree = html[html.index('id="k-tree"'):html.index('id="k-table"')]
    goes = re.findall(r'data-go="([^"]+)"', tree)
    assert len(goes) == len(its) + 1 and "k-baseline" in goes   # every candidate and the baseline
    assert all(g in p.ids() for g in goes)                     # each opens its card
    assert "UCB1: from it0001 (exploration)" in tree
    # the heavy lineage: the run's champion and its parents back to the baseline, from the log
    parent = {e["candidate_id"]: e["parent_id"] for e in its}
    champion = next(e for e in reversed(events) if e["event"] == "run_end")["champion_id"]
    steps, nid = 0, champion
    while nid != "baseline":
        steps, nid = steps + 1, parent[nid]
    assert steps >= 1 and tree.count('class="e p"') == steps
