"""Backends run the checker on (candidate, champion) and return its parsed result line.

Every backend returns a result dict (the checker's result line plus `backend`, `synthetic` and
`backend_meta`) and never raises for a candidate's fault: a crash, a timeout or a missing result
line becomes a clean failed result with the tail of stderr.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Callable

import checker
from checker import ship
from kernloop import settings
from kernloop.backends import gpulock
from kernloop.errors import KernLoopError
from kernloop.backends.resultline import ResultLineError, parse_result_line, validate_result
from kernloop.backends.sandbox import run_child

SYNTHETIC_DEVICE = ("SYNTHETIC: modeled NVIDIA H200 (timing from perfmodel.py; "
                    "correctness by the Triton interpreter on the CPU)")


class BackendError(KernLoopError):
    """A backend that cannot be built or configured here; the CLI prints it as one error line."""


def failed_result(backend: str, synthetic: bool, stage: str, error: str, **meta) -> dict:
    return {"ok": False, "stage": stage, "error": error, "correct": None, "rel_l2": {},
            "candidate": None, "champion": None, "roofline": None, "backend": backend,
            "synthetic": synthetic, "backend_meta": meta}


def stage_job(spec, candidate: Path | None, champion: Path | None, workdir: Path,
              checker: bool = True) -> dict[str, Path]:
    """Copy what one checker run needs into `workdir`; return the (absolute) paths by role.
    A side given as None is the spec's reference run in torch (`baseline: torch`): it has no
    file, and `side_args` says so to the checker. With `checker`, the whole package as
    workdir/checker/ (checker.ship; keys `checker/<name>.py`), run as `python -m checker.check`
    with cwd=workdir; `checker=False`: the spec and the kernels only (a warm judge runs from
    the package itself)."""
    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    files = {"spec": workdir / "spec.json"}
    files["spec"].write_text(json.dumps(spec.to_checker(), indent=1))
    for side, src in (("candidate", candidate), ("champion", champion)):
        if src is not None:
            files[side] = workdir / f"{side}.py"
            shutil.copyfile(src, files[side])
    if checker:
        dest = Path(ship(workdir))
        files.update({f"checker/{p.name}": p for p in sorted(dest.glob("*.py"))})
    return files


def side_args(files: dict, digests: dict | None = None) -> list[str]:
    """The checker's candidate and champion arguments: a file, or `--<side>-torch`; with the
    sha256 the contract judged (`digests`), the judge refuses any other bytes."""
    out = []
    for side in ("candidate", "champion"):
        out += [f"--{side}", str(files[side])] if side in files else [f"--{side}-torch"]
        if side in files and (digests or {}).get(side):
            out += [f"--{side}-sha256", str(digests[side])]
    return out


def parse_child(out, backend: str, synthetic: bool, log_path: Path | None) -> dict:
    """Turn a finished child into a result: the one result line, or a clean error."""
    if log_path is not None:
        log_path.write_text(out.stderr[-200_000:], encoding="utf-8")
    tail = out.stderr[-1500:]
    meta = {"wall_s": round(out.wall_s, 3), "returncode": out.returncode}
    if out.timed_out:   # name the limit (a setting), not the wall time (it depends on load)
        limit = f"{out.limit_s:g}" if out.limit_s is not None else f"{out.wall_s:.0f}"
        return failed_result(backend, synthetic, "backend",
                             f"checker timed out after {limit} s (process group killed)",
                             stderr_tail=tail, **meta)
    try:
        res = parse_result_line(out.stdout)
    except ResultLineError as e:
        return failed_result(backend, synthetic, "backend",
                             f"{e} (exit code {out.returncode}); stderr tail: {tail[-400:]}",
                             stderr_tail=tail, **meta)
    problems = validate_result(res)
    if problems:   # a child's line is data, never trusted for its shape
        return failed_result(backend, synthetic, "backend",
                             f"malformed result line: {'; '.join(problems[:5])}",
                             stderr_tail=tail, **meta)
    if out.returncode != 0:
        meta["note"] = "checker exited non-zero after its result line"
    res["backend"], res["synthetic"] = backend, synthetic
    res.setdefault("backend_meta", {}).update(meta)
    if not res.get("ok"):
        res["backend_meta"]["stderr_tail"] = tail
    return res


def warm_job(judges, backend: str, synthetic: bool, slot: str, workdir: Path, argv: list[str],
             timeout_s: float) -> dict:
    """One job through `slot`'s warm judge (warmjudge.WarmJudges): its result line, checked for
    shape and labelled like a cold child's (parse_child), or a clean failed result saying why
    the judge gave none; the job's stderr goes to workdir/checker.log."""
    import time
    t0 = time.monotonic()
    res, text, why = judges.job(slot, workdir.parent, argv, timeout_s)
    (workdir / "checker.log").write_text(text, encoding="utf-8")
    meta = {"judge": "warm", "slot": slot, "wall_s": round(time.monotonic() - t0, 3)}
    if res is None:
        return failed_result(backend, synthetic, "backend", f"{why}; a new judge starts with the "
                             "next job", stderr_tail=text[-1500:], **meta)
    problems = validate_result(res)
    if problems:   # a judge's line is data, never trusted for its shape
        return failed_result(backend, synthetic, "backend", "malformed result line: "
                             + "; ".join(problems[:5]), stderr_tail=text[-1500:], **meta)
    res["backend"], res["synthetic"] = backend, synthetic
    res.setdefault("backend_meta", {}).update(meta)
    if not res.get("ok"):
        res["backend_meta"]["stderr_tail"] = text[-1500:]
    return res


