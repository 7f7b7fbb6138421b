"""`orchestrator.py check`: one kernel file through the contract and the full checker, printed as a verdict table and one JSON line."""
from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path

from kernloop import contract
from kernloop.backends.resultline import Result
from kernloop.errors import ArgParser, KernLoopError
from kernloop.loop import terminal
from kernloop.spec import load_spec


class CheckError(KernLoopError):
    """Bad input to `check` (exit 2)."""


def parse_args(argv):
    p = ArgParser(prog="orchestrator.py check",
                                description="Check one kernel file against a spec: every shape, timed "
                                            "against the spec's baseline.")
    p.add_argument("--spec", required=True, help="spec YAML")
    p.add_argument("kernel", help="the kernel file (the spec's entry function, a CONFIG literal)")
    p.add_argument("--backend", default="auto", choices=["auto", "local", "synthetic", "nebius", "ray"],
                   help="auto = local if a CUDA GPU is visible, else synthetic")
    p.add_argument("--json", metavar="FILE", help="also write the verdict as one JSON object to FILE "
                                                  "(- prints it as the last line of stdout)")
    return p.parse_args(argv)


def _fmt_ms(v) -> str:
    return f"{v:.4f} ms" if isinstance(v, (int, float)) else "--"


def summary(spec, kernel: Path, res: dict, contract_reasons: list[str], champion: Path | None = None) -> dict:
    """The one JSON line: what a script needs from the verdict."""
    r = Result.of(res)
    cand, base = r.candidate_ms, r.champion_ms
    return {"kernel": str(kernel), "spec": str(spec.path), "correct": r.correct is True,
            "ok": r.ok, "stage": res.get("stage"), "error": res.get("error"),
            "contract": contract_reasons, "rel_l2": r.rel_l2,
            "tolerance": spec.tolerance, "candidate_ms": cand, "baseline_ms": base,
            "baseline": str(champion) if champion else "torch" if spec.torch_baseline else spec.baseline.name,
            "speedup": base / cand if cand and base else None, "peers": res.get("peers"),
            "backend": res.get("backend"), "synthetic": bool(res.get("synthetic")),
            "device": res.get("device"), "timing_model": res.get("timing_model")}


def table(spec, res: dict, line: dict) -> list[str]:
    tag = "SYNTHETIC " if line["synthetic"] else ""
    interp = res.get("mode") == "interpret" or line["synthetic"]
    shapes = spec.check_shapes if interp else spec.shapes
    rel = dict(line["rel_l2"])
    out = [f"{tag}check {line['kernel']} against {line['spec']}",
           f"  on {line['device'] or line['backend']}",
           f"  {'shape':<24} {'rel-L2':>10} {'tolerance':>10}  verdict"]
    failed = res.get("stage") in ("correctness", "load") and not line["correct"]
    labels = [spec.shape_label(s) for s in shapes] + [k for k in rel if k not in
                                                      {spec.shape_label(s) for s in shapes}]
    for lb in labels:
        v = rel.get(lb)
        if v is None:
            verdict = "FAIL" if failed and lb in rel else "not run"
        else:
            verdict = "ok" if v <= spec.tolerance else "FAIL"
        out.append(f"  {lb:<24} {('%.2e' % v) if v is not None else '--':>10} "
                   f"{spec.tolerance:>10g}  {verdict}")
    if line["candidate_ms"] or line["baseline_ms"]:
        kind = "modeled, not measured" if line["synthetic"] else "measured"
        sp = f" ({line['speedup']:.2f}x)" if line["speedup"] else ""
        out.append(f"  {tag}timing on {spec.shape_label(spec.shapes[0])}, {kind}:")
        out.append(f"    kernel {_fmt_ms(line['candidate_ms'])}{sp}, baseline {_fmt_ms(line['baseline_ms'])} "
                   f"({line['baseline']})")
        if line["timing_model"]:
            out.append(f"  {tag}timing model: {line['timing_model']}")
    for label, st in (line["peers"] or {}).items():
        out.append(f"  peer {label}: {_fmt_ms((st or {}).get('mean_ms'))}")
    if line["contract"]:
        out += [f"  contract: {r}" for r in line["contract"]]
    if line["error"]:
        out.append(f"  error ({line['stage']}): {line['error']}")
    out.append(f"{tag}verdict: {'CORRECT' if line['correct'] else 'NOT CORRECT'}")
    return out


