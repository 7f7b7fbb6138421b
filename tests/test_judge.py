"""The judge and its workers as separate processes (checker/judge.py, checker/worker.py), in
interpret mode on the CPU (real Triton kernels, TRITON_INTERPRET=1), the static contract
bypassed on purpose: what a kernel can still reach from its own worker, what the judge sees of
it from outside, and what the loop does with a child's result line it cannot trust.
The GPU half (CUDA IPC, the A/B between two workers on GPU clocks, the clock check) runs in
benchmarks/judge_smoke.py on the H200; the A/B's rules also run here (tests/test_hostile.py,
--host-clock).
"""
import json
import subprocess
import sys
from pathlib import Path

import orchestrator
from kernloop.loop.state import State
from kernloop.backends.local import Backend, parse_child
from checker.validate import Reject, judge_values
from kernloop.decision import decide
from kernloop.backends.resultline import MARKER, parse_result_line, validate_result
from kernloop.backends.sandbox import run_child
from kernloop.spec import load_spec
from tests.hostile_cases import CASES
from tests.scripted_proposer import Scripted

ROOT = Path(__file__).resolve().parent.parent
SPEC = load_spec(ROOT / "specs" / "matmul.yaml")
BASE = SPEC.baseline.read_text()
ALLOC = "    c = torch.empty((M, N), device=a.device, dtype=a.dtype)\n"


