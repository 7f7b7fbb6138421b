"""Profile of one kernel entry: what Triton compiled, the occupancy it allows, what a launch costs.

Self-contained (stdlib + torch + triton) so it runs inside the checker's GPU jobs. The pure parts
(`occupancy`, `waves`, `launch_bound`, `kernel_summary`) take numbers and are tested on the CPU;
`capture_launches`, `launch_cost` and `profile` need a CUDA device.

Where the numbers come from (Triton 3.x): every launch goes through `CompiledKernel.run(gx, gy,
gz, stream, function, ...)`; `capture_launches` wraps that property for the duration of one call
and records each launched kernel with its grid. The compiled kernel carries `n_regs` and
`n_spills` (from the CUDA driver when the binary was loaded), `metadata.shared` (bytes of shared
memory per block) and `metadata.num_warps`.
"""
from __future__ import annotations

import contextlib
import statistics
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class SMLimits:
    """Per-SM resources of one compute capability (CUDA programming guide, occupancy calculator)."""
    name: str
    regs_per_sm: int = 65536
    max_regs_per_thread: int = 255
    reg_alloc_unit: int = 256          # registers are allocated per warp in units of 256
    sub_partitions: int = 4            # each holds regs_per_sm / 4; a warp lives in one
    max_threads_per_sm: int = 2048
    max_warps_per_sm: int = 64
    max_blocks_per_sm: int = 32
    smem_per_sm: int = 228 * 1024      # with the largest carveout
    smem_per_block: int = 227 * 1024
    smem_reserved_per_block: int = 1024   # the driver's per-block reserve (sm_80 and later)
    smem_alloc_unit: int = 128
    warp_size: int = 32


SM_LIMITS = {
    (9, 0): SMLimits("sm_90 (H100/H200)"),
    (8, 0): SMLimits("sm_80 (A100)", smem_per_sm=164 * 1024, smem_per_block=163 * 1024),
    (8, 9): SMLimits("sm_89 (L40S/4090)", max_threads_per_sm=1536, max_warps_per_sm=48,
                     max_blocks_per_sm=24, smem_per_sm=100 * 1024, smem_per_block=99 * 1024),
}


