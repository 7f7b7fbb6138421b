"""What the model is told about where the champion stands, through the real client and a real
HTTP server on loopback (tests/loopback_openai.py).

1. A context with a GPU job's standing (a hand-written result line in the judge's format: the
   numbers are test inputs, not measurements): the prompt names the device and its ceilings,
   the bound verdict, the peers and the time to beat, the profile and the diagnosis, each
   rejected candidate's CONFIG and reason, and the contract's allowed constructs.
2. A whole synthetic run (subprocess): every prompt says MODELED; a rejected candidate's CONFIG
   reaches the next prompt; the repair request carries the failed answer as the assistant's turn.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from kernloop.standing import briefing  # noqa: E402
import nemotron_client as nc  # noqa: E402
from kernloop.propose import prompt  # noqa: E402
from checker.kernelprofile import SM_LIMITS, kernel_summary, launch_bound  # noqa: E402
from kernloop.standing.diagnosis import compulsory_bytes  # noqa: E402
from loopback_openai import LoopbackOpenAI, reply  # noqa: E402
from kernloop.propose.proposer import ProposalContext  # noqa: E402
from kernloop.spec import load_spec  # noqa: E402

pytestmark = [pytest.mark.llm]

SPEC = load_spec(ROOT / "specs" / "softmax.yaml")
KERNEL = kernel_summary("_softmax_kernel", 32, 0, 0, 8, (4096, 1, 1), SM_LIMITS[(9, 0)], 132)
RESULT = {   # the judge's result line for a baseline job on an H200 (hand-written test input)
    "ok": True, "device": "NVIDIA H200", "synthetic": False,
    "ceilings": {"match": "H200", "peak": {"tflops": 989.0, "gbps": 4800.0, "source": "NVIDIA H200 SXM datasheet"},
                 "measured": {"tflops": 790.0, "gbps": 4200.0, "source": "measured here"}},
    "candidate": {"mean_ms": 0.0671, "median_ms": 0.0669, "std_ms": 0.0008, "min_ms": 0.066, "n": 50},
    "roofline": {"candidate": {"bound": "memory", "gbps": 2001.0, "pct_measured_bw": 47.6, "tflops": 2.5,
                               "pct_measured_flops": 0.3, "pct_peak_bw": 41.7, "pct_peak_flops": 0.25}},
    "peers": {"peers": {"torch.softmax": {"median_ms": 0.1274}, "liger": {"median_ms": 0.0325},
                        "torch.compile": {"median_ms": 0.0822}},
              "kernels": {"candidate": {"median_ms": 0.0669}},
              "best": {"name": "liger", "median_ms": 0.0325, "spread": 0.083, "ci": 0.008, "n": 300, "rounds": 6},
              "skipped": {"quack": {"reason": "quack-kernels is not installed or did not import",
                                    "kind": "not installed", "install": "pip install quack-kernels"}}},
    "profile": {"candidate": {"kernels": [KERNEL], "sms": 132,
                              "launch": {"host_us": 21.0, "b2b_ms": 0.067},
                              "verdict": launch_bound(0.0669, 0.067, 21.0),
                              "ncu": {"ok": True, "counters": {
                                  "dram_read_bytes": 201.6e6, "dram_write_bytes": 67.2e6,
                                  "dram_pct": 47.0, "l2_pct": 60.0, "l1_pct": 70.0, "sm_pct": 35.0,
                                  "achieved_occupancy_pct": 80.0,
                                  "top_stalls": [{"reason": "long_scoreboard", "per_issue": 9.5}]}}}},
}
REJECTED = {"iteration": 2, "verdict": "rejected", "note": "wider chunks",
            "reason": "+0.4% faster, below the 2% bar", "config": {"BLOCK_SIZE": 8192, "ROWS": 1, "num_warps": 16}}


def test_prompt_holds_device_peers_time_to_beat_diagnosis_and_configs():
    standing = briefing.standing(RESULT, "candidate", compulsory_bytes(SPEC), False, None)
    ctx = ProposalContext(spec=SPEC, iteration=3, champion_code=SPEC.baseline.read_text(),
                          champion_id="baseline", champion_profile=dict(RESULT["candidate"]),
                          rejections=[REJECTED], standing=standing)
    with LoopbackOpenAI() as srv:
        srv.push(reply(f"```python\n{SPEC.baseline.read_text()}```"))
        env = {"KERNLOOP_LLM_BASE_URL": srv.base_url, "KERNLOOP_LLM_API_KEY": "k",
               "KERNLOOP_LLM_MODEL": "loopback/m", "KERNLOOP_LLM_TIMEOUT_S": "10"}
        nc.from_env(env).propose(ctx)
        (req,) = srv.chat_requests
    text = req.text
    for want in ("Device: NVIDIA H200; datasheet peak 989 TFLOP/s bf16 dense, 4.80 TB/s memory (NVIDIA H200 SXM "
                 "datasheet); measured ceiling: torch.mm 790 TFLOP/s bf16, copy 4.20 TB/s (read + write)",
                 "memory-bound: 2.00 TB/s, 48% of the measured copy bandwidth (4.20 TB/s) and 42% of the "
                 "datasheet peak (4.80 TB/s)",
                 "liger 0.0325 ms, torch.compile 0.0822 ms, torch.softmax 0.1274 ms",
                 "Time to beat: liger 0.0325 ms, spread 8.3%, 95% CI ±0.8% over 300 reps; the champion takes "
                 "0.0669 ms, 0.49x the best peer's speed; best of the peers timed, without quack (below).",
                 "(peer quack not timed or not used, not installed: quack-kernels is not installed or did not "
                 "import; pip install quack-kernels)",
                 "Compiled kernel `_softmax_kernel`: 32 registers/thread, 0 spilled",
                 "Host launch cost: 21 µs of host time per call",
                 "- DRAM bytes 202 MB read vs 67.1 MB compulsory (3.0x)",
                 "- top warp stalls (warps per issued instruction): long_scoreboard 9.5",
                 'CONFIG: {"BLOCK_SIZE": 8192, "ROWS": 1, "num_warps": 16}',
                 "reason: +0.4% faster, below the 2% bar",
                 prompt.CONTRACT, "TMA tensor descriptors", "make_tensor_descriptor"):
        assert want in text, want   # ... and the contract's allowed constructs, TMA included
    assert "MODELED" not in text


def _with_config(code: str, note: str, **cfg) -> str:
    from kernloop.propose.tuner import replace_config
    from kernloop import contract
    body = replace_config(code, {**contract.read_config(code), **cfg})
    return f"# NOTE: {note}\n" + "".join(l for l in body.splitlines(keepends=True) if not l.startswith("# NOTE:"))


def test_synthetic_run_says_modeled_carries_configs_and_replays_the_failed_answer(tmp_path):
    spec = load_spec(ROOT / "specs" / "matmul.yaml")
    base = spec.baseline.read_text()
    syncs = _with_config(base, "sync to be safe", BLOCK_M=64).replace(
        "    return c\n", "    torch.cuda.synchronize()\n    return c\n")
    assert syncs.count("torch.cuda.synchronize()") == 1
    good = _with_config(base, "64x64 tiles", BLOCK_M=64, BLOCK_N=64)
    two = f"A:\n```python\n{good}```\nB:\n```python\n{good}```\n"
    answers = [reply(two), reply(f"```python\n{syncs}```"), reply(f"```python\n{good}```")]
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("KERNLOOP_LLM_") and k not in ("NVIDIA_API_KEY", "TAVILY_API_KEY")}
    with LoopbackOpenAI(script=answers) as srv:
        env.update({"KERNLOOP_LLM_BASE_URL": srv.base_url, "KERNLOOP_LLM_API_KEY": "k",
                    "KERNLOOP_LLM_MODEL": "loopback/m", "KERNLOOP_LLM_TIMEOUT_S": "20",
                    "KERNLOOP_LLM_REPAIR_RETRIES": "1"})
        p = subprocess.run([sys.executable, "orchestrator.py", "--spec", "specs/matmul.yaml", "--backend",
                            "synthetic", "--proposer", "llm", "--iterations", "2", "--out", str(tmp_path)],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        reqs = srv.chat_requests
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    assert len(reqs) == 3
    first, repair, second = reqs
    # the repair: the same conversation, the failed answer as the assistant's turn, the request
    assert repair.messages[:-2] == first.messages
    assert repair.messages[-2] == {"role": "assistant", "content": two.strip()}
    assert "Your answer could not be used" in repair.messages[-1]["content"]
    for r in (first, second):
        assert briefing.MODELED in r.text and "MODELED times (synthetic run, not measured)" in r.text
        assert "Peers (" not in r.text and "peers are not timed on the synthetic backend" in r.text
    # iteration 1's answer broke the contract (a host sync): its CONFIG and reason come next
    assert '"BLOCK_M": 64' in second.text and "CONFIG:" in second.text
    assert "synchronize" in second.text.split("Recent rejected candidates")[1]
    end = [json.loads(l) for l in next(tmp_path.glob("*/run.jsonl")).read_text().splitlines()][-1]
    assert end["event"] == "run_end" and "(MODELED)" in end["final_line"]
    assert "best peer" not in end["final_line"]
    assert end["final_line"].endswith("; peers are not timed on the synthetic backend")


def test_the_prompt_shows_the_parent_the_tree_chose_and_a_repair_s_error():
    champ = SPEC.baseline.read_text()
    parent = _with_config(champ, "an earlier, slower idea", BLOCK_SIZE=2048)
    ctx = ProposalContext(spec=SPEC, iteration=5, champion_code=champ, champion_id="it0002",
                          champion_profile=dict(RESULT["candidate"]), parent_id="it0003",
                          parent_code=parent, selection="UCB1: score 1.250",
                          repair={"of": "it0004", "root": "it0004", "attempt": 1, "repairs": 2,
                                  "error": "rel-L2 0.3 > 0.01 on 9x100", "code": "# NOTE: the failed file\n"})
    text = "\n".join(m["content"] for m in prompt.build_prompt(ctx, 16000))
    assert "## Parent code (`it0003`), the file to improve" in text and "UCB1: score 1.250" in text
    assert "not the champion `it0002`" in text and "an earlier, slower idea" in text
    assert "## Champion code" not in text
    assert "## Repair 1/2: your candidate `it0004`" in text and "rel-L2 0.3 > 0.01 on 9x100" in text
    assert "# NOTE: the failed file" in text
    # the champion as parent (search: chain, or the tree's pick): the prompt is the one before the tree
    same = ProposalContext(spec=SPEC, iteration=5, champion_code=champ, champion_id="it0002",
                           champion_profile={}, parent_id="it0002", parent_code=champ)
    plain = "\n".join(m["content"] for m in prompt.build_prompt(same, 16000))
    assert "## Champion code (`it0002`), the file to improve" in plain and "## Repair" not in plain
