"""The example specs in specs/: they load, their baselines pass the contract, and the real checker
(Triton interpreter on the CPU, in a subprocess) accepts each baseline, rejects a planted realistic
bug, and accepts random configs drawn from the spec's search space. The perf model must be able to
price every baseline so a synthetic run works with every spec.

Per spec the checker runs (baseline, planted bug, random configs) go in parallel, one per core.
"""
from __future__ import annotations

import itertools
import json
import math
import os
import random
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernloop import contract  # noqa: E402
from kernloop.backends import perfmodel  # noqa: E402
from kernloop import spec as specmod  # noqa: E402
from kernloop.propose import tuner  # noqa: E402
from kernloop.backends.resultline import parse_result_line  # noqa: E402
from shipped import SHIPPED_SPECS, shipped_spec_paths  # noqa: E402

pytestmark = [pytest.mark.slow]

SPECS = ROOT / "specs"
NEW_SPECS = ["softmax", "rmsnorm", "gemv", "layernorm", "matmul_bias_gelu"]
N_RANDOM_CONFIGS = 3
CHECK_TIMEOUT_S = 120

# A realistic bug per spec: (what it is, exact text in the baseline, replacement).
PLANTED_BUGS = {
    "softmax": ("padding loads as 0.0 instead of -inf in the sum pass, so exp(0 - max) leaks in",
                'other=float("-inf")).to(tl.float32)\n        s_acc +=',
                'other=0.0).to(tl.float32)\n        s_acc +='),
    "rmsnorm": ("mean of squares divided by the padded row length instead of N",
                "tl.sum(acc, axis=1) / N + eps",
                "tl.sum(acc, axis=1) / (tl.cdiv(N, BLOCK_SIZE) * BLOCK_SIZE) + eps"),
    "gemv": ("off-by-one K mask: the last column of A is never read",
             "mask=(offs_m[:, None] < M) & (k[None, :] < K)",
             "mask=(offs_m[:, None] < M) & (k[None, :] < K - 1)"),
    "layernorm": ("bias never added",
                  "* w[None, :] + b[None, :]",
                  "* w[None, :]"),
    "matmul_bias_gelu": ("bias indexed by row instead of column",
                         "bias_ptr + offs_n, mask=offs_n < N",
                         "bias_ptr + offs_m, mask=offs_m < N"),
}


def _all_spec_paths():
    return shipped_spec_paths()   # never a user's own spec in specs/


def _load(name):
    return specmod.load_spec(SPECS / f"{name}.yaml")


# ------------------------------------------------------------------ static


def test_shipped_specs_exist():
    assert set(NEW_SPECS) | {"matmul"} <= set(SHIPPED_SPECS)
    missing = [p.name for p in _all_spec_paths() if not p.is_file()]
    assert missing == [], f"missing specs: {missing}"


@pytest.mark.parametrize("path", _all_spec_paths(), ids=lambda p: p.stem)
def test_spec_loads_and_baseline_passes_contract(path):
    s = specmod.load_spec(path)
    code = s.baseline.read_text()
    assert contract.check(code, s) == []
    json.dumps(s.to_checker())                      # the resolved spec is plain JSON
    flops, nbytes = s.cost_of(s.shapes[0])
    assert flops > 0 and nbytes > 0


@pytest.mark.parametrize("name", NEW_SPECS)
def test_search_space_matches_baseline_config(name):
    """The tuner steps through the space from the baseline's values, so the baseline's CONFIG
    must use exactly the space's keys with values inside it."""
    s = _load(name)
    cfg = contract.read_config(s.baseline.read_text())
    assert cfg is not None
    assert set(cfg) == set(s.search_space), (sorted(cfg), sorted(s.search_space))
    for k, v in cfg.items():
        assert v in s.search_space[k], f"baseline {k}={v} is outside the search space"


@pytest.mark.parametrize("name", NEW_SPECS)
def test_planted_bug_is_a_small_edit_that_passes_the_contract(name):
    s = _load(name)
    code = s.baseline.read_text()
    _, old, new = PLANTED_BUGS[name]
    assert code.count(old) == 1, f"planted-bug anchor for {name} must occur exactly once"
    assert contract.check(code.replace(old, new), s) == []


@pytest.mark.parametrize("name", NEW_SPECS)
def test_perfmodel_prices_baseline_and_space_can_beat_it(name):
    s = _load(name)
    cfg = contract.read_config(s.baseline.read_text())
    _, nbytes = s.cost_of(s.shapes[0])
    base = perfmodel.predict_ms(s.model, s.shapes[0], cfg, nbytes)
    assert math.isfinite(base) and base > 0
    # Some config in the space must model faster than the baseline, or a synthetic run is flat.
    keys = list(s.search_space)
    best = base
    for vals in itertools.product(*(s.search_space[k] for k in keys)):
        try:
            t = perfmodel.predict_ms(s.model, s.shapes[0], dict(zip(keys, vals)), nbytes)
        except perfmodel.ModelError:
            continue
        best = min(best, t)
    assert best < 0.8 * base, f"{name}: best modeled {best:.4f} ms vs baseline {base:.4f} ms"


