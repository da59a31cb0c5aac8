"""The fault table (issue 29): faults a cluster produces, injected into real tiny runs.

    python benchmarks/bench_faults.py                  # 5 attempts per fault (~25-40 min on 2 cores)
    python benchmarks/bench_faults.py --quick          # 2 attempts per fault (~10-15 min)
    python benchmarks/bench_faults.py --only es_kill,journal --attempts 1
    python benchmarks/bench_faults.py --write-docs     # also the table into docs/results/faults.md

Every run is ``python -m esopt.sweep`` on the embedded tiny model (tiny-xs, 8 problems x 2
samples) in a fresh temporary ``sweep.root``. First one uninterrupted reference run per
config; then, per fault and attempt, the fault is injected into a fresh run, esopt recovers
(the rerun resumes, repairs or falls back), and the recovered run is compared with the
reference. An attempt is **survived** when the recovered run ends ``completed`` and equals the
reference: the same sha256 of every file in ``<run>/model/`` (the trained weights), the same
summary ``final`` metrics and token count, the same metrics.jsonl lines (timing fields, the
keys holding ``wall``, left out); where the fault is one esopt must warn about, exactly one
``esopt: warning:`` line naming the damaged file. **lost** counts the reference's records
missing afterwards: a run directory, its Optuna trial (one COMPLETE trial per run, valued as
its summary), a metrics line (by kind and iteration), a row of the aggregated runs table.

Faults (the mechanisms of the tests named, in real runs):

  es_kill        kill -9 of an ES run at a random time, then the same command (resume)
                 [tests/runtime/test_resume.py]
  grpo_kill      the same for GRPO (TRL checkpoints)
  journal        ``seed=0,1``; the Optuna journal's tail torn (``truncate -s -40``) and/or a
                 garbage line appended; then ``seed=0,1,2,3`` [tests/runtime/test_journal_repair.py]
  grpo_state     kill -9 after a GRPO checkpoint, its ``trainer_state.json`` emptied, rerun
                 [tests/algorithms/test_checkpoints.py]
  es_flip        kill -9 after an ES checkpoint, one byte of its weights flipped, rerun
  es_truncate    kill -9 after an ES checkpoint, one of its files (cycled) truncated to half, rerun
  aggregate      a non-numeric field (cycled) in one drawn summary: that run listed unreadable, the
                 others aggregated; every summary bad: the previous outputs stay as they were;
                 the field restored: every run back in the table [tests/study/test_aggregate.py]
  slurm_cancel   ``scancel`` of a running Slurm job (a 300-iteration ES run: a cancelled job
                 runs on for Slurm's KillWait): the sweep ends within 60 s with the run
                 recorded failed; ``sweep.retry_failed=true`` resumes it [tests/cli/test_slurm_faults.py]
                 (skipped, with the reason, unless ``sinfo`` shows a node up: scripts/start_slurm.sh)

Issue 42's classes:

  dup_folder     on a copy of the reference sweep, ``cp -r runs/<id> runs/<id>.bak`` and ``ln -s <id>
                 runs/alias``; esopt.aggregate: each run counted once, both folders listed skipped
                 [tests/study/test_aggregate.py]
  deep_line      a metrics line nested 20,000 deep appended to one run; esopt.aggregate and the
                 sweep rerun (its end-of-sweep aggregation) exit 0, the line counted unparseable
  pg_outage      a 3-run ES sweep on PostgreSQL (a private server, scripts/start_postgres.sh);
                 ``pg_ctl stop`` for 10 s after a drawn iteration: every run equals the reference
                 with one COMPLETE trial [tests/runtime/test_postgres_storage.py]
                 (skipped, with the reason, where PostgreSQL cannot be started)
  concurrent     two identical ``hydra/sweeper=optuna`` searches on one study started together:
                 both exit 0, every trial COMPLETE with a run of its own [tests/cli/test_concurrent_search.py]
  dead_tracker   the reference sweep again with ``logger=[mlflow]`` pointed at a server that accepts
                 connections and never answers: the runs equal the reference, one warning, and
                 the time lost per sweep (its wall time minus the reference's; goal < 15 s)
                 [tests/runtime/test_trackers.py]

Issue 55's classes:

  edited_plan    a queued run's plan.json edited (pop 4 made 8: in its config, its resolved block or
                 both) while the sweep runs an earlier job: that run fails with one warning naming
                 the file, the sweep exits 1; the same sweep again completes it, equal to the
                 reference [tests/runtime/test_runplan.py]
  corrupt_claims a claims sweep (algo=none,es) over a torn / list / design-is-5 claims.json: one
                 warning, the file kept as claims.corrupt-<time>.json, a labelled fresh registration,
                 every run equal to the reference [tests/study/test_claims.py]
  bad_samples    every run's base samples file with a field of another type: esopt.aggregate exits
                 0 with one note naming a file, the table holds every run [tests/study/test_report_samples.py]

Kill and cancel times (a drawn iteration plus a uniform fraction of one, uniform over the
reference run's wall time for scancel, or just after a drawn checkpoint) and the damage come from a seeded RNG (``--seed``); a kill that lands after the run
completed is drawn again. Exit status 1 when any attempt was not
survived or any record was lost.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
from helpers import slurm_reason  # noqa: E402 - the tests' own check: one rule for "Slurm is up"

from esopt.core.store import RunDir  # noqa: E402 - run records are read as the store reads them

TINY = ["model=tiny-xs", "eval.problems=8", "eval.samples=2", "task.n_train=32", "task.n_test=8",
        "task.n_heldout=8", "sweep.name=f"]
ES = ["algo=es", "pop=4", "iterations=8", "es.batch_size=4", "es.checkpoint_every=2", "eval.every=4"]
GRPO = ["algo=grpo", "iterations=6", "grpo.num_generations=4", "grpo.prompts_per_step=4",
        "grpo.save_every=2", "eval.every=6"]
JOURNAL = ["algo=es", "pop=4", "iterations=4"]  # the repro: seed=0,1, then seed=0,1,2,3
SLURM = ["hydra/launcher=slurm", "hydra.launcher.timeout_min=10", "hydra.launcher.mem_gb=2",
         "hydra.launcher.cpus_per_task=1", "hydra.launcher.poll_s=3", "sweep.aggregate=false"]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
       "HF_HUB_OFFLINE": "1"}
# a cancelled job runs on until Slurm's KillWait (30 s; submitit bypasses the SIGTERM): an ES
# run long enough to outlast it, cancelled in its first 30 iterations
ES_SLURM = ["algo=es", "pop=4", "iterations=300", "es.batch_size=4", "es.checkpoint_every=10", "eval.every=300"]
PG = ["algo=es", "pop=4", "iterations=8", "es.batch_size=4", "eval.every=2"]   # reports at 2, 4, 6, 8
REFERENCES = {"es": (ES, False), "grpo": (GRPO, False), "journal": ([*JOURNAL, "seed=0,1,2,3"], True),
              "es_slurm": (ES_SLURM, False),
              "pg": ([*PG, "seed=0,1,2"], True),
              "claims": (["algo=none,es", "pop=4", "iterations=4", "seed=0,1"], True)}
BAD_FIELDS = [("model.params", "1.5B"), ("pop", "8"), ("seed", [0]), ("seed", True)]  # cycled


# ------------------------------------------------------------------------------ running esopt
def esopt_cmd(root: Path, overrides, multirun: bool = False) -> list[str]:
    return [sys.executable, "-m", "esopt.sweep", *(["-m"] if multirun else []), *TINY, *overrides,
            f"sweep.root={root}"]


def esopt(root: Path, overrides, multirun: bool = False, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(esopt_cmd(root, overrides, multirun), cwd=REPO, env=ENV, capture_output=True,
                          text=True, timeout=timeout)


def start(root: Path, overrides, multirun: bool = False) -> subprocess.Popen:
    """An esopt process in its own session (kill -9 takes its whole group)."""
    return subprocess.Popen(esopt_cmd(root, overrides, multirun), cwd=REPO, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def runs(root: Path) -> dict[str, Path]:
    d = root / "f" / "runs"
    return {p.name: p for p in sorted(d.iterdir()) if p.is_dir()} if d.is_dir() else {}


def only_run(root: Path) -> Path | None:
    found = list(runs(root).values())
    return found[0] if len(found) == 1 else None


def summary(run: Path) -> dict | None:
    """The run's summary as the store reads it (None: none, or unreadable)."""
    return RunDir(run).read_summary()


def warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("esopt: warning:")]


# ----------------------------------------------------------------------- what a run produced
def untimed(obj):
    """``obj`` without the timing fields (keys holding "wall"): what a rerun must reproduce."""
    if isinstance(obj, dict):
        return {k: untimed(v) for k, v in obj.items() if "wall" not in k}
    if isinstance(obj, list):
        return [untimed(v) for v in obj]
    return obj


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fingerprint(run: Path) -> dict:
    """Status, trained weights (sha256 of every file in <run>/model/), final metrics, lines (and
    how many could not be parsed), all read by the store's RunDir."""
    rd = RunDir(run)
    s = rd.read_summary() or {}
    lines, unreadable = rd.read_metrics()
    return {"status": s.get("status"),
            "weights": {p.name: sha256(p) for p in sorted(rd.model_dir.iterdir()) if p.is_file()}
            if rd.model_dir.is_dir() else {},
            "final": untimed(s.get("final")), "tokens": s.get("tokens_generated"),
            "lines": [untimed(x) for x in lines], "unreadable_lines": unreadable}


def differences(ref: dict, got: dict) -> list[str]:
    """How the recovered run ``got`` differs from the reference ``ref`` ([] = it equals it)."""
    out = []
    if got["status"] != "completed":
        out.append(f"status {got['status']}")
    if got["weights"] != ref["weights"]:
        out.append("weights differ: " + ", ".join(sorted(k for k in set(ref["weights"]) | set(got["weights"])
                                                         if ref["weights"].get(k) != got["weights"].get(k))))
    if got["final"] != ref["final"] or got["tokens"] != ref["tokens"]:
        out.append("final metrics differ")
    if got["lines"] != ref["lines"]:
        n = sum(a != b for a, b in zip(ref["lines"], got["lines"])) + abs(len(ref["lines"]) - len(got["lines"]))
        out.append(f"{n} metrics lines differ ({len(got['lines'])} vs {len(ref['lines'])})")
    if got["unreadable_lines"]:
        out.append(f"{got['unreadable_lines']} metrics lines cannot be parsed")
    return out


