"""What a kernel engineer would say about a kernel, from its roofline, profile and ncu counters.

Pure: `diagnose(...)` turns numbers into a short list of findings, each `{"rule", "text"}` with
rounded numbers ("memory-bound: 3.03 TB/s, 74% of the 4.09 TB/s copy ceiling"). Every rule has
its own function and test; a rule with no input says nothing.
"""
from __future__ import annotations

# thresholds, one place
LOW_OCCUPANCY = 0.5         # theoretical occupancy below this is worth a line
SPARSE_GRID_WAVES = 0.8     # fewer waves than this leaves SMs idle
MINIMAL_TRAFFIC = 1.10      # DRAM bytes within 10% of compulsory: nothing to save off chip
NEAR_CEILING_PCT = 85.0     # % of the ceiling where a memory-bound kernel is done
BUSY_UNIT_PCT = 60.0        # an on-chip unit this busy, above DRAM, is the bottleneck

STALL_MEANING = {
    "long_scoreboard": "waiting on global/local memory",
    "short_scoreboard": "waiting on shared memory or special math (MUFU)",
    "wait": "fixed-latency dependencies",
    "barrier": "waiting at a barrier",
    "mio_throttle": "the memory input/output queue is full (shared memory, special math)",
    "lg_throttle": "the global/local memory queue is full (many small loads)",
    "math_pipe_throttle": "a math pipe is saturated",
    "not_selected": "eligible but another warp issued (enough parallelism)",
    "no_instruction": "instruction cache misses or branch targets",
    "branch_resolving": "resolving branches",
    "dispatch_stall": "dispatch conflicts",
    "membar": "memory barriers",
    "drain": "draining stores at exit",
    "imc_miss": "constant cache misses",
    "tex_throttle": "the texture pipe is full",
    "sleeping": "sleeping",
    "misc": "other reasons",
}


def sig(x: float, digits: int = 3) -> str:
    """x with `digits` significant figures, no exponent for ordinary sizes (3.03, 42.9, 612)."""
    if x == 0:
        return "0"
    from math import floor, log10
    d = max(digits - 1 - int(floor(log10(abs(x)))), 0)
    return f"{x:.{d}f}"


def mb(nbytes: float) -> str:
    return f"{sig(nbytes / 1e6)} MB"


def us(ms: float) -> str:
    return f"{sig(ms * 1e3, 2 if ms * 1e3 < 10 else 3)} µs"


def ceiling_kinds(ceilings: dict | None) -> dict:
    """{"peak": {tflops, gbps, source} or None, "measured": ... or None} from a result's
    `ceilings`; a log written before the two were kept apart (one flat ceiling) counts as
    measured when its source says so, else as the datasheet's."""
    c = ceilings or {}
    if "peak" in c or "measured" in c:
        return {"peak": c.get("peak"), "measured": c.get("measured")}
    if c.get("tflops") is None:
        return {"peak": None, "measured": None}
    kind = "measured" if str(c.get("source", "")).startswith("measured") else "peak"
    return {"peak": None, "measured": None, kind: c}


def roof_pcts(roofline: dict | None, ceilings: dict | None) -> dict:
    """{"peak": (pct FLOP/s, pct bandwidth), "measured": (...)} of one side's roofline, None where
    that ceiling is unknown (an old log's single `pct_*` goes where its ceiling belongs: measured
    if its ceiling's source says so, else the datasheet peak, as such logs called it)."""
    r = roofline or {}
    out = {k: (r.get(f"pct_{k}_flops"), r.get(f"pct_{k}_bw")) if r.get(f"pct_{k}_flops") is not None
           or r.get(f"pct_{k}_bw") is not None else None for k in ("peak", "measured")}
    if out["peak"] is None and out["measured"] is None and (r.get("pct_flops") is not None
                                                            or r.get("pct_bw") is not None):
        kinds = ceiling_kinds(ceilings)   # no ceilings logged: the log's own word, "peak"
        out["measured" if kinds["measured"] and not kinds["peak"] else "peak"] = (r.get("pct_flops"), r.get("pct_bw"))
    return out


