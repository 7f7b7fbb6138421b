"""The trajectory page: one run folder's JSONL log rendered into one self-contained HTML file.

    python page.py RUN_DIR                         re-render RUN_DIR/trajectory.html
    python page.py RUNS_DIR --index                render every run under RUNS_DIR and RUNS_DIR/index.html
    python page.py RUN_DIR --index                 re-render the run, then the index of its parent folder
    python page.py --screenshot RUN_DIR out.png    re-render, then screenshot it with headless Chromium

The page is built from `run.jsonl` ALONE plus the files it names inside the run folder
(`baseline.py`, `candidates/<id>.py`, `candidates/<id>.prompt.txt` / `.response.txt`). Inline CSS,
inline SVG and a little inline JS: it opens from the file system and makes no network request.
While the log has no `run_end` the page carries a meta refresh, so an open tab is a live view.

Every field of every event may be missing, null or of the wrong type (failed candidates, older
logs, a torn last line): the page still renders and says what it could not show.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import difflib
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import quote

import jinja2
from markupsafe import Markup, escape

HERE = Path(__file__).resolve().parent
TEMPLATES = HERE / "templates"
LOG_NAME = "run.jsonl"
PAGE_NAME = "trajectory.html"
INDEX_NAME = "index.html"
REFRESH_S = 5
STRICT = False            # tests flip this on: a template typo then fails loudly instead of rendering ""

# The page must stay under 2 MB for a 100-iteration run. Inline text (prompts, responses, diffs,
# notes) is the only part that grows without bound, so it is rendered at the most generous level
# that fits SIZE_BUDGET; the full texts are always one click away in the run folder.
SIZE_BUDGET = 1_800_000
LEVELS = (
    dict(prompt=16_000, response=16_000, diff_lines=400, text=8_000),
    dict(prompt=8_000, response=8_000, diff_lines=200, text=4_000),
    dict(prompt=4_000, response=4_000, diff_lines=120, text=2_000),
    dict(prompt=2_000, response=2_000, diff_lines=80, text=1_200),
    dict(prompt=800, response=800, diff_lines=50, text=800),
    dict(prompt=0, response=0, diff_lines=24, text=400),
)
MAX_FILE_BYTES = 4_000_000

VERDICTS = ("promoted", "rejected", "incorrect", "failed", "invalid")
VERDICT_HELP = {
    "promoted": "correct and significantly faster: became the champion",
    "rejected": "correct but not faster by min_gain, or not significant",
    "incorrect": "output outside tolerance (or NaN/Inf, wrong shape/dtype)",
    "failed": "proposal, load, compile or run failed",
    "invalid": "broke the code contract: never run",
    "unknown": "no decision recorded",
}


# ----------------------------------------------------------------------------- small helpers

def _d(x) -> dict:
    return x if isinstance(x, dict) else {}


def _l(x) -> list:
    return x if isinstance(x, list) else []


def _s(x, default: str = "") -> str:
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


def _num(x):
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


def _finite(x):
    v = _num(x)
    return v if v is not None and math.isfinite(v) else None


def _int(x):
    v = _finite(x)
    return int(v) if v is not None and v == int(v) else None


def fmt_ms(x) -> str:
    v = _num(x)
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
    v = _num(x)
    if v is None:
        return "—" if x is None or isinstance(x, (dict, list)) else _s(x)
    if not math.isfinite(v):
        return "NaN" if math.isnan(v) else ("∞" if v > 0 else "-∞")
    if v == int(v) and abs(v) < 1e15:
        return f"{int(v):,}".replace(",", " ") if abs(v) >= 10_000 else str(int(v))
    return f"{v:.{digits}g}"


def fmt_frac_pct(x, digits: int = 1) -> str:
    """A fraction (0.024) as a percent (2.4%)."""
    v = _num(x)
    if v is None:
        return "—"
    if not math.isfinite(v):
        return fmt_num(v)
    return f"{100 * v:.{digits}f}%"


def fmt_pct(x, digits: int = 1) -> str:
    """A value that already is a percent (61.2) as '61.2%'."""
    v = _num(x)
    if v is None:
        return "—"
    if not math.isfinite(v):
        return fmt_num(v)
    return f"{v:.{digits}f}%"


def fmt_speedup(x) -> str:
    v = _finite(x)
    if v is None:
        return "—"
    return f"{v:.2f}×" if v < 100 else f"{v:.0f}×"


def fmt_duration(x) -> str:
    v = _finite(x)
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
    return "—" if x is None else _s(x)


def _parse_ts(x):
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
    t = _parse_ts(x)
    if t is None:
        return _s(x, "—") or "—"
    return t.astimezone(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def fmt_clock(x) -> str:
    t = _parse_ts(x)
    return "" if t is None else t.astimezone(_dt.timezone.utc).strftime("%H:%M:%S")


def shape_label(shape) -> str:
    if isinstance(shape, dict):
        if not shape:
            return "—"
        vals = [shape.get(k) for k in ("M", "N", "K") if k in shape]
        if len(vals) == len(shape):
            return "×".join(_s(v) for v in vals)
        return ", ".join(f"{k}={_s(v)}" for k, v in shape.items())
    if isinstance(shape, (list, tuple)):
        return "×".join(_s(v) for v in shape)
    return _s(shape, "—")


def _dom_id(raw, used: set) -> str:
    """A unique, attribute-safe element id. Each id also claims the ids derived from it
    (row-<id>, <id>-prompt, <id>-response), so no two elements on the page ever share one."""
    base = re.sub(r"[^A-Za-z0-9_.-]", "_", _s(raw)) or "item"
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


def _clip(text, limit: int):
    """(shown text, omitted character count): long texts keep their head and tail."""
    text = _s(text)
    if limit <= 0:
        return "", len(text)
    if len(text) <= limit:
        return text, 0
    head = int(limit * 0.7)
    tail = limit - head
    return text[:head] + "\n\n[… %d characters omitted …]\n\n" % (len(text) - limit) + text[-tail:], len(text) - limit


def _safe_href(url):
    """Only plain http(s) links are clickable: a log must never smuggle a javascript: URL in."""
    u = _s(url).strip()
    return u if re.match(r"^https?://[^\s\"'<>]+$", u, re.I) else None


# ----------------------------------------------------------------------------- reading the run

def read_log(path: Path):
    """Tolerant reader: (events, warnings). Bad lines are skipped and reported, never fatal."""
    events, warnings = [], []
    try:
        raw = Path(path).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return events, [f"{LOG_NAME} not found: nothing has been logged yet"]
    except OSError as e:
        return events, [f"could not read {LOG_NAME}: {e}"]
    lines = raw.split("\n")
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                warnings.append(f"line {i + 1} is torn (the run was killed mid-write): ignored")
            else:
                warnings.append(f"line {i + 1} is not valid JSON: skipped")
            continue
        if not isinstance(obj, dict):
            warnings.append(f"line {i + 1} is not a JSON object: skipped")
            continue
        events.append(obj)
    return events, warnings


class _Files:
    """Reads files named by the log, only inside the run folder, each at most once per render."""

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        try:
            self.root = self.run_dir.resolve()
        except OSError:
            self.root = self.run_dir.absolute()
        self._cache: dict = {}

    def path(self, rel):
        if not isinstance(rel, str) or not rel.strip() or "\x00" in rel:
            return None
        key = ("path", rel)
        if key not in self._cache:
            try:
                p = (self.run_dir / rel).resolve()
                p.relative_to(self.root)
                self._cache[key] = p if p.is_file() else None
            except (OSError, ValueError, RuntimeError):
                self._cache[key] = None
        return self._cache[key]

    def text(self, rel):
        p = self.path(rel)
        if p is None:
            return None
        if p not in self._cache:
            try:
                with open(p, "rb") as f:
                    data = f.read(MAX_FILE_BYTES + 1)
                txt = data[:MAX_FILE_BYTES].decode("utf-8", errors="replace")
                if len(data) > MAX_FILE_BYTES:
                    txt += "\n[… file truncated at %d bytes …]\n" % MAX_FILE_BYTES
                self._cache[p] = txt
            except OSError:
                self._cache[p] = None
        return self._cache[p]

    def diff(self, old_rel, new_rel):
        """diff_rows of two files named by the log, computed once per render."""
        key = ("diff", self.path(old_rel), self.path(new_rel))
        if key not in self._cache:
            old, new = self.text(old_rel), self.text(new_rel)
            self._cache[key] = diff_rows(old, new) if old is not None and new is not None else ([], 0, 0)
        return self._cache[key]

    def href(self, rel):
        p = self.path(rel)
        if p is None:
            return None
        return quote(p.relative_to(self.root).as_posix())


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
  | (?P<n>\b(?:0[xXoObB][0-9a-fA-F_]+|\d[\d_]*\.?[\d_]*(?:[eE][+-]?\d+)?j?)\b|\.\d+(?:[eE][+-]?\d+)?)
  | (?P<w>[A-Za-z_]\w*)
""", re.X)


