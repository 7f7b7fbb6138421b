"""A deterministic performance model of one kernel launch on an H200, for the synthetic backend.

It is a MODEL, not a measurement: every number it produces is labelled synthetic. It exists so
the loop can be exercised end to end on a machine without a GPU, on a landscape that behaves
like the real one (tile shape, waves, occupancy, pipelining, bandwidth) and has a real optimum.

Ceilings are the H200 as measured in this project (benchmarks/results/): ~790 TFLOP/s dense bf16 matrix
rate and ~4.2 TB/s copy bandwidth (read + write). Rules of the model, each a documented guess:
  matmul   per-CTA work = 2*BM*BN*K flops; an SM's rate is the tensor-core rate times an MMA
           efficiency (wgmma needs BM >= 64 and 4-warp groups; small tiles fall back to mma.sync),
           capped by what L2 can feed at the tile's arithmetic intensity BM*BN/(BM+BN);
           software pipelining (num_stages) hides load latency; registers (accumulator per thread)
           and shared memory (stages * tile bytes) bound CTAs per SM and can fail the "compile";
           whole waves of CTAs over 132 SMs give wave quantization; GROUP_M trims HBM re-reads.
  rowwise  / gemv / elementwise: bytes over bandwidth, times an efficiency from elements per
           thread (vector width and register pressure) and the number of programs in flight.
A +/-3% deterministic ruggedness (a hash of the config) keeps the landscape from being smooth.
"""
from __future__ import annotations

import hashlib
import math

SMS = 132
SMEM_PER_SM = 227 * 1024
REGS_PER_SM = 65536
PEAK_FLOPS = 790e12        # dense bf16, measured (torch.mm)
HBM_BW = 4.2e12            # copy bandwidth, read + write, measured
L2_BW = 11e12              # L2 -> SM feed (lead; not measured here)
LAUNCH_S = 4e-6
DEVICE = "NVIDIA H200 (modeled)"


class ModelError(ValueError):
    """The modeled launch cannot run (e.g. more shared memory than an SM has)."""


