"""The page's SVG chart: time per iteration, the champion's step line, research marks, as plain coordinates."""
from __future__ import annotations

import math

from kernloop.view.htmlfmt import clip, fmt_ms, fmt_num, fmt_speedup


def nice_step(span: float, target: int) -> float:
    raw = span / max(target, 1)
    if raw <= 0 or not math.isfinite(raw):
        return 1.0
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


W, H = 1000, 340
L, R, T, B = 70, 64, 46, 44       # plot margins; the band above T-12 is the "no timing" lane
LANE_Y = 22


class Axes:
    """Iteration -> x and milliseconds -> y (log where the times span more than 3x) in the plot."""

    def __init__(self, xmax: int, vals: list[float]):
        self.xmax, self.pw, self.ph = xmax, W - L - R, H - T - B
        self.log = False
        if vals:
            lo, hi = min(vals), max(vals)
            self.log = hi / lo > 3.0
            if self.log:
                self.ylo, self.yhi = math.log10(lo) - 0.06, math.log10(hi) + 0.06
            else:
                pad = (hi - lo) * 0.12 or hi * 0.05 or 1.0
                step = nice_step(hi - lo + 2 * pad, 5)
                self.ylo = max(0.0, math.floor((lo - pad) / step) * step)
                self.yhi = math.ceil((hi + pad) / step) * step
                if self.yhi <= self.ylo:
                    self.yhi = self.ylo + step
        else:
            self.ylo, self.yhi = 0.0, 1.0

    def X(self, i):
        return round(L + self.pw * (i / self.xmax), 1)

    def Y(self, v):
        t = math.log10(v) if self.log else v
        return round(T + self.ph * (1 - (t - self.ylo) / (self.yhi - self.ylo)), 1)

    def yticks(self) -> list[dict]:
        ylo, yhi = self.ylo, self.yhi
        if self.log:
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
        return [{"y": self.Y(v), "label": fmt_num(v, 3)} for v in yt if v > 0 or not self.log]


def build_chart(view: dict) -> dict:
    """The chart's coordinates from the view model: axes, the champion's step line, markers, marks."""
    iters = view["iters"]
    xmax = max([view["planned"] or 0, view["last_it"], len(iters), 1])
    # peers sit at their mean, like every point of this mean-time chart
    peers = [{**p, "at_ms": p.get("mean_ms") or p.get("median_ms")} for p in view.get("peers") or []]
    peers = [p for p in peers if p["at_ms"] and p["at_ms"] > 0]
    vals = _values(view, peers)
    ax = Axes(xmax, vals)
    xstep = max(1, int(nice_step(xmax, 10)))
    champ_pts = _champion_points(view)
    markers, measured = _markers(view, ax, vals)
    return {"W": W, "H": H, "L": L, "R": R, "T": T, "B": B, "pw": ax.pw, "ph": ax.ph, "lane_y": LANE_Y,
            "peer_lines": _peer_lines(peers, ax, view.get("peers_job")),
            "log": ax.log, "has_data": bool(vals), "yticks": ax.yticks() if vals else [],
            "xticks": [{"x": ax.X(i), "label": "base" if i == 0 else str(i)} for i in range(0, xmax + 1, xstep)],
            "path": _step_path(champ_pts, ax, view["last_it"]),
            "markers": markers, "measured": measured, "research": _research_marks(view, ax),
            "base": _base_point(view, ax), "end_label": _end_label(view, ax, champ_pts),
            "xmax": xmax, "any_untimed": any(not m["timed"] for m in markers)}


def _values(view: dict, peers: list[dict]) -> list[float]:
    """Every positive time the chart draws: the y axis spans them."""
    vals = []
    if view["base_ms"] is not None:
        vals.append(view["base_ms"])
    vals += [p["at_ms"] for p in peers]
    for it in view["iters"]:
        for v in (it["cand_ms"], it["champ_ms"], it.get("champ_line_ms")):
            if v is not None and v > 0:
                vals.append(v)
    return [v for v in vals if v is not None and math.isfinite(v) and v > 0]


def _champion_points(view: dict) -> list[tuple]:
    """(iteration, champion ms) from the baseline on."""
    champ_pts = []
    if view["base_ms"] is not None:
        champ_pts.append((0, view["base_ms"]))
    for k, it in enumerate(view["iters"]):
        v = it.get("champ_line_ms")
        if v is not None and v > 0:
            champ_pts.append((it["n"] if it["n"] is not None else k + 1, v))
    return champ_pts


