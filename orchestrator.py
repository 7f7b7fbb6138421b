#!/usr/bin/env python3
"""KernLoop: optimize a Triton kernel with a propose -> check -> promote loop.

  python orchestrator.py --spec specs/matmul.yaml
  python orchestrator.py --resume runs/<id>
  python orchestrator.py new NAME --from MODULE:FUNCTION --shape 4096x8192 --dtype bf16
  python orchestrator.py new NAME --from-kernelbench PROBLEM.py
  python orchestrator.py check --spec specs/NAME.yaml KERNEL.py
"""
from __future__ import annotations

import argparse
import datetime as _dt
import logging
import platform
import shutil
import sys
import time
from pathlib import Path

import briefing
import contract
import decision
import torchstart
from backends import Backend, BackendError
from diagnosis import compulsory_bytes, of_result
from factories import make_backend
from iteration import candidate_event, proposal_context, run_iteration  # noqa: F401 (tests, bench)
from spec import Spec, SpecError, load_spec
from trajectory import RunLog, end_run, read_events, repair_torn_tail
from tuner import Tuner

REJECTIONS_KEPT = 8   # recent failures shown to the proposer


class UserError(Exception):
    """A mistake in how KernLoop was invoked: one message, non-zero exit, no traceback."""


# ---------------------------------------------------------------- setup

def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="orchestrator.py", description="Optimize a Triton kernel with an agent loop.")
    p.add_argument("--spec", help="spec YAML (e.g. specs/matmul.yaml)")
    p.add_argument("--backend", default="auto", choices=["auto", "local", "synthetic", "nebius"],
                   help="where candidates run: auto = local if a CUDA GPU is visible, else synthetic")
    p.add_argument("--proposer", default="auto", choices=["auto", "tuner", "llm"],
                   help="auto = the LLM if KERNLOOP_LLM_API_KEY or KERNLOOP_LLM_BASE_URL is set, else the tuner")
    p.add_argument("--iterations", type=int, help="iteration budget (default: the spec's loop.iterations)")
    p.add_argument("--patience", type=int, help="stop after N iterations without a promotion (0 = off)")
    p.add_argument("--max-minutes", type=float,
                   help="start no new iteration after this many minutes of wall time (default: no limit)")
    p.add_argument("--out", default="runs", help="folder for run folders (default: runs)")
    p.add_argument("--seed", type=int, default=0, help="seed for the tuner and the synthetic noise")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue a crashed or killed run from its run.jsonl")
    p.add_argument("--parallel", type=int, metavar="K",
                   help="candidates in flight at once (default: the spec's loop.parallel, 1)")
    p.add_argument("--batch", type=int, metavar="B",
                   help="candidates timed in one evaluation job (default 1; for Nebius: one "
                        "container start for B candidates)")
    p.add_argument("--quiet", action="store_true", help="only the final summary")
    args = p.parse_args(argv)
    if not args.spec and not args.resume:
        p.error("one of --spec or --resume is required")
    if args.iterations is not None and args.iterations < 0:
        p.error("--iterations must be >= 0")
    if args.max_minutes is not None and not args.max_minutes > 0:
        p.error("--max-minutes must be > 0")
    for flag, value in (("--parallel", args.parallel), ("--batch", args.batch)):
        if value is not None and value < 1:
            p.error(f"{flag} must be >= 1")
    return args


