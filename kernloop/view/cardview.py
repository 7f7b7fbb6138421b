"""The view model of one page card: an iteration's or a research event's numbers, rows, diff and texts."""
from __future__ import annotations

import math
from pathlib import Path
from urllib.parse import quote

from kernloop.decision import unchecked_shapes
from kernloop.standing.diagnosis import ceiling_kinds, roof_pcts
from kernloop.view.htmlfmt import (as_dict, as_int, as_list, as_text, clip, diff_rows, dom_id, finite, fmt_bool, fmt_clock,
                     fmt_duration, fmt_frac_pct, fmt_ms, fmt_num, fmt_pct, fmt_speedup, num, render_diff, safe_href)

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



class RunFiles:
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


def stats_rows(cand, champ):
    cand, champ = as_dict(cand), as_dict(champ)
    rows = []
    for key, label in (("mean_ms", "mean"), ("min_ms", "min"), ("median_ms", "median"), ("std_ms", "std")):
        rows.append((label + " (ms)", fmt_ms(cand.get(key)) if cand else "—", fmt_ms(champ.get(key)) if champ else "—"))
    for key in ("n", "warmup"):
        rows.append((key, fmt_num(cand.get(key)) if cand else "—", fmt_num(champ.get(key)) if champ else "—"))
    return rows


# a measured rate (torch.mm's, the copy bandwidth) is never called a peak; the datasheet's is
ROOF_WHAT = {("measured", 1): "of measured copy BW", ("measured", 0): "of measured mm rate",
             ("peak", 1): "of datasheet BW", ("peak", 0): "of datasheet FLOP/s"}


def roof_rows(roof, ceilings=None):
    """TFLOP/s, GB/s, each percentage under its own ceiling's name (a measured rate is never
    called a peak), and the bound, for both sides."""
    roof = as_dict(roof)
    c, h = as_dict(roof.get("candidate")), as_dict(roof.get("champion"))
    if not c and not h:
        return []
    pc, ph = roof_pcts(c, as_dict(ceilings)), roof_pcts(h, as_dict(ceilings))
    rows = [("TFLOP/s", fmt_num(c.get("tflops")) if c else "—", fmt_num(h.get("tflops")) if h else "—"),
            ("GB/s", fmt_num(c.get("gbps")) if c else "—", fmt_num(h.get("gbps")) if h else "—")]
    for kind in ("measured", "peak"):
        if pc[kind] is None and ph[kind] is None:
            continue
        for i in (0, 1):
            rows.append((f"% {ROOF_WHAT[(kind, i)]}", fmt_pct((pc[kind] or (None, None))[i]),
                         fmt_pct((ph[kind] or (None, None))[i])))
    rows.append(("bound", as_text(c.get("bound"), "—") if c else "—", as_text(h.get("bound"), "—") if h else "—"))
    return rows


def roof_headline(r, ceilings=None):
    """'71.9% of measured copy bandwidth' for the ceiling that bounds the kernel (the measured
    one where known), with the datasheet peak's percentage in the detail."""
    r = as_dict(r)
    pcts = roof_pcts(r, as_dict(ceilings))
    kind = "measured" if pcts["measured"] is not None else ("peak" if pcts["peak"] is not None else None)
    if kind is None:
        return None
    pf, pb = (finite(x) for x in pcts[kind])
    bound = as_text(r.get("bound")).lower()
    mem = bound.startswith("mem") or bound.startswith("band") or (not bound.startswith("comp") and (pb or 0) > (pf or 0))
    i = 1 if (mem and pb is not None) or pf is None else 0
    others = [f"{fmt_pct(pcts[k][i])} {ROOF_WHAT[(k, i)]}" for k in ("measured", "peak")
              if k != kind and pcts[k] is not None and finite(pcts[k][i]) is not None]
    if finite(r.get("tflops")) is not None:
        others.append(f"{fmt_num(r.get('tflops'))} TFLOP/s")
    return {"value": fmt_pct(pb if i == 1 else pf), "what": ROOF_WHAT[(kind, i)],
            "bound": as_text(r.get("bound")), "detail": " · ".join(others)}


