"""Every bad input a new user may hit, run through the real CLI: one `error:` line, the exit
status, no traceback, no run folder for what can be checked before one. The table in
docs/bad-inputs.md is generated from CASES (`python tests/test_bad_inputs.py` prints it) and must match.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from columns import too_wide, unwrap  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MATMUL = ROOT / "specs" / "matmul.yaml"
BASELINE = ROOT / "specs" / "matmul_naive.py"
BEGIN, END = "<!-- bad-inputs:begin -->", "<!-- bad-inputs:end -->"


@dataclass
class Case:
    what: str                      # the input, as the table's first column says it
    args: list                     # CLI args; "{spec}" / "{out}" are filled in
    message: str                   # a part of the one error line (the table's second column)
    code: int = 2
    spec_edit: tuple | None = None   # (old, new) applied to a copy of specs/matmul.yaml
    baseline_edit: tuple | None = None
    env: dict = field(default_factory=dict)
    run_folder: bool = False       # a run folder is expected (the check needed a job)


def _spec(old, new):
    return (old, new)


CASES = [
    Case("`--spec` names no file", ["--spec", "specs/nope.yaml"],
         "spec file not found: specs/nope.yaml"),
    Case("a spec that is not a mapping", ["--spec", "tests/fixtures/a_list.yaml"],
         "a_list.yaml: field '(top level)': must be a mapping of fields"),
    Case("a YAML syntax error", ["--spec", "{spec}"],
         "s.yaml: line 4, column 12: not valid YAML: while parsing a flow sequence",
         spec_edit=_spec("name: matmul", "name: [matmul")),
    Case("a typo in `reference:` (`a @ bb`)", ["--spec", "{spec}"],
         "field 'reference': unknown name 'bb'", spec_edit=_spec('reference: "a @ b"', 'reference: "a @ bb"')),
    Case("`reference:` names no torch function (`torch.matmull`)", ["--spec", "{spec}"],
         "field 'reference': torch.matmull does not exist",
         spec_edit=_spec('reference: "a @ b"', 'reference: "torch.matmull(a, b)"')),
    Case("unknown top-level field (`tolerence:`)", ["--spec", "{spec}"],
         "field 'tolerence': unknown field", spec_edit=_spec("tolerance:", "tolerence:")),
    Case("unknown nested field (`loop: {iteratons: 4}`)", ["--spec", "{spec}"],
         "field 'loop.iteratons': unknown field", spec_edit=_spec("{iterations: 30,", "{iteratons: 4,")),
    Case("`timing: {rep: 50}`", ["--spec", "{spec}"], "field 'timing.rep': unknown field",
         spec_edit=_spec("reps: 50", "rep: 50")),
    Case("`inputs[0].dtyp`", ["--spec", "{spec}"], "field 'inputs[0].dtyp': unknown field",
         spec_edit=_spec("{name: a, shape: [M, K]}", "{name: a, shape: [M, K], dtyp: float16}")),
    Case("`output.dtyp`", ["--spec", "{spec}"], "field 'output.dtyp': unknown field",
         spec_edit=_spec("output: {shape: [M, N]}", "output: {shape: [M, N], dtyp: float16}")),
    Case("`tolerance: {atol: ...}`", ["--spec", "{spec}"], "field 'tolerance.atol': unknown field",
         spec_edit=_spec("{rel_l2: 0.01}", "{rel_l2: 0.01, atol: 0.001}")),
    Case("`cost: {flop: ...}`", ["--spec", "{spec}"], "field 'cost.flop': unknown field",
         spec_edit=_spec('flops: "2*M*N*K"', 'flop: "2*M*N*K"')),
    Case("`scale: big`", ["--spec", "{spec}"], "field 'inputs[0].scale': must be a positive number",
         spec_edit=_spec("{name: a, shape: [M, K]}", "{name: a, shape: [M, K], scale: big}")),
    Case("`loop: {sigma: \"two\"}`", ["--spec", "{spec}"], "field 'loop.sigma': must be a number",
         spec_edit=_spec("patience: 0}", 'patience: 0, sigma: "two"}')),
    Case("a baseline with a syntax error", ["--spec", "{spec}"],
         "matmul_naive.py breaks the kernel contract: syntax error at line 44",
         baseline_edit=("def matmul(a, b):", "def matmul(a, b)")),
    Case("a baseline that breaks the contract", ["--spec", "{spec}"],
         "matmul_naive.py breaks the kernel contract: ",
         baseline_edit=("    cfg = CONFIG\n", "    print(a)\n    cfg = CONFIG\n")),
    Case("an incorrect baseline (a checker job runs)", ["--spec", "{spec}", "--out", "{out}"],
         "matmul_naive.py does not pass the checker: ", run_folder=True,
         baseline_edit=("(offs_k[None, :] < k_left)", "(offs_k[None, :] < k_left - 1)")),
    Case("`--patience -1`", ["--spec", "{spec}", "--patience", "-1"], "--patience must be >= 0"),
    Case("`--iterations -1`", ["--spec", "{spec}", "--iterations", "-1"], "--iterations must be >= 0"),
    Case("`--max-minutes 0`", ["--spec", "{spec}", "--max-minutes", "0"], "--max-minutes must be > 0"),
    Case("`--seed -1`", ["--spec", "{spec}", "--seed", "-1"], "--seed must be >= 0"),
    Case("`--iterations many`", ["--spec", "{spec}", "--iterations", "many"],
         "argument --iterations: invalid int value: 'many'"),
    Case("neither `--spec` nor `--resume`", [], "one of --spec or --resume is required"),
    Case("`--resume` of a folder without run.jsonl", ["--resume", "{out}"], "no run.jsonl in"),
    Case("`--out` under a file", ["--spec", "{spec}", "--out", "{out}/file/sub"],
         "cannot write the run folder under"),
    Case("`KERNLOOP_CHECK_TIMEOUT_S=abc`", ["--spec", "{spec}"],
         "environment variable KERNLOOP_CHECK_TIMEOUT_S='abc': expected a number in (0, 86400]",
         env={"KERNLOOP_CHECK_TIMEOUT_S": "abc"}),
    Case("`KERNLOOP_LLM_TEMPERATURE=hot`", ["--spec", "{spec}"],
         "environment variable KERNLOOP_LLM_TEMPERATURE='hot': expected a number in [0, 2] or 'none'",
         env={"KERNLOOP_LLM_TEMPERATURE": "hot"}),
    Case("`KERNLOOP_NEBIUS_CHECK_MODE=cpu`", ["--spec", "{spec}"],
         "environment variable KERNLOOP_NEBIUS_CHECK_MODE='cpu': expected one of gpu, interpret",
         env={"KERNLOOP_NEBIUS_CHECK_MODE": "cpu"}),
    Case("`--backend nebius` without the `nebius` CLI", ["--spec", "{spec}", "--backend", "nebius"],
         "--backend nebius: the nebius CLI was not found", env={"KERNLOOP_NEBIUS_CLI": "kernloop-no-such-cli"}),
    Case("`--proposer llm` without an endpoint", ["--spec", "{spec}", "--proposer", "llm"],
         "--proposer llm needs KERNLOOP_LLM_API_KEY or KERNLOOP_LLM_BASE_URL"),
]


def readme_rows() -> list[str]:
    head = ["| input | the one line on stderr (contains) | exit |", "|---|---|---|"]
    return head + [f"| {c.what} | `error: ... {c.message} ...` | {c.code} |"
                   for c in CASES]


def _clean_env(extra: dict) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KERNLOOP_", "TAVILY", "NVIDIA_API"))}
    return {**env, **extra}


def _prepare(case: Case, tmp: Path) -> dict:
    spec_text = MATMUL.read_text()
    base_text = BASELINE.read_text()
    for text_name, edit in (("spec", case.spec_edit), ("base", case.baseline_edit)):
        if edit:
            old, new = edit
            src = spec_text if text_name == "spec" else base_text
            assert old in src, f"edit target {old!r} not in the shipped {text_name}"
            if text_name == "spec":
                spec_text = src.replace(old, new, 1)
            else:
                base_text = src.replace(old, new, 1)
    (tmp / "matmul_naive.py").write_text(base_text)
    (tmp / "s.yaml").write_text(spec_text)
    out = tmp / "out"
    out.mkdir()
    (out / "file").write_text("x")
    return {"spec": str(tmp / "s.yaml"), "out": str(out)}


@pytest.mark.parametrize("case", CASES, ids=[c.what for c in CASES])
def test_bad_input_gives_one_error_line_and_its_exit_code(case, tmp_path):
    where = _prepare(case, tmp_path)
    args = [a.format(**where) for a in case.args]
    p = subprocess.run([sys.executable, str(ROOT / "orchestrator.py"), *args], cwd=ROOT,
                       capture_output=True, text=True, timeout=300, env=_clean_env(case.env))
    errors = [ln for ln in unwrap(p.stderr) if ln.startswith("error:")]
    assert not too_wide(p.stderr.splitlines()), p.stderr   # within 120 columns, a lone path aside
    assert p.returncode == case.code, p.stdout + p.stderr
    assert len(errors) == 1 and case.message in errors[0], p.stderr
    assert "Traceback" not in p.stderr
    runs = [d for d in Path(where["out"]).iterdir() if d.is_dir()]
    if not case.run_folder:
        assert runs == [], "a run folder was left behind for an input checkable before it"
        return
    (run,) = runs   # the incorrect baseline: the run ends with its reason, resumable never
    end = json.loads((run / "run.jsonl").read_text().splitlines()[-1])
    assert end["event"] == "run_end" and end["stopped"] == "baseline_failed"
    assert "rel-L2" in end["stop_reason"] and end["iterations_done"] == 0


def test_the_bad_input_table_is_this_tests_cases():
    readme = (ROOT / "docs" / "bad-inputs.md").read_text()
    assert BEGIN in readme and END in readme
    block = readme.split(BEGIN)[1].split(END)[0]
    rows = [ln for ln in block.splitlines() if ln.startswith("|")]
    assert rows == readme_rows()
    assert len(set(c.what for c in CASES)) == len(CASES)
    assert all(re.search(r"\| [02] \|$", r) for r in rows[2:])


if __name__ == "__main__":
    print("\n".join([BEGIN, *readme_rows(), END]))
