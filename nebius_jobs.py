"""NebiusBackend: run the checker as a Nebius AI Cloud Serverless Job through the `nebius` CLI.

One candidate = one job. The checker package (every file of checker.files(), at
/kernloop/checker/<name>.py), the resolved spec, the candidate and the champion are injected into
the container with `--inject-file`; the container runs the package's stdlib-only launcher,
`python /kernloop/checker/nebius_entry.py MODE [peers] ncu=auto|off`, which starts `python -m
checker.check` with cwd /kernloop; KernLoop polls the job to a final state, reads its logs and finds the one
KERNLOOP_RESULT line with the parser every backend shares (resultline.py).

Peers and the second look are the local backend's, in the same job: the baseline and final jobs
ask for `peers`; every job's checker runs with --profile-kernel, so the judge profiles a
candidate that may be promoted (its mean beats the champion's) right after its verdict, in the
container that timed it: no second container start. A batch job does no second look (see
checker/nebius_batch_entry.py).

The CLI itself (what is verified about it, one call, its output) is nebius_cli.py.
"""
from __future__ import annotations

import itertools
import json
import re
import secrets
import shlex
import sys
import threading
import time
from pathlib import Path

from kernloop.backends.local import Backend, failed_result, stage_job
from kernloop.backends.nebius_batch import BATCH_ENTRY, BATCH_MARKER, parse_batch_lines, stage_batch
from kernloop.backends.nebius_cli import (FINAL_STATES, CliMissing, CliOut, classify_cli_error, find_cli,
                                 job_id_from_create, job_status, load_json, run_cli)
from kernloop.backends.nebius_settings import NebiusSettings, settings_from_env
from kernloop.backends.resultline import MARKER, ResultLineError, parse_result_line, strip_ansi, validate_result

MAX_INJECT_BYTES = 64 * 1024          # --inject-file limit (verified)
CONTAINER_DIR = "/kernloop"           # absolute, as --inject-file requires
ENTRY = "checker/nebius_entry.py"     # a job's launcher, in the package (the batch's: BATCH_ENTRY)
LOG_READS = 3                         # the fewest reads of a job's logs before they count as empty
MAX_GET_FAILURES = 5                  # consecutive failed `get` calls before giving up

# ---------------------------------------------------------------- small pure helpers

def oversized(files: dict[str, Path]) -> list[str]:
    """'name (N bytes)' for every file over the --inject-file limit."""
    return [f"{p.name} ({p.stat().st_size} bytes)" for p in files.values()
            if p.stat().st_size > MAX_INJECT_BYTES]


def job_name(spec_name: str, tag: str) -> str:
    """A unique, DNS-style name: lowercase letters, digits, hyphens, <= 63 chars."""
    base = re.sub(r"[^a-z0-9-]+", "-", f"kernloop-{spec_name}-{tag}".lower()).strip("-")
    return f"{base[:52].rstrip('-')}-{secrets.token_hex(3)}"


def interpret_note(res: dict) -> str:
    """backend_meta's note on an interpret-mode result: never a GPU measurement."""
    if res.get("clock") == "host":
        return "checker ran in interpret mode timed on the host clock (CPU): not a GPU measurement"
    return "checker ran in interpret mode (CPU, correctness only): not a GPU measurement"


def entry_words(settings: NebiusSettings, peers: bool) -> list[str]:
    """What a single-candidate job's entry is told after its path: the checker mode, `peers`
    for the baseline and final jobs, and this machine's KERNLOOP_NCU (checker/nebius_entry.py)."""
    return [settings.check_mode, *(["peers"] if peers else []), f"ncu={settings.ncu}"]


def inject_args(files: dict[str, Path], workdir: Path) -> list[str]:
    """`--inject-file local:remote`, one per staged file: its path relative to `workdir` (where
    the CLI runs; no ':' in it) on both sides, the remote under CONTAINER_DIR (the package's files
    land in /kernloop/checker/)."""
    out = []
    for path in files.values():
        rel = Path(path).resolve().relative_to(Path(workdir).resolve()).as_posix()
        out += ["--inject-file", f"{rel}:{CONTAINER_DIR}/{rel}"]
    return out