def rel_rows(result):
    result = as_dict(result)
    rel = result.get("rel_l2")
    tol = result.get("tolerance")
    tol = finite(tol.get("rel_l2") if isinstance(tol, dict) else tol)
    rows = []
    items = rel.items() if isinstance(rel, dict) else (enumerate(rel) if isinstance(rel, list) else [])
    for shape, val in items:
        v = num(val)
        ok = None
        if v is not None and tol is not None:
            ok = math.isfinite(v) and v <= tol
        elif v is not None and not math.isfinite(v):
            ok = False
        rows.append({"shape": as_text(shape).replace("x", "×") if isinstance(shape, str) else as_text(shape),
                     "value": fmt_num(v, 3) if v is not None else as_text(val, "—"), "ok": ok})
    for shape in unchecked_shapes(result):   # the judge's: its A/B could not promote it
        rows.append({"shape": shape.replace("x", "×"), "value": "not checked", "ok": None})
    return rows, tol


def flight_flags(ev: dict) -> list[dict]:
    """Tags for a candidate decided with others in flight (--parallel/--batch): re-timed,
    confirmed or not, superseded. Empty for a one-at-a-time run."""
    flags = []
    evals = [e for e in as_list(ev.get("evaluations")) if isinstance(e, dict)]
    if len(evals) > 1:
        flags.append({"label": f"re-timed x{len(evals) - 1}",
                      "title": "; ".join(f"{as_text(e.get('job'))} vs {as_text(e.get('against'))}"
                                         + (f" on {as_text(e.get('node'))}" if e.get("node") else "")
                                         + f": {as_text(e.get('verdict'))}" for e in evals)})
    if ev.get("confirmed") is True:
        flags.append({"label": "confirmed", "title": "won its batch, then won again alone in a fresh job"})
    elif ev.get("confirmed") is False:
        flags.append({"label": "not confirmed", "title": "won its batch, lost when re-timed alone"})
    sup = as_dict(ev.get("superseded"))
    if sup:
        flags.append({"label": f"superseded by {as_text(sup.get('by'))}", "title": as_text(sup.get("reason"))})
    return flags


def verdict_of(decision, promoted_flag):
    v = as_text(as_dict(decision).get("verdict")).strip().lower()
    if v in VERDICTS:
        return v
    if v == "superseded":   # --parallel: not promoted; drawn as a rejection, labelled as it is
        return "rejected"
    if promoted_flag is True:
        return "promoted"
    return "unknown"


def config_rows(config, parent_config):
    """The full CONFIG as (key, value, was) rows; `was` is the parent's value where it differs
    (None where it is the same, or where the parent's CONFIG is not in the log)."""
    if not isinstance(config, dict):
        return []
    known = isinstance(parent_config, dict)
    rows = []
    for k, x in config.items():
        changed = known and (k not in parent_config or parent_config[k] != x)
        was = (as_text(parent_config[k]) if k in parent_config else "(none)") if changed else None
        rows.append((clip(as_text(k), 80)[0], clip(as_text(x), 200)[0], was))
    return rows


def _text_block(files: RunFiles, rel, limit: int):
    txt = files.text(rel)
    if txt is None:
        return None
    shown, omitted = clip(txt, limit)
    return {"text": shown, "omitted": omitted, "size": len(txt), "href": files.href(rel), "name": as_text(rel)}


def diagnosis_texts(findings) -> list[str]:
    """The logged diagnosis (diagnosis.of_result) as lines; what is not a finding is skipped."""
    return [clip(as_text(f.get("text")), 400)[0] for f in as_list(findings) if isinstance(f, dict) and f.get("text")]


