"""`kernloop mcp`: KernLoop's judge and loop served over the Model Context Protocol (stdio), a thin layer of tool declarations around kernloop/onramp/mcptools.py.

    claude mcp add kernloop -- kernloop mcp
    kernloop mcp --backend synthetic --runs runs      (what the tests drive)

Every tool error is one line (the caller's mistake, a contract violation, no GPU); the server
stays up after each.
"""
from __future__ import annotations

import functools
import logging
from pathlib import Path

from kernloop.errors import ArgParser, KernLoopError
from kernloop.onramp import mcptools as tools

INSTRUCTIONS = (
    "KernLoop judges GPU kernels (Triton) against a spec: correctness as rel-L2 against a float32 "
    "torch reference on every check shape, and time with L2 flushed, against the spec's baseline "
    "and the kernels a user would otherwise pick (peers). Start with list_specs or new_target, "
    "then check kernels; run starts the optimization loop in the background.")


def parse_args(argv):
    p = ArgParser(prog="kernloop mcp", description="Serve KernLoop's tools over MCP (stdio).")
    p.add_argument("--backend", default="auto", choices=["auto", "local", "synthetic"],
                   help="where checks run: auto = local if a CUDA GPU is visible, else synthetic")
    p.add_argument("--runs", default="runs", help="the runs folder (checks log, runs started; default: runs)")
    p.add_argument("--root", default=".", help="the project folder holding specs/ (default: .)")
    return p.parse_args(argv)


def one_line(fn):
    """The tool's errors as the SDK's tool errors, one line each: a KernLoopError says what was
    wrong; anything else names its type (the server logs the traceback on stderr)."""
    from mcp.server.mcpserver.exceptions import ToolError

    @functools.wraps(fn)
    def wrapped(*a, **kw):
        try:
            return fn(*a, **kw)
        except KernLoopError as e:
            raise ToolError(" ".join(str(e).split())) from None
        except Exception as e:   # noqa: BLE001 - a tool that breaks must not take the server with it
            logging.getLogger("kernloop.mcp").exception("tool %s failed", fn.__name__)
            raise ToolError(f"{type(e).__name__}: {' '.join(str(e).split())[:300]}") from None
    return wrapped


async def one_line_results(ctx, call_next):
    """Middleware: a tool error the SDK wrote itself (arguments that fail the tool's schema)
    reaches the caller on one line too, like the tools' own."""
    res = await call_next(ctx)
    if isinstance(res, dict) and res.get("isError"):   # a tool's result, as it goes on the wire
        for block in res.get("content") or []:
            if isinstance(block, dict) and isinstance(block.get("text"), str):
                block["text"] = " ".join(block["text"].split())[:1000]
    return res


def build(ws: tools.Workspace):
    """The MCPServer with KernLoop's tools bound to one workspace."""
    from mcp.server.mcpserver import MCPServer
    server = MCPServer("kernloop", instructions=INSTRUCTIONS, middleware=[one_line_results])

    def tool(fn):
        server.add_tool(one_line(fn), name=fn.__name__.rstrip("_"), description=fn.__doc__)
        return fn

    @tool
    def list_specs() -> list[dict]:
        """The specs in specs/: name, shapes, dtype, baseline, tolerance, peers."""
        return tools.list_specs(ws)

    @tool
    def new_target(name: str, from_function: str | None = None, from_kernelbench: str | None = None,
                   shape: str | None = None, dtype: str | None = None, force: bool = False) -> dict:
        """Write specs/NAME.yaml from a torch function (MODULE:FUNCTION or path/file.py:fn, with
        shape like 4096x8192) or a KernelBench problem file on the server's machine; runs `new`."""
        return tools.new_target(ws, name, from_function, from_kernelbench, shape, dtype, force)

    @tool
    def check(spec: str, kernel_path: str | None = None, kernel_text: str | None = None,
              champion_path: str | None = None, champion_text: str | None = None) -> dict:
        """Correctness and time of one kernel (a file, or its text) against the spec's baseline
        or a given champion: the contract, then the judge; the same verdict as `kernloop check`."""
        return tools.check(ws, spec, kernel_path, kernel_text, champion_path, champion_text)

    @tool
    def peers(spec: str) -> dict:
        """Times of the spec's peers (torch, torch.compile, Liger, QuACK, ...) beside its baseline (GPU)."""
        return tools.peers(ws, spec)

    @tool
    def profile(spec: str, kernel_path: str | None = None, kernel_text: str | None = None) -> dict:
        """Registers, occupancy and ncu counters of a kernel, with findings (GPU)."""
        return tools.profile(ws, spec, kernel_path, kernel_text)

    @tool
    def roofline(spec: str, kernel_path: str | None = None, kernel_text: str | None = None) -> dict:
        """The spec's floor (FLOPs, compulsory bytes, the device's ceilings) and how close a kernel is."""
        return tools.roofline(ws, spec, kernel_path, kernel_text)

    @tool
    def run(spec: str, iterations: int | None = None, backend: str | None = None, proposer: str = "auto",
            parallel: int | None = None, seed: int = 0) -> dict:
        """Start the optimization loop on a spec in the background; returns its run folder."""
        return tools.run(ws, spec, iterations, backend, proposer, parallel, seed)

    @tool
    def status(run_dir: str) -> dict:
        """A run's iterations, champion and speedup so far, and whether it has ended."""
        return tools.status(ws, run_dir)

    @tool
    def stop(run_dir: str) -> dict:
        """End a run this server started, as Ctrl-C would (it stays resumable)."""
        return tools.stop(ws, run_dir)

    @tool
    def leaderboard() -> list[dict]:
        """The champion of every run in the runs folder (synthetic runs marked, ranked apart)."""
        return tools.leaderboard(ws)

    @tool
    def page(run_dir: str) -> dict:
        """The path of a run's page (rendered now from its log)."""
        return tools.page_of(ws, run_dir)

    return server


def main(argv) -> int:
    """`kernloop mcp`: serve until the client closes stdin."""
    args = parse_args(argv)
    try:
        import mcp.server.mcpserver  # noqa: F401 - found before serving, as one error line
    except ImportError:
        raise KernLoopError("kernloop mcp needs the MCP SDK: pip install 'mcp>=2.3' "
                            "(or pip install 'kernloop[mcp]')") from None
    root = Path(args.root)
    runs = Path(args.runs) if Path(args.runs).is_absolute() else root / args.runs
    ws = tools.Workspace(root, runs, args.backend)
    try:
        build(ws).run("stdio")
    finally:
        ws.close()
    return 0