def _kernel_file(path, role: str = "kernel") -> Path:
    k = Path(path)
    if not k.is_file():
        raise CheckError(f"{role} file {k} not found")
    return k


def make_check_backend(name: str):
    """The backend a check runs on, and why; a setup this machine cannot run is bad input
    (exit 2), found before anything runs."""
    from kernloop.backends.local import BackendError
    from kernloop.loop.factories import make_backend
    try:
        return make_backend(name)
    except (BackendError, ValueError) as e:   # no GPU for local, no nebius CLI, a bad setting
        raise CheckError(str(e)) from None


def run_check(spec_path: str, kernel: str, backend_name: str = "auto", champion: str | None = None,
              backend=None) -> tuple[dict, list[str]]:
    """The verdict on one kernel file against the spec's baseline (or `champion`, a kernel file
    held to the same contract): its JSON line and its table. `backend`: one the caller keeps
    warm between checks (the MCP server); else one is made from `backend_name` for this check."""
    spec = load_spec(spec_path)
    k = _kernel_file(kernel)
    champ = _kernel_file(champion, "champion") if champion else None
    if backend is not None:   # the caller's: it stays open for the next check
        return _check_on(spec, k, champ, backend, None)
    backend, why = make_check_backend(backend_name)
    try:
        return _check_on(spec, k, champ, backend, why)
    finally:   # a warm judge, a Ray connection (or the local cluster it started) end with the check
        backend.close()


def _check_on(spec, k: Path, champ: Path | None, backend, why: str | None) -> tuple[dict, list[str]]:
    from kernloop.loop.iteration import evaluate_judged
    judged = {"candidate": None, "champion": None}
    if champ is not None:   # a champion sent by a caller is a kernel like any other
        text = champ.read_bytes()
        bad = contract.capped(contract.check, text.decode("utf-8", "replace"), spec)
        if bad:
            raise CheckError(f"champion {champ}: {len(bad)} contract violation(s): {bad[0]}")
        judged["champion"] = hashlib.sha256(text).hexdigest()
    text = k.read_bytes()   # the bytes the contract judges are the bytes the judge may run
    reasons = contract.capped(contract.check, text.decode("utf-8", "replace"), spec)
    if reasons:   # the contract is part of the verdict: the checker would not run it either
        res = {"ok": False, "correct": False, "stage": "contract", "backend": backend.name,
               "error": f"{len(reasons)} contract violation(s)", "synthetic": backend.synthetic}
        line = summary(spec, k, res, reasons, champ)
        return line, table(spec, res, line)
    judged["candidate"] = hashlib.sha256(text).hexdigest()
    with tempfile.TemporaryDirectory(prefix="kernloop-check-") as work:
        res = evaluate_judged(backend, spec, k, champ if champ is not None else spec.baseline,
                              Path(work), judged)
    line = summary(spec, k, res, [], champ)
    head = [f"{'SYNTHETIC ' if backend.synthetic else ''}kernloop: {why}"] if why else []
    return line, [*head, *table(spec, res, line)]


def main(argv) -> int:
    """`check`; a CheckError or SpecError reaches the CLI (one error line, exit 2)."""
    args = parse_args(argv)
    line, rows = run_check(args.spec, args.kernel, args.backend)
    if args.json and args.json != "-":
        try:
            Path(args.json).write_text(json.dumps(line, sort_keys=True) + "\n", encoding="utf-8")
        except OSError as e:
            raise CheckError(f"--json {args.json}: cannot write it: {e.strerror or e}") from None
    say = terminal.printer()   # rows within 120 columns, broken at spaces
    for row in rows:
        say(row)
    if args.json == "-":   # for scripts: one JSON object, the last line
        print(json.dumps(line, sort_keys=True))
    return 0 if line["correct"] else 1