def profile_texts(result) -> list[str]:
    """The candidate's compiled-kernel profile and launch cost in words (briefing.profile_lines)."""
    from kernloop.standing import briefing
    prof = as_dict(as_dict(as_dict(result).get("profile")).get("candidate"))
    try:
        return [clip(t, 400)[0] for t in briefing.profile_lines(prof)] if prof else []
    except (KeyError, TypeError, ValueError):   # a profile the page cannot read is left out
        return []


def build_iteration(ev, idx, ctx):
    """One iteration's card, from its event: verdict, times, rule, diff, checker rows, texts."""
    files, lim = ctx["files"], ctx["limits"]
    n = as_int(ev.get("iteration"))
    cid = as_text(ev.get("candidate_id")).strip() or (f"it{n:04d}" if n is not None else f"event{idx}")
    decision = as_dict(ev.get("decision"))
    rule = as_dict(decision.get("rule"))
    result = ev.get("result") if isinstance(ev.get("result"), dict) else None
    res = as_dict(result)
    contract = ev.get("contract") if isinstance(ev.get("contract"), dict) else None
    proposal = as_dict(ev.get("proposal"))
    verdict = verdict_of(decision, decision.get("promoted"))
    cand_stats, champ_stats = as_dict(res.get("candidate")), as_dict(res.get("champion"))
    parent = as_text(ev.get("parent_id")).strip() or None
    cand_file, parent_file = _files_of(ev, cid, parent, ctx)
    config = ev.get("candidate_config") if isinstance(ev.get("candidate_config"), dict) else proposal.get("config")
    ctx["config_of"][cid] = config
    rels, tol = rel_rows(result)
    promoted = verdict == "promoted"
    return {
        "kind": "iteration", "n": n, "label": f"#{n}" if n is not None else "#?",
        "diagnosis": diagnosis_texts(ev.get("diagnosis")) if promoted else [],
        "profile_lines": profile_texts(res) if promoted else [],
        "cid": cid, "dom": dom_id(cid, ctx["used"]), "parent": parent, "parent_dom": ctx["dom_of"].get(parent),
        "selection": clip(as_text(ev.get("selection")), 200)[0] or None,   # why the search tree chose the parent
        "verdict": verdict, "verdict_label": as_text(decision.get("verdict")).strip() or verdict,
        "promoted": promoted, "flags": flight_flags(ev),
        "reason": clip(as_text(decision.get("reason")), lim["text"])[0],
        "note": clip(as_text(ev.get("note")), lim["text"])[0],
        "proposer": as_text(ev.get("proposer")), "model": as_text(ev.get("model")),
        "node": as_text(ev.get("node")) or None,   # --backend ray: the node that ran its job
        **_times(cand_stats, champ_stats, rule),
        "significant": rule.get("significant") if isinstance(rule.get("significant"), bool) else None,
        "timing_rows": stats_rows(cand_stats, champ_stats) if (cand_stats or champ_stats) else [],
        "roof_rows": roof_rows(res.get("roofline"), res.get("ceilings")),
        "rule_rows": rule_rows(rule), "rel_rows": rels, "tolerance": tol,
        "rel_mode": as_text(res.get("mode")),
        "contract": None if contract is None else {"ok": as_dict(contract).get("ok"),
                                                   "reasons": contract_reasons(contract)},
        "checker_rows": checker_rows(result), "errors": error_texts(proposal, res, lim["text"]),
        "has_result": result is not None,
        "prop_rows": proposal_rows(proposal), "config_rows": config_rows(config, ctx["config_of"].get(parent)),
        "config_known": isinstance(ctx["config_of"].get(parent), dict),
        "prompt": _text_block(files, proposal.get("prompt_file"), lim["prompt"]),
        "response": _text_block(files, proposal.get("response_file"), lim["response"]),
        **_diff(files, parent, parent_file, cand_file, lim["diff_lines"]),
        "cand_href": files.href(cand_file), "cand_file": as_text(cand_file),
        "parent_href": files.href(parent_file), "parent_file": as_text(parent_file),
        "champion_after": as_text(ev.get("champion_id")) or None,
        "champion_after_ms": finite(ev.get("champion_mean_ms")),
        "speedup_vs_baseline": finite(ev.get("speedup_vs_baseline")),
        "ts": as_text(ev.get("ts")), "clock": fmt_clock(ev.get("ts")),
    }


