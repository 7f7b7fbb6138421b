"""What the model is told: the bounded chat prompt (spec, champion, where it stands, rejections, notes, contract)."""
from __future__ import annotations

import json
import math
from typing import Any, Mapping

from kernloop.standing import briefing
from kernloop import contract
from kernloop.propose.proposer import ProposalContext

CHARS_PER_TOKEN = 3.5            # rough: code and English average 3.5-4 chars a token
MAX_REJECTIONS = 8               # history bound before the token budget even applies
REJECTION_REASON_CHARS = 600
PARSE_ERROR_CHARS = 600
NOTE_CHARS = 200                 # a proposer's note, one line

# The contract, verbatim in every system prompt (never shortened): the answer format, then the
# allow-list worded from contract.TABLE.
CONTRACT = """\
CONTRACT (a candidate that breaks it is rejected before it runs):
1. Answer with ONE complete Python file and nothing else: a single ```python fenced block,
   or the bare file. No second code block, no diff, no "..." placeholders, no omitted parts.
2. The first line of the file is a comment `# NOTE: <one line: what you changed and why>`.
""" + contract.prompt_text()   # the allow-list, worded from contract.TABLE

SYSTEM_ROLE = ("You are an expert GPU performance engineer who writes Triton kernels. "
               "You improve a kernel file so that it runs faster on the same GPU while "
               "staying numerically correct.")


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def messages_tokens(messages: list[dict]) -> int:
    return sum(estimate_tokens(m["content"]) + 4 for m in messages)   # +4: role framing


def clip(text: str, limit: int, one_line: bool = False) -> str:
    text = " ".join(str(text).split()) if one_line else str(text).strip()
    return text if len(text) <= limit else text[: limit - 15].rstrip() + " …[truncated]"


def _fmt_shape(shape: Any) -> str:
    if isinstance(shape, Mapping):
        return ", ".join(f"{k}={v}" for k, v in shape.items())
    return str(shape)


def _spec_section(spec: Any) -> str:
    g = lambda name, default=None: getattr(spec, name, default)   # duck-typed spec.Spec
    lines = [f"## Task: {g('name', '?')}"]
    if g("description"):
        lines.append(str(g("description")).strip())
    lines.append(f"Entry function: `{g('entry', '?')}` (keep its name and signature).")
    lines.append(f"Dtype: {g('dtype', '?')}. Correctness: rel-L2 error <= {g('tolerance', '?')} "
                 "against a float32 reference, on every shape.")
    inputs = g("inputs") or []
    if inputs:
        lines.append("Inputs, in order:")
        for inp in inputs:
            d = inp if isinstance(inp, Mapping) else vars(inp)
            shape = d.get("shape", "?")
            shape = f"[{', '.join(map(str, shape))}]" if isinstance(shape, (list, tuple)) else shape
            lines.append(f"  - {d.get('name', '?')}: shape {shape}, "
                         f"dtype {d.get('dtype', g('dtype', '?'))}")
    shapes = list(g("shapes") or [])
    if shapes:
        lines.append(f"Timed shape: {_fmt_shape(shapes[0])}")
        if len(shapes) > 1:
            lines.append("Also checked for correctness (odd sizes must work, mask them): "
                         + "; ".join(_fmt_shape(s) for s in shapes[1:]))
    return "\n".join(lines)


def _fmt_value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (dict, list)):
        return json.dumps(v, default=str, sort_keys=True)
    return str(v)


def _profile_section(champion_id: str, profile: Mapping, synthetic: bool = False) -> str:
    lines = [f"## Champion `{champion_id}`: "
             + ("MODELED times (synthetic run, not measured)" if synthetic else "measured profile")]
    timing = [f"{k[:-3]} {_fmt_value(profile[k])} ms"
              for k in ("mean_ms", "min_ms", "median_ms", "std_ms") if profile.get(k) is not None]
    if timing:
        lines.append("Time: " + ", ".join(timing))
    for key, label in (("roofline", "% of roofline"), ("rel_l2", "rel-L2 per shape")):
        if profile.get(key) is not None:
            lines.append(f"{label}: {_fmt_value(profile[key])}")
    for k, v in profile.items():   # anything else the checker reported, as given
        if k not in ("mean_ms", "min_ms", "median_ms", "std_ms", "roofline", "rel_l2"):
            lines.append(f"{k}: {_fmt_value(v)}")
    return "\n".join(lines)


def _rejections_section(rejections: list[dict], omitted: int) -> str:
    if not rejections and not omitted:
        return ""
    lines = ["## Recent rejected candidates (newest last): do not repeat these"]
    if omitted:
        lines.append(f"({omitted} older rejection(s) omitted)")
    for r in rejections:
        note = clip(r.get("note") or "", NOTE_CHARS, one_line=True)
        lines.append(f"- iteration {r.get('iteration', '?')} [{r.get('verdict', '?')}]"
                     + (f" tried: {note}" if note else "")
                     + (f"\n  CONFIG: {json.dumps(r['config'], sort_keys=True)}" if r.get("config") else "")
                     + f"\n  reason: {clip(r.get('reason') or '?', REJECTION_REASON_CHARS)}")
    return "\n".join(lines)


