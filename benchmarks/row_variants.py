#!/usr/bin/env python3
"""Row templates side by side on the GPU: every config of each template file's space against the spec's peers and a copy of the same bytes, interleaved in one job (issue 43).

The tuner can only reach what its template and space hold. This times all of it at once, so a
template change is judged on its best config, not on the path one search took:

  KERNLOOP_NCU=off python3 benchmarks/row_variants.py --out $OUT/row_variants.json
  python3 benchmarks/row_variants.py --variant old=rownorm:/tmp/rownorm_old.py --specs rmsnorm --out F

Each spec's first shape; inputs as the spec draws them (bf16); every kernel checked against the
float32 reference at the spec's tolerance before it is timed; flushed L2 and the checker's settle
spin before each call (checker.timing), order alternating every rep (checker.peers.interleave).
"""
from __future__ import annotations

import argparse
import importlib.util
import itertools
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks import record  # noqa: E402  (commit, versions, device, command)

FAMILY = {"softmax": "softmax", "rmsnorm": "rownorm", "layernorm": "rownorm"}
CONSTANTS = {"softmax": {"LOG": False}, "rmsnorm": {"LAYER": False, "HAS_W": True, "HAS_B": False, "EPS": 1e-6},
             "layernorm": {"LAYER": True, "HAS_W": True, "HAS_B": True, "EPS": 1e-5}}


def load(path: Path, name: str, constants: dict):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for k, v in constants.items():
        setattr(mod, k, v)
    return mod


def configs(family: str, dims: dict) -> list[dict]:
    from kernloop.families.template import SPACES
    space, allowed, _default = SPACES[family](dims)
    return [c for c in (dict(zip(space, v)) for v in itertools.product(*space.values())) if allowed(c)]


def kernel_call(mod, spec_name: str, cfg: dict):
    def call(x, w=None, b=None):
        mod.CONFIG = cfg   # module-global, as the template's launcher reads it
        return mod._launch(x) if spec_name == "softmax" else mod._launch(x, w, b if b is not None else x, x.shape[-1], x)
    return call


def one_spec(torch, name: str, variants: dict, reps: int, warmup: int) -> dict:
    import yaml
    from checker import peers as P, timing
    from checker.floor import copy_of
    spec = yaml.safe_load((ROOT / "specs" / f"{name}.yaml").read_text())
    dims = spec["shapes"][0]
    M, N = dims["M"], dims["N"]
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(M, N, device=dev, generator=g).to(torch.bfloat16)
    w = ((torch.rand(N, device=dev, generator=g) * 2 - 1) * 2).to(torch.bfloat16)
    b = torch.randn(N, device=dev, generator=g).to(torch.bfloat16)
    args = {"softmax": (x,), "rmsnorm": (x, w), "layernorm": (x, w, b)}[name]
    import torch.nn.functional as F
    ref = eval(spec["reference"], {"torch": torch, "F": F}, {k: v.float() for k, v in zip("xwb", args)})
    tol = spec["tolerance"]["rel_l2"]
    peers, skipped = P.build(torch, spec)
    kept, more, rel = P.screen(torch, peers, list(args), ref)
    skipped.update(more)
    flush = timing.Flusher(torch, dev, "read", settle_cycles=timing.SETTLE_CYCLES)
    calls, errors, labels = {}, {}, {}
    for label, fn in kept.items():
        calls[f"peer {label}"] = P.event_call(torch, fn, args, flush, timing.timed_call)
    nbytes = 2 * sum(a.numel() for a in args) + 2 * M * N
    calls["copy floor"] = P.event_call(torch, copy_of(torch, nbytes, dev), (), flush, timing.timed_call)
    for vlabel, (family, path) in variants.items():
        if family != FAMILY[name]:
            continue
        mod = load(path, f"{vlabel}_{name}", CONSTANTS[name])
        for cfg in configs(family, {"M": M, "N": N}):
            key = f"{vlabel} " + " ".join(f"{k}={v}" for k, v in cfg.items() if k != "CHUNK" or N > 16384)
            fn = kernel_call(mod, name, cfg)
            try:
                out = fn(*args).float()
                err = float(torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref))
            except Exception as e:   # noqa: BLE001 - one config failing must not lose the others
                errors[key] = f"{type(e).__name__}: {str(e)[:200]}"
                continue
            if not err <= tol:
                errors[key] = f"rel-L2 {err:.3g} > {tol}"
                continue
            calls[key], labels[key] = P.event_call(torch, fn, args, flush, timing.timed_call), cfg
    samples, failed, _w = P.interleave(calls, warmup, reps, optional=[k for k in calls if k.startswith("peer ")])
    med = {k: statistics.median(v) for k, v in samples.items()}
    return {"shape": dims, "bytes": nbytes, "median_ms": med, "configs": labels, "errors": errors,
            "peer_rel_l2": rel, "skipped": {k: str(v) for k, v in {**skipped, **failed}.items()}}


def table(res: dict) -> str:
    lines = [f"{'spec':10} {'what':46} {'median ms':>10} {'vs floor':>9}"]
    for name, r in res["specs"].items():
        med, floor = r["median_ms"], r["median_ms"].get("copy floor")
        best = {}
        for k, v in med.items():
            group = k.split(" ")[0] if not k.startswith(("peer", "copy")) else k
            if group not in best or v < med[best[group]]:
                best[group] = k
        for k in sorted(best.values(), key=med.get):
            lines.append(f"{name:10} {k[:46]:46} {med[k]:10.4f} {floor / med[k] if floor else 0:9.3f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--specs", default="softmax,rmsnorm,layernorm")
    ap.add_argument("--variant", action="append", default=[], metavar="LABEL=FAMILY:PATH",
                    help="a template file to time beside the package's own (repeatable)")
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    import torch
    from checker.peers import add_sites
    add_sites()
    pkg = ROOT / "kernloop" / "families" / "kernels"
    variants = {"softmax": ("softmax", pkg / "softmax.py"), "rownorm": ("rownorm", pkg / "rownorm.py")}
    for v in a.variant:
        label, rest = v.split("=", 1)
        family, path = rest.split(":", 1)
        variants[label] = (family, Path(path))
    res = {"what": "every config of each row template beside the spec's peers and a copy of the same bytes, "
                   "medians of interleaved flushed calls", "synthetic": False,
           "variants": {k: [f, str(p.relative_to(ROOT) if p.is_relative_to(ROOT) else p.name)]
                        for k, (f, p) in variants.items()}, "specs": {}}
    for name in a.specs.split(","):
        try:
            res["specs"][name] = one_spec(torch, name, variants, a.reps, a.warmup)
        except Exception as e:   # noqa: BLE001 - one spec failing must not lose the others
            res.setdefault("errors", {})[name] = f"{type(e).__name__}: {str(e)[:500]}"
            print(f"{name}: {res['errors'][name]}", flush=True)
        record.write(a.out, res, [sys.argv[0], *(argv if argv is not None else sys.argv[1:])])
    print(table(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
