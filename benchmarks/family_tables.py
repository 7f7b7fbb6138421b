"""The generated sections on sessions 25 and 28's H100 results (benchmarks/tables.py renders them): the tuner
against the best peer, the KernelBench-format problems, tree against chain, and a model end to end."""
from __future__ import annotations

from benchmarks.table_kit import ROOT, clip, load, md_table, ms, section
from benchmarks.tree_vs_chain import summary as tvc_summary

S25 = "benchmarks/results/session25/"
TVC25 = {"softmax": [S25 + "tvc_softmax.json"], "matmul": [S25 + "tvc_matmul.json"]}
KB = [S25 + "kb_families.json", S25 + "kb_bf16_mm.json"]
SCRIPTED = S25 + "tree_vs_chain_scripted.json"
S28 = "benchmarks/results/session28/"
PEERS = S28 + "peers4.json"
TVC = {"softmax": [S28 + "tvc_softmax_s0.json", S28 + "tvc_softmax_s12.json"],
       "matmul": [S28 + f for f in ("tvc_matmul_s01.json", "tvc_matmul_s2.json") if (ROOT / S28 / f).exists()]}
MODELS = [(S28 + "model_block_cards.json", S28 + "model_block_apply.json", "A model end to end (issue 44)"),
          (S25 + "model_block_cards.json", S25 + "model_block_apply.json",
           "A model end to end, operator cards only (issue 44, session 25)")]
TARGET = {"softmax": 1.00, "rmsnorm": 1.00, "layernorm": 1.00, "matmul": 0.98}   # issue 43: champion / best peer


def x(r: float | None, target: float | None = None) -> str:
    """'0.95×'; three decimals where two would round a miss of `target` up to it (0.996×)."""
    if r is None:
        return "—"
    return f"{r:.3f}×" if target is not None and r < target <= round(r, 2) else f"{r:.2f}×"


S25_PEERS = [S25 + "tvc_softmax.json", S25 + "tvc_matmul.json", S25 + "peers_norms.json"]
S26 = "benchmarks/results/session26/"


def _peer_runs(sources: list[str]) -> list[tuple[str, dict]]:
    """(spec, result) per spec: a tree_vs_chain file's seed-0 tree run, or each spec of a peers_h200 file."""
    runs = []
    for f in sources:
        d = load(f)
        runs += [(n, d["runs"][n]["tree"]["0"]) for n in d["runs"]] if "runs" in d else list(d["specs"].items())
    return runs


def _not_timed(r: dict) -> str:
    """'quack (failed)' per skipped peer, or '—' (pure)."""
    sk = r.get("skipped") or {}
    return ", ".join(f"{k} ({v.get('kind', '?') if isinstance(v, dict) else clip(v, 40)})"
                     for k, v in sorted(sk.items())) or "—"


def peers_h100_section(sources: list[str] | None = None, title: str = "", intro: str = "") -> str:
    sources = sources or [PEERS]
    rows, meet, walls = [], [], []
    for name, r in _peer_runs(sources):
        bp, ratio = r.get("best_peer"), r.get("champion_vs_best_peer")
        if ratio is not None and ratio >= TARGET[name]:
            meet.append(name)
        wall = r.get("loop_wall_s")
        walls += [wall] if wall is not None else []
        rows.append([name, ms(r["baseline_median_ms"]), ms(r["champion_median_ms"]),
                     f"{bp['label']} {ms(bp['median_ms'])}" if bp else "none timed",
                     f"**{x(ratio, TARGET[name])}**" if ratio is not None else "—",
                     f"{wall:.1f}" if wall is not None else "—", _not_timed(r)])
    after = (f"The issue's targets: {x(TARGET['softmax'])} on the norms and softmax, {x(TARGET['matmul'])} on "
             f"matmul (champion / best peer, at or above). Rows that meet them: "
             f"{', '.join(meet) if meet else 'none'} ({len(meet)} of {len(rows)}).")
    if walls and len(walls) == len(rows):
        after += (f" \"run s\" is the JSON's `loop_wall_s`: the whole run's wall time, baseline job to final "
                  f"job, an upper bound on its GPU time; the longest was {max(walls):.1f} s (the issue's bound: "
                  "60 s of GPU time a spec).")
    return section(title or "The tuner against the best peer, on the H100 (issue 43)", sources,
                   (intro or "One NVIDIA H100 (the JSON's `record.device`), medians: `benchmarks/peers_h200.py`, "
                    "the tuner from each spec's naive baseline, 30 candidates or 0.8 minutes, every peer "
                    "installed. ") + "Peers timed in the loop's final job "
                   "beside the champion; \"champion / best peer\" is the JSON's `champion_vs_best_peer` (below 1 "
                   "the peer is faster), over the peers timed; every peer not timed is named with its kind.",
                   md_table(["spec", "naive baseline", "champion", "best peer", "champion / best peer",
                             "run s", "peers not timed"], rows), after)


