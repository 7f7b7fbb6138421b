"""Missing packages, each said in one line (kernloop/needs.py): the pure decisions, and real runs
of orchestrator.py with a sitecustomize on PYTHONPATH that makes `import openai` (triton,
tavily) raise ImportError: a required one is one `error:` line naming what to pip install and
exit 2 before any run folder exists, no traceback; an optional one is one line and the run goes on."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernloop import needs
from kernloop.needs import Found
from columns import unwrap  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BLOCKER = '''import os, sys
class _Block:
    """A meta-path finder that refuses the top-level modules named in KL_BLOCK."""
    names = set(filter(None, os.environ.get("KL_BLOCK", "").split(",")))
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
        return None
sys.meta_path.insert(0, _Block())
'''


def test_errors_name_what_to_install():
    assert needs.errors(Found(), True, True) == []
    assert needs.errors(Found(triton=False), False, False) == []             # the checker runs elsewhere
    (t,) = needs.errors(Found(triton=False), True, False)
    assert t.startswith("triton is not installed: pip install triton (")
    (o,) = needs.errors(Found(openai=False), True, True)
    assert o.startswith("openai is not installed: pip install openai (the LLM proposer needs it")
    assert needs.errors(Found(openai=False), True, False) == []              # the tuner needs no openai
    assert len(needs.errors(Found(triton=False, openai=False), True, True)) == 2


def test_notes_say_what_a_missing_optional_package_disables():
    assert needs.notes(Found(), True, True, {"liger", "quack"}, True) == []
    assert needs.notes(Found(tavily=False), True, True, set(), False) == [
        "tavily-python is not installed: research uses the shipped notes (pip install tavily-python)"]
    assert needs.notes(Found(tavily=False), True, False, set(), False) == []   # no key: no Tavily asked
    assert needs.notes(Found(tavily=False), False, True, set(), False) == []   # the tuner reads no notes
    lines = needs.notes(Found(liger=False, quack=False), False, False, {"liger", "quack"}, True)
    assert lines == ["liger-kernel is not installed: the liger peer is not timed (pip install liger-kernel)",
                     "quack-kernels is not installed: the quack peer is not timed (pip install quack-kernels)"]
    assert needs.notes(Found(quack=False), False, False, {"quack"}, False) == []   # no peers timed here
    assert needs.notes(Found(quack=False), False, False, {"liger"}, True) == []    # the spec names no quack
    assert all(len("kernloop: " + ln) <= 120 for ln in lines)                    # one terminal line each


def test_libs_named_and_installed(tmp_path):
    assert needs.libs_named({"a": "liger.softmax(x)", "b": "torch.softmax(x, -1)", "c": "quack.rms_norm(x, w, 1e-6)",
                             "bad": "x +"}) == {"liger", "quack"}
    assert needs.libs_named(None) == set()
    assert needs.installed("json") and not needs.installed("kl_no_such_module")
    (tmp_path / "kl_site_probe").mkdir()
    (tmp_path / "kl_site_probe" / "__init__.py").write_text("")
    assert needs.installed("kl_site_probe", [str(tmp_path)])                   # a KERNLOOP_SITE folder
    assert needs.probe(str(tmp_path)).triton in (True, False)


def _run(tmp_path, block: str, *args, **env):
    (tmp_path / "blk").mkdir(exist_ok=True)
    (tmp_path / "blk" / "sitecustomize.py").write_text(BLOCKER)
    e = {k: v for k, v in os.environ.items() if not k.startswith(("KERNLOOP_", "TAVILY_", "NVIDIA_"))}
    e.update(KL_BLOCK=block, PYTHONPATH=os.pathsep.join([str(tmp_path / "blk"), str(ROOT)]), **env)
    return subprocess.run([sys.executable, str(ROOT / "orchestrator.py"), "--spec", str(ROOT / "specs" / "softmax.yaml"),
                           "--backend", "synthetic", "--out", str(tmp_path / "runs"), *args],
                          capture_output=True, text=True, timeout=600, env=e, cwd=tmp_path)


@pytest.mark.parametrize("block,env,want", [
    ("openai", {"KERNLOOP_LLM_BASE_URL": "http://127.0.0.1:9/v1", "KERNLOOP_LLM_API_KEY": "k"},
     "error: openai is not installed: pip install openai (the LLM proposer needs it"),
    ("triton", {}, "error: triton is not installed: pip install triton ("),
])
def test_a_missing_required_package_is_one_error_line_and_exit_2(tmp_path, block, env, want):
    p = _run(tmp_path, block, **env)
    assert p.returncode == 2, p.stderr[-2000:]
    lines = unwrap(p.stderr.strip())
    assert len(lines) == 1 and lines[0].startswith(want), p.stderr[-2000:]
    assert "Traceback" not in p.stderr + p.stdout
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())   # no run folder


def test_tavily_missing_with_a_key_is_one_line_and_the_run_goes_on(tmp_path):
    """An LLM run (its endpoint never asked: no iteration) with TAVILY_API_KEY set and
    tavily-python missing: one line at the start, research from the shipped notes, exit 0."""
    p = _run(tmp_path, "tavily", "--iterations", "0", KERNLOOP_LLM_BASE_URL="http://127.0.0.1:9/v1",
             KERNLOOP_LLM_API_KEY="k", TAVILY_API_KEY="tvly-test")
    assert p.returncode == 0, p.stderr[-3000:]
    out = p.stdout + p.stderr
    hits = [ln for ln in out.splitlines() if "tavily-python is not installed" in ln]
    assert len(hits) == 1 and hits[0].endswith("research uses the shipped notes (pip install tavily-python)"), out
    assert "research source: builtin" in out and "Traceback" not in out
