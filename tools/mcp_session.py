"""Drive `kernloop mcp` with the official MCP client over stdio and print the session as a transcript (docs/mcp.md shows one).

    python tools/mcp_session.py [--backend synthetic] [--kernel specs/softmax_naive.py]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def short(value, width: int = 100) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= width else text[:width - 3] + "..."


async def call(s, name: str, args: dict, show: tuple = ()) -> dict | list | None:
    res = await s.call_tool(name, args)
    body = "".join(getattr(c, "text", "") for c in res.content)
    print(f"> {name} {short(args, 90)}")
    if res.is_error:
        print(f"  tool error: {short(body, 110)}")
        return None
    sc = res.structured_content
    out = json.loads(body) if sc is None else sc.get("result", sc)
    for key in show:
        print(f"  {key}: {short(out.get(key), 100)}")
    return out


async def session(backend: str, kernel: str) -> None:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client
    params = StdioServerParameters(command=sys.executable, args=["-m", "orchestrator", "mcp", "--backend", backend,
                                                                 "--runs", "runs/mcp-session"], cwd=str(ROOT))
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            print("tools:", ", ".join(t.name for t in (await s.list_tools()).tools))
            specs = await call(s, "list_specs", {})
            print("  specs:", ", ".join(x["name"] for x in specs))
            line = await call(s, "check", {"spec": "softmax", "kernel_path": kernel},
                              ("correct", "candidate_ms", "baseline_ms", "speedup", "device"))
            for row in (line or {}).get("table", [])[-3:]:
                print("  |", row)
            await call(s, "check", {"spec": "softmax", "kernel_text": "import os\nos.system('id')\n"})
            started = await call(s, "run", {"spec": "softmax", "iterations": 3}, ("run_dir",))
            while True:
                st = await call(s, "status", {"run_dir": started["run_dir"]}, ("done", "champ_ms", "stopped"))
                if st["ended"] and not st.get("running"):
                    break
                await asyncio.sleep(5)
            await call(s, "page", {"run_dir": started["run_dir"]}, ("page",))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="synthetic", choices=["auto", "local", "synthetic"])
    ap.add_argument("--kernel", default="specs/softmax_naive.py")
    a = ap.parse_args()
    asyncio.run(session(a.backend, a.kernel))
    return 0


if __name__ == "__main__":
    sys.exit(main())
