"""A torch-only start (`baseline: torch`): the champion text shown to the proposer, and why the tuner cannot start one."""
from __future__ import annotations

TUNER_REFUSAL = ("the spec says `baseline: torch`: there is no Triton kernel and no CONFIG for the "
                 "built-in tuner to tune. Give an LLM (KERNLOOP_LLM_BASE_URL or KERNLOOP_LLM_API_KEY, "
                 "--proposer llm) to write the first Triton version, or a Triton baseline file in "
                 "the spec's `baseline:` field")


def champion_text(spec) -> str:
    """The torch reference as a file the proposer reads as its champion. The checker never runs
    this file: it times the spec's reference itself (`--champion-torch`)."""
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
    return head + body