# ---------------------------------------------------------------- one job

class _Job:
    """What one evaluate() learns: the journal for nebius_job.log and the backend_meta."""

    def __init__(self, settings: NebiusSettings, say):
        self.settings, self.say = settings, say
        self.t0 = time.monotonic()
        self.id: str | None = None
        self.name: str | None = None
        self.states: list[list] = []
        self.details: dict = {}
        self.journal: list[str] = []
        self.entry = ENTRY                               # the launcher, relative to CONTAINER_DIR
        self.words: list[str] = [settings.check_mode]   # the entry's arguments after its path

    def elapsed(self) -> float:
        return round(time.monotonic() - self.t0, 3)

    def log(self, msg: str, echo: bool = True) -> None:
        self.journal.append(f"[{self.elapsed():9.2f}s] {msg}")
        if echo:
            self.say(msg if msg.startswith("nebius:") else f"nebius: {msg}")

    def saw(self, state: str) -> None:
        if not self.states or self.states[-1][1] != state:
            self.states.append([self.elapsed(), state])
            self.log(f"job {self.id} state {state}")

    @property
    def state(self) -> str | None:
        return self.states[-1][1] if self.states else None

    def meta(self) -> dict:
        s = self.settings
        return {"job_id": self.id, "job_name": self.name, "wall_s": self.elapsed(),
                "states": self.states, "state_details": self.details or None,
                "platform": s.platform, "preset": s.preset, "image": s.image,
                "check_mode": s.check_mode, "entry_args": " ".join(self.words)}


# ---------------------------------------------------------------- the backend

