"""The built-in proposer that needs no LLM: it rewrites only the champion's CONFIG.

Search: first a few configs spread over the whole space (a seeded Latin hypercube: every
parameter's range is covered, so one local basin near the baseline cannot hold the search), then
greedy coordinate moves around the champion inside the spec's search space, with
momentum (a move that just won is tried again), paired moves (tile size together with warps or
stages, since one without the other often loses), and seeded random jumps to leave local optima.
It never proposes a config it has tried before, with one exception: a near miss (a config that
beat its champion by the bar in the means but was rejected on the medians or on significance, the
noise of one job) is judged once more when the neighbours are spent. It is deterministic for a
given seed.
It does not read research notes: it only changes numbers inside the search space.

It learns from "out of resource" failures (Tuner.observe). By Triton convention the numeric
search-space parameters named BLOCK* (tile sizes) or num_stages (pipeline depth) set a config's
shared memory, which grows with each of them; num_warps, GROUP_M and the rest do not. So once a
config runs out, any config at least as large in every such parameter the two share would run out
too, and is skipped unproposed: Triton rejects it only after a full compile, which can take minutes.

Before any failure it also skips matmul-like configs (BLOCK_M, BLOCK_N, BLOCK_K, num_stages) whose
pipelined A and B tiles cannot fit in a block's shared memory (`tile_smem`, `SMEM_LIMIT` by device,
H200 by default). The prior is a lower bound, num_stages - 1 tile buffers, so nothing that fits is
skipped; Triton's first "Required: N, Hardware limit: M" failure calibrates it (`calibrate`): on the
H200 a pointer matmul needs exactly num_stages buffers, and M replaces the table's limit.
"""
from __future__ import annotations

import ast
import dataclasses
import itertools
import random
import re

from kernloop.contract import read_config
from kernloop.propose.proposer import Proposal, ProposalContext

JUMP_PROB = 0.15
INITIAL_SAMPLES = 4   # of ~15-30 candidates per run: enough to land near a good basin
OUT_OF_RESOURCE = "out of resource"   # Triton's OutOfResources text, matched case-insensitively


# Shared memory per block in bytes, as Triton reports it ("Hardware limit"), by device name.
SMEM_LIMIT = {"H200": 232448, "H100": 232448, "A100": 166912, "L40S": 101376, "L4": 101376}
DEFAULT_DEVICE = "H200"
DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}
TILE_PARAMS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_stages")
_REQUIRED = re.compile(r"required:\s*(\d+),\s*hardware limit:\s*(\d+)", re.IGNORECASE)


def tile_smem(cfg: dict, elem_bytes: int, spare_stages: int = 1) -> int | None:
    """Shared memory of a pipelined matmul's A and B tiles: (num_stages - spare_stages) buffers of
    BLOCK_M*BLOCK_K + BLOCK_K*BLOCK_N elements. None unless cfg sets all four as numbers."""
    if not all(_is_num(cfg.get(p)) for p in TILE_PARAMS):
        return None
    bm, bn, bk, stages = (cfg[p] for p in TILE_PARAMS)
    return max(stages - spare_stages, 1) * (bm * bk + bk * bn) * elem_bytes


def smem_limit(device: str | None) -> int:
    """The table's limit for the first device name it contains (e.g. 'NVIDIA H200'), else the H200's."""
    name = next((k for k in SMEM_LIMIT if k in (device or "")), DEFAULT_DEVICE)
    return SMEM_LIMIT[name]


def fits(cfg: dict, elem_bytes: int, limit: int, spare_stages: int | None = 1) -> bool:
    """False only when the estimate says cfg cannot fit; True for what the model cannot price."""
    est = None if spare_stages is None else tile_smem(cfg, elem_bytes, spare_stages)
    return est is None or est <= limit