def _span(cls: str, text: str) -> str:
    return f'<span class="{cls}">{escape(text)}</span>'


def highlight_python(src: str) -> list:
    """Highlight Python source line by line (HTML-escaped Markup per line); triple-quoted strings
    spanning lines are tracked, so a docstring is coloured as one string."""
    out = []
    state = None          # the open triple-quote delimiter, or None
    prev_word = ""
    for line in src.split("\n"):
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


# ----------------------------------------------------------------------------- the view model

def _stats_rows(cand, champ):
    cand, champ = _d(cand), _d(champ)
    rows = []
    for key, label in (("mean_ms", "mean"), ("min_ms", "min"), ("median_ms", "median"), ("std_ms", "std")):
        rows.append((label + " (ms)", fmt_ms(cand.get(key)) if cand else "—", fmt_ms(champ.get(key)) if champ else "—"))
    for key in ("n", "warmup"):
        rows.append((key, fmt_num(cand.get(key)) if cand else "—", fmt_num(champ.get(key)) if champ else "—"))
    return rows


def _roof_rows(roof):
    roof = _d(roof)
    c, h = _d(roof.get("candidate")), _d(roof.get("champion"))
    if not c and not h:
        return []
    return [
        ("TFLOP/s", fmt_num(c.get("tflops")) if c else "—", fmt_num(h.get("tflops")) if h else "—"),
        ("GB/s", fmt_num(c.get("gbps")) if c else "—", fmt_num(h.get("gbps")) if h else "—"),
        ("% of peak FLOP/s", fmt_pct(c.get("pct_flops")) if c else "—", fmt_pct(h.get("pct_flops")) if h else "—"),
        ("% of peak bandwidth", fmt_pct(c.get("pct_bw")) if c else "—", fmt_pct(h.get("pct_bw")) if h else "—"),
        ("bound", _s(c.get("bound"), "—") if c else "—", _s(h.get("bound"), "—") if h else "—"),
    ]


def _roof_headline(r):
    """'61.6% of peak FLOP/s' for the side that bounds the kernel."""
    r = _d(r)
    pf, pb = _finite(r.get("pct_flops")), _finite(r.get("pct_bw"))
    bound = _s(r.get("bound")).lower()
    if pf is None and pb is None:
        return None
    if bound.startswith("mem") or bound.startswith("band") or (not bound.startswith("comp") and (pb or 0) > (pf or 0)):
        main = (fmt_pct(pb), "of peak bandwidth") if pb is not None else (fmt_pct(pf), "of peak FLOP/s")
    else:
        main = (fmt_pct(pf), "of peak FLOP/s") if pf is not None else (fmt_pct(pb), "of peak bandwidth")
    return {"value": main[0], "what": main[1], "bound": _s(r.get("bound")),
            "detail": f"{fmt_pct(pf)} FLOP/s · {fmt_pct(pb)} bandwidth"
                      + (f" · {fmt_num(r.get('tflops'))} TFLOP/s" if _finite(r.get("tflops")) is not None else "")}


