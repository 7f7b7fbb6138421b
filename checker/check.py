#!/usr/bin/env python3
"""KernLoop checker entry, `python -m checker.check` (cwd: the folder holding the package): runs
the judge (judge.py), which imports the candidate and the champion only in worker processes of
their own (`python -m checker.worker`). Kept under this name so every backend and Nebius job
starts the checker the same way; the flags are the judge's.
"""
import sys

from .judge import main

if __name__ == "__main__":
    sys.exit(main())
