#!/usr/bin/env python3
"""KernLoop's command line: run (the default), new, check, page, mcp, doctor, model and apply; one `error:` line and exit 2 for every user error.

  python orchestrator.py --spec specs/matmul.yaml  (= python orchestrator.py run --spec ...), --resume runs/<id>
  python orchestrator.py new NAME --from MODULE:FUNCTION --shape 4096x8192 --dtype bf16
  python orchestrator.py check --spec specs/NAME.yaml KERNEL.py
  python orchestrator.py page runs/<id> [--index]      kernloop mcp  (MCP over stdio, for agents)
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from kernloop.standing import briefing
from kernloop import contract
from kernloop import decision
from kernloop.loop import interrupts
import research
from kernloop.loop import resume, scheduler, secondlook
from kernloop import settings
from kernloop import needs
from kernloop.errors import ArgParser, KernLoopError, report, wrap_warnings
from kernloop.standing.diagnosis import compulsory_bytes, of_result
from kernloop.loop.factories import make_backend, make_proposer
from kernloop.loop.finaljob import final_job, final_summary
from kernloop.loop.state import State
from kernloop.loop.iteration import candidate_event, evaluate_judged, proposal_context, run_iteration  # noqa: F401  (run_iteration: one iteration, for tests and benchmarks)
from kernloop.loop.runconfig import Ending, RunConfig
from kernloop.loop.runfolder import (LIBRARY_LOG, RunFolderError, check_baseline, judge_baseline, log_to_file, start_run,
                                     versions, write_judged_copy)
from kernloop.spec import Spec, load_spec
from kernloop.loop import terminal
from kernloop.loop.terminal import baseline_line, status_line
from kernloop.trajectory import RunLog, end_run
from kernloop.propose.tuner import Tuner
from kernloop.propose.proposer import Proposer
from kernloop.backends.local import Backend


# ---------------------------------------------------------------- setup

COMMANDS = """commands:
  run      (the default) optimize a spec's kernel: propose, check, promote
  new      write specs/NAME.yaml from a function or a KernelBench problem
  check    one kernel file through the contract and the full checker
  page     re-render a run's page and the runs index
  mcp      serve the judge and the loop to a coding agent over MCP (stdio)
  model    capture a model's operators into cards ranked by what each could gain it; --run: the loop on each
  apply    check (and on a GPU time) a model with its cards' verified winners swapped in, against eager and Amdahl
  doctor   what is installed and usable here (GPU, Triton, ncu, peers, Ray, nebius, LLM), and what is missing
`python orchestrator.py COMMAND --help` (or `kernloop COMMAND --help`) for a command's options."""


def parse_args(argv=None) -> RunConfig:
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
    p.add_argument("--search", choices=["tree", "chain"],
                   help="which candidate is the next parent (default: the spec's loop.search, tree)")
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
    return RunConfig.of(args)


def render_page(run_dir: Path) -> Path | None:
    """Re-render the page; a page problem must never stop the loop."""
    try:
        from kernloop import page
        return page.render_run(run_dir)
    except Exception as e:  # noqa: BLE001 - report and go on
        report("warning", f"page not rendered: {type(e).__name__}: {e}")
        return None


# ---------------------------------------------------------------- main

@dataclass
class Run:
    """One run's parts, made once by `open_run`; the loop's steps below read them and the state."""

    cfg: RunConfig
    ending: Ending
    spec: Spec
    run_dir: Path
    log: RunLog
    st: State
    backend: Backend
    backend_why: str
    proposer: Proposer
    proposer_note: str
    researcher: research.Researcher | None
    say: Callable[[str], None]
    budget: int
    patience: int
    min_gain: float
    sigma: float
    parallel: int
    batch: int
    resume_events: list[dict]
    before_s: float = 0.0            # the earlier parts' wall time (--resume)
    interruptions: list[dict] = field(default_factory=list)
    t_start: float = field(default_factory=time.monotonic)
    fatal: str | None = None         # set by `record`: the run ends on it
    needs_notes: list[str] = field(default_factory=list)   # optional packages missing: what that disables

    @property
    def tuner(self) -> Tuner | None:
        return self.proposer if isinstance(self.proposer, Tuner) else None

    @property
    def many(self) -> bool:   # K or B above 1: run_start logs them (K = B = 1 logs nothing new)
        return self.parallel > 1 or self.batch > 1

    def duration_s(self) -> float:
        return self.before_s + time.monotonic() - self.t_start


