#!/usr/bin/env python3
"""Every table of record, generated from the committed result JSON: docs/results.md (the current
table for each question) and docs/history.md (older numbers, each with the commit that added
its JSON). Nothing here is typed by hand: a number in either file is a value of the JSON its
section cites, or a count or ratio of such values, and `check` says which shown time is in no
cited JSON (tests/test_results_tables.py runs it, and compares both files with a fresh render).

  python bench/tables.py            # write docs/results.md and docs/history.md
  python bench/tables.py --check    # exit 1 if either differs from a fresh render, or a time
                                    # shown is in none of the JSON its section cites
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS, HISTORY = ROOT / "docs" / "results.md", ROOT / "docs" / "history.md"
# The commit that added each folder's JSON to the repository (JSON written before bench/record.py
# carries none of its own), and the code the session README names where it differs.
ADDED = {"results/": "97d5b5e", "results/session2/": "d6517cb", "results/session3/": "42c1b65",
         "results/session4/call1": "f405b88", "results/session4/call2": "f405b88",
         "results/session4/call3": "f405b88", "results/session4/call4": "f405b88",
         "results/session4/call5": "366d557"}
CODE = {"results/session4/call1": "0f035ca (before the arena fix)",
        "results/session4/call2": "0f035ca (before the arena fix)",
        "results/session4/call3": "the arena fix (f405b88)", "results/session4/call4": "the arena fix (f405b88)",
        "results/session4/call5": "ef026ff (every timed rep checked)"}
SHIPPED = ["matmul", "softmax", "rmsnorm", "layernorm", "gemv", "matmul_bias_gelu"]


def load(rel: str) -> dict:
    return json.loads((ROOT / rel).read_text())


# JSON whose record names the wrong commit (a device's stale .git): the code that ran, from the
# session's README.
RAN_ON = {"results/session5/aa_jobs_softmax.json": "935650a"}


def provenance(rel: str) -> str:
    """'`results/x.json` (commit 1a2b3c4, dirty: no)' from its record, else the commit that
    added it to the repository."""
    rec = load(rel).get("record") or {}
    if rel in RAN_ON:
        return f"`{rel}` (made by commit {RAN_ON[rel]}: `{rec.get('command', '?')}`)"
    if rec.get("commit"):
        dirty = {True: ", uncommitted changes", False: "", None: ""}[rec.get("dirty")]
        return f"`{rel}` (made by commit {rec['commit'][:10]}{dirty}: `{rec.get('command', '?')}`)"
    key = max((k for k in ADDED if rel.startswith(k)), key=len)
    code = next((v for k, v in CODE.items() if rel.startswith(k)), None)
    return f"`{rel}` (added in commit {ADDED[key]}" + (f"; code: {code}" if code else "") + ")"


def ms(x) -> str:
    return "—" if x is None else f"{x:.4f} ms"


def pct(x, d=2) -> str:
    return "—" if x is None else f"{x * 100:+.{d}f}%"


def clip(text: str, n: int = 110) -> str:
    text = " ".join(str(text).split()).replace("|", "/")
    return text if len(text) <= n else text[: n - 1].rstrip() + "…"


def md_table(header: list[str], rows: list[list[str]]) -> str:
    return "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
                     + ["| " + " | ".join(r) + " |" for r in rows])


def section(title: str, sources: list[str], intro: str, table: str, after: str = "") -> str:
    src = "Source: " + "; ".join(provenance(s) for s in sources) + "."
    return "\n\n".join(x for x in (f"## {title}", intro, src, table, after) if x)


# ---------------------------------------------------------------- champion against the best peer

def peers_files() -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "results").glob("session*/peers_h200*.json"))


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
            without = "; ".join(f"{k}: {clip(v)}" for k, v in sorted(r["peers_skipped"].items())) or "—"
            rows.append([name, str(r["iterations"]), ms(t["naive baseline"]["median_ms"]), ms(champ),
                         f"{best} {ms(peers[best]['median_ms'])}", f"**{peers[best]['median_ms'] / champ:.2f}×**",
                         without, "—"])
    return rows


def peers_section(current: bool) -> str:
    h200 = peers_files()
    s3 = ["results/session3/call2_spec_matmul.json", "results/session3/call2_spec_rest.json"]
    header = ["spec", "candidates", "naive", "champion", "best peer", "champion vs best peer",
              "computed without (why)", "job wall / verdict (median)"]
    intro = ("Medians. \"champion vs best peer\" is the best peer's median over the champion's "
             "(above 1 the champion is faster); it is computed only over the peers timed, and every "
             "peer left out is named with its reason on the same row.")
    if current and h200:
        return section("Champion against the best peer, on the H200", h200,
                       intro + " Peers timed in the loop's own jobs (the final job, else the baseline's), "
                       "beside the champion, by `bench/peers_h200.py`.", md_table(header, peers_rows_h200(h200)))
    if current or h200:
        return section("Champion against the best peer, on the H200 (session 3)", s3,
                       intro + " After each loop, side by side in one process (`bench/spec_results.py`). "
                       "Liger-Kernel was not installed on that image: the ratios are against the best "
                       "peer that was timed, not against Liger.", md_table(header, peers_rows_session3(s3)))
    return ""


# ---------------------------------------------------------------- A/A, bias, power, cost, fidelity

EXERCISED = {   # what one A/A job of each judge samples (docs/warm-judge.md)
    "cold": "every job a fresh judge, fresh workers, fresh arenas: the job-to-job variation a run sees",
    "warm": "one warm judge for all jobs (the default): the candidate's worker and both arenas fresh "
            "every job, the champion's worker kept, as in a run whose champion does not change",
    "warm-fresh": "one warm judge for all jobs: both workers and both arenas fresh every job"}


# The A/A of record: separate judge jobs with both sides even (the judge's default from ef29da1e).
AA_OF_RECORD = ["results/session9/callB_aa_jobs_softmax.json", "results/session9/callB_aa_jobs_matmul.json"]
EVEN_STUDY = ["results/session9/callA_aa_even_none.json", "results/session9/callA_aa_even_reads.json",
              "results/session9/callA_aa_even_arena.json", "results/session9/callA_aa_even_arena_reads.json"]


def older_aa_jobs() -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "results").glob("session*/aa_jobs_*.json"))


def _offset(s: dict) -> str:
    o = s.get("side_offset")
    return f"{o['champion_slower']}/{o['n']}, {o['median_ms'] * 1e3:+.2f} µs" if o else "—"


def aa_jobs_rows(files: list[str], how: str) -> list[list[str]]:
    rows = []
    for f in files:
        d = load(f)
        s, judge = d["summary"], d.get("judge") or "cold"
        rows.append([f"{d['spec']}, {s['decided']} separate judge jobs ({judge}{how})",
                     f"**{s['false_promotions']}/{s['decided']}**",
                     f"{pct(s['gain_median'])} (sd {pct(s['gain_sd'])[1:]})", _offset(s), EXERCISED[judge]])
    return rows


AA_HEADER = ["what", "false promotions", "gain median (means)", "champion slower in (median offset)",
             "what it did and did not exercise"]


def aa_section() -> str:
    rounds = "results/session4/call5_judge_validation.json"
    batches = ["results/session4/call3_aa_batch.json", "results/session4/call4_aa_batch.json"]
    rows = aa_jobs_rows(AA_OF_RECORD, ", both sides even")
    v = load(rounds)
    for key in ("aa_softmax", "aa_matmul"):
        a = v[key]
        rows.append([f"{a['spec']}, {a['n']} rounds inside one judge job", f"**{a['promotions']}/{a['n']}**",
                     pct(a["gain_median"]), "—", "one pair of workers and one arena placement for all rounds: "
                     "does not sample what changes from job to job (what biased matmul by −1.6%)"])
    b = [load(f) for f in batches]
    n = sum(d["decisions"] for d in b)
    won = sum(d["copies_that_won_in_their_batch"] for d in b)
    rows.append([f"{b[0]['spec']}, batches of 4 copies, {n} decisions in {sum(d['rounds'] for d in b)} rounds",
                 f"**{sum(d['false_promotions_without_confirmation'] for d in b)}/{n}** without confirmation, "
                 f"**{sum(d['false_promotions_with_confirmation'] for d in b)}/{n}** with",
                 "—", "—", f"{won} copies won their batch and {sum(d['confirmation_jobs'] for d in b)} confirmation "
                 "jobs ran: the confirmation rule was never exercised on the H200 (its CPU tests show it act)"])
    return section("A/A: false promotions of an identical copy", AA_OF_RECORD + [rounds, *batches],
                   "Every promotion here is false (the candidate is a copy of the champion). Promotion "
                   "rule: mean and median better by more than 2%, the gap above 2 standard errors. The "
                   "gain column is by means (bursts of slow reps move it; the medians condition keeps them "
                   "from promoting); the offset column counts the jobs whose champion median was the "
                   "slower and gives the median of champion minus candidate. The first rows are the A/A "
                   "of record, run with the judge's default since ef29da1e: both sides even (the "
                   "champion's arena as large as the candidate's, its timed outputs read as the "
                   "candidate's). What each figure exercised is in its last column.",
                   md_table(AA_HEADER, rows))


def even_section() -> str:
    rows = []
    for f in EVEN_STUDY:
        d = load(f)
        s = d["summary"]
        knob = d["checker_args"].split("--even", 1)[1].strip() if "--even" in d["checker_args"] else "none"
        why = sorted({clip(r["reason"], 90) for r in d["detail"] if r["verdict"] == "failed"})
        rows.append([knob, f"{s['decided']}" + (f" ({s['failed']} failed: {'; '.join(why)})" if s["failed"] else ""),
                     f"{s['false_promotions']}/{s['decided']}",
                     f"{pct(s['gain_median'])} (sd {pct(s['gain_sd'])[1:]})", _offset(s)])
    return section("The softmax A/A bias: what makes the two sides alike", EVEN_STUDY,
                   "Softmax, separate judge jobs, one warm judge with both workers fresh every job "
                   "(warm-fresh), `--even` set as in the first column. Without `arena` the champion's "
                   "median was the slower in almost every job (the bias behind softmax's false "
                   "promotions); with it, in about half. `arena,reads` became the judge's default.",
                   md_table(["--even", "decided", "false promotions", "gain median (means)",
                             "champion slower in (median offset)"], rows))


def bias_section() -> str:
    files = ["results/session4/call2_ab_bias_before.json", "results/session4/call3_ab_bias_after.json",
             "results/session4/call5_ab_bias.json"]
    when = {files[0]: "before the arena fix", files[1]: "after the arena fix",
            files[2]: "after the red-team merge"}
    rows = []
    for f in files:
        for variant, r in load(f)["results"].items():
            rows.append([when[f], variant, f"**{r['promotions']}/{r['rounds']}**" if r["promotions"] else
                         f"{r['promotions']}/{r['rounds']}", f"{pct(r['gain_median'])} [{pct(r['gain_min'])}, "
                         f"{pct(r['gain_max'])}]", ms(r["cand_median_ms"]), ms(r["champ_median_ms"])])
    fp = [(when[f], v, r["promotions"], r["rounds"]) for f in files for v, r in load(f)["results"].items()
          if r["promotions"]]
    return section("A/B bias study: every round, false promotions included", files,
                   "`bench/ab_bias.py`: copies of one kernel timed against each other, N rounds in one judge "
                   "job per variant, each round decided by the rule of its day (the mean rule, before the "
                   "medians condition). Rounds that promoted a copy are false promotions: "
                   + "; ".join(f"{v} {k}/{n} ({w})" for w, v, k, n in fp) + ".",
                   md_table(["code", "variant", "false promotions", "gain median [min, max]",
                             "candidate median", "champion median"], rows))


def power_section() -> str:
    f, jobs = "results/session4/call5_judge_validation.json", "results/session7/verdict_power.json"
    v = load(f)
    rows = [[v[k]["spec"], f"{v[k]['n']} rounds inside one judge job", f"{v[k]['promotions']}/{v[k]['n']}",
             pct(v[k]["true_gain_median"], 1), ms(v[k]["base_median_ms"])] for k in ("power_softmax", "power_matmul")]
    for r in load(jobs)["rows"]:
        rows.append(["matmul", f"{r['ok']} separate jobs, {r['judge']} judge", f"{r['promotions']}/{r['ok']}",
                     pct(r["gain_median_median"], 1), "—"])
    return section("Power: a truly faster candidate is promoted", [f, jobs],
                   "The champion is the same kernel followed by a Triton copy sized for ~5% of its time; "
                   "the true gain is what the A/B measured by medians.",
                   md_table(["spec", "how", "promoted", "true gain (median)", "baseline median"], rows))


SPEED_NOW = ["results/session9/callC_verdict_main.json", "results/session9/callD_verdict_main.json"]
SPEED_S7 = ["results/session7/verdict_main.json", "results/session7/verdict_cold.json"]


def speed_rows(files: list[str]) -> list[list[str]]:
    rows = []
    for f in files:
        for r in load(f)["rows"]:
            if "wall_s" not in r:
                continue
            rows.append([f"{r['variant']} ({Path(f).name.split('_')[0]})", f"{r['wall_s']:.1f} s",
                         f"{r['baseline_job_s']:.1f} s", f"{r['final_job_s']:.1f} s",
                         f"{r['rejected_median_s']:.2f} s ({r['rejected_n']})",
                         f"{r['promoted_median_s']:.2f} s ({r['promoted_n']})", _looks(r),
                         f"{r['decided_per_hour']:.0f}"])
    return rows


SPEED_HEADER = ["judge (run)", "command wall", "baseline job", "final job", "rejected candidate",
                "promoted candidate", "second looks", "decided per hour"]


def speed_section() -> str:
    warm = "results/session9/callC_compile_warm_h200.json"
    w = load(warm)["summary"]
    return section("Verdict speed: the default command", SPEED_NOW + [warm],
                   "`python orchestrator.py --spec specs/matmul.yaml` (30 tuner candidates, the baseline "
                   "and final jobs included), warm judge (the default), run twice one after the other in "
                   "one machine start. Per candidate: its job, request to answer, median (count). The "
                   "targets (100 s for the command, 1.5 s a rejected and 3 s a promoted candidate) are "
                   "not met. Every spare compiled the judge's own kernels first "
                   f"(`checker/compilewarm.py`): on this host a fresh process's first matmul compile took "
                   f"{w['cold']['matmul_s']:.2f} s cold and {w['warm']['matmul_s']:.2f} s after the "
                   f"{w['warm']['warm_s']:.2f} s warm-up (medians of {w['warm']['n']}).",
                   md_table(SPEED_HEADER, speed_rows(SPEED_NOW)))


def llm_section() -> str:
    f = "results/session9/callC_verdict_llm.json"
    rows = []
    for r in load(f)["rows"]:
        if "skipped" in r:
            rows.append([r["variant"], "not run: " + r["skipped"], "—", "—", "—", "—"])
            continue
        rows.append([r["variant"], f"{r['iterations']} in {r['wall_s']:.0f} s", f"{r['decided_per_hour']:.0f}",
                     f"{r['gpu_timing_fraction'] * 100:.1f}%", f"{r['rejected_median_s']:.2f} s",
                     f"{r['promoted_median_s']:.2f} s"])
    return section("An LLM-paced run: decided iterations per hour", [f],
                   "A loopback OpenAI server answering each request after 20 s, matmul, warm judge. K=4 "
                   "did not run: the call's budget was spent.",
                   md_table(["run", "decided", "per hour", "GPU timing", "rejected job", "promoted job"], rows))


def _looks(r: dict) -> str:
    """What became of the promoted candidates' second looks (profile, ncu) in one run."""
    if r.get("sights"):
        ran = sum(x["status"] == "landed" for x in r["sights"])
        why = sorted({x["reason"].split(":")[0] for x in r["sights"] if x["status"] != "landed" and x.get("reason")})
        return f"{ran} of {len(r['sights'])} ran after the decision" + (f" (dropped: {'; '.join(why)})" if why else "")
    if r.get("promoted_in_job_sight_median_s"):
        return f"{r['promoted_in_job_sight_median_s']:.1f} s each inside the promoted jobs (median; taken out of their column)"
    return "none"


