#!/usr/bin/env python3
"""KernLoop's command line: run (the default), new, check and page; one `error:` line and exit 2 for every user error.

  python orchestrator.py --spec specs/matmul.yaml          (= python orchestrator.py run --spec ...)
  python orchestrator.py --resume runs/<id>
  python orchestrator.py new NAME --from MODULE:FUNCTION --shape 4096x8192 --dtype bf16
  python orchestrator.py new NAME --from-kernelbench PROBLEM.py
  python orchestrator.py check --spec specs/NAME.yaml KERNEL.py
  python orchestrator.py page runs/<id> [--index]
"""
from __future__ import annotations

import argparse
import logging
import platform
import sys
import time
from pathlib import Path

from standing import briefing
import contract
import decision
from loop import interrupts
import research
from loop import resume, secondlook
import settings
from errors import ArgParser, KernLoopError
from standing.diagnosis import compulsory_bytes, of_result
from loop.factories import make_backend, make_proposer
from loop.finaljob import final_job, final_summary
from loop.state import State
from loop.iteration import candidate_event, evaluate_judged, proposal_context, run_iteration
from loop.runfolder import RunFolderError, check_baseline, judge_baseline, start_run, write_judged_copy
from spec import load_spec
from loop import terminal
from loop.terminal import baseline_line, status_line
from trajectory import RunLog, end_run
from propose.tuner import Tuner


# ---------------------------------------------------------------- setup

COMMANDS = """commands:
  run      (the default) optimize a spec's kernel: propose, check, promote
  new      write specs/NAME.yaml from a function or a KernelBench problem
  check    one kernel file through the contract and the full checker
  page     re-render a run's page and the runs index (also: python page.py)
`python orchestrator.py COMMAND --help` for a command's options."""


