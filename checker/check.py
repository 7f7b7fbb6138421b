#!/usr/bin/env python3
"""KernLoop checker entry: runs the judge (judge.py), which imports the candidate and the
champion only in worker processes of their own (worker.py). Kept under this name so every
backend and Nebius job starts the checker the same way; the flags are the judge's.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from judge import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
