"""The search tree: every judged candidate is a node, and pure rules pick the parent of the next proposal.

A node's time is the judge's ratio of its mean to the mean of the champion it was timed against,
chained back to the baseline (baseline = 1.0; 0.5 is twice the baseline's speed). A correct
candidate stays a possible parent whether it won or lost; one that failed (compile, crash, wrong
output, the contract) is dead and is never chosen.

Parent selection (`select`) is UCB1 (Auer, Cesa-Bianchi, Fischer 2002) over the tree's live
nodes, the rule UCT applies at each level, here applied to every node at once:

    score(v) = best / time(v) + c * sqrt(ln(N + 1) / (children(v) + 1))

where best is the fastest live node's time, N the number of proposals made so far and children
counts the proposals already made from v, those in flight included. The first term exploits the
fastest lineage, the second explores young nodes. One knob: c (EXPLORATION, spec `loop.exploration`).
Candidates in flight come from distinct parents while the tree has live nodes that none of them
came from. Ties go to a seeded hash of the node id, so the rule is deterministic given a seed.

Repair (`repair_due`): a failed candidate goes back to its parent with its error, at most R
times per idea; after R failed repairs the idea is dead and selection goes on.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

from kernloop.settings import LOOP_DEFAULTS

EXPLORATION = LOOP_DEFAULTS["exploration"]   # c, 0.3: 0 always extends the fastest node; 0.3 tries a young 10%-slower leaf once the fastest has 4 children
REPAIRS = LOOP_DEFAULTS["repairs"]           # R, 2: repairs of one failed idea (LLM proposer)
BASELINE = "baseline"
DEAD_VERDICTS = ("incorrect", "failed", "invalid")


@dataclass(frozen=True)
class Node:
    """One judged candidate (or the baseline, the root)."""
    id: str
    parent: str | None
    verdict: str                  # baseline | promoted | rejected | superseded | incorrect | failed | invalid
    time: float | None            # chained time against the baseline (None: never timed)
    dead: bool = False
    file: str | None = None       # its kernel file, relative to the run folder
    config: dict | None = None    # its CONFIG as the log recorded it
    error: str | None = None      # why it failed (a dead node's repair prompt)
    repair_of: str | None = None  # the first failed candidate of the idea this one repairs
    attempt: int = 0              # 0: a fresh idea; i: its i-th repair


@dataclass(frozen=True)
class Choice:
    """A parent for the next proposal, and why (logged as the iteration's `selection`)."""
    parent: str
    reason: str
    repair: Node | None = None    # the failed candidate this proposal repairs


@dataclass(frozen=True)
class Tree:
    nodes: dict = field(default_factory=dict)   # id -> Node, in decided order

    def __len__(self) -> int:
        return len(self.nodes)

    def children(self, nid: str) -> list[Node]:
        return [n for n in self.nodes.values() if n.parent == nid]

    def time_of(self, nid: str | None) -> float | None:
        node = self.nodes.get(nid)
        return node.time if node else None


def rooted(file: str = "baseline.py", config: dict | None = None) -> Tree:
    """A tree of the baseline alone."""
    return Tree({BASELINE: Node(BASELINE, None, "baseline", 1.0, file=file, config=config)})


def add(tree: Tree, node: Node) -> Tree:
    """The tree with one more node (a node already there is replaced: replay is idempotent)."""
    return Tree({**tree.nodes, node.id: node})


def chained_time(result: dict | None, against_time: float | None) -> float | None:
    """The judge's ratio candidate/champion times the champion's chained time; None without both means."""
    res = result if isinstance(result, dict) else {}
    cand, champ = (res.get(side) if isinstance(res.get(side), dict) else {} for side in ("candidate", "champion"))
    c, b = cand.get("mean_ms"), champ.get("mean_ms")
    ok = all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0
             for x in (c, b, against_time))
    return c / b * against_time if ok else None


