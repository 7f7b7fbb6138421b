"""Factories of the loop's parts chosen on the command line: here the backend (local, synthetic, Nebius)."""
from __future__ import annotations

from backends import Backend, BackendError, LocalBackend, SyntheticBackend, cuda_visible
from nebius_jobs import NebiusBackend


def make_backend(name: str, seed: int = 0) -> tuple[Backend, str]:
    """Build the backend named on the command line; 'auto' picks local or synthetic and says why."""
    if name == "auto":
        ok, why = cuda_visible()
        if ok:
            name, reason = "local", f"auto: {why}, using the local backend"
        else:
            name, reason = "synthetic", f"auto: {why}, using the SYNTHETIC backend (timing modeled)"
    else:
        reason = f"backend chosen on the command line: {name}"
    if name == "local":
        ok, why = cuda_visible()
        if not ok:
            raise BackendError(f"--backend local needs a CUDA GPU ({why}); "
                               "use --backend synthetic or nebius")
        return LocalBackend(device=why.split(": ", 1)[-1]), reason
    if name == "synthetic":
        return SyntheticBackend(seed=seed), reason
    if name == "nebius":
        return NebiusBackend.from_env(), reason
    raise BackendError(f"unknown backend {name!r} (auto, local, synthetic, nebius)")