def limits_for(capability) -> SMLimits | None:
    return SM_LIMITS.get(tuple(capability)) if capability else None


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def occupancy(regs_per_thread: int, shared_bytes: int, threads_per_block: int,
              lim: SMLimits) -> dict:
    """Theoretical occupancy: resident blocks and warps per SM and what limits them.

    blocks_per_sm is the smallest of the register, shared-memory, thread/warp and block-count
    limits; `limited_by` names the binding one. On a tie the fixed limits (threads per block, blocks
    per SM) are named first: fewer registers would not help then. A kernel that cannot launch at
    all has 0 blocks."""
    warps = -(-max(threads_per_block, 1) // lim.warp_size)
    by = {}
    if regs_per_thread > lim.max_regs_per_thread:
        by["registers"] = 0
    else:
        per_warp = _round_up(max(regs_per_thread, 1) * lim.warp_size, lim.reg_alloc_unit)
        warps_per_part = (lim.regs_per_sm // lim.sub_partitions) // per_warp
        by["registers"] = (warps_per_part * lim.sub_partitions) // warps
    if shared_bytes > lim.smem_per_block:
        by["shared memory"] = 0
    else:
        per_block = _round_up(shared_bytes, lim.smem_alloc_unit) + lim.smem_reserved_per_block
        by["shared memory"] = lim.smem_per_sm // per_block
    by["threads"] = min(lim.max_threads_per_sm // (warps * lim.warp_size), lim.max_warps_per_sm // warps)
    by["blocks"] = lim.max_blocks_per_sm
    blocks = min(by.values())
    limited_by = next(k for k in ("threads", "blocks", "registers", "shared memory") if by[k] == blocks)
    active = blocks * warps
    return {"blocks_per_sm": blocks, "warps_per_sm": active,
            "occupancy": active / lim.max_warps_per_sm, "limited_by": limited_by,
            "blocks_by_limit": by, "device_limits": lim.name}


def waves(grid_blocks: int, blocks_per_sm: int, sms: int) -> float | None:
    """How many full rounds of the GPU's resident blocks the grid needs (0.5: half the GPU idle)."""
    if blocks_per_sm <= 0 or sms <= 0:
        return None
    return grid_blocks / (blocks_per_sm * sms)


# A call is launch-bound when back to back it takes clearly longer than its kernel time on the
# GPU and the host's own launch work per call is at least that kernel time: a GPU-time win there
# does not show in eager code.
LAUNCH_BOUND_RATIO = 1.5


def launch_bound(gpu_ms: float | None, b2b_ms: float | None, host_us: float | None) -> dict:
    """Verdict on one entry: does the host (Python, the launcher) or the GPU set its pace?"""
    if not gpu_ms or b2b_ms is None or host_us is None:
        return {"launch_bound": None, "gpu_ms": gpu_ms, "b2b_ms": b2b_ms, "host_us": host_us}
    host_ms = host_us / 1e3
    bound = b2b_ms > LAUNCH_BOUND_RATIO * gpu_ms and host_ms >= gpu_ms
    return {"launch_bound": bool(bound), "gpu_ms": gpu_ms, "b2b_ms": b2b_ms, "host_us": host_us,
            "b2b_over_gpu": b2b_ms / gpu_ms, "host_over_gpu": host_ms / gpu_ms}


def kernel_summary(name: str, n_regs: int, n_spills: int, shared: int, num_warps: int,
                   grid, lim: SMLimits | None, sms: int | None) -> dict:
    """One launched kernel: its resources, its grid, and the occupancy and waves they allow."""
    grid = tuple(int(g) for g in grid) if grid is not None else None
    threads = num_warps * (lim.warp_size if lim else 32)
    out = {"name": name, "regs_per_thread": int(n_regs), "spills": int(n_spills),
           "shared_bytes": int(shared), "num_warps": int(num_warps), "threads_per_block": threads,
           "grid": list(grid) if grid else None, "occupancy": None, "waves": None}
    if lim:
        occ = occupancy(int(n_regs), int(shared), threads, lim)
        out["occupancy"] = occ
        if grid and sms:
            blocks = grid[0] * (grid[1] if len(grid) > 1 else 1) * (grid[2] if len(grid) > 2 else 1)
            out["grid_blocks"] = blocks
            out["waves"] = waves(blocks, occ["blocks_per_sm"], sms)
    return out


# ---------------------------------------------------------------- GPU side

@contextlib.contextmanager
def capture_launches():
    """Record (compiled kernel, grid) for every Triton launch inside the block.

    Wraps the `run` property of triton's CompiledKernel (the launcher every JIT call goes through)
    and restores it on exit. Yields the list the launches are appended to; yields an empty list
    that stays empty if this Triton has no such property (the caller then reports no kernels)."""
    from triton.compiler import compiler as tc
    launches: list = []
    prop = tc.CompiledKernel.__dict__.get("run")
    if not isinstance(prop, property):
        yield launches
        return

    def recording(self):
        real = prop.fget(self)

        def run(gx, gy, gz, *rest, **kw):
            launches.append((self, (gx, gy, gz)))
            return real(gx, gy, gz, *rest, **kw)
        return run
    tc.CompiledKernel.run = property(recording)
    try:
        yield launches
    finally:
        tc.CompiledKernel.run = prop


def cached_kernels(module) -> list:
    """Fallback when launches cannot be captured: every compiled kernel in the JIT caches of the
    Triton functions a module holds (autotuner and heuristics wrappers unwrapped). No grid."""
    found, seen = [], set()
    for obj in list(vars(module).values()) if module is not None else []:
        for _ in range(4):   # Autotuner(Heuristics(JITFunction)): .fn chains
            if hasattr(obj, "device_caches") or not hasattr(obj, "fn"):
                break
            obj = obj.fn
        for entry in getattr(obj, "device_caches", {}).values():
            cache = entry[0] if isinstance(entry, tuple) else entry
            for k in (cache.values() if isinstance(cache, dict) else ()):
                if id(k) not in seen and hasattr(k, "metadata"):
                    seen.add(id(k))
                    found.append(k)
    return found


def compiled_kernels(torch, fn, args, lim: SMLimits | None, sms: int | None, module=None) -> list[dict]:
    """Call fn once (already compiled: the checker has run it) and summarise each kernel it
    launched; if this Triton's launches cannot be captured, each kernel cached in `module`."""
    with capture_launches() as launches:
        fn(*args)
    torch.cuda.synchronize()
    if not launches:
        launches = [(k, None) for k in cached_kernels(module)]
    out = []
    for k, grid in launches:
        md = k.metadata
        out.append(kernel_summary(k.name, getattr(k, "n_regs", 0) or 0, getattr(k, "n_spills", 0) or 0,
                                  getattr(md, "shared", 0) or 0, getattr(md, "num_warps", 4), grid,
                                  lim, sms))
    return out


def launch_cost(torch, fn, args, n: int = 50, cuda: bool = True) -> dict:
    """Host µs per call with an empty queue (median; no sync inside the timed call) and the time
    per call of n calls issued back to back with one sync at the end (CUDA events; the host
    clock with `cuda` False: the interpreter, where the host does all the work)."""
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for _ in range(3):
        fn(*args)
    host = []
    for _ in range(n):
        sync()
        t0 = time.perf_counter()
        fn(*args)
        host.append((time.perf_counter() - t0) * 1e6)
    sync()
    if cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(n):
            fn(*args)
        end.record()
        torch.cuda.synchronize()
        b2b = start.elapsed_time(end) / n
    else:
        t0 = time.perf_counter()
        for _ in range(n):
            fn(*args)
        b2b = (time.perf_counter() - t0) * 1e3 / n
    return {"host_us": statistics.median(host), "host_us_min": min(host), "b2b_ms": b2b, "n": n}


INTERPRETER_CALLS = 5   # launch-cost calls on the host clock: an interpreter call takes ~30 ms


def profile(torch, fn, args, gpu_ms: float | None, n: int = 50, module=None) -> dict:
    """Everything above for one entry on its timed inputs; `cost_s` is the wall time it took.
    On the CPU (interpret mode, --host-clock) only the launch cost, on the host clock: the
    interpreter compiles no kernel, so there are no registers, shared memory or occupancy."""
    t0 = time.monotonic()
    if not any(getattr(a, "is_cuda", False) for a in args):
        cost = launch_cost(torch, fn, args, n=min(n, INTERPRETER_CALLS), cuda=False)
        return {"kernels": [], "kernels_skipped": "interpret mode: the Triton interpreter compiles "
                "no kernel (no registers, shared memory or occupancy)", "launch": cost,
                "verdict": launch_bound(gpu_ms, cost["b2b_ms"], cost["host_us"]), "sms": None,
                "device_limits": None, "clock": "host", "cost_s": time.monotonic() - t0}
    dev = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(dev)
    lim = limits_for(torch.cuda.get_device_capability(dev))
    sms = props.multi_processor_count
    kernels = compiled_kernels(torch, fn, args, lim, sms, module)
    cost = launch_cost(torch, fn, args, n=n)
    return {"kernels": kernels, "launch": cost,
            "verdict": launch_bound(gpu_ms, cost["b2b_ms"], cost["host_us"]),
            "sms": sms, "device_limits": lim.name if lim else None,
            "cost_s": time.monotonic() - t0}


def main_kernel(prof: dict | None) -> dict | None:
    """The kernel a diagnosis talks about: the one with the most blocks (ties: the first)."""
    ks = (prof or {}).get("kernels") or []
    return max(ks, key=lambda k: k.get("grid_blocks") or 0) if ks else None
