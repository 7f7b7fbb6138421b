"""Draw KernLoop's structure from its imports: top-level files, packages, floors, import arrows, cycles.

    python tools/structure.py            # the summary table
    python tools/structure.py --json     # the graph as JSON (modules, arrows, floors)
    python tools/structure.py --dot      # Graphviz text of the package graph

A node is a module of the project (tests/, benchmarks/, tools/, checker/ and run folders are
outside: the checker is self-contained and imports only its flat siblings). An arrow is any import statement
in the file, function-local ones included. A module's floor is 1 plus the highest floor it imports
(a module that imports nothing of the project is on floor 1); the house is drawn twice, per file
and per package (a top-level file is its own package). Functions over 80 lines are listed too.
Reads only source text; runs nothing.
"""
from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUTSIDE = {"tests", "benchmarks", "tools", "checker", "runs", "specs", "templates", "docs", "build"}


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Dotted name -> file, for every project module (a package's face is its own name): the
    top-level files, and every package under the top level, `kernloop`'s subpackages included."""
    out = {p.stem: p for p in root.glob("*.py")}
    for init in sorted(root.rglob("__init__.py")):
        pkg = init.parent
        rel = pkg.relative_to(root).parts
        if rel[0] in OUTSIDE or rel[0].startswith(".") or not all((root / Path(*rel[:i])).joinpath("__init__.py").is_file()
                                                                for i in range(1, len(rel) + 1)):
            continue
        name = ".".join(rel)
        for p in pkg.glob("*.py"):
            out[name if p.name == "__init__.py" else f"{name}.{p.stem}"] = p
    return out


def _targets(node: ast.AST, known: set[str]) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in known]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        subs = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in known]
        plain = [a for a in node.names if f"{node.module}.{a.name}" not in known]
        return subs + ([node.module] if plain and node.module in known else [])
    return []


def arrows(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the project modules it imports (itself excluded)."""
    known = set(mods)
    return {m: {t for n in ast.walk(ast.parse(p.read_text())) for t in _targets(n, known)} - {m}
            for m, p in mods.items()}


def package_of(module: str) -> str:
    """`kernloop.loop.state` -> `kernloop.loop`; `kernloop.spec` -> itself (a file of the package
    root is its own package, as a top-level file is); `orchestrator` -> itself."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "kernloop" and len(parts) > 1 else parts[0]


def packages(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for m, targets in graph.items():
        out.setdefault(package_of(m), set()).update(package_of(t) for t in targets)
    return {p: t - {p} for p, t in out.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def floors(graph: dict[str, set[str]]) -> dict[str, int]:
    """Floor of every node of an acyclic graph (ValueError on a cycle)."""
    if cycles(graph):
        raise ValueError(f"no floors with a cycle: {cycles(graph)}")
    memo: dict[str, int] = {}

    def floor(v: str) -> int:
        if v not in memo:
            memo[v] = 1 + max((floor(w) for w in graph.get(v, ())), default=0)
        return memo[v]

    return {v: floor(v) for v in graph}


def long_functions(mods: dict[str, Path], limit: int = 80) -> dict[str, int]:
    """`module.function` -> its length in lines, for every function (nested ones too) over `limit`."""
    out = {}
    for m, p in mods.items():
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > limit:
                out[f"{m}.{n.name}"] = n.end_lineno - n.lineno + 1
    return out


def draw(root: Path = ROOT) -> dict:
    mods = modules(root)
    files = arrows(mods)
    pkgs = packages(files)
    file_cycles, pkg_cycles = cycles(files), cycles(pkgs)
    return {
        "top_level_files": sorted(p.name for p in root.glob("*.py")),
        "packages": sorted(p for p in pkgs if (root / p.replace(".", "/")).is_dir()),
        "modules": len(mods),
        "file_arrows": sum(map(len, files.values())),
        "package_arrows": sum(map(len, pkgs.values())),
        "file_cycles": file_cycles,
        "package_cycles": pkg_cycles,
        "file_floors": None if file_cycles else max(floors(files).values()),
        "package_floors": None if pkg_cycles else floors(pkgs),
        "package_graph": {p: sorted(t) for p, t in sorted(pkgs.items())},
        "long_functions": long_functions(mods),
    }


def table(d: dict) -> str:
    pf = d["package_floors"] or {}
    lines = [f"top-level Python files  {len(d['top_level_files'])}: {' '.join(d['top_level_files'])}",
             f"packages                {len(d['packages'])}: {' '.join(d['packages'])}",
             f"modules                 {d['modules']}",
             f"import arrows           {d['file_arrows']} between files, {d['package_arrows']} between packages",
             f"floors                  {max(pf.values(), default=0)} by package, {d['file_floors']} by file",
             f"cycles                  {len(d['package_cycles'])} between packages, {len(d['file_cycles'])} between files",
             f"functions over 80 lines {len(d['long_functions'])}: "
             + " ".join(f"{f} ({n})" for f, n in sorted(d["long_functions"].items(), key=lambda x: -x[1]))]
    for floor in sorted(set(pf.values()), reverse=True):
        lines.append(f"  floor {floor}: {' '.join(sorted(p for p, f in pf.items() if f == floor))}")
    return "\n".join(lines)


def dot(d: dict) -> str:
    body = [f'  "{p}" -> "{t}";' for p, ts in d["package_graph"].items() for t in ts]
    return "digraph kernloop {\n  rankdir=BT;\n" + "\n".join(body) + "\n}"


def main(argv: list[str]) -> int:
    d = draw()
    print(json.dumps(d, indent=1) if "--json" in argv else dot(d) if "--dot" in argv else table(d))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