class NebiusBackend(Backend):
    """The checker in a Nebius Serverless AI Job, driven through the `nebius` CLI."""
    name = "nebius"
    synthetic = False

    def __init__(self, settings: NebiusSettings | None = None, say=None):
        self.settings = settings or NebiusSettings()
        self.say = say or (lambda msg: print(msg, file=sys.stderr, flush=True))
        s = self.settings
        self.device = f"Nebius {s.platform} / {s.preset}"
        self._interrupted = threading.Event()   # set from the loop's thread on Ctrl-C
        if s.check_mode == "interpret":
            self.device += " (checker in interpret mode: CPU, correctness only, no GPU timing)"
        elif s.check_mode == "interpret-timed":
            self.device += (" (checker in interpret mode timed on the host clock: CPU, "
                            "not a GPU measurement)")
            self.synthetic = True   # the interpreter's host time: labelled on every line it touches

    @property
    def times_peers(self) -> bool:
        """evaluate(..., peers=True) times the peers in the job: on a GPU, or on the host clock;
        a plain interpret-mode checker times nothing."""
        return self.settings.check_mode != "interpret"

    def interrupt(self) -> None:
        """Jobs waited on in other threads give up now and are cancelled (never left billing)."""
        self._interrupted.set()

    @classmethod
    def from_env(cls, env=None) -> "NebiusBackend":
        return cls(settings_from_env(env))

    def preflight(self) -> None:
        """Before any run folder or job: the CLI must be there (CliMissing says how to install it)."""
        find_cli(self.settings.cli)

    # -- CLI plumbing

    def _cli(self, job: _Job, args: list[str], cwd: Path | None = None) -> CliOut:
        """Run one CLI call (nebius_cli.run_cli) and journal it."""
        s = self.settings
        out = run_cli(s.cli, s.profile, args, cwd, s.cli_timeout_s)
        job.log(f"$ nebius {shlex.join(args)} -> "
                + ("timeout" if out.timed_out else f"exit {out.returncode}"), echo=False)
        return out

    def _create_args(self, job: _Job, files: dict[str, Path], workdir: Path) -> list[str]:
        s = job.settings
        args = ["ai", "job", "create", "--name", job.name, "--image", s.image,
                "--platform", s.platform, "--preset", s.preset, "--timeout", s.job_timeout,
                "--disk-size", s.disk, "--container-command", "python",
                "--args", " ".join([f"{CONTAINER_DIR}/{job.entry}", *job.words])]   # no spaces inside
        for flag, value in (("--parent-id", s.parent_id), ("--subnet-id", s.subnet_id)):
            if value:
                args += [flag, value]
        return args + inject_args(files, workdir) + ["--async", "--format", "json"]

    # -- the steps of one job

    def _submit(self, job: _Job, files: dict[str, Path], workdir: Path) -> str | None:
        """Create the job; return an error message, or None with job.id set."""
        out = self._cli(job, self._create_args(job, files, workdir), cwd=workdir)
        if not out.ok and not out.timed_out:
            what, hint = classify_cli_error(out.stderr + out.stdout)
            return (f"nebius: {what}, no job was created ({out.why()})"
                    + (f"; {hint}" if hint else ""))
        job.id = job_id_from_create(out.stdout) if out.ok else None
        if not job.id:   # odd output, or a create that timed out: the job may exist, find it
            job.id = self._lookup_by_name(job)
        if not job.id:
            got = out.why() if out.timed_out else f"output: {strip_ansi(out.stdout)[-300:]!r}"
            return (f"nebius: create gave no job id ({got}) and no job named {job.name} was "
                    "found; check `nebius ai job list` and cancel any stray job")
        s = job.settings
        job.log(f"job {job.id} created ({job.name}; {s.platform} / {s.preset}; image {s.image})")
        return None

    def _lookup_by_name(self, job: _Job) -> str | None:
        args = ["ai", "job", "get-by-name", "--name", job.name, "--format", "json"]
        if job.settings.parent_id:
            args += ["--parent-id", job.settings.parent_id]
        out = self._cli(job, args)
        obj = load_json(out.stdout) if out.ok else None
        jid = (obj.get("metadata") or {}).get("id") if isinstance(obj, dict) else None
        return jid if isinstance(jid, str) and jid else None

    def _wait(self, job: _Job) -> str | None:
        """Poll to a final state with growing intervals. Returns an error message (after
        cancelling the job) when it gives up, else None."""
        s = job.settings
        deadline = job.t0 + s.wait_s
        interval, failures, last_err = s.poll_s, 0, ""
        while True:
            if self._interrupted.is_set():
                return self._give_up(job, "KernLoop was interrupted")
            out = self._cli(job, ["ai", "job", "get", "--id", job.id, "--format", "json"])
            obj = load_json(out.stdout) if out.ok else None
            state, details = job_status(obj)
            if state:
                failures = 0
                job.details = details or job.details
                job.saw(state)
                if state in FINAL_STATES:
                    return None
            else:
                failures += 1
                last_err = out.why() if not out.ok else "state missing in `ai job get` output"
                if failures >= MAX_GET_FAILURES:
                    return self._give_up(job, f"could not read the job state {failures} times in a "
                                              f"row ({last_err})")
            now = time.monotonic()
            if now >= deadline:
                return self._give_up(job, f"still {job.state or 'unknown'} after {now - job.t0:.0f} s "
                                          f"(KERNLOOP_NEBIUS_WAIT_S={s.wait_s:g})")
            self._interrupted.wait(min(interval, max(deadline - now, 0.0)))
            interval = min(interval * 1.5, s.poll_s * 6)

    def _give_up(self, job: _Job, why: str) -> str:
        """Cancel the job (never leave one billing), confirm briefly, and say what happened."""
        out = self._cli(job, ["ai", "job", "cancel", "--id", job.id])
        if out.ok:
            done = "cancel requested (exit 0)"
            for _ in range(3):   # a short confirmation, not another long wait
                got = self._cli(job, ["ai", "job", "get", "--id", job.id, "--format", "json"])
                state, _ = job_status(load_json(got.stdout) if got.ok else None)
                if state:
                    job.saw(state)
                if state in FINAL_STATES:
                    break
                time.sleep(job.settings.poll_s)
            done += f", job now {job.state or '(state unconfirmed)'}"
        else:
            done = (f"CANCEL FAILED ({out.why()}): cancel it by hand with "
                    f"`nebius ai job cancel --id {job.id}`")
        return f"nebius: gave up on job {job.id}: {why}; {done}"   # the caller logs it

    def _read_logs(self, job: _Job, want_result: bool, marker: str = MARKER) -> tuple[str, str]:
        """(log text, problem). Logs can be empty for a while, and may trail the final state:
        re-read for a bounded time until they hold a result line (or, when none is expected,
        until they hold anything). At least LOG_READS reads whatever the clock says, so a slow
        `nebius` call on a busy host cannot use up the wait in one read."""
        deadline = time.monotonic() + job.settings.log_wait_s
        text, problem = "", "the job's logs were empty"
        for reads in itertools.count(1):
            out = self._cli(job, ["ai", "job", "logs", job.id])
            if out.ok:
                text = out.stdout + ("\n" + out.stderr if out.stderr.strip() else "")
                found = marker in strip_ansi(text)
                if found or (text.strip() and not want_result):
                    return text, ""
                problem = ("the job's logs were empty" if not text.strip()
                           else f"no {marker.strip()} line in the job's logs")
            else:
                problem = f"`nebius ai job logs` failed ({out.why()})"
            if reads >= LOG_READS and time.monotonic() >= deadline:
                return text, f"{problem} (read {reads} times over {job.settings.log_wait_s:g} s)"
            time.sleep(job.settings.poll_s)

    # -- evaluate

    def slots(self, parallel: int) -> list[str]:
        """Up to KERNLOOP_NEBIUS_MAX_JOBS jobs at once, one per worker."""
        return [f"job{i}" for i in range(self.settings.max_jobs)]

    def evaluate(self, spec, candidate, champion, workdir, configs=None, peers=False, slot=None):
        workdir = Path(workdir)
        job = _Job(self.settings.for_spec(spec), self.say)
        job.words = entry_words(job.settings, peers and self.times_peers)
        files = stage_job(spec, candidate and Path(candidate), champion and Path(champion), workdir)
        return self._guarded(job, workdir, lambda: self._run_job(job, spec, files, workdir),
                             lambda why: self._fail(job, why))

    def _guarded(self, job: _Job, workdir: Path, run, on_missing):
        """run(), with the job's journal written however it ends: a missing CLI gives
        on_missing(why); Ctrl-C or a bug mid-wait cancels a job still billing, then propagates."""
        try:
            out = run()
        except CliMissing as e:
            out = on_missing(f"nebius: {e}; no job was created")
        except BaseException:   # Ctrl-C or a bug mid-wait: the job must not keep billing
            if job.id and job.state not in FINAL_STATES:
                job.log(self._give_up(job, "KernLoop was interrupted"))
            self._write_journal(job, workdir)
            raise
        self._write_journal(job, workdir)
        return out

    def _run_job(self, job: _Job, spec, files: dict[str, Path], workdir: Path) -> dict:
        err = self._start_and_wait(job, spec, files, workdir)
        return self._fail(job, err) if err else self._collect(job, workdir)

    def _start_and_wait(self, job: _Job, spec, files: dict[str, Path], workdir: Path) -> str | None:
        """Submit the job and wait for a final state; an error message, or None."""
        big = oversized(files)
        if big:   # refuse before any CLI call: the create would be rejected anyway
            return (f"nebius: refusing to submit, over the {MAX_INJECT_BYTES // 1024} "
                    f"KiB --inject-file limit: {', '.join(big)}; no job was created")
        job.name = job_name(getattr(spec, "name", "spec"), workdir.name)
        return self._submit(job, files, workdir) or self._wait(job)

    def evaluate_batch(self, spec, candidates, champion, workdir, slot=None):
        """B candidates in ONE job (one container start), each timed against the champion by
        its own checker process inside it; one result per candidate, each naming the job."""
        workdir = Path(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        job = _Job(self.settings.for_spec(spec), self.say)
        cids = [cid for cid, _ in candidates]
        job.entry = BATCH_ENTRY
        files = stage_batch(spec, candidates, champion, workdir)
        def run() -> list[dict]:
            err = self._start_and_wait(job, spec, files, workdir)
            return [self._fail(job, err)] * len(cids) if err else self._collect_batch(job, workdir, cids)
        results = self._guarded(job, workdir, run, lambda why: [self._fail(job, why)] * len(cids))
        return [json.loads(json.dumps(r)) for r in results]   # one dict per candidate

    def _collect_batch(self, job: _Job, workdir: Path, cids: list[str]) -> list[dict]:
        completed = job.state == "COMPLETED"
        text, problem = self._read_logs(job, want_result=completed, marker=BATCH_MARKER)
        (workdir / "checker.log").write_text(strip_ansi(text)[-200_000:], encoding="utf-8")
        tail = strip_ansi(text)[-1500:]
        if not completed:
            d = job.details
            detail = f"{d.get('code') or '?'}: {d.get('message') or '(no message)'}" if d else "no details"
            return [self._fail(job, f"nebius: batch job {job.id} ended {job.state} ({detail}); "
                                    f"log tail: {tail[-400:] or '(empty)'}", log_tail=tail)] * len(cids)
        out = []
        for i, (cid, (res, why)) in enumerate(parse_batch_lines(strip_ansi(text), cids).items()):
            if res is None:
                out.append(self._fail(job, f"nebius: batch job {job.id} COMPLETED without a usable "
                                           f"result for {cid}: {why}"
                                           + (f" ({problem})" if problem else ""), log_tail=tail))
                continue
            res["backend"], res["synthetic"] = self.name, self.synthetic
            meta = res.setdefault("backend_meta", {})
            meta.update(job.meta(), batch=cids, batch_index=i)
            if why:
                meta["note"] = why
            if res.get("mode") == "interpret":
                meta["note"] = interpret_note(res)
            out.append(res)
        job.log(f"batch job {job.id} done in {job.elapsed():.1f} s: "
                f"{sum(bool(r.get('ok')) for r in out)}/{len(cids)} ok")
        return out

    def _collect(self, job: _Job, workdir: Path) -> dict:
        """The job reached a final state: turn it and its logs into a result."""
        completed = job.state == "COMPLETED"
        text, problem = self._read_logs(job, want_result=completed)
        (workdir / "checker.log").write_text(strip_ansi(text)[-200_000:], encoding="utf-8")
        tail = strip_ansi(text)[-1500:]
        if not completed:
            d = job.details
            detail = f"{d.get('code') or '?'}: {d.get('message') or '(no message)'}" if d else "no details"
            return self._fail(job, f"nebius: job {job.id} ended {job.state} ({detail}); "
                                   f"log tail: {tail[-400:] or '(empty)'}", log_tail=tail)
        try:
            res = parse_result_line(text)
        except ResultLineError as e:
            why = problem or str(e)
            return self._fail(job, f"nebius: job {job.id} COMPLETED without a usable result line "
                                   f"({why}); log tail: {tail[-400:] or '(empty)'}", log_tail=tail)
        problems = validate_result(res)
        if problems:
            return self._fail(job, f"nebius: job {job.id} printed a malformed result line: "
                                   f"{'; '.join(problems[:5])}", log_tail=tail)
        res["backend"], res["synthetic"] = self.name, self.synthetic
        meta = res.setdefault("backend_meta", {})
        meta.update(job.meta())
        if res.get("mode") == "interpret":
            meta["note"] = interpret_note(res)
        if not res.get("ok"):
            meta["log_tail"] = tail
        job.log(f"job {job.id} done in {job.elapsed():.1f} s: ok={res.get('ok')} "
                f"stage={res.get('stage')}")
        return res

    def _fail(self, job: _Job, error: str, **extra) -> dict:
        job.log(error)
        return failed_result(self.name, self.synthetic, stage="backend", error=error, **job.meta(), **extra)

    def _write_journal(self, job: _Job, workdir: Path) -> None:
        try:
            (workdir / "nebius_job.log").write_text("\n".join(job.journal) + "\n", encoding="utf-8")
        except OSError:
            pass

