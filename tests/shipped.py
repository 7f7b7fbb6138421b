"""The specs this repository ships, by name: tests read these and never glob `specs/`, where a
user's own `new gelu ...` spec (a `baseline: torch` one, say) may sit beside them."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHIPPED_SPECS = ("gemv", "layernorm", "matmul", "matmul_bias_gelu", "rmsnorm", "softmax")


def shipped_spec_paths() -> list[Path]:
    return [ROOT / "specs" / f"{name}.yaml" for name in SHIPPED_SPECS]