def _dtype(d: dict) -> str:
    """'fp32' from "the problems' (fp32)", else the JSON's dtype as is (pure)."""
    s = d.get("dtype") or "?"
    return s.split("(", 1)[1].rstrip(")") if "(" in s else s


def kb_rows() -> tuple[list[list[str]], int, int, int]:
    """Rows, problems run, problems promoted, problems whose fastest correct candidate is >= 1.00x eager."""
    rows, promoted, fast = [], 0, 0
    for f in KB:
        d = load(f)
        for name, r in d["problems"].items():
            fc = r.get("fastest_correct_ms")
            fr = r["eager_median_ms"] / fc if fc else None
            promoted += bool(r.get("promotions"))
            fast += fr is not None and fr >= 1.0
            rows.append([name, _dtype(d), ms(r.get("eager_ms")), ms(r.get("champion_ms")), f"**{x(r.get('vs_eager'))}**",
                         f"yes ({r['promotions']})" if r.get("promotions") else "no", ms(fc), x(fr),
                         clip(r.get("stop_reason") or "—", 60)])
    return rows, len(rows), promoted, fast


def kb_section() -> str:
    rows, n, promoted, fast = kb_rows()
    not_run = [(name, _dtype(load(f))) for f in KB for name in load(f).get("not_run") or []]
    after = (f"{promoted} of {n} problems run ended with a promoted kernel; {fast} of {n} had a fastest correct "
             "candidate at or above 1.00× eager's median. Not run (the JSON's `not_run`: the call's "
             "`--max-minutes` ran out first): "
             + (", ".join(f"{p} ({t})" for p, t in not_run) if not_run else "none") + ".")
    return section("KernelBench-format problems from `baseline: torch` (issue 43)", KB,
                   "`benchmarks/kb_families.py` on one H100: each problem's tuner run starts from the torch "
                   "op itself, so a row keeps torch unless a candidate beat it. Eager and champion: means as "
                   "the loop's table compares them (\"vs eager\" is the JSON's `vs_eager`); the fastest correct "
                   "candidate's median against eager's median (`eager_median_ms / fastest_correct_ms`), "
                   "promoted or not. The fp32 matmul rows use TF32 in `tl.dot` "
                   "(benchmarks/results/session25/README.md).",
                   md_table(["problem", "dtype", "eager (mean)", "champion (mean)", "vs eager", "promoted",
                             "fastest correct (median)", "its ratio to eager", "stop"], rows), after)


def merged_runs(files: list[str]) -> dict:
    """One spec's runs per search and seed over several tree_vs_chain files (a later file's seed wins)."""
    runs: dict = {}
    for f in files:
        for by in load(f)["runs"].values():
            for search, seeds in by.items():
                runs.setdefault(search, {}).update(seeds)
    return runs


def tvc_rows(tvc: dict, seeds: list[str]) -> list[list[str]]:
    rows = []
    for name, files in tvc.items():
        runs = merged_runs(files)
        s = tvc_summary({name: runs})[name]   # the script's own rule, over the merged seeds
        for search in ("tree", "chain"):
            cells = [f"{ms(runs[search][k]['champion_median_ms'])} ({runs[search][k]['iterations']})"
                     if k in runs[search] else "not run" for k in seeds]
            rows.append([name, search, *cells, ms(s["median_best_ms"][search]),
                         f"**{x(s['tree_over_chain'])}** ({'within 2% or better' if s['tree_within_2pct_or_better'] else 'more than 2% slower'})"
                         if search == "tree" else ""])
    return rows


def tvc_section(tvc: dict | None = None, title: str = "Tree against chain (issue 45)", intro: str = "") -> str:
    tvc = tvc or TVC
    sc = load(SCRIPTED)
    n = len(sc["found"]["tree"])
    files = [f for fs in tvc.values() for f in fs]
    seeds = sorted({k for name, fs in tvc.items() for runs in merged_runs(fs).values() for k in runs})
    after = (f"The scripted world (`benchmarks/tree_vs_chain.py --scripted`, CPU, the selection rule alone): "
             f"{n} seeds of {sc['budget']} proposals each; the two-step kernel found by the tree in "
             f"**{sc['found_in']['tree']} of {n}**, by the chain in **{sc['found_in']['chain']} of {n}**.")
    return section(title, [*files, SCRIPTED],
                   intro or "The tuner from the spec's naive baseline on one H100, each seed a run of 30 candidates "
                   "(each cell: the champion's median, and in brackets the candidates judged: a run that reached "
                   "the speed of light stopped there). \"tree / chain\" is `benchmarks/tree_vs_chain.py`'s "
                   "summary over the seeds of all the files: the median of the tree's champions over the chain's "
                   "(above 1 the tree's is slower; the issue's bar: within 2%).",
                   md_table(["spec", "search", *[f"seed {k}" for k in seeds], "median over seeds", "tree / chain"],
                            tvc_rows(tvc, seeds)), after)


