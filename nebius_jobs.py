"""NebiusBackend: run the checker as a Nebius AI Cloud Serverless Job through the `nebius` CLI.

One candidate = one job. The checker, the resolved spec, the candidate, the champion and a tiny
entry script (checker/nebius_entry.py) are injected into the container with `--inject-file`; the
container runs `python /kernloop/kernloop_entry.py MODE`; KernLoop polls the job to a final state, reads its logs
and finds the one KERNLOOP_RESULT line with the parser every backend shares (resultline.py).

What the CLI is known to do (sources: Nebius' own agent skills, github.com/nebius/skills, the
`ai job create` flag skeleton for CLI 0.12.265; the nebius.ai.v1 Job protobuf in nebius/pysdk;
published cookbook scripts). VERIFIED there:
  * `ai job create` flags: --name --image --platform --preset --container-command --args
    --inject-file LOCAL:/abs/container/path (repeatable, <= 64 KiB, read-only in the container)
    --parent-id --subnet-id --timeout (1h..168h, default 24h) --disk-size (e.g. 100Gi) --async;
    `--args` is ONE string split on spaces, so we pass a path and a mode word, neither with a space.
  * `ai job get --id <id> --format json` -> .status.state, one of PROVISIONING, STARTING,
    RUNNING, CANCELLING, DELETING, COMPLETED, FAILED, CANCELLED, ERROR (IMAGE_PULLING in newer
    APIs); .status.state_details {code, message}; .metadata.id is "aijob-...".
  * `ai job logs <id>` takes the id POSITIONALLY; it prints nothing, exit 0, while a job has not
    started. `ai job cancel --id <id>`. `ai job get-by-name --name <n>` -> .metadata.id.
  * Errors print as plain text even with --format json: branch on the exit code, never parse the
    stdout of a failed command. A missing profile prints "missing configuration ... nebius
    profile create". Without flags the CLI picks gpu-h100-sxm (eu-north1) or gpu-h200-sxm
    (elsewhere) and the platform's smallest preset, 1gpu-16vcpu-200gb for both; we pass them.
INFERRED (not verified against a live account): the exact JSON `create --async --format json`
prints (an operation; we look for resource_id, then metadata.id, then any "aijob-..." token,
then fall back to get-by-name); the exact log line format (timestamps, colours: we strip both);
whether state strings may carry a "STATE_" prefix (we accept both).
"""
from __future__ import annotations

import json
import re
import secrets
import shlex
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from backends import Backend, failed_result, stage_job
from nebius_batch import BATCH_MARKER, parse_batch_lines, stage_batch
from nebius_settings import NebiusSettings, settings_from_env
from resultline import MARKER, ResultLineError, parse_result_line, strip_ansi, validate_result

MAX_INJECT_BYTES = 64 * 1024          # --inject-file limit (verified)
CONTAINER_DIR = "/kernloop"           # absolute, as --inject-file requires
ENTRY = "kernloop_entry.py"
ENTRY_SOURCE = Path(__file__).resolve().parent / "checker" / "nebius_entry.py"
FINAL_STATES = ("COMPLETED", "FAILED", "CANCELLED", "ERROR")
# nebius.ai.v1.JobStatus.State numbers, in case a JSON printer ever emits the enum as an int.
_STATE_BY_NUMBER = ("STATE_UNSPECIFIED", "PROVISIONING", "STARTING", "RUNNING", "CANCELLING",
                    "DELETING", "COMPLETED", "FAILED", "CANCELLED", "ERROR")
_JOB_ID = re.compile(r"\baijob-[a-z0-9]+\b")
MAX_GET_FAILURES = 5                  # consecutive failed `get` calls before giving up

# ---------------------------------------------------------------- small pure helpers

def normalize_state(raw) -> str:
    """'RUNNING', 'STATE_RUNNING', 3 -> 'RUNNING'; anything else -> upper-cased string."""
    if isinstance(raw, int) and not isinstance(raw, bool) and 0 <= raw < len(_STATE_BY_NUMBER):
        raw = _STATE_BY_NUMBER[raw]
    s = str(raw or "").strip().upper()
    return s[len("STATE_"):] if s.startswith("STATE_") and s != "STATE_UNSPECIFIED" else s


def load_json(text: str):
    """JSON from CLI stdout (colour codes removed); None when it is not JSON."""
    try:
        return json.loads(strip_ansi(text))
    except (json.JSONDecodeError, TypeError):
        return None


