"""The hand-written structures in benchmarks/by_hand/ (what the tuner cannot reach by CONFIG alone)
pass the contract and the checker in the Triton interpreter, on both of their code paths."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from kernloop import contract
from kernloop.backends.resultline import parse_result_line
from kernloop.spec import load_spec
from kernloop.propose.tuner import replace_config

ROOT = Path(__file__).resolve().parent.parent
HAND = sorted((ROOT / "benchmarks" / "by_hand").glob("*.py"))
# Small blocks force the long-row path (online softmax / two-pass RMSNorm) on small shapes,
# with lanes that only ever see padding (N=1) and a partial last chunk (N=100).
FORCE_LONG = dict(MAX_ONEPASS=32, ONEPASS_WARPS=4, LONG_BLOCK=64, LONG_WARPS=4)
# Small tiles make the matmul check shapes span several tiles, a partial last tile in M, N and
# K, and (TMA path) several tiles per persistent program and a partial last GROUP_M group.
SMALL_TILES = dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=4, num_warps=4, num_stages=2)
ROWS = [{"M": 2, "N": 1}, {"M": 3, "N": 100}]
# Per file: (variant, CONFIG overrides) and check shapes beyond the spec's own.
VARIANTS = {
    "softmax": [("default", {}), ("long_rows", FORCE_LONG)],
    "rmsnorm": [("default", {}), ("long_rows", FORCE_LONG)],
    "layernorm": [("default", {}), ("long_rows", FORCE_LONG)],
    "matmul": [("default", {}), ("small_tiles", SMALL_TILES),
               ("fallback", {"USE_TMA": False}), ("small_tiles_fallback", {**SMALL_TILES, "USE_TMA": False})],
}
# The spec's matmul check shapes have 16-byte-aligned row strides only at 64x64x64; these add
# aligned (TMA) shapes with partial tiles: 130x72x104, and 300 rows = 10 tiles of 32 (GROUP_M=4
# leaves a partial group of 2) with K=24 < BLOCK_K.
EXTRA_SHAPES = {"softmax": ROWS, "rmsnorm": ROWS, "layernorm": ROWS,
                "matmul": [{"M": 130, "N": 72, "K": 104}, {"M": 300, "N": 40, "K": 24}]}
CASES = [(p, name, over) for p in HAND for name, over in VARIANTS.get(p.stem, [])]


def test_every_by_hand_file_has_variants():
    assert sorted(p.stem for p in HAND) == sorted(VARIANTS) == sorted(EXTRA_SHAPES)


@pytest.mark.parametrize("path,variant,overrides", CASES, ids=[f"{p.stem}-{n}" for p, n, _ in CASES])
def test_by_hand_kernel_is_correct(tmp_path, path, variant, overrides):
    spec = load_spec(ROOT / "specs" / f"{path.stem}.yaml")
    code = path.read_text()
    assert contract.check(code, spec) == []
    if overrides:
        cfg = contract.read_config(code)
        assert set(overrides) <= set(cfg), "an override names no CONFIG entry"
        code = replace_config(code, {**cfg, **overrides})
        assert contract.check(code, spec) == []
    resolved = spec.to_checker()
    resolved["check_shapes"] = spec.check_shapes + EXTRA_SHAPES[path.stem]
    (tmp_path / "spec.json").write_text(json.dumps(resolved))
    (tmp_path / "cand.py").write_text(code)
    p = subprocess.run([sys.executable, "-m", "checker.check", "--spec", str(tmp_path / "spec.json"),
                        "--candidate", str(tmp_path / "cand.py"), "--champion", str(spec.baseline),
                        "--mode", "interpret", "--draws", "1"], capture_output=True, text=True, timeout=300,
                       cwd=ROOT)
    r = parse_result_line(p.stdout)
    assert r["ok"] and r["correct"], r["error"]
    assert all(v < spec.tolerance for v in r["rel_l2"].values())


def test_matmul_check_shapes_take_both_paths():
    """With USE_TMA on, the interpreter runs the TMA descriptor path on the aligned check shapes
    and the pointer fallback on the odd ones, so the default variant covers both."""
    import torch
    spec = load_spec(ROOT / "specs" / "matmul.yaml")
    mod_spec = importlib.util.spec_from_file_location("by_hand_matmul", ROOT / "benchmarks" / "by_hand" / "matmul.py")
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    dt = getattr(torch, spec.check_dtype)
    paths = {}
    for s in spec.check_shapes + EXTRA_SHAPES["matmul"]:
        a, b, c = (torch.empty(r, k, dtype=dt) for r, k in ((s["M"], s["K"]), (s["K"], s["N"]), (s["M"], s["N"])))
        paths[(s["M"], s["N"], s["K"])] = all(mod._tma_ok(t) for t in (a, b, c))
    assert paths[(64, 64, 64)] and paths[(130, 72, 104)] and paths[(300, 40, 24)]
    assert not paths[(37, 45, 29)] and not paths[(130, 70, 100)]
    # Small tiles: more tiles than interpreter programs, so the persistent loop really loops.
    assert -(-130 // SMALL_TILES["BLOCK_M"]) * -(-72 // SMALL_TILES["BLOCK_N"]) > mod.CPU_PROGRAMS
