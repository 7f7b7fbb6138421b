"""The one CLI: subcommands run (default), new, check, page, model, mcp, doctor; every user error is one `error:` line and exit 2."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernloop import errors
from kernloop import page
from kernloop import settings
from kernloop import spec
from kernloop.backends.local import BackendError
from kernloop.loop.factories import ProposerError
from kernloop.loop.resume import ResumeError
from kernloop.loop.runfolder import RunFolderError
from kernloop.onramp.checkcmd import CheckError
from kernloop.onramp.draft import OnrampError
from columns import too_wide, unwrap  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, str(ROOT / "orchestrator.py"), *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_help_lists_the_subcommands():
    p = _cli("--help")
    assert p.returncode == 0
    for name in ("run", "new", "check", "page", "model", "apply", "mcp", "doctor"):
        assert f"\n  {name} " in p.stdout, name
        h = _cli(name, "--help")   # each one's own help, through the same dispatch
        assert h.returncode == 0 and "usage:" in h.stdout, (name, h.stderr)


def test_every_user_error_class_derives_from_the_one_base():
    for cls in (spec.SpecError, settings.SettingsError, OnrampError, CheckError, ProposerError, ResumeError,
                RunFolderError, BackendError, page.PageError):
        assert issubclass(cls, errors.KernLoopError), cls


def test_user_errors_of_every_subcommand_are_one_error_line_and_exit_2(tmp_path):
    for args in (["--spec", "nope.yaml"], ["run", "--spec", "nope.yaml"], ["new", "1bad", "--from", "m:f", "--shape", "8"],
                 ["check", "--spec", "nope.yaml", "k.py"], ["page", tmp_path], ["--no-such-flag"]):
        p = _cli(*args)
        assert p.returncode == 2, (args, p.stderr)
        lines = unwrap(p.stderr.strip())   # one error, within 120 columns
        assert len(lines) == 1 and lines[0].startswith("error: ") and not too_wide(p.stderr.splitlines()), \
            (args, p.stderr)


def test_page_subcommand_renders_a_run(tmp_path):
    run = tmp_path / "example"
    shutil.copytree(ROOT / "runs" / "example", run)
    (run / "trajectory.html").unlink()
    p = _cli("page", run)
    assert p.returncode == 0, p.stderr
    assert (run / "trajectory.html").read_text().count("<html") == 1


def test_a_library_warning_is_a_warning_line_within_the_width():
    """A warning a library raises (here one of 300 characters) reaches the terminal as `warning:`
    lines of at most 120 columns, its category and origin named (issue 47)."""
    code = ("import sys, warnings; sys.argv = ['kernloop', 'doctor', '--help']\n"
            "import orchestrator\n"
            "orchestrator.wrap_warnings()\n"
            "warnings.warn('x' * 10 + ' word' * 58, UserWarning)\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    lines = p.stderr.splitlines()
    assert lines[0].startswith("warning: UserWarning: xxxxxxxxxx word") and len(lines) >= 3
    assert all(len(ln) <= 120 for ln in lines) and unwrap(p.stderr) == [" ".join(ln.strip() for ln in lines)]


def test_the_installed_command_names_itself_in_its_usage_and_errors():
    """`kernloop` (the console script `pip install .` writes beside this Python, as `.ci/run`
    installs it) says `usage: kernloop ...` and `see kernloop new --help`; `orchestrator.py`
    says its own name."""
    script = Path(sys.executable).parent / "kernloop"
    if not script.is_file():
        pytest.skip("the project is not installed in this Python (CI installs it: .ci/run)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KERNLOOP_LLM", "TAVILY", "NVIDIA_API"))}
    top = subprocess.run([str(script), "--help"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert top.returncode == 0 and top.stdout.startswith("usage: kernloop [run]"), top.stdout[:200]
    assert all(f"\n  {c} " in top.stdout for c in ("run", "new", "check", "page", "mcp", "model", "apply", "doctor"))
    bad = subprocess.run([str(script), "new", "1bad", "--no-such-flag"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode == 2 and "see kernloop new --help" in " ".join(unwrap(bad.stderr)), bad.stderr
    own = _cli("new", "1bad", "--no-such-flag")
    assert own.returncode == 2 and "see orchestrator.py new --help" in " ".join(unwrap(own.stderr)), own.stderr

