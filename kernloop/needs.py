"""What a run needs that is not installed, each said in one line: a required package stops the run with what to `pip install` (exit 2), a missing optional one says what it disables and the run goes on."""
from __future__ import annotations

import importlib.machinery
import importlib.util
import os
from dataclasses import dataclass

# module -> (pip package, what a run needs it for / what it disables when missing)
TRITON = ("triton", "KernLoop's kernels are Triton kernels: the checker runs them on the GPU, or in "
                    "Triton's interpreter on the CPU")
OPENAI = ("openai", "the LLM proposer needs it: KERNLOOP_LLM_API_KEY or KERNLOOP_LLM_BASE_URL is set")
TAVILY = ("tavily-python", "research uses the shipped notes")
PEER_LIBS = {"liger": ("liger_kernel", "liger-kernel"), "quack": ("quack", "quack-kernels")}


@dataclass(frozen=True)
class Found:
    """Which of the packages a run may need are installed (probed once, then decided on purely)."""
    triton: bool = True
    openai: bool = True
    tavily: bool = True
    liger: bool = True
    quack: bool = True


def installed(module: str, site_dirs=()) -> bool:
    """Whether `module` can be found (without importing it): on sys.path and its import hooks,
    else in one of `site_dirs` (KERNLOOP_SITE's folders, which the checker adds)."""
    try:
        if importlib.util.find_spec(module) is not None:
            return True
    except (ImportError, ValueError):   # a hook refuses it, or a broken half-import
        return False
    dirs = [d for d in site_dirs if d and os.path.isdir(d)]
    return bool(dirs) and importlib.machinery.PathFinder.find_spec(module, dirs) is not None


def probe(site: str | None = None) -> Found:
    """The installed packages of this interpreter (`site`: KERNLOOP_SITE's value)."""
    dirs = (site or "").split(os.pathsep)
    return Found(triton=installed("triton"), openai=installed("openai"), tavily=installed("tavily"),
                 liger=installed(PEER_LIBS["liger"][0], dirs), quack=installed(PEER_LIBS["quack"][0], dirs))


def errors(found: Found, needs_triton: bool, llm: bool) -> list[str]:
    """The required packages missing, each as the one `error:` line's text (without `error: `).
    `needs_triton`: the checker runs on this machine (local, synthetic); `llm`: an LLM run. Pure."""
    out = []
    if needs_triton and not found.triton:
        out.append(f"triton is not installed: pip install {TRITON[0]} ({TRITON[1]})")
    if llm and not found.openai:
        out.append(f"openai is not installed: pip install {OPENAI[0]} ({OPENAI[1]})")
    return out


def notes(found: Found, llm: bool, tavily_key: bool, libs_named: set, times_peers: bool) -> list[str]:
    """One line per optional package missing that this run would use, saying what that disables:
    tavily-python for an LLM run with a Tavily key, Liger / QuACK for a spec whose peers name
    them on a backend that times peers here. Pure."""
    out = []
    if llm and tavily_key and not found.tavily:
        out.append(f"{TAVILY[0]} is not installed: {TAVILY[1]} (pip install {TAVILY[0]})")
    for lib in sorted(libs_named & set(PEER_LIBS)):
        if times_peers and not getattr(found, lib):
            pkg = PEER_LIBS[lib][1]
            out.append(f"{pkg} is not installed: the {lib} peer is not timed (pip install {pkg})")
    return out


def libs_named(compare: dict | None) -> set:
    """The optional peer libraries (`liger`, `quack`) a spec's `compare:` expressions name. Pure."""
    import ast
    names = set()
    for expr in (compare or {}).values():
        try:
            names |= {n.id for n in ast.walk(ast.parse(str(expr), mode="eval")) if isinstance(n, ast.Name)}
        except SyntaxError:
            continue   # the checker names a bad expression as a skipped peer
    return names & set(PEER_LIBS)
