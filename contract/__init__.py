"""The kernel contract: the allow-list table, the AST walk that judges a kernel file against it, and its wording.

Its face: `check(code, spec)` (reasons, empty when the file may run), `read_config(code)`, `TABLE`,
`markdown()` and `prompt_text(spec)`, all from `contract.rules`.
"""
from contract.rules import TABLE, check, markdown, prompt_text, read_config

__all__ = ["TABLE", "check", "markdown", "prompt_text", "read_config"]
