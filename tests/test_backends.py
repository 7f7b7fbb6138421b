"""Local backend environment: bytecode caching for checker children."""
import subprocess
import sys

from backends import pycache_env
from sandbox import stripped_env


def test_pycache_prefix_only_where_bytecode_is_not_kept(tmp_path, monkeypatch):
    for k in ("PYTHONPYCACHEPREFIX", "PYTHONDONTWRITEBYTECODE", "KERNLOOP_PYCACHE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    on = {"PYTHONPYCACHEPREFIX": str(tmp_path / "cache" / "kernloop" / "pycache"), "PYTHONDONTWRITEBYTECODE": ""}
    writable = tmp_path / "torch"
    writable.mkdir()
    assert pycache_env(writable) == {}                      # bytecode lands in torch's __pycache__
    unwritable = tmp_path / "no_such_parent" / "torch"      # (a read-only path; root writes anywhere)
    assert pycache_env(unwritable) == on
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")      # as on the H200 image
    assert pycache_env(writable) == on
    monkeypatch.setenv("KERNLOOP_PYCACHE", "0")             # opt out
    assert pycache_env(writable) == {}
    monkeypatch.delenv("KERNLOOP_PYCACHE")
    monkeypatch.setenv("PYTHONPYCACHEPREFIX", "/elsewhere")
    assert pycache_env(unwritable) == {}                    # the user's own setting wins


def test_child_with_that_env_writes_bytecode_under_the_prefix(tmp_path, monkeypatch):
    """A real child process: with PYTHONDONTWRITEBYTECODE=1 inherited, the env above makes Python
    cache an imported module's bytecode under the prefix, not beside the source."""
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.delenv("PYTHONPYCACHEPREFIX", raising=False)
    monkeypatch.delenv("KERNLOOP_PYCACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    pkg = tmp_path / "src"
    pkg.mkdir()
    (pkg / "mod_x.py").write_text("X = 1\n")
    env = stripped_env(pycache_env(pkg))
    subprocess.run([sys.executable, "-c", "import mod_x"], cwd=pkg, env=env, check=True)
    assert not (pkg / "__pycache__").exists()
    assert list((tmp_path / "cache" / "kernloop" / "pycache").rglob("mod_x*.pyc"))
