"""The second look after the decision: asked of the backend for each promoted candidate (a warm
judge runs it once its GPU is idle, never before the verdict is logged), and logged as one
`sight` event when it lands or is dropped; a landed profile joins the champion's standing, so
the next prompt built after it has it."""
from __future__ import annotations

from pathlib import Path

from kernloop.backends.local import Backend
from kernloop.standing.diagnosis import of_result


def ask(backend: Backend, spec, ev: dict, run_dir: Path) -> bool:
    """After a promotion is logged: ask for its second look where the backend takes it after
    the decision (LocalBackend with the warm judge). False: nothing was asked."""
    if not backend.sight_after or not (ev.get("decision") or {}).get("promoted") \
            or not ev.get("candidate_file"):
        return False
    return bool(backend.second_look(spec, Path(run_dir) / ev["candidate_file"], ev["candidate_id"],
                                    Path(run_dir) / "jobs" / f"{ev['candidate_id']}-sight",
                                    ev.get("result") or {}))


def merged(promoted_result: dict | None, sight_result: dict | None) -> dict:
    """The promotion's result line with the second look's profile (and peers, when it timed
    them) in place: what the prompt's standing and the diagnosis read."""
    out = dict(promoted_result or {})
    for key in ("profile", "peers"):
        if (sight_result or {}).get(key):
            out[key] = sight_result[key]
    return out


def event_fields(s: dict, promoted: dict, cost) -> dict:
    """The `sight` event of one landed or dropped second look (`promoted`: the promotion's
    {iteration, file, result} as the loop's state kept it)."""
    res = s.get("result") or {}
    landed = s.get("status") == "landed" and res.get("ok")
    fields = {"candidate_id": s["candidate_id"], "candidate_file": promoted.get("file"),
              "after_iteration": promoted.get("iteration"), "status": "landed" if landed else "dropped",
              "reason": None if landed else str(res.get("error") or "no second look"),
              "result": res, "diagnosis": None}
    if landed and promoted.get("result"):
        fields["diagnosis"] = of_result(merged(promoted["result"], res), "candidate", cost)
    return fields


def join(backend: Backend, log, st) -> list[dict]:
    """Log every second look that came back since the last call and join a landed one to the
    state (st.see) when its candidate is still the champion. Returns the events written."""
    out = []
    for s in backend.landed():
        fields = event_fields(s, st.promoted.get(s["candidate_id"], {}), st.cost)
        out.append(log.append("sight", **fields))
        st.see(fields)
    return out
