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
