#!/usr/bin/env python3
"""Every table of record, generated from the committed result JSON: docs/results.md (the current
table for each question) and docs/history.md (older numbers, each with the commit that added
its JSON). Nothing here is typed by hand: a number in either file is a value of the JSON its
section cites, or a count or ratio of such values, and `check` says which shown time is in no
cited JSON (tests/test_results_tables.py runs it, and compares both files with a fresh render).

  python benchmarks/tables.py            # write docs/results.md and docs/history.md
  python benchmarks/tables.py --check    # exit 1 if either differs from a fresh render, or a time
                                         # shown is in none of the JSON its section cites
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.judge_tables import (AA_HEADER, LLM_HEADER, SPEED_HEADER, SPEED_S7, SPEED_S9, SPEED_S10,  # noqa: E402
                                aa_jobs_rows, aa_section, bias_section, burst_section, cost_section,
                                even_section, fidelity_section, llm_rows, llm_section, older_aa_jobs,
                                once_section, power_section, prewarm_section, speed_rows,
                                speed_section)
from benchmarks.family_tables import family_history, family_sections  # noqa: E402
from benchmarks.first_tables import first_section  # noqa: E402
from benchmarks.table_kit import clip, load, md_table, ms, pct, section  # noqa: E402

RESULTS, HISTORY = ROOT / "docs" / "results.md", ROOT / "docs" / "history.md"
SHIPPED = ["matmul", "softmax", "rmsnorm", "layernorm", "gemv", "matmul_bias_gelu"]


# ---------------------------------------------------------------- champion against the best peer

def peers_files() -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "benchmarks/results").glob("session*/peers_h200*.json"))


def peers_rows_h200(files: list[str]) -> list[list[str]]:
    rows = []
    for f in files:
        for name, r in load(f)["specs"].items():
            if "error" in r:
                rows.append([name, "error: " + r["error"][:80], "", "", "", "", "", ""])
                continue
            bp = r.get("best_peer")
            without = "; ".join(f"{k}: {clip(v)}" for k, v in sorted((r.get("skipped") or {}).items())) or "—"
            rows.append([name, str(r["iterations"]), ms(r["baseline_median_ms"]), ms(r["champion_median_ms"]),
                         f"{bp['label']} {ms(bp['median_ms'])}" if bp else "none timed",
                         f"**{r['champion_vs_best_peer']:.2f}×**" if r.get("champion_vs_best_peer") else "—",
                         without, f"{r['job_wall_s_median']:.1f} s / {r['verdict_s_median']:.1f} s"
                         if r.get("job_wall_s_median") and r.get("verdict_s_median") else "—"])
    return rows


def peers_rows_session3(files: list[str]) -> list[list[str]]:
    rows = []
    for f in files:
        for name, r in load(f)["specs"].items():
            t = r["table"]
            peers = {k: v for k, v in t.items() if k not in ("naive baseline", "KernLoop champion", "by hand (rewrite)")}
            best = min(peers, key=lambda k: peers[k]["median_ms"])
            champ = t["KernLoop champion"]["median_ms"]
            without = "; ".join(f"{k}: {clip(v['reason'] if isinstance(v, dict) else v)}"   # {reason, kind} now
                                for k, v in sorted(r["peers_skipped"].items())) or "—"
            rows.append([name, str(r["iterations"]), ms(t["naive baseline"]["median_ms"]), ms(champ),
                         f"{best} {ms(peers[best]['median_ms'])}", f"**{peers[best]['median_ms'] / champ:.2f}×**",
                         without, "—"])
    return rows


def peers_section(current: bool) -> str:
    h200 = peers_files()
    s3 = ["benchmarks/results/session3/call2_spec_matmul.json", "benchmarks/results/session3/call2_spec_rest.json"]
    header = ["spec", "candidates", "naive", "champion", "best peer", "champion vs best peer",
              "computed without (why)", "job wall / verdict (median)"]
    intro = ("Medians. \"champion vs best peer\" is the best peer's median over the champion's "
             "(above 1 the champion is faster); it is computed only over the peers timed, and every "
             "peer left out is named with its reason on the same row.")
    if current and h200:
        return section("Champion against the best peer, on the H200", h200,
                       intro + " Peers timed in the loop's own jobs (the final job, else the baseline's), "
                       "beside the champion, by `benchmarks/peers_h200.py`.", md_table(header, peers_rows_h200(h200)))
    if current or h200:
        return section("Champion against the best peer, on the H200 (session 3)", s3,
                       intro + " After each loop, side by side in one process (`benchmarks/spec_results.py`). "
                       "Liger-Kernel was not installed on that image: the ratios are against the best "
                       "peer that was timed, not against Liger.", md_table(header, peers_rows_session3(s3)))
    return ""

# ---------------------------------------------------------------- history

def history_sections() -> list[str]:
    out = family_history()
    if peers_files():
        out.append(peers_section(current=False))
    older = older_aa_jobs()
    out.append(section("A/A from separate jobs before both sides were even (sessions 5 and 7)", older,
                       "The judge's default before ef29da1e: the champion's arena sized for the timed sets "
                       "only, its timed outputs not read. Softmax's champion was slower job after job.",
                       md_table(AA_HEADER, aa_jobs_rows(older, ""))))
    out.append(section("Verdict speed, session 10: a killed worker's exit waited for", SPEED_S10,
                       "Before the end of a job stopped waiting for the rejected candidate's worker to exit "
                       "(0.115 s a job), and before three bursts (benchmarks/results/session10/README.md).",
                       md_table(SPEED_HEADER, speed_rows(SPEED_S10))))
    out.append(section("Verdict speed, session 9: two spares, every A/B to its last rep", SPEED_S9,
                       "Before three spares, early rejection, the burst rule and the reference reuse "
                       "(benchmarks/results/session9/README.md).",
                       md_table(SPEED_HEADER, speed_rows(SPEED_S9))))
    f = "benchmarks/results/session9/callC_verdict_llm.json"
    out.append(section("An LLM-paced run, session 9: K=1 only", [f],
                       "K=4 did not run: the call's budget was spent.", md_table(LLM_HEADER, llm_rows(f))))
    out.append(section("Verdict speed, session 7: warm judge against cold", SPEED_S7,
                       "Before the compile warm-up and the even sides. The two ran in two device calls of "
                       "one session, 20 minutes apart, on two machine starts: not side by side in one call.",
                       md_table(SPEED_HEADER, speed_rows(SPEED_S7))))
    f = "benchmarks/results/session3/call1_judge_validation.json"
    v = load(f)
    out.append(section("A/A through the judge, session 3 (biased: see session 4)", [f],
                       "100 rounds inside one judge job; matmul's −1.4% median gain was the A/B bias against "
                       "the candidate found and removed in session 4.",
                       md_table(["what", "false promotions", "gain median [min, max]"],
                                [[k, f"{v[k]['promotions']}/{v[k]['n']}", f"{pct(v[k]['gain_median'])} "
                                  f"[{pct(v[k]['gain_min'])}, {pct(v[k]['gain_max'])}]"]
                                 for k in ("aa_softmax", "aa_matmul")])))
    f = "benchmarks/results/session4/call1_aa_batch_biased.json"
    d = load(f)
    out.append(section("A/A with batches before the arena fix (session 4, call 1)", [f],
                       "Every copy measured slower than the champion it is identical to: 0 false promotions "
                       "for the wrong reason.",
                       md_table(["decisions", "copies that won", "without confirmation", "with"],
                                [[str(d["decisions"]), str(d["copies_that_won_in_their_batch"]),
                                  f"{d['false_promotions_without_confirmation']}/{d['decisions']}",
                                  f"{d['false_promotions_with_confirmation']}/{d['decisions']}"]])))
    files = ["benchmarks/results/session2/call1_spec_matmul.json", "benchmarks/results/session2/call2_spec_rowwise.json",
             "benchmarks/results/session2/call3_spec_matmul_bias_gelu.json", "benchmarks/results/session2/call3_spec_layernorm.json"]
    rows = []
    for fi in files:
        for name, r in load(fi)["specs"].items():
            t = r["table"]
            alts = {k: v for k, v in t.items() if k not in ("naive baseline", "KernLoop champion", "by hand (rewrite)")}
            rows.append([name, Path(fi).name, str(r["iterations"]), ms(t["naive baseline"]["median_ms"]),
                         ms(t["KernLoop champion"]["median_ms"]),
                         ms(t["by hand (rewrite)"]["median_ms"]) if "by hand (rewrite)" in t else "—",
                         "; ".join(f"{k} {ms(v['median_ms'])}" for k, v in alts.items())])
    out.append(section("The tuner alone, session 2 (2026-11-29, single-process checker)", files,
                       "Side by side in one process after each loop; torch.compile was not a peer yet.",
                       md_table(["spec", "file", "candidates", "naive", "champion", "by hand", "alternatives"], rows)))
    f = "benchmarks/results/session2/call1_checker_validation.json"
    v = load(f)
    out.append(section("A/A and power, session 2 (single-process checker)", [f],
                       "Each decision a full interleaved A/B inside one process; power: the champion padded "
                       "by a copy sized for ~5% of its time.",
                       md_table(["what", "spec", "promoted", "gain median [min, max]"],
                                [[k, v[k]["spec"], f"{v[k]['promotions']}/{v[k]['n']}", f"{pct(v[k]['gain_median'])} "
                                  f"[{pct(v[k]['gain_min'])}, {pct(v[k]['gain_max'])}]"]
                                 for k in ("aa_membound", "aa_matmul", "power_membound", "power_matmul")])))
    return out


# ---------------------------------------------------------------- files and checks

HEAD = ("<!-- Generated by `python benchmarks/tables.py` from the JSON each section cites; do not edit: "
        "tests/test_results_tables.py fails on a number that differs from a fresh render. -->")


COMMANDS = ("A source's command is quoted from its JSON's record, as it ran at that commit: the scripts "
            "were in `bench/` until issue 41 moved them to `benchmarks/`.")


def render_results() -> str:
    parts = [HEAD, "# Results of record",
             "One current table per question, measured on one NVIDIA H200 (the four sections of issues 43-45: one "
             "NVIDIA H100) lent through the project's "
             "`device` tool; the raw JSON under `benchmarks/results/`. Older numbers, superseded "
             "by these, are in [history.md](history.md). No time here is synthetic (the tree-against-chain section's scripted row counts proposals of a selection rule on the CPU: no time at all). " + COMMANDS,
             peers_section(current=True), *family_sections(), aa_section(), even_section(), bias_section(), power_section(),
             burst_section(), speed_section(), prewarm_section(), once_section(), first_section(), llm_section(),
             cost_section(),
             fidelity_section()]
    return "\n\n".join(p for p in parts if p) + "\n"


def render_history() -> str:
    parts = [HEAD, "# Older numbers",
             "Numbers superseded by [results.md](results.md), kept with the commit that added their JSON "
             "(and the code the session's README names). Read them with the note each carries. " + COMMANDS]
    return "\n\n".join(parts + history_sections()) + "\n"


def _floats(x, out: set) -> set:
    if isinstance(x, bool):
        return out
    if isinstance(x, (int, float)):
        out.add(float(x))
    elif isinstance(x, dict):
        for v in x.values():
            _floats(v, out)
    elif isinstance(x, list):
        for v in x:
            _floats(v, out)
    return out


def unsupported_times(markdown: str) -> list[str]:
    """Every 'N.NNNN ms' in a section's table that is not a value (at the shown precision) of the
    JSON the section cites: '<section>: <number>' per miss."""
    misses = []
    for block in re.split(r"^## ", markdown, flags=re.M)[1:]:
        title = block.splitlines()[0]
        cited = re.findall(r"`(benchmarks/results/[^`]+\.json)`", block.split("\n|", 1)[0])
        values = set()
        for f in cited:
            _floats(load(f), values)
        for line in block.splitlines():
            if not line.startswith("|"):
                continue
            for sign, num, dec in re.findall(r"([+\-−]?)(\d+\.(\d+)) ms", line):
                shown, places = float(num) * (-1 if sign in "-−" and sign else 1), len(dec)
                if not any(round(v, places) == shown for v in values):
                    misses.append(f"{title}: {sign}{num} ms")
    return misses


def check() -> list[str]:
    problems = []
    for path, text in ((RESULTS, render_results()), (HISTORY, render_history())):
        if not path.exists() or path.read_text() != text:
            problems.append(f"{path.relative_to(ROOT)} differs from `python benchmarks/tables.py`")
        problems += [f"{path.name}: {m} is in none of the JSON it cites" for m in unsupported_times(text)]
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args(argv)
    if a.check:
        problems = check()
        print("\n".join(problems) or "docs/results.md and docs/history.md are the JSON's")
        return 1 if problems else 0
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(render_results())
    HISTORY.write_text(render_history())
    print(f"wrote {RESULTS.relative_to(ROOT)} and {HISTORY.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