def make_proposer(kind: str, spec: Spec, seed: int):
    """(proposer, note for the log). The LLM is used only when an endpoint is configured."""
    llm = None
    if kind in ("auto", "llm"):
        try:
            import nemotron_client
        except ImportError as e:
            if kind == "llm":
                raise UserError(f"the LLM proposer is unavailable: {e}") from None
        else:
            try:
                llm = nemotron_client.from_env()
            except ValueError as e:   # a malformed KERNLOOP_LLM_* value names the variable
                raise UserError(str(e)) from None
        if kind == "llm" and llm is None:
            raise UserError("--proposer llm needs KERNLOOP_LLM_API_KEY or KERNLOOP_LLM_BASE_URL")
    if llm is not None:
        return llm, f"LLM proposer: {llm.describe().get('model')} at {llm.describe().get('endpoint_host')}"
    if spec.torch_baseline:   # nothing for the tuner to tune: stop before any run folder exists
        raise UserError(torchstart.TUNER_REFUSAL)
    why = "no LLM endpoint configured (KERNLOOP_LLM_API_KEY / KERNLOOP_LLM_BASE_URL unset): " \
          if kind == "auto" else ""
    return Tuner(spec.search_space, seed=seed), why + "using the built-in tuner (rewrites CONFIG only)"


def make_researcher():
    import research
    try:
        return research.Researcher.from_env()
    except ValueError as e:   # a malformed KERNLOOP_RESEARCH_* / TAVILY_* value
        raise UserError(str(e)) from None


def render_page(run_dir: Path) -> Path | None:
    """Re-render the page; a page problem must never stop the loop."""
    try:
        import page
        return page.render_run(run_dir)
    except Exception as e:  # noqa: BLE001 - report and go on
        print(f"warning: page not rendered: {type(e).__name__}: {e}", file=sys.stderr)
        return None


def versions() -> dict:
    v = {"python": platform.python_version()}
    for mod in ("torch", "triton"):
        try:
            v[mod] = __import__(mod).__version__
        except Exception:   # noqa: BLE001 - a missing package is just not reported
            v[mod] = None
    return v


# ---------------------------------------------------------------- the loop state

class State:
    def __init__(self, cost: dict | None = None, synthetic: bool = False):
        self.cost, self.synthetic = cost, synthetic   # compulsory bytes (diagnosis); modeled run
        self.peers_block: dict | None = None   # the last job's peers (the baseline's, the final's)
        self.standing: dict | None = None      # briefing.standing() of the champion
        self.done = 0
        self.champion_id = "baseline"
        self.champion_file = "baseline.py"
        self.champion_config: dict | None = None   # parsed once, when the file was logged
        self.champion_profile: dict = {}
        self.baseline_mean = None
        self.rejections: list[dict] = []
        self.streak = 0
        self.since_promotion = 0
        self.notes: str | None = None
        self.last_parse_error = None
        self.last_promoted = False
        self.baseline_done = False
        self.research_queries = 0
        self.seen: set[int] = set()   # decided iteration numbers (several may be in flight)
        self.torch_start = False   # `baseline: torch`: the baseline champion is the reference in torch

    @property
    def champion_is_torch(self) -> bool:
        return self.torch_start and self.champion_id == "baseline"

    def end_fields(self) -> dict:
        """run_end's fields that the state knows: trajectory.end_run(log, stopped, reason,
        **state.end_fields(), duration_s=...) writes the event (an interrupt handler too)."""
        return {"iterations_done": self.done, "champion_id": self.champion_id,
                "champion_file": self.champion_file, "baseline_mean_ms": self.baseline_mean,
                "champion_mean_ms": self.champion_profile.get("mean_ms")}

    def stand(self, result: dict) -> None:
        """The champion's standing from the job that measured it (peers carried over)."""
        self.peers_block = (result or {}).get("peers") or self.peers_block
        self.standing = briefing.standing(result, "candidate", self.cost, self.synthetic, self.peers_block)

    def profile_from(self, result: dict, side: str = "candidate") -> dict:
        st = dict(result.get(side) or {})
        st["rel_l2"] = result.get("rel_l2")
        st["roofline"] = (result.get("roofline") or {}).get(side)
        return st

    def replay(self, events: list[dict], tuner: Tuner | None) -> None:
        for ev in events:
            kind = ev.get("event")
            if kind == "baseline":
                self.baseline_done = True
                self.champion_config = ev.get("candidate_config")
                self.champion_profile = self.profile_from(ev.get("result") or {})
                self.baseline_mean = self.champion_profile.get("mean_ms")
                self.stand(ev.get("result") or {})
            elif kind == "research":
                if ev.get("notes"):
                    self.notes = ev["notes"]
            elif kind == "iteration":
                self.apply(ev, tuner)

    def apply(self, ev: dict, tuner: Tuner | None) -> None:
        self.done = max(self.done, ev["iteration"])
        self.seen.add(ev["iteration"])
        d = ev.get("decision") or {}
        self.last_promoted = bool(d.get("promoted"))
        if tuner is not None and ev.get("candidate_config"):
            # Live and on --resume alike: every evaluated config, and what became of it (the
            # tuner stops proposing configs bigger than one that ran out of shared memory).
            tuner.mark_tried(ev["candidate_config"])
            tuner.observe(ev["candidate_config"], d.get("verdict"), d.get("reason"))
        if d.get("promoted"):
            self.champion_id, self.champion_file = ev["candidate_id"], ev["candidate_file"]
            self.champion_config = ev.get("candidate_config")
            self.champion_profile = self.profile_from(ev.get("result") or {})
            self.stand(ev.get("result") or {})
            self.streak = self.since_promotion = 0
        else:
            self.streak += 1
            self.since_promotion += 1
            self.rejections.append({"iteration": ev["iteration"], "verdict": d.get("verdict"),
                                    "reason": d.get("reason"), "note": ev.get("note"),
                                    "config": ev.get("candidate_config")})
            self.rejections = self.rejections[-REJECTIONS_KEPT:]
        self.last_parse_error = (ev.get("proposal") or {}).get("parse_error")


