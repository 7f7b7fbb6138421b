"""`kernloop mcp` driven by the real MCP client over stdio (issue 46): the tools listed, a target
from a torch one-liner, a correct and a wrong kernel judged (interpreter, synthetic backend), a
contract-breaking kernel and a malformed request answered as one-line tool errors, a run started,
followed to its end, another stopped as Ctrl-C would; the server up after each. And the GPU lock:
two processes never inside their timed sections at once."""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from kernloop.trajectory import read_events  # noqa: E402

pytestmark = pytest.mark.slow
mcp = pytest.importorskip("mcp", reason="the MCP SDK is a test extra (pip install '.[test]')")

TOOLS = {"new_target", "list_specs", "check", "peers", "profile", "roofline", "run", "status", "stop",
         "leaderboard", "page"}
WAIT_S = 600   # a bound on a run that never ends, never a verdict on how fast it went


def project(tmp: Path) -> Path:
    """A user's project folder: the softmax spec, its baseline, a wrong copy, a reference file."""
    (tmp / "specs").mkdir()
    for f in ("softmax.yaml", "softmax_naive.py"):
        shutil.copy(ROOT / "specs" / f, tmp / "specs" / f)
    naive = (ROOT / "specs" / "softmax_naive.py").read_text()
    wrong = naive.replace("y = tl.exp(x - m[:, None]) / s[:, None]", "y = tl.exp(x - m[:, None]) / (2.0 * s[:, None])")
    assert wrong != naive
    (tmp / "wrong.py").write_text(wrong)
    (tmp / "ref.py").write_text("import torch\n\n\ndef gelu_tanh(x):\n"
                                "    return torch.nn.functional.gelu(x, approximate='tanh')\n")
    return tmp


def text(res) -> str:
    return "".join(getattr(c, "text", "") for c in res.content)


def data(res) -> dict | list:
    assert not res.is_error, text(res)
    sc = res.structured_content   # a list comes back structured ({"result": [...]}), a dict as JSON text
    if sc is None:
        return json.loads(text(res))
    return sc["result"] if isinstance(sc, dict) and set(sc) == {"result"} else sc


async def wait_ended(s, run_dir: str) -> dict:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        st = data(await s.call_tool("status", {"run_dir": run_dir}))
        if st["ended"] and not st.get("running"):
            return st
        await asyncio.sleep(0.5)
    raise AssertionError(f"the run {run_dir} did not end within {WAIT_S} s")


async def session(home: Path) -> dict:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client
    env = {"PYTHONPATH": str(ROOT), "KERNLOOP_CHECK_TIMEOUT_S": "600",
           **{k: os.environ[k] for k in ("HOME", "TMPDIR", "PATH") if k in os.environ}}
    params = StdioServerParameters(command=sys.executable, args=["-m", "orchestrator", "mcp", "--backend",
                                   "synthetic"], cwd=str(home), env=env)
    seen = {}
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            seen["tools"] = {t.name for t in (await s.list_tools()).tools}
            seen["specs"] = data(await s.call_tool("list_specs", {}))
            seen["new"] = data(await s.call_tool("new_target", {"name": "gelu_tanh", "from_function":
                                                                "ref.py:gelu_tanh", "shape": "256x512",
                                                                "dtype": "fp16"}))
            seen["right"] = data(await s.call_tool("check", {"spec": "softmax", "kernel_path":
                                                             "specs/softmax_naive.py"}))
            seen["wrong"] = data(await s.call_tool("check", {"spec": "softmax", "kernel_path": "wrong.py"}))
            seen["contract"] = await s.call_tool("check", {"spec": "softmax", "kernel_text":
                                                           "import os\nos.system('true')\n"})
            seen["malformed"] = await s.call_tool("check", {"spec": 5})
            seen["no_spec"] = await s.call_tool("check", {"spec": "nope", "kernel_path": "wrong.py"})
            seen["no_gpu"] = await s.call_tool("peers", {"spec": "softmax"})
            seen["run"] = data(await s.call_tool("run", {"spec": "softmax", "iterations": 2,
                                                         "backend": "synthetic"}))
            seen["ended"] = await wait_ended(s, seen["run"]["run_dir"])
            long = data(await s.call_tool("run", {"spec": "softmax", "iterations": 200, "backend": "synthetic"}))
            seen["stop"] = data(await s.call_tool("stop", {"run_dir": long["run_dir"]}))
            seen["board"] = data(await s.call_tool("leaderboard", {}))
            seen["page"] = data(await s.call_tool("page", {"run_dir": seen["run"]["run_dir"]}))
            seen["alive"] = data(await s.call_tool("list_specs", {}))
    return seen