def _measured(a: dict) -> str:
    """apply's timing line: measured against predicted, and the whole-model peers."""
    if not a.get("timed"):
        return f"not timed ({a.get('why_not_timed')})"
    peers = "; ".join(f"{name} {ms(p['ms'])} (the applied model {x(p['applied_vs_it'])} as fast)" if "ms" in p
                      else f"{name} not timed ({clip(p.get('error'), 80)})" for name, p in (a.get("peers") or {}).items())
    return (f"measured **{x(a['measured'])}** (eager {ms(a['eager_ms'])}, applied {ms(a['applied_ms'])}, medians of "
            f"{a['rounds']} forwards, CUDA events, L2 flushed), **{a['saved_of_predicted'] * 100:.0f}%** of the time the "
            f"prediction saves; whole-model peers: {peers}")


def model_section(cards: str, applied_json: str, title: str) -> str:
    c, a = load(cards), load(applied_json)
    eager = {e["card"]: e["why"] for e in a.get("eager") or []}
    applied = {(e.get("card") if isinstance(e, dict) else e) for e in a.get("applied") or []}
    by_id = {k["id"]: k for k in c["cards"]}
    rows = []
    for cid in c["picked"]:
        k = by_id[cid]
        out = k.get("outcome") or {}
        rows.append([cid, k["op"], f"{k['share'] * 100:.1f}%", ms(k["ms_per_forward"]), str(k.get("iterations", "—")),
                     x(out.get("speedup")), "applied" if cid in applied else f"eager: {eager.get(cid, '?')}"])
    after = (f"Applied: **{len(applied)} of {len(c['picked'])}** picked cards; predicted speedup (Amdahl, from the "
             f"cards' speedups) **{x(a.get('predicted'))}**; {_measured(a)}. Outputs against eager: rel-L2 "
             + ", ".join(f"{k} {v:.3g}" for k, v in (a.get("rel_l2") or {}).items())
             + f" (tolerance {a.get('tolerance')}): {'match' if a.get('match') else 'no match'}.")
    return section(title, [cards, applied_json],
                   f"`orchestrator.py model` on `{c.get('model', c['build'])}` ({c['dtype']}, {c['device']}) on one H100: "
                   f"{len(c['cards'])} cards, **{ms(c['ms_per_forward'])}** a forward ({c['clock']}, over "
                   f"{c['forwards']} forwards); the picked cards, each with its op, its share of the forward and "
                   "the tuner's iterations, then `apply`'s verdict.",
                   md_table(["card", "op", "share", "ms per forward", "iterations", "speedup", "apply"], rows), after)


def family_sections() -> list[str]:
    return [peers_h100_section(), kb_section(), tvc_section(), *(model_section(*m) for m in MODELS)]


def family_history() -> list[str]:
    """Session 25's tuner against the peers (QuACK did not import) and session 26's block (the older guard)."""
    return [peers_h100_section(S25_PEERS, "The tuner against the best peer, session 25 (H100, QuACK not timed)",
                               "One NVIDIA H100. Softmax and matmul: the seed-0 `tree` run of "
                               "`benchmarks/tree_vs_chain.py` (30 candidates or 0.8 minutes); rmsnorm and layernorm: "
                               "`benchmarks/peers_h200.py` (30 candidates or 1 minute). QuACK's import failed (a "
                               "wheel was missing: docs/peers.md). "),
            tvc_section(TVC25, "Tree against chain, session 25 (runs capped at 0.8 minutes)",
                        "The tuner from the spec's naive baseline on one H100, each seed a run of 30 candidates "
                        "capped at 0.8 minutes: the cap ended most runs first, so the budgets are not exactly "
                        "equal (each cell: the champion's median, and in brackets the candidates judged). "
                        "\"tree / chain\": the median over seeds of the tree's champions over the chain's."),
            model_section(S26 + "model_block_cards.json", S26 + "model_block_apply.json",
                          "A model end to end, session 26 (the guard before 1adde8e, 10 rounds)")]
