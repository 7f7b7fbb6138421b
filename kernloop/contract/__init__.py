"""The kernel contract: the allow-list table, the AST walk that judges a kernel file against it, and its wording.

Its face: `check(code, spec)` (reasons, empty when the file may run), `read_config(code)`, `TABLE`,
`markdown()` and `prompt_text(spec)`, and the judged bytes' `judged_bytes(text)` and `digest(raw)`,
all from `contract.rules`.
"""
from kernloop.contract.rules import TABLE, check, digest, judged_bytes, markdown, prompt_text, read_config

__all__ = ["TABLE", "check", "digest", "judged_bytes", "markdown", "prompt_text", "read_config"]
