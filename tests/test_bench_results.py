"""benchmarks/_results.py: a benchmark's table lands in docs/results/<topic>.md with its command,
date, commit and machine, and writing it again replaces only its own section."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("_results", REPO / "benchmarks" / "_results.py")
results = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(results)


def test_write_then_read_back_the_header_fields(tmp_path):
    path = results.write_table("speed", "Aggregation speed (10k runs)", "python benchmarks/bench_x.py --runs 5",
                               ["stage", "wall s"], [["aggregate", 3.4567], ["page", "0.77"]],
                               notes="idle machine", results_dir=tmp_path)
    assert path == tmp_path / "speed.md"
    text = path.read_text()
    assert text.startswith("# speed\n")
    assert "| stage | wall s |\n|---|---|\n| aggregate | 3.46 |\n| page | 0.77 |" in text
    fields = results.read_sections(path)["aggregation-speed-10k-runs"]
    assert fields["command"] == "python benchmarks/bench_x.py --runs 5"
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", fields["date"])
    assert re.fullmatch(r"[0-9a-f]{4,40}(-dirty)?|unknown", fields["commit"])
    assert f"{__import__('os').cpu_count()} CPUs" in fields["machine"]
    assert "GiB" in fields["machine"]


def test_rewrite_replaces_its_section_and_keeps_the_rest(tmp_path):
    f = tmp_path / "t.md"
    f.write_text("# t\n\nHand-written intro.\n")
    stamp = dict(date="2026-01-01 00:00 UTC", commit_id="abc1234", machine_line="test box")
    results.write_table("t", "A", "cmd a", ["x"], [[1]], results_dir=tmp_path, **stamp)
    results.write_table("t", "B", "cmd b", ["y"], [[2]], results_dir=tmp_path, **stamp)
    results.write_table("t", "A", "cmd a2", ["x"], [[3]], results_dir=tmp_path, **stamp)
    text = f.read_text()
    assert text.count("bench:begin a -->") == 1 and text.count("bench:begin b -->") == 1
    assert "Hand-written intro." in text
    assert "| 3 |" in text and "| 1 |" not in text and "| 2 |" in text
    assert text.index("bench:begin a") < text.index("bench:begin b")  # replaced where it stood
    got = results.read_sections(f)
    assert got["a"] == {"command": "cmd a2", "date": "2026-01-01 00:00 UTC", "commit": "abc1234",
                        "machine": "test box"}


def test_commit_is_marked_dirty_when_the_tree_has_changes(tmp_path, monkeypatch):
    import subprocess

    monkeypatch.delenv("ESOPT_COMMIT", raising=False)

    def git(*a):
        subprocess.run(["git", *a], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "f").write_text("1")
    git("add", "f")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    clean = results.commit(tmp_path)
    assert re.fullmatch(r"[0-9a-f]{4,40}", clean)
    (tmp_path / "f").write_text("2")
    assert results.commit(tmp_path) == clean + "-dirty"
    assert results.commit(tmp_path / "nowhere") == "unknown"  # not a directory: no git, no crash


def test_a_copied_tree_is_stamped_with_the_commit_it_was_copied_from(tmp_path, monkeypatch):
    """A tree copied to another machine, its .git absent or stale: ESOPT_COMMIT (as
    scripts/gpu_check.sh reads it) is the stamp's commit, not what that .git says."""
    monkeypatch.setenv("ESOPT_COMMIT", "606ce05")
    assert results.commit(REPO) == "606ce05" and results.commit(tmp_path / "nowhere") == "606ce05"
    path = results.write_table("t", "A", "cmd", ["x"], [[1]], results_dir=tmp_path, date="d", machine_line="m")
    assert results.read_sections(path)["a"]["commit"] == "606ce05"
