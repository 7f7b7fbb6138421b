"""The README matches the code: every variable the code reads is documented, the commands exist."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
ARCHITECTURE = (ROOT / "docs" / "drafts" / "architecture.md").read_text()   # the module table (README links it)
PACKAGES = sorted(p.parent for p in ROOT.glob("*/__init__.py") if p.parent.name not in ("checker", "bench", "tests"))


def test_every_environment_variable_is_documented():
    names = set()
    for f in [*ROOT.glob("*.py"), *[f for d in PACKAGES for f in d.glob("*.py")], *(ROOT / "checker").glob("*.py"),
              *(ROOT / "tests").glob("test_page.py")]:
        names |= set(re.findall(r'"((?:KERNLOOP|TAVILY|NVIDIA)_[A-Z_]*[A-Z])"', f.read_text()))
    assert names, "no variables found: the scan is broken"
    missing = sorted(n for n in names if f"`{n}`" not in README)
    assert missing == []


def test_readme_shows_the_main_and_the_test_command_ci_runs():
    assert "python orchestrator.py --spec specs/matmul.yaml" in README
    ci = (ROOT / ".ci" / "run").read_text()
    test_cmd = "python -m pytest -q tests"
    assert test_cmd in README and test_cmd in ci
    assert "pip install -r requirements.txt" in README


def test_results_linked_from_readme_exist():
    for link in re.findall(r"\]\(((?:results|docs)/[^)#]+)", README):
        assert (ROOT / link).exists(), link


def test_the_event_table_is_the_schema():
    import sys
    sys.path.insert(0, str(ROOT))
    import trajectory
    assert trajectory.markdown_table() in README, "README's run.jsonl table differs from trajectory.SCHEMA:\n" \
        + trajectory.markdown_table()


def test_the_module_table_lists_every_module():
    rows = set(re.findall(r"^\| `([\w/]+\.py)`", ARCHITECTURE, re.M))
    files = {p.name for p in ROOT.glob("*.py")} | {f"{d.name}/{p.name}" for d in [*PACKAGES, ROOT / "checker"]
                                                   for p in d.glob("*.py") if p.name != "__init__.py"}
    assert sorted(files - rows) == [] and sorted(r for r in rows - files if "/" in r or r.endswith(".py")) == []
