"""Factories of the loop's parts chosen on the command line: the backend and the proposer."""
from __future__ import annotations

from kernloop import needs
from kernloop.errors import KernLoopError
from kernloop.backends.local import Backend, BackendError, LocalBackend, cuda_visible
from kernloop.backends.synthetic import SyntheticBackend
from kernloop.backends.nebius_cli import CliMissing
from nebius_jobs import NebiusBackend
from kernloop.propose import torchstart
from kernloop.propose.tuner import Tuner


class ProposerError(KernLoopError):
    """The proposer asked for on the command line cannot be built; the CLI prints one line."""


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
        backend = NebiusBackend.from_env()
        try:
            backend.preflight()   # found before a run folder exists, reported once (exit 2)
        except CliMissing as e:
            raise BackendError(f"--backend nebius: {e}") from None
        return backend, reason
    if name == "ray":   # Ray is an optional install: imported only when asked for
        from kernloop.backends.ray import connect
        return connect(seed=seed)   # its line says which cluster (or that it started one)
    raise BackendError(f"unknown backend {name!r} (auto, local, synthetic, nebius, ray)")


def make_proposer(kind: str, spec, seed: int):
    """(proposer, note for the log). The LLM is used only when an endpoint is configured."""
    llm = None
    if kind in ("auto", "llm"):
        try:
            import nemotron_client
        except ImportError as e:
            if kind == "llm":
                raise ProposerError(f"the LLM proposer is unavailable: {e}") from None
        else:
            wanted = kind == "llm" or nemotron_client.config_from_env() is not None   # an LLM run
            if missing := needs.errors(needs.Found(openai=needs.installed("openai")), False, wanted):
                raise ProposerError(missing[0])   # one line naming what to pip install, never a traceback
            llm = nemotron_client.from_env()   # settings.SettingsError names a bad variable
        if kind == "llm" and llm is None:
            raise ProposerError("--proposer llm needs KERNLOOP_LLM_API_KEY or KERNLOOP_LLM_BASE_URL")
    if llm is not None:
        return llm, f"LLM proposer: {llm.describe().get('model')} at {llm.describe().get('endpoint_host')}"
    why = ": no LLM endpoint (KERNLOOP_LLM_API_KEY, KERNLOOP_LLM_BASE_URL unset)" if kind == "auto" \
        else " (rewrites CONFIG only)"
    if spec.torch_baseline:   # the tuner starts from a family template, or stops before any run folder
        begin = torchstart.template(spec)
        return (Tuner(begin.space, seed=seed, start=begin),
                f"built-in tuner{why}; starts from the {begin.match.family} template ({begin.match.label})")
    try:   # a Triton baseline whose reference is in a family: the template is a second lineage
        also = torchstart.template(spec)
    except torchstart.NoStart:
        also = None
    if also is None:
        return Tuner(spec.search_space, seed=seed), "built-in tuner" + why
    return (Tuner(spec.search_space, seed=seed, also=also, root=spec.baseline.read_text()),
            f"built-in tuner{why}; tunes the baseline and, as a second lineage, the {also.match.family} "
            f"template ({also.match.label})")
