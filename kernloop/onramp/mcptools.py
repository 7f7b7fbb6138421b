"""The MCP server's tools as plain functions over one workspace: JSON-able values in and out, a KernLoopError (one line) for every request that cannot be served.

Every kernel a tool receives goes through the same path as a loop candidate: the contract, then
the judge of the workspace's backend, in its contained workers. Nothing here runs a kernel itself.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from kernloop import page
from kernloop.errors import KernLoopError
from kernloop.onramp.mcpruns import Runs, run_argv
from kernloop.onramp import checkcmd
from kernloop.spec import SpecError, load_spec
from kernloop.standing.diagnosis import compulsory_bytes, of_result
from kernloop.trajectory import RunLog

NEW_TIMEOUT_S = 600.0   # `new` runs the user's reference a few times on the CPU
KERNEL_TEXT_MAX = 200_000   # the proposer's own size limit


class ToolError(KernLoopError):
    """A request a tool cannot serve; the server answers it as a tool error of one line."""


class Workspace:
    """What the tools share: the project folder, its runs folder, one backend kept warm between
    checks (made on first use), the runs started here, and the checks log."""

    def __init__(self, root: Path, runs_dir: Path, backend: str = "auto"):
        self.root, self.runs_dir, self.backend_name = Path(root).resolve(), Path(runs_dir).resolve(), backend
        self.runs = Runs(self.root, self.runs_dir)
        self._backend = None
        self.judging = threading.Lock()   # one job at a time through the kept backend

    def backend(self):
        if self._backend is None:
            self._backend, _ = checkcmd.make_check_backend(self.backend_name)
        return self._backend

    def close(self) -> None:
        self.runs.close()
        if self._backend is not None:
            self._backend.close()

    def spec_path(self, spec: str) -> Path:
        """A spec named by the caller: a YAML path, or a name under specs/."""
        for cand in (Path(spec), self.root / spec, self.root / "specs" / f"{spec}.yaml"):
            if cand.is_file():
                return cand.resolve()
        raise ToolError(f"spec {spec!r} not found (a YAML path, or a name in {self.root / 'specs'})")

    def kernel_file(self, path: str | None, text: str | None, role: str = "kernel") -> Path | None:
        """A kernel given as a file on the server's machine or as text (saved under the runs
        folder first, so every kernel judged stays on disk)."""
        if (path is None) == (text is None):
            if role == "champion" and path is None:
                return None
            raise ToolError(f"give the {role} as exactly one of {role}_path or {role}_text")
        if path is not None:
            p = Path(path) if Path(path).is_absolute() else self.root / path
            if not p.is_file():
                raise ToolError(f"{role} file {path} not found")
            return p.resolve()
        data = text.encode("utf-8", "replace")
        if len(data) > KERNEL_TEXT_MAX:
            raise ToolError(f"{role}_text is {len(data)} bytes; at most {KERNEL_TEXT_MAX} are judged")
        folder = self.runs_dir / "mcp-checks"
        folder.mkdir(parents=True, exist_ok=True)
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        out = folder / f"{stamp}-{role}-{hashlib.sha256(data).hexdigest()[:12]}.py"
        out.write_bytes(data)
        return out


# ---------------------------------------------------------------- targets

def list_specs(ws: Workspace) -> list[dict]:
    """The specs under specs/: name, shapes, dtype, baseline, tolerance (or why one does not load)."""
    out = []
    for f in sorted((ws.root / "specs").glob("*.yaml")):
        try:
            s = load_spec(f)
        except SpecError as e:
            out.append({"name": f.stem, "path": str(f), "error": str(e)})
            continue
        out.append({"name": s.name, "path": str(f), "dtype": s.dtype, "description": s.description,
                    "shapes": [s.shape_label(x) for x in s.shapes], "tolerance": s.tolerance,
                    "baseline": "torch" if s.torch_baseline else Path(s.baseline).name,
                    "peers": sorted(s.compare)})
    return out


def new_target(ws: Workspace, name: str, from_function: str | None = None, from_kernelbench: str | None = None,
               shape: str | None = None, dtype: str | None = None, force: bool = False) -> dict:
    """`new` as a child process (the reference is the user's code: it never runs in the server)."""
    if (from_function is None) == (from_kernelbench is None):
        raise ToolError("give exactly one of from_function (MODULE:FUNCTION) or from_kernelbench (a file)")
    argv = ["new", name] + (["--from", from_function] if from_function else ["--from-kernelbench", from_kernelbench])
    argv += (["--shape", shape] if shape else []) + (["--dtype", dtype] if dtype else [])
    argv += ["--force"] if force else []
    try:
        out = subprocess.run([sys.executable, "-m", "orchestrator", *argv], cwd=ws.root, capture_output=True,
                             text=True, timeout=NEW_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise ToolError(f"new {name}: still running after {NEW_TIMEOUT_S:g} s; stopped") from None
    if out.returncode != 0:
        err = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
        raise ToolError((err[-1][len("error: "):] if err else out.stderr.strip()[-300:]) or
                        f"new exited with {out.returncode}")
    return {"spec": str(ws.root / "specs" / f"{name}.yaml"), "lines": out.stdout.splitlines()}


# ---------------------------------------------------------------- the judge

def check(ws: Workspace, spec: str, kernel_path: str | None = None, kernel_text: str | None = None,
          champion_path: str | None = None, champion_text: str | None = None) -> dict:
    """`check`: the same verdict line and table as `kernloop check`, logged in runs/mcp-checks.jsonl."""
    sp = ws.spec_path(spec)
    k = ws.kernel_file(kernel_path, kernel_text)
    champ = ws.kernel_file(champion_path, champion_text, "champion")
    with ws.judging:
        line, rows = checkcmd.run_check(str(sp), str(k), champion=str(champ) if champ else None,
                                        backend=ws.backend())
    log_check(ws, line, k, champ)
    if line["contract"]:   # refused before it ran: a tool error that names the first reason
        n = len(line["contract"])
        raise ToolError(f"contract: {n} violation(s); the first: {line['contract'][0]}")
    return {**line, "table": rows}


def log_check(ws: Workspace, line: dict, kernel: Path, champion: Path | None) -> None:
    b = ws.backend()
    ws.runs_dir.mkdir(parents=True, exist_ok=True)
    RunLog(ws.runs_dir / "mcp-checks.jsonl", "mcp-checks", b.name, b.synthetic).append(
        "check", source="mcp", spec=line["spec"], kernel=str(kernel),
        kernel_sha256=hashlib.sha256(kernel.read_bytes()).hexdigest(),
        champion=str(champion) if champion else None, correct=line["correct"], ok=bool(line["ok"]),
        stage=line["stage"], error=line["error"], contract=line["contract"], rel_l2=line["rel_l2"] or {},
        candidate_ms=line["candidate_ms"], baseline_ms=line["baseline_ms"], speedup=line["speedup"],
        device=line["device"])


def _judge(ws: Workspace, spec, kernel: Path, champion: Path | None, backend=None, **kw) -> dict:
    """One job on a kernel the contract passed, held to the bytes it judged: on the kept backend,
    or on `backend`."""
    from kernloop import contract
    from kernloop.loop.iteration import evaluate_judged
    data = kernel.read_bytes()
    bad = contract.capped(contract.check, data.decode("utf-8", "replace"), spec)
    if bad:
        raise ToolError(f"{kernel.name}: {len(bad)} contract violation(s): {bad[0]}")
    judged = {"candidate": hashlib.sha256(data).hexdigest(), "champion": None}
    with ws.judging, tempfile.TemporaryDirectory(prefix="kernloop-mcp-") as work:
        return evaluate_judged(backend or ws.backend(), spec, kernel, champion, Path(work), judged, **kw)


def _gpu_backend(ws: Workspace, what: str):
    b = ws.backend()
    if b.synthetic or not b.times_peers:
        raise ToolError(f"{what} needs a CUDA GPU (the local backend); this server's backend is {b.name}"
                        f"{' (SYNTHETIC: modeled times)' if b.synthetic else ''}")
    return b


def peers(ws: Workspace, spec: str) -> dict:
    """The spec's peers (torch eager, torch.compile, Liger, QuACK, ...) timed beside its baseline."""
    s = load_spec(ws.spec_path(spec))
    _gpu_backend(ws, "timing peers")
    if s.torch_baseline:   # the reference against itself, the peers beside it
        with ws.judging, tempfile.TemporaryDirectory(prefix="kernloop-mcp-") as work:
            res = ws.backend().evaluate(s, None, None, Path(work), peers=True)
    else:
        res = _judge(ws, s, Path(s.baseline), Path(s.baseline), peers=True)
    return {"spec": s.name, "device": res.get("device"), "baseline_ms": (res.get("champion") or {}).get("mean_ms"),
            "peers": res.get("peers"), "error": res.get("error")}


def profile(ws: Workspace, spec: str, kernel_path: str | None = None, kernel_text: str | None = None) -> dict:
    """Registers, occupancy and ncu counters of a kernel, with the findings the page shows."""
    from kernloop.backends.local import LocalBackend
    s = load_spec(ws.spec_path(spec))
    b = _gpu_backend(ws, "a profile")
    k = ws.kernel_file(kernel_path, kernel_text)
    cold = LocalBackend(device=b.device, judge="cold")   # a cold job takes its profile inside it
    res = _judge(ws, s, k, s.baseline, backend=cold)
    return {"kernel": str(k), "profile": (res.get("profile") or {}).get("candidate"),
            "findings": of_result(res), "error": res.get("error")}


def roofline(ws: Workspace, spec: str, kernel_path: str | None = None, kernel_text: str | None = None) -> dict:
    """The floor of a spec (compulsory bytes, FLOPs; the device's measured ceilings where the
    backend times on a GPU) and, for a kernel, how close it comes."""
    s = load_spec(ws.spec_path(spec))
    flops, nbytes = s.cost_of(s.shapes[0])
    out = {"spec": s.name, "shape": s.shape_label(s.shapes[0]), "flops": flops, "bytes": nbytes,
           "compulsory": compulsory_bytes(s)}
    if kernel_path is None and kernel_text is None:
        return out
    k = ws.kernel_file(kernel_path, kernel_text)
    res = _judge(ws, s, k, s.baseline)
    out.update(kernel=str(k), synthetic=bool(res.get("synthetic")), ceilings=res.get("ceilings"),
               roofline=(res.get("roofline") or {}).get("candidate"), error=res.get("error"))
    return out


# ---------------------------------------------------------------- runs

def run(ws: Workspace, spec: str, iterations: int | None = None, backend: str | None = None,
        proposer: str = "auto", parallel: int | None = None, seed: int = 0) -> dict:
    """Start a loop run in the background; returns its folder as soon as it exists."""
    sp = ws.spec_path(spec)
    s = ws.runs.start(run_argv(str(sp), ws.runs_dir, backend or ws.backend_name, proposer, iterations,
                               parallel, seed))
    return {"run_dir": str(s.run_dir), "page": str(s.run_dir / page.PAGE_NAME), "output": str(s.output)}


def status(ws: Workspace, run_dir: str) -> dict:
    """A run's iterations and champion so far, read from its log."""
    d = ws.runs.folder(run_dir)
    v = page.summarize_run(d)
    keep = ("run_id", "spec", "backend", "synthetic", "proposer", "done", "planned", "base_ms", "champ_ms",
            "champ_id", "speedup", "stopped", "stop_reason", "live")
    return {"run_dir": str(d), **{k: v[k] for k in keep}, "ended": bool(v["stopped"]),
            **ws.runs.process(d)}


def stop(ws: Workspace, run_dir: str) -> dict:
    d = ws.runs.folder(run_dir)
    return {**ws.runs.stop(d), **status(ws, str(d))}


def leaderboard(ws: Workspace) -> list[dict]:
    """The champion of every run under the runs folder, fastest speedup first; synthetic runs
    are marked and never ranked among measured ones."""
    rows = []
    for d in page.find_runs(ws.runs_dir):
        try:
            v = page.summarize_run(d)
        except Exception as e:   # noqa: BLE001 - one broken folder must not hide the others
            rows.append({"run_dir": str(d), "error": f"{type(e).__name__}: {e}"})
            continue
        rows.append({"run_dir": str(d), "spec": v["spec"], "synthetic": v["synthetic"],
                     "champ_id": v["champ_id"], "champ_ms": v["champ_ms"], "speedup": v["speedup"],
                     "stopped": v["stopped"], "device": v["device"]})
    return sorted(rows, key=lambda r: (bool(r.get("synthetic")), "error" in r, -(r.get("speedup") or 0)))


def page_of(ws: Workspace, run_dir: str) -> dict:
    """The path of a run's page, rendered now from its log."""
    d = ws.runs.folder(run_dir)
    return {"page": str(page.render_run(d))}