def _rel_rows(result):
    result = _d(result)
    rel = result.get("rel_l2")
    tol = result.get("tolerance")
    tol = _finite(tol.get("rel_l2") if isinstance(tol, dict) else tol)
    rows = []
    items = rel.items() if isinstance(rel, dict) else (enumerate(rel) if isinstance(rel, list) else [])
    for shape, val in items:
        v = _num(val)
        ok = None
        if v is not None and tol is not None:
            ok = math.isfinite(v) and v <= tol
        elif v is not None and not math.isfinite(v):
            ok = False
        rows.append({"shape": _s(shape).replace("x", "×") if isinstance(shape, str) else _s(shape),
                     "value": fmt_num(v, 3) if v is not None else _s(val, "—"), "ok": ok})
    return rows, tol


def _verdict(decision, promoted_flag):
    v = _s(_d(decision).get("verdict")).strip().lower()
    if v in VERDICTS:
        return v
    if promoted_flag is True:
        return "promoted"
    return "unknown"


def _config_text(v) -> str:
    if isinstance(v, dict):
        return ", ".join(f"{_s(k)}={_s(x)}" for k, x in v.items())
    return _s(v)


def _text_block(files: _Files, rel, limit: int):
    txt = files.text(rel)
    if txt is None:
        return None
    shown, omitted = _clip(txt, limit)
    return {"text": shown, "omitted": omitted, "size": len(txt), "href": files.href(rel), "name": _s(rel)}


def _build_iteration(ev, idx, ctx):
    files, lim, used = ctx["files"], ctx["limits"], ctx["used"]
    n = _int(ev.get("iteration"))
    cid = _s(ev.get("candidate_id")).strip() or (f"it{n:04d}" if n is not None else f"event{idx}")
    dom = _dom_id(cid, used)
    decision = _d(ev.get("decision"))
    rule = _d(decision.get("rule"))
    result = ev.get("result") if isinstance(ev.get("result"), dict) else None
    res = _d(result)
    contract = ev.get("contract") if isinstance(ev.get("contract"), dict) else None
    proposal = _d(ev.get("proposal"))
    verdict = _verdict(decision, decision.get("promoted"))
    cand_stats, champ_stats = _d(res.get("candidate")), _d(res.get("champion"))
    cand_ms = _finite(cand_stats.get("mean_ms"))
    if cand_ms is None:
        cand_ms = _finite(rule.get("cand_mean_ms"))
    champ_ms = _finite(champ_stats.get("mean_ms"))
    if champ_ms is None:
        champ_ms = _finite(rule.get("champ_mean_ms"))
    gain = _num(rule.get("gain"))
    if gain is None and cand_ms is not None and champ_ms:
        gain = (champ_ms - cand_ms) / champ_ms
    cand_std = _finite(cand_stats.get("std_ms"))

    parent = _s(ev.get("parent_id")).strip() or None
    cand_file = ev.get("candidate_file") if isinstance(ev.get("candidate_file"), str) else None
    if files.path(cand_file) is None and files.path(f"candidates/{cid}.py") is not None:
        cand_file = f"candidates/{cid}.py"
    parent_file = ctx["file_of"].get(parent) if parent else None
    if parent and files.path(parent_file) is None:
        for guess in ((f"candidates/{parent}.py",) + (("baseline.py",) if parent == "baseline" else ())):
            if files.path(guess) is not None:
                parent_file = guess
                break
    ctx["file_of"][cid] = cand_file

    diff = None
    new_src = files.text(cand_file)
    old_src = files.text(parent_file)
    if new_src is not None and old_src is not None:
        body, added, removed, shown, total = render_diff(old_src, new_src, lim["diff_lines"],
                                                         _rows=files.diff(parent_file, cand_file))
        diff = {"html": body, "added": added, "removed": removed, "shown": shown, "total": total,
                "identical": added == 0 and removed == 0}
    if new_src is None:
        diff_note = "no candidate file (the proposal produced no code)" if not cand_file else \
            f"candidate file {cand_file} is missing from the run folder"
    elif old_src is None:
        diff_note = f"parent {parent or '?'}: its file is not in the run folder, so there is no diff"
    else:
        diff_note = ""

    rule_rows = []
    if rule:
        sig_ms = _num(rule.get("significance_ms"))
        delta = _num(rule.get("delta_ms"))
        if delta is None and cand_ms is not None and champ_ms is not None:
            delta = champ_ms - cand_ms
        rule_rows = [
            ("candidate mean", fmt_ms(rule.get("cand_mean_ms")) + " ms", None),
            ("champion mean (same job)", fmt_ms(rule.get("champ_mean_ms")) + " ms", None),
            ("gain", fmt_frac_pct(gain), None if gain is None or _num(rule.get("min_gain")) is None
             else gain > _num(rule.get("min_gain"))),
            ("min_gain (threshold)", fmt_frac_pct(rule.get("min_gain")), None),
            ("Δ = champion − candidate", fmt_ms(delta) + " ms", None),
            ("significance (%sσ)" % fmt_num(rule.get("sigma"), 3) if rule.get("sigma") is not None else "significance",
             fmt_ms(sig_ms) + " ms", None),
            ("significant (Δ > significance)", fmt_bool(rule.get("significant")),
             rule.get("significant") if isinstance(rule.get("significant"), bool) else None),
            ("n (timed reps each)", fmt_num(rule.get("n")), None),
        ]
        if rule.get("threshold_ms") is not None:
            rule_rows.insert(4, ("threshold = champion × (1 − min_gain)", fmt_ms(rule.get("threshold_ms")) + " ms", None))
        if rule.get("require_significance") is not None:
            rule_rows.append(("significance required", fmt_bool(rule.get("require_significance")), None))
        known = {"cand_mean_ms", "champ_mean_ms", "gain", "min_gain", "delta_ms", "significance_ms", "sigma",
                 "significant", "n", "threshold_ms", "require_significance"}
        for k, v in rule.items():
            if k in known:
                continue
            if isinstance(v, bool) or v is None:
                val = fmt_bool(v)
            elif _num(v) is not None and not isinstance(v, str):
                val = fmt_ms(v) + " ms" if _s(k).endswith("_ms") else fmt_num(v)
            else:
                val = _clip(_s(v), 200)[0]
            rule_rows.append((_s(k), val, None))

    rel_rows, tol = _rel_rows(result)

    prop_rows = []
    for key, label, fmt in (("latency_s", "latency", lambda v: fmt_num(v, 3) + " s" if _num(v) is not None else "—"),
                            ("prompt_tokens", "prompt tokens", fmt_num),
                            ("completion_tokens", "completion tokens", fmt_num),
                            ("finish_reason", "finish reason", lambda v: _s(v, "—")),
                            ("config", "config", lambda v: _clip(_config_text(v), 400)[0])):
        if proposal.get(key) is not None:
            prop_rows.append((label, fmt(proposal.get(key))))

    checker_rows = []
    if result is not None:
        for key, label in (("ok", "ok"), ("stage", "stage"), ("correct", "correct"), ("mode", "mode"),
                           ("check_dtype", "check dtype"), ("draws", "input draws"), ("backend", "backend"),
                           ("device", "device"), ("timing_model", "timing model"), ("ceilings", "peak"),
                           ("wall_s", "wall time")):
            v = res.get(key)
            if v is None:
                continue
            if key == "wall_s":
                checker_rows.append((label, fmt_duration(v)))
            elif key == "ceilings" and isinstance(v, dict):
                parts = [f"{fmt_num(v.get('tflops'))} TFLOP/s" if v.get("tflops") is not None else "",
                         f"{fmt_num(v.get('gbps'))} GB/s" if v.get("gbps") is not None else "",
                         _s(v.get("match")), _s(v.get("source"))]
                checker_rows.append((label, _clip(" · ".join(x for x in parts if x), 300)[0]))
            elif isinstance(v, bool):
                checker_rows.append((label, fmt_bool(v)))
            else:
                checker_rows.append((label, _clip(_s(v), 300)[0]))
        meta = _d(res.get("backend_meta"))
        for k, v in list(meta.items())[:12]:
            checker_rows.append((f"backend · {_s(k)}", _clip(_s(v), 300)[0]))

    errors = []
    for label, val in (("proposal error", proposal.get("error")), ("parse error", proposal.get("parse_error")),
                       ("checker error", res.get("error"))):
        if val not in (None, "", False):
            errors.append({"label": label, "text": _clip(_s(val), lim["text"])[0]})

    reasons = [_clip(_s(r), 600)[0] for r in _l(_d(contract).get("reasons"))] if contract else []
    if contract and not reasons and isinstance(_d(contract).get("reasons"), str):
        reasons = [_d(contract)["reasons"]]

    return {
        "kind": "iteration", "n": n, "label": f"#{n}" if n is not None else "#?",
        "cid": cid, "dom": dom, "parent": parent, "parent_dom": ctx["dom_of"].get(parent),
        "verdict": verdict, "verdict_label": _s(decision.get("verdict")).strip() or verdict,
        "promoted": verdict == "promoted",
        "reason": _clip(_s(decision.get("reason")), lim["text"])[0],
        "note": _clip(_s(ev.get("note")), lim["text"])[0],
        "proposer": _s(ev.get("proposer")), "model": _s(ev.get("model")),
        "cand_ms": cand_ms, "champ_ms": champ_ms, "cand_std": cand_std, "gain": gain,
        "significant": rule.get("significant") if isinstance(rule.get("significant"), bool) else None,
        "timing_rows": _stats_rows(cand_stats, champ_stats) if (cand_stats or champ_stats) else [],
        "roof_rows": _roof_rows(res.get("roofline")),
        "rule_rows": rule_rows, "rel_rows": rel_rows, "tolerance": tol,
        "rel_mode": _s(res.get("mode")),
        "contract": None if contract is None else {"ok": _d(contract).get("ok"), "reasons": reasons},
        "checker_rows": checker_rows, "errors": errors, "has_result": result is not None,
        "prop_rows": prop_rows,
        "prompt": _text_block(files, proposal.get("prompt_file"), lim["prompt"]),
        "response": _text_block(files, proposal.get("response_file"), lim["response"]),
        "diff": diff, "diff_note": diff_note,
        "cand_href": files.href(cand_file), "cand_file": _s(cand_file),
        "parent_href": files.href(parent_file), "parent_file": _s(parent_file),
        "champion_after": _s(ev.get("champion_id")) or None,
        "champion_after_ms": _finite(ev.get("champion_mean_ms")),
        "ts": _s(ev.get("ts")), "clock": fmt_clock(ev.get("ts")),
    }


