"""HTML formatting for the page: tolerant value coercion, number/time formatters, Python highlighting and diffs."""
from __future__ import annotations

import datetime as _dt
import difflib
import json
import math
import re

from markupsafe import Markup, escape


def as_dict(x) -> dict:
    return x if isinstance(x, dict) else {}


def as_list(x) -> list:
    return x if isinstance(x, list) else []


def as_text(x, default: str = "") -> str:
    if x is None:
        return default
    if isinstance(x, str):
        return x
    if isinstance(x, (dict, list)):
        try:
            return json.dumps(x, default=str)
        except (TypeError, ValueError):
            return str(x)
    return str(x)


def num(x):
    """A float for ints/floats/numeric strings (NaN and Inf kept), else None. Bools are not numbers."""
    if isinstance(x, bool) or x is None:
        return None
    if isinstance(x, (int, float)):
        return float(x)
    if isinstance(x, str):
        try:
            return float(x.strip())
        except ValueError:
            return None
    return None


def finite(x):
    v = num(x)
    return v if v is not None and math.isfinite(v) else None


def as_int(x):
    v = finite(x)
    return int(v) if v is not None and v == int(v) else None


def fmt_ms(x) -> str:
    v = num(x)
    if v is None:
        return "—"
    if not math.isfinite(v):
        return "NaN" if math.isnan(v) else ("∞" if v > 0 else "-∞")
    a = abs(v)
    if a == 0:
        return "0"
    if a >= 100:
        return f"{v:.1f}"
    if a >= 10:
        return f"{v:.2f}"
    if a >= 1:
        return f"{v:.3f}"
    if a >= 0.001:
        return f"{v:.4f}"
    return f"{v:.3g}"


def fmt_num(x, digits: int = 4) -> str:
    v = num(x)
    if v is None:
        return "—" if x is None or isinstance(x, (dict, list)) else as_text(x)
    if not math.isfinite(v):
        return "NaN" if math.isnan(v) else ("∞" if v > 0 else "-∞")
    if v == int(v) and abs(v) < 1e15:
        return f"{int(v):,}".replace(",", " ") if abs(v) >= 10_000 else str(int(v))
    return f"{v:.{digits}g}"


def fmt_frac_pct(x, digits: int = 1) -> str:
    """A fraction (0.024) as a percent (2.4%)."""
    v = num(x)
    return fmt_pct(None if v is None else 100 * v, digits)


def fmt_pct(x, digits: int = 1) -> str:
    """A value that already is a percent (61.2) as '61.2%'."""
    v = num(x)
    if v is None:
        return "—"
    if not math.isfinite(v):
        return fmt_num(v)
    return f"{v:.{digits}f}%"


def fmt_speedup(x) -> str:
    v = finite(x)
    if v is None:
        return "—"
    return f"{v:.2f}×" if v < 100 else f"{v:.0f}×"


def fmt_duration(x) -> str:
    v = finite(x)
    if v is None or v < 0:
        return "—"
    if v < 60:
        return f"{v:.1f} s" if v < 10 else f"{v:.0f} s"
    m, s = divmod(int(round(v)), 60)
    if m < 60:
        return f"{m} min {s:02d} s"
    h, m = divmod(m, 60)
    if h < 48:
        return f"{h} h {m:02d} min"
    d, h = divmod(h, 24)
    return f"{d} d {h:02d} h"


def fmt_bool(x) -> str:
    if x is True:
        return "yes"
    if x is False:
        return "no"
    return "—" if x is None else as_text(x)


def parse_ts(x):
    if not isinstance(x, str) or not x:
        return None
    s = x.strip()
    if s.endswith("Z"):
        s = s[:-1] + "+00:00"
    try:
        t = _dt.datetime.fromisoformat(s)
    except ValueError:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=_dt.timezone.utc)
    return t


