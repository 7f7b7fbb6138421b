"""The page's SVG chart: time per iteration, the champion's step line, research marks, as plain coordinates."""
from __future__ import annotations

import math

from view.htmlfmt import clip, fmt_ms, fmt_num, fmt_speedup

def nice_step(span: float, target: int) -> float:
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
    # peers sit at their mean, like every point of this mean-time chart
    peers = [{**p, "at_ms": p.get("mean_ms") or p.get("median_ms")} for p in view.get("peers") or []]
    peers = [p for p in peers if p["at_ms"] and p["at_ms"] > 0]
    vals += [p["at_ms"] for p in peers]
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
            step = nice_step(hi - lo + 2 * pad, 5)
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
            step = nice_step(yhi - ylo, 5)
            yt, v = [], ylo
            while v <= yhi + step * 1e-9:
                yt.append(round(v, 12))
                v += step
        yticks = [{"y": Y(v), "label": fmt_num(v, 3)} for v in yt if v > 0 or not log]

    xstep = max(1, int(nice_step(xmax, 10)))
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
        if it["speed"] is not None and timed:
            tip.append(f"speed {fmt_speedup(it['speed'])} the champion")
        if it["reason"]:
            tip.append(clip(it["reason"], 160)[0])
        if it["note"]:
            tip.append("note: " + clip(it["note"], 160)[0])
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
                                f"{before}: {clip(r['query'], 160)[0]}"})
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
    # each peer: a labelled horizontal reference line at its mean (timed in the same job as
    # the baseline or the final champion); labels that would overlap are staggered
    peer_lines, last_ly = [], None
    for p in sorted(peers, key=lambda p: -p["at_ms"]):
        y = Y(p["at_ms"])
        ly = y - 4 if last_ly is None or abs(y - 4 - last_ly) >= 11 else last_ly + 11
        last_ly = ly
        text = f"{p['label']} {fmt_ms(p['at_ms'])} ms"
        peer_lines.append({"y": y, "ly": ly, "label": text,
                           "tip": f"peer {text} (mean; timed in the {view.get('peers_job') or '?'} job)"})
    return {"W": W, "H": H, "L": L, "R": R, "T": T, "B": B, "pw": pw, "ph": ph, "lane_y": lane_y,
            "peer_lines": peer_lines,
            "log": log, "has_data": bool(vals), "yticks": yticks, "xticks": xticks, "path": path,
            "markers": markers, "measured": measured, "research": research, "base": base_pt,
            "end_label": end_label, "xmax": xmax, "any_untimed": any(not m["timed"] for m in markers)}


