"""Backends: bytecode caching for checker children; one GPU per job under --parallel; the
capabilities each declares on the base Backend (never probed for)."""
import subprocess
import sys
from pathlib import Path

from kernloop.backends.local import pycache_env
from kernloop.backends.sandbox import stripped_env


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


# ---------------------------------------------------------------- one GPU per job (--parallel)

def test_gpu_slots_are_the_visible_devices():
    from kernloop.backends.local import gpu_slots
    assert gpu_slots(4, None) == ["0", "1", "2", "3"]
    assert gpu_slots(2, "5,7") == ["5", "7"]            # the user's own pinning is kept
    assert gpu_slots(1, "GPU-1a2b, GPU-3c4d") == ["GPU-1a2b"]
    assert gpu_slots(0, None) == []


def test_candidate_and_champion_are_timed_in_one_process_on_one_gpu(tmp_path):
    """The rule for several GPUs: a job is ONE checker process holding both the candidate and
    its champion, pinned to ONE GPU; so the two are never timed on different GPUs."""
    from kernloop.backends.local import LocalBackend, stage_job
    from kernloop.spec import load_spec
    spec = load_spec(Path(__file__).resolve().parent.parent / "specs" / "matmul.yaml")
    b = LocalBackend(device="test")
    f = stage_job(spec, spec.baseline, spec.baseline, tmp_path / "job")
    cmd, env = b.command(f, "3")
    assert env["CUDA_VISIBLE_DEVICES"] == "3"
    assert cmd[cmd.index("--candidate") + 1] == str(f["candidate"])
    assert cmd[cmd.index("--champion") + 1] == str(f["champion"])
    assert "CUDA_VISIBLE_DEVICES" not in b.command(f, None)[1]   # --parallel 1: as before
    res = b.evaluate(spec, spec.baseline, spec.baseline, tmp_path / "job2", slot="3")
    assert res["backend_meta"]["cuda_visible_devices"] == "3"     # recorded with the result


# ---------------------------------------------------------------- capabilities, declared on the base

def test_the_base_declares_a_backend_that_can_do_nothing_more(tmp_path):
    """Every capability the loop reads has its default on Backend: one job at a time, no peers,
    no digests, no second look after the decision, nothing to say, stop or close."""
    from kernloop.backends.local import Backend
    b = Backend()
    assert (b.times_peers, b.takes_digests, b.sight_after) == (False, False, False)
    assert b.sight_cache is None and b.say is None
    assert b.slots(4) == ["worker0"] and b.landed() == []
    assert b.second_look(None, tmp_path / "k.py", "it0001", tmp_path, {}) is False
    assert b.interrupt() is None and b.close() is None


def test_each_backend_overrides_what_it_has():
    from types import SimpleNamespace
    import nebius_jobs as nj
    from kernloop.backends.local import Backend, LocalBackend
    from kernloop.backends.synthetic import SyntheticBackend
    from kernloop.backends.ray import RayBackend
    cold, warm = LocalBackend(judge="cold", mode="interpret"), LocalBackend(judge="warm", mode="interpret")
    assert cold.times_peers and cold.takes_digests and not cold.sight_after
    assert warm.sight_after and warm.landed() == []   # no judge started, nothing asked
    synth = SyntheticBackend()
    assert synth.takes_digests and not synth.times_peers and not synth.sight_after and synth.say is None
    fake_ray = SimpleNamespace(remote=lambda fn: SimpleNamespace(options=lambda **kw: None))
    summary = {"gpus": 1, "nodes": 1}
    assert RayBackend(fake_ray, "gpu", None, summary, {}).times_peers
    ray_synth = RayBackend(fake_ray, "synthetic", None, summary, {})
    assert not ray_synth.times_peers and not ray_synth.takes_digests and ray_synth.slots(2) == ["ray0", "ray1"]
    gpu = nj.NebiusBackend(nj.settings_from_env({}), say=lambda m: None)
    plain = nj.NebiusBackend(nj.settings_from_env({"KERNLOOP_NEBIUS_CHECK_MODE": "interpret"}))
    assert gpu.times_peers and not plain.times_peers and plain.say is not None   # Nebius speaks
    assert not gpu.sight_after and gpu.landed() == []
    assert all(issubclass(c, Backend) for c in (LocalBackend, SyntheticBackend, RayBackend, nj.NebiusBackend))


def test_the_loop_reads_capabilities_and_never_probes_a_backend_for_them():
    """`hasattr(backend, ...)` / `getattr(backend, "...", default)` is gone: a new capability is
    declared on Backend (kernloop/backends/local.py) with its default, never probed for."""
    import re
    root = Path(__file__).resolve().parent.parent
    probe = re.compile(r"\b(?:hasattr|getattr)\(\s*(?:self\.)?backend\b")
    files = [root / "orchestrator.py", root / "nebius_jobs.py", *sorted((root / "kernloop").rglob("*.py"))]
    assert [f"{p.relative_to(root)}:{i}" for p in files
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if probe.search(line)] == []