def _cdiv(a, b):
    return -(-a // b)


def _rugged(cfg: dict) -> float:
    h = hashlib.sha256(repr(sorted(cfg.items())).encode()).digest()
    return 1.0 + 0.03 * (int.from_bytes(h[:4], "little") / 2**32 * 2 - 1)


def _get(cfg, *names, default=None):
    for n in names:
        if n in cfg:
            return cfg[n]
    return default


def matmul_dims(shape: dict, out_dims: list, flops: float) -> dict:
    """M, N, K of a matmul-class op whatever its symbols are called (a KernelBench GEMM's batch_size,
    in_features, out_features): M the output's rows (every dim but the last), N its last dim,
    K = flops / (2 M N). Pure."""
    if {"M", "N", "K"} <= set(shape):
        return shape
    sizes = [shape[d] if isinstance(d, str) else int(d) for d in out_dims] or [1]
    m, n = math.prod(sizes[:-1]), sizes[-1]
    return {"M": m, "N": n, "K": max(1, round(flops / (2 * m * n)))}


def matmul_time(shape: dict, cfg: dict, elem_bytes: int = 2) -> float:
    M, N, K = shape["M"], shape["N"], shape["K"]
    BM, BN, BK = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    G = cfg.get("GROUP_M", 1)
    warps, stages = cfg.get("num_warps", 4), cfg.get("num_stages", 2)
    threads = 32 * warps
    smem = max(stages - 1, 1) * (BM * BK + BK * BN) * elem_bytes
    if smem > SMEM_PER_SM:
        raise ModelError(f"out of resources: shared memory {smem // 1024} KB > 227 KB "
                         f"(modeled compile failure)")
    acc_regs = BM * BN / threads
    regs = acc_regs + 48 + (BM + BN) * BK * elem_bytes / threads / 4
    spill = 1.0 + max(0.0, regs - 255) / 255 * 2.0
    ctas = max(1, min(SMEM_PER_SM // max(smem, 1), REGS_PER_SM // (threads * min(regs, 255)),
                      2048 // threads, 32))
    # MMA efficiency: wgmma needs a 64-row warpgroup tile; tiny tiles waste the tensor cores.
    if BM >= 64 and warps >= 4:
        mma = min(1.0, 0.55 + 0.35 * math.log2(BM * BN / 4096) / 3)   # 64x64 .55 .. 128x256 .9
    else:
        mma = 0.35 * min(1.0, BM * BN / 1024)
    # Warps: too few accumulator registers per thread wastes issue slots; too many spills.
    warp_eff = 1.0 if 32 <= acc_regs <= 128 else (0.85 if acc_regs < 32 else 0.9)
    pipe = {1: 0.55, 2: 0.75, 3: 0.92, 4: 1.0}.get(stages, 0.98)
    bk_eff = {16: 0.8, 32: 0.9, 64: 1.0, 128: 0.97}.get(BK, 0.9)
    intensity = BM * BN / (BM + BN)                 # flops per byte fed from L2
    sm_rate = min(PEAK_FLOPS * mma, L2_BW * intensity) / SMS
    sm_rate *= pipe * warp_eff * bk_eff / spill
    tiles = _cdiv(M, BM) * _cdiv(N, BN)
    waves = _cdiv(tiles, SMS * ctas)
    # A partial last wave still costs a whole wave: each CTA shares its SM with `ctas` others.
    wave_s = 2.0 * BM * BN * K / (sm_rate / ctas)
    t_compute = waves * wave_s
    # HBM: compulsory bytes, plus re-reads that grouped tile order (GROUP_M) keeps in L2.
    compulsory = (M * K + K * N + M * N) * elem_bytes
    reread = 0.5 * compulsory * (1.0 / G) * min(1.0, (M * K + K * N) * elem_bytes / 60e6)
    t_mem = (compulsory + reread) / (HBM_BW * 0.9)
    return (max(t_compute, t_mem) + LAUNCH_S) * _rugged(cfg)


def stream_time(nbytes: float, cfg: dict, row_len: int, programs: int) -> float:
    """Memory-bound kernels: bytes over bandwidth times an efficiency from the launch shape."""
    # No block key: the program holds its whole row (KernLoop's row templates, up to 16384).
    block = _get(cfg, "BLOCK_SIZE", "BLOCK_N", "BLOCK", "BLOCK_K", default=min(row_len, 16384))
    warps = cfg.get("num_warps", 4)
    per_thread = max(1, min(block, row_len) / (32 * warps))
    if per_thread < 8:        # below one 16-byte vector per thread: narrow loads
        vec = 0.55 + 0.45 * per_thread / 8
    elif per_thread <= 32:
        vec = 1.0
    else:                      # register pressure, then spills
        vec = max(0.35, 1.0 - 0.25 * math.log2(per_thread / 32))
    in_flight = min(1.0, programs * warps / (SMS * 16))  # too few warps in flight: latency-bound
    eff = 0.93 * vec * (0.35 + 0.65 * in_flight)
    return (nbytes / (HBM_BW * eff) + LAUNCH_S) * _rugged(cfg)


# What the model reads from CONFIG, and the range in which it means something (a Triton launch
# outside it does not compile or does not run): a value outside is a modeled failure, never a crash.
RANGES = {"BLOCK_M": (1, 4096), "BLOCK_N": (1, 4096), "BLOCK_K": (1, 4096), "BLOCK_SIZE": (1, 1 << 20),
          "BLOCK": (1, 1 << 20), "GROUP_M": (1, 1 << 16), "ROWS": (1, 1 << 20),
          "ROWS_PER_PROGRAM": (1, 1 << 20), "num_warps": (1, 32), "num_stages": (1, 16)}


def validate(cfg) -> dict:
    """`cfg` if every value the model reads is an int in its RANGES, else ModelError saying which."""
    if not isinstance(cfg, dict):
        raise ModelError(f"CONFIG is a {type(cfg).__name__}, not a dict")
    for key, (lo, hi) in RANGES.items():
        if key not in cfg:
            continue
        v = cfg[key]
        if isinstance(v, bool) or not isinstance(v, int):
            raise ModelError(f"CONFIG['{key}'] = {str(v)[:40]!r} is not an integer (modeled compile failure)")
        if not lo <= v <= hi:
            raise ModelError(f"CONFIG['{key}'] = {v} is outside {lo}..{hi} (modeled launch failure)")
    if cfg.get("num_warps", 4) & (cfg.get("num_warps", 4) - 1):
        raise ModelError(f"num_warps = {cfg['num_warps']} is not a power of two (modeled compile failure)")
    return cfg


def predict_ms(model: str, shape: dict, cfg: dict, nbytes: float) -> float:
    """Modeled time in milliseconds of one call on `shape` with launch config `cfg`; ModelError
    (never another exception) when the config cannot be modeled."""
    validate(cfg)
    try:
        ms = _predict_ms(model, shape, cfg, nbytes)
    except ModelError:
        raise
    except (ArithmeticError, TypeError, ValueError, KeyError) as e:
        raise ModelError(f"the model cannot evaluate this CONFIG ({type(e).__name__}: {e})") from None
    if not (isinstance(ms, float) and math.isfinite(ms) and ms > 0):
        raise ModelError(f"the model gave no finite time for this CONFIG ({ms!r})")
    return ms


def _predict_ms(model: str, shape: dict, cfg: dict, nbytes: float) -> float:
    if model == "matmul":
        need = ("BLOCK_M", "BLOCK_N", "BLOCK_K")
        if not all(k in cfg for k in need):
            raise ModelError(f"matmul model needs CONFIG keys {need}")
        return matmul_time(shape, cfg) * 1e3
    vals = list(shape.values())
    rows, row_len = (math.prod(vals[:-1]), vals[-1]) if len(vals) > 1 else (1, vals[0])
    rows_per_prog = _get(cfg, "ROWS", "BLOCK_M", "ROWS_PER_PROGRAM", default=1)
    if model == "gemv":
        rows_per_prog = _get(cfg, "BLOCK_M", "BLOCK_N", default=64)
    if model == "elementwise":
        programs = _cdiv(math.prod(vals), _get(cfg, "BLOCK_SIZE", "BLOCK", default=1024))
    else:
        programs = _cdiv(rows, rows_per_prog)
    return stream_time(nbytes, cfg, row_len, programs) * 1e3


# The spec's reference run by torch (`baseline: torch`) has no CONFIG to model: it is modeled as a
# vendor kernel near its ceiling. A guess, like every number here, and labelled so.
TORCH_MODEL = ("modeled as a vendor kernel: max(flops at 70% of peak (matmul model only), "
               "compulsory bytes at 80% of HBM bandwidth) + launch")


def copy_ms(nbytes: float) -> float:
    """Modeled time in milliseconds of a device copy of the same bytes: the memory floor."""
    return (nbytes / HBM_BW + LAUNCH_S) * 1e3


def torch_ms(model: str, flops: float, nbytes: float) -> float:
    """Modeled time in milliseconds of the torch reference (cuBLAS / ATen) on the timed shape."""
    t_compute = flops / (PEAK_FLOPS * 0.70) if model == "matmul" else 0.0
    return (max(t_compute, nbytes / (HBM_BW * 0.80)) + LAUNCH_S) * 1e3
