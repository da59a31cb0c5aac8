"""Write a benchmark's table into docs/results/<topic>.md, stamped with how it was made.

    from _results import write_table        # a script in benchmarks/ (its folder is on sys.path)
    write_table("aggregate", "Aggregation speed", "python benchmarks/bench_aggregate.py",
                ["stage", "wall s"], [["aggregate (no page)", "3.46"]], notes="idle machine")

Each table is one section of its topic file between two markers,

    <!-- bench:begin <slug> -->  ...  <!-- bench:end <slug> -->

(slug: the title in lower case, runs of other characters as "-"). Writing a table again
replaces its section and leaves the rest of the file (hand-written text, other tables) as it
is; a new table is appended; a missing file is created with a "# <topic>" heading. Every
section starts with the same four fields, which tests/test_readme.py checks in every results
file:

    - command: `the command line`
    - date: 2026-12-01 17:12 UTC
    - commit: 7fb1a5f (``git rev-parse --short HEAD``, "-dirty" when tracked files outside
      docs/results/ have changes; ``ESOPT_COMMIT`` when set: a copy of the tree run where its
      git history is absent or not its own, as scripts/gpu_check.sh reads it)
    - machine: Linux x86_64, 2 CPUs (Intel(R) Xeon(R) Processor), 23.4 GiB, CPU only

The benchmark scripts call this only with ``--write-docs``: exploratory runs (fewer
repetitions, one model) print their tables and leave docs/results alone.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import re
import subprocess
import sys
from pathlib import Path
from typing import Sequence

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "docs" / "results"
FIELDS = ("command", "date", "commit", "machine")


def slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


def commit(repo: Path = REPO) -> str:
    """Short HEAD, with "-dirty" when tracked files differ from it; "unknown" outside git.
    ``ESOPT_COMMIT``, when set, is the commit of a copied tree (its git, if any, is not its own)."""
    if os.environ.get("ESOPT_COMMIT"):
        return os.environ["ESOPT_COMMIT"].strip()
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True,
                              text=True, timeout=10)
        if head.returncode != 0:
            return "unknown"
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                ":(exclude)docs/results"], cwd=repo,   # a table written earlier in the run
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return head.stdout.strip() + ("-dirty" if dirty else "")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 2**20
    except (OSError, ValueError, IndexError):
        pass
    return None


def _accelerator() -> str:
    try:
        import torch

        if torch.cuda.is_available():
            return f"GPU {torch.cuda.get_device_name(0)} x{torch.cuda.device_count()}"
    except Exception:  # noqa: BLE001 - a missing or broken torch only means "no GPU seen"
        pass
    return "CPU only"


def machine() -> str:
    """One line: OS and architecture, CPU count and model, memory, accelerator."""
    mem = _memory_gib()
    parts = [f"{platform.system()} {platform.machine()}",
             f"{os.cpu_count()} CPUs ({_cpu_model()})",
             f"{mem:.1f} GiB" if mem is not None else "memory unknown",
             _accelerator()]
    return ", ".join(parts)


def _cell(v) -> str:
    if isinstance(v, float):
        v = f"{v:.3g}"
    return str(v).replace("|", "\\|").replace("\n", " ")


def section(title: str, command: str, header: Sequence, rows: Sequence[Sequence], notes: str = "", *,
            date: str | None = None, commit_id: str | None = None, machine_line: str | None = None) -> str:
    """The marked Markdown section of one table (without a trailing newline)."""
    s = slug(title)
    date = date or _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"<!-- bench:begin {s} -->", f"## {title}", "",
             f"- command: `{command}`", f"- date: {date}",
             f"- commit: {commit_id or commit()}", f"- machine: {machine_line or machine()}", ""]
    if header:
        lines.append("| " + " | ".join(_cell(h) for h in header) + " |")
        lines.append("|" + "---|" * len(header))
        for row in rows:
            lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
    if notes:
        lines += ["", notes.strip()]
    lines.append(f"<!-- bench:end {s} -->")
    return "\n".join(lines)


def write_table(topic: str, title: str, command: str | None, header: Sequence, rows: Sequence[Sequence],
                notes: str = "", *, results_dir: Path | str | None = None, **stamp) -> Path:
    """Write (or replace) the table ``title`` in ``<results_dir>/<topic>.md``; return the path.

    ``command`` defaults to this process's command line. ``stamp`` may fix ``date``,
    ``commit_id`` or ``machine_line`` (tests; transcribing an older measurement)."""
    path = Path(results_dir or RESULTS) / f"{topic}.md"
    if command is None:
        command = " ".join(["python", *sys.argv])
    new = section(title, command, header, rows, notes, **stamp)
    s = slug(title)
    text = path.read_text(encoding="utf-8") if path.exists() else f"# {topic}\n"
    pattern = re.compile(rf"<!-- bench:begin {re.escape(s)} -->.*?<!-- bench:end {re.escape(s)} -->", re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: new, text, count=1)
    else:
        text = text.rstrip("\n") + "\n\n" + new + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    print(f"wrote {path} ({title})", file=sys.stderr)
    return path


def read_sections(path: Path | str) -> dict[str, dict[str, str]]:
    """``{slug: {field: value}}`` of every marked section of a results file (the four fields)."""
    text = Path(path).read_text(encoding="utf-8")
    out = {}
    for m in re.finditer(r"<!-- bench:begin (\S+) -->(.*?)<!-- bench:end \1 -->", text, re.S):
        fields = dict(re.findall(r"^- (command|date|commit|machine): (.+)$", m.group(2), re.M))
        if "command" in fields:
            fields["command"] = fields["command"].strip("`")
        out[m.group(1)] = fields
    return out
