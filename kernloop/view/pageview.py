"""The view model of the whole page: the run's header, its champion's history and its cards, read from the log."""
from __future__ import annotations

import datetime as _dt
import shlex
from pathlib import Path

from checker.peerstats import fmt_pct, skip_parts
from kernloop.standing.briefing import NO_PEERS_SYNTHETIC, best_text
from kernloop.view import chart, treeview
from kernloop.view.cardview import (VERDICTS, RunFiles, build_iteration, build_research, diagnosis_texts, profile_texts,
                      rel_rows, roof_headline, roof_rows, stats_rows, verdict_of)
from kernloop.view.htmlfmt import as_dict, as_int, as_list, as_text, clip, finite, fmt_duration, fmt_frac_pct, fmt_clock, fmt_num, fmt_ts, num, parse_ts, shape_label
from kernloop.trajectory import read_events

LOG_NAME = "run.jsonl"
REFRESH_S = 5

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


def _pct(x) -> str:
    """'8.3%' for a finite fraction, '' else."""
    return fmt_pct(finite(x)) if finite(x) is not None else ""


def peers_of(events) -> tuple[list[dict], str, list[str], str]:
    """The peers of the newest job that timed them (the final job, else the baseline's), fastest
    first: ([{label, median_ms, mean_ms, std_ms, spread, ci, rounds}], which job, ["label (kind):
    why skipped"], the best peer in words as that job's `best` names it (never chosen again))."""
    for ev in reversed(events):
        if ev.get("event") not in ("final", "baseline"):
            continue
        block = as_dict(as_dict(ev.get("result")).get("peers"))
        if not block:
            continue
        rows = [{"label": as_text(k), "median_ms": finite(as_dict(s).get("median_ms")),
                 "mean_ms": finite(as_dict(s).get("mean_ms")), "std_ms": finite(as_dict(s).get("std_ms")),
                 "spread": _pct(as_dict(s).get("rel_spread")), "ci": _pct(as_dict(s).get("ci_half")),
                 "rounds": as_int(as_dict(s).get("rounds"))}
                for k, s in as_dict(block.get("peers")).items()]
        rows = sorted((r for r in rows if r["median_ms"]), key=lambda r: r["median_ms"])
        skipped = []
        for k, v in as_dict(block.get("skipped")).items():
            why, kind, install = skip_parts(v)
            text = f"{as_text(k)} ({kind}): {as_text(why)}"
            text += f" ({install})" if install and install not in why else ""
            skipped.append(clip(text, 300)[0])
        best = as_dict(block.get("best"))
        job = "final champion" if ev.get("event") == "final" else "baseline"
        return rows, job, skipped, clip(best_text(best), 300)[0] if best.get("name") else ""
    return [], "", [], ""


def join_sight(card: dict, sight: dict | None) -> None:
    """A promoted card's second look, logged after its decision (a `sight` event): its
    diagnosis and profile, or why there is none."""
    if not sight or not card.get("promoted"):
        return
    if sight.get("status") == "landed":
        card["diagnosis"] = diagnosis_texts(sight.get("diagnosis")) or card["diagnosis"]
        card["profile_lines"] = profile_texts(sight.get("result")) or card["profile_lines"]
    else:
        card["profile_lines"] = card["profile_lines"] + [
            clip("Second look not taken: " + as_text(sight.get("reason")), 400)[0]]


def interruptions_of(end: dict, events: list) -> list[dict]:
    """The earlier parts of a resumed run as the log records them: run_end.interruptions once it
    ended, the resume events while it runs again."""
    rows = end.get("interruptions") if isinstance(end.get("interruptions"), list) else [
        {"after_iteration": e.get("after_iteration"), "how": e.get("previous"), "at": e.get("ts")}
        for e in events if e.get("event") == "resume"]
    return [{"after": as_int(as_dict(r).get("after_iteration")), "how": as_text(as_dict(r).get("how")),
             "at": fmt_ts(as_dict(r).get("at")) if as_dict(r).get("at") else "",
             "reason": clip(as_text(as_dict(r).get("reason")), 300)[0]} for r in rows]