def judge(tmp_path, code, spec_patch=None):
    """One judge run on `code`; returns (result, raw stdout text, stderr text)."""
    spec = SPEC.to_checker()
    spec["check_shapes"] = [{"M": 37, "N": 45, "K": 29}]
    spec.update(spec_patch or {})
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    (tmp_path / "cand.py").write_text(code)
    (tmp_path / "champ.py").write_text(BASE)
    out_path = tmp_path / "judge_stdout.txt"
    with open(out_path, "w") as out:
        p = subprocess.run([sys.executable, "-m", "checker.judge", "--spec",
                            str(tmp_path / "spec.json"), "--candidate", str(tmp_path / "cand.py"),
                            "--champion", str(tmp_path / "champ.py"), "--mode", "interpret",
                            "--draws", "1"], stdout=out, stderr=subprocess.PIPE, text=True,
                           timeout=120, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    text = out_path.read_text()
    return parse_result_line(text), text, p.stderr


def test_baseline_passes_and_the_result_names_its_containment(tmp_path):
    r, out, _ = judge(tmp_path, BASE)
    assert r["ok"] and r["correct"], r["error"]
    c = r["containment"]["candidate"]
    for key in ("pdeathsig", "no_new_privs", "network_namespace", "capabilities_dropped"):
        assert c[key] is True or str(c[key]).startswith("unavailable"), (key, c[key])
    assert "Triton's compiler" in c["audit_hook"]
    assert r["containment"]["judge"]["undumpable"] in (True,) or "unavailable" in str(r["containment"]["judge"])
    assert r["workers"]["candidate"]["pid"] > 0 and r["floors"] and r["floor_ratio"]
    assert r["containment"]["judge"]["arenas"] == {"candidate": "own file"}   # GPU: "own CUDA segment"
    assert set(r["phase_s"]) >= {"spawn", "import", "references", "workers_ready", "load", "correctness"}


def test_forged_result_lines_never_reach_the_judges_stdout(tmp_path):
    """The kernel prints the line, writes it to fds 1..10 and to every /proc/<judge>/fd it can
    open: stdout still holds exactly one line, the judge's, and it is a failure."""
    r, out, err = judge(tmp_path, CASES["forges_result_line"][0](BASE))
    assert [ln for ln in out.splitlines() if ln.strip()] == [ln for ln in out.splitlines() if MARKER in ln]
    assert out.count(MARKER) == 1 and r["ok"] is False
    assert '"mean_ms": 0.001' in err      # its own copies went to stderr


def test_the_worker_has_no_descriptor_of_the_judges_stdout(tmp_path):
    code = BASE.replace(ALLOC, ALLOC + "    import os\n    seen = []\n"
                        "    for f in os.listdir('/proc/self/fd'):\n        try:\n"
                        "            seen.append(os.readlink('/proc/self/fd/' + f))\n"
                        "        except OSError:\n            pass\n"
                        "    raise RuntimeError('FDS ' + repr(sorted(seen)))\n")
    r, _, _ = judge(tmp_path, code)
    assert "FDS" in r["error"], r["error"]
    assert "judge_stdout.txt" not in r["error"]


def test_the_worker_has_its_own_network_namespace(tmp_path):
    code = BASE.replace(ALLOC, ALLOC + "    raise RuntimeError('NET ' + repr([l.split(':')[0].strip() for l in "
                        "open('/proc/self/net/dev').read().splitlines()[2:]]))\n")
    r, _, _ = judge(tmp_path, code)
    assert "NET" in r["error"], r["error"]
    if r["containment"]["candidate"]["network_namespace"] is True:
        assert "NET ['lo']" in r["error"], r["error"]   # nothing but a loopback, and it is down


def test_floor_multiple_from_the_spec_is_the_rule(tmp_path):
    """The int8-like candidate fails at the default multiple and passes when the spec allows
    100x: the knob is the rule, not a constant."""
    code = CASES["precision_int8_operands"][0](BASE)
    r, _, _ = judge(tmp_path, code)
    assert not r["ok"] and "precision downgrade" in r["error"] and "rounding floor" in r["error"]
    r, _, _ = judge(tmp_path, code, {"floor_multiple": 100.0})
    assert r["ok"], r["error"]
    assert max(r["floor_ratio"].values()) > 3.0


def test_precision_rule_names_both_numbers():
    import torch
    ref = torch.randn(256, 256, dtype=torch.float64)
    noisy = (ref + 0.004 * torch.randn_like(ref)).to(torch.float16)
    floor = float(torch.linalg.vector_norm(ref.to(torch.float16).double() - ref) / torch.linalg.vector_norm(ref))
    try:
        judge_values(torch, noisy, ref, 1e-2, floor, 3.0, "256x256", True)
        raise AssertionError("not rejected")
    except Reject as e:
        assert "precision downgrade" in str(e) and f"{floor:.3e}" in str(e)
    assert judge_values(torch, ref.to(torch.float16), ref, 1e-2, floor, 3.0, "256x256", True) <= floor * 1.0001
    assert judge_values(torch, noisy, ref, 1e-2, floor, 3.0, "256x256", False) > 3 * floor   # fp32 out: no floor


def test_validate_result_finds_wrong_types():
    good = {"ok": True, "stage": "done", "error": None, "rel_l2": {"a": 1e-4},
            "candidate": {"mean_ms": 1.0, "min_ms": 0.9, "median_ms": 1.0, "std_ms": 0.01, "n": 50},
            "champion": {"mean_ms": 1.1, "min_ms": 1.0, "median_ms": 1.1, "std_ms": 0.01, "n": 50}}
    assert validate_result(good) == []
    cases = {"candidate": ("fast", "candidate must be an object"),
             "champion": ([1.0], "champion must be an object"),
             "ok": ("yes", "ok must be true or false")}
    for key, (value, needle) in cases.items():
        assert any(needle in p for p in validate_result({**good, key: value})), key
    bad_n = {**good, "candidate": {**good["candidate"], "n": -3}}
    assert any("candidate.n" in p for p in validate_result(bad_n))
    bad_mean = {**good, "champion": {**good["champion"], "mean_ms": "1.0"}}
    assert any("champion.mean_ms must be a number" in p for p in validate_result(bad_mean))
    assert validate_result([1, 2]) == ["result is a list, not a JSON object"]


def test_decide_never_crashes_on_malformed_results():
    for res in ({"ok": True, "candidate": [1], "champion": "x"},
                {"ok": True, "candidate": {"mean_ms": 1.0, "std_ms": 0.1, "n": "50"},
                 "champion": {"mean_ms": 2.0, "std_ms": 0.1, "n": 50}},
                {"ok": False, "error": {"not": "a string"}}, ["not", "a", "dict"]):
        d = decide(res)
        assert d["verdict"] == "failed" and not d["promoted"] and isinstance(d["reason"], str)


FAKE_CHECKER = 'print(\'KERNLOOP_RESULT {"ok": true, "candidate": "fast", "champion": {"mean_ms": 1.0}}\')\n'


def test_parse_child_turns_a_malformed_line_into_a_failure(tmp_path):
    script = tmp_path / "fake_check.py"
    script.write_text(FAKE_CHECKER)
    out = run_child([sys.executable, str(script)], 30)
    r = parse_child(out, "local", False, None)
    assert r["ok"] is False and r["stage"] == "backend"
    assert "malformed result line" in r["error"] and "candidate must be an object" in r["error"]


class FakeCheckerBackend(Backend):
    """A backend whose checker is a real child process that prints a malformed line."""
    name, synthetic, device = "fake-checker", True, "none"

    def __init__(self, script: Path):
        self.script = script

    def evaluate(self, spec, candidate, champion, workdir, configs=None):
        return parse_child(run_child([sys.executable, str(self.script)], 30), self.name, True, None)


def test_loop_survives_a_malformed_result_line_and_keeps_its_champion(tmp_path):
    script = tmp_path / "fake_check.py"
    script.write_text(FAKE_CHECKER)
    run = tmp_path / "run"
    (run / "candidates").mkdir(parents=True)
    (run / "baseline.py").write_text(BASE)
    st = State()
    st.champion_profile = {"mean_ms": 1.0}
    backend = FakeCheckerBackend(script)
    prop = Scripted([BASE, BASE])
    for i in (1, 2):
        ev, fatal = orchestrator.run_iteration(i, st, SPEC, prop, backend, run, 0.02, 2.0)
        ev["champion_id"] = st.champion_id
        st.apply(ev, None)
        assert not fatal and ev["decision"]["verdict"] == "failed"
        assert "malformed result line" in ev["decision"]["reason"]
        assert st.champion_id == "baseline"


def test_every_checker_module_is_staged_with_the_job(tmp_path):
    """A job (local folder or Nebius container) holds the whole package as checker/: every .py
    file of it (checker.files(), no list to keep), so a new module ships without a word more."""
    import checker
    from kernloop.backends.local import stage_job
    here = {p.name for p in (ROOT / "checker").glob("*.py")}
    assert {Path(p).name for p in checker.files()} == here and "__init__.py" in here
    files = stage_job(SPEC, SPEC.baseline, SPEC.baseline, tmp_path)
    assert {k for k in files if k.startswith("checker/")} == {f"checker/{n}" for n in here}
    assert all((tmp_path / "checker" / name).exists() for name in here)
    assert not any((tmp_path / name).exists() for name in here)   # nothing flat beside the kernels
    assert checker.command("check", "--x") == [sys.executable, "-m", "checker.check", "--x"]


def test_the_audit_hook_still_lets_tritons_own_tools_run(tmp_path):
    """The hook judges a spawn by the real path of what runs and the environment: the compiler
    Triton would pick and `ldconfig -p` still run (a real hook, in a child process); a symlink
    named like a tool, or the compiler under a changed environment, do not."""
    import shutil
    if not shutil.which("cc"):
        import pytest
        pytest.skip("no C compiler on this machine")
    script = (
        "import os, subprocess, sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from checker import contain\n"
        "g = contain.AuditGuard(); sys.addaudithook(g); g.arm()\n"
        "out = []\n"
        "def run(argv):\n"
        "    try:\n"
        "        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "        out.append('ran')\n"
        "    except PermissionError:\n"
        "        out.append('blocked')\n"
        "run(['cc', '--version'])\n"
        "run(['/sbin/ldconfig', '-p'] if os.path.exists('/sbin/ldconfig') else ['ldconfig', '-p'])\n"
        f"os.symlink('/bin/true', {str(tmp_path / 'ptxas')!r})\n"
        f"run([{str(tmp_path / 'ptxas')!r}])\n"
        "run(['ldconfig', '-v'])\n"
        "os.environ['GCC_EXEC_PREFIX'] = '/tmp/x/'\n"
        "run(['cc', '--version'])\n"
        "print(out)\n")
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert p.stdout.strip() == "['ran', 'ran', 'blocked', 'blocked', 'blocked']", p.stdout + p.stderr



def test_host_clock_outside_interpret_mode_is_one_clear_error(tmp_path):
    (tmp_path / "spec.json").write_text(json.dumps(SPEC.to_checker()))
    (tmp_path / "k.py").write_text(BASE)
    p = subprocess.run([sys.executable, "-m", "checker.judge", "--spec",
                        str(tmp_path / "spec.json"), "--candidate", str(tmp_path / "k.py"),
                        "--champion", str(tmp_path / "k.py"), "--mode", "gpu", "--host-clock"],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 2 and "--host-clock is for --mode interpret" in p.stderr
    assert "Traceback" not in p.stderr
