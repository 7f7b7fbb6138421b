"""Local backend environment: bytecode caching for read-only torch installs."""
from backends import pycache_env


def test_pycache_prefix_only_where_torch_cannot_keep_its_bytecode(tmp_path, monkeypatch):
    monkeypatch.delenv("PYTHONPYCACHEPREFIX", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    writable = tmp_path / "torch"
    writable.mkdir()
    assert pycache_env(writable) == {}                      # bytecode lands in torch's __pycache__
    unwritable = tmp_path / "no_such_parent" / "torch"      # (a read-only path; root writes anywhere)
    assert pycache_env(unwritable) == {"PYTHONPYCACHEPREFIX": str(tmp_path / "cache" / "kernloop" / "pycache")}
    monkeypatch.setenv("PYTHONPYCACHEPREFIX", "/elsewhere")
    assert pycache_env(unwritable) == {}                    # the user's own setting wins