def status_line(ev: dict, n_total: int, synthetic: bool) -> str:
    n = ev["iteration"]
    width = 20
    fill = int(width * n / max(n_total, 1))
    bar = "#" * fill + "." * (width - fill)
    d = ev["decision"]
    cand = ((ev.get("result") or {}).get("candidate") or {}).get("mean_ms")
    champ = ev.get("champion_mean_ms")
    t = f"{cand:.4f} ms" if cand else "   --    "
    tag = "SYNTHETIC " if synthetic else ""
    return (f"{tag}[{bar}] {n:>3}/{n_total} {ev['candidate_id']} {d['verdict']:<9} {t} "
            f"(champion {champ:.4f} ms) {ev.get('note') or ''} | {d['reason']}"[:400]
            if champ else f"{tag}[{bar}] {n:>3}/{n_total} {d['verdict']} | {d['reason']}"[:400])


# ---------------------------------------------------------------- main

def start_run(args, spec: Spec) -> Path:
    run_id = _dt.datetime.now().strftime("%Y%m%d-%H%M%S") + f"-{spec.name}"
    out = Path(args.out).resolve()   # children run with their own cwd: paths must be absolute
    run_dir = out / run_id
    k = 1
    while run_dir.exists():
        k += 1
        run_dir = out / f"{run_id}-{k}"
    try:
        (run_dir / "candidates").mkdir(parents=True)
        probe = run_dir / ".write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as e:
        raise UserError(f"cannot write the run folder under {out}: {e.strerror or e}") from None
    if spec.torch_baseline:   # shown to the proposer and on the page; the checker times torch itself
        (run_dir / "baseline.py").write_text(torchstart.champion_text(spec), encoding="utf-8")
    else:
        shutil.copyfile(spec.baseline, run_dir / "baseline.py")
    return run_dir