class Backend:
    """What a backend can do, declared once here (the loop reads these, never probes for them):
    every backend derives from this class and overrides what it has; the defaults are a backend
    that times one job at a time and can do nothing more."""
    name = "base"
    synthetic = False
    # evaluate(..., peers=True) times the spec's peers in the same job (Local, Ray on a GPU, Nebius
    # unless its checker runs in plain interpret mode)
    times_peers: bool = False
    # evaluate(..., digests={side: sha256}) hands them to the judge, which refuses other bytes
    takes_digests: bool = False
    # the second look (profile, ncu) is asked after the decision (second_look, landed), not taken
    # inside the job (LocalBackend with the warm judge)
    sight_after: bool = False
    # where the judge keeps the baseline's second look between runs (checker --sight-cache): set by
    # the loop for the baseline job only; None: no cache. Read only by LocalBackend.
    sight_cache: Path | None = None
    # where the backend's own progress lines go (the run points it at its terminal printer); None:
    # a backend that says nothing while it waits (only Nebius speaks)
    say: Callable[[str], None] | None = None

    def describe(self) -> dict:
        return {"backend": self.name, "device": self.device, "synthetic": self.synthetic}

    def evaluate(self, spec, candidate: Path, champion: Path, workdir: Path, configs: dict | None = None,
                 peers: bool = False, slot: str | None = None) -> dict:
        """The checker's result for candidate vs champion, timed in ONE job on ONE worker (`slot`,
        from slots()). `configs` ({"candidate": CONFIG dict, "champion": ...}, parsed once by the
        loop) spares a backend that needs them a re-parse.
        `peers`: also time the spec's peers beside the candidate (where `times_peers`)."""
        raise NotImplementedError

    def slots(self, parallel: int) -> list[str]:
        """The evaluation workers for `parallel` candidates in flight: one job at a time each."""
        return ["worker0"]

    judges = None   # the warm judges a backend keeps between jobs (warmjudge.WarmJudges), if any

    def close(self) -> None:
        """The run is over: let go of whatever the backend keeps between jobs (its warm judges)."""
        if self.judges is not None:
            self.judges.close()

    def interrupt(self) -> None:
        """Ctrl-C: jobs waited on in other threads stop now (its warm judges are killed)."""
        if self.judges is not None:
            self.judges.kill()

    def second_look(self, spec, path: Path, candidate_id: str, workdir: Path, result: dict) -> bool:
        """Ask for a promoted candidate's second look after its decision (where `sight_after`);
        False: nothing was asked."""
        return False

    def landed(self) -> list[dict]:
        """Second looks that came back since the last call: {candidate_id, status, result}."""
        return []

    def evaluate_batch(self, spec, candidates: list[tuple[str, Path]], champion: Path,
                       workdir: Path, slot: str | None = None) -> list[dict]:
        """Time each (id, file) against the champion, one after another on the same worker, each
        in its own checker process; one result per candidate, in order."""
        return [self.evaluate(spec, path, champion, Path(workdir) / cid, slot=slot)
                for cid, path in candidates]


def pycache_env(package_dir: Path | None = None) -> dict:
    """Environment for checker children so Python's bytecode of torch is cached between them.

    Why: where bytecode is not kept (PYTHONDONTWRITEBYTECODE set, as on the H200 image here, or a
    read-only install), every checker process recompiles torch's Python sources: about 2 s of
    each candidate (measured: 6.3 s -> 4.2 s per matmul candidate). The children then write it
    under KernLoop's own cache folder (PYTHONPYCACHEPREFIX), never into site-packages. Left alone
    when the user set PYTHONPYCACHEPREFIX, when KERNLOOP_PYCACHE=0, or when the install already
    keeps its bytecode."""
    if os.environ.get("PYTHONPYCACHEPREFIX") or settings.get("KERNLOOP_PYCACHE") == "0":
        return {}
    if package_dir is None:
        try:
            import torch
        except ImportError:
            return {}
        package_dir = Path(torch.__file__).parent
    cache = package_dir / "__pycache__"
    keeps = os.access(cache if cache.exists() else package_dir, os.W_OK)
    if keeps and not os.environ.get("PYTHONDONTWRITEBYTECODE"):
        return {}
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return {"PYTHONPYCACHEPREFIX": str(base / "kernloop" / "pycache"), "PYTHONDONTWRITEBYTECODE": ""}


