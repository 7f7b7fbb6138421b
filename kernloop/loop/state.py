"""The loop's state, typed: the champion, its standing, the search tree, recent rejections and counters; rebuilt from a log by `replay`."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kernloop import decision
from kernloop.loop import secondlook
from kernloop.loop import tree as searchtree
from kernloop.loop.iteration import LLM_FAILURE_KINDS
from kernloop.propose.proposer import ProposalContext
from kernloop.propose.tuner import Tuner
from kernloop.standing import briefing

REJECTIONS_KEPT = 8   # recent failures shown to the proposer


@dataclass
class State:
    """What the loop knows between iterations; `apply(event)` is the one place a decided iteration changes it (the champion included)."""

    cost: dict | None = None        # compulsory bytes (diagnosis)
    synthetic: bool = False         # a modeled run
    peers_block: dict | None = None     # the last job's peers (the baseline's, the final's)
    standing: dict | None = None        # briefing.standing() of the champion
    done: int = 0
    champion_id: str = "baseline"
    champion_file: str = "baseline.py"
    champion_config: dict | None = None     # parsed once, when the file was logged
    champion_sha256: str | None = None      # its bytes as the contract judged them
    champion_profile: dict = field(default_factory=dict)
    baseline_mean: float | None = None
    rejections: list[dict] = field(default_factory=list)
    streak: int = 0
    since_promotion: int = 0
    notes: str | None = None
    last_parse_error: str | None = None
    last_promoted: bool = False
    baseline_done: bool = False
    research_queries: int = 0
    seen: set[int] = field(default_factory=set)   # decided iteration numbers (several may be in flight)
    torch_start: bool = False       # `baseline: torch`: the baseline champion is the reference in torch
    transport_failures: int = 0     # consecutive LLM transport failures
    refused: bool = False           # the last one was a refused connection
    llm_answered: bool = False      # ... and the endpoint had answered before it
    promoted: dict = field(default_factory=dict)   # candidate id -> {iteration, file, result}: for its second look
    tree: searchtree.Tree = field(default_factory=searchtree.rooted)   # every judged candidate (kernloop/loop/tree.py)
    pending: dict = field(default_factory=dict)    # iteration -> tree.Choice of each proposal in flight
    search: str = "tree"            # spec loop.search: tree | chain
    exploration: float = searchtree.EXPLORATION    # spec loop.exploration: UCB1's c
    repairs: int = 0                # spec loop.repairs for an LLM proposer; 0 for the tuner (nothing to repair)
    seed: int = 0                   # --seed: breaks the selection's ties
    floor: dict | None = None       # the last judge result's `floor` {mean_ms, what, measured}: the speed-of-light stop
    floor_within: float = 0.03      # spec loop.floor_within

    def configure(self, spec, tuner: bool, seed: int) -> None:
        """The search's settings from the spec (and the torch start)."""
        self.torch_start = spec.torch_baseline
        self.search, self.exploration = spec.loop["search"], float(spec.loop["exploration"])
        self.repairs, self.seed = 0 if tuner else int(spec.loop["repairs"]), seed
        self.floor_within = float(spec.loop["floor_within"])

    def floor_stop(self) -> tuple[str, str] | None:
        """decision.floor_stop on the champion, the last measured floor and the best peer."""
        return decision.floor_stop(self.champion_profile, self.floor, (self.peers_block or {}).get("best"),
                                   self.floor_within)

    def choose(self, n: int) -> searchtree.Choice:
        """The parent of proposal n (a pure rule on the tree and the proposals in flight), kept
        as in flight until n is decided."""
        flying = list(self.pending.values())
        ch = searchtree.choose(self.tree, self.search, self.champion_id, [c.parent for c in flying],
                           self.exploration, self.seed, self.repairs,
                           {c.repair.repair_of or c.repair.id for c in flying if c.repair})
        self.pending[n] = ch
        return ch

    def parent_fields(self, ch: searchtree.Choice, run_dir: Path) -> dict:
        """ProposalContext's parent fields for a choice: its code, CONFIG, why, and a repair's error."""
        node = self.tree.nodes[ch.parent]
        config = self.champion_config if ch.parent == self.champion_id else node.config
        due = ch.repair
        repair = None if due is None else {
            "of": due.id, "root": due.repair_of or due.id, "attempt": due.attempt + 1,
            "repairs": self.repairs, "error": due.error,
            "code": (run_dir / due.file).read_text(errors="replace")}
        return {"parent_id": ch.parent, "parent_code": (run_dir / node.file).read_text(),
                "parent_config": config, "selection": ch.reason, "repair": repair}

    def place(self, ev: dict) -> dict:
        """An iteration event with its node's fields (timed_against, node_time), before it is
        logged: the champion its deciding job timed it against, and its chained time."""
        last = (ev.get("evaluations") or [{}])[-1]
        ev["timed_against"] = last.get("against") or self.champion_id
        ev["node_time"] = searchtree.chained_time(ev.get("result"), self.tree.time_of(ev["timed_against"]))
        return ev

    @property
    def champion_is_torch(self) -> bool:
        return self.torch_start and self.champion_id == "baseline"

    def end_fields(self) -> dict:
        """run_end's fields that the state knows: trajectory.end_run(log, stopped, reason,
        **state.end_fields(), duration_s=...) writes the event (an interrupt handler too)."""
        return {"iterations_done": self.done, "champion_id": self.champion_id,
                "champion_file": self.champion_file, "champion_sha256": self.champion_sha256,
                "baseline_mean_ms": self.baseline_mean,
                "champion_mean_ms": self.champion_profile.get("mean_ms")}

    def stand(self, result: dict) -> None:
        """The champion's standing from the job that measured it (peers carried over)."""
        self.peers_block = (result or {}).get("peers") or self.peers_block
        self.floor = (result or {}).get("floor") or self.floor
        self.standing = briefing.standing(result, "candidate", self.cost, self.synthetic, self.peers_block)

    def profile_from(self, result: dict, side: str = "candidate") -> dict:
        st = dict(result.get(side) or {})
        st["rel_l2"] = result.get("rel_l2")
        st["roofline"] = (result.get("roofline") or {}).get(side)
        return st

    def replay(self, events: list[dict], tuner: Tuner | None, run_dir: Path | None = None) -> None:
        """Rebuild the state from a log; with run_dir, also re-ask the tuner its proposals."""
        for ev in events:
            kind = ev.get("event")
            if kind == "baseline":
                self.baseline_done = True
                self.champion_config = ev.get("candidate_config")
                self.champion_sha256 = ev.get("candidate_sha256")
                self.champion_profile = self.profile_from(ev.get("result") or {})
                self.baseline_mean = self.champion_profile.get("mean_ms")
                self.stand(ev.get("result") or {})
            elif kind == "research":
                if ev.get("notes"):
                    self.notes = ev["notes"]
            elif kind == "iteration":
                if tuner is not None and run_dir is not None and ev.get("proposer") == "tuner":
                    self.replay_tuner(ev, tuner, run_dir)
                self.apply(ev, tuner)
            elif kind == "sight":
                self.see(ev)

    def see(self, sight: dict) -> None:
        """A second look that landed after its promotion was logged: the champion's standing
        (what the prompt reads) gets its profile, if the champion is still that candidate."""
        kept = self.promoted.get(sight.get("candidate_id"))
        if sight.get("status") == "landed" and kept and sight.get("candidate_id") == self.champion_id:
            self.stand(secondlook.merged(kept.get("result"), sight.get("result")))

    def replay_tuner(self, ev: dict, tuner: Tuner, run_dir: Path) -> None:
        """Re-ask the tuner for this logged proposal from the same parent, so its initial
        spread, tried set and RNG stand exactly where the uninterrupted run left them."""
        code = (run_dir / self.champion_file).read_text()
        parent = ev.get("parent_id") if ev.get("parent_id") in self.tree.nodes else self.champion_id
        tuner.propose(ProposalContext(spec=None, iteration=ev["iteration"], champion_code=code,
                                      champion_id=self.champion_id, champion_profile={},
                                      last_promoted=self.last_promoted, champion_config=self.champion_config,
                                      **self.parent_fields(searchtree.Choice(parent, ""), run_dir)))

    def apply(self, ev: dict, tuner: Tuner | None) -> None:
        self.done = max(self.done, ev["iteration"])
        self.pending.pop(ev["iteration"], None)
        if (node := searchtree.node_of(ev, self.tree)) is not None:   # a candidate was made: a node
            self.tree = searchtree.add(self.tree, node)
        self.seen.add(ev["iteration"])
        d = ev.get("decision") or {}
        self.last_promoted = bool(d.get("promoted"))
        if tuner is not None and ev.get("candidate_config"):
            # Live and on --resume alike: every evaluated config, and what became of it (the
            # tuner stops proposing configs bigger than one that ran out of shared memory).
            tuner.mark_tried(ev["candidate_config"])
            tuner.observe(ev["candidate_config"], d.get("verdict"), d.get("reason"), d.get("rule"))
        prop = ev.get("proposal") or {}
        kind = prop.get("error_kind")
        if kind in LLM_FAILURE_KINDS:   # no candidate was made: nothing to reject or learn from
            self.transport_failures = self.transport_failures + 1 if kind == "transport" else 0
            self.refused = bool(prop.get("connection_refused"))
            self.llm_answered = bool(prop.get("endpoint_answered"))
            self.since_promotion += 1
            self.last_parse_error = None
            return
        self.transport_failures, self.refused = 0, False
        self.floor = (ev.get("result") or {}).get("floor") or self.floor   # measured beside the champion
        if d.get("promoted"):
            self.promoted[ev["candidate_id"]] = {"iteration": ev["iteration"], "result": ev.get("result"),
                                                 "file": ev["candidate_file"]}
            self.champion_id, self.champion_file = ev["candidate_id"], ev["candidate_file"]
            self.champion_config = ev.get("candidate_config")
            self.champion_sha256 = ev.get("candidate_sha256")
            self.champion_profile = self.profile_from(ev.get("result") or {})
            self.stand(ev.get("result") or {})
            self.streak = self.since_promotion = 0
        else:
            self.streak += 1
            self.since_promotion += 1
            self.rejections.append({"iteration": ev["iteration"], "verdict": d.get("verdict"),
                                    "reason": d.get("reason"), "note": ev.get("note"),
                                    "config": ev.get("candidate_config")})
            self.rejections = self.rejections[-REJECTIONS_KEPT:]
        self.last_parse_error = (ev.get("proposal") or {}).get("parse_error")
