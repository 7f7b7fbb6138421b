"""The proposer seam: what every proposer (tuner, Nemotron) takes and returns.

A proposer turns the loop's state into ONE candidate kernel file. It never runs code and
never raises for a bad answer: a failed proposal is a Proposal with code=None and an error.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class ProposalContext:
    spec: Any                      # spec.Spec
    iteration: int                 # 1-based iteration number being proposed
    champion_code: str             # full source of the current champion
    champion_id: str               # e.g. "baseline" or "it0007"
    champion_profile: dict         # {"mean_ms","min_ms","median_ms","std_ms","rel_l2":{...},"roofline":{...}}
    rejections: list[dict] = field(default_factory=list)   # recent failures, newest last:
    #   {"iteration": int, "verdict": str, "reason": str, "note": str, "config": dict | None}
    research_notes: str | None = None   # condensed notes to inject, or None
    last_parse_error: str | None = None  # reason the previous proposal could not be parsed
    last_promoted: bool = False          # the previous iteration's candidate became champion
    champion_config: dict | None = None  # the champion's CONFIG as the log recorded it (parsed once)
    standing: dict | None = None   # briefing.standing(): device, ceilings, peers, profile, diagnosis, synthetic
    # The node the search tree chose to start from (kernloop/loop/tree.py); None: the champion.
    parent_id: str | None = None
    parent_code: str | None = None       # its full source
    parent_config: dict | None = None    # its CONFIG as the log recorded it
    selection: str | None = None         # why the search chose it
    repair: dict | None = None           # a failed candidate of this parent to fix: {of, root, attempt, repairs, error, code}

    @property
    def base_code(self) -> str:
        """The file this proposal starts from: the parent's, else the champion's."""
        return self.champion_code if self.parent_code is None else self.parent_code

    @property
    def base_config(self) -> dict | None:
        return self.champion_config if self.parent_code is None else self.parent_config


@dataclass
class Proposal:
    code: str | None               # the candidate file, or None when the proposal failed
    note: str                      # one line: what changed and why
    proposer: str                  # "tuner" | "nemotron"
    model: str | None = None       # model id, None for the tuner
    error: str | None = None       # why no code (parse failure, HTTP error, exhausted space)
    prompt: str | None = None      # full prompt, saved beside the candidate (LLM only)
    response: str | None = None    # full raw response, saved beside the candidate (LLM only)
    meta: dict = field(default_factory=dict)  # latency_s, tokens, finish_reason, endpoint host...
    fatal: bool = False            # True stops the run (e.g. 401: bad key)


class Proposer(Protocol):
    name: str            # "tuner" | "nemotron"
    model: str | None
    def describe(self) -> dict: ...          # {"proposer","model","endpoint_host"} for logs/page
    def propose(self, ctx: ProposalContext) -> Proposal: ...