def _build_research(ev, k, ctx):
    urls = []
    for u in _l(ev.get("urls"))[:40]:
        urls.append({"text": _clip(_s(u), 300)[0], "href": _safe_href(u)})
    return {
        "kind": "research", "k": k, "dom": _dom_id(f"research-{k}", ctx["used"]),
        "trigger": _s(ev.get("trigger")), "source": _s(ev.get("source")),
        "query": _clip(_s(ev.get("query")), 500)[0], "urls": urls,
        "latency": fmt_num(ev.get("latency_s"), 3) + " s" if _num(ev.get("latency_s")) is not None else "—",
        "notes": _clip(_s(ev.get("notes")), ctx["limits"]["text"])[0],
        "error": _clip(_s(ev.get("error")), 1000)[0] if ev.get("error") else "",
        "before": _int(ev.get("before_iteration")), "ts": _s(ev.get("ts")), "clock": fmt_clock(ev.get("ts")),
    }


def build_view(run_dir: Path, limits: dict = LEVELS[0], events=None, warnings=None, files=None) -> dict:
    run_dir = Path(run_dir)
    if events is None:
        events, warnings = read_log(run_dir / LOG_NAME)
    warnings = list(warnings or [])
    files = files or _Files(run_dir)
    ctx = {"files": files, "limits": limits, "used": set(), "file_of": {"baseline": "baseline.py"},
           "dom_of": {}}

    starts = [e for e in events if e.get("event") == "run_start"]
    ends = [e for e in events if e.get("event") == "run_end"]
    baselines = [e for e in events if e.get("event") == "baseline"]
    start, end = _d(starts[0] if starts else None), _d(ends[-1] if ends else None)
    base_ev = _d(baselines[-1] if baselines else None)
    base_res = _d(base_ev.get("result"))
    spec = _d(start.get("spec"))
    if isinstance(spec.get("resolved"), dict):          # a spec logged as {name, path, resolved: {...}}
        spec = {**spec["resolved"], **{k: v for k, v in spec.items() if v is not None and k != "resolved"}}
    if base_ev.get("candidate_file"):
        ctx["file_of"]["baseline"] = base_ev.get("candidate_file")
    ctx["dom_of"]["baseline"] = "k-baseline"

    synthetic = any(e.get("synthetic") is True or _d(e.get("result")).get("synthetic") is True for e in events)
    backends = []
    for e in events:
        b = _s(e.get("backend")).strip()
        if b and b not in backends:
            backends.append(b)

    items, iters, research = [], [], []
    unknown = 0
    for idx, ev in enumerate(events):
        kind = ev.get("event")
        try:
            if kind == "iteration":
                it = _build_iteration(ev, idx, ctx)
                ctx["dom_of"][it["cid"]] = it["dom"]
                iters.append(it)
                items.append(it)
            elif kind == "research":
                r = _build_research(ev, len(research) + 1, ctx)
                r["after_iters"] = len(iters)
                research.append(r)
                items.append(r)
            elif kind not in ("run_start", "run_end", "baseline"):
                unknown += 1
        except Exception as e:  # one bad event must not take the page down
            warnings.append(f"event {idx + 1} ({_s(kind)}) could not be rendered: {type(e).__name__}: {e}")
    if unknown:
        warnings.append(f"{unknown} event(s) of unknown type ignored")
    # parent links resolve to the parent's own card once every card has an id
    for it in iters:
        if it["parent"] and not it["parent_dom"]:
            it["parent_dom"] = ctx["dom_of"].get(it["parent"])

    # the baseline and the champion's trajectory
    base_ms = _finite(_d(base_res.get("candidate")).get("mean_ms"))
    if base_ms is None:
        base_ms = _finite(_d(base_res.get("champion")).get("mean_ms"))
    if base_ms is None:
        base_ms = _finite(end.get("baseline_mean_ms"))
    champ_ms, champ_id = base_ms, "baseline" if (baselines or base_ms is not None) else None
    champ_roof = _d(_d(base_res.get("roofline")).get("candidate")) or _d(_d(base_res.get("roofline")).get("champion"))
    for it in iters:
        ms = it["champion_after_ms"]
        if it["promoted"]:
            champ_id = it["champion_after"] or it["cid"]
            champ_ms = ms if ms is not None else (it["cand_ms"] if it["cand_ms"] is not None else champ_ms)
        else:
            if it["champion_after"]:
                champ_id = it["champion_after"]
            if ms is not None:
                champ_ms = ms
        it["champ_line_ms"] = champ_ms
    # the newest measurement of the champion's roofline
    last_roof = None
    for ev in events:
        if ev.get("event") != "iteration":
            continue
        roof = _d(_d(ev.get("result")).get("roofline"))
        dec = _d(ev.get("decision"))
        if _verdict(dec, dec.get("promoted")) == "promoted":
            last_roof = _d(roof.get("candidate")) or last_roof
        elif _d(roof.get("champion")):
            last_roof = _d(roof.get("champion"))
    if last_roof:
        champ_roof = last_roof
    if _finite(end.get("champion_mean_ms")) is not None:
        champ_ms = _finite(end.get("champion_mean_ms"))
    if end.get("champion_id"):
        champ_id = _s(end.get("champion_id"))
    speedup = _finite(end.get("speedup"))
    if speedup is None and base_ms and champ_ms:
        speedup = base_ms / champ_ms
    base_roof = _d(_d(base_res.get("roofline")).get("candidate")) or _d(_d(base_res.get("roofline")).get("champion"))

    counts = {v: 0 for v in VERDICTS + ("unknown",)}
    for it in iters:
        counts[it["verdict"]] = counts.get(it["verdict"], 0) + 1

    t_start = _parse_ts(start.get("ts")) or (_parse_ts(events[0].get("ts")) if events else None)
    t_last = None
    for e in events:
        t_last = _parse_ts(e.get("ts")) or t_last
    duration = _finite(end.get("duration_s"))
    duration_live = False
    if duration is None and t_start and t_last:
        duration = (t_last - t_start).total_seconds()
        duration_live = not ends

    planned = _int(start.get("iterations"))
    done = _int(end.get("iterations_done"))
    if done is None:
        done = len(iters)
    last_it = max([it["n"] for it in iters if it["n"] is not None] or [0])

    versions = _d(start.get("versions")) or _d(base_res.get("versions"))
    device = _s(start.get("device")) or _s(base_res.get("device"))
    shapes = [shape_label(s) for s in _l(spec.get("shapes"))]
    tol = spec.get("tolerance")
    tol_text = (", ".join(f"{_s(k)} ≤ {fmt_num(v)}" for k, v in tol.items()) if isinstance(tol, dict)
                else (f"rel_l2 ≤ {fmt_num(tol)}" if _num(tol) is not None else _s(tol)))
    argv = start.get("argv")
    argv_text = shlex.join([_s(a) for a in argv]) if isinstance(argv, list) else _s(argv)

    run_id = _s(start.get("run_id")) or _s(events[0].get("run_id") if events else "") or run_dir.name
    view = {
        "run_id": run_id, "run_dir": run_dir.name, "live": not ends, "has_events": bool(events),
        "refresh_s": REFRESH_S, "synthetic": synthetic, "backends": backends,
        "backend": ", ".join(backends) or "—",
        "spec": {"name": _s(spec.get("name")) or "(unnamed spec)", "path": _s(spec.get("path")),
                 "entry": _s(spec.get("entry")), "dtype": _s(spec.get("dtype")),
                 "description": _clip(_s(spec.get("description")), 600)[0], "shapes": shapes,
                 "check_shapes": [shape_label(s) for s in _l(spec.get("check_shapes"))],
                 "tolerance": tol_text},
        "proposer": _s(start.get("proposer")), "model": _s(start.get("model")),
        "endpoint_host": _s(start.get("endpoint_host")),
        "proposer_note": _clip(_s(start.get("proposer_note")), 600)[0],
        "notes": [_clip(_s(start.get(k)), 600)[0] for k in sorted(start)
                  if k.endswith("_note") and k != "proposer_note" and isinstance(start.get(k), str) and start.get(k)],
        "patience": _int(start.get("patience")),
        "device": _clip(device, 400)[0], "seed": _s(start.get("seed")),
        "min_gain": fmt_frac_pct(start.get("min_gain")) if start.get("min_gain") is not None else "—",
        "argv": _clip(argv_text, 1000)[0], "versions": [(k, _s(v)) for k, v in versions.items()],
        "started": fmt_ts(start.get("ts") or (events[0].get("ts") if events else None)),
        "last_event": fmt_ts(t_last.isoformat()) if t_last else "—",
        "duration": fmt_duration(duration), "duration_live": duration_live,
        "planned": planned, "done": done, "last_it": last_it,
        "stop_reason": _clip(_s(end.get("stop_reason")), 600)[0],
        "base_ms": base_ms, "champ_ms": champ_ms, "champ_id": champ_id, "speedup": speedup,
        "champ_dom": ctx["dom_of"].get(champ_id) if champ_id else None,
        "champ_roof": _roof_headline(champ_roof), "base_roof": _roof_headline(base_roof),
        "counts": counts, "iters": iters, "research": research, "entries": items,
        "baseline": None if not base_ev else {
            "file": _s(base_ev.get("candidate_file")) or "baseline.py",
            "href": files.href(_s(base_ev.get("candidate_file")) or "baseline.py"),
            "timing_rows": _stats_rows(base_res.get("candidate"), base_res.get("champion"))
            if base_res.get("candidate") or base_res.get("champion") else [],
            "rel_rows": _rel_rows(base_res)[0], "tolerance": _rel_rows(base_res)[1],
            "roof_rows": _roof_rows(base_res.get("roofline")),
            "error": _clip(_s(base_res.get("error")), limits["text"])[0] if base_res.get("error") else "",
            "ok": base_res.get("ok"), "mode": _s(base_res.get("mode")), "clock": fmt_clock(base_ev.get("ts")),
        },
        "champion_href": files.href("champion.py"),
        "warnings": warnings,
        "limits": limits, "generated": fmt_ts(_dt.datetime.now(_dt.timezone.utc).isoformat()),
    }
    view["chart"] = build_chart(view)
    inline = 0
    for it in iters:
        inline += len(it["note"]) * 2 + len(it["reason"]) * 2 + sum(len(e["text"]) for e in it["errors"])
        inline += len(it["diff"]["html"]) if it["diff"] else 0
        inline += sum(len(t["text"]) for t in (it["prompt"], it["response"]) if t)
    inline += sum(len(r["notes"]) for r in research)
    view["inline_bytes"] = int(inline * 1.04)        # escaping adds a little
    return view