def node_of(ev: dict, tree: Tree) -> Node | None:
    """The node an iteration event describes (None: no candidate was made). Its logged
    `node_time` and `timed_against` are read back; a log from before them is read as a chain (the
    parent is the champion it was timed against)."""
    if not ev.get("candidate_file"):
        return None
    d = ev.get("decision") or {}
    verdict = d.get("verdict") or "failed"
    parent = ev.get("parent_id") or BASELINE
    if "node_time" in ev:
        time = ev["node_time"]
    else:
        time = chained_time(ev.get("result"), tree.time_of(ev.get("timed_against") or parent))
    dead = verdict in DEAD_VERDICTS or time is None
    return Node(ev["candidate_id"], parent, verdict, time, dead, ev.get("candidate_file"),
                ev.get("candidate_config"), d.get("reason") if dead else None,
                ev.get("repair_of"), ev.get("repair_attempt") or 0)


def alive(tree: Tree) -> list[Node]:
    return [n for n in tree.nodes.values() if not n.dead and n.time is not None]


def _tiebreak(seed: int, nid: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{nid}".encode()).digest()[:8], "big")


def scores(tree: Tree, pending=(), c: float = EXPLORATION) -> dict[str, tuple[float, float, int]]:
    """{node id: (speed term, exploration term, children)} of every live node."""
    live = alive(tree)
    if not live:
        return {}
    best = min(n.time for n in live)
    kids: dict[str, int] = {}
    for n in tree.nodes.values():
        if n.parent is not None:
            kids[n.parent] = kids.get(n.parent, 0) + 1
    for p in pending:
        kids[p] = kids.get(p, 0) + 1
    total = len(tree.nodes) - 1 + len(pending)
    return {n.id: (best / n.time, c * math.sqrt(math.log(total + 1) / (kids.get(n.id, 0) + 1)),
                   kids.get(n.id, 0)) for n in live}


def select(tree: Tree, pending=(), c: float = EXPLORATION, seed: int = 0) -> Choice:
    """The parent of the next proposal by UCB1 (module docstring); `pending`: the parents of the
    proposals in flight, each counted as a child, and passed over while another live node is not
    among them. The baseline when nothing is alive (it always is: a root is never dead)."""
    sc = scores(tree, pending, c)
    if not sc:
        return Choice(BASELINE, "the baseline: no live node")
    free = [nid for nid in sc if nid not in set(pending)] or list(sc)
    pick = max(free, key=lambda nid: (sum(sc[nid][:2]), _tiebreak(seed, nid)))
    speed, explore, kids = sc[pick]
    return Choice(pick, f"UCB1: score {speed + explore:.3f} = speed {speed:.3f} of the fastest "
                        f"+ exploration {explore:.3f} ({kids} child{'ren' if kids != 1 else ''}"
                        f"{', ' + str(len(sc) - len(free)) + ' busy' if len(free) < len(sc) else ''})")


def repair_due(tree: Tree, repairs: int = REPAIRS, pending_repairs=()) -> Node | None:
    """The earliest failed candidate whose idea still has a repair left (at most `repairs` per
    idea) and none in flight: it goes back to its parent with its error. None: nothing to repair."""
    if repairs <= 0:
        return None
    tried = {(n.repair_of, n.attempt) for n in tree.nodes.values() if n.repair_of}
    for n in tree.nodes.values():
        root = n.repair_of or n.id
        if n.dead and n.error is not None and n.attempt < repairs and root not in pending_repairs \
                and (root, n.attempt + 1) not in tried:
            return n
    return None


def choose(tree: Tree, search: str = "tree", champion: str = BASELINE, pending=(), c: float = EXPLORATION,
           seed: int = 0, repairs: int = 0, pending_repairs=()) -> Choice:
    """The parent of the next proposal: a repair that is due (same parent, its error), else the
    champion (`chain`) or the UCB1 pick (`tree`)."""
    due = repair_due(tree, repairs, pending_repairs)
    if due is not None:
        root = due.repair_of or due.id
        return Choice(due.parent, f"repair {due.attempt + 1}/{repairs} of {root} "
                                  f"(from {due.parent}, its parent): {due.verdict}", due)
    if search == "chain":
        return Choice(champion, "chain: the champion")
    return select(tree, pending, c, seed)
