"""One iteration's first half and whole: the proposal's context (a snapshot of the loop's state),
saving and screening the proposal into its event, and the one-at-a-time propose-screen-time-decide."""
from __future__ import annotations

import time
from pathlib import Path

from kernloop import contract
from kernloop import decision
from kernloop.backends.local import Backend
from kernloop.propose.proposer import Proposal, ProposalContext
from kernloop.spec import Spec

# Proposal failures that are the endpoint's, not the candidate's: verdict failed, never a
# rejected candidate in the next prompt.
LLM_FAILURE_KINDS = {"transport": "LLM transport", "request": "LLM request", "auth": "LLM",
                     "config": "LLM"}


def save_proposal(run_dir: Path, cid: str, prop: Proposal) -> dict:
    files = {}
    for kind, text in (("prompt", prop.prompt), ("response", prop.response)):
        if text is not None:
            rel = f"candidates/{cid}.{kind}.txt"
            (run_dir / rel).write_text(text, encoding="utf-8", errors="backslashreplace")
            files[f"{kind}_file"] = rel
    return files


def proposal_context(n: int, st, spec: Spec, run_dir: Path) -> ProposalContext:
    """What the proposer sees for iteration n: a snapshot of the loop's state now, and the parent
    the search tree chose for it (State.choose)."""
    return ProposalContext(spec=spec, iteration=n, champion_code=(run_dir / st.champion_file).read_text(),
                           champion_id=st.champion_id, champion_profile=st.champion_profile,
                           standing=st.standing,
                           rejections=list(st.rejections), research_notes=st.notes,
                           last_parse_error=st.last_parse_error, last_promoted=st.last_promoted,
                           champion_config=st.champion_config, **st.parent_fields(st.choose(n), run_dir))


def candidate_event(n: int, ctx: ProposalContext, prop: Proposal, spec: Spec, run_dir: Path,
                    t0: float) -> tuple[dict, bool]:
    """Save the proposal and screen it with the contract. Returns (iteration event fields, ready
    to evaluate); an event that is not ready already holds its (invalid) decision."""
    cid = f"it{n:04d}"
    ev = {"iteration": n, "candidate_id": cid, "candidate_file": None,
          "parent_id": ctx.parent_id or ctx.champion_id, "selection": ctx.selection,
          **({"repair_of": ctx.repair["root"], "repair_attempt": ctx.repair["attempt"]} if ctx.repair else {}),
          "proposer": prop.proposer, "model": prop.model, "note": prop.note,
          "proposal": {**prop.meta, **save_proposal(run_dir, cid, prop),
                       "latency_s": prop.meta.get("latency_s", round(time.monotonic() - t0, 3)),
                       "error": prop.error,
                       # only an unusable answer is fed back as a parse error; an HTTP failure is not
                       "parse_error": prop.error if prop.code is None
                       and prop.meta.get("error_kind") == "parse" else None},
          "contract": None, "result": None}
    if prop.code is None:
        who = LLM_FAILURE_KINDS.get(prop.meta.get("error_kind"))
        ev["decision"] = ({"verdict": "failed", "promoted": False, "reason": f"{who}: {prop.error}",
                           "rule": None} if who else
                          {"verdict": "invalid", "promoted": False,
                           "reason": f"no candidate: {prop.error}", "rule": None})
        return ev, False
    # The bytes are made once: the contract judges them, they are the file, their hash names
    # them in the log and to the judge, which refuses any other bytes.
    raw, unencodable = contract.judged_bytes(prop.code)
    rel = f"candidates/{cid}.py"
    (run_dir / rel).write_bytes(raw)
    ev["candidate_file"] = rel
    ev["candidate_sha256"] = contract.digest(raw)
    ev["candidate_config"] = contract.read_config(raw)
    reasons = [unencodable] if unencodable else contract.capped(contract.check, raw, spec)
    ev["contract"] = {"ok": not reasons, "reasons": reasons, "sha256": ev["candidate_sha256"]}
    if reasons:
        ev["decision"] = {"verdict": "invalid", "promoted": False,
                          "reason": "contract: " + "; ".join(reasons[:5]), "rule": None}
        return ev, False
    return ev, True


def evaluate_judged(backend: Backend, spec, candidate, champion, workdir, judged: dict, **kw) -> dict:
    """backend.evaluate of judged files: the hashes the contract judged go to the judge where the
    backend can hand them on (it refuses other bytes), and the result is held to them in every
    case (decision.same_bytes: the judge reports the hash of what it read and ran)."""
    if backend.takes_digests:
        kw["digests"] = judged
    return decision.same_bytes(backend.evaluate(spec, candidate, champion, workdir, **kw), judged)


def run_iteration(n: int, st, spec: Spec, proposer, backend: Backend, run_dir: Path,
                  min_gain: float, sigma: float) -> tuple[dict, bool]:
    """Propose, check the contract, evaluate, decide. Returns (iteration event fields, fatal)."""
    ctx = proposal_context(n, st, spec, run_dir)
    t0 = time.monotonic()
    prop = proposer.propose(ctx)
    ev, ready = candidate_event(n, ctx, prop, spec, run_dir, t0)
    if not ready:
        return ev, prop.fatal
    result = evaluate_judged(backend, spec, run_dir / ev["candidate_file"],
                             None if st.champion_is_torch else run_dir / st.champion_file,
                             run_dir / "jobs" / ev["candidate_id"],
                             {"candidate": ev["candidate_sha256"],
                              "champion": None if st.champion_is_torch else getattr(st, "champion_sha256", None)},
                             configs={"candidate": ev["candidate_config"], "champion": st.champion_config})
    ev["result"] = result
    ev["decision"] = decision.decide(result, min_gain=min_gain, sigma=sigma)
    return ev, False