def trials(journal: Path | str) -> dict[str, list]:
    """``{run_id: [(state, value), ...]}`` of every trial in the journal (or the database URL),
    read afresh."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    if "://" in str(journal):
        storage = optuna.storages.RDBStorage(str(journal))
    elif not Path(journal).exists():
        return {}
    else:
        storage = JournalStorage(JournalFileBackend(str(journal)))
    out: dict[str, list] = {}
    for study in optuna.get_all_study_summaries(storage):
        for t in optuna.load_study(study_name=study.study_name, storage=storage).trials:
            out.setdefault(t.user_attrs.get("run_id"), []).append((t.state.name, t.value))
    return out


def check(refs: dict[str, dict], root: Path, storage: str | None = None) -> tuple[list[str], int]:
    """Compare the sweep under ``root`` with the reference runs ``{run_id: fingerprint}``:
    (what is wrong, records lost). A reference run contributes its run directory, its Optuna
    trial and its metrics lines; each one missing afterwards is a record lost."""
    from esopt.runtime.tuning import metric_value

    got, by_run = runs(root), trials(storage or root / "f" / "optuna.journal")
    wrong, lost = [], 0
    for rid, ref in refs.items():
        if rid not in got or summary(got[rid]) is None:
            wrong.append(f"{rid}: run missing")
            lost += 2 + len(ref["lines"])
            continue
        fp = fingerprint(got[rid])
        wrong += [f"{rid}: {d}" for d in differences(ref, fp)]
        have = {(x.get("kind"), x.get("iteration")) for x in fp["lines"]}
        lost += sum((x["kind"], x["iteration"]) not in have for x in ref["lines"])
        recorded = by_run.get(rid, [])
        complete = [v for state, v in recorded if state == "COMPLETE"]
        if not complete:
            wrong.append(f"{rid}: no COMPLETE trial ({recorded})")
            lost += 1
        elif len(recorded) > 1:
            wrong.append(f"{rid}: {len(recorded)} trials")
        elif complete[0] != metric_value(summary(got[rid])["final"]):
            wrong.append(f"{rid}: trial value {complete[0]} != its summary's")
    return wrong, lost


# ----------------------------------------------------------------------------------- faults
@dataclass
class Outcome:
    """One attempt: what was wrong afterwards (nothing = survived), records lost, and a short
    detail of what was done (the table's note column)."""

    wrong: list
    lost: int
    detail: str = ""

    @property
    def survived(self) -> bool:
        return not self.wrong


@dataclass
class Bench:
    work: Path
    refs: dict = field(default_factory=dict)  # config name -> {run_id: fingerprint}
    sweeps: dict = field(default_factory=dict)  # config name -> the reference sweep root
    walls: dict = field(default_factory=dict)   # config name -> the reference command's seconds
    postgres: str | None = None                 # the private server's URL (pg_outage), once started

    def reference(self, name: str) -> dict:
        """The uninterrupted run(s) of config ``name`` (of REFERENCES), made once."""
        if name not in self.refs:
            overrides, multirun = REFERENCES[name]
            root = self.work / f"ref-{name}"
            t = time.perf_counter()
            r = esopt(root, overrides, multirun)
            if r.returncode != 0:
                sys.exit(f"bench: reference run {name} failed:\n{r.stderr[-3000:]}")
            self.walls[name] = time.perf_counter() - t
            self.refs[name] = {rid: fingerprint(p) for rid, p in runs(root).items()}
            self.sweeps[name] = root
            print(f"  reference {name}: {len(self.refs[name])} run(s), {time.perf_counter() - t:.1f} s",
                  file=sys.stderr, flush=True)
        return self.refs[name]

    def wall(self, name: str) -> float:
        """Seconds the reference run spent inside its run (the span a random scancel is drawn from)."""
        (run,) = runs(self.sweeps[name]).values()
        return float(summary(run)["wall_s"])

    def step_s(self, name: str) -> float:
        """The reference run's mean seconds from one train line to the next."""
        (run,) = runs(self.sweeps[name]).values()
        t = [x["wall_s"] for x in RunDir(run).lines() if x.get("kind") == "train"]
        return (t[-1] - t[0]) / (len(t) - 1)

    def fresh(self, label: str) -> Path:
        return Path(tempfile.mkdtemp(prefix=f"{label}-", dir=self.work))


def kill(root: Path, overrides, rng: random.Random, ready, delay_s: float, tries: int = 8):
    """Start a run, wait until ``ready(run_dir)``, then SIGKILL its process group after a random
    ``U(0, delay_s)`` seconds. A kill that lands after the run ended (the process gone, or its
    summary no longer "running") is drawn again in a clean root. Returns the killed run's
    directory and the last train iteration it recorded."""
    for _ in range(tries):
        shutil.rmtree(root / "f", ignore_errors=True)
        p = start(root, overrides)
        try:
            run, deadline = None, time.time() + 600
            while time.time() < deadline and p.poll() is None:
                run = only_run(root)
                if run is not None and ready(run):
                    break
                time.sleep(0.02)
            time.sleep(rng.uniform(0, delay_s))
            alive = p.poll() is None
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
        if alive and run is not None and (summary(run) or {}).get("status") == "running":
            return run, trained(run)
    raise RuntimeError(f"no kill landed mid-run in {tries} draws")


def has_summary(run: Path) -> bool:
    return RunDir(run).summary_path.exists()


def rerun(root: Path, overrides, refs: dict, damaged: Path | None = None) -> tuple[list, int]:
    """The same command again: (what is wrong, records lost) against the reference; when a
    file was ``damaged``, exactly one warning line must name it."""
    r = esopt(root, overrides)
    wrong, lost = check(refs, root)
    if r.returncode != 0:
        wrong.insert(0, f"exit {r.returncode}: {r.stderr.strip().splitlines()[-1:]}")
    if damaged is not None:
        w = warnings(r.stderr)
        if len(w) != 1 or str(damaged) not in w[0]:
            wrong.append(f"warnings naming {damaged.name}: {w}")
    return wrong, lost


def trained(run: Path) -> int:
    """The last train iteration (step) a run recorded, 0 before the first."""
    return max((x["iteration"] for x in RunDir(run).lines() if x.get("kind") == "train"), default=0)


def run_kill(bench: Bench, rng, name: str, overrides) -> Outcome:
    """Kill at a random point of the run: once it has recorded a drawn iteration k (k = 0: it
    has started, its base evaluation), plus U(0, the reference's time per iteration); rerun."""
    refs = bench.reference(name)
    (ref,) = refs.values()
    iterations = sum(x["kind"] == "train" for x in ref["lines"])
    k = rng.randrange(iterations)
    root = bench.fresh(name)
    _, it = kill(root, overrides, rng, lambda run: has_summary(run) and trained(run) >= k, bench.step_s(name))
    return Outcome(*rerun(root, overrides, refs), detail=str(it))


def es_kill(bench, rng, attempt):
    return run_kill(bench, rng, "es", ES)


def grpo_kill(bench, rng, attempt):
    return run_kill(bench, rng, "grpo", GRPO)


def latest_es_checkpoint(run: Path) -> Path:
    ckpt = run / "checkpoint"
    return ckpt if (ckpt / "esopt_manifest.json").exists() else ckpt.with_name("checkpoint.old")


def es_checkpoint_fault(bench, rng, attempt: int, damage: str) -> Outcome:
    """Kill an ES run once its checkpoint of iteration 2, 4 or 6 (drawn) is written, damage that
    checkpoint, rerun: it must restart (or take checkpoint.old) with one warning naming the file."""
    refs = bench.reference("es")
    root = bench.fresh(f"es_{damage}")
    at = rng.choice([2, 4, 6])

    def ready(run):
        try:
            state = json.loads((latest_es_checkpoint(run) / "state.json").read_text())
            return (latest_es_checkpoint(run) / "esopt_manifest.json").exists() and state["iteration"] >= at
        except (OSError, ValueError, KeyError):
            return False

    run, _ = kill(root, ES, rng, ready, 0.3)
    ckpt = latest_es_checkpoint(run)
    at = json.loads((ckpt / "state.json").read_text())["iteration"]
    if damage == "flip":
        target = ckpt / "model.safetensors"
        data = bytearray(target.read_bytes())
        data[rng.randrange(len(data) - 4096, len(data))] ^= 0x40  # a byte of the tensors' data
        target.write_bytes(bytes(data))
    else:
        target = ckpt / ["model.safetensors", "state.json", "config.json", "tokenizer.json"][attempt % 4]
        target.write_bytes(target.read_bytes()[: target.stat().st_size // 2])
    detail = str(at) if damage == "flip" else f"{target.name} (iteration {at})"
    return Outcome(*rerun(root, ES, refs, damaged=target), detail=detail)


def es_flip(bench, rng, attempt):
    return es_checkpoint_fault(bench, rng, attempt, "flip")


def es_truncate(bench, rng, attempt):
    return es_checkpoint_fault(bench, rng, attempt, "truncate")


def grpo_checkpoints(run: Path) -> list[Path]:
    """The GRPO run's checkpoint folders, newest first."""
    found = (run / "checkpoint" / "grpo").glob("checkpoint-*")
    return sorted(found, key=lambda p: int(p.name.split("-")[-1]), reverse=True)


def grpo_state(bench, rng, attempt):
    """Kill a GRPO run once its checkpoint of step 2 or 4 (drawn) has its manifest, empty the
    latest checkpoint's trainer_state.json (what ENOSPC leaves), rerun."""
    refs = bench.reference("grpo")
    root = bench.fresh("grpo_state")
    at = rng.choice([2, 4])

    def ready(run):
        return any(int(p.name.split("-")[-1]) >= at and (p / "esopt_manifest.json").exists()
                   for p in grpo_checkpoints(run))

    run, _ = kill(root, GRPO, rng, ready, 0.5)
    target = grpo_checkpoints(run)[0] / "trainer_state.json"
    target.write_text("")
    return Outcome(*rerun(root, GRPO, refs, damaged=target), detail=target.parent.name)


JOURNAL_DAMAGE = ["torn", "garbage", "torn+garbage"]  # cycled over the attempts


def journal(bench, rng, attempt):
    """``seed=0,1``; the journal's tail damaged; ``seed=0,1,2,3``: one warning naming the
    journal, 4 runs completed, each equal to the reference sweep's, each with one COMPLETE trial."""
    refs = bench.reference("journal")
    root = bench.fresh("journal")
    damage = JOURNAL_DAMAGE[attempt % len(JOURNAL_DAMAGE)]
    r = esopt(root, [*JOURNAL, "seed=0,1"], multirun=True)
    if r.returncode != 0:
        return Outcome([f"first sweep exit {r.returncode}"], 0, damage)
    path = root / "f" / "optuna.journal"
    if "torn" in damage:
        os.truncate(path, path.stat().st_size - 40)  # truncate -s -40
    if "garbage" in damage:
        with open(path, "ab") as f:
            f.write(bytes(rng.randrange(256) for _ in range(rng.randrange(8, 64))).replace(b"\n", b"") + b"\n")
    r = esopt(root, [*JOURNAL, "seed=0,1,2,3"], multirun=True)
    wrong, lost = check(refs, root)
    if r.returncode != 0:
        wrong.insert(0, f"exit {r.returncode}: {r.stderr.strip().splitlines()[-1:]}")
    if "esopt: 4 runs: 4 completed" not in r.stdout:
        wrong.append("the sweep's table does not list 4 completed runs")
    w = [x for x in warnings(r.stderr) if "journal" in x]
    if len(w) != 1 or str(path) not in w[0]:
        wrong.append(f"journal warnings: {w}")
    return Outcome(wrong, lost, damage)


def aggregate_outputs(sweep: Path) -> dict[str, bytes]:
    names = ("runs.parquet", "runs.csv", "curves.parquet", "trend.json", "aggregate.json", "report.html")
    return {n: (sweep / n).read_bytes() for n in names if (sweep / n).exists()}


def aggregate_cmd(sweep: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "esopt.aggregate", str(sweep), "--bootstrap", "20"], cwd=REPO,
                          env=ENV, capture_output=True, text=True, timeout=600)


def plant(path: Path, key: str, value) -> None:
    s = json.loads(path.read_text())
    if key == "model.params":
        s["model"]["params"] = value
    else:
        s[key] = value
    path.write_text(json.dumps(s))


def aggregate(bench, rng, attempt):
    """On a copy of the reference sweep: a non-numeric field in one (drawn) summary makes that
    run unreadable (listed with its reason, the others in the table, no traceback); every
    summary bad: exit 2 and the previous outputs byte for byte; the fields restored: every run
    back. lost = reference runs missing from a table they belong in."""
    import pandas as pd

    refs = bench.reference("journal")
    root = bench.fresh("aggregate")
    shutil.copytree(bench.sweeps["journal"] / "f", root / "f", symlinks=True)
    sweep, wrong = root / "f", []
    originals = {rid: (p / "summary.json").read_bytes() for rid, p in runs(root).items()}
    key, value = BAD_FIELDS[attempt % len(BAD_FIELDS)]
    bad = rng.choice(sorted(originals))
    plant(sweep / "runs" / bad / "summary.json", key, value)

    r = aggregate_cmd(sweep)
    ids = set(pd.read_csv(sweep / "runs.csv", dtype={"run_id": str})["run_id"])
    missing = set(refs) - {bad} - ids
    if r.returncode != 0 or "Traceback" in r.stderr:
        wrong.append(f"one bad field: exit {r.returncode} {r.stderr.strip().splitlines()[-1:]}")
    if not re.search(rf"skipped {bad}: summary\.json: {re.escape(key)} is not a number", r.stdout):
        wrong.append(f"{bad} not listed unreadable for {key}")
    if missing or bad in ids:
        wrong.append("the table does not hold exactly the other runs")

    before = aggregate_outputs(sweep)
    for rid in originals:
        plant(sweep / "runs" / rid / "summary.json", key, value)
    r = aggregate_cmd(sweep)
    kept = aggregate_outputs(sweep) == before
    if r.returncode != 2 or "Traceback" in r.stderr or not kept:
        wrong.append(f"every run bad: exit {r.returncode}, outputs {'kept' if kept else 'changed'}")

    for rid, raw in originals.items():
        (sweep / "runs" / rid / "summary.json").write_bytes(raw)
    r = aggregate_cmd(sweep)
    ids = set(pd.read_csv(sweep / "runs.csv", dtype={"run_id": str})["run_id"])
    if r.returncode != 0 or ids != set(refs):
        wrong.append(f"restored: exit {r.returncode}, {len(ids)} runs")
    return Outcome(wrong, len(missing) + len(set(refs) - ids), f"{key}={value!r}")


def slurm_cancel(bench, rng, attempt, tries: int = 4):
    """scancel of the Slurm job running a long ES run (ES_SLURM), once it has recorded a drawn
    iteration k < 30 plus U(0, one iteration): the sweep must end within 60 s with the run
    recorded failed ("cancelled"); the same command with sweep.retry_failed=true (local
    launcher) must resume it to the reference. A cancel that lands after the run completed
    is drawn again."""
    refs = bench.reference("es_slurm")
    k = rng.randrange(30)
    for _ in range(tries):
        root = bench.fresh("slurm")
        name = f"esopt-bench-{os.getpid()}-{rng.randrange(10**6)}"
        p = start(root, [*ES_SLURM, *SLURM, f"hydra.launcher.name={name}"], multirun=True)
        try:
            deadline = time.time() + 300
            while time.time() < deadline and p.poll() is None:
                run = only_run(root)
                if run is not None and has_summary(run) and trained(run) >= k:
                    break
                time.sleep(0.05)
            time.sleep(rng.uniform(0, bench.step_s("es_slurm")))
            jobs = subprocess.run(["squeue", "-h", "-n", name, "-o", "%i"], capture_output=True, text=True,
                                  timeout=30).stdout.split()
            if p.poll() is not None or not jobs:
                continue
            subprocess.run(["scancel", jobs[0].split("_")[0]], check=True, timeout=30)
            t = time.time()
            p.communicate(timeout=120)
            waited = time.time() - t
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.communicate()
        s = summary(only_run(root)) or {}
        if s.get("status") == "completed":
            continue
        wrong = [] if waited < 60 and s.get("status") == "failed" and "cancelled" in (s.get("error") or "") else [
            f"after scancel: {s.get('status')} in {waited:.0f} s ({s.get('error')})"]
        at = trained(only_run(root))
        again, lost = rerun(root, [*ES_SLURM, "sweep.retry_failed=true"], refs)
        return Outcome(wrong + again, lost, f"{at}, noticed in {waited:.0f} s")
    raise RuntimeError(f"no scancel landed mid-run in {tries} draws")


# ------------------------------------------------------------------- issue 42's classes
def copy_of_reference(bench, label: str) -> Path:
    """A fresh copy of the reference sweep of ``journal`` (4 runs): the sweep folder ``f``."""
    bench.reference("journal")
    root = bench.fresh(label)
    shutil.copytree(bench.sweeps["journal"] / "f", root / "f", symlinks=True)
    return root


def table_ids(sweep: Path) -> list[str]:
    import pandas as pd

    return sorted(pd.read_csv(sweep / "runs.csv", dtype={"run_id": str})["run_id"])


def dup_folder(bench, rng, attempt):
    """A copied run folder and a symlink to one: the aggregated table holds each reference run
    once; both extra folders are listed skipped, one line each."""
    refs = bench.reference("journal")
    root = copy_of_reference(bench, "dup")
    sweep = root / "f"
    rid = rng.choice(sorted(refs))
    shutil.copytree(sweep / "runs" / rid, sweep / "runs" / f"{rid}.bak")
    (sweep / "runs" / "alias").symlink_to(rid, target_is_directory=True)
    r, wrong = aggregate_cmd(sweep), []
    ids = table_ids(sweep) if r.returncode == 0 else []
    if r.returncode != 0:
        wrong.append(f"exit {r.returncode}: {r.stderr.strip().splitlines()[-1:]}")
    if ids != sorted(refs):
        wrong.append(f"table rows {ids} != the reference's {len(refs)} runs")
    for folder in (f"{rid}.bak", "alias"):
        if sum(line.startswith(f"  skipped {folder}:") for line in r.stdout.splitlines()) != 1:
            wrong.append(f"{folder} not listed skipped once")
    return Outcome(wrong, len(set(refs) - set(ids)), rid)


DEEP = 20000    # nesting depth of the planted line (Arrow's reader overflowed its stack on it)


def deep_line(bench, rng, attempt):
    """A metrics line nested DEEP deep appended to a drawn run: esopt.aggregate and the sweep's
    rerun (every run kept; its end-of-sweep aggregation) exit 0; the table holds every run and
    that run's line is counted unparseable (one note)."""
    refs = bench.reference("journal")
    root = copy_of_reference(bench, "deep")
    sweep = root / "f"
    rid = rng.choice(sorted(refs))
    with open(sweep / "runs" / rid / "metrics.jsonl", "a") as f:
        f.write('{"kind": "train", "iteration": 99, "x": ' + "[" * DEEP + "]" * DEEP + "}\n")
    wrong = []
    r = aggregate_cmd(sweep)
    if r.returncode != 0:
        wrong.append(f"esopt.aggregate exit {r.returncode}")
    if f"note: run {rid}: 1 unparseable metrics line(s)" not in r.stdout:
        wrong.append("the deep line is not noted unparseable")
    again = esopt(root, [*JOURNAL, "seed=0,1,2,3"], multirun=True)
    if again.returncode != 0:
        wrong.append(f"sweep rerun exit {again.returncode}")
    ids = table_ids(sweep) if (sweep / "runs.csv").exists() else []
    if ids != sorted(refs):
        wrong.append(f"table rows {ids}")
    return Outcome(wrong, len(set(refs) - set(ids)), rid)


def postgres_url(bench) -> str:
    """The bench's private PostgreSQL server (scripts/start_postgres.sh on a port of its own)."""
    if bench.postgres is None:
        env = {**os.environ, "ESOPT_POSTGRES_PORT": str(PG_PORT), "ESOPT_POSTGRES_DIR": str(PG_DIR)}
        r = subprocess.run(["bash", str(REPO / "scripts" / "start_postgres.sh")], env=env, capture_output=True,
                           text=True, timeout=600)
        if r.returncode != 0:
            raise RuntimeError(r.stderr.strip().splitlines()[-1])
        bench.postgres = r.stdout.strip()
    return bench.postgres


PG_PORT, PG_DIR = 5471, Path(tempfile.gettempdir()) / "esopt-bench-faults-pg"
PG_OUTAGE_S = 10.0


def pg_ctl(action: str) -> None:
    """Stop the bench's server (``pg_ctl stop -m fast``) or start it again (the script)."""
    if action == "start":
        bench_env = {**os.environ, "ESOPT_POSTGRES_PORT": str(PG_PORT), "ESOPT_POSTGRES_DIR": str(PG_DIR)}
        subprocess.run(["bash", str(REPO / "scripts" / "start_postgres.sh")], env=bench_env, capture_output=True,
                       timeout=600, check=True)
        return
    binary = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl")) or [Path(shutil.which("pg_ctl"))]
    cmd = [str(binary[-1]), "-D", str(PG_DIR), "stop", "-m", "fast", "-w"]
    if os.geteuid() == 0:
        cmd = ["runuser", "-u", "postgres", "--", *cmd]
    subprocess.run(cmd, capture_output=True, timeout=120, check=True)


def pg_outage(bench, rng, attempt):
    """A 3-run ES sweep (seed=0,1,2) on a fresh PostgreSQL schema; after a drawn train iteration
    of its first run the server is stopped for PG_OUTAGE_S and started again: the sweep exits
    0, every run equals the reference, each with one COMPLETE trial valued as its summary."""
    import sqlalchemy

    base = postgres_url(bench)
    refs = bench.reference("pg")
    root = bench.fresh("pg")
    schema = f"bench_{os.getpid()}_{attempt}_{rng.randrange(10**6)}"
    engine = sqlalchemy.create_engine(base, poolclass=sqlalchemy.pool.NullPool)
    with engine.begin() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
    url = f"{base}?options=-csearch_path%3D{schema}"
    k = rng.randrange(1, 5)
    p = start(root, [*PG, "seed=0,1,2", f"tuning.storage='{url}'"], multirun=True)   # quoted: '=' inside
    try:
        deadline = time.time() + 600
        while time.time() < deadline and p.poll() is None:
            first = next(iter(runs(root).values()), None)
            if first is not None and trained(first) >= k:
                break
            time.sleep(0.05)
        pg_ctl("stop")
        time.sleep(PG_OUTAGE_S)
        pg_ctl("start")
        out, err = p.communicate(timeout=900)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
    wrong, lost = check(refs, root, storage=url)
    if p.returncode != 0:
        wrong.insert(0, f"exit {p.returncode}: {err.strip().splitlines()[-1:]}")
    return Outcome(wrong, lost, str(k))


SEARCH = ["algo=es", "iterations=2", "es.batch_size=4", "eval.every=2", "hydra/sweeper=optuna",
          "hydra.sweeper.n_trials=2", "hydra.sweeper.n_jobs=1", "sigma=tag(log,interval(0.001,0.1))", "pop=choice(2,4)"]


def concurrent(bench, rng, attempt):
    """Two identical optuna searches on one study, started together: both exit 0; the study
    holds 4 trials, each COMPLETE, each with a run of its own, valued as its summary."""
    from esopt.runtime.tuning import metric_value

    root = bench.fresh("search")
    procs = [start(root, [*SEARCH, f"hydra.sweeper.seed={attempt}"], multirun=True) for _ in range(2)]
    codes = [(p.communicate(timeout=1200), p.returncode)[1] for p in procs]
    wrong = [f"search {i} exit {c}" for i, c in enumerate(codes) if c]
    got = trials(root / "f" / "optuna.journal")
    recorded = [(rid, st, v) for rid, ts in got.items() for st, v in ts]
    if len(recorded) != 4:
        wrong.append(f"{len(recorded)} trials, not 4")
    if len(got) != len(recorded):
        wrong.append(f"{len(recorded)} trials for {len(got)} runs")
    not_done = [(rid, st) for rid, st, _ in recorded if st != "COMPLETE"]
    if not_done:
        wrong.append(f"trials not COMPLETE: {not_done}")
    done = runs(root)
    for rid, st, v in recorded:
        s = summary(done[rid]) if rid in done else None
        if s is None or s.get("status") != "completed" or (st == "COMPLETE" and v != metric_value(s["final"])):
            wrong.append(f"{rid}: run {None if s is None else s.get('status')}, trial {st} {v}")
    return Outcome(wrong, len(not_done), f"{len(got)} runs")


def dead_tracker(bench, rng, attempt):
    """The reference sweep (seed=0,1,2,3) again with logger=[mlflow] at a server that accepts
    connections and never answers (a listening socket nobody reads): the runs equal the
    reference, one warning; the detail is the time lost per sweep (goal: under 15 s)."""
    import socket

    refs = bench.reference("journal")
    root = bench.fresh("tracker")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        t = time.perf_counter()
        r = esopt(root, [*JOURNAL, "seed=0,1,2,3", "logger=[mlflow]",
                         f"logger_opts.mlflow.tracking_uri=http://127.0.0.1:{server.getsockname()[1]}"], multirun=True)
        lost_s = time.perf_counter() - t - bench.walls["journal"]
    wrong, lost = check(refs, root)
    if r.returncode != 0:
        wrong.insert(0, f"exit {r.returncode}: {r.stderr.strip().splitlines()[-1:]}")
    w = [x for x in warnings(r.stderr) if "mlflow" in x]
    if len(w) != 1:
        wrong.append(f"{len(w)} mlflow warnings")
    if lost_s >= TRACKER_GOAL_S:
        wrong.append(f"{lost_s:.0f} s lost to the dead tracker (goal < {TRACKER_GOAL_S:.0f} s per sweep)")
    return Outcome(wrong, lost, f"{lost_s:.1f} s lost per {len(refs)}-run sweep")


TRACKER_GOAL_S = 15.0


# ------------------------------------------------------------------- issue 55's classes
PLAN_EDITS = ["config pop", "resolved pop", "config and resolved pop"]  # cycled


def edited_plan(bench, rng, attempt):
    """A queued run's plan.json edited (pop 4 made 8) while the sweep runs an earlier job: that
    run fails with one warning naming the file (it ran pop 8 under the pop-4 id before) and the
    sweep exits 1; the same sweep again (as a requeue would read the file again, the sweeper
    writes it anew) completes it: every run equals the reference."""
    refs = bench.reference("journal")
    root = bench.fresh("plan")
    how = PLAN_EDITS[attempt % len(PLAN_EDITS)]
    p = start(root, [*JOURNAL, "seed=0,1,2,3"], multirun=True)
    edited, deadline = None, time.time() + 600
    try:
        while edited is None and time.time() < deadline and p.poll() is None:
            queued = [r for r in runs(root).values() if (r / "plan.json").exists() and not has_summary(r)]
            if len(queued) >= 2 and any(has_summary(r) for r in runs(root).values()):
                edited = rng.choice(sorted(queued))
                d = json.loads((edited / "plan.json").read_text())
                if "config" in how:
                    d["config"]["pop"] = 8
                if "resolved" in how:
                    d["resolved"]["phases"][0]["settings"]["pop"] = 8
                (edited / "plan.json").write_text(json.dumps(d))
            time.sleep(0.02)
        out, err = p.communicate(timeout=600)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    if edited is None:
        return Outcome(["no queued plan.json to edit"], 0, how)
    wrong = []
    if p.returncode != 1:
        wrong.append(f"the sweep with the edited plan exit {p.returncode}")
    s = summary(edited) or {}
    if s.get("status") != "failed" or str(edited / "plan.json") not in (s.get("error") or ""):
        wrong.append(f"run {edited.name}: {s.get('status')}, error {(s.get('error') or '')[:80]!r}")
    named = [w for w in warnings(err) if str(edited / "plan.json") in w]
    if len(named) != 1:
        wrong.append(f"{len(named)} warnings name the edited plan.json")
    again = esopt(root, [*JOURNAL, "seed=0,1,2,3"], multirun=True)
    more, lost = check(refs, root)
    if again.returncode != 0:
        more.insert(0, f"rerun exit {again.returncode}: {again.stderr.strip().splitlines()[-1:]}")
    return Outcome(wrong + more, lost, f"{how} of run {edited.name}")


def corrupt_claims(bench, rng, attempt):
    """A claims sweep (base and ES) started over a corrupt claims.json (torn, a list, a design that
    is a number; cycled): one warning names it, it is kept as claims.corrupt-<time>.json byte for
    byte, the design is registered afresh (labelled so), and every run equals the reference."""
    refs = bench.reference("claims")
    root = bench.fresh("claims")
    bad = CORRUPT_CLAIMS[attempt % len(CORRUPT_CLAIMS)]
    (root / "f").mkdir(parents=True)
    (root / "f" / "claims.json").write_text(bad)
    overrides, _ = REFERENCES["claims"]
    r = esopt(root, overrides, multirun=True)
    wrong, lost = check(refs, root)
    if r.returncode != 0:
        wrong.insert(0, f"exit {r.returncode}: {r.stderr.strip().splitlines()[-1:]}")
    named = [w for w in warnings(r.stderr) if "claims.json" in w]
    kept = sorted((root / "f").glob("claims.corrupt-*.json"))
    if len(named) != 1 or len(kept) != 1 or kept[0].read_text() != bad:
        wrong.append(f"warnings {named}, kept {[k.name for k in kept]}")
    try:
        reg = json.loads((root / "f" / "claims.json").read_text())["registration"]
        if reg.get("replaces_corrupt", {}).get("file") != (kept[0].name if kept else None):
            wrong.append("the fresh registration is not labelled")
    except (OSError, ValueError, KeyError, TypeError) as e:
        wrong.append(f"claims.json after the sweep: {type(e).__name__}")
    return Outcome(wrong, lost, {"[": "a list", "{\"registration\": {\"d": "a design that is 5"}.get(bad[:16], "torn"))


CORRUPT_CLAIMS = ['{"registration": {"des', "[1, 2]", '{"registration": {"design": 5}}']
BAD_SAMPLES = [("truncated", "abc"), ("problems", {"a": 1}), ("iteration", "x")]  # cycled


def bad_samples(bench, rng, attempt):
    """Every run's base samples file (samples/iteration_0.json) given a field of another type
    (cycled): esopt.aggregate exits 0 with one note naming the shown run's file, the page is
    written without its completions, and the table holds every run."""
    refs = bench.reference("journal")
    root = copy_of_reference(bench, "samples")
    sweep = root / "f"
    key, value = BAD_SAMPLES[attempt % len(BAD_SAMPLES)]
    for rid in refs:
        path = sweep / "runs" / rid / "samples" / "iteration_0.json"
        d = json.loads(path.read_text())
        d[key] = value
        path.write_text(json.dumps(d))
    r, wrong = aggregate_cmd(sweep), []
    ids = table_ids(sweep) if r.returncode == 0 else []
    if r.returncode != 0:
        wrong.append(f"exit {r.returncode}: {r.stderr.strip().splitlines()[-1:]}")
    notes = [line for line in r.stdout.splitlines() if "iteration_0.json cannot be read" in line]
    if len(notes) != 1 or not (sweep / "report.html").exists():
        wrong.append(f"{len(notes)} notes name a samples file")
    if ids != sorted(refs):
        wrong.append(f"table rows {ids}")
    return Outcome(wrong, len(set(refs) - set(ids)), f"{key}={value!r}")


FAULTS = {  # name -> (row label, one attempt, the reference it is compared with, the note's legend)
    "es_kill": ("kill -9 of an ES run, rerun", es_kill, "es", "killed after iteration"),
    "grpo_kill": ("kill -9 of a GRPO run, rerun", grpo_kill, "grpo", "killed after step"),
    "journal": ("torn / garbage Optuna journal tail, sweep continued", journal, "journal", "damage"),
    "grpo_state": ("empty trainer_state.json in the latest GRPO checkpoint", grpo_state, "grpo",
                   "emptied in"),
    "es_flip": ("one flipped byte in the latest ES checkpoint weights", es_flip, "es",
                "in the checkpoint of iteration"),
    "es_truncate": ("a truncated file in the latest ES checkpoint", es_truncate, "es", "halved"),
    "aggregate": ("aggregator: a non-numeric summary field", aggregate, "journal", "planted"),
    "slurm_cancel": ("scancel of a running Slurm job, retried", slurm_cancel, "es_slurm",
                     "cancelled after iteration"),
    "dup_folder": ("a copied and a symlinked run folder, aggregated", dup_folder, "journal", "copied"),
    "deep_line": ("a metrics line nested 20,000 deep, aggregated and swept", deep_line, "journal", "in run"),
    "pg_outage": ("PostgreSQL stopped 10 s mid-sweep", pg_outage, "pg", "stopped after iteration"),
    "concurrent": ("two optuna searches on one study at once", concurrent, None, "trials of"),
    "dead_tracker": ("an MLflow server that never answers, whole sweep", dead_tracker, "journal", "time"),
    "edited_plan": ("a queued run's plan.json edited, sweep rerun", edited_plan, "journal", "edited"),
    "corrupt_claims": ("a claims sweep over a corrupt claims.json", corrupt_claims, "claims", "claims.json"),
    "bad_samples": ("a samples file of another shape, aggregated", bad_samples, "journal", "planted"),
}


def postgres_reason(bench) -> str | None:
    """Why pg_outage cannot run here (None: the private server is up)."""
    try:
        postgres_url(bench)
    except Exception as e:  # noqa: BLE001 - the reason is the row's note
        return f"no PostgreSQL server ({e})"
    return None


def run_fault(bench: Bench, name: str, attempts: int, seed: int) -> dict:
    """One row of the table: ``attempts`` injections of fault ``name``."""
    label, fn, ref, legend = FAULTS[name]
    if ref is not None:
        bench.reference(ref)  # made before the clock starts
    rng = random.Random(f"{seed}-{name}")
    outcomes, walls = [], []
    for i in range(attempts):
        t = time.perf_counter()
        try:
            out = fn(bench, rng, i)
        except Exception as e:  # noqa: BLE001 - a fault the bench could not even inject is not survived
            out = Outcome([f"{type(e).__name__}: {e}"], 0)
        walls.append(time.perf_counter() - t)
        outcomes.append(out)
        print(f"  {name} #{i + 1}: {'survived' if out.survived else 'NOT SURVIVED'}, lost {out.lost}, "
              f"{legend} {out.detail}, {walls[-1]:.1f} s" + "".join(f"\n    {w}" for w in out.wrong),
              file=sys.stderr, flush=True)
    problems = [w for o in outcomes for w in o.wrong]
    note = f"{legend}: " + "; ".join(o.detail for o in outcomes)
    return {"fault": label, "attempts": attempts, "survived": sum(o.survived for o in outcomes),
            "lost": sum(o.lost for o in outcomes), "wall s": round(sum(walls) / len(walls), 1),
            "note": f"{problems[0]} ({note})" if problems else note}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 attempts per fault")
    ap.add_argument("--attempts", type=int, default=None, help="attempts per fault (default 5; --quick 2)")
    ap.add_argument("--only", default=None, help=f"comma-separated faults of: {','.join(FAULTS)}")
    ap.add_argument("--seed", type=int, default=0, help="seed of the kill times and the damage")
    ap.add_argument("--root", default=None, help="keep the runs here (default: a temporary dir)")
    ap.add_argument("--write-docs", action="store_true", help="write the table to docs/results/faults.md")
    args = ap.parse_args(argv)
    attempts = args.attempts or (2 if args.quick else 5)
    names = args.only.split(",") if args.only else list(FAULTS)
    unknown = [n for n in names if n not in FAULTS]
    if unknown:
        sys.exit(f"bench: unknown fault(s) {unknown} (known: {', '.join(FAULTS)})")
    if attempts < 1:
        sys.exit("bench: --attempts must be >= 1")
    work = Path(args.root or tempfile.mkdtemp(prefix="bench_faults_")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    bench, rows, t0 = Bench(work), [], time.time()
    try:
        for name in names:
            reason = slurm_reason() if name == "slurm_cancel" else postgres_reason(bench) if name == "pg_outage" else None
            if reason:
                rows.append({"fault": FAULTS[name][0], "attempts": 0, "survived": "-", "lost": "-",
                             "wall s": "-", "note": f"skipped: {reason}"})
                continue
            rows.append(run_fault(bench, name, attempts, args.seed))
    finally:
        if args.root is None:
            shutil.rmtree(work, ignore_errors=True)
    header = list(rows[0])
    widths = [max(len(str(h)), *(len(str(r[h])) for r in rows)) for h in header]
    for line in [header, *[[r[h] for h in header] for r in rows]]:
        print("  ".join(str(c).ljust(w) for c, w in zip(line, widths)).rstrip())
    bad = [r for r in rows if r["attempts"] and (r["survived"] != r["attempts"] or r["lost"])]
    verdict = f"{len(bad)} fault(s) not survived or with records lost" if bad else "every fault survived, nothing lost"
    print(f"{verdict} ({time.time() - t0:.0f} s)")
    if args.write_docs:
        from _results import write_table

        notes = (f"{attempts} attempt(s) per fault, seed {args.seed}; wall s = mean per attempt (the faulted "
                 f"run and its recovery; reference runs excluded); {verdict}; load average "
                 f"{os.getloadavg()[0]:.1f} at the end. Survived: the recovered run is `completed` and equals "
                 "an uninterrupted reference run (sha256 of every file in `<run>/model/`, summary `final`, "
                 "metrics.jsonl lines without timing fields), with exactly one warning naming a damaged "
                 "file; lost: the reference's records (run directories, Optuna trials, metrics lines, "
                 "aggregated rows) missing afterwards. Configs and mechanisms: benchmarks/bench_faults.py.")
        write_table("faults", "Fault table", None, header, [[r[h] for h in header] for r in rows], notes=notes)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