def parse_args(argv=None):
    p = ArgParser(prog="orchestrator.py [run]", description="Optimize a Triton kernel with an agent loop.",
                  epilog=COMMANDS, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--spec", help="spec YAML (e.g. specs/matmul.yaml)")
    p.add_argument("--backend", default="auto",
                   choices=["auto", "local", "synthetic", "nebius", "ray"],
                   help="where candidates run: auto = local if a CUDA GPU is visible, else synthetic; "
                        "ray = a Ray cluster (RAY_ADDRESS, or a local one)")
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
    if args.patience is not None and args.patience < 0:
        p.error("--patience must be >= 0 (0 = off)")
    if args.max_minutes is not None and not 0 < args.max_minutes < float("inf"):
        p.error("--max-minutes must be > 0")
    for flag, value in (("--parallel", args.parallel), ("--batch", args.batch)):
        if value is not None and value < 1:
            p.error(f"{flag} must be >= 1")
    if args.seed < 0:
        p.error("--seed must be >= 0")
    return args


def render_page(run_dir: Path) -> Path | None:
    """Re-render the page; a page problem must never stop the loop."""
    try:
        import page
        return page.render_run(run_dir)
    except Exception as e:  # noqa: BLE001 - report and go on
        print(f"warning: page not rendered: {type(e).__name__}: {e}", file=sys.stderr)
        return None


LIBRARY_LOG = "kernloop.log"   # in the run folder: what libraries log (httpx, the LLM client)


def log_to_file(path: Path) -> None:
    """Send library logging to `path` (appended; one handler per process)."""
    for h in list(logging.root.handlers):
        if getattr(h, "kernloop_file", False):
            logging.root.removeHandler(h)
            h.close()
    h = logging.FileHandler(path, encoding="utf-8", delay=True)
    h.kernloop_file = True
    h.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    logging.root.addHandler(h)


def versions() -> dict:
    v = {"python": platform.python_version()}
    for mod in ("torch", "triton", *(["ray"] if "ray" in sys.modules else [])):
        try:
            v[mod] = __import__(mod).__version__
        except Exception:   # noqa: BLE001 - a missing package is just not reported
            v[mod] = None
    return v


# ---------------------------------------------------------------- main

def loop(args) -> int:
    settings.validate()   # every variable the run may read, before any run folder exists
    resume_events: list[dict] = []
    if args.resume:
        run_dir = Path(args.resume).resolve()
        try:
            resume_events, rs = resume.load(run_dir)
            spec = load_spec(resume.spec_path(rs, run_dir))
        except resume.ResumeError as e:
            raise KernLoopError(str(e)) from None
        args.backend, args.seed = rs["backend"], rs.get("seed", 0)
        args.iterations = rs.get("iterations") if args.iterations is None else args.iterations
        args.proposer = rs.get("proposer_choice", "auto")
        args.patience = rs.get("patience") if args.patience is None else args.patience
        args.parallel = rs.get("parallel", 1) if args.parallel is None else args.parallel
        args.batch = rs.get("batch", 1) if args.batch is None else args.batch
        args.max_minutes = rs.get("max_minutes") if args.max_minutes is None else args.max_minutes
        run_id = rs["run_id"]
    else:
        spec = load_spec(args.spec)
        check_baseline(spec)
    budget = spec.loop["iterations"] if args.iterations is None else args.iterations
    patience = spec.loop["patience"] if args.patience is None else args.patience
    min_gain, sigma = float(spec.loop["min_gain"]), float(spec.loop["sigma"])
    parallel, batch = spec.loop.get("parallel", 1) if args.parallel is None else args.parallel, args.batch or 1
    many = parallel > 1 or batch > 1   # else the one-at-a-time loop, exactly as before

    backend, backend_why = make_backend(args.backend, seed=args.seed)
    args.close_backend = getattr(backend, "close", None)   # whatever way the run ends (run)
    # The same seed on --resume: the tuner's state is rebuilt by replaying its proposals.
    proposer, proposer_note = make_proposer(args.proposer, spec, args.seed)
    # The tuner only changes numbers inside the search space: research would spend Tavily
    # credits on notes nobody reads, so it runs only for an LLM proposer.
    researcher = None if isinstance(proposer, Tuner) else research.Researcher.from_env()
    if researcher is not None and resume_events:
        researcher.remember(resume_events)   # never re-send a query this run already sent
    if not args.resume:
        run_dir = start_run(args, spec)
        run_id = run_dir.name
    args.run_dir = run_dir   # for the resume hint on Ctrl-C
    log = RunLog(run_dir / "run.jsonl", run_id, backend.name, backend.synthetic)
    tag = "SYNTHETIC " if backend.synthetic else ""
    log_to_file(run_dir / LIBRARY_LOG)   # library logging (the LLM client, httpx): off the terminal
    say = terminal.printer(tag, quiet=args.quiet)   # every line tagged, within 120 columns
    args.tag = tag
    if hasattr(backend, "say"):   # the Nebius backend's progress lines (stderr)
        backend.say = terminal.printer(tag, stream=sys.stderr)
    say(f"kernloop: {backend_why}")
    say(f"kernloop: {proposer_note}")
    tuner = proposer if isinstance(proposer, Tuner) else None
    if tuner is not None:
        say("kernloop: research off (the tuner changes numbers only; it reads no notes)")
    elif researcher is not None:
        say(f"kernloop: research source: {researcher.source}")

    st = State(compulsory_bytes(spec), backend.synthetic)
    st.torch_start = spec.torch_baseline
    t_start = time.monotonic()
    before_s, interruptions = resume.previous_parts(resume_events) if resume_events else (0.0, [])
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
                   research_note=None if researcher else research.TUNER_NOTE)
    else:
        st.replay(resume_events, tuner, run_dir)
        log.append("resume", after_iteration=st.done, previous=interruptions[-1]["how"],
                   argv=sys.argv[1:])
        say(f"kernloop: resuming {terminal.short_path(run_dir)} after iteration {st.done} "
            f"(champion {st.champion_id})")

    def interrupted(why: str) -> None:   # Ctrl-C or SIGTERM: the run ends, resumable
        end_run(log, "interrupted", why, **st.end_fields(),
                duration_s=before_s + time.monotonic() - t_start, interruptions=interruptions)
        render_page(run_dir)
    args.on_interrupt = interrupted
    render_page(run_dir)

    if not st.baseline_done:
        st.champion_config = contract.read_config((run_dir / "baseline.py").read_bytes())
        st.champion_sha256 = judge_baseline(run_dir, spec)   # None: the torch reference
        base = None if st.torch_start else run_dir / "baseline.py"   # None: the torch reference
        if hasattr(backend, "sight_cache") and settings.get("KERNLOOP_SIGHT_CACHE") == "1":
            backend.sight_cache = run_dir.parent / ".cache" / "sight"   # the baseline's look, reused
        sha = st.champion_sha256
        bres = evaluate_judged(backend, spec, base, base, run_dir / "jobs" / "baseline",
                               {"candidate": sha, "champion": sha},
                               configs={"candidate": st.champion_config, "champion": st.champion_config},
                                **({"peers": True} if getattr(backend, "times_peers", False) else {}))
        if hasattr(backend, "sight_cache"):
            backend.sight_cache = None
        log.append("baseline", candidate_id="baseline", candidate_file="baseline.py",
                   candidate_sha256=sha, candidate_config=st.champion_config, result=bres,
                   diagnosis=of_result(bres, "candidate", st.cost) if bres.get("ok") else None)
        render_page(run_dir)
        if not bres.get("ok"):
            args.on_interrupt = None
            why = f"baseline failed: {bres.get('error')}"
            end_run(log, "baseline_failed", why, **st.end_fields(),
                    duration_s=before_s + time.monotonic() - t_start, interruptions=interruptions)
            render_page(run_dir)
            raise KernLoopError(f"the baseline {spec.baseline} does not pass the checker: "
                            f"{bres.get('error')} (run folder: {run_dir})")
        interrupts.check()
        st.baseline_done = True
        st.champion_profile = st.profile_from(bres)
        st.baseline_mean = st.champion_profile.get("mean_ms")
        st.stand(bres)
        say(baseline_line(bres, spec, backend.synthetic, torch=st.torch_start))
        for text in briefing.peers_lines((st.peers_block or {}).get("peers"), None,
                                         (st.peers_block or {}).get("skipped")):
            say(text)

    def do_research(trigger: str):
        if researcher is None:
            return
        fields = researcher.research(spec, trigger, list(st.rejections), backend.device)
        log.append("research", before_iteration=st.done + 1, **fields)
        if fields.get("notes"):
            st.notes = fields["notes"]
        say(f"research ({fields.get('source')}, {trigger}): "
            + (f"{len(fields.get('notes') or '')} chars of notes" if fields.get("notes")
               else f"no notes ({fields.get('error')})"))

    if not args.resume and researcher is not None:
        do_research("start")
        render_page(run_dir)

    fatal = None
    max_s = args.max_minutes * 60 if args.max_minutes else None

    def stop() -> tuple[str, str] | None:
        interrupts.check()   # a signal whose handler was swallowed ends the run here
        return decision.stop_rule(len(st.seen) if many else st.done, budget, st.since_promotion,
                                  patience, bool(tuner and tuner.exhausted), fatal,
                                  elapsed_s=before_s + time.monotonic() - t_start, max_s=max_s)

    def record(ev: dict, is_fatal: bool) -> None:
        """Log one decided iteration, learn from it, say it, research if due; then ask for a
        promoted candidate's second look (it is logged when it lands: secondlook.join)."""
        nonlocal fatal
        secondlook.join(backend, log, st)
        if ev["decision"]["promoted"]:
            ev["champion_id"] = ev["candidate_id"]
            ev["champion_mean_ms"] = ev["result"]["candidate"]["mean_ms"]
        else:
            ev["champion_id"] = st.champion_id
            ev["champion_mean_ms"] = st.champion_profile.get("mean_ms")
        ev["speedup_vs_baseline"] = decision.speedup(st.baseline_mean, ev["champion_mean_ms"])
        node = ((ev.get("result") or {}).get("backend_meta") or {}).get("node")
        if node:   # --backend ray: which node ran the job that decided it
            ev["node"] = node
        if ev["decision"]["promoted"]:
            ev["diagnosis"] = of_result(ev["result"], "candidate", st.cost)
        log.append("iteration", **ev)
        st.apply(ev, tuner)
        secondlook.ask(backend, spec, ev, run_dir)
        say(status_line(ev, len(st.seen), budget, backend.synthetic))
        if is_fatal:
            fatal = ev["proposal"].get("error") or "fatal proposer error"
        elif stop_llm := decision.transport_stop(st.transport_failures, st.refused,
                                                    st.llm_answered):
            fatal = stop_llm
        elif researcher is not None and st.streak and len(st.seen) < budget \
                and research.research_due(False, st.streak, int(spec.loop["research_after"])):
            do_research("streak")
        render_page(run_dir)

    if many:   # up to `parallel` candidates in flight, `batch` per job; ends on a stop rule
        from loop import scheduler
        scheduler.run_many(st, proposer, isinstance(proposer, Tuner), backend, spec, run_dir,
                           parallel, batch, budget, min_gain, sigma, record, stop, say,
                           lambda n: proposal_context(n, st, spec, run_dir),
                           lambda n, ctx, prop, t0: candidate_event(n, ctx, prop, spec, run_dir, t0),
                           idle=lambda: secondlook.join(backend, log, st))
    while not (rule := stop()):   # one at a time (with `many`: the rule that ended it is read)
        secondlook.join(backend, log, st)   # a second look that landed: this prompt has it
        ev, is_fatal = run_iteration(st.done + 1, st, spec, proposer, backend, run_dir,
                                     min_gain, sigma)
        record(ev, is_fatal)
    args.on_interrupt = None
    stopped, why = rule
    if not st.champion_is_torch:   # a torch champion has no kernel file; champion.py is
        try:                         # written only from the bytes that were judged
            write_judged_copy(run_dir / st.champion_file, run_dir / "champion.py", st.champion_sha256)
        except (RunFolderError, OSError) as e:
            print(f"warning: {e}", file=sys.stderr)
    champ_mean = st.champion_profile.get("mean_ms")
    secondlook.join(backend, log, st)
    fres = final_job(st, spec, backend, run_dir, log, stopped)
    if callable(args.close_backend):
        args.close_backend()   # a warm judge ends here: second looks still waiting are logged dropped
    secondlook.join(backend, log, st)
    speedup = decision.speedup(st.baseline_mean, champ_mean)
    line = final_summary(st, fres, speedup, backend.synthetic)
    end_run(log, stopped, why, **st.end_fields(), duration_s=before_s + time.monotonic() - t_start,
            interruptions=interruptions, final_line=line)
    page_path = render_page(run_dir)
    try:
        import page
        page.render_index(run_dir.parent)   # runs/index.html lists every run
    except Exception as e:  # noqa: BLE001 - the index is a convenience, never fatal
        print(f"warning: runs index not rendered: {e}", file=sys.stderr)
    out = terminal.printer(tag)   # the summary is printed even with --quiet
    out(f"done: {why}.")
    out(f"{st.champion_id}: {line}" + (" (synthetic run: modeled, not measured)" if backend.synthetic else ""))
    out("champion: the torch reference (no candidate beat it)" if st.champion_is_torch
        else f"champion kernel: {terminal.short_path(run_dir / 'champion.py')}")
    out(f"page: {terminal.short_path(page_path or run_dir / 'trajectory.html')}")
    if fatal:
        print(f"error: {tag}{fatal}", file=sys.stderr)   # one line, as every error: (scripts grep it)
        return 1
    return 0


