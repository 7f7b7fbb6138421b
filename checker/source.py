"""The kernel files' judged bytes: each read once by the judge, held to the contract's hash, and
handed to a worker as bytes (never a path it could re-read)."""
from __future__ import annotations

import hashlib

from .validate import Reject

MAX_SOURCE_BYTES = 1_000_000   # a kernel file; the contract allows far less


def read(args, role: str) -> tuple[bytes, str]:
    """(bytes, sha256) of one side's kernel file, read once. With --<role>-sha256 (the contract's
    verdict on the bytes it checked) other bytes are refused before any worker sees them."""
    try:
        with open(getattr(args, role), "rb") as f:
            raw = f.read(MAX_SOURCE_BYTES + 1)
    except OSError as e:
        raise Reject("load" if role == "candidate" else "harness",
                     f"{role} file cannot be read: {e}") from None
    if len(raw) > MAX_SOURCE_BYTES:
        raise Reject("load" if role == "candidate" else "harness",
                     f"{role} file is over {MAX_SOURCE_BYTES} bytes")
    sha = hashlib.sha256(raw).hexdigest()
    judged = getattr(args, f"{role}_sha256")
    if judged and judged.lower() != sha:
        raise Reject("load" if role == "candidate" else "harness",
                     f"the {role} file is not the one the contract judged (sha256 {sha[:16]} "
                     f"read, {judged[:16]} judged)")
    return raw, sha


def payload(spec: dict, args, role: str, out_dtype: str) -> dict:
    """What a worker loads: the judged bytes of a kernel file (never its path), or the spec's
    reference run by torch (a torch side: `baseline: torch`, never a kernel file)."""
    if getattr(args, f"{role}_torch"):
        return {"torch_side": spec, "out_dtype": out_dtype}
    raw, sha = args.sources[role]
    return {"source": raw, "sha256": sha, "filename": f"<kernloop-{role}-{sha[:16]}>",
            "entry": spec["entry"]}