def build_view(run_dir: Path, limits: dict = LEVELS[0], events=None, warnings=None, files=None) -> dict:
    """The whole page's view model: header, champion's history, baseline, cards, chart, search tree."""
    run_dir = Path(run_dir)
    if events is None:
        warnings = []
        events = read_events(run_dir / LOG_NAME, warnings)
    warnings = list(warnings or [])
    files = files or RunFiles(run_dir)
    ctx = {"files": files, "limits": limits, "used": set(), "file_of": {"baseline": "baseline.py"},
           "config_of": {}, "dom_of": {}}
    start, end, base_ev = _frame_events(events)
    base_res = as_dict(base_ev.get("result"))
    if base_ev.get("candidate_file"):
        ctx["file_of"]["baseline"] = base_ev.get("candidate_file")
    ctx["dom_of"]["baseline"] = "k-baseline"
    ctx["config_of"]["baseline"] = base_ev.get("candidate_config")
    synthetic = any(e.get("synthetic") is True or as_dict(e.get("result")).get("synthetic") is True for e in events)
    backends = []
    for e in events:
        b = as_text(e.get("backend")).strip()
        if b and b not in backends:
            backends.append(b)
    items, iters, research = _cards(events, ctx, warnings)
    peers, peers_job, peers_skipped, peers_best = peers_of(events)
    view = {
        "peers": peers, "peers_job": peers_job, "peers_skipped": peers_skipped, "peers_best": peers_best,
        "peers_note": NO_PEERS_SYNTHETIC if synthetic and not peers else "",
        "final_line": clip(as_text(end.get("final_line")), 1200)[0] if end.get("final_line") else "",
        "run_id": as_text(start.get("run_id")) or as_text(events[0].get("run_id") if events else "") or run_dir.name,
        "run_dir": run_dir.name, "live": not end, "has_events": bool(events),
        "resume_path": str(run_dir.resolve()),   # what the terminal prints: works from any directory
        "refresh_s": REFRESH_S, "synthetic": synthetic, "backends": backends,
        "backend": ", ".join(backends) or "—",
        **_run_header(start, end, events, iters, base_res),
        "interruptions": interruptions_of(end, events),
        **_champion_history(events, iters, end, bool(base_ev), base_res, ctx["dom_of"]),
        "counts": _counts(iters), "iters": iters, "research": research, "entries": items,
        "baseline": _baseline_card(base_ev, base_res, files, limits) if base_ev else None,
        "champion_href": files.href("champion.py"),
        "warnings": warnings,
        "limits": limits, "generated": fmt_ts(_dt.datetime.now(_dt.timezone.utc).isoformat()),
    }
    view["chart"] = chart.build_chart(view)
    view["tree"] = treeview.build_tree(iters, view.get("champ_id"), synthetic)
    view["inline_bytes"] = _inline_bytes(iters, research)
    return view


def _frame_events(events) -> tuple[dict, dict, dict]:
    """run_start, run_end ({} while the run is live, or live again after a resume) and the baseline."""
    starts = [e for e in events if e.get("event") == "run_start"]
    ends = [e for e in events if e.get("event") == "run_end"]
    if ends and events[-1] is not ends[-1]:   # interrupted, then resumed: live again
        ends = []
    baselines = [e for e in events if e.get("event") == "baseline"]
    return (as_dict(starts[0] if starts else None), as_dict(ends[-1] if ends else None),
            as_dict(baselines[-1] if baselines else None))


