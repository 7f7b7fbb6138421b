"""Pieces of the generated tables (benchmarks/tables.py): a cited JSON, its provenance (the commit that
made or added it), number formats, a Markdown table and a section."""
from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The commit that added each folder's JSON to the repository (JSON written before benchmarks/record.py
# carries none of its own), and the code the session README names where it differs.
ADDED = {"benchmarks/results/": "97d5b5e", "benchmarks/results/session2/": "d6517cb", "benchmarks/results/session3/": "42c1b65",
         "benchmarks/results/session4/call1": "f405b88", "benchmarks/results/session4/call2": "f405b88",
         "benchmarks/results/session4/call3": "f405b88", "benchmarks/results/session4/call4": "f405b88",
         "benchmarks/results/session4/call5": "366d557",
         "benchmarks/results/session25/": "e064cc5", "benchmarks/results/session26/": "dd949bf",
         "benchmarks/results/session28/": "8e5e621"}
CODE = {"benchmarks/results/session4/call1": "0f035ca (before the arena fix)",
        "benchmarks/results/session4/call2": "0f035ca (before the arena fix)",
        "benchmarks/results/session4/call3": "the arena fix (f405b88)", "benchmarks/results/session4/call4": "the arena fix (f405b88)",
        "benchmarks/results/session4/call5": "ef026ff (every timed rep checked)",
        "benchmarks/results/session25/model_block": "e36df85 (the session's README)",
        "benchmarks/results/session26/model_block": "691e2a3 (the session's README)",
        "benchmarks/results/session28/model_block": "28582e8 (the session's README)"}
def load(rel: str) -> dict:
    return json.loads((ROOT / rel).read_text())


# JSON whose record names the wrong commit (a device's stale .git): the code that ran, from the
# session's README.
RAN_ON = {"benchmarks/results/session5/aa_jobs_softmax.json": "935650a"}


def provenance(rel: str) -> str:
    """'`benchmarks/results/x.json` (commit 1a2b3c4, dirty: no)' from its record, else the commit that
    added it to the repository."""
    rec = load(rel).get("record") or {}
    if rel in RAN_ON:
        return f"`{rel}` (made by commit {RAN_ON[rel]}: `{rec.get('command', '?')}`)"
    if rec.get("commit"):
        dirty = {True: ", uncommitted changes", False: "", None: ""}[rec.get("dirty")]
        return f"`{rel}` (made by commit {rec['commit'][:10]}{dirty}: `{rec.get('command', '?')}`)"
    key = max((k for k in ADDED if rel.startswith(k)), key=len)
    code = next((v for k, v in CODE.items() if rel.startswith(k)), None)
    return f"`{rel}` (added in commit {ADDED[key]}" + (f"; code: {code}" if code else "") + ")"


def ms(x) -> str:
    return "—" if x is None else f"{x:.4f} ms"


def pct(x, d=2) -> str:
    return "—" if x is None else f"{x * 100:+.{d}f}%"


def clip(text: str, n: int = 110) -> str:
    text = " ".join(str(text).split()).replace("|", "/")
    return text if len(text) <= n else text[: n - 1].rstrip() + "…"


def md_table(header: list[str], rows: list[list[str]]) -> str:
    return "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
                     + ["| " + " | ".join(r) + " |" for r in rows])


def section(title: str, sources: list[str], intro: str, table: str, after: str = "") -> str:
    src = "Source: " + "; ".join(provenance(s) for s in sources) + "."
    return "\n\n".join(x for x in (f"## {title}", intro, src, table, after) if x)
