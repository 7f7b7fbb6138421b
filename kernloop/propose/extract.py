"""Reading the model's answer: exactly one Python file out of a chat reply (reasoning stripped), and its note."""
from __future__ import annotations

import ast
import re

from kernloop.propose.prompt import NOTE_CHARS, clip

# Every pattern here is linear in its input (no two quantifiers that can share characters), and
# the input is capped: a 1 MB answer is read in well under a second, whatever it holds.
_FENCE = re.compile(r"[ \t]{0,3}(`{3,})")
_LANG = re.compile(r"[ \t]*([A-Za-z0-9_+.-]*)")
_PY_TAGS = ("", "python", "py", "python3")
MAX_ANSWER_CHARS = 4_000_000   # more is never one kernel file: refused unread
MAX_CODE_BYTES = 200_000       # contract/texts.py MAX_BYTES: a longer file is refused here already


def _open_fence(line: str):
    """(fence, language tag) when `line` opens a fenced block, else None (CommonMark: an info
    string holds no backtick)."""
    m = _FENCE.match(line)
    if not m or "`" in line[m.end():]:
        return None
    return m.group(1), _LANG.match(line, m.end()).group(1)


def _close_fence(line: str) -> str | None:
    m = _FENCE.match(line)
    return m.group(1) if m and not line[m.end():].strip(" \t") else None


def _drop_think_blocks(content: str) -> str:
    """Remove every closed <think>…</think> block, scanning once (a lazy regex rescanned to the
    end for each unclosed opener: quadratic in an answer full of them)."""
    low, out, pos = content.lower(), [], 0
    while True:
        k = low.find("<think>", pos)
        end = low.find("</think>", k + 7) if k >= 0 else -1
        if k < 0 or end < 0:
            out.append(content[pos:])
            return "".join(out)
        out.append(content[pos:k])
        pos = end + len("</think>")


def _strip_think(content: str) -> tuple[str, bool]:
    """Remove <think>…</think>; returns (answer, had_think)."""
    text = _drop_think_blocks(content)
    had = text != content
    low = text.lower()
    # A chat template that opens <think> in the prompt leaves only the closing tag.
    if "</think>" in low:
        text = text[low.rfind("</think>") + len("</think>"):]
        had = True
    # An unclosed <think>: the answer never left the reasoning.
    k = text.lower().find("<think>")
    if k >= 0:
        text = text[:k]
        had = True
    return text.strip(), had


def _fenced_blocks(text: str) -> list[tuple[str, str, bool]]:
    """(language tag, body, closed) for every ``` block, scanning line by line."""
    blocks, lines, i = [], text.split("\n"), 0
    while i < len(lines):
        m = _open_fence(lines[i])
        i += 1
        if not m:
            continue
        fence, lang, body, closed = m[0], m[1].lower(), [], False
        while i < len(lines):
            c = _close_fence(lines[i])
            i += 1
            if c and len(c) >= len(fence):
                closed = True
                break
            body.append(lines[i - 1])
        blocks.append((lang, "\n".join(body), closed))
    return blocks


def _syntax_error(code: str) -> str | None:
    try:
        ast.parse(code)
    except SyntaxError as e:
        return f"SyntaxError at line {e.lineno}: {e.msg}"
    except ValueError as e:   # e.g. null bytes
        return f"not parseable Python: {e}"
    except (RecursionError, MemoryError) as e:
        return f"not parseable Python: nested too deeply ({type(e).__name__})"
    return None


def extract_code(content: str | None, reasoning: str | None,
                 finish_reason: str | None) -> tuple[str | None, str | None]:
    """(code, None) for a usable answer, else (None, reason). Pure.

    Accepted: one fenced block (```python, ```py or untagged), prose around it tolerated; or
    a bare file that parses. Reasoning (<think> blocks, reasoning_content) is never code.
    """
    if finish_reason == "length":
        return None, ("the answer was cut off at the max_tokens limit (finish_reason=length) "
                      "before the file was complete; answer with the file only, no explanation, "
                      "and keep any reasoning short")
    if finish_reason == "content_filter":
        return None, "the answer was blocked by the server's content filter (finish_reason=content_filter)"
    if content is not None and len(content) > MAX_ANSWER_CHARS:
        return None, (f"the answer is {len(content)} characters long: a kernel file is at most "
                      f"{MAX_CODE_BYTES} bytes; answer with the file only")
    text, had_think = _strip_think((content or "").replace("\r\n", "\n"))
    if not text:
        if had_think:
            return None, "the answer held only reasoning (a <think> block) and no Python file"
        if reasoning and reasoning.strip():
            return None, (f"the answer was empty: only reasoning_content ({len(reasoning)} chars) "
                          "came back; the Python file must be in the answer itself")
        return None, "the answer was empty"
    blocks = _fenced_blocks(text)
    if len(blocks) > 1:
        tags = ", ".join(lang or "untagged" for lang, _, _ in blocks)
        return None, (f"the answer held {len(blocks)} fenced code blocks ({tags}); answer with "
                      "exactly one complete Python file")
    if blocks:
        lang, code, closed = blocks[0]
        if lang not in _PY_TAGS:
            return None, f"the only fenced block is tagged '{lang}', not python"
        if not closed and _syntax_error(code):
            return None, "the code fence was never closed and the text after it is not valid Python"
    else:
        code = text
    if not code.strip():
        return None, "the code block was empty"
    size = len(code.encode("utf-8", errors="surrogatepass"))
    if size > MAX_CODE_BYTES:
        return None, f"the file is {size} bytes long: kernel files are at most {MAX_CODE_BYTES}"
    err = _syntax_error(code)
    if err and not blocks:
        return None, ("no code found: the answer has no ```python block and is not a valid bare "
                      f"Python file ({err})")
    if err:
        return None, f"the fenced block is not valid Python: {err}"
    return code.strip("\n") + "\n", None


def note_from_code(code: str) -> str:
    """The `# NOTE:` line the contract asks for, else the first comment, clipped to one line."""
    comments = []
    for line in code.splitlines()[:15]:
        s = line.strip()
        m = re.match(r"#\s*NOTE:\s*(.+)", s, re.I)
        if m:
            return clip(m.group(1), NOTE_CHARS, one_line=True)
        if s.startswith("#") and not s.startswith("#!") and "coding" not in s:
            comments.append(s.lstrip("#").strip())
    first = next((c for c in comments if c), None)
    return clip(first, NOTE_CHARS, one_line=True) if first else "nemotron proposal (no # NOTE line)"