# Spares of a warm judge by (on a GPU, warm-fresh). On the GPU a job takes one; a spare told `go`
# as a job begins opens its CUDA context (~0.5 s on the H200) during that job's compile, so with 3
# the one a job takes was told a job earlier (with 2, 13 and 14 of 30 H200 jobs waited for it:
# benchmarks/results/session9 callC, callD: phase `load`). warm-fresh takes two a job.
SPARES = {(True, False): 3, (True, True): 4, (False, False): 1, (False, True): 2}
MODE_FLAGS = {"gpu": ["--mode", "gpu"], "interpret": ["--mode", "interpret"],   # CPU: tests
              "interpret-timed": ["--mode", "interpret", "--host-clock"]}


class LocalBackend(Backend):
    """The checker on this machine's GPU: a warm judge per GPU for the whole run (warmjudge.py,
    checker/serve.py), or with `judge="cold"` (KERNLOOP_JUDGE=cold) one checker child per job.
    `mode` other than gpu runs the same paths in the Triton interpreter on the CPU (tests)."""
    name = "local"

    def __init__(self, device: str = "local CUDA GPU", timeout_s: float | None = None,
                 extra_args: tuple = (), judge: str | None = None, mode: str = "gpu",
                 judge_args: tuple = ()):
        self.device = device
        self.timeout_s = timeout_s or settings.get("KERNLOOP_CHECK_TIMEOUT_S")
        self.extra_args = tuple(extra_args)   # checker flags, for benchmarks (e.g. --no-prewarm)
        self.env_extra = pycache_env()
        # fresh champion workers on a GPU: a kept one biased the A/A (settings' KERNLOOP_JUDGE)
        self.judge = judge or settings.get("KERNLOOP_JUDGE") or ("warm-fresh" if mode == "gpu" else "warm")
        self.mode = mode
        self.sight_after = self.judge != "cold"   # the second look comes after the decision
        self.judges = None
        if self.judge != "cold":   # warm, or warm-fresh: a fresh champion worker every job
            from kernloop.backends import warmjudge
            fresh = self.judge == "warm-fresh"
            # judge_args: the warm judge's own flags (checker/serve.py), for tests (--sight-idle-s)
            self.judges = warmjudge.WarmJudges(["--mode", MODE_FLAGS[mode][1], "--spares",
                                                str(SPARES[mode == "gpu", fresh]),
                                                "--champion", "fresh" if fresh else "kept", *judge_args],
                                               self.judge_env)
        self.asked: dict[str, str] = {}   # sight id -> candidate id

    times_peers = True
    takes_digests = True

    def slots(self, parallel: int) -> list[str]:
        """One worker per visible GPU, named by the CUDA_VISIBLE_DEVICES entry that pins it."""
        if self.mode != "gpu":
            return ["cpu0"]
        return visible_gpus() or ["0"]

    def judge_env(self, slot: str | None) -> dict:
        env = dict(self.env_extra)
        if self.mode != "gpu":
            env.update(TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
        elif slot is not None:
            env["CUDA_VISIBLE_DEVICES"] = slot
        return env

    def checker_args(self, f: dict[str, Path], peers: bool, profile: bool,
                     digests: dict | None = None) -> list[str]:
        cache = ["--sight-cache", str(self.sight_cache)] if peers and self.sight_cache else []
        return ["--spec", str(f["spec"]), *side_args(f, digests), *MODE_FLAGS[self.mode], "--backend", self.name,
                *(["--profile-kernel"] if profile or peers else []), *(["--peers"] if peers else []),
                *cache, *self.extra_args]

    def command(self, f: dict[str, Path], slot: str | None, peers: bool = False,
                digests: dict | None = None) -> tuple[list[str], dict]:
        """The one checker process of a cold job and its environment: candidate and champion
        are timed in it, on the one GPU the slot pins. Run it with cwd = the job folder (the
        one holding checker/: stage_job)."""
        cmd = checker.command("check", *self.checker_args(f, peers, True, digests))
        return cmd, self.judge_env(slot)

    def evaluate(self, spec, candidate, champion, workdir, configs=None, peers=False, slot=None,
                 digests=None):
        if self.mode != "gpu":   # the interpreter times nothing a second process could spoil
            return self._evaluate(spec, candidate, champion, workdir, peers, slot, digests)
        with gpulock.held(slot or self.slots(1)[0]):   # another run or MCP check on this GPU waits
            return self._evaluate(spec, candidate, champion, workdir, peers, slot, digests)

    def _evaluate(self, spec, candidate, champion, workdir, peers, slot, digests) -> dict:
        if self.judges is not None:
            return self._evaluate_warm(spec, candidate, champion, Path(workdir), peers, slot, digests)
        f = stage_job(spec, _path(candidate), _path(champion), Path(workdir))
        cmd, env = self.command(f, slot, peers, digests)
        out = run_child(cmd, self.timeout_s, cwd=str(workdir), env_extra=env)
        res = parse_child(out, self.name, False, Path(workdir) / "checker.log")
        if slot is not None:
            res.setdefault("backend_meta", {})["cuda_visible_devices"] = slot
        return res

    def _evaluate_warm(self, spec, candidate, champion, workdir: Path, peers: bool, slot, digests) -> dict:
        """One job through the slot's warm judge: the same flags and the same result line as
        the cold child; no second look in it (asked after the decision: second_look)."""
        slot = slot or self.slots(1)[0]
        f = stage_job(spec, _path(candidate), _path(champion), workdir, checker=False)
        res = warm_job(self.judges, self.name, False, slot, workdir,
                       self.checker_args(f, peers, False, digests), self.timeout_s)
        if self.mode == "gpu":
            res["backend_meta"]["cuda_visible_devices"] = slot
        return res

    # -- the second look after the decision (the loop: loop/secondlook.py)

    def second_look(self, spec, path: Path, candidate_id: str, workdir: Path, result: dict) -> bool:
        """Ask the judge that timed a promoted candidate for its second look (profile, ncu),
        run when its GPU is idle; False when this backend takes it inside the job instead."""
        if self.judges is None:
            return False
        slot = (result.get("backend_meta") or {}).get("slot") or self.slots(1)[0]
        f = stage_job(spec, Path(path), None, Path(workdir), checker=False)
        sha = (result.get("source_sha256") or {}).get("candidate")   # the bytes it was judged on
        argv = ["--spec", str(f["spec"]), "--candidate", str(f["candidate"]), "--champion",
                str(f["candidate"]), *(["--candidate-sha256", sha, "--champion-sha256", sha] if sha else []),
                *MODE_FLAGS[self.mode], "--backend", self.name,
                "--profile-kernel", *self.extra_args]
        tag = f"sight-{candidate_id}"
        self.asked[tag] = candidate_id
        try:
            self.judges.sight(slot, Path(workdir).parent, argv, tag, self.timeout_s)
        except Exception:   # noqa: BLE001 - a second look is never worth a failed run
            return False
        return True

    def landed(self) -> list[dict]:
        """Second looks that came back since the last call: {candidate_id, status, result}."""
        if self.judges is None:
            return []
        out, left = [], self.__dict__.pop("unanswered", [])
        for res in self.judges.landed() + left:
            cid = self.asked.pop(str(res.get("job_id")), None)
            if cid is not None:
                res["backend"], res["synthetic"] = self.name, False
                out.append({"candidate_id": cid, "status": res.get("status") or "dropped",
                            "result": res})
        return out

    def close(self) -> None:
        super().close()
        if self.judges is not None:
            answered = {str(r.get("job_id")) for r in self.judges.left}
            self.unanswered = [{"job_id": tag, "kind": "sight", "status": "dropped", "ok": False,
                                "error": "the judge that held it ended without an answer"}
                               for tag in self.asked if tag not in answered]


def _path(p) -> Path | None:
    return None if p is None else Path(p)


def cuda_visible() -> tuple[bool, str]:
    """(is a CUDA GPU usable here, why) without leaving CUDA initialised in this process."""
    try:
        import torch
    except ImportError:
        return False, "torch is not installed"
    try:
        if torch.cuda.is_available():
            return True, f"CUDA GPU visible: {torch.cuda.get_device_name(0)}"
        return False, "no CUDA GPU visible to torch"
    except Exception as e:   # broken driver installs raise here
        return False, f"CUDA check failed: {e}"


def gpu_slots(count: int, visible: str | None) -> list[str]:
    """One slot per GPU: the CUDA_VISIBLE_DEVICES entry that pins a job to it. A user's own
    CUDA_VISIBLE_DEVICES (ids or UUIDs) is kept: its entries are the slots."""
    given = [d.strip() for d in (visible or "").split(",") if d.strip()]
    return given[:count] if given else [str(i) for i in range(count)]


def visible_gpus() -> list[str]:
    """The slots of the GPUs this process may use, without initialising CUDA here."""
    try:
        import torch
        count = torch.cuda.device_count()
    except Exception:   # noqa: BLE001 - no torch or a broken driver: the caller falls back
        return []
    return gpu_slots(count, os.environ.get("CUDA_VISIBLE_DEVICES"))
