"""A Nebius batch job: B candidates in one container, each timed against the champion by its
own checker process (checker/nebius_batch_entry.py); the files it needs, and the parser of its
tagged output lines (one per candidate, so one candidate's output can never pass for another's).

The tagged line is `KERNLOOP_BATCH <candidate id> <checker exit code> <base64 of its stdout>`;
the checker's stdout is then read by the one result-line parser every backend shares. INFERRED,
not verified on a live account: that Nebius job logs keep a line of a few KiB whole.
"""
from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

from kernloop.backends.local import stage_job
from kernloop.backends.resultline import ResultLineError, parse_result_line


BATCH_MARKER = "KERNLOOP_BATCH "
BATCH_ENTRY = "checker/nebius_batch_entry.py"   # in the shipped package, run as a script


def stage_batch(spec, candidates: list[tuple[str, Path]], champion: Path | None,
                workdir: Path) -> dict[str, Path]:
    """The files of one batch job: the checker package (workdir/checker/, its batch entry
    BATCH_ENTRY among them), spec and champion once (no champion file: the torch reference),
    each candidate as candidate-<id>.py and batch.json (the ids, in order)."""
    workdir = Path(workdir).resolve()
    files = stage_job(spec, None, champion, workdir)
    for cid, path in candidates:
        files[f"candidate-{cid}"] = workdir / f"candidate-{cid}.py"
        shutil.copyfile(path, files[f"candidate-{cid}"])
    files["batch"] = workdir / "batch.json"
    files["batch"].write_text(json.dumps([cid for cid, _ in candidates]), encoding="utf-8")
    return files


def parse_batch_lines(text: str, cids: list[str]) -> dict[str, tuple[dict | None, str]]:
    """{candidate id: (result, problem)} from a batch job's logs (colour codes removed). Each candidate's checker
    output must come exactly once and hold exactly one result line (resultline.py); anything
    else fails that candidate alone, with the reason."""
    seen: dict[str, list[tuple[str, str]]] = {c: [] for c in cids}
    for raw in text.splitlines():
        pos = raw.find(BATCH_MARKER)
        if pos < 0:
            continue
        parts = raw[pos + len(BATCH_MARKER):].split()
        if len(parts) >= 2 and parts[0] in seen:
            seen[parts[0]].append((parts[1], parts[2] if len(parts) > 2 else ""))
    out = {}
    for cid, got in seen.items():
        if not got:
            out[cid] = (None, "no output for this candidate in the job's logs")
            continue
        if len(got) > 1:
            out[cid] = (None, f"{len(got)} outputs for this candidate in the job's logs (expected one)")
            continue
        rc, b64 = got[0]
        try:
            stdout = base64.b64decode(b64, validate=True).decode("utf-8", "replace")
            res = parse_result_line(stdout)
        except (ValueError, ResultLineError) as e:
            out[cid] = (None, f"checker output unusable ({e}; checker exit code {rc})")
            continue
        out[cid] = (res, "" if rc == "0" else f"checker exited {rc} after its result line")
    return out
