"""The judge and its workers, self-contained (stdlib, torch, Triton): shipped whole to where a kernel is timed."""