def calibrate(cfg: dict, elem_bytes: int, reason: str) -> tuple[int | None, int] | None:
    """(spare_stages, limit) learned from Triton's out-of-resources text for cfg, or None when the
    text gives no numbers. Required >= num_stages buffers: Triton keeps all of them (spare 0); at
    least num_stages - 1: keep the lower bound (spare 1); less: the model does not describe this
    kernel (None: estimate off)."""
    m = _REQUIRED.search(reason or "")
    if not m or "shared memory" not in reason.lower() or tile_smem(cfg, elem_bytes) is None:
        return None
    required, limit = int(m.group(1)), int(m.group(2))
    if required >= tile_smem(cfg, elem_bytes, 0):
        return 0, limit
    return (1 if required >= tile_smem(cfg, elem_bytes, 1) else None), limit


def near_miss(verdict: str | None, rule: dict | None) -> float | None:
    """The mean gain of a rejected candidate whose means cleared the promotion bar (it failed the
    medians or the significance test: one job's noise can do that), else None. Pure."""
    rule = rule or {}
    gain, bar = rule.get("gain"), rule.get("min_gain")
    if verdict != "rejected" or not _is_num(gain) or not _is_num(bar):
        return None
    return float(gain) if gain > bar else None


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def resource_params(space: dict) -> list[str]:
    """The parameters that set shared memory by Triton convention (module docstring). Only
    all-numeric ones: the rule compares sizes."""
    return [p for p, vals in space.items()
            if (p.startswith("BLOCK") or p == "num_stages") and vals and all(map(_is_num, vals))]