def _step_path(champ_pts: list[tuple], ax: Axes, last_it: int) -> str:
    """The champion as a step line over iterations (SVG path)."""
    if not champ_pts:
        return ""
    X, Y = ax.X, ax.Y
    path = f"M{X(champ_pts[0][0])},{Y(champ_pts[0][1])}"
    prev_y = Y(champ_pts[0][1])
    for i, v in champ_pts[1:]:
        path += f"H{X(i)}V{Y(v)}" if Y(v) != prev_y else f"H{X(i)}"
        prev_y = Y(v)
    return path + f"H{X(max(champ_pts[-1][0], last_it))}"


def _markers(view: dict, ax: Axes, vals: list[float]) -> tuple[list[dict], list[dict]]:
    """One marker per iteration (its candidate's time, or the no-timing lane) with its tooltip,
    and the champion's time measured in the same job."""
    markers, measured = [], []
    for k, it in enumerate(view["iters"]):
        i = it["n"] if it["n"] is not None else k + 1
        timed = it["cand_ms"] is not None and it["cand_ms"] > 0
        err = None
        if timed and it["cand_std"]:
            lo_v = max(it["cand_ms"] - it["cand_std"], min(vals) if vals else it["cand_ms"])
            err = (ax.Y(it["cand_ms"] + it["cand_std"]), ax.Y(lo_v))
        markers.append({"x": ax.X(i), "y": ax.Y(it["cand_ms"]) if timed else LANE_Y, "timed": timed,
                        "verdict": it["verdict"], "dom": it["dom"],
                        "tip": _marker_tip(it, timed, view["synthetic"]), "err": err})
        if it["champ_ms"] is not None and it["champ_ms"] > 0:
            measured.append({"x": ax.X(i), "y": ax.Y(it["champ_ms"])})
    return markers, measured


def _marker_tip(it: dict, timed: bool, synthetic: bool) -> str:
    tip = [f"{it['label']} {it['cid']} · {it['verdict_label']}"]
    mod = " (modeled)" if synthetic else ""
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
    return "\n".join(tip)


def _research_marks(view: dict, ax: Axes) -> list[dict]:
    """A vertical mark before the iteration each research event preceded; short labels when crowded."""
    research = []
    for r in view["research"]:
        before = r["before"] if r["before"] is not None else r["after_iters"] + 1
        research.append({"x": round(ax.X(before - 0.5) if before > 0 else ax.X(0), 1), "dom": r["dom"],
                         "label": "research" + (f" · {r['source']}" if r["source"] else ""),
                         "tip": f"research ({r['trigger'] or '?'}, {r['source'] or '?'}) before iteration "
                                f"{before}: {clip(r['query'], 160)[0]}"})
    # crowded research lines get short labels (R1, R2, ...); the tooltip keeps the details
    xs = [r["x"] for r in research]
    crowded = any(b - a < 120 for a, b in zip(xs, xs[1:])) or (xs and xs[-1] > L + ax.pw - 110)
    for k, r in enumerate(research, 1):
        r["ly"] = T - 4
        if crowded:
            r["label"] = f"R{k}"
    return research


def _base_point(view: dict, ax: Axes) -> dict | None:
    if view["base_ms"] is None:
        return None
    by = ax.Y(view["base_ms"])
    # the text label only where it cannot sit on the first iterations' markers
    return {"x": ax.X(0), "y": by,
            "label": f"baseline {fmt_ms(view['base_ms'])} ms" + (" (modeled)" if view["synthetic"] else ""),
            "ly": by + 16 if by < T + ax.ph / 2 else by - 8, "show_label": ax.pw / ax.xmax >= 60}


def _end_label(view: dict, ax: Axes, champ_pts: list[tuple]) -> dict | None:
    if not (champ_pts and view["speedup"]):
        return None
    return {"x": ax.X(max(champ_pts[-1][0], view["last_it"])),
            "y": ax.Y(champ_pts[-1][1]), "text": f"{fmt_speedup(view['speedup'])}"}


def _peer_lines(peers: list[dict], ax: Axes, job) -> list[dict]:
    """Each peer: a labelled horizontal reference line at its mean (timed in the same job as
    the baseline or the final champion); labels that would overlap are staggered."""
    peer_lines, last_ly = [], None
    for p in sorted(peers, key=lambda p: -p["at_ms"]):
        y = ax.Y(p["at_ms"])
        ly = y - 4 if last_ly is None or abs(y - 4 - last_ly) >= 11 else last_ly + 11
        last_ly = ly
        text = f"{p['label']} {fmt_ms(p['at_ms'])} ms"
        peer_lines.append({"y": y, "ly": ly, "label": text,
                           "tip": f"peer {text} (mean; timed in the {job or '?'} job)"})
    return peer_lines