def _system_message(reasoning_line: str | None) -> dict:
    head = f"{reasoning_line}\n\n" if reasoning_line else ""
    return {"role": "system", "content": f"{head}{SYSTEM_ROLE}\n\n{CONTRACT}"}


def _user_message(ctx: ProposalContext, rejections: list[dict], omitted: int,
                  notes: str | None) -> dict:
    parts = [_spec_section(ctx.spec), _profile_section(ctx.champion_id, ctx.champion_profile or {},
                                                          bool((ctx.standing or {}).get("synthetic")))]
    where = briefing.section(**(ctx.standing or {}))   # device, ceilings, peers, diagnosis; MODELED
    if where:
        parts.append(where)
    rej = _rejections_section(rejections, omitted)
    if rej:
        parts.append(rej)
    if notes:
        parts.append("## Research notes (may help; verify against the contract)\n" + notes.strip())
    if ctx.last_parse_error:
        parts.append("## Your previous answer could not be used\n"
                     f"Reason: {clip(ctx.last_parse_error, PARSE_ERROR_CHARS)}\n"
                     "Follow the answer format in the contract exactly.")
    parts.append(_base_section(ctx))
    if ctx.repair:
        parts.append(_repair_section(ctx.repair))
    parts.append(f"## Your task (iteration {ctx.iteration})\n"
                 "Write a faster version of this file, correct on every shape. Answer with the "
                 "complete Python file only, starting with the `# NOTE:` line, as the contract "
                 "says.")
    return {"role": "user", "content": "\n\n".join(parts)}


def _base_section(ctx: ProposalContext) -> str:
    """The file to improve: the champion, or the parent the search tree chose (it says why)."""
    if ctx.parent_id is None or ctx.parent_id == ctx.champion_id:
        return (f"## Champion code (`{ctx.champion_id}`), the file to improve\n"
                f"```python\n{ctx.champion_code.rstrip()}\n```")
    return (f"## Parent code (`{ctx.parent_id}`), the file to improve\n"
            f"The search chose this earlier candidate, not the champion `{ctx.champion_id}`, as the "
            f"start ({clip(ctx.selection or '', NOTE_CHARS, one_line=True)}). Your file is still "
            f"timed against the champion.\n```python\n{ctx.base_code.rstrip()}\n```")


def _repair_section(repair: dict) -> str:
    """A failed candidate written from this parent, with its error: fix it (a repair, at most R)."""
    return (f"## Repair {repair.get('attempt')}/{repair.get('repairs')}: your candidate `{repair.get('of')}`, "
            f"written from the file above, failed\nError: {clip(repair.get('error') or '?', REJECTION_REASON_CHARS)}\n"
            f"```python\n{clip(repair.get('code') or '', FAILED_ANSWER_CHARS).rstrip()}\n```\n"
            "Keep its idea and make it compile, run and match the reference on every shape.")


def build_prompt(ctx: ProposalContext, budget_tokens: int,
                 reasoning_line: str | None = None) -> list[dict]:
    """The chat messages for one proposal, within budget_tokens (estimated).

    What shrinks to fit, in order: the oldest rejections, then the research notes (halved,
    then dropped). The contract, the spec, the profile and the champion code are never cut;
    if they alone exceed the budget the prompt goes out over budget (the caller logs it).
    """
    system = _system_message(reasoning_line)
    rejections = list(ctx.rejections or [])[-MAX_REJECTIONS:]
    omitted = len(ctx.rejections or []) - len(rejections)
    notes = (ctx.research_notes or "").strip() or None

    def render() -> list[dict]:
        return [system, _user_message(ctx, rejections, omitted, notes)]

    msgs = render()
    while messages_tokens(msgs) > budget_tokens:
        if rejections:
            rejections.pop(0)     # history goes first, oldest first
            omitted += 1
        elif notes and len(notes) > 400:
            notes = notes[: len(notes) // 2].rstrip() + "\n…[notes truncated to fit]"
        elif notes:
            notes = None
        else:
            break                 # only the untouchable parts remain
        msgs = render()
    return msgs


FAILED_ANSWER_CHARS = 24000     # the failed answer replayed as the assistant's turn


def repair_messages(failed_answer: str | None, reason: str) -> list[dict]:
    """The failed answer as the assistant's turn (so the model sees what it wrote), then the
    repair request."""
    said = clip(failed_answer, FAILED_ANSWER_CHARS) if failed_answer and failed_answer.strip() \
        else "(an empty answer)"
    return [{"role": "assistant", "content": said}, repair_message(reason)]


def repair_message(reason: str) -> dict:
    """The immediate follow-up after an unparseable answer."""
    return {"role": "user", "content":
            f"Your answer could not be used: {clip(reason, PARSE_ERROR_CHARS)}\n"
            "Reply again with ONE complete Python file and nothing else (a single ```python "
            "block or the bare file), starting with the `# NOTE:` line. Follow the contract."}


def render_messages(messages: list[dict]) -> str:
    """Plain-text transcript of what was sent, for the file saved beside the candidate."""
    return "\n\n".join(f"### {m['role']}\n{m['content']}" for m in messages) + "\n"


