"""The checker's --peers and --profile-kernel flags: accepted everywhere, GPU-only in effect (the
interpreter never times, so a CPU run adds neither block), and staged with their modules."""
import json
import subprocess
import sys
from pathlib import Path

from kernloop.backends.local import stage_job
from kernloop.backends.resultline import parse_result_line
from kernloop.spec import load_spec

ROOT = Path(__file__).resolve().parent.parent


def test_flags_in_interpret_mode_add_nothing(tmp_path):
    spec = load_spec(ROOT / "specs" / "softmax.yaml")
    f = stage_job(spec, spec.baseline, spec.baseline, tmp_path)
    assert all((tmp_path / "checker" / f"{n}.py").exists()            # in the shipped package
               for n in ("sight", "peers", "kernelprofile", "ncu"))
    d = json.loads(f["spec"].read_text())
    assert d["compare"] == spec.compare     # the peers travel in the resolved spec
    p = subprocess.run([sys.executable, "-m", "checker.check", "--spec", str(f["spec"]), "--candidate",
                        str(f["candidate"]), "--champion", str(f["champion"]), "--mode", "interpret",
                        "--draws", "1", "--peers", "--profile-kernel"],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    r = parse_result_line(p.stdout)
    assert r["ok"] and r["correct"], r.get("error")
    assert "peers" not in r and "profile" not in r


def test_wants_profile():
    from checker.sight import wants_profile
    assert wants_profile({}, True)   # baseline and final jobs: always
    assert wants_profile({"candidate": {"mean_ms": 0.9}, "champion": {"mean_ms": 1.0}}, False)
    assert not wants_profile({"candidate": {"mean_ms": 1.1}, "champion": {"mean_ms": 1.0}}, False)
    assert not wants_profile({"candidate": None, "champion": {"mean_ms": 1.0}}, False)
    # with the spec's bar: a near tie, or a mean carried by the champion's slow reps, gets none
    win = {"candidate": {"mean_ms": 0.9, "median_ms": 0.9}, "champion": {"mean_ms": 1.0, "median_ms": 1.0}}
    assert wants_profile(win, False, 0.02)
    assert not wants_profile({"candidate": {"mean_ms": 0.99}, "champion": {"mean_ms": 1.0}}, False, 0.02)
    tie = {"candidate": {"mean_ms": 0.9, "median_ms": 1.0}, "champion": {"mean_ms": 1.0, "median_ms": 1.0}}
    assert not wants_profile(tie, False, 0.02)



def _host(fn, args):
    import time

    def call():
        t0 = time.perf_counter()
        fn(*args)
        return (time.perf_counter() - t0) * 1e3
    return call


def test_look_split_adds_peers_and_profile_through_the_calls_it_is_given(monkeypatch):
    """The judge's entry on the CPU: the candidate only through kernel_call/profile_call (host
    clock standing in for CUDA events), the peers built and timed here."""
    import torch

    from checker.timing import summarize
    from checker.validate import reference
    from checker.sight import look_split
    monkeypatch.setenv("KERNLOOP_NCU", "off")
    spec = load_spec(ROOT / "specs" / "softmax.yaml").to_checker()
    spec["compare"] = {"torch.softmax": "torch.softmax(x, dim=-1)"}
    x = torch.randn(16, 128)
    asked = []
    result = {"candidate": {"mean_ms": 0.05, "median_ms": 0.05}, "champion": {"mean_ms": 0.06}}
    look_split(torch, spec, result, _host(lambda a: torch.softmax(a, -1), [x]),
               lambda gpu_ms: asked.append(gpu_ms) or {"kernels": [], "cost_s": 0.0},
               [x], lambda: None, reference(torch, spec, [x], torch.float64), summarize, False, True,
               "spec.json", "k.py", 1, 3, 0.0, make_call=lambda f: _host(f, [x]))
    assert asked == [0.05] and result["profile"]["candidate"]["kernels"] == [] and "peers" not in result
    result = {"candidate": {"mean_ms": 0.07, "median_ms": 0.07}, "champion": {"mean_ms": 0.06}}
    look_split(torch, spec, result, _host(lambda a: torch.softmax(a, -1), [x]),
               lambda gpu_ms: asked.append(gpu_ms) or {}, [x], lambda: None,
               reference(torch, spec, [x], torch.float64), summarize, False, True, "spec.json", "k.py",
               1, 3, 0.0, make_call=lambda f: _host(f, [x]))
    assert "profile" not in result and asked == [0.05]   # slower than the champion: not profiled


def test_look_split_with_peers_times_them_beside_the_candidate(monkeypatch):
    import torch

    from checker.timing import summarize
    from checker.validate import reference
    from checker.sight import look_split
    monkeypatch.setenv("KERNLOOP_NCU", "off")
    spec = load_spec(ROOT / "specs" / "softmax.yaml").to_checker()
    x = torch.randn(16, 128)
    result = {"candidate": {"mean_ms": 0.09, "median_ms": 0.09}, "champion": {"mean_ms": 0.06}}
    look_split(torch, spec, result, _host(lambda a: torch.softmax(a, -1), [x]), lambda gpu_ms: {"kernels": []},
               [x], lambda: None, reference(torch, spec, [x], torch.float64), summarize, True, True,
               "spec.json", "k.py", 1, 3, 0.0, make_call=lambda f: _host(f, [x]), backend="eager")
    blk = result["peers"]
    assert {"torch.softmax", "torch.compile"} <= set(blk["peers"]) and blk["kernels"]["candidate"]["n"] % 3 == 0
    for p in ("torch.softmax", "torch.compile"):   # a noisy peer (the host clock) timed in more rounds of 3 reps
        assert 1 <= blk["peers"][p]["rounds"] <= 8 and blk["peers"][p]["n_timed"] == 3 * blk["peers"][p]["rounds"]
    assert blk["best"]["name"] in blk["peers"]
    assert blk["cost_s"] > 0
    assert "liger" in blk["skipped"] or "liger" in blk["peers"]   # the optional package: either way, said
    assert "profile" in result   # a job with peers (baseline, final) always profiles
