"""What the user sees: the headline command sweeps ES populations, ignored grid keys are
reported before launch, and the entry points print esopt's lines only (library chatter is
filtered unless asked for with -v / ESOPT_VERBOSE=1)."""

import re

from helpers import cli, run_cli

ENV = {"OMP_NUM_THREADS": "1"}


def test_the_headline_command_makes_six_es_runs(tmp_path):
    r = cli("esopt.sweep", "-m", "model=qwen1.5b,qwen7b", "pop=8,16,32", "sweep.dry_run=true",
                f"sweep.root={tmp_path}", env=ENV)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "dry run: 6 runs" in r.stdout
    ids = re.findall(r"^\s*\d+\s+([0-9a-f]{12})\s", r.stdout, flags=re.M)
    assert len(set(ids)) == 6
    assert "no effect" not in r.stderr
    assert not (tmp_path / "default" / "runs").exists()


def test_a_key_the_algorithm_ignores_is_reported_before_launch(tmp_path):
    r = cli("esopt.sweep", "-m", "algo=grpo,es", "pop=8,16,32", "model=tiny-xs", "sweep.dry_run=true",
                f"sweep.root={tmp_path}", env=ENV)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "esopt: note: pop has no effect with algo=grpo: 3 points are 1 run" in r.stderr
    assert "dry run: 6 grid points = 4 runs" in r.stdout
    assert "to run: 4;" in r.stdout


def test_quickstart_prints_esopt_lines_only(tmp_path):
    """The quickstart's 6 runs (base, ES, GRPO x 2 seeds) through its joblib launcher, at small
    sizes: a fresh interpreter, since what a user's process prints is the subject."""
    r = run_cli("esopt.sweep", "-m", "+experiment=quickstart", "iterations=2", "pop=4", "es.batch_size=4",
                "grpo.prompts_per_step=2", "eval.problems=8", "eval.samples=4", f"sweep.root={tmp_path}",
                env=ENV, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    noise = [line for line in r.stderr.splitlines() if line.strip() and not line.startswith("esopt:")]
    assert noise == [], noise[:10]
    assert "Warning" not in r.stdout and "[HYDRA]" not in r.stdout
    assert len(re.findall(r"^run [0-9a-f]{12} completed: ", r.stdout, flags=re.M)) == 6
    assert r.stdout.strip().splitlines()[-1].startswith("aggregated: ")
    assert r.stdout.strip().splitlines()[-1].split()[1].endswith("report.html")


def test_verbose_shows_what_quiet_hides(tmp_path):
    """The planted effect behind the quiet test: the same GRPO run with -v does print
    library warnings, so the quiet test fails if the filter stops working."""
    args = ("esopt.sweep", "algo=grpo", "model=tiny-xs", "iterations=1", "eval.problems=4", "eval.samples=2",
            "grpo.prompts_per_step=2", "grpo.num_generations=2", f"sweep.root={tmp_path}")
    loud = run_cli(*args, "-v", env=ENV, timeout=600)
    assert loud.returncode == 0, loud.stderr[-3000:]
    assert "Warning" in loud.stderr
    quiet = run_cli(*args, "sweep.name=again", env=ENV, timeout=600)
    assert quiet.returncode == 0 and "Warning" not in quiet.stderr, quiet.stderr[-2000:]


def test_help_names_presets_models_tasks_and_algorithms():
    r = cli("esopt.sweep", "--help", env=ENV)
    assert r.returncode == 0
    for needle in ("experiment: ", "quickstart", "paper_cpu", "model: ", "tiny-s", "qwen7b", "task: ", "gsm8k",
                   "algo: ", "es_grpo", "engine: auto, hf, vllm", "python -m esopt.sweep -m +experiment=quickstart"):
        assert needle in r.stdout, needle


def test_sweep_progress_counts_the_store(tmp_path):
    """The sweep's progress line reads the runs' summaries: done / running / failed, walls."""
    from helpers import run_config

    from esopt.core.store import RunDir
    from hydra_plugins.esopt_sweeper.sweepers import Job, SweepProgress

    rc = run_config("algo=none", f"sweep.root={tmp_path}", check_data=False)
    jobs = [Job([], rc, rid, {}) for rid in ("a", "b", "c", "d")]
    for rid, status in (("a", "completed"), ("b", "failed"), ("c", "running")):
        RunDir.for_run(rc.sweep.root, rc.sweep.name, rid).write_summary({"status": status, "wall_s": 10.0})
    c = SweepProgress(jobs).counts()
    assert (c["done"], c["running"], c["failed"], c["walls"]) == (2, 1, 1, [10.0, 10.0])
