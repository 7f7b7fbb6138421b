"""Where the champion stands, in words: the device and its ceilings, the bound verdict, the peers
and the time to beat, the compiled kernel's profile and the diagnosis.

Pure text from plain dicts (the result line's fields, as run.jsonl keeps them): used by the
prompt, the run's final terminal line and the page. On a synthetic run every time is MODELED and
no peer, profile or counter exists, and the text says so.
"""
from __future__ import annotations

from checker.peerstats import NOT_INSTALLED, fmt_pct, skip_parts
from kernloop.standing.diagnosis import ceiling_kinds, sig

NO_PEERS_SYNTHETIC = "peers are not timed on the synthetic backend"
MODELED = ("MODELED: this run is synthetic (the Triton interpreter on the CPU checks correctness, "
           "a performance model gives the times): every time here is modeled, not measured; "
           f"{NO_PEERS_SYNTHETIC}, and there is no compiled-kernel profile and no hardware counter.")
WHY_CHARS = 90   # a skipped peer's reason on the final line


def ms(x: float | None) -> str:
    return "?" if x is None else f"{x:.4f} ms"


def timed_peers(peers: dict | None, key: str = "median_ms") -> list[tuple[str, float]]:
    """(label, ms) of each peer that was timed, fastest first."""
    out = [(lbl, s[key]) for lbl, s in (peers or {}).items() if isinstance(s, dict) and s.get(key)]
    return sorted(out, key=lambda x: x[1])


def device_line(device: str | None, ceilings: dict | None) -> str | None:
    """The device and its two ceilings, never mixed: the datasheet peak (named, with its source)
    and the measured ceiling (torch.mm's rate, the copy bandwidth), where each is known."""
    if not device:
        return None
    kinds = ceiling_kinds(ceilings)
    if not kinds["peak"] and not kinds["measured"]:
        return f"Device: {device} (no known ceilings for it: no roofline %)."
    parts = []
    if kinds["peak"]:
        c = kinds["peak"]
        parts.append(f"datasheet peak {sig(c['tflops'])} TFLOP/s bf16 dense, {sig(c['gbps'] / 1e3)} TB/s "
                     f"memory ({c.get('source', 'source unknown')})")
    if kinds["measured"]:
        c = kinds["measured"]
        parts.append(f"measured ceiling: torch.mm {sig(c['tflops'])} TFLOP/s bf16, copy "
                     f"{sig(c['gbps'] / 1e3)} TB/s (read + write) ({c.get('source', 'source unknown')})")
    return f"Device: {device}; " + "; ".join(parts) + "."


def _clip(text: str, n: int = WHY_CHARS) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1].rstrip() + "…"


def best_text(best: dict | None) -> str:
    """'liger 0.0414 ms, spread 8.3%, 95% CI ±0.8% over 300 reps': the log's `best` block in words."""
    b = best or {}
    text = f"{b.get('name', '?')} {ms(b.get('median_ms'))}"
    if isinstance(b.get("spread"), (int, float)):
        text += f", spread {fmt_pct(b['spread'])}"
    if isinstance(b.get("ci"), (int, float)):
        text += f", 95% CI ±{fmt_pct(b['ci'])}"
    if b.get("n"):
        text += f" over {b['n']} reps"
    return text


def not_installed(skipped: dict | None) -> list[str]:
    """'quack not installed (pip install quack-kernels)' for each peer whose package is missing."""
    out = []
    for lbl, entry in sorted((skipped or {}).items()):
        _why, kind, install = skip_parts(entry)
        if kind == NOT_INSTALLED:
            out.append(f"{lbl} not installed ({install})" if install else f"{lbl} not installed")
    return out


def without(skipped: dict | None, n: int = WHY_CHARS) -> str:
    """'torch.compile (unreliable: …), liger (failed: RuntimeError …)': the peers, other than the
    ones not installed, a best-peer ratio was computed without, each with its reason (clipped)."""
    parts = []
    for lbl, entry in sorted((skipped or {}).items()):
        why, kind, _install = skip_parts(entry)
        if kind != NOT_INSTALLED:
            parts.append(f"{lbl} ({_clip(why if why.startswith(kind) else f'{kind}: {why}', n)})")
    return ", ".join(parts)


def skipped_tail(skipped: dict | None) -> str:
    """'; quack not installed (pip install quack-kernels); without torch.compile (unreliable: …)'."""
    tail = "".join(f"; {t}" for t in not_installed(skipped))
    rest = without(skipped)
    return tail + (f"; without {rest}" if rest else "")


def peers_lines(peers: dict | None, champion_ms: float | None, skipped: dict | None = None,
                best: dict | None = None) -> list[str]:
    """The peers (medians in the same job, with spread), the time to beat (the log's `best`), and
    every peer not timed or not used, with why."""
    ranked = timed_peers(peers)
    lines = []
    if ranked:
        lines.append("Peers (what a user would run instead, timed in the same job as the champion, "
                     "medians): " + ", ".join(f"{lbl} {ms(t)}" + _spread(peers[lbl]) for lbl, t in ranked) + ".")
    if best and best.get("median_ms"):
        line = f"Time to beat: {best_text(best)}"
        if champion_ms:
            line += (f"; the champion takes {ms(champion_ms)}, {best['median_ms'] / champion_ms:.2f}x the best "
                     f"peer's speed" + (" (ahead)" if champion_ms < best["median_ms"] else ""))
        if skipped:
            line += f"; best of the peers timed, without {', '.join(sorted(skipped))} (below)"
        lines.append(line + ".")
    for lbl, entry in sorted((skipped or {}).items()):
        why, kind, install = skip_parts(entry)
        lines.append(f"(peer {lbl} not timed or not used, {kind}: {why}"
                     + (f"; {install}" if install and install not in why else "") + ")")
    return lines


