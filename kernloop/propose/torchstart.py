"""A torch-only start (`baseline: torch`): the champion text shown to the proposer, and the
tuner's first kernel (a family template) or the one line saying there is none."""
from __future__ import annotations

from kernloop.errors import KernLoopError

NO_TEMPLATE_HINT = ("give an LLM (KERNLOOP_LLM_BASE_URL or KERNLOOP_LLM_API_KEY, --proposer llm) to "
                    "write the first Triton version, or a Triton baseline file in the spec's "
                    "`baseline:` field")


class NoStart(KernLoopError):
    """The tuner cannot start a `baseline: torch` spec: its reference is in no template family."""

    def __init__(self, msg: str, ran: str):
        super().__init__(msg)
        self.ran = ran


def template(spec):
    """The family template the tuner starts a `baseline: torch` spec from (families.Start);
    NoStart, with what the reference runs and what to do, when no family matches."""
    from kernloop.families.template import NoTemplate, start   # torch: imported when needed
    try:
        return start(spec)
    except NoTemplate as e:
        raise NoStart(f"{e}; {NO_TEMPLATE_HINT}", e.ran) from None


def champion_text(spec) -> str:
    """The torch reference as a file the proposer reads as its champion. The checker never runs
    this file: it times the spec's reference itself (`--champion-torch`). Where the reference is
    in a template family, the template the tuner would start from follows, as a string."""
    args = ", ".join(spec.input_names)
    head = (f'"""baseline: torch. The champion is the spec\'s reference run by torch in '
            f'{spec.dtype} (timed by the checker).\n\nWrite the first Triton kernel for it: '
            f'a file with @triton.jit kernel(s), CONFIG and the entry {spec.entry}({args}).\n"""\n')
    if spec.reference_source is None:
        body = (f"import math\nimport torch\nimport torch.nn.functional as F\n\n\n"
                f"def {spec.entry}({args}):\n    return {spec.reference}\n")
    else:
        body = f"# ---- the reference file {spec.reference.split(':')[0]}\n{spec.reference_source.rstrip()}\n"
        if spec.reference_fn != spec.entry:
            body += f"\n\ndef {spec.entry}({args}):\n    return {spec.reference_fn}({args})\n"
    return head + body + template_section(spec)


def template_section(spec) -> str:
    """KernLoop's family template for the reference, filled in, as a string constant: a correct
    start the proposer may take or leave ("" when no family fits)."""
    try:
        begin = template(spec)
    except NoStart:
        return ""
    if "'''" in begin.code:   # cannot be held in the raw string below
        return ""
    return (f"\n\n# ---- KernLoop's {begin.match.family} template for this reference ({begin.match.label}):\n"
            "# ---- correct on the spec's shapes; the built-in tuner would start here. Start from it or leave it.\n"
            f"FAMILY_TEMPLATE = r'''\n{begin.code}'''\n")