def _cards(events, ctx, warnings: list) -> tuple[list, list, list]:
    """(every card in log order, the iterations' cards, the research cards); a bad event is a warning."""
    items, iters, research = [], [], []
    unknown = 0
    sights = {as_text(e.get("candidate_id")): e for e in events if e.get("event") == "sight"}
    for idx, ev in enumerate(events):
        kind = ev.get("event")
        try:
            if kind == "iteration":
                it = build_iteration(ev, idx, ctx)
                join_sight(it, sights.get(it["cid"]))
                ctx["dom_of"][it["cid"]] = it["dom"]
                iters.append(it)
                items.append(it)
            elif kind == "research":
                r = build_research(ev, len(research) + 1, ctx)
                r["after_iters"] = len(iters)
                research.append(r)
                items.append(r)
            elif kind not in ("run_start", "run_end", "baseline", "final", "resume", "sight"):
                unknown += 1
        except Exception as e:  # one bad event must not take the page down
            warnings.append(f"event {idx + 1} ({as_text(kind)}) could not be rendered: {type(e).__name__}: {e}")
    if unknown:
        warnings.append(f"{unknown} event(s) of unknown type ignored")
    # parent links resolve to the parent's own card once every card has an id
    for it in iters:
        if it["parent"] and not it["parent_dom"]:
            it["parent_dom"] = ctx["dom_of"].get(it["parent"])
    return items, iters, research


def _champion_history(events, iters, end: dict, has_baseline: bool, base_res: dict, dom_of: dict) -> dict:
    """The baseline's and the champion's times, speedup and rooflines as the log records them:
    every iteration names the champion after its decision, its time and its speedup over the
    baseline; run_end has the final word. Sets each card's champ_line_ms (the chart's step line)."""
    base_ms = finite(as_dict(base_res.get("candidate")).get("mean_ms"))
    if base_ms is None:
        base_ms = finite(end.get("baseline_mean_ms"))
    champ_ms, champ_id, speedup = base_ms, "baseline" if has_baseline else None, None
    champ_roof = as_dict(as_dict(base_res.get("roofline")).get("candidate"))
    for it in iters:
        champ_id = it["champion_after"] or champ_id
        champ_ms, speedup = it["champion_after_ms"], it["speedup_vs_baseline"]
        it["champ_line_ms"] = champ_ms
    # The champion's roofline from the job that promoted it: the measurement its time and speedup
    # in the header come from, and the one its card shows (one number, from the log).
    for ev in events:
        dec = as_dict(ev.get("decision"))
        if ev.get("event") == "iteration" and verdict_of(dec, dec.get("promoted")) == "promoted":
            champ_roof = as_dict(as_dict(as_dict(ev.get("result")).get("roofline")).get("candidate"))
    if end:
        champ_ms, speedup = finite(end.get("champion_mean_ms")), finite(end.get("speedup"))
        champ_id = as_text(end.get("champion_id")) or champ_id
    base_roof = as_dict(as_dict(base_res.get("roofline")).get("candidate"))
    ceilings = as_dict(base_res.get("ceilings"))   # one device per run: the baseline job's ceilings
    return {"base_ms": base_ms, "champ_ms": champ_ms, "champ_id": champ_id, "speedup": speedup,
            "champ_dom": dom_of.get(champ_id) if champ_id else None,
            "champ_roof": roof_headline(champ_roof, ceilings), "base_roof": roof_headline(base_roof, ceilings)}


def _counts(iters) -> dict:
    counts = {v: 0 for v in VERDICTS + ("unknown",)}
    for it in iters:
        counts[it["verdict"]] = counts.get(it["verdict"], 0) + 1
    return counts


