"""The built-in proposer that needs no LLM: it rewrites only the champion's CONFIG.

Search: greedy coordinate moves around the champion inside the spec's search space, with
momentum (a move that just won is tried again), paired moves (tile size together with warps or
stages, since one without the other often loses), and seeded random jumps to leave local optima.
It never proposes a config it has tried before and is deterministic for a given seed.
It does not read research notes: it only changes numbers inside the search space.
"""
from __future__ import annotations

import ast
import itertools
import random

from contract import read_config
from proposer import Proposal, ProposalContext

JUMP_PROB = 0.15


def _key(cfg: dict) -> tuple:
    return tuple(sorted(cfg.items()))


def replace_config(code: str, cfg: dict) -> str:
    """Return `code` with its module-level CONFIG assignment rewritten to `cfg`."""
    tree = ast.parse(code)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "CONFIG"
                                                for t in node.targets):
            lines = code.splitlines(keepends=True)
            new = "CONFIG = dict(" + ", ".join(f"{k}={v!r}" for k, v in cfg.items()) + ")\n"
            return "".join(lines[:node.lineno - 1]) + new + "".join(lines[node.end_lineno:])
    raise ValueError("no CONFIG assignment to rewrite")


def _set_note(code: str, note: str) -> str:
    lines = code.splitlines(keepends=True)
    if lines and lines[0].startswith("# NOTE:"):
        lines = lines[1:]
    return f"# NOTE: {note}\n" + "".join(lines)


class Tuner:
    name = "tuner"
    model = None

    def __init__(self, space: dict, seed: int = 0):
        if not space:
            raise ValueError("the spec has no search_space: the tuner has nothing to change")
        self.space = {k: list(v) for k, v in space.items()}
        self.rng = random.Random(seed)
        self.tried: set[tuple] = set()
        self.last_move: tuple | None = None      # ((param, step), ...) of the last proposal
        self.last_parent: tuple | None = None
        self.exhausted = False

    def describe(self) -> dict:
        return {"proposer": "tuner", "model": None, "endpoint_host": None}

    def mark_tried(self, cfg: dict) -> None:
        self.tried.add(_key(cfg))

    def _step(self, cfg: dict, moves) -> dict | None:
        new = dict(cfg)
        for p, d in moves:
            vals = self.space[p]
            if cfg.get(p) not in vals:
                return None
            i = vals.index(cfg[p]) + d
            if not 0 <= i < len(vals):
                return None
            new[p] = vals[i]
        return new

    def _moves(self):
        params = list(self.space)
        singles = [((p, +1),) for p in params] + [((p, -1),) for p in params]
        pairs = [((a, da), (b, db)) for a, b in itertools.combinations(params, 2)
                 for da, db in ((+1, +1), (+1, -1), (-1, +1))]
        return singles, pairs

    def _describe_move(self, parent, child, why):
        changes = ", ".join(f"{k} {parent.get(k)}->{v}" for k, v in child.items() if parent.get(k) != v)
        return f"{changes} ({why})"

    def next_config(self, champion_cfg: dict, last_promoted: bool) -> tuple[dict | None, str]:
        base = {k: champion_cfg.get(k) for k in champion_cfg}
        self.mark_tried(base)
        # 1. Momentum: the last move just won, so push further the same way.
        if last_promoted and self.last_move:
            cand = self._step(base, self.last_move)
            if cand and _key(cand) not in self.tried:
                return cand, self._describe_move(base, cand, "repeat the move that just won")
        # 2. Occasional seeded random jump, so one basin cannot trap the search.
        if self.rng.random() < JUMP_PROB:
            cand = self._random_untried(base)
            if cand:
                self.last_move = None
                return cand, self._describe_move(base, cand, f"random jump, p={JUMP_PROB}")
        # 3. Nearest untried neighbours: single steps first, then paired steps (seeded order).
        singles, pairs = self._moves()
        self.rng.shuffle(singles)
        self.rng.shuffle(pairs)
        ups = [m for m in singles if m[0][1] > 0]
        downs = [m for m in singles if m[0][1] < 0]
        for moves, why in [(ups, "one step up"), (pairs, "paired step"), (downs, "one step down")]:
            for m in moves:
                cand = self._step(base, m)
                if cand and _key(cand) not in self.tried:
                    self.last_move = m
                    return cand, self._describe_move(base, cand, why)
        cand = self._random_untried(base)
        if cand:
            self.last_move = None
            return cand, self._describe_move(base, cand, "neighbours exhausted, random untried config")
        return None, "search space exhausted"

    def _random_untried(self, base: dict) -> dict | None:
        for _ in range(200):
            cand = dict(base)
            cand.update({k: self.rng.choice(v) for k, v in self.space.items()})
            if _key(cand) not in self.tried:
                return cand
        return None

    def propose(self, ctx: ProposalContext) -> Proposal:
        cfg = read_config(ctx.champion_code)
        if cfg is None:
            return Proposal(code=None, note="", proposer="tuner",
                            error="champion has no CONFIG literal the tuner can rewrite")
        new, note = self.next_config(cfg, ctx.last_promoted)
        if new is None:
            self.exhausted = True
            return Proposal(code=None, note=note, proposer="tuner", error=note)
        self.mark_tried(new)
        code = _set_note(replace_config(ctx.champion_code, new), "tuner: " + note)
        return Proposal(code=code, note=note, proposer="tuner", meta={"config": new})
