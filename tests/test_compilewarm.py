"""A warm judge's spare warms Triton's compiler while it waits (checker/compilewarm.py): a real
worker process started with --hold --warm-cc compiles the judge's own kernels for sm_90 through
Triton and ptxas (no GPU needed: an explicit target), and says so in its `held` reply; in
interpret mode it compiles nothing; the warm-up never raises."""
from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
from checker import channel, compilewarm  # noqa: E402


def _held(tmp_path: Path, *flags: str) -> tuple[dict, Path]:
    cache = tmp_path / "triton-cache"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(cache)
    (tmp_path / "scratch").mkdir()
    w = channel.WorkerProc("worker", str(tmp_path / "scratch"), env, ["--hold", *flags])
    try:
        return w.reply(300), cache
    finally:
        w.send("exit")
        w.kill()


def test_a_held_spare_compiles_the_judges_kernels_for_the_gpu_before_any_candidate(tmp_path):
    r, cache = _held(tmp_path, "--warm-cc", "90")
    assert r.get("held") is True, r
    warm = r["compile_warm"]
    assert "failed" not in warm and warm["seconds"] > 0, warm
    cubins = sorted(p.name for p in cache.rglob("*.cubin"))
    assert cubins == ["_warm_dot.cubin", "_warm_rows.cubin"], cubins   # ptxas ran, for both
    ptx = next(cache.rglob("_warm_dot.ptx")).read_text()
    assert ".target sm_90a" in ptx   # the capability the judge passed (Hopper: the `a` target)


def test_an_interpret_spare_and_a_spare_without_a_capability_compile_nothing(tmp_path):
    for i, flags in enumerate((("--interpret", "--warm-cc", "90"), ())):
        (tmp_path / str(i)).mkdir()
        r, cache = _held(tmp_path / str(i), *flags)
        assert r.get("held") is True and r["compile_warm"] is None, r
        assert not list(cache.rglob("*.cubin"))


def test_the_warm_up_reports_a_failure_instead_of_raising():
    r = compilewarm.warm("sm_90")   # not a number: refused before any compile, quietly
    assert r["failed"] and r["seconds"] >= 0


def test_a_failed_warm_up_forgets_triton_s_cached_tool_probes():
    """Triton caches `ptxas --version` per path for the process, a failed probe too; a warm-up
    whose ptxas was killed left its spare saying "Cannot find ptxas" to the candidate it then
    ran (an H200 A/A job, benchmarks/results/session9). A failed warm-up clears that cache."""
    import triton.knobs as knobs
    assert knobs.NvidiaTool.from_path("/nonexistent/ptxas") is None   # a failed probe, cached
    assert knobs.NvidiaTool.from_path.cache_info().currsize >= 1
    assert compilewarm.warm("sm_90")["failed"]
    assert knobs.NvidiaTool.from_path.cache_info().currsize == 0