def _spread(s: dict) -> str:
    """' (spread 8.3%, 6 rounds)' for a peer timed in more than one round, ' (spread 1.2%)' else."""
    if not isinstance(s, dict) or not isinstance(s.get("rel_spread"), (int, float)):
        return ""
    rounds = s.get("rounds")
    return f" (spread {fmt_pct(s['rel_spread'])}" + (f", {rounds} rounds" if rounds and rounds > 1 else "") + ")"


def kernel_line(k: dict) -> str:
    """One compiled kernel: resources, grid, occupancy."""
    grid = "x".join(str(g) for g in k["grid"]) if k.get("grid") else "?"
    text = (f"kernel `{k.get('name', '?')}`: {k['regs_per_thread']} registers/thread, {k['spills']} "
            f"spilled, {k['shared_bytes']} B shared memory, {k['num_warps']} warps "
            f"({k['threads_per_block']} threads)/block, grid {grid}")
    if k.get("waves") is not None:
        text += f" ({k['waves']:.2f} waves)"
    occ = k.get("occupancy")
    if occ:
        text += (f"; occupancy {occ['occupancy'] * 100:.0f}% ({occ['blocks_per_sm']} blocks/SM, "
                 f"limited by {occ['limited_by']})")
    return text


def profile_lines(profile: dict | None) -> list[str]:
    if not profile:
        return []
    lines = [f"Compiled {kernel_line(k)}." for k in profile.get("kernels") or []]
    launch = profile.get("launch") or {}
    if launch.get("host_us") is not None:
        lines.append(f"Host launch cost: {sig(launch['host_us'], 2)} µs of host time per call; "
                     f"{ms(launch.get('b2b_ms'))} per call back to back.")
    return lines


def diagnosis_lines(findings: list[dict] | None) -> list[str]:
    if not findings:
        return []
    return ["Diagnosis:"] + [f"- {f['text']}" for f in findings]


def section(device: str | None = None, ceilings: dict | None = None, champion: dict | None = None,
            peers: dict | None = None, peers_skipped: dict | None = None, profile: dict | None = None,
            findings: list[dict] | None = None, synthetic: bool = False, peers_best: dict | None = None) -> str:
    """The prompt's "where the champion stands" section (empty string if nothing is known)."""
    lines = []
    if synthetic:
        lines.append(MODELED)
    dl = device_line(device, ceilings)
    if dl:
        lines.append(dl)
    champ_ms = (champion or {}).get("median_ms")
    if not synthetic:
        lines += peers_lines(peers, champ_ms, peers_skipped, peers_best)
        lines += profile_lines(profile)
    lines += diagnosis_lines(findings)
    if not lines:
        return ""
    return "## Where the champion stands\n" + "\n".join(lines)


def final_line(champion_ms: float | None, speedup: float | None, block: dict | None,
               synthetic: bool = False) -> str:
    """'champion 0.0431 ms: 1.51x the baseline, 0.96x the best peer (liger 0.0414 ms, spread 8.3%,
    95% CI ±0.8% over 300 reps); quack not installed (pip install quack-kernels)'.

    `speedup` is the loop's (baseline mean / champion mean, as decided); the best peer is the
    peers block's `best` (the checker chose it: never chosen again here), its ratio its median
    over the champion's, both from one job; every peer skipped is named (a missing package with
    what to install, any other with its reason). On a synthetic run the time is labelled MODELED
    and the line says peers are not timed."""
    if not champion_ms:
        return "champion: no time"
    head = f"champion {ms(champion_ms)}{' (MODELED)' if synthetic else ''}"
    parts = []
    if speedup:
        parts.append(f"{speedup:.2f}x the baseline")
    if synthetic:   # modeled (or host-clock) times: no peer is compared with them
        said = NO_PEERS_SYNTHETIC if not timed_peers((block or {}).get("peers")) else \
            "peers are not compared on a synthetic run (their times are the host clock's)"
        return head + (": " + ", ".join(parts) if parts else "") + f"; {said}"
    best = (block or {}).get("best")
    if isinstance(best, dict) and best.get("median_ms"):
        parts.append(f"{best['median_ms'] / champion_ms:.2f}x the best peer ({best_text(best)})")
    elif block is not None:
        parts.append("no peer timed")
    return head + (": " + ", ".join(parts) if parts else "") + skipped_tail((block or {}).get("skipped"))


def standing(result: dict | None, side: str = "candidate", cost: dict | None = None,
             synthetic: bool = False, peers_block: dict | None = None) -> dict:
    """The fields `section` takes, from one result line (the job that measured the champion):
    the `side` kernel's stats, roofline and profile (with ncu's counters when they came), the
    diagnosis of them (`cost`: compulsory read/write bytes, diagnosis.compulsory_bytes), and the
    peers of this job or, when it timed none, `peers_block` (the last job that did)."""
    from kernloop.standing.diagnosis import of_result
    r = result or {}
    pb = r.get("peers") or peers_block or {}
    return {"device": r.get("device"), "ceilings": r.get("ceilings"), "champion": r.get(side),
            "peers": pb.get("peers"), "peers_skipped": pb.get("skipped"), "peers_best": pb.get("best"),
            "profile": (r.get("profile") or {}).get(side), "findings": of_result(r, side, cost),
            "synthetic": bool(synthetic or r.get("synthetic"))}