def loop(args) -> int:
    resume_events: list[dict] = []
    if args.resume:
        run_dir = Path(args.resume).resolve()
        log_path = run_dir / "run.jsonl"
        if not log_path.is_file():
            raise UserError(f"--resume: no run.jsonl in {run_dir}")
        repair_torn_tail(log_path)
        resume_events = read_events(log_path)
        starts = [e for e in resume_events if e.get("event") == "run_start"]
        if not starts:
            raise UserError(f"--resume: {log_path} has no run_start event")
        if any(e.get("event") == "run_end" for e in resume_events):
            raise UserError(f"--resume: the run in {run_dir} already finished (run_end is written)")
        rs = starts[0]
        spec = load_spec(rs["spec"]["path"])
        args.backend, args.seed = rs["backend"], rs.get("seed", 0)
        args.iterations = rs.get("iterations") if args.iterations is None else args.iterations
        args.proposer = rs.get("proposer_choice", "auto")
        args.patience = rs.get("patience") if args.patience is None else args.patience
        args.parallel = rs.get("parallel", 1) if args.parallel is None else args.parallel
        args.batch = rs.get("batch", 1) if args.batch is None else args.batch
        run_id = rs["run_id"]
    else:
        spec = load_spec(args.spec)
        run_dir = None
    budget = spec.loop["iterations"] if args.iterations is None else args.iterations
    patience = spec.loop["patience"] if args.patience is None else args.patience
    min_gain, sigma = float(spec.loop["min_gain"]), float(spec.loop.get("sigma", 2.0))
    parallel, batch = spec.loop.get("parallel", 1) if args.parallel is None else args.parallel, args.batch or 1
    many = parallel > 1 or batch > 1   # else the one-at-a-time loop, exactly as before

    backend, backend_why = make_backend(args.backend, seed=args.seed)
    proposer, proposer_note = make_proposer(args.proposer, spec, args.seed + len(resume_events))
    if run_dir is None:
        run_dir = start_run(args, spec)
        run_id = run_dir.name
    args.run_dir = run_dir   # for the resume hint on Ctrl-C
    # The tuner only changes numbers inside the search space: research would spend Tavily
    # credits on notes nobody reads, so it runs only for an LLM proposer.
    researcher = None if isinstance(proposer, Tuner) else make_researcher()
    if researcher is not None and resume_events:
        researcher.remember(resume_events)   # never re-send a query this run already sent
    log = RunLog(run_dir / "run.jsonl", run_id, backend.name, backend.synthetic)
    say = (lambda *a: None) if args.quiet else (lambda *a: print(*a, flush=True))
    tag = "SYNTHETIC " if backend.synthetic else ""
    say(f"{tag}kernloop: {backend_why}")
    say(f"{tag}kernloop: {proposer_note}")
    tuner = proposer if isinstance(proposer, Tuner) else None
    if tuner is not None:
        say(f"{tag}kernloop: research off: {_no_research_note()}")
    elif researcher is not None:
        say(f"{tag}kernloop: research source: {researcher.source}")

    st = State(compulsory_bytes(spec), backend.synthetic)
    st.torch_start = spec.torch_baseline
    t_start = time.monotonic()
    if not args.resume:
        desc = proposer.describe()
        log.append("run_start", spec=spec.summary(), proposer=desc.get("proposer"),
                   model=desc.get("model"), endpoint_host=desc.get("endpoint_host"),
                   proposer_note=proposer_note, proposer_choice=args.proposer,
                   backend_note=backend_why, device=backend.device, seed=args.seed,
                   iterations=budget, patience=patience, min_gain=min_gain, sigma=sigma,
                   max_minutes=args.max_minutes, **({"parallel": parallel, "batch": batch} if many else {}),
                   argv=sys.argv[1:], versions=versions(),
                   research=researcher.describe() if researcher else None,
                   research_note=None if researcher else _no_research_note())
    else:
        st.replay(resume_events, tuner)
        say(f"{tag}kernloop: resuming {run_dir} after iteration {st.done} "
            f"(champion {st.champion_id})")
    render_page(run_dir)

    if not st.baseline_done:
        st.champion_config = contract.read_config((run_dir / "baseline.py").read_text())
        base = None if st.torch_start else run_dir / "baseline.py"   # None: the torch reference
        bres = backend.evaluate(spec, base, base, run_dir / "jobs" / "baseline",
                                configs={"candidate": st.champion_config, "champion": st.champion_config},
                                **({"peers": True} if getattr(backend, "times_peers", False) else {}))
        log.append("baseline", candidate_id="baseline", candidate_file="baseline.py",
                   candidate_config=st.champion_config, result=bres,
                   diagnosis=of_result(bres, "candidate", st.cost) if bres.get("ok") else None)
        render_page(run_dir)
        if not bres.get("ok"):
            end_run(log, "baseline_failed", f"baseline failed: {bres.get('error')}", iterations_done=0,
                    duration_s=time.monotonic() - t_start)
            render_page(run_dir)
            print(f"error: the spec's baseline does not pass the checker: {bres.get('error')}",
                  file=sys.stderr)
            return 1
        st.baseline_done = True
        st.champion_profile = st.profile_from(bres)
        st.baseline_mean = st.champion_profile.get("mean_ms")
        st.stand(bres)
        mean = f"{st.baseline_mean:.4f} ms mean" if st.baseline_mean else "no timing (correctness only)"
        say(f"{tag}baseline{' (the torch reference)' if st.torch_start else ''}: {mean}, rel-L2 "
            + ", ".join(f"{k} {v:.1e}" for k, v in (bres.get("rel_l2") or {}).items() if v is not None))
        for text in briefing.peers_lines((st.peers_block or {}).get("peers"), None,
                                         (st.peers_block or {}).get("skipped")):
            say(f"{tag}{text}")

    def do_research(trigger: str):
        if researcher is None:
            return
        fields = researcher.research(spec, trigger, list(st.rejections), backend.device)
        log.append("research", before_iteration=st.done + 1, **fields)
        if fields.get("notes"):
            st.notes = fields["notes"]
        say(f"{tag}research ({fields.get('source')}, {trigger}): "
            + (f"{len(fields.get('notes') or '')} chars of notes" if fields.get("notes")
               else f"no notes ({fields.get('error')})"))

    if not args.resume and researcher is not None:
        do_research("start")
        render_page(run_dir)

    fatal = None
    max_s = args.max_minutes * 60 if args.max_minutes else None

    def stop() -> tuple[str, str] | None:
        return decision.stop_rule(len(st.seen) if many else st.done, budget, st.since_promotion,
                                  patience, bool(tuner and tuner.exhausted), fatal,
                                  elapsed_s=time.monotonic() - t_start, max_s=max_s)

    def record(ev: dict, is_fatal: bool) -> None:
        """Log one decided iteration, learn from it, say it, research if due."""
        nonlocal fatal
        if ev["decision"]["promoted"]:
            ev["champion_id"] = ev["candidate_id"]
            ev["champion_mean_ms"] = ev["result"]["candidate"]["mean_ms"]
        else:
            ev["champion_id"] = st.champion_id
            ev["champion_mean_ms"] = st.champion_profile.get("mean_ms")
        ev["speedup_vs_baseline"] = decision.speedup(st.baseline_mean, ev["champion_mean_ms"])
        if ev["decision"]["promoted"]:
            ev["diagnosis"] = of_result(ev["result"], "candidate", st.cost)
        log.append("iteration", **ev)
        st.apply(ev, tuner)
        say(status_line(ev, budget, backend.synthetic))
        if is_fatal:
            fatal = ev["proposal"].get("error") or "fatal proposer error"
        elif researcher is not None and st.streak and len(st.seen) < budget \
                and _research_due(st.streak, spec):
            do_research("streak")
        render_page(run_dir)

    if many:   # up to `parallel` candidates in flight, `batch` per job; ends on a stop rule
        import scheduler
        scheduler.run_many(st, proposer, isinstance(proposer, Tuner), backend, spec, run_dir,
                           parallel, batch, budget, min_gain, sigma, record, stop, say,
                           lambda n: proposal_context(n, st, spec, run_dir),
                           lambda n, ctx, prop, t0: candidate_event(n, ctx, prop, spec, run_dir, t0))
    while not (rule := stop()):   # one at a time (with `many`: the rule that ended it is read)
        ev, is_fatal = run_iteration(st.done + 1, st, spec, proposer, backend, run_dir,
                                     min_gain, sigma)
        record(ev, is_fatal)
    stopped, why = rule

    if not st.champion_is_torch:   # a torch champion has no kernel file
        shutil.copyfile(run_dir / st.champion_file, run_dir / "champion.py")
    champ_mean = st.champion_profile.get("mean_ms")
    fres = final_job(st, spec, backend, run_dir, log, stopped)
    speedup = decision.speedup(st.baseline_mean, champ_mean)
    line = final_summary(st, fres, speedup, backend.synthetic)
    end_run(log, stopped, why, **st.end_fields(), duration_s=time.monotonic() - t_start, final_line=line)
    page_path = render_page(run_dir)
    try:
        import page
        page.render_index(run_dir.parent)   # runs/index.html lists every run
    except Exception as e:  # noqa: BLE001 - the index is a convenience, never fatal
        print(f"warning: runs index not rendered: {e}", file=sys.stderr)
    label = " (synthetic run: modeled timings, not measurements)" if backend.synthetic else ""
    print(f"{tag}done: {why}. {st.champion_id}: {line}{label}")
    print("champion: the torch reference (no candidate beat it)" if st.champion_is_torch
          else f"champion kernel: {run_dir / 'champion.py'}")
    print(f"page: {page_path or run_dir / 'trajectory.html'}")
    if fatal:
        print(f"error: {fatal}", file=sys.stderr)
        return 1
    return 0