def _run_header(start: dict, end: dict, events, iters, base_res: dict) -> dict:
    """The header's fields about the run: spec, proposer, device, versions, clock, iterations."""
    t_start = parse_ts(start.get("ts")) or (parse_ts(events[0].get("ts")) if events else None)
    t_last = None
    for e in events:
        t_last = parse_ts(e.get("ts")) or t_last
    duration = finite(end.get("duration_s"))
    duration_live = False
    if duration is None and t_start and t_last:
        duration = (t_last - t_start).total_seconds()
        duration_live = not end
    done = as_int(end.get("iterations_done"))
    versions = as_dict(start.get("versions")) or as_dict(base_res.get("versions"))
    device = as_text(start.get("device")) or as_text(base_res.get("device"))
    argv = start.get("argv")
    argv_text = shlex.join([as_text(a) for a in argv]) if isinstance(argv, list) else as_text(argv)
    return {
        "spec": _spec_header(as_dict(start.get("spec"))),
        "proposer": as_text(start.get("proposer")), "model": as_text(start.get("model")),
        "endpoint_host": as_text(start.get("endpoint_host")),
        "proposer_note": clip(as_text(start.get("proposer_note")), 600)[0],
        "notes": [clip(as_text(start.get(k)), 600)[0] for k in sorted(start)
                  if k.endswith("_note") and k != "proposer_note" and isinstance(start.get(k), str) and start.get(k)],
        "patience": as_int(start.get("patience")),
        "device": clip(device, 400)[0], "seed": as_text(start.get("seed")),
        "min_gain": fmt_frac_pct(start.get("min_gain")) if start.get("min_gain") is not None else "—",
        "argv": clip(argv_text, 1000)[0], "versions": [(k, as_text(v)) for k, v in versions.items()],
        "started": fmt_ts(start.get("ts") or (events[0].get("ts") if events else None)),
        "last_event": fmt_ts(t_last.isoformat()) if t_last else "—",
        "duration": fmt_duration(duration), "duration_live": duration_live,
        "planned": as_int(start.get("iterations")), "done": len(iters) if done is None else done,
        "last_it": max([it["n"] for it in iters if it["n"] is not None] or [0]),
        "stop_reason": clip(as_text(end.get("stop_reason")), 600)[0], "stopped": as_text(end.get("stopped")),
    }


def _spec_header(spec: dict) -> dict:
    if isinstance(spec.get("resolved"), dict):          # a spec logged as {name, path, resolved: {...}}
        spec = {**spec["resolved"], **{k: v for k, v in spec.items() if v is not None and k != "resolved"}}
    tol = spec.get("tolerance")
    tol_text = (", ".join(f"{as_text(k)} ≤ {fmt_num(v)}" for k, v in tol.items()) if isinstance(tol, dict)
                else (f"rel_l2 ≤ {fmt_num(tol)}" if num(tol) is not None else as_text(tol)))
    return {"name": as_text(spec.get("name")) or "(unnamed spec)", "path": as_text(spec.get("path")),
            "entry": as_text(spec.get("entry")), "dtype": as_text(spec.get("dtype")),
            "description": clip(as_text(spec.get("description")), 600)[0],
            "shapes": [shape_label(s) for s in as_list(spec.get("shapes"))],
            "check_shapes": [shape_label(s) for s in as_list(spec.get("check_shapes"))],
            "tolerance": tol_text}


def _baseline_card(base_ev: dict, base_res: dict, files: RunFiles, limits: dict) -> dict:
    return {
        "file": as_text(base_ev.get("candidate_file")) or "baseline.py",
        "href": files.href(as_text(base_ev.get("candidate_file")) or "baseline.py"),
        "timing_rows": stats_rows(base_res.get("candidate"), base_res.get("champion"))
        if base_res.get("candidate") or base_res.get("champion") else [],
        "rel_rows": rel_rows(base_res)[0], "tolerance": rel_rows(base_res)[1],
        "roof_rows": roof_rows(base_res.get("roofline"), base_res.get("ceilings")),
        "error": clip(as_text(base_res.get("error")), limits["text"])[0] if base_res.get("error") else "",
        "ok": base_res.get("ok"), "mode": as_text(base_res.get("mode")), "clock": fmt_clock(base_ev.get("ts")),
        "diagnosis": diagnosis_texts(base_ev.get("diagnosis")), "profile_lines": profile_texts(base_res),
    }


def _inline_bytes(iters, research) -> int:
    """About how many bytes the inline texts add to the page (the size budget's measure)."""
    inline = 0
    for it in iters:
        inline += len(it["note"]) * 2 + len(it["reason"]) * 2 + sum(len(e["text"]) for e in it["errors"])
        inline += len(it["diff"]["html"]) if it["diff"] else 0
        inline += sum(len(t["text"]) for t in (it["prompt"], it["response"]) if t)
    inline += sum(len(r["notes"]) for r in research)
    return int(inline * 1.04)        # escaping adds a little