def run(argv: list[str]) -> int:
    """`run`: the loop, with Ctrl-C and SIGTERM as one interrupt that ends the run cleanly."""
    args = parse_args(argv)
    interrupts.install()
    # Library logging (the LLM client's one line per proposal, httpx's requests) never reaches
    # the terminal: until the run folder exists it goes nowhere, then into its kernloop.log.
    logging.root.addHandler(logging.NullHandler())
    logging.root.setLevel(logging.INFO)
    try:
        return loop(args)
    except KeyboardInterrupt as e:
        term = isinstance(e, interrupts.Terminated)
        interrupts.ignore()   # a second Ctrl-C must not tear run_end
        on_interrupt = getattr(args, "on_interrupt", None)
        if on_interrupt is not None:
            on_interrupt("interrupted by " + ("SIGTERM" if term else "Ctrl-C (SIGINT)"))
        run_dir = getattr(args, "run_dir", None)
        print(file=sys.stderr)
        say = terminal.printer(getattr(args, "tag", ""), stream=sys.stderr)
        say("interrupted" + ("; resume with:" if run_dir else ""))
        if run_dir:   # the same absolute path the page shows: it works from any directory
            print(f"{getattr(args, 'tag', '')}  python orchestrator.py --resume {run_dir}",
                  file=sys.stderr)   # a command to copy: never wrapped
        return 143 if term else 130
    finally:
        close = getattr(args, "close_backend", None)
        if callable(close):   # a warm judge and its workers go with the run
            close()


def command(name: str):
    """The main function of a subcommand (imported when chosen)."""
    if name == "new":
        from onramp import new
        return new.main
    if name == "check":
        from onramp import checkcmd
        return checkcmd.main
    if name == "page":
        import page
        return page.main
    return run


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    name = argv[0] if argv and argv[0] in ("run", "new", "check", "page") else "run"
    rest = argv[1:] if argv[:1] == [name] else argv   # `--spec S` alone is `run --spec S`
    try:
        return command(name)(rest)
    except KernLoopError as e:   # every user error: one line, exit 2
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