def loop(cfg: RunConfig, ending: Ending) -> int:
    """Open the run, judge its baseline, then one iteration after another until a rule stops it."""
    run = open_run(cfg, ending)
    begin(run)
    if not run.st.baseline_done:
        run_baseline(run)
    if not run.cfg.resume and run.researcher is not None:
        do_research(run, "start")
        render_page(run.run_dir)
    while not (rule := stop(run)):   # the one loop: up to `parallel` in flight (1: one at a time),
        run_many(run)                 # `batch` a job, until a stop rule (the one read here)
    return finish(run, rule)


def resolve_spec(cfg: RunConfig) -> tuple[RunConfig, Spec, str | None, list[dict]]:
    """The settings, the spec, the run id and the earlier events: from the run's log on --resume
    (its options fill those not given again), else from --spec (its baseline checked first)."""
    if not cfg.resume:
        spec = load_spec(cfg.spec)
        check_baseline(spec)
        return cfg, spec, None, []
    run_dir = Path(cfg.resume).resolve()
    resume_events, rs = resume.load(run_dir)   # a ResumeError is one line, exit 2
    cfg = resume.take_options(cfg, rs, run_dir)
    return cfg, load_spec(resume.spec_path(rs, run_dir)), rs["run_id"], resume_events


def open_run(cfg: RunConfig, ending: Ending) -> Run:
    """Everything a run needs before its first event: settings, spec, backend, proposer,
    researcher, run folder, log, terminal printer, state; `ending` learns what the end needs."""
    settings.validate()   # every variable the run may read, before any run folder exists
    cfg, spec, run_id, resume_events = resolve_spec(cfg)
    if cfg.search:   # --search (or, on --resume, the run's own): over the spec's loop.search
        spec = dataclasses.replace(spec, loop={**spec.loop, "search": cfg.search})
    ending.run_dir = Path(cfg.resume).resolve() if cfg.resume else None   # Ctrl-C from here: how to resume
    found = needs.probe(settings.get("KERNLOOP_SITE"))
    here = cfg.backend in ("auto", "local", "synthetic")   # the checker runs on this machine
    if missing := needs.errors(found, needs_triton=here, llm=False):
        raise KernLoopError(missing[0])   # one line naming what to pip install, exit 2
    backend, backend_why = make_backend(cfg.backend, seed=cfg.seed)
    if cfg.resume:   # not chosen on this command line: the run's own, from its log
        backend_why = "the resumed run's backend, from its log: " + backend_why.replace(
            "backend chosen on the command line: ", "")
    ending.close = backend.close   # whatever way the run ends (run)
    # The same seed on --resume: the tuner's state is rebuilt by replaying its proposals.
    proposer, proposer_note = make_proposer(cfg.proposer, spec, cfg.seed)
    # The tuner only changes numbers inside the search space: research would spend Tavily
    # credits on notes nobody reads, so it runs only for an LLM proposer.
    researcher = None if isinstance(proposer, Tuner) else research.Researcher.from_env()
    notes = needs.notes(found, llm=researcher is not None, tavily_key=bool(settings.get("TAVILY_API_KEY")),
                        libs_named=needs.libs_named(spec.compare),
                        times_peers=backend.name == "local" and backend.times_peers)
    if researcher is not None and resume_events:
        researcher.remember(resume_events)   # never re-send a query this run already sent
    run_dir = start_run(cfg.out, spec) if not cfg.resume else Path(cfg.resume).resolve()
    run_id = run_id or run_dir.name
    ending.run_dir = run_dir   # for the resume hint on Ctrl-C
    log = RunLog(run_dir / "run.jsonl", run_id, backend.name, backend.synthetic)
    ending.tag = tag = "SYNTHETIC " if backend.synthetic else ""
    log_to_file(run_dir / LIBRARY_LOG)   # library logging (the LLM client, httpx): off the terminal
    if backend.say is not None:   # the Nebius backend's progress lines (stderr)
        backend.say = terminal.printer(tag, stream=sys.stderr)
    st = State(compulsory_bytes(spec), backend.synthetic)
    st.configure(spec, isinstance(proposer, Tuner), cfg.seed)   # the torch start, the search tree's settings
    run = Run(cfg, ending, spec, run_dir, log, st, backend, backend_why, proposer, proposer_note, researcher,
              say=terminal.printer(tag, quiet=cfg.quiet),   # every line tagged, within 120 columns
              budget=spec.loop["iterations"] if cfg.iterations is None else cfg.iterations,
              patience=spec.loop["patience"] if cfg.patience is None else cfg.patience,
              min_gain=float(spec.loop["min_gain"]), sigma=float(spec.loop["sigma"]),
              parallel=spec.loop.get("parallel", 1) if cfg.parallel is None else cfg.parallel,
              batch=cfg.batch or 1, resume_events=resume_events)
    run.needs_notes = notes
    if resume_events:
        run.before_s, run.interruptions = resume.previous_parts(resume_events)
    return run