def job_id_from_create(stdout: str) -> str | None:
    """The job id in `ai job create --async --format json` output (an operation, or the job)."""
    obj = load_json(stdout)
    if isinstance(obj, dict):
        for cand in (obj.get("resource_id"), (obj.get("metadata") or {}).get("id"),
                     (obj.get("resource") or {}).get("metadata", {}).get("id")
                     if isinstance(obj.get("resource"), dict) else None):
            if isinstance(cand, str) and cand:
                return cand
    m = _JOB_ID.search(strip_ansi(stdout))
    return m.group(0) if m else None


def job_status(obj) -> tuple[str, dict]:
    """(state, state_details) from `ai job get --format json` output."""
    status = (obj.get("status") or {}) if isinstance(obj, dict) else {}
    details = status.get("state_details") or {}
    return normalize_state(status.get("state")), details if isinstance(details, dict) else {}


def oversized(files: dict[str, Path]) -> list[str]:
    """'name (N bytes)' for every file over the --inject-file limit."""
    return [f"{p.name} ({p.stat().st_size} bytes)" for p in files.values()
            if p.stat().st_size > MAX_INJECT_BYTES]


def job_name(spec_name: str, tag: str) -> str:
    """A unique, DNS-style name: lowercase letters, digits, hyphens, <= 63 chars."""
    base = re.sub(r"[^a-z0-9-]+", "-", f"kernloop-{spec_name}-{tag}".lower()).strip("-")
    return f"{base[:52].rstrip('-')}-{secrets.token_hex(3)}"


def classify_cli_error(text: str) -> tuple[str, str]:
    """(what went wrong, the next step) for the CLI errors the Nebius docs describe."""
    low = text.lower()
    if any(s in low for s in ("missing configuration", "profile create", "unauthenticated",
                              "not authenticated", "authentication", "expired", "login")):
        return "not logged in", ("run `nebius profile create` (or re-authenticate the profile) "
                                 "and retry")
    if "resource_exhausted" in low or "not enough resources" in low:
        return "create rejected", "no capacity for this platform/preset now: try another one"
    if "permissiondenied" in low or "permission denied" in low:
        return "create rejected", ("the profile lacks a permission on the project (Serverless AI "
                                   "jobs, or a VPC grant); check KERNLOOP_NEBIUS_PARENT_ID")
    return "create rejected", ""


def write_entry(workdir: Path) -> Path:
    """The job's entry script (checker/nebius_entry.py), beside the other injected files."""
    return Path(shutil.copyfile(ENTRY_SOURCE, Path(workdir) / ENTRY))


# ---------------------------------------------------------------- the CLI

@dataclass
class CliOut:
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def why(self) -> str:
        """The CLI's own (plain-text) error, shortened, for a message."""
        if self.timed_out:
            return "the CLI call timed out"
        text = strip_ansi(self.stderr).strip() or strip_ansi(self.stdout).strip() or "(no output)"
        return f"exit {self.returncode}: {text[-600:]}"