@pytest.fixture(scope="module")
def seen(tmp_path_factory):
    home = project(tmp_path_factory.mktemp("mcp"))
    out = asyncio.run(session(home))
    out["home"] = home
    return out


def test_the_tools_are_listed_and_a_target_is_made_from_a_torch_one_liner(seen):
    assert seen["tools"] == TOOLS
    assert [s["name"] for s in seen["specs"]] == ["softmax"]
    spec = Path(seen["new"]["spec"])
    assert spec == seen["home"] / "specs" / "gelu_tanh.yaml" and spec.is_file()
    assert "gelu_tanh" in [s["name"] for s in seen["alive"]]   # list_specs sees what new_target wrote


def test_a_correct_and_a_wrong_kernel_get_the_verdicts_of_check_and_are_logged(seen):
    right, wrong = seen["right"], seen["wrong"]
    assert right["correct"] is True and right["synthetic"] is True and right["speedup"]
    assert any("verdict: CORRECT" in row for row in right["table"])
    assert wrong["correct"] is False and any(v > 0.01 for v in wrong["rel_l2"].values())
    events = read_events(seen["home"] / "runs" / "mcp-checks.jsonl")
    assert [(e["event"], e["correct"], Path(e["kernel"]).name) for e in events[:2]] == \
        [("check", True, "softmax_naive.py"), ("check", False, "wrong.py")]
    assert all(e["synthetic"] for e in events)


def test_a_contract_breaking_kernel_and_bad_requests_are_one_line_tool_errors(seen):
    for key, says in (("contract", "contract:"), ("malformed", "valid string"), ("no_spec", "'nope' not found"),
                      ("no_gpu", "needs a CUDA GPU")):
        res = seen[key]
        assert res.is_error and says in text(res) and "\n" not in text(res), (key, text(res))
    sent = list((seen["home"] / "runs" / "mcp-checks").glob("*-kernel-*.py"))
    assert [p.read_text() for p in sent] == ["import os\nos.system('true')\n"]   # kept, never run
    logged = read_events(seen["home"] / "runs" / "mcp-checks.jsonl")[-1]
    assert logged["stage"] == "contract" and logged["contract"]
    assert seen["alive"]   # the server answered after every error


def test_a_run_is_started_followed_to_its_end_and_another_stopped(seen):
    ended, stopped = seen["ended"], seen["stop"]
    assert ended["stopped"] == "budget" and ended["done"] == 2 and ended["exit_code"] == 0
    outputs = {p.name: p.read_text(errors="replace")[-1500:] for p in (seen["home"] / "runs" / ".mcp").glob("*.log")}
    assert stopped["stopped"] == "interrupted" and stopped["exit_code"] == 143, (stopped, outputs)   # SIGTERM
    assert Path(seen["page"]["page"]).is_file()
    board = {Path(r["run_dir"]).name: r for r in seen["board"]}
    assert Path(seen["run"]["run_dir"]).name in board and all(r["synthetic"] for r in board.values())


# ---------------------------------------------------------------- the GPU lock

HOLDER = """
import sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
from kernloop.backends import gpulock
log, go, me = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
Path(sys.argv[4]).touch()              # ready
while not go.exists():                 # both start together
    time.sleep(0.01)
for _ in range(25):
    with gpulock.held("7"):
        with open(log, "a") as f:
            f.write(me + " in\\n")
        time.sleep(0.005)              # a timed job: the other holder would write here if it could
        with open(log, "a") as f:
            f.write(me + " out\\n")
"""


def test_two_processes_never_hold_one_gpu_at_once(tmp_path):
    script = tmp_path / "holder.py"
    script.write_text(HOLDER.format(root=str(ROOT)))
    log, go = tmp_path / "log", tmp_path / "go"
    env = {**os.environ, "KERNLOOP_GPU_LOCK_DIR": str(tmp_path / "locks")}
    procs = [subprocess.Popen([sys.executable, str(script), str(log), str(go), me, str(tmp_path / me)], env=env)
             for me in ("a", "b")]
    while not all((tmp_path / me).exists() for me in ("a", "b")):
        assert all(p.poll() is None for p in procs), "a holder died before it began"
        time.sleep(0.01)
    go.touch()
    assert [p.wait(timeout=WAIT_S) for p in procs] == [0, 0]
    lines = log.read_text().split("\n")[:-1]
    assert len(lines) == 100
    pairs = [lines[i:i + 2] for i in range(0, len(lines), 2)]
    assert all(a.split()[0] == b.split()[0] and a.endswith(" in") and b.endswith(" out") for a, b in pairs), \
        json.dumps(lines)
