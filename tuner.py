"""The built-in proposer that needs no LLM: it rewrites only the champion's CONFIG.

Search: first a few configs spread over the whole space (a seeded Latin hypercube: every
parameter's range is covered, so one local basin near the baseline cannot hold the search), then
greedy coordinate moves around the champion inside the spec's search space, with
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
INITIAL_SAMPLES = 4   # of ~15-30 candidates per run: enough to land near a good basin


def latin_hypercube(space: dict, n: int, rng: random.Random) -> list[dict]:
    """n configs where each parameter's values are spread evenly across the samples (each of n
    strata of its value list used once), paired at random between parameters."""
    columns = {}
    for p, vals in space.items():
        if len(vals) <= n:   # few values: every one of them appears
            col = [vals[i % len(vals)] for i in range(n)]
        else:                # many: one value from each of n equal slices of the list
            col = [vals[rng.randrange(s * len(vals) // n, (s + 1) * len(vals) // n)] for s in range(n)]
        rng.shuffle(col)
        columns[p] = col
    return [{p: columns[p][i] for p in space} for i in range(n)]


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

    def __init__(self, space: dict, seed: int = 0, initial: int = INITIAL_SAMPLES):
        if not space:
            raise ValueError("the spec has no search_space: the tuner has nothing to change")
        self.space = {k: list(v) for k, v in space.items()}
        self.rng = random.Random(seed)
        # Drawn once from the seed: a resumed run skips the samples it already tried.
        self.initial = latin_hypercube(self.space, initial, self.rng) if initial > 0 else []
        self.initial_n = len(self.initial)
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
        # 0. The initial spread-out samples, before any local move.
        while self.initial:
            k = self.initial_n - len(self.initial) + 1
            cand = dict(base)
            cand.update(self.initial.pop(0))
            if _key(cand) not in self.tried:
                self.last_move = None
                return cand, self._describe_move(base, cand, f"initial spread sample {k}/{self.initial_n}")
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
