"""Which matmul structure could close the tuner's last 5% to cuBLAS on a Hopper GPU (issue 43).

Times, side by side in one process, C = A @ B over bf16 4096^3 (and the spec's skinny 17x4096x4096):
torch.mm (cuBLAS), the family template (kernloop/families/kernels/matmul.py: one program per tile
with pointer loads, and its PERSISTENT=1 path) at a few configs, and the persistent TMA kernel of
benchmarks/by_hand/matmul.py at a few configs. Each is checked against a float32 reference first.
Timing: triton.testing.do_bench (L2 cleared before each rep), median of its reps, the variants
interleaved over rounds. A probe, not a result the README cites:

  python3 benchmarks/probes/matmul_variants.py --out $OUT/matmul_variants.json
"""
import argparse
import importlib.util
import json
import statistics
import sys
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parents[2]


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


TEMPLATE = load(ROOT / "kernloop/families/kernels/matmul.py", "tmpl_matmul")
BY_HAND = load(ROOT / "benchmarks/by_hand/matmul.py", "hand_matmul")


def template(cfg):
    def f(a, b):
        TEMPLATE.CONFIG = cfg
        return TEMPLATE._launch(a, b, None)
    return f


def by_hand(cfg):
    def f(a, b):
        BY_HAND.CONFIG = cfg
        return BY_HAND.matmul(a, b)
    return f


def variants():
    t = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3, PERSISTENT=0)
    h = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3, USE_TMA=True)
    out = {"torch.mm": torch.mm, "template s3": template(t), "template s4": template({**t, "num_stages": 4}),
           "template 128x256 s3": template({**t, "BLOCK_N": 256})}
    for name, over in (("template p1 128x256 s3", {"BLOCK_N": 256}), ("template p1 128x256 s4", {"BLOCK_N": 256, "num_stages": 4}),
                       ("template p1 128x128 s4", {"num_stages": 4}), ("template p1 128x128 s5", {"num_stages": 5}),
                       ("template p1 256x128 s3", {"BLOCK_M": 256})):
        out[name] = template({**t, "PERSISTENT": 1, **over})
    for name, over in (("tma 128x256x64 s3", {}), ("tma 128x256x64 s4", {"num_stages": 4}),
                       ("tma 128x128x64 s4", {"BLOCK_N": 128, "num_stages": 4}),
                       ("tma 128x128x64 s5", {"BLOCK_N": 128, "num_stages": 5}),
                       ("tma 128x256x64 s3 w4", {"num_warps": 4}),
                       ("tma 256x128x64 s3", {"BLOCK_M": 256, "BLOCK_N": 128}),
                       ("tma 128x256x64 s3 g16", {"GROUP_M": 16}),
                       ("ptr 128x256x64 s3", {"USE_TMA": False})):
        out[name] = by_hand({**h, **over})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    doc = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__,
           "shapes": {}}
    for M, N, K in ((4096, 4096, 4096), (17, 4096, 4096)):
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        y = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
        ref = x.float() @ y.float()
        rows, times = {}, {}
        for name, f in variants().items():
            try:
                got = f(x, y).float()
                rows[name] = {"rel_l2": float((got - ref).norm() / ref.norm())}
            except Exception as e:   # noqa: BLE001 - a probe: a variant that fails is a row that says so
                rows[name] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
        for _ in range(a.rounds):
            for name, f in variants().items():
                if "error" not in rows[name]:
                    times.setdefault(name, []).append(triton.testing.do_bench(lambda: f(x, y), return_mode="median"))
        for name, ts in times.items():
            rows[name].update(ms=statistics.median(ts), rounds=ts)
        base = rows["torch.mm"]["ms"]
        for r in rows.values():
            if "ms" in r:
                r["vs_cublas"] = base / r["ms"]
        doc["shapes"][f"{M}x{N}x{K}"] = rows
        print(f"{M}x{N}x{K}")
        for name, r in rows.items():
            print(f"  {name:<24} " + (f"{r['ms']:.4f} ms  {r['vs_cublas']:.3f}x  rel_l2 {r['rel_l2']:.1e}"
                                      if "ms" in r else r["error"]))
    Path(a.out).write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
