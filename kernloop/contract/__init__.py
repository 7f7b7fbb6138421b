"""The kernel contract: the allow-list table, the AST walk that judges a kernel file against it, and its wording.

Its face: `check(code, spec)` (reasons, empty when the file may run), `read_config(code)`, `TABLE`,
`markdown()` and `prompt_text(spec)`, and the judged bytes' `judged_bytes(text)` and `digest(raw)`,
all from `contract.rules`; `capped(check, code, spec)`, the same check in a child process under
CPU, memory and wall-clock caps (`contract.guard`), which the loop and the CLI call.
"""
from kernloop.contract.guard import capped
from kernloop.contract.rules import TABLE, check, digest, judged_bytes, markdown, prompt_text, read_config

__all__ = ["TABLE", "capped", "check", "digest", "judged_bytes", "markdown", "prompt_text", "read_config"]
