"""The run's last job and line: the final champion timed once more beside its peers (and
profiled), and the terminal's summary of it against the baseline and the best peer."""
from __future__ import annotations

from pathlib import Path

from kernloop.backends.local import Backend
from kernloop.loop.iteration import evaluate_judged
from kernloop.standing import briefing
from kernloop.standing.diagnosis import of_result


def final_job(st, spec, backend: Backend, run_dir: Path, log, stopped: str) -> dict | None:
    """Time the final champion once more beside its peers (and profile it) in one job, where the
    backend times peers and a promotion happened (the baseline's own job timed them already).
    Logged as the `final` event; its failure only loses the comparison."""
    if not backend.times_peers or st.champion_id == "baseline" \
            or stopped in ("interrupted", "baseline_failed"):
        return None
    path = run_dir / st.champion_file
    sha = getattr(st, "champion_sha256", None)
    res = evaluate_judged(backend, spec, path, path, run_dir / "jobs" / "final",
                          {"candidate": sha, "champion": sha},
                          configs={"candidate": st.champion_config, "champion": st.champion_config},
                          peers=True)
    log.append("final", candidate_id=st.champion_id, candidate_file=st.champion_file,
               candidate_sha256=sha, result=res,
               diagnosis=of_result(res, "candidate", st.cost) if res.get("ok") else None)
    return res


def final_summary(st, fres: dict | None, speedup: float | None, synthetic: bool) -> str:
    """The final terminal line: the champion's median beside the best peer's, both from one job
    (the final job, or the baseline's when the baseline is still the champion; the best peer is
    that job's logged `best`); the baseline ratio is the loop's (means, as decided)."""
    block = (fres or {}).get("peers") if fres else (st.peers_block if st.champion_id == "baseline" else None)
    kernel = ((block or {}).get("kernels") or {}).get("candidate") or {}
    champ_ms = kernel.get("median_ms") or st.champion_profile.get("mean_ms")
    return briefing.final_line(champ_ms, speedup, block if kernel else None, synthetic)