# ----------------------------------------------------------------------------- the chart

def _nice_step(span: float, target: int) -> float:
    raw = span / max(target, 1)
    if raw <= 0 or not math.isfinite(raw):
        return 1.0
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def build_chart(view: dict) -> dict:
    W, H = 1000, 340
    L, R, T, B = 70, 64, 46, 44       # plot margins; the band above T-12 is the "no timing" lane
    lane_y = 22
    iters = view["iters"]
    xmax = max([view["planned"] or 0, view["last_it"], len(iters), 1])
    pw, ph = W - L - R, H - T - B

    def X(i):
        return round(L + pw * (i / xmax), 1)

    vals = []
    if view["base_ms"] is not None:
        vals.append(view["base_ms"])
    for it in iters:
        for v in (it["cand_ms"], it["champ_ms"], it.get("champ_line_ms")):
            if v is not None and v > 0:
                vals.append(v)
    vals = [v for v in vals if v is not None and math.isfinite(v) and v > 0]
    log = False
    if vals:
        lo, hi = min(vals), max(vals)
        log = hi / lo > 3.0
        if log:
            ylo, yhi = math.log10(lo) - 0.06, math.log10(hi) + 0.06
        else:
            pad = (hi - lo) * 0.12 or hi * 0.05 or 1.0
            step = _nice_step(hi - lo + 2 * pad, 5)
            ylo = max(0.0, math.floor((lo - pad) / step) * step)
            yhi = math.ceil((hi + pad) / step) * step
            if yhi <= ylo:
                yhi = ylo + step
    else:
        ylo, yhi = 0.0, 1.0

    def Y(v):
        t = math.log10(v) if log else v
        return round(T + ph * (1 - (t - ylo) / (yhi - ylo)), 1)

    yticks = []
    if vals:
        if log:
            decades = yhi - ylo
            mants = (1,) if decades > 3.5 else (1, 3) if decades > 2 else (1, 2, 5) if decades > 1.2 \
                else (1, 2, 3, 5) if decades > 0.6 else (1, 1.5, 2, 3, 4, 5, 6, 8)
            yt = [m * 10 ** e for e in range(math.floor(ylo) - 1, math.ceil(yhi) + 1) for m in mants]
            yt = [v for v in yt if ylo <= math.log10(v) <= yhi]
        else:
            step = _nice_step(yhi - ylo, 5)
            yt, v = [], ylo
            while v <= yhi + step * 1e-9:
                yt.append(round(v, 12))
                v += step
        yticks = [{"y": Y(v), "label": fmt_num(v, 3)} for v in yt if v > 0 or not log]

    xstep = max(1, int(_nice_step(xmax, 10)))
    xticks = [{"x": X(i), "label": "base" if i == 0 else str(i)} for i in range(0, xmax + 1, xstep)]

    # champion: a step line over iterations
    champ_pts = []
    if view["base_ms"] is not None:
        champ_pts.append((0, view["base_ms"]))
    for k, it in enumerate(iters):
        v = it.get("champ_line_ms")
        if v is not None and v > 0:
            champ_pts.append((it["n"] if it["n"] is not None else k + 1, v))
    path = ""
    if champ_pts:
        path = f"M{X(champ_pts[0][0])},{Y(champ_pts[0][1])}"
        prev_y = Y(champ_pts[0][1])
        for i, v in champ_pts[1:]:
            path += f"H{X(i)}V{Y(v)}" if Y(v) != prev_y else f"H{X(i)}"
            prev_y = Y(v)
        path += f"H{X(max(champ_pts[-1][0], view['last_it']))}"

    markers, measured = [], []
    for k, it in enumerate(iters):
        i = it["n"] if it["n"] is not None else k + 1
        timed = it["cand_ms"] is not None and it["cand_ms"] > 0
        y = Y(it["cand_ms"]) if timed else lane_y
        tip = [f"{it['label']} {it['cid']} · {it['verdict_label']}"]
        mod = " (modeled)" if view["synthetic"] else ""
        if timed:
            tip.append(f"candidate {fmt_ms(it['cand_ms'])} ms" + (f" ± {fmt_ms(it['cand_std'])}" if it["cand_std"] else "")
                       + mod)
        if it["champ_ms"] is not None:
            tip.append(f"champion (same job) {fmt_ms(it['champ_ms'])} ms{mod}")
        if it["gain"] is not None and timed:
            tip.append(f"gain {fmt_frac_pct(it['gain'])}")
        if it["reason"]:
            tip.append(_clip(it["reason"], 160)[0])
        if it["note"]:
            tip.append("note: " + _clip(it["note"], 160)[0])
        err = None
        if timed and it["cand_std"]:
            lo_v = max(it["cand_ms"] - it["cand_std"], min(vals) if vals else it["cand_ms"])
            err = (Y(it["cand_ms"] + it["cand_std"]), Y(lo_v))
        markers.append({"x": X(i), "y": y, "timed": timed, "verdict": it["verdict"], "dom": it["dom"],
                        "tip": "\n".join(tip), "err": err})
        if it["champ_ms"] is not None and it["champ_ms"] > 0:
            measured.append({"x": X(i), "y": Y(it["champ_ms"])})

    research = []
    for r in view["research"]:
        before = r["before"] if r["before"] is not None else r["after_iters"] + 1
        research.append({"x": round(X(before - 0.5) if before > 0 else X(0), 1), "dom": r["dom"],
                         "label": "research" + (f" · {r['source']}" if r["source"] else ""),
                         "tip": f"research ({r['trigger'] or '?'}, {r['source'] or '?'}) before iteration "
                                f"{before}: {_clip(r['query'], 160)[0]}"})
    # crowded research lines get short labels (R1, R2, ...); the tooltip keeps the details
    xs = [r["x"] for r in research]
    crowded = any(b - a < 120 for a, b in zip(xs, xs[1:])) or (xs and xs[-1] > L + pw - 110)
    for k, r in enumerate(research, 1):
        r["ly"] = T - 4
        if crowded:
            r["label"] = f"R{k}"

    base_pt = None
    if view["base_ms"] is not None:
        by = Y(view["base_ms"])
        # the text label only where it cannot sit on the first iterations' markers
        base_pt = {"x": X(0), "y": by,
                   "label": f"baseline {fmt_ms(view['base_ms'])} ms" + (" (modeled)" if view["synthetic"] else ""),
                   "ly": by + 16 if by < T + ph / 2 else by - 8, "show_label": pw / xmax >= 60}
    end_label = None
    if champ_pts and view["speedup"]:
        end_label = {"x": X(max(champ_pts[-1][0], view["last_it"])),
                     "y": Y(champ_pts[-1][1]), "text": f"{fmt_speedup(view['speedup'])}"}
    return {"W": W, "H": H, "L": L, "R": R, "T": T, "B": B, "pw": pw, "ph": ph, "lane_y": lane_y,
            "log": log, "has_data": bool(vals), "yticks": yticks, "xticks": xticks, "path": path,
            "markers": markers, "measured": measured, "research": research, "base": base_pt,
            "end_label": end_label, "xmax": xmax, "any_untimed": any(not m["timed"] for m in markers)}