def cost_section() -> str:
    f = "results/session4/call5_judge_smoke.json"
    rows = []
    for r in load(f)["rows"]:
        if r["run"] in ("baseline_cold", "baseline_warm"):
            p = r["phase_s"]
            rows.append([r["run"].replace("_", " "), f"{p['sight']:.1f} s", f"{p['end']:.1f} s", f"{r['wall_s']:.1f} s"])
    return section("What one job costs: the whole job beside its verdict", [f],
                   "Matmul 4096³, the baseline against itself, through the local backend. The verdict "
                   "(`phase_s.sight`: the A/B decided) comes before the second look (peers, profile, one "
                   "ncu call), which the judge's own end and the whole job (process start to result, "
                   "bench clock) include: quote the whole job as the cost of a job.",
                   md_table(["job", "verdict at", "judge end", "whole job (wall)"], rows))


def fidelity_section() -> str:
    f = "results/session3/call1_judge_validation.json"
    rows = [[f"{r['spec']} ({r['file']})", ms(r["judge_mean_ms"]), ms(r["ncu_mean_ms"]),
             f"**{r['ratio_judge_over_ncu']:.3f}**"] for r in load(f)["ncu"]]
    return section("Fidelity: the judge's clock against Nsight Compute", [f],
                   "Judge mean over 3 rounds of 50 reps against ncu's mean of 30 launches "
                   "(`--clock-control none --cache-control all`, `gpu__time_duration.sum`).",
                   md_table(["kernel", "judge mean", "ncu mean", "ratio"], rows))


