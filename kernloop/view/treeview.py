"""The page's search tree: every judged candidate a node under the parent the log names, coloured by verdict, the champion's path drawn heavy, as plain coordinates."""
from __future__ import annotations

from kernloop.view.htmlfmt import fmt_ms

W = 1000                  # the drawing's width; its height follows the number of leaves
L, R, T, B = 70, 24, 18, 18
ROW = 16                  # pixels between two leaves
MAX_NODES = 400           # a larger tree is not drawn (the page says so): the layout stays bounded
ROOT = "baseline"


def _children(iters: list[dict]) -> dict[str, list[str]]:
    """parent id -> its children's ids, in the order they were judged; a parent the log does not
    hold (a pre-tree log's missing field) hangs from the baseline."""
    ids = {ROOT} | {x["cid"] for x in iters}
    kids: dict[str, list[str]] = {}
    for x in iters:
        p = x.get("parent") if x.get("parent") in ids and x.get("parent") != x["cid"] else ROOT
        kids.setdefault(p, []).append(x["cid"])
    return kids


def _layout(kids: dict[str, list[str]]) -> tuple[dict[str, tuple[int, float]], int, int]:
    """Each node's (depth, row): leaves take rows 0, 1, 2, ... depth first; a parent sits at the
    middle of its first and last child. Iterative (a chain of 400 must not recurse 400 deep)."""
    pos: dict[str, tuple[int, float]] = {}
    next_row, depth_max = 0, 0
    stack: list[tuple[str, int, bool]] = [(ROOT, 0, False)]
    seen: set[str] = set()
    while stack:
        nid, depth, done = stack.pop()
        if done:
            rows = [pos[c][1] for c in kids.get(nid, []) if c in pos]
            pos[nid] = (depth, (rows[0] + rows[-1]) / 2 if rows else float(next_row))
            if not rows:
                next_row += 1
            continue
        if nid in seen:   # a cycle in a damaged log: drawn once
            continue
        seen.add(nid)
        depth_max = max(depth_max, depth)
        stack.append((nid, depth, True))
        stack.extend((c, depth + 1, False) for c in reversed(kids.get(nid, [])))
    return pos, max(next_row, 1), depth_max


def _path(champion: str | None, parent_of: dict[str, str]) -> set[str]:
    """The champion and its ancestors up to the baseline."""
    out, nid = set(), champion
    while nid and nid not in out:
        out.add(nid)
        nid = parent_of.get(nid)
    return out | {ROOT}


def build_tree(iters: list[dict], champion: str | None, synthetic: bool = False) -> dict | None:
    """The drawing's coordinates from the page's iteration cards (their `parent` is the log's
    parent_id): None where no candidate names a parent (a log from before the tree). A synthetic
    run's times are said to be modeled."""
    if not iters or not any(x.get("parent") for x in iters):
        return None
    if len(iters) > MAX_NODES:
        return {"too_many": len(iters), "max": MAX_NODES}
    kids = _children(iters)
    parent_of = {c: p for p, cs in kids.items() for c in cs}
    pos, rows, depth_max = _layout(kids)
    dx = min(90.0, (W - L - R) / max(depth_max, 1))
    H = T + B + ROW * (rows - 1) + 1
    xy = {nid: (L + d * dx, T + r * ROW) for nid, (d, r) in pos.items()}
    on_path = _path(champion, parent_of)
    by_id = {x["cid"]: x for x in iters}
    edges = [{"x1": xy[p][0], "y1": xy[p][1], "xm": xy[p][0] + dx / 2, "x2": xy[c][0], "y2": xy[c][1],
              "path": c in on_path and p in on_path} for c, p in parent_of.items() if c in xy and p in xy]
    nodes = []
    for nid, (x, y) in xy.items():
        it = by_id.get(nid, {})
        verdict = "baseline" if nid == ROOT else it.get("verdict", "unknown")
        ms = it.get("cand_ms")
        tip = f"{nid}: {verdict}" + (f", {fmt_ms(ms)} ms{' (modeled)' if synthetic else ''}" if isinstance(ms, (int, float)) else "") + \
            (f" · parent {parent_of[nid]}" if nid in parent_of else "") + \
            (f" · {it['selection']}" if it.get("selection") else "")
        nodes.append({"id": nid, "x": x, "y": y, "verdict": verdict, "path": nid in on_path,
                      "champion": nid == champion, "dom": it.get("dom") or ("k-baseline" if nid == ROOT else None),
                      "tip": tip})
    return {"W": W, "H": H, "edges": edges, "nodes": nodes, "depth": depth_max, "leaves": rows,
            "path_len": len(on_path) - 1, "too_many": 0, "max": MAX_NODES}