def begin(run: Run) -> None:
    """Say what runs, then log run_start (or, on --resume, replay the log and log resume); from
    here an interrupt ends the run resumably."""
    say, st = run.say, run.st
    say(f"kernloop: {run.backend_why}")
    say(f"kernloop: {run.proposer_note}")
    for line in run.needs_notes:   # an optional package missing: what it disables, the run goes on
        say(f"kernloop: {line}")
    if run.tuner is not None:
        say("kernloop: research off (the tuner changes numbers only; it reads no notes)")
    elif run.researcher is not None:
        say(f"kernloop: research source: {run.researcher.source}")
    def interrupted(why: str) -> None:   # Ctrl-C or SIGTERM: the run ends, resumable
        end_run(run.log, "interrupted", why, **st.end_fields(), duration_s=run.duration_s(),
                interruptions=run.interruptions)
        render_page(run.run_dir)
    # run_start (or resume) and the handler that ends it come together: a signal while the first
    # line is written (its fsync can take a while, and the log is visible from its write) waits
    with interrupts.held():
        if not run.cfg.resume:
            log_run_start(run)
        else:
            st.replay(run.resume_events, run.tuner, run.run_dir)
            run.log.append("resume", after_iteration=st.done, previous=run.interruptions[-1]["how"],
                           argv=sys.argv[1:])
            say(f"kernloop: resuming {terminal.short_path(run.run_dir)} after iteration {st.done} "
                f"(champion {st.champion_id})")
        run.ending.on_interrupt = interrupted
    render_page(run.run_dir)


def log_run_start(run: Run) -> None:
    cfg, researcher, desc = run.cfg, run.researcher, run.proposer.describe()
    run.log.append("run_start", spec=run.spec.summary(), proposer=desc.get("proposer"),
                   model=desc.get("model"), endpoint_host=desc.get("endpoint_host"),
                   proposer_note=run.proposer_note, proposer_choice=cfg.proposer,
                   backend_note=run.backend_why, device=run.backend.device, seed=cfg.seed,
                   iterations=run.budget, patience=run.patience, min_gain=run.min_gain, sigma=run.sigma,
                   max_minutes=cfg.max_minutes, search=run.st.search,
                   **({"parallel": run.parallel, "batch": run.batch} if run.many else {}),
                   argv=sys.argv[1:], versions=versions(),
                   research=researcher.describe() if researcher else None,
                   research_note=None if researcher else research.TUNER_NOTE)


def run_baseline(run: Run) -> None:
    """The baseline's job: logged; the run ends (exit 2) if it fails, else it is the champion."""
    st, run_dir, spec, backend = run.st, run.run_dir, run.spec, run.backend
    st.champion_config = contract.read_config((run_dir / "baseline.py").read_bytes())
    st.champion_sha256 = judge_baseline(run_dir, spec)   # None: the torch reference
    base = None if st.torch_start else run_dir / "baseline.py"   # None: the torch reference
    if settings.get("KERNLOOP_SIGHT_CACHE") == "1":
        backend.sight_cache = run_dir.parent / ".cache" / "sight"   # the baseline's look, reused
    sha = st.champion_sha256
    bres = evaluate_judged(backend, spec, base, base, run_dir / "jobs" / "baseline",
                           {"candidate": sha, "champion": sha},
                           configs={"candidate": st.champion_config, "champion": st.champion_config},
                           **({"peers": True} if backend.times_peers else {}))
    backend.sight_cache = None
    run.log.append("baseline", candidate_id="baseline", candidate_file="baseline.py",
                   candidate_sha256=sha, candidate_config=st.champion_config, result=bres,
                   diagnosis=of_result(bres, "candidate", st.cost) if bres.get("ok") else None)
    render_page(run_dir)
    if not bres.get("ok"):
        run.ending.on_interrupt = None
        end_run(run.log, "baseline_failed", f"baseline failed: {bres.get('error')}", **st.end_fields(),
                duration_s=run.duration_s(), interruptions=run.interruptions)
        render_page(run_dir)
        raise KernLoopError(f"the baseline {spec.baseline} does not pass the checker: "
                            f"{bres.get('error')} (run folder: {run_dir})")
    interrupts.check()
    st.baseline_done = True
    st.champion_profile = st.profile_from(bres)
    st.baseline_mean = st.champion_profile.get("mean_ms")
    st.stand(bres)
    run.say(baseline_line(bres, spec, backend.synthetic, torch=st.torch_start))
    pb = st.peers_block or {}
    for text in briefing.peers_lines(pb.get("peers"), None, pb.get("skipped"), pb.get("best")):
        run.say(text)


