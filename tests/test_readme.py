"""The README and docs/ match the code: every variable the code reads is documented, the commands
exist, every generated table is what the code generates, every link resolves."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
ARCHITECTURE = (ROOT / "docs" / "architecture.md").read_text()   # the module table (README links it)
PACKAGES = sorted(p.parent for p in (ROOT / "kernloop").rglob("__init__.py"))


def test_every_environment_variable_is_documented():
    names = set()
    for f in [*ROOT.glob("*.py"), *[f for d in PACKAGES for f in d.glob("*.py")], *(ROOT / "checker").glob("*.py"),
              *(ROOT / "tests").glob("pagekit.py")]:
        names |= set(re.findall(r'"((?:KERNLOOP|TAVILY|NVIDIA)_[A-Z_]*[A-Z])"', f.read_text()))
    assert names, "no variables found: the scan is broken"
    missing = sorted(n for n in names if f"`{n}`" not in README)
    assert missing == []


def test_readme_shows_the_main_and_the_test_command_ci_runs():
    assert "python orchestrator.py --spec specs/matmul.yaml" in README
    ci = (ROOT / ".ci" / "run").read_text()
    test_cmd = "python -m pytest -q -n 4 --dist loadfile tests"
    assert test_cmd in README and test_cmd in ci
    assert "pip install -e ." in README and "pip install -q \".[test,ray]\"" in ci


DOCS = {p.name: p.read_text() for p in sorted((ROOT / "docs").glob("*.md"))}


def test_files_linked_from_the_readme_and_the_docs_exist():
    for link in re.findall(r"\]\(((?:benchmarks|docs|tools)/[^)#]+)", README):
        assert (ROOT / link).exists(), link
    for name, text in DOCS.items():   # docs link relative to docs/: ../benchmarks/results/..., measurement.md
        prose = re.sub(r"`[^`\n]*`", "", text)   # `k[grid](...)` is code, not a link
        for link in re.findall(r"\]\((?!https?:)([^)#\s]+)", prose):
            assert (ROOT / "docs" / link).exists(), (name, link)


def test_the_benchmarks_readme_names_every_script_and_its_links_resolve():
    bench = ROOT / "benchmarks"
    text = (bench / "README.md").read_text()
    scripts = [p for p in bench.rglob("*.py")
               if p.name != "__init__.py" and not {"results", "by_hand", "kb_families"} & set(p.relative_to(bench).parts)]
    assert scripts and [p.name for p in scripts if f"`{p.relative_to(bench).as_posix()}`" not in text] == []
    for readme in bench.rglob("README.md"):
        prose = re.sub(r"`[^`\n]*`", "", readme.read_text())
        for link in re.findall(r"\]\((?!https?:)([^)#\s]+)", prose):
            assert (readme.parent / link).exists(), (readme.relative_to(ROOT).as_posix(), link)


def test_the_readme_is_read_in_five_minutes():
    lines = README.splitlines()
    assert len(lines) <= 250, len(lines)
    assert "## Contents" in README and "## Architecture" in README


def test_the_event_table_is_the_schema():
    import sys
    sys.path.insert(0, str(ROOT))
    from kernloop import trajectory
    assert trajectory.markdown_table() in DOCS["events.md"], \
        "docs/events.md's run.jsonl table differs from trajectory.SCHEMA:\n" + trajectory.markdown_table()


def test_the_module_table_lists_every_module():
    rows = set(re.findall(r"^\| `([\w/]+\.py)`", ARCHITECTURE, re.M))
    files = {p.name for p in ROOT.glob("*.py")} | {p.relative_to(ROOT).as_posix() for d in [*PACKAGES, ROOT / "checker"]
                                                   for p in d.glob("*.py") if p.name != "__init__.py"}
    assert sorted(files - rows) == [] and sorted(r for r in rows - files if "/" in r or r.endswith(".py")) == []
