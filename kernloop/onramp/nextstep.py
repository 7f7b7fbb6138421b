"""What `new` prints after writing a spec: the paths, and only commands that work as configured.

A `baseline: torch` spec runs with no LLM only when the built-in tuner has a family template for
its reference; otherwise the last line says so and names the variables that bring an LLM.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

from kernloop.propose import torchstart
from kernloop.spec import load_spec


def llm_configured() -> bool:
    import nemotron_client   # its settings are the one place the LLM variables are read
    try:
        return nemotron_client.config_from_env() is not None
    except ValueError:   # a malformed variable: the run will say which; no LLM as things are
        return False


def lines(path: Path, reference_file: Path | None) -> list[str]:
    """Each path and command stands alone on its line, to copy whatever its length (#47)."""
    out = ["wrote the spec and its reference:" if reference_file else "wrote the spec:", f"  {path}"]
    if reference_file:
        out.append(f"  {reference_file}")
    spec = load_spec(path)
    why = None
    if spec.torch_baseline and not llm_configured():
        try:
            begin = torchstart.template(spec)
        except torchstart.NoStart as e:
            why = e
        else:
            out.append(f"the built-in tuner starts from its {begin.match.family} template "
                       f"({begin.match.label})")
    names = ", ".join(spec.input_names)   # within the width: a long list of inputs goes on, indented
    out += textwrap.wrap(f"a kernel file for it defines {spec.entry}({names}) and a CONFIG literal "
                         "(docs/contract.md)", 120, subsequent_indent="  ", break_on_hyphens=False)
    out += ["next, check a kernel against it" + ("" if why else ", or run the loop on it") + ":",
            f"  python orchestrator.py check --spec {path} KERNEL.py"]
    if why:   # the last lines say why there is no run command, and what brings one
        from kernloop.families.classify import FAMILIES
        for line in (f"the reference runs: {why.ran}", f"the template families: {', '.join(FAMILIES)}"):
            out += textwrap.wrap(line, 120, subsequent_indent="  ", break_on_hyphens=False)
        return out + ["an LLM can run it: set KERNLOOP_LLM_BASE_URL or KERNLOOP_LLM_API_KEY",
                      "no run command: the built-in tuner has no template for this reference"]
    return out + [f"  python orchestrator.py --spec {path}"]
