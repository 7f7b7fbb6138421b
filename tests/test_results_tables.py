"""docs/results.md and docs/history.md are generated from the committed result JSON by
benchmarks/tables.py: they match a fresh render, every time they show is a value of the JSON their
section cites, and an edited number fails both checks."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import tables  # noqa: E402


def test_the_committed_tables_are_the_json():
    assert tables.check() == []


def test_an_edited_number_fails():
    text = tables.RESULTS.read_text()
    assert "| softmax | 6 | 0.0674 ms | 0.0460 ms |" in text or "peers_h200" in text
    # a time: in no cited JSON, and not what a fresh render says
    import re
    first = re.search(r"\| (\d+\.\d{4}) ms \|", text).group(1)
    edited = text.replace(f"| {first} ms |", f"| {float(first) + 0.0003:.4f} ms |", 1)
    assert edited != text and edited != tables.render_results()
    assert any(f"{float(first) + 0.0003:.4f} ms" in m for m in tables.unsupported_times(edited))
    # a ratio or a count: not a JSON value, but no longer what the JSON renders to
    ratio = re.search(r"\*\*(\d+\.\d+)×\*\*", text).group(1)
    assert text.replace(f"**{ratio}×**", "**9.99×**", 1) != tables.render_results()


def test_each_section_cites_its_json_with_a_commit():
    text = tables.render_results() + tables.render_history()
    for block in text.split("\n## ")[1:]:
        src = [line for line in block.splitlines() if line.startswith("Source: ")]
        assert src and "commit" in src[0], block.splitlines()[0]


def test_false_promotions_and_what_each_figure_exercised_are_reported():
    text = tables.render_results()
    for want in ("softmax/swap 9/10 (before the arena fix)", "softmax/default 1/20 (after the arena fix)",
                 "softmax/swap 2/20 (after the arena fix)", "100 rounds inside one judge job",
                 "the confirmation rule was never exercised", "| baseline warm | 3.4 s | 8.9 s | 9.2 s |"):
        assert want in text, want


def test_the_h100_sections_and_the_readme_line_quote_them():
    import re
    text = tables.render_results()
    for title in ("The tuner against the best peer, on the H100 (issue 43)",
                  "KernelBench-format problems from `baseline: torch` (issue 43)",
                  "Tree against chain (issue 45)", "A model end to end (issue 44)",
                  "A model end to end, operator cards only (issue 44, session 25)"):
        assert f"\n## {title}\n" in text, title
    readme = (ROOT / "README.md").read_text()
    (line,) = [row for row in readme.splitlines() if "H100, session 28" in row]
    quoted = line[line.index("H100, session 28"):]
    assert len(re.findall(r"\d+\.\d+×", quoted)) == 4 + 2 + 5   # session 28's peers, tree / chain and model
    for num in re.findall(r"\d+\.\d+×|\d+\.\d{4} ms|\d+ of \d+", quoted):
        assert num in text, (num, line)