def fmt_ts(x) -> str:
    t = parse_ts(x)
    if t is None:
        return as_text(x, "—") or "—"
    return t.astimezone(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def fmt_clock(x) -> str:
    t = parse_ts(x)
    return "" if t is None else t.astimezone(_dt.timezone.utc).strftime("%H:%M:%S")


def shape_label(shape) -> str:
    if isinstance(shape, dict):
        if not shape:
            return "—"
        vals = [shape.get(k) for k in ("M", "N", "K") if k in shape]
        if len(vals) == len(shape):
            return "×".join(as_text(v) for v in vals)
        return ", ".join(f"{k}={as_text(v)}" for k, v in shape.items())
    if isinstance(shape, (list, tuple)):
        return "×".join(as_text(v) for v in shape)
    return as_text(shape, "—")


def dom_id(raw, used: set) -> str:
    """A unique, attribute-safe element id. Each id also claims the ids derived from it
    (row-<id>, <id>-prompt, <id>-response), so no two elements on the page ever share one."""
    base = re.sub(r"[^A-Za-z0-9_.-]", "_", as_text(raw)) or "item"
    if not base[0].isalpha():
        base = "i" + base
    if base.startswith("k-"):              # keep clear of the page's own structural ids
        base = "x" + base

    def family(c):
        return (c, f"row-{c}", f"{c}-prompt", f"{c}-response")

    cand, n = base, 2
    while any(f in used for f in family(cand)):
        cand = f"{base}-{n}"
        n += 1
    used.update(family(cand))
    return cand


def clip(text, limit: int):
    """(shown text, omitted character count): long texts keep their head and tail."""
    text = as_text(text)
    if limit <= 0:
        return "", len(text)
    if len(text) <= limit:
        return text, 0
    head = int(limit * 0.7)
    tail = limit - head
    return text[:head] + "\n\n[… %d characters omitted …]\n\n" % (len(text) - limit) + text[-tail:], len(text) - limit


def safe_href(url):
    """Only plain http(s) links are clickable: a log must never smuggle a javascript: URL in."""
    u = as_text(url).strip()
    return u if re.match(r"^https?://[^\s\"'<>]+$", u, re.I) else None



# ----------------------------------------------------------------------------- syntax highlighting

_KEYWORDS = frozenset("""False None True and as assert async await break class continue def del elif else
except finally for from global if import in is lambda nonlocal not or pass raise return try while with
yield match case""".split())
_BUILTINS = frozenset("""abs all any bool dict divmod enumerate float getattr hasattr int isinstance len list
max min print range repr reversed round set slice sorted str sum tuple type zip""".split())
_MODULES = frozenset(("tl", "triton", "torch", "math", "self"))
_TOKEN = re.compile(r"""
    (?P<c>\#.*)
  | (?P<q>[rRbBuUfF]{0,2}(?:\"\"\"|'''))
  | (?P<s>[rRbBuUfF]{0,2}(?:"(?:[^"\\]|\\.)*"?|'(?:[^'\\]|\\.)*'?))
  | (?P<d>@[A-Za-z_][\w.]*)
  | (?P<n>\b(?:0[xXoObB][0-9a-fA-F_]+|\d[\d_]*(?:\.[\d_]*)?(?:[eE][+-]?\d+)?j?)\b|\.\d+(?:[eE][+-]?\d+)?)
  | (?P<w>[A-Za-z_]\w*)
""", re.X)


# The highlighter is linear: no two quantifiers of a token may share characters (the number
# pattern had `\d[\d_]*\.?[\d_]*`, which split a 60,000-digit run followed by a letter every
# possible way: minutes). And bounded: a line over MAX_HL_LINE characters, or a source over
# MAX_HL_CHARS, is shown escaped but not coloured; diff_rows skips a diff over MAX_DIFF_CELLS.
MAX_HL_LINE = 2_000
MAX_HL_CHARS = 250_000
MAX_DIFF_CELLS = 1_000_000


def _span(cls: str, text: str) -> str:
    return f'<span class="{cls}">{escape(text)}</span>'


def highlight_python(src: str) -> list:
    """Highlight Python source line by line (HTML-escaped Markup per line); triple-quoted strings
    spanning lines are tracked, so a docstring is coloured as one string."""
    out = []
    state = None          # the open triple-quote delimiter, or None
    prev_word = ""
    if len(src) > MAX_HL_CHARS:
        return [Markup(str(escape(line))) for line in src.split("\n")]
    for line in src.split("\n"):
        if len(line) > MAX_HL_LINE:   # shown as it is; a triple quote in it is not tracked
            out.append(Markup(_span("s", line) if state is not None else str(escape(line))))
            continue
        parts, pos = [], 0
        if state is not None:
            end = line.find(state)
            if end < 0:
                out.append(Markup(_span("s", line) if line else ""))
                continue
            parts.append(_span("s", line[:end + 3]))
            pos = end + 3
            state = None
        while pos < len(line):
            m = _TOKEN.search(line, pos)
            if m is None:
                parts.append(str(escape(line[pos:])))
                break
            if m.start() > pos:
                parts.append(str(escape(line[pos:m.start()])))
            kind, tok = m.lastgroup, m.group()
            if kind == "q":
                delim = tok[-3:]
                end = line.find(delim, m.end())
                if end < 0:
                    parts.append(_span("s", line[m.start():]))
                    state = delim
                    pos = len(line)
                    continue
                parts.append(_span("s", line[m.start():end + 3]))
                pos = end + 3
                continue
            if kind == "w":
                if tok in _KEYWORDS:
                    parts.append(_span("k", tok))
                elif prev_word in ("def", "class"):
                    parts.append(_span("f", tok))
                elif tok in _BUILTINS:
                    parts.append(_span("b", tok))
                elif tok in _MODULES:
                    parts.append(_span("m", tok))
                else:
                    parts.append(str(escape(tok)))
                prev_word = tok
            else:
                parts.append(_span(kind, tok))
            pos = m.end()
        out.append(Markup("".join(parts)))
    return out


def diff_rows(old: str, new: str, context: int = 3):
    """Unified diff of two sources as highlighted HTML lines: (rows, added, removed)."""
    a, b = old.split("\n"), new.split("\n")
    if a and a[-1] == "":
        a = a[:-1]
    if b and b[-1] == "":
        b = b[:-1]
    if len(a) * len(b) > MAX_DIFF_CELLS:
        return ([f'<span class="l h">no diff: {len(a)} and {len(b)} lines are too many to '
                 'compare on this page</span>'], 0, 0)
    ha, hb = highlight_python(old)[:len(a)], highlight_python(new)[:len(b)]
    sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
    added = removed = 0
    rows = []
    for group in sm.get_grouped_opcodes(context):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        rows.append(f'<span class="l h">@@ -{i1 + 1},{i2 - i1} +{j1 + 1},{j2 - j1} @@</span>')
        for tag, x1, x2, y1, y2 in group:
            if tag == "equal":
                for k in range(x2 - x1):
                    rows.append(f'<span class="l"><i>{x1 + k + 1}</i><i>{y1 + k + 1}</i><i> </i>{ha[x1 + k]}</span>')
                continue
            for k in range(x1, x2):
                removed += 1
                rows.append(f'<span class="l r"><i>{k + 1}</i><i></i><i>-</i>{ha[k]}</span>')
            for k in range(y1, y2):
                added += 1
                rows.append(f'<span class="l a"><i></i><i>{k + 1}</i><i>+</i>{hb[k]}</span>')
    return rows, added, removed


def render_diff(old: str, new: str, max_lines: int, context: int = 3, _rows=None):
    """Unified diff as highlighted HTML, cut at max_lines: (Markup, added, removed, shown, total)."""
    rows, added, removed = _rows if _rows is not None else diff_rows(old, new, context)
    total = len(rows)
    shown = rows[:max_lines] if total > max_lines else rows
    return Markup("".join(shown)), added, removed, len(shown), total


