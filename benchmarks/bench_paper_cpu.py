"""Wall time of a study preset (runs + aggregate + claims) against its goal, and its claims table.

    python benchmarks/bench_paper_cpu.py [--quick | --family | --preset NAME] [--confirm [--draw D]] [--root DIR]
                                         [--keep] [--threads 1] [--write-docs] [overrides ...]

Runs ``python -m esopt.sweep -m +experiment=paper_cpu`` (``--quick``: paper_cpu_quick, goal 5
minutes; ``--family``: paper_cpu_family, goal 90 minutes; ``--preset paper_smollm2``: the
real-model study, goal 120 minutes, its tables in docs/results/claims_smollm2.md) into a fresh results root (a temporary
directory unless ``--root``), prints the wall time against the goal (60 minutes on a 2-core CPU,
issue 14), the per-algorithm run time from the summaries, and the claims table from claims.json.
``--confirm`` is the confirmatory run (issue 27): a fresh draw of test problems and seeds the
rules were never tuned on (``task.test_draw=D``, ``--draw D`` default 1, and seeds the preset
does not run: for draw D, 16D..16D+15 for paper_cpu, 10D..10D+9 for paper_cpu_family, 8D..8D+7
for paper_cpu_quick, 16 + 3(D-1).. for paper_smollm2, whose held-out split no test draw changes: it
draws seeds only), in a sweep named ``<preset>_confirm<D>``. One look per draw: draw 1 was
looked at twice (issue 39), so the next confirmatory run is ``--draw 2``. The sweep writes its
design into claims.json before any run (the registration); a claims table whose verdicts are
exploratory (data not the registered design, or a second look at one draw)
is written to its own "(exploratory)" section, never the preset's headline one.
``--report-only --wall-s S``: no sweep; read the finished one under
``--root`` and report it with the wall time an earlier run of this script printed. Not run by the tests. Exit code 1 if the
sweep failed or the goal was missed. ``--write-docs`` writes the wall time and the claims table
to docs/results/claims_paper_cpu.md (benchmarks/_results.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# preset: (goal s, first confirmatory seed, seeds per draw, docs topic, confirms on a fresh test draw)
PRESETS = {"paper_cpu": (3600, 16, 16, "claims_paper_cpu", True),
           "paper_cpu_quick": (300, 8, 8, "claims_paper_cpu", True),
           "paper_cpu_family": (5400, 10, 10, "claims_paper_cpu", True),
           "paper_smollm2": (7200, 16, 3, "claims_smollm2", False)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--quick", action="store_true", help="the paper_cpu_quick preset (goal 5 minutes)")
    which.add_argument("--family", action="store_true", help="the paper_cpu_family preset (goal 90 minutes)")
    which.add_argument("--preset", choices=sorted(PRESETS), default=None, help="any study preset by name")
    ap.add_argument("--confirm", action="store_true",
                    help="confirmatory run: task.test_draw=D, fresh seeds, sweep <preset>_confirm<D>")
    ap.add_argument("--draw", type=int, default=1,
                    help="with --confirm: the test draw D >= 1 (one look per draw: a draw already looked at is "
                         "spent; draw 1 was, issue 27)")
    ap.add_argument("--root", default=None, help="results root (default: a fresh temporary directory)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary results root")
    ap.add_argument("--threads", default="1",
                    help="OMP_NUM_THREADS for the sweep (default 1, the fastest for tiny models; 'inherit' keeps "
                         "the environment's)")
    ap.add_argument("--report-only", action="store_true", help="no sweep: report the finished one under --root")
    ap.add_argument("--wall-s", type=float, default=None, help="with --report-only: the wall time measured before")
    ap.add_argument("--write-docs", action="store_true",
                    help="write to docs/results/claims_paper_cpu.md (claims_smollm2.md for paper_smollm2)")
    ap.add_argument("overrides", nargs="*", help="extra Hydra overrides, e.g. hydra/launcher=submitit_local")
    a = ap.parse_args()
    preset = a.preset or ("paper_cpu_quick" if a.quick else "paper_cpu_family" if a.family else "paper_cpu")
    goal, first, per, topic, test_draw = PRESETS[preset]
    if a.draw < 1:
        ap.error(f"--draw must be >= 1, got {a.draw}")
    name = f"{preset}_confirm{a.draw}" if a.confirm else preset
    fresh = f"range({first + per * (a.draw - 1)},{first + per * a.draw})"   # seeds the preset never runs
    confirm = ([f"task.test_draw={a.draw}"] * test_draw + [f"seed={fresh}", f"sweep.name={name}"]) if a.confirm else []
    root = Path(a.root) if a.root else Path(tempfile.mkdtemp(prefix="bench_paper_cpu_"))
    cmd = [sys.executable, "-m", "esopt.sweep", "-m", f"+experiment={preset}", f"sweep.root={root}", *confirm,
           *a.overrides]
    env = dict(os.environ)
    if a.threads != "inherit":
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(a.threads)
    if a.report_only:
        if not a.root or a.wall_s is None:
            sys.exit("bench_paper_cpu: --report-only needs --root and --wall-s")
        wall, returncode = a.wall_s, 0
    else:
        print(f"$ OMP_NUM_THREADS={env.get('OMP_NUM_THREADS', '(unset)')}", " ".join(cmd), flush=True)
        t0 = time.perf_counter()
        returncode = subprocess.run(cmd, cwd=REPO, env=env).returncode
        wall = time.perf_counter() - t0
    sweep = root / name
    by_algo: dict[str, list[float]] = {}
    for s in sorted((sweep / "runs").glob("*/summary.json")):
        d = json.loads(s.read_text())
        by_algo.setdefault(d["algo"], []).append(float(d.get("wall_s") or 0.0))
    print(f"\n{name}: wall {wall:.0f} s ({wall / 60:.1f} min) against the goal of {goal // 60} min: "
          f"{'OK' if wall <= goal else 'MISSED'} (exit code {returncode})")
    for algo, ws in by_algo.items():
        print(f"  {algo:<8} {len(ws):>3} runs, run time sum {sum(ws):7.0f} s, mean {sum(ws) / len(ws):6.1f} s")
    cj = sweep / "claims.json"
    if cj.exists():
        from esopt.study.claims import table_lines

        print("\n".join(table_lines(json.loads(cj.read_text()))))
    else:
        print(f"no {cj}")
    if a.write_docs:
        write_docs(name, goal, wall, returncode, by_algo, cj, topic)
    print(f"results: {sweep}")
    if not a.root and not a.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 0 if returncode == 0 and wall <= goal and cj.exists() else 1


def write_docs(preset: str, goal: int, wall: float, returncode: int, by_algo: dict, cj: Path,
               topic: str = "claims_paper_cpu") -> None:
    """The wall time and (when claims.json exists) the claims table, with each claim's source,
    into docs/results/<topic>.md (benchmarks/_results.py)."""
    from _results import write_table

    def num(v):
        return "-" if v is None else f"{v:+.3f}"

    command = " ".join(["python", *sys.argv])
    write_table(topic, f"{preset}: wall time", command,
                ["preset", "runs", "wall min", "goal min", "met", "exit code"],
                [[preset, sum(map(len, by_algo.values())), f"{wall / 60:.1f}", goal // 60,
                  "yes" if wall <= goal else "no", returncode]],
                notes="Run time per algorithm: " + "; ".join(
                    f"{k} {len(v)} runs, mean {sum(v) / len(v):.1f} s" for k, v in by_algo.items()) + ".")
    if cj.exists():
        result = json.loads(cj.read_text())
        claims, cell = result["claims"], result.get("cell", {})
        seeds = sorted({s for ss in cell.get("seeds", {}).values() for s in ss if s is not None})
        draws = [d for d in cell.get("test_draw", []) if d not in (None, 0, "None")]
        design = (f"Cell: {cell.get('model')}, seeds {seeds[0]}-{seeds[-1]} ({len(seeds)}), "
                  + (f"test draw {', '.join(map(str, draws))} (task.test_draw: a fresh test split); " if draws
                     else "no fresh test draw; ") +
                  "generated tokens against ES: " + ", ".join(
                      f"{k} {v:.2f}" for k, v in (cell.get("tokens_vs_es") or {}).items() if v is not None) + "."
                  if seeds else "")
        from esopt.study.claims import look_line

        # one registered look: an exploratory verdict goes to a section of its own, never the headline
        exploratory = not (result.get("look") or {}).get("confirmatory")
        write_table(topic, f"{preset}: claims" + (" (exploratory)" if exploratory else ""), command,
                    ["#", "claim", "source", "effect [95% CI]", "power at the smallest effect", "verdict", "reason"],
                    [[c["id"], c["key"], c.get("source", "-"),
                      num(c["effect"]) + (f" [{num(c['ci'][0])}, {num(c['ci'][1])}]" if c.get("ci") else ""),
                      "-" if c.get("power") is None else f"{c['power']:.0%}",
                      c["reproduced"] + (f": {c['unclear']}" if c.get("unclear") else ""), c["reason"]]
                     for c in claims], notes=f"{look_line(result)[0].upper()}{look_line(result)[1:]}. {design}")


if __name__ == "__main__":
    sys.exit(main())