# ---------------------------------------------------------------- history

def history_sections() -> list[str]:
    out = []
    if peers_files():
        out.append(peers_section(current=False))
    older = older_aa_jobs()
    out.append(section("A/A from separate jobs before both sides were even (sessions 5 and 7)", older,
                       "The judge's default before ef29da1e: the champion's arena sized for the timed sets "
                       "only, its timed outputs not read. Softmax's champion was slower job after job.",
                       md_table(AA_HEADER, aa_jobs_rows(older, ""))))
    out.append(section("Verdict speed, session 7: warm judge against cold", SPEED_S7,
                       "Before the compile warm-up and the even sides. The two ran in two device calls of "
                       "one session, 20 minutes apart, on two machine starts: not side by side in one call.",
                       md_table(SPEED_HEADER, speed_rows(SPEED_S7))))
    f = "results/session3/call1_judge_validation.json"
    v = load(f)
    out.append(section("A/A through the judge, session 3 (biased: see session 4)", [f],
                       "100 rounds inside one judge job; matmul's −1.4% median gain was the A/B bias against "
                       "the candidate found and removed in session 4.",
                       md_table(["what", "false promotions", "gain median [min, max]"],
                                [[k, f"{v[k]['promotions']}/{v[k]['n']}", f"{pct(v[k]['gain_median'])} "
                                  f"[{pct(v[k]['gain_min'])}, {pct(v[k]['gain_max'])}]"]
                                 for k in ("aa_softmax", "aa_matmul")])))
    f = "results/session4/call1_aa_batch_biased.json"
    d = load(f)
    out.append(section("A/A with batches before the arena fix (session 4, call 1)", [f],
                       "Every copy measured slower than the champion it is identical to: 0 false promotions "
                       "for the wrong reason.",
                       md_table(["decisions", "copies that won", "without confirmation", "with"],
                                [[str(d["decisions"]), str(d["copies_that_won_in_their_batch"]),
                                  f"{d['false_promotions_without_confirmation']}/{d['decisions']}",
                                  f"{d['false_promotions_with_confirmation']}/{d['decisions']}"]])))
    files = ["results/session2/call1_spec_matmul.json", "results/session2/call2_spec_rowwise.json",
             "results/session2/call3_spec_matmul_bias_gelu.json", "results/session2/call3_spec_layernorm.json"]
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
    f = "results/session2/call1_checker_validation.json"
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