def needs_at_least(cand: dict, failed: dict, params) -> bool:
    """True when cand is >= failed in every resource parameter both set, so it needs at least
    failed's shared memory. No such parameter in common, or a non-number, proves nothing."""
    shared = [p for p in params if p in cand and p in failed]
    if not shared or not all(_is_num(cand[p]) and _is_num(failed[p]) for p in shared):
        return False
    return all(cand[p] >= failed[p] for p in shared)


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

    def __init__(self, space: dict, seed: int = 0, initial: int = INITIAL_SAMPLES,
                 elem_bytes: int = 2, device: str | None = None, estimate: bool = True,
                 start=None, also=None, root: str | None = None):
        # start: a family template (kernloop.families.template.Start) for a `baseline: torch`
        # spec. Until one of its configs wins, the champion is torch (no CONFIG): the tuner
        # tunes the template instead, its first candidate being the template as filled in.
        # also: the family template of a spec with a Triton baseline, a second lineage: its
        # first proposal is the template, and a parent of its lineage is tuned in its space.
        # root: that baseline's source, where the search goes on once the template's space is spent.
        self.start, self.root = start, root
        self.also = None if also is None else Tuner(also.space, seed=seed, initial=initial, elem_bytes=elem_bytes,
                                                    device=device, estimate=estimate, start=also)
        self.also_begun = False
        self.allowed = start.allowed if start is not None else (lambda cfg: True)
        self.pruned = 0   # configs the template's limits passed over for the current proposal
        if not space:
            raise ValueError("the spec has no search_space: the tuner has nothing to change")
        self.space = {k: list(v) for k, v in space.items()}
        self.rng = random.Random(seed)
        # Drawn once from the seed: a resumed run skips the samples it already tried.
        self.initial = latin_hypercube(self.space, initial, self.rng) if initial > 0 else []
        self.initial_n = len(self.initial)
        self.tried: set[tuple] = set()
        self.judged: dict[tuple, int] = {}      # how many times each config was judged (observe)
        self.near: dict[tuple, tuple] = {}      # near misses judged once: key -> (gain, config)
        self.last_move: tuple | None = None      # ((param, step), ...) of the last proposal
        self.last_parent: tuple | None = None
        self.exhausted = False
        self.resource = resource_params(self.space)
        self.infeasible: list[dict] = []   # resource params of configs that ran out (observe)
        self.skipped = 0                   # dominated configs passed over for the current proposal
        self.elem_bytes, self.smem_limit = elem_bytes, smem_limit(device)
        self.estimate = estimate           # False: only the dominance rule (for comparison)
        self.spare_stages: int | None = 1 if estimate else None   # the estimate's prior: a lower bound
        self.too_big = 0                   # configs the estimate passed over for the current proposal

    def describe(self) -> dict:
        return {"proposer": "tuner", "model": None, "endpoint_host": None}

    def _theirs(self, cfg: dict | None) -> bool:
        """A config of the template's lineage (its keys are the template's, never the baseline's)."""
        return self.also is not None and isinstance(cfg, dict) and set(cfg) == set(self.also.start.config)

    @property
    def exhausted_all(self) -> bool:
        """Nothing left to propose in any lineage."""
        return self.exhausted and (self.also is None or self.also.exhausted)

    def mark_tried(self, cfg: dict) -> None:
        if self._theirs(cfg):
            self.also_begun = True
            self.also.mark_tried(cfg)
            return
        self.tried.add(_key(cfg))

    def observe(self, cfg: dict, verdict: str, reason: str, rule: dict | None = None) -> None:
        """Learn from one evaluated candidate (live, or replayed on --resume): a config that ran
        out of resources is remembered, so configs that need at least as much are never proposed;
        a near miss judged once (near_miss on the decision's `rule`) may be judged once more."""
        if self._theirs(cfg):
            self.also.observe(cfg, verdict, reason, rule)
            return
        key = _key(cfg)
        self.judged[key] = self.judged.get(key, 0) + 1
        gain = near_miss(verdict, rule)
        if gain is not None and self.judged[key] == 1:
            self.near[key] = (gain, dict(cfg))
        else:
            self.near.pop(key, None)
        if verdict == "promoted" or OUT_OF_RESOURCE not in (reason or "").lower():
            return   # only a resource failure teaches this rule; a promoted config plainly fit
        learned = calibrate(cfg, self.elem_bytes, reason) if self.estimate else None
        if learned:
            self.spare_stages, self.smem_limit = learned
        small = {p: cfg[p] for p in self.resource if p in cfg}
        # Already covered by a smaller failure: the list stays minimal, so checks stay cheap.
        if small and self.dominated(small) is None:
            self.infeasible = [f for f in self.infeasible
                               if not needs_at_least(f, small, self.resource)] + [small]

    def dominated(self, cfg: dict) -> dict | None:
        """The remembered failure that cfg needs at least the resources of, or None."""
        return next((f for f in self.infeasible if needs_at_least(cfg, f, self.resource)), None)

    def _fresh(self, cand: dict | None) -> bool:
        """cand may be proposed: untried and not dominated. A dominated one is marked tried, so
        it is counted (for the note) once and never looked at again."""
        if cand is None or _key(cand) in self.tried:
            return False
        if self.dominated(cand) is not None:
            self.mark_tried(cand)
            self.skipped += 1
            return False
        if not fits(cand, self.elem_bytes, self.smem_limit, self.spare_stages):
            self.mark_tried(cand)
            self.too_big += 1
            return False
        if not self.allowed(cand):   # e.g. more registers a thread than the template allows
            self.mark_tried(cand)
            self.pruned += 1
            return False
        return True

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
        self.skipped = self.too_big = self.pruned = 0
        cand, note = self._next_config(champion_cfg, last_promoted)
        if self.skipped:   # say why the search passed over configs; one line
            what = "1 config that needs" if self.skipped == 1 else f"{self.skipped} configs that need"
            note += f" (skipped {what} at least the shared memory of a config that ran out)"
        if self.too_big:
            what = "1 config whose" if self.too_big == 1 else f"{self.too_big} configs whose"
            note += (f" (skipped {what} tiles need more than the {self.smem_limit // 1024} KB of "
                     "shared memory a block has)")
        if self.pruned:
            note += f" (skipped {self.pruned} config(s) past the template's register limit)"
        return cand, note

    def _next_config(self, champion_cfg: dict, last_promoted: bool) -> tuple[dict | None, str]:
        base = {k: champion_cfg.get(k) for k in champion_cfg}
        self.mark_tried(base)
        # 0. The initial spread-out samples, before any local move.
        while self.initial:
            k = self.initial_n - len(self.initial) + 1
            cand = dict(base)
            cand.update(self.initial.pop(0))
            if self._fresh(cand):
                self.last_move = None
                return cand, self._describe_move(base, cand, f"initial spread sample {k}/{self.initial_n}")
        # 1. Momentum: the last move just won, so push further the same way.
        if last_promoted and self.last_move:
            cand = self._step(base, self.last_move)
            if self._fresh(cand):
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
                if self._fresh(cand):
                    self.last_move = m
                    return cand, self._describe_move(base, cand, why)
        retry = self._near_miss(base)
        if retry:
            return retry
        cand = self._random_untried(base)
        if cand:
            self.last_move = None
            return cand, self._describe_move(base, cand, "neighbours exhausted, random untried config")
        return None, "search space exhausted"

    def _near_miss(self, base: dict) -> tuple[dict, str] | None:
        """The near miss with the largest gain, judged once more (never the parent itself)."""
        for key, (gain, cfg) in sorted(self.near.items(), key=lambda kv: -kv[1][0]):
            del self.near[key]
            if key != _key(base):
                self.last_move = None
                return dict(cfg), self._describe_move(
                    base, cfg, f"judged again: {gain:.1%} faster than its champion in the means, "
                               "rejected on the medians or significance")
        return None

    def _random_untried(self, base: dict) -> dict | None:
        for _ in range(200):
            cand = dict(base)
            cand.update({k: self.rng.choice(v) for k, v in self.space.items()})
            if self._fresh(cand):
                return cand
        return None

    def propose(self, ctx: ProposalContext) -> Proposal:
        if self.also is not None:   # two lineages: the baseline's and the family template's
            cfg = ctx.base_config or read_config(ctx.base_code)
            if self._theirs(cfg):
                got = self.also.propose(ctx)
                if got.code is not None or not self.also.exhausted or self.exhausted or self.root is None:
                    return got
                # The template's space is spent: go on in the baseline's (the run stops once both are).
                got = self._propose(dataclasses.replace(ctx, parent_code=self.root, parent_config=None))
                return dataclasses.replace(got, note=f"the template's space is spent; from the baseline: {got.note}")
            start = self.also.start
            if not self.also_begun:   # the template itself, once, as a child of this parent
                self.also_begun = True
                self.also.mark_tried(start.config)
                return Proposal(code=start.code, note=f"template {start.match.family} for {start.match.label}",
                                proposer="tuner", meta={"config": dict(start.config)})
        got = self._propose(ctx) if not self.exhausted else None
        if self.also is not None and (got is None or got.error) and self.exhausted and not self.also.exhausted:
            start = self.also.start   # the baseline's space is spent: go on in the template's
            return self.also.propose(dataclasses.replace(ctx, parent_code=start.code, parent_config=dict(start.config)))
        return got if got is not None else self._propose(ctx)

    def _propose(self, ctx: ProposalContext) -> Proposal:
        self.elem_bytes = DTYPE_BYTES.get(getattr(ctx.spec, "dtype", None), self.elem_bytes)
        code = ctx.base_code   # the parent the search tree chose (the champion with `search: chain`)
        cfg = ctx.base_config or read_config(code)
        if cfg is None and self.start is not None:   # the torch reference: tune the template
            code, cfg = self.start.code, dict(self.start.config)
            if _key(cfg) not in self.tried:
                self.mark_tried(cfg)
                note = f"template {self.start.match.family} for {self.start.match.label}"
                return Proposal(code=code, note=note, proposer="tuner", meta={"config": cfg})
        if cfg is None:
            return Proposal(code=None, note="", proposer="tuner",
                            error="the parent has no CONFIG literal the tuner can rewrite")
        new, note = self.next_config(cfg, ctx.last_promoted)
        if new is None:
            self.exhausted = True
            return Proposal(code=None, note=note, proposer="tuner", error=note)
        self.mark_tried(new)
        code = _set_note(replace_config(code, new), "tuner: " + note)
        return Proposal(code=code, note=note, proposer="tuner", meta={"config": new})
