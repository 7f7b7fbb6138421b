"""A run's settings, fixed once: the command line's options (on --resume, filled from the run's own log), and what an ending run needs."""
from __future__ import annotations

import argparse
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Callable


@dataclass(frozen=True)
class RunConfig:
    """The options of `run`, as parsed and checked (orchestrator.parse_args); never changed after."""
    spec: str | None
    backend: str
    proposer: str
    iterations: int | None
    patience: int | None
    max_minutes: float | None
    out: str
    seed: int
    resume: str | None
    parallel: int | None
    batch: int | None
    search: str | None
    quiet: bool

    @classmethod
    def of(cls, ns: argparse.Namespace) -> RunConfig:
        return cls(**{f.name: getattr(ns, f.name) for f in fields(cls)})


@dataclass
class Ending:
    """What `run` needs however the run ends (Ctrl-C, an error, its last line), filled in as the
    run opens: its folder, the tag of its lines, how to close its backend and log an interrupt."""
    run_dir: Path | None = None
    tag: str = ""
    close: Callable[[], None] | None = None
    on_interrupt: Callable[[str], None] | None = None