HEAD = ("<!-- Generated by `python bench/tables.py` from the JSON each section cites; do not edit: "
        "tests/test_results_tables.py fails on a number that differs from a fresh render. -->")


def render_results() -> str:
    parts = [HEAD, "# Results of record",
             "One current table per question, measured on one NVIDIA H200 lent through the project's "
             "`device` tool; raw JSON, logs and commands under `results/`. Older numbers, superseded "
             "by these, are in [history.md](history.md). No number here is synthetic.",
             peers_section(current=True), aa_section(), even_section(), bias_section(), power_section(), speed_section(), llm_section(),
             cost_section(),
             fidelity_section()]
    return "\n\n".join(p for p in parts if p) + "\n"


def render_history() -> str:
    parts = [HEAD, "# Older numbers",
             "Numbers superseded by [results.md](results.md), kept with the commit that added their JSON "
             "(and the code the session's README names). Read them with the note each carries."]
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
        cited = re.findall(r"`(results/[^`]+\.json)`", block.split("\n|", 1)[0])
        values = set()
        for f in cited:
            _floats(load(f), values)
        for line in block.splitlines():
            if not line.startswith("|"):
                continue
            for num in re.findall(r"(\d+\.(\d+)) ms", line):
                shown, places = float(num[0]), len(num[1])
                if not any(round(v, places) == shown for v in values):
                    misses.append(f"{title}: {num[0]} ms")
    return misses


def check() -> list[str]:
    problems = []
    for path, text in ((RESULTS, render_results()), (HISTORY, render_history())):
        if not path.exists() or path.read_text() != text:
            problems.append(f"{path.relative_to(ROOT)} differs from `python bench/tables.py`")
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
