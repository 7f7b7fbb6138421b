"""The house drawn from its imports stays walkable: few top-level files, few floors, no cycle, a face per package."""
import ast
from pathlib import Path

from tools import structure

ROOT = Path(__file__).resolve().parent.parent

# The project's source: every .py file outside tests/, run outputs (runs/, benchmarks/results/) and
# specs/ (where a user's own kernels live), the checker, benchmarks/ and tools/ included.
OUTSIDE_SOURCE = {"tests", "runs", "specs", "build", "benchmarks/results"}
MAX_FUNCTION_LINES, MAX_MODULE_LINES, MAX_TOP_LEVEL_FILES = 80, 500, 12

# The exceptions, each with its reason; the lists may only shrink.
LONG_FUNCTIONS: dict[str, str] = {}
NO_DOCSTRING: dict[str, str] = {}   # module -> why it has no docstring (none today)


def outside(rel: Path) -> bool:
    """True for a path (relative to the root) under one of OUTSIDE_SOURCE's folders."""
    return any(rel.parts[:len(Path(o).parts)] == Path(o).parts for o in OUTSIDE_SOURCE)


def sources(root: Path = ROOT) -> list[Path]:
    dirs = [d for d in sorted(root.iterdir()) if d.is_dir() and not d.name.startswith((".", "_"))
            and not outside(d.relative_to(root))]
    return sorted(root.glob("*.py")) + [p for d in dirs for p in sorted(d.rglob("*.py"))
                                        if not outside(p.relative_to(root))]


def long_functions(root: Path = ROOT) -> dict[str, int]:
    """`dotted.module.function` -> its length in lines, for every function over the limit."""
    mods = {".".join(p.relative_to(root).with_suffix("").parts): p for p in sources(root)}
    return structure.long_functions(mods, MAX_FUNCTION_LINES)


def test_the_house_has_few_top_level_files_few_floors_and_no_cycle():
    d = structure.draw()
    assert len(d["top_level_files"]) <= 12, d["top_level_files"]
    assert d["file_cycles"] == [] and d["package_cycles"] == []
    assert max(d["package_floors"].values()) <= 7, d["package_floors"]
    assert {"kernloop.loop", "kernloop.propose", "kernloop.contract", "kernloop.backends", "kernloop.onramp"} <= set(d["packages"])


def test_every_package_has_a_face_that_says_its_job():
    for pkg in structure.draw()["packages"]:
        doc = ast.get_docstring(ast.parse((ROOT / pkg.replace(".", "/") / "__init__.py").read_text()))
        assert doc and len(doc.split()) >= 5, f"{pkg}/__init__.py says nothing about its job"


def test_no_function_over_80_lines_outside_tests():
    long = long_functions()
    assert {f: n for f, n in long.items() if f not in LONG_FUNCTIONS} == {}, "split it into named steps"
    assert sorted(set(LONG_FUNCTIONS) - set(long)) == [], "shortened: take it off LONG_FUNCTIONS"


def test_every_module_is_short_and_says_what_it_is():
    for p in sources():
        rel, text = p.relative_to(ROOT).as_posix(), p.read_text(encoding="utf-8")
        assert len(text.splitlines()) < MAX_MODULE_LINES, f"{rel}: {len(text.splitlines())} lines"
        assert bool(ast.get_docstring(ast.parse(text))) != (rel in NO_DOCSTRING), \
            f"{rel}: no module docstring" if rel not in NO_DOCSTRING else f"{rel} has one now: off NO_DOCSTRING"
    assert len(list(ROOT.glob("*.py"))) <= MAX_TOP_LEVEL_FILES


def test_the_guards_see_the_packages_and_catch_a_long_function(tmp_path):
    scanned = {p.relative_to(ROOT).parts[0] for p in sources()}
    assert {"kernloop", "checker", "benchmarks", "tools", "orchestrator.py"} <= scanned
    assert not scanned & OUTSIDE_SOURCE and not any(outside(p.relative_to(ROOT)) for p in sources())
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text("def f():\n" + "    x = 1\n" * 80)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "t.py").write_text("def g():\n" + "    x = 1\n" * 80)
    assert long_functions(tmp_path) == {"pkg.m.f": 81}


