"""The timed shape first (checker/judge.py check_first): in a candidate's job the judge checks
the timed shape before the A/B and the other shapes after it, only when the A/B may promote the
candidate; a result with shapes left unchecked is never promoted (decision.decide). On the CPU:
real Triton kernels in the interpreter, the A/B on host clocks (--host-clock: the rules only),
two check shapes, the first timed. bf16 is checked as fp16 here."""
from pathlib import Path
from types import SimpleNamespace

from kernloop import decision
from kernloop.backends.resultline import validate_result
from checker.judge import check_first, deferred
from kernloop.spec import load_spec
from tests import judges

ROOT = Path(__file__).resolve().parent.parent
SPEC = load_spec(ROOT / "specs" / "matmul.yaml")
BASE = SPEC.baseline.read_text()
TIMED, OTHER = "37x45x29", "130x70x100"
SLOW = BASE.replace("BLOCK_M=32, BLOCK_N=32, BLOCK_K=32", "BLOCK_M=16, BLOCK_N=16, BLOCK_K=16")   # ~4x the work
WRONG_ON_OTHER = BASE.replace("_matmul_kernel[grid](a, b, c, M, N, K,", "_matmul_kernel[grid](a, b, c, M, N, K - (M > 100),")


def timed(tmp_path, code, champion, *extra):
    spec = SPEC.to_checker()
    spec["check_shapes"] = [{"M": 37, "N": 45, "K": 29}, {"M": 130, "N": 70, "K": 100}]
    return judges.judge_files(tmp_path, spec, code, champion, ["--mode", "interpret", "--host-clock", "--draws", "1",
                                                               "--reps", "20", "--warmup", "2", "--backend",
                                                               "synthetic", *extra])


def test_which_cases_go_first_is_a_pure_rule():
    cases = [{"label": x} for x in (TIMED, TIMED, OTHER, OTHER)]
    assert check_first(cases, TIMED, True) == (cases[:2], cases[2:])
    assert check_first(cases, TIMED, False) == (cases, [])
    assert check_first(cases, "1x1x1", True) == (cases, [])   # no case of the timed shape: all first
    job = dict(all_shapes_first=False, peers=False)
    assert deferred(SimpleNamespace(**job), True) is True
    assert deferred(SimpleNamespace(**job), False) is False   # correctness only: every shape
    assert deferred(SimpleNamespace(**{**job, "peers": True}), True) is False   # baseline, final
    assert deferred(SimpleNamespace(**{**job, "all_shapes_first": True}), True) is False


def test_a_clearly_slower_candidate_is_checked_on_the_timed_shape_only(tmp_path):
    (tmp_path / "a").mkdir()
    r = timed(tmp_path / "a", SLOW, BASE)
    assert r["ok"] and r["correct"], r["error"]
    assert r["unchecked"]["shapes"] == [OTHER] and validate_result(r) == []
    assert set(r["rel_l2"]) == {TIMED, TIMED + "(timed)"}   # nothing of the other shape ran
    d = decision.decide(r)
    assert d["verdict"] == "rejected" and d["reason"].endswith(f"not checked on {OTHER} (it could not win)")
    (tmp_path / "b").mkdir()   # --all-shapes-first: as before, every shape before the A/B
    r = timed(tmp_path / "b", SLOW, BASE, "--all-shapes-first")
    assert r["ok"] and "unchecked" not in r and {TIMED, OTHER} <= set(r["rel_l2"])


def test_a_candidate_that_may_win_is_checked_on_every_shape_after_its_a_b(tmp_path):
    (tmp_path / "a").mkdir()
    r = timed(tmp_path / "a", BASE, SLOW)   # the 32x32 tiles against a 16x16 champion
    assert r["ok"] and r["correct"], r["error"]
    assert "unchecked" not in r and {TIMED, OTHER} <= set(r["rel_l2"])
    ph = r["phase_s"]
    assert ph["timing"] < ph["others"] <= ph["correctness_others"] < ph["verdict"]
    assert decision.decide(r)["verdict"] == "promoted"
    (tmp_path / "b").mkdir()   # wrong on the other shape only: found after the A/B, never promoted
    r = timed(tmp_path / "b", WRONG_ON_OTHER, SLOW)
    assert r["ok"] is False and r["correct"] is False and r["stage"] == "correctness", r
    assert OTHER in r["error"] and r["candidate"]["n"] == 20   # its A/B ran, then the shape failed
    assert decision.decide(r)["verdict"] == "incorrect"


def test_a_result_with_unchecked_shapes_is_never_promoted():
    fast = {"mean_ms": 1.0, "median_ms": 1.0, "std_ms": 0.01, "n": 50}
    slow = {"mean_ms": 2.0, "median_ms": 2.0, "std_ms": 0.01, "n": 50}
    r = {"ok": True, "correct": True, "candidate": fast, "champion": slow}
    assert decision.decide(r)["promoted"] is True
    d = decision.decide({**r, "unchecked": {"shapes": [OTHER], "why": "x"}})
    assert d["promoted"] is False and d["verdict"] == "rejected"
    assert d["reason"].endswith(f"not checked on {OTHER}: a promotion needs every shape")
    assert validate_result({**r, "unchecked": {"shapes": "all"}}) == [
        "unchecked must be an object whose shapes is a list of shape labels"]


def test_the_page_lists_unchecked_shapes_as_not_checked():
    from kernloop.view.cardview import rel_rows
    rows, tol = rel_rows({"rel_l2": {"4096x4096x4096": 0.003}, "tolerance": 0.01,
                          "unchecked": {"shapes": ["1000x1000x1000"], "why": "its A/B cannot promote it"}})
    assert tol == 0.01 and rows == [{"shape": "4096×4096×4096", "value": "0.003", "ok": True},
                                    {"shape": "1000×1000×1000", "value": "not checked", "ok": None}]