# ----------------------------------------------------------------------------- rendering

_ENVS: dict = {}


def _env() -> jinja2.Environment:
    """One Jinja environment per strictness, so templates compile once per process (the
    orchestrator re-renders after every event)."""
    if STRICT not in _ENVS:
        _ENVS[STRICT] = _make_env(STRICT)
    return _ENVS[STRICT]


def _make_env(strict: bool) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=True,                                   # every log string is hostile until escaped
        undefined=jinja2.StrictUndefined if strict else jinja2.ChainableUndefined,
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
    )
    env.filters.update(ms=fmt_ms, num=fmt_num, pct=fmt_pct, fpct=fmt_frac_pct, speedup=fmt_speedup,
                       dur=fmt_duration, yesno=fmt_bool, ts=fmt_ts)
    return env


def _atomic_write(path: Path, text: str) -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=str(path.parent))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def render_run_html(run_dir: Path) -> str:
    run_dir = Path(run_dir)
    events, warnings = read_log(run_dir / LOG_NAME)
    tpl = _env().get_template("trajectory.html.j2")
    files = _Files(run_dir)

    def render(level):
        view = build_view(run_dir, LEVELS[level], events, warnings, files)
        view["level"] = level
        return tpl.render(v=view, verdicts=VERDICTS, verdict_help=VERDICT_HELP), view["inline_bytes"]

    html, inline0 = render(0)
    size = len(html.encode("utf-8"))
    if size <= SIZE_BUDGET:
        return html
    # Too big: estimate each level from its inline text alone (views are cheap once the files and
    # diffs are cached), render the first that should fit, and step on if the estimate was short.
    fixed = size - inline0
    level = len(LEVELS) - 1
    for k in range(1, len(LEVELS)):
        est = fixed + build_view(run_dir, LEVELS[k], events, warnings, files)["inline_bytes"]
        if est <= SIZE_BUDGET * 0.97:
            level = k
            break
    while True:
        html, _ = render(level)
        if len(html.encode("utf-8")) <= SIZE_BUDGET or level == len(LEVELS) - 1:
            return html
        level += 1


