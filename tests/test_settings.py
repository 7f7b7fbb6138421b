"""settings.py: one table of every environment variable, one error naming it, and the README's
environment table is that table (each variable once)."""
import re
from pathlib import Path

import pytest

from kernloop import settings
from kernloop.settings import SettingsError

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name,raw,accepted", [
    ("KERNLOOP_CHECK_TIMEOUT_S", "abc", "a number in (0, 86400]"),
    ("KERNLOOP_CHECK_TIMEOUT_S", "0", "a number in (0, 86400]"),
    ("KERNLOOP_CHECK_TIMEOUT_S", "nan", "a number in (0, 86400]"),
    ("KERNLOOP_LLM_TEMPERATURE", "hot", "a number in [0, 2] or 'none'"),
    ("KERNLOOP_LLM_MAX_TOKENS", "1.5", "an integer in [1, 1e+07]"),
    ("KERNLOOP_RESEARCH_MAX_RESULTS", "21", "an integer in [1, 20]"),
    ("KERNLOOP_NEBIUS_WAIT_S", "-1", "a number > 0"),
    ("KERNLOOP_NEBIUS_CHECK_MODE", "cpu", "one of gpu, interpret, interpret-timed"),
    ("KERNLOOP_PREWARM", "yes", "one of 0, 1"),
])
def test_a_bad_value_is_one_error_naming_the_variable_and_what_it_accepts(name, raw, accepted):
    with pytest.raises(SettingsError) as e:
        settings.get(name, {name: raw})
    assert str(e.value) == f"environment variable {name}={raw!r}: expected {accepted}"
    with pytest.raises(SettingsError, match=name):   # validate() finds it among all the others
        settings.validate({"KERNLOOP_LLM_TOP_P": "0.5", name: raw})


def test_typed_values_defaults_and_none():
    assert settings.get("KERNLOOP_CHECK_TIMEOUT_S", {}) == 300.0
    assert settings.get("KERNLOOP_CHECK_TIMEOUT_S", {"KERNLOOP_CHECK_TIMEOUT_S": " 12.5 "}) == 12.5
    assert settings.get("KERNLOOP_LLM_MAX_RETRIES", {"KERNLOOP_LLM_MAX_RETRIES": "0"}) == 0
    assert settings.get("KERNLOOP_LLM_TOP_P", {"KERNLOOP_LLM_TOP_P": "None"}) is None
    assert settings.get("KERNLOOP_LLM_API_KEY", {"KERNLOOP_LLM_API_KEY": "   "}) is None   # blank = unset
    assert settings.get("KERNLOOP_NEBIUS_CHECK_MODE", {"KERNLOOP_NEBIUS_CHECK_MODE": "Interpret"}) == "interpret"
    settings.validate({})
    with pytest.raises(KeyError, match="not declared"):
        settings.get("KERNLOOP_NO_SUCH_THING", {})


def _packages():
    return sorted(p.parent for p in (ROOT / "kernloop").rglob("__init__.py"))


def _code_files():
    return [*ROOT.glob("*.py"), *[f for d in _packages() for f in d.glob("*.py")], *(ROOT / "checker").glob("*.py"),
            *(ROOT / "tests").glob("*.py"), ROOT / ".ci" / "run"]


def test_every_variable_the_code_names_is_declared_and_every_declared_one_is_used():
    named = set()
    for f in _code_files():
        if f.name in ("settings.py", "test_settings.py", "test_bad_inputs.py"):
            continue
        named |= set(re.findall(r"[\"' $]((?:KERNLOOP|TAVILY|NVIDIA)_[A-Z0-9_]*[A-Z0-9])[\"'=]",
                                f.read_text()))
    named -= {"KERNLOOP_RESULT"}   # the checker's result-line marker, not a variable
    # prefixes in startswith(...) filters are not variables
    named = {n for n in named if n in settings.VARS or not any(v.startswith(n) for v in settings.VARS)}
    assert named, "the scan found nothing: it is broken"
    assert sorted(named - set(settings.VARS)) == []
    assert sorted(set(settings.VARS) - named) == []


def test_no_module_parses_the_environment_itself():
    """Only settings.py turns variables into values; others may pass os.environ along."""
    for f in [*ROOT.glob("*.py"), *[f for d in _packages() for f in d.glob("*.py")]]:
        if f.name == "settings.py":
            continue
        for m in re.finditer(r"os\.environ(?:\.get)?\(?\[?\"((?:KERNLOOP|TAVILY|NVIDIA)_\w+)", f.read_text()):
            pytest.fail(f"{f.name} reads {m.group(1)} itself: use settings.get")


def test_readme_environment_table_is_the_settings_table_each_variable_once():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Environment variables", 1)[1].split("\n## ", 1)[0]
    rows = [ln for ln in section.splitlines() if ln.startswith("| `")]
    assert rows == settings.readme_table()
    for name in settings.VARS:   # documented once in the whole README: in this table
        assert readme.count(f"| `{name}` |") == 1, name
    assert "||" not in readme


def test_the_loop_defaults_are_one_table():
    import inspect

    from kernloop import decision
    from kernloop.spec import LOOP_KEYS
    assert LOOP_KEYS == set(settings.LOOP_DEFAULTS)
    params = inspect.signature(decision.decide).parameters
    assert params["min_gain"].default == settings.LOOP_DEFAULTS["min_gain"]
    assert params["sigma"].default == settings.LOOP_DEFAULTS["sigma"]
    # the promotion bar's two are the checker's, where the rule is written (checker/promotion.py)
    from checker import promotion
    assert (settings.LOOP_DEFAULTS["min_gain"], settings.LOOP_DEFAULTS["sigma"]) == (promotion.MIN_GAIN, promotion.SIGMA)
    src = "".join(p.read_text() for p in [*ROOT.glob("*.py"), *[f for d in _packages() for f in d.glob("*.py")]])
    assert not re.search(r"\b0\.02\b|\"sigma\", 2\.0", src), "a loop default written again outside promotion.py"
