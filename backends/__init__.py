"""Backends: where the checker runs (local GPUs, the synthetic interpreter with its H200 model, Nebius batches), the child-process sandbox, and the one result-line parser they share."""