def _times(cand_stats: dict, champ_stats: dict, rule: dict) -> dict:
    """The card's two times (the job's stats, else the rule's), its spread and its speed."""
    cand_ms = finite(cand_stats.get("mean_ms"))
    if cand_ms is None:
        cand_ms = finite(rule.get("cand_mean_ms"))
    champ_ms = finite(champ_stats.get("mean_ms"))
    if champ_ms is None:
        champ_ms = finite(rule.get("champ_mean_ms"))
    return {"cand_ms": cand_ms, "champ_ms": champ_ms, "cand_std": finite(cand_stats.get("std_ms")),
            # decided and logged by decision.decide: champion / candidate
            "speed": finite(rule.get("speedup"))}


def _files_of(ev, cid: str, parent, ctx) -> tuple:
    """(candidate file, parent file) as found in the run folder; the candidate's is remembered."""
    files = ctx["files"]
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
    return cand_file, parent_file


def _diff(files: RunFiles, parent, parent_file, cand_file, diff_lines: int) -> dict:
    """The candidate's diff against its parent, or a note saying why there is none."""
    diff = None
    new_src = files.text(cand_file)
    old_src = files.text(parent_file)
    if new_src is not None and old_src is not None:
        body, added, removed, shown, total = render_diff(old_src, new_src, diff_lines,
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
    return {"diff": diff, "diff_note": diff_note}


RULE_KNOWN = {"cand_mean_ms", "champ_mean_ms", "gain", "speedup", "min_gain", "delta_ms", "significance_ms",
              "sigma", "significant", "n", "threshold_ms", "require_significance"}


def rule_rows(rule: dict) -> list[tuple]:
    """The promotion rule as decision.decide logged it: (label, value, ok) rows, unknown keys last."""
    if not rule:
        return []
    sigma = rule.get("sigma")
    rows = [
        ("candidate mean", fmt_ms(rule.get("cand_mean_ms")) + " ms", None),
        ("champion mean (same job)", fmt_ms(rule.get("champ_mean_ms")) + " ms", None),
        ("speed vs champion", fmt_speedup(finite(rule.get("speedup"))), None),
        ("gain", fmt_frac_pct(rule.get("gain")), None),
        ("min_gain (threshold)", fmt_frac_pct(rule.get("min_gain")), None),
        ("Δ = champion − candidate", fmt_ms(num(rule.get("delta_ms"))) + " ms", None),
        ("significance (%sσ)" % fmt_num(sigma, 3) if sigma is not None else "significance",
         fmt_ms(num(rule.get("significance_ms"))) + " ms", None),
        ("significant (Δ > significance)", fmt_bool(rule.get("significant")),
         rule.get("significant") if isinstance(rule.get("significant"), bool) else None),
        ("n (timed reps each)", fmt_num(rule.get("n")), None),
    ]
    if rule.get("threshold_ms") is not None:
        rows.insert(5, ("threshold = champion × (1 − min_gain)", fmt_ms(rule.get("threshold_ms")) + " ms", None))
    if rule.get("require_significance") is not None:
        rows.append(("significance required", fmt_bool(rule.get("require_significance")), None))
    for k, v in rule.items():
        if k in RULE_KNOWN:
            continue
        if isinstance(v, bool) or v is None:
            val = fmt_bool(v)
        elif num(v) is not None and not isinstance(v, str):
            val = fmt_ms(v) + " ms" if as_text(k).endswith("_ms") else fmt_num(v)
        else:
            val = clip(as_text(v), 200)[0]
        rows.append((as_text(k), val, None))
    return rows


def proposal_rows(proposal: dict) -> list[tuple]:
    """The proposal's latency, tokens and finish reason, where logged."""
    rows = []
    for key, label, fmt in (("latency_s", "latency", lambda v: fmt_num(v, 3) + " s" if num(v) is not None else "—"),
                            ("prompt_tokens", "prompt tokens", fmt_num),
                            ("completion_tokens", "completion tokens", fmt_num),
                            ("finish_reason", "finish reason", lambda v: as_text(v, "—"))):
        if proposal.get(key) is not None:
            rows.append((label, fmt(proposal.get(key))))
    return rows


CHECKER_FIELDS = (("ok", "ok"), ("stage", "stage"), ("correct", "correct"), ("mode", "mode"),
                  ("check_dtype", "check dtype"), ("draws", "input draws"), ("backend", "backend"),
                  ("device", "device"), ("timing_model", "timing model"), ("ceilings", "ceilings"),
                  ("wall_s", "wall time"))


def checker_rows(result) -> list[tuple]:
    """The checker's result fields as (label, text) rows, the ceilings by kind, the backend's meta."""
    if result is None:
        return []
    rows = []
    for key, label in CHECKER_FIELDS:
        v = result.get(key)
        if v is None:
            continue
        if key == "wall_s":
            rows.append((label, fmt_duration(v)))
        elif key == "ceilings" and isinstance(v, dict):
            for kind, name in (("peak", "datasheet peak"), ("measured", "measured ceiling")):
                c = as_dict(ceiling_kinds(v).get(kind))
                if c:
                    parts = [f"{fmt_num(c.get('tflops'))} TFLOP/s", f"{fmt_num(c.get('gbps'))} GB/s",
                             as_text(c.get("source"))]
                    rows.append((name, clip(" · ".join(x for x in parts if x), 300)[0]))
        elif isinstance(v, bool):
            rows.append((label, fmt_bool(v)))
        else:
            rows.append((label, clip(as_text(v), 300)[0]))
    for k, v in list(as_dict(result.get("backend_meta")).items())[:12]:
        rows.append((f"backend · {as_text(k)}", clip(as_text(v), 300)[0]))
    return rows


def error_texts(proposal: dict, res: dict, limit: int) -> list[dict]:
    errors = []
    for label, val in (("proposal error", proposal.get("error")), ("parse error", proposal.get("parse_error")),
                       ("checker error", res.get("error"))):
        if val not in (None, "", False):
            errors.append({"label": label, "text": clip(as_text(val), limit)[0]})
    return errors


def contract_reasons(contract) -> list[str]:
    reasons = [clip(as_text(r), 600)[0] for r in as_list(as_dict(contract).get("reasons"))]
    if not reasons and isinstance(as_dict(contract).get("reasons"), str):
        reasons = [as_dict(contract)["reasons"]]
    return reasons


def build_research(ev, k, ctx):
    urls = []
    for u in as_list(ev.get("urls"))[:40]:
        urls.append({"text": clip(as_text(u), 300)[0], "href": safe_href(u)})
    return {
        "kind": "research", "k": k, "dom": dom_id(f"research-{k}", ctx["used"]),
        "trigger": as_text(ev.get("trigger")), "source": as_text(ev.get("source")),
        "query": clip(as_text(ev.get("query")), 500)[0], "urls": urls,
        "latency": fmt_num(ev.get("latency_s"), 3) + " s" if num(ev.get("latency_s")) is not None else "—",
        "notes": clip(as_text(ev.get("notes")), ctx["limits"]["text"])[0],
        "error": clip(as_text(ev.get("error")), 1000)[0] if ev.get("error") else "",
        "before": as_int(ev.get("before_iteration")), "ts": as_text(ev.get("ts")), "clock": fmt_clock(ev.get("ts")),
    }


