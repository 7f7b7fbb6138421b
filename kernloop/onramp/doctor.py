"""`kernloop doctor`: one line for each piece KernLoop can use (GPU and driver, Triton, ncu, Liger, QuACK, Ray, the nebius CLI, the MCP SDK, the LLM endpoint, the Tavily key), saying whether it is there and usable and what its absence disables.

The facts are gathered at the edge (`gather`: imports in child processes, bounded commands, one
HTTP request); `lines` turns them into the report and decides nothing else (pure).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from importlib import metadata

from kernloop import settings
from kernloop.errors import ArgParser

PROBE_S = 60.0   # one import or one command; a hung driver must not hang the doctor
GPU_PROBE = ("import json, torch\n"
             "ok = torch.cuda.is_available()\n"
             "print(json.dumps({'torch': torch.__version__, 'cuda': torch.version.cuda, 'ok': ok,\n"
             "  'names': [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if ok else []}))")

# One tiny kernel compiled and run where the judge would run it (the GPU, else the interpreter):
# a file, since @triton.jit reads its function's source.
TRITON_PROBE = ("import json, torch, triton, triton.language as tl\n"
                "@triton.jit\n"
                "def inc(x, n: tl.constexpr):\n"
                "    o = tl.arange(0, n)\n"
                "    tl.store(x + o, tl.load(x + o) + 1)\n"
                "dev = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
                "x = torch.arange(16, dtype=torch.float32, device=dev)\n"
                "inc[(1,)](x, 16)\n"
                "print(json.dumps({'ok': bool((x.cpu() == torch.arange(16) + 1).all())}))\n")


def version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def run(cmd: list[str], env: dict | None = None) -> tuple[int | None, str]:
    """(exit code, output) of a bounded command; (None, why) when it cannot run or hangs."""
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=PROBE_S, env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None, f"no answer in {PROBE_S:g} s"
    except OSError as e:
        return None, e.strerror or str(e)
    return out.returncode, (out.stdout.strip() or out.stderr.strip())


def imports(module: str) -> tuple[bool, str]:
    """Whether `module` imports, in a child (a broken install may crash or hang the interpreter)."""
    code, out = run([sys.executable, "-c", "import os, site\n"   # KERNLOOP_SITE as the checker reads it
                     "[site.addsitedir(d) for d in os.environ.get('KERNLOOP_SITE', '').split(os.pathsep) if d]\n"
                     f"import {module}"])
    return code == 0, "" if code == 0 else (out.strip().splitlines() or ["?"])[-1][:160]


def triton_facts(on_gpu: bool) -> dict:
    """Whether a Triton kernel compiles and runs and gives the right numbers: on the GPU, else in the
    interpreter (in a child, bounded)."""
    env = {**os.environ, **({} if on_gpu else {"TRITON_INTERPRET": "1"})}
    with tempfile.TemporaryDirectory(prefix="kernloop-doctor-") as d:
        probe = os.path.join(d, "probe.py")
        with open(probe, "w") as f:
            f.write(TRITON_PROBE)
        code, out = run([sys.executable, probe], env=env)
    try:
        ok = code == 0 and json.loads(out.splitlines()[-1])["ok"]
    except (IndexError, ValueError, KeyError, TypeError):
        ok = False
    return {"ran": ok, "where": "on the GPU" if on_gpu else "in the interpreter (no GPU)",
            "why": "" if ok else (out.strip().splitlines() or ["wrong result"])[-1][:120] if code else "wrong result"}


def llm_facts() -> dict:
    """The LLM endpoint: configured?, and does GET {base}/models answer (one request, bounded)."""
    import nemotron_client
    cfg = nemotron_client.config_from_env()
    if cfg is None:
        return {"configured": False}
    req = urllib.request.Request(cfg.base_url.rstrip("/") + "/models",
                                 headers={"Authorization": f"Bearer {cfg.api_key}"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            ids = [m.get("id") for m in json.loads(r.read().decode("utf-8", "replace")).get("data", [])]
            return {"configured": True, "host": nemotron_client.endpoint_host(cfg.base_url), "reachable": True,
                    "model": cfg.model, "listed": cfg.model in ids}
    except (urllib.error.URLError, OSError, ValueError) as e:
        why = getattr(e, "reason", None) or e
        return {"configured": True, "host": nemotron_client.endpoint_host(cfg.base_url), "reachable": False,
                "why": " ".join(str(why).split())[:120]}


def gather() -> dict:
    """Every fact the report needs, from this machine."""
    code, out = run([sys.executable, "-c", GPU_PROBE])
    gpu = json.loads(out.splitlines()[-1]) if code == 0 else {"error": (out.strip().splitlines() or ["?"])[-1][:160]}
    smi = shutil.which("nvidia-smi")
    driver = run([smi, "--query-gpu=driver_version", "--format=csv,noheader"])[1].splitlines()[:1] if smi else []
    ncu = shutil.which("ncu")
    nebius = shutil.which(settings.get("KERNLOOP_NEBIUS_CLI"))
    facts = {"python": sys.version.split()[0], "gpu": gpu, "driver": driver[0] if driver else None,
             "triton": version("triton"), "ncu": ncu and run([ncu, "--version"])[1].splitlines()[-1:],
             "ncu_setting": settings.get("KERNLOOP_NCU"), "nebius": nebius, "ray": version("ray"),
             "mcp": version("mcp"), "llm": llm_facts(), "tavily_key": settings.is_set("TAVILY_API_KEY"),
             "tavily": version("tavily-python")}
    if facts["triton"] and "error" not in gpu:
        facts["triton_probe"] = triton_facts(bool(gpu["ok"]))
    for lib, module, dist in (("liger", "liger_kernel", "liger-kernel"), ("quack", "quack", "quack-kernels")):
        ok, why = imports(module)
        absent = why.startswith(f"ModuleNotFoundError: No module named '{module}'")
        facts[lib] = {"version": version(dist), "imports": ok, "present": ok or not absent, "why": why}
    return facts


def _gpu_line(f: dict) -> str:
    g = f["gpu"]
    if "error" in g:
        return f"torch: does not import ({g['error']}): nothing runs (pip install torch)"
    if not g["ok"]:
        return f"GPU: none visible to torch {g['torch']}: the SYNTHETIC backend (times modeled), or --backend nebius/ray"
    names = ", ".join(dict.fromkeys(g["names"]))
    return f"GPU: {len(g['names'])} x {names} (driver {f['driver'] or '?'}, CUDA {g['cuda']}, torch {g['torch']})"


def _triton_line(f: dict) -> str:
    if not f["triton"]:
        return "triton: not installed: nothing can be judged (pip install triton)"
    p = f.get("triton_probe")
    if p is None:
        return f"triton: {f['triton']}: not tried (torch does not import)"
    if p["ran"]:
        return f"triton: {f['triton']}: a test kernel compiled and ran right {p['where']}"
    return f"triton: {f['triton']}: a test kernel failed {p['where']} ({p['why']}): nothing can be judged"


def _peer_line(name: str, pkg: str, p: dict) -> str:
    if p["imports"]:
        return f"{name}: {pkg} {p['version'] or '(version unknown)'} imports: timed as a peer on a GPU"
    if p["present"]:
        return f"{name}: {pkg} {p['version'] or ''} is installed but does not import ({p['why']}): its peer is skipped"
    return f"{name}: not installed: its peer is skipped (pip install {pkg})"


def _llm_line(llm: dict) -> str:
    if not llm["configured"]:
        return "LLM: not configured (KERNLOOP_LLM_API_KEY / KERNLOOP_LLM_BASE_URL unset): the built-in tuner proposes"
    if not llm["reachable"]:
        return f"LLM: {llm['host']} not reachable ({llm['why']}): an LLM run would stop at its first request"
    listed = "listed" if llm["listed"] else "NOT listed by the endpoint"
    return f"LLM: {llm['host']} reachable, model {llm['model']} {listed}: the LLM proposes"


def lines(f: dict) -> list[str]:
    """The report, one line a piece, from gathered facts (pure)."""
    out = [f"python: {f['python']}", _gpu_line(f)]
    out.append(_triton_line(f))
    if f["ncu_setting"] == "off":
        out.append("ncu: off (KERNLOOP_NCU=off): a champion's profile has no Nsight Compute counters")
    else:
        out.append(f"ncu: {(f['ncu'] or ['?'])[-1]}: a champion's profile includes its counters" if f["ncu"]
                   else "ncu: not on PATH: a champion's profile has no Nsight Compute counters")
    out += [_peer_line("liger", "liger-kernel", f["liger"]), _peer_line("quack", "quack-kernels", f["quack"])]
    out.append(f"ray: {f['ray']}: --backend ray" if f["ray"] else "ray: not installed: no --backend ray "
               "(pip install 'kernloop[ray]')")
    out.append(f"nebius: {f['nebius']}: --backend nebius" if f["nebius"] else "nebius: the CLI is not on PATH "
               "(KERNLOOP_NEBIUS_CLI): no --backend nebius")
    out.append(f"mcp: {f['mcp']}: kernloop mcp" if f["mcp"] else "mcp: not installed: no kernloop mcp "
               "(pip install 'kernloop[mcp]')")
    out.append(_llm_line(f["llm"]))
    if f["tavily_key"]:
        out.append("tavily: key set: research searches the web" + ("" if f["tavily"] else
                   "; but tavily-python is not installed: research uses the shipped notes"))
    else:
        out.append("tavily: no TAVILY_API_KEY: research (LLM runs) uses the shipped notes")
    return out


def main(argv) -> int:
    """`doctor`: the report; exit 1 when something every run needs (torch, a Triton kernel that runs) is missing."""
    ArgParser(prog="kernloop doctor", description=__doc__.splitlines()[0]).parse_args(argv)
    from kernloop.loop import terminal
    f = gather()
    say = terminal.printer()   # within 120 columns, broken at spaces
    for ln in lines(f):
        say(ln)
    return 0 if (f.get("triton_probe") or {}).get("ran") else 1
