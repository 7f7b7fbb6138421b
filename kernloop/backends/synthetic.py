"""The synthetic backend: correctness by the real checker in the Triton interpreter on the CPU,
timing modeled (perfmodel.py) with deterministic noise, labelled synthetic on every result."""
from __future__ import annotations

import os
import random
import threading
from pathlib import Path

import checker
from kernloop import settings
from kernloop.backends import perfmodel, warmjudge
from kernloop.backends.local import (SPARES, SYNTHETIC_DEVICE, Backend, _path, parse_child, side_args,
                                     stage_job, warm_job)
from kernloop.backends.sandbox import run_child
from kernloop.contract import read_config


class SyntheticBackend(Backend):
    """Correctness is REAL (Triton interpreter on the CPU, check shapes, fp16 for bf16);
    timing is MODELED (perfmodel.py) with deterministic noise. Labelled synthetic everywhere."""
    name = "synthetic"
    synthetic = True
    takes_digests = True
    device = SYNTHETIC_DEVICE
    NOISE = 0.01   # relative std of modeled per-rep noise

    def __init__(self, seed: int = 0, timeout_s: float | None = None, judge: str | None = None):
        self.seed = seed
        self.jobs = 0
        self._lock = threading.Lock()   # jobs may run in several threads (--parallel)
        self.timeout_s = timeout_s or settings.get("KERNLOOP_CHECK_TIMEOUT_S")
        self.judge = judge or settings.get("KERNLOOP_JUDGE") or "warm"   # modeled times: no worker-age bias
        self.judges = None   # started on the first job: a backend used only to model starts none
        if self.judge != "cold":
            # Why warm: a cold job spends ~4.5 of its ~5 s importing torch in three processes
            # (checker, candidate and champion workers); the warm judge keeps them (warmjudge.py)
            fresh = self.judge == "warm-fresh"
            self.judges = warmjudge.WarmJudges(["--mode", "interpret", "--spares", str(SPARES[False, fresh]),
                                                "--champion", "fresh" if fresh else "kept"],
                                               lambda slot: {"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""})

    def _samples(self, mean_ms: float, n: int, tag: str, job: str) -> list[float]:
        # Keyed by the job's folder (baseline, it0001, ...), not a counter: a resumed run
        # models the same numbers for the same candidate as the uninterrupted run.
        rng = random.Random(f"{self.seed}:{job}:{tag}")
        return [mean_ms * (1.0 + rng.gauss(0.0, self.NOISE)) for _ in range(n)]

    def slots(self, parallel: int) -> list[str]:
        """CPU workers: KERNLOOP_SYNTHETIC_WORKERS, else one per core; at most one per candidate
        in flight."""
        n = settings.get("KERNLOOP_SYNTHETIC_WORKERS") or os.cpu_count() or 1
        return [f"cpu{i}" for i in range(max(1, min(parallel, n)))]

    def evaluate(self, spec, candidate, champion, workdir, configs=None, peers=False, slot=None,
                 digests=None):
        # peers: modeled runs leave them out (there is no model of torch's or Liger's kernels)
        with self._lock:
            self.jobs += 1
        workdir = Path(workdir)
        f = stage_job(spec, _path(candidate), _path(champion), workdir, checker=self.judges is None)
        argv = ["--spec", str(f["spec"]), *side_args(f, digests), "--mode", "interpret",
                "--backend", self.name, "--synthetic"]
        if self.judges is not None:
            res = warm_job(self.judges, self.name, True, slot or "cpu0", workdir, argv, self.timeout_s)
        else:
            out = run_child(checker.command("check", *argv), self.timeout_s, cwd=str(workdir),
                            env_extra={"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""})
            res = parse_child(out, self.name, True, workdir / "checker.log")
        return self.model(res, spec, f, configs, workdir.name)

    def model(self, res: dict, spec, f: dict, configs: dict | None, job: str) -> dict:
        """Fill a passed interpreter run's timing from the model (files `f` as staged; `job`
        keys the noise). Also used by the Ray backend's synthetic mode."""
        from checker.timing import roofline, summarize, ceilings_for
        res["device"] = SYNTHETIC_DEVICE
        res["timing_model"] = "perfmodel.py (modeled H200; not a measurement)"
        if not res.get("ok"):
            return res
        shape = spec.shapes[0]
        _, nbytes = spec.cost_of(shape)
        cfgs = {}
        for side in ("candidate", "champion"):
            if side not in f:   # the torch reference: no CONFIG, modeled as a vendor kernel
                continue
            cfg = (configs or {}).get(side) or read_config(f[side].read_text())
            if cfg is None:
                res.update(ok=False, stage="timing",
                           error=f"synthetic timing needs a CONFIG literal in the {side}")
                return res
            cfgs[side] = cfg
        warm, reps = spec.timing["warmup"], spec.timing["reps"]
        flops, _ = spec.cost_of(shape)
        # the matmul model's M, N, K, from the spec's output and flops whatever its symbols' names
        modeled = perfmodel.matmul_dims(shape, spec.output["shape"], flops) if spec.model == "matmul" else shape
        try:
            means = {side: perfmodel.predict_ms(spec.model, modeled, cfgs[side], nbytes)
                     if side in cfgs else perfmodel.torch_ms(spec.model, flops, nbytes)
                     for side in ("candidate", "champion")}
            if len(cfgs) < 2:
                res["timing_model"] += f"; torch side: {perfmodel.TORCH_MODEL}"
        except perfmodel.ModelError as e:
            res.update(ok=False, stage="timing", error=f"(synthetic) {e}")
            return res
        flops, nbytes = spec.cost_of(shape)
        cost = {"flops": flops, "bytes": nbytes}
        ceil = ceilings_for("H200")
        for side in ("candidate", "champion"):
            res[side] = summarize(self._samples(means[side], reps, side, job), warm)
        res["roofline"] = {s: roofline(res[s], cost, ceil) for s in ("candidate", "champion")}
        res["ceilings"] = ceil
        if spec.model != "matmul":   # memory-bound: a copy of the same bytes at the modeled bandwidth
            res["floor"] = {**summarize(self._samples(perfmodel.copy_ms(nbytes), reps, "floor", job), warm),
                            "what": f"copy of {nbytes / 1e6:.1f} MB", "measured": False}
        res["stage"] = "done"
        return res