@pytest.mark.parametrize("name", NEW_SPECS)
def test_compare_expressions_compute_the_reference(name):
    """Each `compare:` expression (what a user would otherwise call) is the same op as the
    reference: evaluated on the CPU in float32 on every check shape, within the tolerance."""
    import torch

    from checker.peers import build
    s = _load(name)
    env_g = {"torch": torch, "F": torch.nn.functional, "math": math}
    peers, skipped = build(torch, s.to_checker(), with_compile=False)
    for label, why in skipped.items():   # only an optional package may be missing
        assert why["kind"] == "not installed" and ("liger-kernel is not installed" in why["reason"]
                                                   or "quack-kernels is not installed" in why["reason"]), \
            f"{name} compare {label!r}: {why}"
    assert set(peers) | set(skipped) == set(s.compare)
    for shape in s.check_shapes:
        g = torch.Generator().manual_seed(0)
        inputs = {i["name"]: torch.randn([shape[d] if isinstance(d, str) else d for d in i["shape"]],
                                         generator=g) * i["scale"] for i in s.inputs}
        ref = eval(s.reference, dict(env_g), dict(inputs)).double()
        for label, fn in peers.items():
            out = fn(*inputs.values()).double()
            rel = float((out - ref).norm() / ref.norm())
            assert rel <= s.tolerance, f"{name} compare {label!r} on {shape}: rel-L2 {rel:.2e}"


# ------------------------------------------------------------------ the real checker, interpreted


def _random_configs(s, n, seed):
    rng = random.Random(seed)
    base = contract.read_config(s.baseline.read_text())
    out, seen = [], {tuple(sorted(base.items()))}
    while len(out) < n:
        cfg = {k: rng.choice(v) for k, v in s.search_space.items()}
        key = tuple(sorted(cfg.items()))
        if key not in seen:
            seen.add(key)
            out.append(cfg)
    return out


def _run_checker(spec_json: Path, candidate: Path, champion: Path, draws: int) -> dict:
    cmd = [sys.executable, "-m", "checker.check", "--spec", str(spec_json),
           "--candidate", str(candidate), "--champion", str(champion), "--mode", "interpret",
           "--draws", str(draws)]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=CHECK_TIMEOUT_S)
    assert p.returncode == 0, f"checker exited {p.returncode}: {p.stderr[-2000:]}"
    r = parse_result_line(p.stdout)
    r["_stderr_tail"] = p.stderr[-2000:]
    return r


@pytest.fixture(scope="module", params=NEW_SPECS)
def checked(request, tmp_path_factory):
    """Run the checker on one spec's baseline, planted bug and random configs, in parallel."""
    name = request.param
    s = _load(name)
    tmp = tmp_path_factory.mktemp(name)
    spec_json = tmp / "spec.json"
    spec_json.write_text(json.dumps(s.to_checker()))
    code = s.baseline.read_text()
    _, old, new = PLANTED_BUGS[name]
    bug = tmp / "bug.py"
    bug.write_text(code.replace(old, new))
    cfgs = _random_configs(s, N_RANDOM_CONFIGS, seed=f"{name}-configs")
    jobs = {"baseline": (s.baseline, 3), "bug": (bug, 1)}
    for i, cfg in enumerate(cfgs):
        p = tmp / f"cfg{i}.py"
        p.write_text(tuner.replace_config(code, cfg))
        jobs[f"cfg{i}"] = (p, 1)
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as ex:
        futs = {k: ex.submit(_run_checker, spec_json, cand, s.baseline, draws)
                for k, (cand, draws) in jobs.items()}
        results = {k: f.result() for k, f in futs.items()}
    return {"name": name, "spec": s, "results": results, "configs": cfgs}


def _explain(r):
    return {k: r.get(k) for k in ("ok", "stage", "correct", "error", "rel_l2", "wall_s")} | \
        {"stderr": r.get("_stderr_tail", "")[-800:]}


def test_checker_accepts_baseline(checked):
    s, r = checked["spec"], checked["results"]["baseline"]
    assert r["ok"] is True and r["correct"] is True, _explain(r)
    assert r["mode"] == "interpret"
    labels = {s.shape_label(sh) for sh in s.check_shapes}
    assert set(r["rel_l2"]) == labels, r["rel_l2"]
    assert all(v is not None and v <= s.tolerance for v in r["rel_l2"].values()), r["rel_l2"]


def test_checker_rejects_planted_bug(checked):
    s, r = checked["spec"], checked["results"]["bug"]
    what = PLANTED_BUGS[checked["name"]][0]
    assert r["ok"] is False and r["correct"] is False, (what, _explain(r))
    assert r["stage"] == "correctness", _explain(r)
    logged = [v for v in r["rel_l2"].values() if v is not None]
    # over the tolerance, or over the rounding floor's multiple (stricter, for 16-bit outputs)
    assert logged and (max(logged) > s.tolerance or "precision downgrade" in r["error"]), (what, _explain(r))


def test_checker_accepts_random_search_space_configs(checked):
    s = checked["spec"]
    for i, cfg in enumerate(checked["configs"]):
        r = checked["results"][f"cfg{i}"]
        assert r["ok"] is True and r["correct"] is True, (cfg, _explain(r))
        assert all(v <= s.tolerance for v in r["rel_l2"].values()), (cfg, r["rel_l2"])