class CliMissing(Exception):
    pass


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
                "check_mode": s.check_mode}


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

    def interrupt(self) -> None:
        """Jobs waited on in other threads give up now and are cancelled (never left billing)."""
        self._interrupted.set()

    @classmethod
    def from_env(cls, env=None) -> "NebiusBackend":
        return cls(settings_from_env(env))

    # -- CLI plumbing

    def _cli(self, job: _Job, args: list[str], cwd: Path | None = None) -> CliOut:
        """Run one CLI call. The environment passes through untouched: the CLI needs its own
        config and credentials (candidate code never runs here, it runs in the job)."""
        s = self.settings
        exe = shutil.which(s.cli)
        if exe is None:
            raise CliMissing(f"the nebius CLI was not found (KERNLOOP_NEBIUS_CLI={s.cli!r}, "
                             "PATH searched); install it (docs.nebius.com/cli/install) and run "
                             "`nebius profile create`")
        argv = [exe, *args] + (["--profile", s.profile] if s.profile else [])
        try:
            p = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, errors="replace",
                               stdin=subprocess.DEVNULL, timeout=s.cli_timeout_s)
            out = CliOut(p.returncode, p.stdout, p.stderr)
        except subprocess.TimeoutExpired as e:
            out = CliOut(None, _text(e.stdout), _text(e.stderr), timed_out=True)
        except OSError as e:   # not executable, vanished between which() and exec
            raise CliMissing(f"the nebius CLI at {exe} could not be run: {e}") from None
        job.log(f"$ nebius {shlex.join(args)} -> "
                + ("timeout" if out.timed_out else f"exit {out.returncode}"), echo=False)
        return out

    def _create_args(self, job: _Job, files: dict[str, Path]) -> list[str]:
        s = job.settings
        args = ["ai", "job", "create", "--name", job.name, "--image", s.image,
                "--platform", s.platform, "--preset", s.preset, "--timeout", s.job_timeout,
                "--disk-size", s.disk, "--container-command", "python",
                "--args", f"{CONTAINER_DIR}/{ENTRY} {s.check_mode}"]   # two words, no spaces inside
        for flag, value in (("--parent-id", s.parent_id), ("--subnet-id", s.subnet_id)):
            if value:
                args += [flag, value]
        for path in files.values():   # relative names: the CLI runs in workdir, no ':' in paths
            args += ["--inject-file", f"{path.name}:{CONTAINER_DIR}/{path.name}"]
        return args + ["--async", "--format", "json"]

    # -- the steps of one job

    def _submit(self, job: _Job, files: dict[str, Path], workdir: Path) -> str | None:
        """Create the job; return an error message, or None with job.id set."""
        out = self._cli(job, self._create_args(job, files), cwd=workdir)
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
        until they hold anything)."""
        deadline = time.monotonic() + job.settings.log_wait_s
        text, problem = "", "the job's logs were empty"
        while True:
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
            if time.monotonic() >= deadline:
                return text, f"{problem} (re-read for {job.settings.log_wait_s:g} s)"
            time.sleep(job.settings.poll_s)

    # -- evaluate

    def slots(self, parallel: int) -> list[str]:
        """Up to KERNLOOP_NEBIUS_MAX_JOBS jobs at once, one per worker."""
        return [f"job{i}" for i in range(self.settings.max_jobs)]

    def evaluate(self, spec, candidate, champion, workdir, configs=None, peers=False, slot=None):
        workdir = Path(workdir)
        job = _Job(self.settings.for_spec(spec), self.say)
        files = stage_job(spec, candidate and Path(candidate), champion and Path(champion), workdir)
        files["entry"] = write_entry(workdir)
        try:
            result = self._run_job(job, spec, files, workdir)
        except CliMissing as e:
            result = self._fail(job, f"nebius: {e}; no job was created")
        except BaseException:   # Ctrl-C or a bug mid-wait: the job must not keep billing
            if job.id and job.state not in FINAL_STATES:
                job.log(self._give_up(job, "KernLoop was interrupted"))
            self._write_journal(job, workdir)
            raise
        self._write_journal(job, workdir)
        return result

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
        files = stage_batch(spec, candidates, champion, workdir, ENTRY)
        try:
            err = self._start_and_wait(job, spec, files, workdir)
            results = [self._fail(job, err)] * len(cids) if err else self._collect_batch(job, workdir, cids)
        except CliMissing as e:
            results = [self._fail(job, f"nebius: {e}; no job was created")] * len(cids)
        except BaseException:   # Ctrl-C or a bug mid-wait: the job must not keep billing
            if job.id and job.state not in FINAL_STATES:
                job.log(self._give_up(job, "KernLoop was interrupted"))
            self._write_journal(job, workdir)
            raise
        self._write_journal(job, workdir)
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
            res["backend"], res["synthetic"] = self.name, False
            meta = res.setdefault("backend_meta", {})
            meta.update(job.meta(), batch=cids, batch_index=i)
            if why:
                meta["note"] = why
            if res.get("mode") == "interpret":
                meta["note"] = "checker ran in interpret mode (CPU, correctness only): not a GPU measurement"
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
        res["backend"], res["synthetic"] = self.name, False
        meta = res.setdefault("backend_meta", {})
        meta.update(job.meta())
        if res.get("mode") == "interpret":
            meta["note"] = "checker ran in interpret mode (CPU, correctness only): not a GPU measurement"
        if not res.get("ok"):
            meta["log_tail"] = tail
        job.log(f"job {job.id} done in {job.elapsed():.1f} s: ok={res.get('ok')} "
                f"stage={res.get('stage')}")
        return res

    def _fail(self, job: _Job, error: str, **extra) -> dict:
        job.log(error)
        return failed_result(self.name, False, stage="backend", error=error, **job.meta(), **extra)

    def _write_journal(self, job: _Job, workdir: Path) -> None:
        try:
            (workdir / "nebius_job.log").write_text("\n".join(job.journal) + "\n", encoding="utf-8")
        except OSError:
            pass


def _text(b) -> str:
    if b is None:
        return ""
    return b.decode("utf-8", "replace") if isinstance(b, bytes) else b