def do_research(run: Run, trigger: str) -> None:
    fields = run.researcher.research(run.spec, trigger, list(run.st.rejections), run.backend.device)
    run.log.append("research", before_iteration=run.st.done + 1, **fields)
    if fields.get("notes"):
        run.st.notes = fields["notes"]
    run.say(f"research ({fields.get('source')}, {trigger}): "
            + (f"{len(fields.get('notes') or '')} chars of notes" if fields.get("notes")
               else f"no notes ({fields.get('error')})"))


def stop(run: Run) -> tuple[str, str] | None:
    """The rule that ends the run now, if one does."""
    interrupts.check()   # a signal whose handler was swallowed ends the run here
    st, max_minutes = run.st, run.cfg.max_minutes
    return decision.stop_rule(len(st.seen), run.budget, st.since_promotion,
                              run.patience, bool(run.tuner and run.tuner.exhausted_all), run.fatal, run.duration_s(),
                              max_minutes * 60 if max_minutes else None, floor=st.floor_stop())   # speed of light


def record(run: Run, ev: dict, is_fatal: bool) -> None:
    """Log one decided iteration, learn from it, say it, research if due; then ask for a
    promoted candidate's second look (it is logged when it lands: secondlook.join)."""
    st = run.st
    secondlook.join(run.backend, run.log, st)
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
    with interrupts.held():   # run_end's iterations_done counts every logged iteration
        run.log.append("iteration", **st.place(ev))   # its node in the search tree: timed_against, node_time
        st.apply(ev, run.tuner)
    secondlook.ask(run.backend, run.spec, ev, run.run_dir)
    run.say(status_line(ev, len(st.seen), run.budget, run.backend.synthetic))
    if is_fatal:
        run.fatal = ev["proposal"].get("error") or "fatal proposer error"
    elif stop_llm := decision.transport_stop(st.transport_failures, st.refused, st.llm_answered):
        run.fatal = stop_llm
    elif run.researcher is not None and st.streak and len(st.seen) < run.budget \
            and research.research_due(False, st.streak, int(run.spec.loop["research_after"])):
        do_research(run, "streak")
    render_page(run.run_dir)


class RunHooks(scheduler.Hooks):
    """The loop's hooks on this run: its state, its log, its terminal."""

    def __init__(self, run: Run):
        self.run = run

    def context(self, n):
        return proposal_context(n, self.run.st, self.run.spec, self.run.run_dir)

    def prepare(self, n, ctx, prop, t0):
        return candidate_event(n, ctx, prop, self.run.spec, self.run.run_dir, t0)

    def record(self, ev, fatal):
        record(self.run, ev, fatal)

    def idle(self):
        secondlook.join(self.run.backend, self.run.log, self.run.st)   # a second look that landed

    def say(self, text):
        self.run.say(text)

    def stop(self):
        return (stop(self.run) or (None, None))[1]

    def seen(self):
        return self.run.st.seen

    def champion(self):
        st = self.run.st
        return st.champion_id, None if st.champion_is_torch else st.champion_file, st.champion_sha256


def run_many(run: Run) -> None:
    """The scheduler keeps up to `parallel` candidates in flight, `batch` a job, until a stop rule."""
    scheduler.run_many(RunHooks(run), run.proposer, run.tuner is not None, run.backend, run.spec, run.run_dir,
                       run.parallel, run.batch, run.budget, run.min_gain, run.sigma)


