"""benchmarks/launchers.py (the `prebuilt` plan of benchmarks/prewarm_parts.py): a worker's report of its
launchers' signatures is untrusted data, reduced to lists of Triton type names; a spare given
signatures builds them into its own Triton cache (Triton 3.6) or says this Triton builds none per
signature (3.8), in a fresh process; nothing raises."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks import launchers  # noqa: E402


MATMUL_SIG = ["*bf16", "*bf16", "*bf16", "i32", "i32", "i32", "i32", "constexpr", "i32", "constexpr",
              "i32", "constexpr", "constexpr", "constexpr", "constexpr", "constexpr"]


def test_launcher_hints_pass_only_lists_of_triton_type_names():
    """A worker's report of its launchers' signatures is untrusted data: only lists of known type
    names pass (no C, no paths, no tuples), distinct, in order, at most MAX_LAUNCHERS."""
    bad = [["*bf16", "i32); system(\"x\"); (int"], ["*bf16", ["i32"]], ["../../etc"], [],
           ["i32"] * (launchers.MAX_ARGS + 1), "i32", {"a": "i32"}, [3]]
    assert launchers.launcher_hints(bad) == []
    assert launchers.launcher_hints("not a list") == []
    got = launchers.launcher_hints([MATMUL_SIG, ["*fp32", "*kfp16", "u64", "fp8e4nv"], MATMUL_SIG])
    assert got == [MATMUL_SIG, ["*fp32", "*kfp16", "u64", "fp8e4nv"]]
    many = [["i32"] * n for n in range(1, 10)]
    assert launchers.launcher_hints(many) == many[:launchers.MAX_LAUNCHERS]
    # newest first (a spare's list: the latest job's signatures before older ones), the oldest drop
    assert launchers.launcher_hints([["u8"]] + many[:4]) == [["u8"]] + many[:3]


def test_signatures_are_built_into_the_process_s_triton_cache_or_it_says_why_not(tmp_path):
    """In a fresh process with its own Triton cache (as a spare): each valid signature's launcher
    is built (Triton 3.6: a C compile each), or this Triton builds none per signature (3.8);
    what is not a signature is ignored, and nothing fails."""
    import subprocess
    sigs = [MATMUL_SIG, ["*bf16", "i32); abort(); (int"]]
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); from benchmarks import launchers; "
            "print(json.dumps(launchers.build_launchers(json.loads(sys.argv[2]))))")
    env = {**os.environ, "TRITON_CACHE_DIR": str(tmp_path / "cache")}
    p = subprocess.run([sys.executable, "-c", code, str(ROOT), json.dumps(sigs)], env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert "failed" not in got, got
    from triton.backends.nvidia import driver
    built = list((tmp_path / "cache").rglob("__triton_launcher*.so"))
    if hasattr(driver, "make_launcher"):
        assert got["built"] == 1 and len(built) == 1, got
    else:
        assert got["built"] == 0 and "no launcher per signature" in got["skipped"], got
        assert not built


def test_build_launchers_never_raises():
    for junk in (None, "x", [["no such type"]], [[{"a": 1}]]):
        assert launchers.build_launchers(junk) == {"built": 0, "seconds": 0.0}