def bound_finding(roofline: dict | None, ceilings: dict | None) -> str | None:
    """memory-bound / compute-bound, the achieved rate, and its percentage of the measured
    ceiling (copy bandwidth, torch.mm's rate) and of the datasheet peak, each named."""
    if not roofline or not ceilings or not roofline.get("bound"):
        return None
    kinds, pcts = ceiling_kinds(ceilings), roof_pcts(roofline, ceilings)
    mem = roofline["bound"] == "memory"
    i = 1 if mem else 0
    parts = []
    for kind, what in (("measured", "copy bandwidth" if mem else "torch.mm rate"),
                       ("peak", "datasheet peak")):
        c, p = kinds[kind], pcts[kind]
        if c and p and p[i] is not None:
            ceil = f"{sig(c['gbps'] / 1e3)} TB/s" if mem else f"{sig(c['tflops'])} TFLOP/s"
            parts.append(f"{p[i]:.0f}% of the {'measured ' if kind == 'measured' else ''}{what} ({ceil})")
    rate = f"{sig(roofline['gbps'] / 1e3)} TB/s" if mem else f"{sig(roofline['tflops'])} TFLOP/s"
    return f"{'memory' if mem else 'compute'}-bound: {rate}" + (", " + " and ".join(parts) if parts else "")


def traffic_finding(counters: dict | None, read_bytes: float | None, write_bytes: float | None,
                    pct_bw: float | None) -> str | None:
    """DRAM bytes against the compulsory bytes (each input read once, the output written once)."""
    if not counters or counters.get("dram_read_bytes") is None or not read_bytes:
        return None
    got = counters["dram_read_bytes"]
    ratio = got / read_bytes
    if ratio <= MINIMAL_TRAFFIC:
        text = f"DRAM bytes {mb(got)} read vs {mb(read_bytes)} compulsory: reads are already minimal"
        if pct_bw is not None and pct_bw < NEAR_CEILING_PCT:
            text += "; the gap is L1/L2 traffic and instruction issue"
        return text
    text = (f"DRAM bytes {mb(got)} read vs {mb(read_bytes)} compulsory ({ratio:.1f}x): data is read "
            f"from DRAM more than once; keep it on chip (one pass over the row, or reuse a tile)")
    w = counters.get("dram_write_bytes")
    if w is not None and write_bytes and w > MINIMAL_TRAFFIC * write_bytes:
        text += f"; writes {mb(w)} vs {mb(write_bytes)}"
    return text


def launch_finding(verdict: dict | None) -> str | None:
    if not verdict or not verdict.get("launch_bound"):
        return None
    return (f"launch-bound: {sig(verdict['host_us'], 2)} µs of host time per call against "
            f"{us(verdict['gpu_ms'])} on the GPU ({us(verdict['b2b_ms'])} per call back to back): "
            f"a GPU-time win will not show in eager code")


def spill_finding(kernel: dict | None) -> str | None:
    if not kernel or not kernel.get("spills"):
        return None
    return (f"spills: {kernel['spills']} registers/thread spilled to local memory "
            f"({kernel['regs_per_thread']} registers/thread, {kernel['num_warps']} warps): smaller "
            f"blocks per thread or more warps")


def occupancy_finding(kernel: dict | None) -> str | None:
    occ = (kernel or {}).get("occupancy")
    if not occ or occ["occupancy"] >= LOW_OCCUPANCY:
        return None
    what = {"registers": f"{kernel['regs_per_thread']} registers/thread",
            "shared memory": f"{sig(kernel['shared_bytes'] / 1024)} KB shared memory/block",
            "threads": f"{kernel['threads_per_block']} threads/block",
            "blocks": f"{kernel['threads_per_block']} threads/block (too small a block)"}[occ["limited_by"]]
    return (f"occupancy {occ['occupancy'] * 100:.0f}% limited by {occ['limited_by']} ({what}: "
            f"{occ['blocks_per_sm']} blocks of {kernel['num_warps']} warps per SM)")


def grid_finding(kernel: dict | None, sms: int | None) -> str | None:
    if not kernel or kernel.get("waves") is None:
        return None
    w = kernel["waves"]
    if w < SPARSE_GRID_WAVES:
        return (f"grid of {kernel['grid_blocks']} blocks fills {w * 100:.0f}% of one wave"
                f"{f' on {sms} SMs' if sms else ''}: SMs sit idle; more, smaller blocks")
    return None