def final_job(st: State, spec: Spec, backend: Backend, run_dir: Path, log: RunLog, stopped: str) -> dict | None:
    """Time the final champion once more beside its peers (and profile it) in one job, where the
    backend times peers and a promotion happened (the baseline's own job timed them already).
    Logged as the `final` event; its failure only loses the comparison."""
    if not getattr(backend, "times_peers", False) or st.champion_id == "baseline" \
            or stopped in ("interrupted", "baseline_failed"):
        return None
    path = run_dir / st.champion_file
    res = backend.evaluate(spec, path, path, run_dir / "jobs" / "final",
                           configs={"candidate": st.champion_config, "champion": st.champion_config},
                           peers=True)
    log.append("final", candidate_id=st.champion_id, candidate_file=st.champion_file, result=res,
               diagnosis=of_result(res, "candidate", st.cost) if res.get("ok") else None)
    return res


def final_summary(st: State, fres: dict | None, speedup: float | None, synthetic: bool) -> str:
    """The final terminal line: the champion's median beside the best peer's, both from one job
    (the final job, or the baseline's when the baseline is still the champion); the baseline
    ratio is the loop's (means, as decided)."""
    block = (fres or {}).get("peers") if fres else (st.peers_block if st.champion_id == "baseline" else None)
    kernel = ((block or {}).get("kernels") or {}).get("candidate") or {}
    champ_ms = kernel.get("median_ms") or st.champion_profile.get("mean_ms")
    return briefing.final_line(champ_ms, speedup, (block or {}).get("peers") if kernel else None, synthetic)


def _no_research_note() -> str:
    import research
    return research.TUNER_NOTE


def _research_due(streak: int, spec: Spec) -> bool:
    import research
    return research.research_due(False, streak, int(spec.loop["research_after"]))


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in ("new", "check"):   # subcommands; `--spec S` is the loop
        import checkcmd
        import onramp
        return (onramp.main if argv[0] == "new" else checkcmd.main)(argv[1:])
    args = parse_args(argv)
    if not args.quiet:   # the LLM client logs one line per proposal on the kernloop.* loggers
        logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
        logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        return loop(args)
    except SpecError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (UserError, BackendError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        run_dir = getattr(args, "run_dir", None)
        where = f" (resume with: python orchestrator.py --resume {run_dir})" if run_dir else ""
        print(f"\ninterrupted{where}", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