def test_the_drawing_finds_a_cycle_and_counts_floors(tmp_path):
    (tmp_path / "top.py").write_text("import pkg.a\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text('"""A package."""\n')
    (tmp_path / "pkg" / "a.py").write_text("from pkg import b\n")
    (tmp_path / "pkg" / "b.py").write_text("def f():\n    from pkg.a import x\n")
    d = structure.draw(tmp_path)
    assert d["file_cycles"] == [["pkg.a", "pkg.b"]] and d["file_floors"] is None
    (tmp_path / "pkg" / "b.py").write_text("import os\n")
    d = structure.draw(tmp_path)
    assert d["file_cycles"] == [] and d["file_floors"] == 3
    assert d["package_floors"] == {"top": 2, "pkg": 1} and d["top_level_files"] == ["top.py"]


# ---------------------------------------------------------------- checker/ is one self-contained package

CHECKER = ROOT / "checker"
CHECKER_MODULES = {p.stem for p in CHECKER.glob("*.py")} - {"__init__"}
# Product code: what ships or runs a run (benchmarks/ and tools/ may set their own sys.path).
PRODUCT = [ROOT / n for n in ("orchestrator.py", "nemotron_client.py", "nebius_jobs.py", "research.py")] \
    + sorted((ROOT / "kernloop").rglob("*.py")) + sorted(CHECKER.glob("*.py"))
# The one sys.path change allowed there: `new --from mod:fn` imports the USER's module from cwd.
USER_MODULE_PATH = {("kernloop/onramp/target.py", "sys.path.insert(0, os.getcwd())   # user module: `new --from mod:fn`")}


def _imports(tree: ast.AST) -> list[tuple[str, int, int]]:
    """(module named, relative level, line) of every import statement, at any depth."""
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            out += [(a.name, 0, n.lineno) for a in n.names]
        elif isinstance(n, ast.ImportFrom):
            out.append((n.module or "", n.level, n.lineno))
    return out


def checker_import_problems(folder: Path = CHECKER) -> list[str]:
    """What breaks the package rule in `folder`'s modules: an import of kernloop, a flat import of
    a sibling (`import timing`, `from sides import ...`), `__import__`, or importlib by a
    sibling's name."""
    mods = {p.stem for p in folder.glob("*.py")} - {"__init__"}
    bad = []
    for p in sorted(folder.glob("*.py")):
        tree = ast.parse(p.read_text(encoding="utf-8"))
        for name, level, line in _imports(tree):
            top = name.split(".")[0]
            if level == 0 and top == "kernloop":
                bad.append(f"{p.name}:{line}: imports {name} (the checker ships alone)")
            elif level == 0 and top in mods:
                bad.append(f"{p.name}:{line}: flat import of sibling {name} (use `from . import`)")
        for n in ast.walk(tree):
            if isinstance(n, ast.Name) and n.id == "__import__":
                bad.append(f"{p.name}:{n.lineno}: __import__")
            if isinstance(n, ast.Call) and isinstance(n.func, (ast.Attribute, ast.Name)) \
                    and getattr(n.func, "attr", getattr(n.func, "id", None)) in ("import_module", "find_spec") \
                    and n.args and isinstance(n.args[0], ast.Constant) and isinstance(n.args[0].value, str) \
                    and n.args[0].value.split(".")[0] in mods | {"checker"}:
                bad.append(f"{p.name}:{n.lineno}: imports sibling {n.args[0].value} by name")
    return bad


def sys_path_changes(files) -> list[tuple[str, str]]:
    """(file relative to the root, the line) of every sys.path change (insert, append, extend,
    assignment to it or a slice of it) in `files`."""
    out = []
    for p in files:
        text = p.read_text(encoding="utf-8")
        lines = text.splitlines()
        for n in ast.walk(ast.parse(text)):
            hit = False
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) \
                    and n.func.attr in ("insert", "append", "extend") and ast.unparse(n.func.value) == "sys.path":
                hit = True
            elif isinstance(n, (ast.Assign, ast.AugAssign)):
                targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                hit = any(ast.unparse(t).startswith("sys.path") for t in targets)
            if hit:
                out.append((p.relative_to(ROOT).as_posix() if p.is_relative_to(ROOT) else str(p),
                            n.lineno, lines[n.lineno - 1].strip()))
    return [(f, line) for f, _, line in sorted(out)]


def test_the_checker_imports_its_siblings_relatively_and_nothing_of_kernloop():
    assert CHECKER_MODULES >= {"check", "judge", "worker", "serve", "ncu", "nebius_entry"}
    assert checker_import_problems() == []


def test_no_checker_module_is_named_like_a_standard_module():
    """The Nebius launchers run as scripts from checker/ (its folder first on sys.path): a module
    there named like the standard library's would shadow it."""
    import sys
    assert CHECKER_MODULES & set(sys.stdlib_module_names) == set()


def test_the_launchers_import_only_the_standard_library():
    import sys
    for name in ("nebius_entry", "nebius_batch_entry"):
        tree = ast.parse((CHECKER / f"{name}.py").read_text(encoding="utf-8"))
        named = {m.split(".")[0] for m, level, _ in _imports(tree)}
        assert all(level == 0 for _, level, _ in _imports(tree)), name
        assert named <= set(sys.stdlib_module_names), (name, named - set(sys.stdlib_module_names))


def test_product_code_changes_no_sys_path_but_for_the_users_module():
    assert set(sys_path_changes(PRODUCT)) == USER_MODULE_PATH


def test_the_package_guards_catch_what_they_are_for(tmp_path):
    (tmp_path / "a.py").write_text("import b\nfrom b import x\nfrom . import b\nimport kernloop.spec\n"
                                   "def f():\n    __import__('b')\n    import importlib\n"
                                   "    importlib.import_module('b')\n    importlib.import_module('triton')\n")
    (tmp_path / "b.py").write_text("x = 1\n")
    got = checker_import_problems(tmp_path)
    assert sorted(int(g.split(":")[1]) for g in got) == [1, 2, 4, 6, 8], got
    (tmp_path / "c.py").write_text("import sys, os\nsys.path.insert(0, 'x')\nsys.path[:0] = ['y']\n"
                                   "sys.path.append('z')\nsys.path = []\nprint(sys.path[0])\n")
    assert [line for _, line in sys_path_changes([tmp_path / "c.py"])] == [
        "sys.path.insert(0, 'x')", "sys.path[:0] = ['y']", "sys.path.append('z')", "sys.path = []"]