def throughput_finding(counters: dict | None) -> str | None:
    """% of peak of each unit, and which unit is the bottleneck if it is not DRAM."""
    if not counters:
        return None
    units = [(lbl, counters.get(k)) for lbl, k in (("DRAM", "dram_pct"), ("L2", "l2_pct"),
                                                   ("L1", "l1_pct"), ("SM", "sm_pct"))]
    units = [(lbl, v) for lbl, v in units if v is not None]
    if not units:
        return None
    text = "throughput (% of peak): " + ", ".join(f"{lbl} {v:.0f}" for lbl, v in units)
    occ = counters.get("achieved_occupancy_pct")
    if occ is not None:
        text += f"; achieved occupancy {occ:.0f}%"
    top_lbl, top = max(units, key=lambda u: u[1])
    dram = dict(units).get("DRAM", 0.0)
    if top_lbl != "DRAM" and top >= BUSY_UNIT_PCT and top > dram:
        text += f"; {top_lbl} is the busiest unit ({top:.0f}%, DRAM {dram:.0f}%)"
    return text


def stall_finding(counters: dict | None) -> str | None:
    stalls = (counters or {}).get("top_stalls") or []
    if not stalls:
        return None
    parts = [f"{s['reason']} {s['per_issue']:.1f}" for s in stalls[:2]]
    why = STALL_MEANING.get(stalls[0]["reason"], "")
    return (f"top warp stalls (warps per issued instruction): {', '.join(parts)}"
            + (f" ({stalls[0]['reason']}: {why})" if why else ""))


def _bw_pct(roofline: dict | None, ceilings: dict | None) -> float | None:
    """The bandwidth percentage the "near the ceiling" rule reads: of the measured copy bandwidth
    where there is one, else of the datasheet peak."""
    p = roof_pcts(roofline, ceilings)
    return (p["measured"] or p["peak"] or (None, None))[1]


def diagnose(roofline: dict | None = None, ceilings: dict | None = None, cost: dict | None = None,
             profile: dict | None = None, counters: dict | None = None) -> list[dict]:
    """Findings, most important first. `cost` = {"read_bytes", "write_bytes"} compulsory;
    `profile` as checker/kernelprofile.py writes it (its main kernel is the one talked about);
    `counters` as checker/ncu.summarize_kernels writes them."""
    cost = cost or {}
    kernels = (profile or {}).get("kernels") or []
    kernel = max(kernels, key=lambda k: k.get("grid_blocks") or 0) if kernels else None
    rules = [
        ("bound", bound_finding(roofline, ceilings)),
        ("launch", launch_finding((profile or {}).get("verdict"))),
        ("traffic", traffic_finding(counters, cost.get("read_bytes"), cost.get("write_bytes"),
                                    _bw_pct(roofline, ceilings))),
        ("spills", spill_finding(kernel)),
        ("occupancy", occupancy_finding(kernel)),
        ("grid", grid_finding(kernel, (profile or {}).get("sms"))),
        ("throughput", throughput_finding(counters)),
        ("stalls", stall_finding(counters)),
    ]
    return [{"rule": r, "text": t} for r, t in rules if t]


def of_result(result: dict | None, side: str = "candidate", cost: dict | None = None) -> list[dict]:
    """The findings for one side of a result line: its roofline, the result's ceilings, the
    side's profile and the ncu counters in it."""
    r = result or {}
    prof = (r.get("profile") or {}).get(side)
    counters = ((prof or {}).get("ncu") or {}).get("counters")
    return diagnose((r.get("roofline") or {}).get(side), r.get("ceilings"), cost, prof, counters)


def compulsory_bytes(spec) -> dict:
    """Compulsory DRAM bytes of the timed shape: every input read once, the output written once
    (a `spec.Spec`); the spec's cost formula counts both."""
    shape = spec.shapes[0]
    size = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int8": 1, "uint8": 1, "bool": 1,
            "int16": 2, "int32": 4, "int64": 8}   # integer inputs: class indices, token ids

    def nbytes(dims, dtype):
        n = 1
        for d in dims:
            n *= shape[d] if isinstance(d, str) else int(d)
        return n * size[dtype]
    read = sum(nbytes(i["shape"], i["dtype"]) for i in spec.inputs)
    write = nbytes(spec.output["shape"], spec.output.get("dtype", spec.dtype))
    return {"read_bytes": read, "write_bytes": write}