def render_run(run_dir: Path) -> Path:
    """Render run_dir/run.jsonl (+ the files it names) into run_dir/trajectory.html, atomically.

    The orchestrator calls this after every event, so a page bug must never stop a run: outside
    STRICT mode an unexpected error writes a plain fallback page (with the error) instead."""
    run_dir = Path(run_dir)
    out = run_dir / PAGE_NAME
    try:
        html = render_run_html(run_dir)
    except Exception as e:
        if STRICT:
            raise
        import traceback
        print(f"page.py: could not render {out}: {type(e).__name__}: {e}", file=sys.stderr)
        try:
            live = '"run_end"' not in (run_dir / LOG_NAME).read_text(encoding="utf-8", errors="replace")
        except OSError:
            live = True
        html = ("<!doctype html><meta charset=utf-8>"
                + (f'<meta http-equiv="refresh" content="{REFRESH_S}">' if live else "")
                + "<title>KernLoop run: page error</title>"
                "<body style='font:14px system-ui,sans-serif;margin:24px'><h1>The trajectory page failed to render</h1>"
                f"<p>The run itself is unaffected; its log is <code>{escape(LOG_NAME)}</code>. "
                "Re-render with <code>python page.py RUN_DIR</code> once fixed.</p>"
                f"<pre>{escape(traceback.format_exc())}</pre>")
    _atomic_write(out, html)
    return out


