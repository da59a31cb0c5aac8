"""The documentation's shape: the README stays a user guide, every measured table in
docs/results says how it was made, and the docs' relative links lead somewhere."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
RESULTS = REPO / "docs" / "results"
_spec = importlib.util.spec_from_file_location("_results", REPO / "benchmarks" / "_results.py")
_results = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_results)

SETUP = ('pip install torch==2.13.0 -e . && python -m esopt.sweep -m +experiment=quickstart',
         'pip install torch==2.13.0 -e ".[test]" && python -m pytest -q')


def test_readme_is_a_user_guide_of_at_most_300_lines():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines; measurements go to docs/results"


def test_readme_states_the_two_setup_commands_verbatim():
    text = README.read_text(encoding="utf-8")
    for cmd in SETUP:
        assert f"\n{cmd}\n" in text, cmd


def _results_files():
    return sorted(p for p in RESULTS.glob("*.md") if p.name != "README.md")


def test_there_are_results_files():
    assert len(_results_files()) >= 5


@pytest.mark.parametrize("path", _results_files(), ids=lambda p: p.name)
def test_every_results_table_has_command_date_commit_machine(path):
    text = path.read_text(encoding="utf-8")
    sections = _results.read_sections(path)
    assert sections, f"{path.name}: no <!-- bench:begin ... --> section"
    assert text.count("<!-- bench:begin ") == len(sections), f"{path.name}: an unclosed or duplicate section"
    for slug, fields in sections.items():
        missing = [f for f in _results.FIELDS if not fields.get(f, "").strip()]
        assert not missing, f"{path.name} [{slug}]: missing {missing}"
        assert re.match(r"\d{4}-\d\d-\d\d", fields["date"]), f"{path.name} [{slug}]: date {fields['date']!r}"
        assert re.match(r"[0-9a-f]{7}", fields["commit"]), f"{path.name} [{slug}]: commit {fields['commit']!r}"
    # every Markdown table sits inside a section (so it has the four fields)
    outside = re.sub(r"<!-- bench:begin (\S+) -->.*?<!-- bench:end \1 -->", "", text, flags=re.S)
    assert not re.search(r"^\|.*\|$", outside, re.M), f"{path.name}: a table outside a bench section"


def _docs():
    return [README, REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").rglob("*.md"))]


@pytest.mark.parametrize("path", [p for p in _docs() if p.exists()], ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(path):
    text = path.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://|#|mailto:", target):
            continue
        dest = (path.parent / target.split("#")[0]).resolve()
        assert dest.exists(), f"{path.relative_to(REPO)}: broken link {target}"
