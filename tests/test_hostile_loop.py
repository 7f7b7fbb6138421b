"""Issue 23's classes through the whole CLI (synthetic backend, a loopback chat server playing
the model): each answer is rejected or fails with its reason, the run goes on to its budget,
the champion never changes, champion.py is the baseline's judged bytes, and the page renders.

The answers: a second kernel in a string of the kernel body and in a decorator keyword, a Python
function handed to a kernel (compile-time Python), a launcher named `dict`, CONFIG with an int
key and with a tuple key, GROUP_M=0, num_warps=3 (the synthetic model's range: a failed
iteration, not a crash), a 60,000-digit literal, 15 lines of 4,000 digits run into
a keyword (what made the page's highlighter backtrack for minutes), and a 1 MB answer.
"""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests import hostile_cases as H
from tests.loopback_openai import LoopbackOpenAI, reply
from tests.test_nemotron_e2e import _baseline_code, _child_env, _with_config

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]


def _answers(base: str) -> dict[str, tuple[str, str]]:
    """name -> (answer text, what the decision's reason must say)."""
    cfg_line = "CONFIG = dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=1, num_warps=4, num_stages=2)"
    files = {
        "def_in_body_string": (H.def_in_body_string(base), "a string holding a line that starts with 'def'"),
        "kernel_in_decorator_keyword": (H.def_in_decorator_keyword(base), "a string holding a line that starts with 'def'"),
        "compile_time_callable": (base.replace('num_stages=cfg["num_stages"])', 'num_stages=cfg["num_stages"], F=matmul)')
                                  .replace("GROUP_M: tl.constexpr):", "GROUP_M: tl.constexpr, F: tl.constexpr):"),
                                  "'matmul' (function) passed to a kernel launch"),
        "launcher_named_dict": (base.replace("def matmul(a, b):", "def dict(**kw):\n    return kw\n\n\ndef matmul(a, b):"),
                                "'dict' is bound here, shadowing a Python builtin"),
        "config_int_key": (base.replace(cfg_line, "CONFIG = {1: 2, 'BLOCK_M': 32, 'BLOCK_N': 32, 'BLOCK_K': 32, "
                                        "'GROUP_M': 1, 'num_warps': 4, 'num_stages': 2}"), "CONFIG key 1 is not an identifier"),
        "config_tuple_key": (base.replace(cfg_line, "CONFIG = {(1, 2): 3, 'BLOCK_M': 32, 'BLOCK_N': 32, 'BLOCK_K': 32, "
                                          "'GROUP_M': 1, 'num_warps': 4, 'num_stages': 2}"), "CONFIG key (1, 2) is not an identifier"),
        "group_m_zero": (_with_config(base, "GROUP_M=0", GROUP_M=0), "NaN"),   # the kernel divides by 0
        "num_warps_three": (_with_config(base, "3 warps", num_warps=3), "(synthetic) num_warps = 3 is not a power of two"),
        "digits_60000": (base + "\nX = " + "1" * 60_000 + "\n", "Exceeds the limit (4300 digits)"),
        "digit_runs_into_keywords": (base + "".join(f"X{i} = {'1' * 4000}if True else 0\n" for i in range(15)),
                                     "module-level 'X0' is not a literal constant"),
        "answer_1mb": (base + ("# " + "x" * 98 + "\n") * 10_500, "kernel files are at most 200000"),
    }
    return {k: (f"```python\n{code}```", why) for k, (code, why) in files.items()}


def test_the_loop_lives_through_every_class_and_the_champion_never_changes(tmp_path):
    base = _baseline_code()
    answers = _answers(base)
    with LoopbackOpenAI(script=[reply(a) for a, _ in answers.values()]) as srv:
        p = subprocess.run([sys.executable, "orchestrator.py", "--spec", "specs/matmul.yaml",
                            "--backend", "synthetic", "--iterations", str(len(answers)),
                            "--out", str(tmp_path)], cwd=ROOT, env=_child_env(srv),
                           capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    (run,) = [d for d in tmp_path.iterdir() if d.is_dir()]
    evs = [json.loads(ln) for ln in (run / "run.jsonl").read_text().splitlines()]
    its = [e for e in evs if e["event"] == "iteration"]
    assert len(its) == len(answers)
    for (name, (_, why)), ev in zip(answers.items(), its):
        d = ev["decision"]
        assert d["verdict"] in ("invalid", "failed", "incorrect") and not d["promoted"], (name, d)
        assert why in d["reason"], (name, d["reason"][:400])
        assert ev["champion_id"] == "baseline"
        if ev["candidate_file"]:   # the log names the judged bytes: the file on disk is them
            raw = (run / ev["candidate_file"]).read_bytes()
            assert ev["candidate_sha256"] == ev["contract"]["sha256"] == hashlib.sha256(raw).hexdigest()
    assert [e["candidate_config"] for e in its[4:6]] == [None, None]   # never a key the log cannot hold
    base_ev = next(e for e in evs if e["event"] == "baseline")
    end = evs[-1]
    assert end["event"] == "run_end" and end["champion_id"] == "baseline"
    assert end["champion_sha256"] == base_ev["candidate_sha256"] == \
        hashlib.sha256((run / "champion.py").read_bytes()).hexdigest()
    assert base_ev["result"]["source_sha256"]["candidate"] == base_ev["candidate_sha256"]
    page = (run / "trajectory.html").read_text()
    assert all(e["candidate_id"] in page for e in its)
    assert "warning: page not rendered" not in p.stderr


def test_champion_copies_are_written_only_from_the_judged_bytes(tmp_path):
    from kernloop.loop.runfolder import RunFolderError, write_judged_copy
    src, dst = tmp_path / "it0003.py", tmp_path / "champion.py"
    src.write_bytes(b"judged\n")
    sha = hashlib.sha256(b"judged\n").hexdigest()
    assert write_judged_copy(src, dst, sha) == sha and dst.read_bytes() == b"judged\n"
    src.write_bytes(b"changed after the judgement\n")
    dst.unlink()
    import pytest
    with pytest.raises(RunFolderError, match="is not the file that was judged"):
        write_judged_copy(src, dst, sha)
    assert not dst.exists()


def test_a_page_that_cannot_be_written_never_stops_the_loop(tmp_path, capsys):
    """The loop re-renders its page after every event through orchestrator.render_page: a page
    that fails (here its file is a folder) is a warning on stderr, and the loop goes on."""
    import orchestrator
    run = tmp_path / "run"
    (run / "trajectory.html").mkdir(parents=True)
    (run / "run.jsonl").write_text("")
    assert orchestrator.render_page(run) is None
    assert "warning: page not rendered" in capsys.readouterr().err