def summarize_run(run_dir: Path) -> dict:
    """The headline numbers of one run, for the index."""
    run_dir = Path(run_dir)
    events, warnings = read_log(run_dir / LOG_NAME)
    tiny = dict(prompt=0, response=0, diff_lines=0, text=300)
    v = build_view(run_dir, tiny, events, warnings)
    start = next((e for e in events if e.get("event") == "run_start"), {})
    return {
        "dir": run_dir.name, "href": quote(run_dir.name) + "/" + PAGE_NAME, "run_id": v["run_id"],
        "spec": v["spec"]["name"], "backend": v["backend"], "synthetic": v["synthetic"],
        "proposer": v["proposer"], "model": v["model"], "device": v["device"],
        "started": v["started"], "sort_key": _s(start.get("ts")) or (events[0].get("ts") if events else "") or "",
        "duration": v["duration"], "live": v["live"], "has_events": v["has_events"],
        "done": v["done"], "planned": v["planned"], "base_ms": v["base_ms"], "champ_ms": v["champ_ms"],
        "champ_id": v["champ_id"], "speedup": v["speedup"], "roof": v["champ_roof"],
        "stop_reason": v["stop_reason"], "counts": v["counts"],
        "has_page": (run_dir / PAGE_NAME).is_file(),
    }


def find_runs(runs_dir: Path) -> list:
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        return []
    return sorted(p for p in runs_dir.iterdir() if p.is_dir() and (p / LOG_NAME).is_file())


def render_index(runs_dir: Path, render_missing: bool = True) -> Path:
    """Write runs_dir/index.html listing every run folder (one holding run.jsonl), newest first.
    A run without a trajectory.html yet gets one, so every link works."""
    runs_dir = Path(runs_dir)
    runs_dir.mkdir(parents=True, exist_ok=True)
    rows, warnings = [], []
    for d in find_runs(runs_dir):
        try:
            if render_missing and not (d / PAGE_NAME).is_file():
                render_run(d)
            rows.append(summarize_run(d))
        except Exception as e:  # a broken run folder must not hide the others
            warnings.append(f"{d.name}: {type(e).__name__}: {e}")
    rows.sort(key=lambda r: (r["sort_key"], r["dir"]), reverse=True)
    html = _env().get_template("index.html.j2").render(
        runs=rows, warnings=warnings, title=runs_dir.resolve().name,
        generated=fmt_ts(_dt.datetime.now(_dt.timezone.utc).isoformat()))
    out = runs_dir / INDEX_NAME
    _atomic_write(out, html)
    return out


# ----------------------------------------------------------------------------- screenshot + CLI

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars", "--force-device-scale-factor=1", "--mute-audio")


def find_chromium():
    env = os.environ.get("KERNLOOP_CHROMIUM")
    if env:
        return env if Path(env).is_file() or shutil.which(env) else None
    for name in CHROMIUM_NAMES:
        p = shutil.which(name)
        if p:
            return p
    return None


def screenshot(html_path: Path, png_path: Path, width: int = 1400, height: int = 2000, timeout: float = 90) -> Path:
    """Screenshot a page with headless Chromium (the OS package). Returns the PNG path."""
    chrome = find_chromium()
    if chrome is None:
        raise RuntimeError("no Chromium found (apt-get install chromium, or set KERNLOOP_CHROMIUM)")
    png_path = Path(png_path).resolve()
    png_path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kernloop-chrome-") as profile:
        cmd = [chrome, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}",
               f"--screenshot={png_path}", Path(html_path).resolve().as_uri()]
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, text=True)
    if proc.returncode != 0 or not png_path.is_file():
        raise RuntimeError(f"chromium failed (rc={proc.returncode}): {proc.stderr[-2000:]}")
    return png_path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="page.py", description="Render KernLoop trajectory pages.")
    ap.add_argument("paths", nargs="*", help="RUN_DIR (or RUNS_DIR with --index); with --screenshot: RUN_DIR OUT.png")
    ap.add_argument("--index", action="store_true", help="also (or only, for a runs folder) write the runs index")
    ap.add_argument("--screenshot", action="store_true", help="render RUN_DIR, then screenshot it to OUT.png")
    ap.add_argument("--width", type=int, default=1400)
    ap.add_argument("--height", type=int, default=2000)
    a = ap.parse_args(argv)
    if a.screenshot:
        if len(a.paths) != 2:
            ap.error("--screenshot takes RUN_DIR OUT.png")
        run_dir, png = Path(a.paths[0]), Path(a.paths[1])
        page = render_run(run_dir) if (run_dir / LOG_NAME).is_file() else run_dir
        print(screenshot(page, png, a.width, a.height))
        return 0
    if not a.paths:                       # plain `python page.py`: every run under ./runs and its index
        a.paths, a.index = [str(HERE / "runs")], True
    paths = [Path(p) for p in a.paths]
    for p in paths:
        if (p / LOG_NAME).is_file():
            print(render_run(p))
            if a.index:
                print(render_index(p.parent))
        elif a.index and p.is_dir():
            for d in find_runs(p):
                render_run(d)
            print(render_index(p))
        else:
            print(f"page.py: {p} holds no {LOG_NAME} (pass --index for a folder of runs)", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