def finish(run: Run, rule: tuple[str, str]) -> int:
    """champion.py, the final job, run_end, the page and the runs index, the summary lines."""
    st, run_dir, backend = run.st, run.run_dir, run.backend
    run.ending.on_interrupt = None
    stopped, why = rule
    if not st.champion_is_torch:   # a torch champion has no kernel file; champion.py is
        try:                         # written only from the bytes that were judged
            write_judged_copy(run_dir / st.champion_file, run_dir / "champion.py", st.champion_sha256)
        except (RunFolderError, OSError) as e:
            report("warning", str(e))
    champ_mean = st.champion_profile.get("mean_ms")
    secondlook.join(backend, run.log, st)
    fres = final_job(st, run.spec, backend, run_dir, run.log, stopped)
    if run.ending.close is not None:
        run.ending.close()   # a warm judge ends here: second looks still waiting are logged dropped
    secondlook.join(backend, run.log, st)
    speedup = decision.speedup(st.baseline_mean, champ_mean)
    line = final_summary(st, fres, speedup, backend.synthetic)
    end_run(run.log, stopped, why, **st.end_fields(), duration_s=run.duration_s(),
            interruptions=run.interruptions, final_line=line)
    page_path = render_page(run_dir)
    try:
        from kernloop import page
        page.render_index(run_dir.parent)   # runs/index.html lists every run
    except Exception as e:  # noqa: BLE001 - the index is a convenience, never fatal
        report("warning", f"runs index not rendered: {e}")
    out = terminal.printer(run.ending.tag)   # the summary is printed even with --quiet
    out(f"done: {why}.")
    out(f"{st.champion_id}: {line}" + (" (synthetic run: modeled, not measured)" if backend.synthetic else ""))
    out("champion: the torch reference (no candidate beat it)" if st.champion_is_torch
        else f"champion kernel: {terminal.short_path(run_dir / 'champion.py')}")
    out(f"page: {terminal.short_path(page_path or run_dir / 'trajectory.html')}")
    if run.fatal:
        report("error", f"{run.ending.tag}{run.fatal}")   # one error, as every error: (scripts grep it)
        return 1
    return 0


def run(argv: list[str]) -> int:
    """`run`: the loop, with Ctrl-C and SIGTERM as one interrupt that ends the run cleanly."""
    cfg, ending = parse_args(argv), Ending()
    interrupts.install()
    # Library logging (the LLM client, httpx) never reaches the terminal: nowhere, then the run's kernloop.log.
    logging.root.addHandler(logging.NullHandler())
    logging.root.setLevel(logging.INFO)
    try:
        return loop(cfg, ending)
    except KeyboardInterrupt as e:
        term = isinstance(e, interrupts.Terminated)
        interrupts.ignore()   # a second Ctrl-C must not tear run_end
        if ending.on_interrupt is not None:
            ending.on_interrupt("interrupted by " + ("SIGTERM" if term else "Ctrl-C (SIGINT)"))
        print(file=sys.stderr)
        terminal.printer(ending.tag, stream=sys.stderr)("interrupted" + ("; resume with:" if ending.run_dir else ""))
        if ending.run_dir:   # the same absolute path the page shows: it works from any directory
            print(f"{ending.tag}  python orchestrator.py --resume {ending.run_dir}",
                  file=sys.stderr)   # a command to copy: never wrapped
        return 143 if term else 130
    finally:
        if ending.close is not None:   # a warm judge and its workers go with the run
            ending.close()


def command(name: str):
    """The main function of a subcommand (imported when chosen)."""
    if name == "new":
        from kernloop.onramp.new import main
    elif name == "check":
        from kernloop.onramp.checkcmd import main
    elif name == "page":
        from kernloop.page import main
    elif name == "mcp":
        from kernloop.onramp.mcpserver import main
    elif name == "doctor":
        from kernloop.onramp.doctor import main
    elif name in ("model", "apply"):
        from kernloop.onramp import applycmd, modelcmd
        main = modelcmd.main if name == "model" else applycmd.main
    else:
        main = run
    return main


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    name = argv[0] if argv and argv[0] in ("run", "new", "check", "page", "mcp", "doctor", "model", "apply") else "run"
    rest = argv[1:] if argv[:1] == [name] else argv   # `--spec S` alone is `run --spec S`
    wrap_warnings()   # a library's warning is a `warning:` line within 120 columns too
    try:
        return command(name)(rest)
    except KernLoopError as e:   # every user error: one line, exit 2
        report("error", str(e))
        return 2


if __name__ == "__main__":
    sys.exit(main())
