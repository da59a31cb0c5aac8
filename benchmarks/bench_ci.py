"""CI's wall time from a fresh clone, as CI runs it: ``git clone`` of this checkout's HEAD into a
temporary folder, then ``bash .ci/run`` there; prints (and with ``--write-docs`` records in
docs/results/ci.md) each stage's times and the 25 slowest tests of the main suite.

    python benchmarks/bench_ci.py                  # clone + .ci/run (15-20 minutes on 2 cores)
    python benchmarks/bench_ci.py --write-docs     # and record the tables
    python benchmarks/bench_ci.py --from-log ci.log --times stages.tsv --write-docs
                                                   # record a finished run's output instead

Goals: the whole of .ci/run at most 15 minutes on the 2-core machine (the hard limit is 90), the
README's test command (the "main suite" stage) at most 8. Stages overlap (.ci/run's header says
how), so the stage rows do not add up to the total. Commit first: the table names the commit it measured.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _results import REPO, commit, write_table

GOALS_S = {"total": 15 * 60, "main suite": 8 * 60}
# pytest's --durations lines: "12.34s call     tests/x.py::test_y[param]"
DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s+(call|setup|teardown)\s+(\S.*?)(?:@[^@\]]*)?$")
# (pytest-xdist's --dist loadgroup appends "@<group>" to a grouped test's id: dropped)
SUMMARY = re.compile(r"^=*\s*(\d+ (?:passed|failed).*?) in ([\d.]+)s")


def parse_times(text: str) -> list[tuple[str, int, int, int]]:
    """The stage rows .ci/run writes (name, start s, end s, exit code; tab-separated)."""
    rows = []
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) == 4:
            rows.append((parts[0], int(parts[1]), int(parts[2]), int(parts[3])))
    return rows


def parse_durations(log: str, n: int = 25) -> list[tuple[float, str, str]]:
    """The slowest ``n`` entries of pytest's --durations section (seconds, phase, test id)."""
    out = [(float(m.group(1)), m.group(2), m.group(3).strip()) for m in map(DURATION.match, log.splitlines()) if m]
    return sorted(out, key=lambda r: -r[0])[:n]


def parse_summary(log: str) -> str:
    """pytest's closing counts line of the main suite ("710 passed, 37 skipped"), or ""."""
    found = [m.group(1) for m in map(SUMMARY.match, log.splitlines()) if m]
    return found[-1] if found else ""


def run_fresh_clone() -> tuple[str, str, str]:
    """Clone HEAD into a temporary folder and run .ci/run there; (its output, the stage times,
    the main suite's log)."""
    with tempfile.TemporaryDirectory(prefix="esopt-ci-") as tmp:
        clone = Path(tmp) / "esopt"
        subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
        times, main_log = Path(tmp) / "stages.tsv", Path(tmp) / "main.log"
        env = {**os.environ, "CI": "true", "ESOPT_CI_TIMES": str(times), "ESOPT_CI_MAIN_LOG": str(main_log)}
        for k in ("VIRTUAL_ENV", "PYTHONPATH"):  # as CI starts: no venv of ours active
            env.pop(k, None)
        env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if ".venv" not in p)
        t0 = time.time()
        proc = subprocess.run(["bash", ".ci/run"], cwd=clone, env=env, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL)
        print(f"bench_ci: .ci/run exited {proc.returncode} after {time.time() - t0:.0f} s", file=sys.stderr)
        out = proc.stdout + proc.stderr
        return (out, times.read_text() if times.exists() else "",
                main_log.read_text() if main_log.exists() else out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write-docs", action="store_true", help="record the tables in docs/results/ci.md")
    ap.add_argument("--from-log", type=Path, help="a finished .ci/run's output instead of a new run")
    ap.add_argument("--times", type=Path, help="with --from-log: the stage times file (ESOPT_CI_TIMES)")
    args = ap.parse_args(argv)
    at = commit()
    if args.from_log:
        out = main_log = args.from_log.read_text()
        times = args.times.read_text() if args.times else ""
    else:
        out, times, main_log = run_fresh_clone()
    stages = parse_times(times)
    if not stages:
        print("bench_ci: error: no stage times (did .ci/run start?)\n" + out[-3000:], file=sys.stderr)
        return 1
    rows = []
    for name, start, end, rc in stages:
        goal = GOALS_S.get(name)
        rows.append([name, start, end, end - start, rc,
                     "" if goal is None else ("met" if end - start <= goal else "missed") + f" (<= {goal // 60} min)"])
    counts = parse_summary(main_log)
    slow = parse_durations(main_log)
    for r in rows:
        print("\t".join(map(str, r)))
    print(counts)
    for s, phase, test in slow:
        print(f"{s:8.2f}s {phase:8s} {test}")
    if args.write_docs:
        command = "python benchmarks/bench_ci.py --write-docs" if not args.from_log else \
            f"python benchmarks/bench_ci.py --from-log {args.from_log.name} --write-docs"
        notes = (f"A fresh clone of {at} and `bash .ci/run` in it, as CI runs it. Start and end are seconds "
                 "from .ci/run's start; stages overlap (services beside the main install; the vLLM and "
                 "real-model installs and tests beside the main suite, niced while it runs), so durations "
                 "do not add up to the total. "
                 f"Main suite: {counts or 'no closing line found'}. This machine's speed moves by much more "
                 "than +-10% from hour to hour: read the table beside its date.")
        write_table("ci", "CI stages from a fresh clone", command,
                    ["stage", "start s", "end s", "wall s", "exit", "goal"], rows, notes=notes, commit_id=at)
        write_table("ci", "The 25 slowest tests of the main suite", command,
                    ["seconds", "phase", "test"], [[f"{s:.1f}", p, t] for s, p, t in slow],
                    notes="pytest's --durations=25 (pytest-xdist: each test's own time on its worker).",
                    commit_id=at)
    return 0 if all(rc == 0 for *_, rc in stages) else 1


if __name__ == "__main__":
    sys.exit(main())
