"""A cluster as it is (issue 51): its job time limit and the options a site requires, checked
in the dry run before anything is submitted, and the sbatch script submitit writes from them.
Dry runs and submitit's script writer only (no Slurm needed: ``sweep.max_job_hours`` is given,
so sinfo is not asked)."""

import pytest
from helpers import REPO, cli

from esopt.runtime.layout import slurm_minutes

SLURM_DRY = ["esopt.sweep", "-m", "hydra/launcher=slurm", "model=tiny-xs", "sweep.dry_run=true"]


@pytest.mark.parametrize("text, minutes", [
    ("infinite", None), ("UNLIMITED", None), ("45", 45), ("30:00", 30), ("2:00:00", 120),
    ("1-00:00:00", 1440), ("2-12:30:59", 3630)])
def test_slurm_time_limits_read_as_minutes(text, minutes):
    assert slurm_minutes(text) == minutes


@pytest.mark.parametrize("value", ["0", "-1", "abc"])
def test_a_job_limit_that_is_not_positive_is_one_line(tmp_path, value):
    r = cli(*SLURM_DRY, f"sweep.max_job_hours={value}", f"sweep.root={tmp_path}")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("esopt: error: "), r.stderr
    assert "sweep.max_job_hours" in lines[0]


def test_runs_over_the_job_limit(tmp_path):
    """An evaluation-only run (algo=none: nothing to resume from) estimated over a 1-minute job
    limit is refused, exit 2, naming the run and the limit; an ES run over the limit x (1 +
    sweep.max_requeues) jobs is listed with a warning and the dry run goes on; under the limit,
    neither."""
    big = ["iterations=2000", "eval.problems=5000", "task.n_test=5000", "sweep.max_job_hours=0.02"]
    r = cli(*SLURM_DRY, "algo=none", *big, f"sweep.root={tmp_path}")
    assert r.returncode == 2 and r.stderr.count("esopt: error:") == 1, r.stderr[-2000:]
    assert "may take about 2 min, over its Slurm job's 1 min (sweep.max_job_hours), and algo=none cannot " \
           "checkpoint" in r.stderr
    r = cli(*SLURM_DRY, "algo=es", *big, "sweep.max_requeues=1", f"sweep.root={tmp_path}")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "more than 2 Slurm jobs of 1 min (sweep.max_job_hours; the first and sweep.max_requeues=1" in r.stderr
    r = cli(*SLURM_DRY, "algo=es", "iterations=2", "sweep.max_job_hours=1", f"sweep.root={tmp_path}")
    assert r.returncode == 0 and "Slurm job" not in r.stderr, r.stderr[-2000:]


@pytest.mark.parametrize("argv, needle", [
    (["+hydra.launcher.walltime=5"], "unknown Slurm option(s) hydra.launcher.walltime (submitit takes: "),
    (["hydra.launcher.nodes=2", "algo=es_grpo"], "hydra.launcher.nodes=2: algo=es_grpo runs as one process (only an "
                                                 "algorithm that splits its work over ranks spans nodes: es, grpo)"),
    (["hydra.launcher.nodes=0"], "hydra.launcher.nodes must be an integer >= 1, got 0"),
    (["hydra.launcher.additional_parameters=5"], "hydra.launcher.additional_parameters must be a mapping"),
])
def test_site_options_that_cannot_work_are_one_line(tmp_path, argv, needle):
    r = cli(*SLURM_DRY, *argv, f"sweep.root={tmp_path}")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("esopt: error: "), r.stderr
    assert needle in lines[0]


def test_es_over_two_nodes_passes_the_dry_run(tmp_path):
    r = cli(*SLURM_DRY, "algo=es", "hydra.launcher.nodes=2", "hydra.launcher.exclusive=true", f"sweep.root={tmp_path}")
    assert r.returncode == 0, r.stderr[-2000:]


def test_the_sbatch_script_carries_the_site_options(tmp_path):
    """What submitit writes for a launcher's settings (``slurm_executor``): every site option as
    its sbatch line, setup lines before the command, no ``--wckey`` unless one is given
    (submitit's default is ``--wckey=submitit``), the time limit x runs_per_job capped."""
    from hydra_plugins.esopt_sweeper.launchers import slurm_executor

    params = {"submitit_folder": str(tmp_path / "%j"), "timeout_min": 600, "nodes": 2, "tasks_per_node": 4,
              "exclusive": True, "reservation": "big-run", "qos": "high", "account": "proj", "constraint": "h100",
              "partition": "gpu", "wckey": None, "mail_type": "END", "setup": ["module load cuda/12.4"],
              "additional_parameters": {"gpu-bind": "closest"}, "max_num_timeout": 3, "runs_per_job": 2,
              "poll_s": 5}
    text = slurm_executor(params, runs_per_job=2, max_timeout_min=900)._executor._make_submission_file_text("x", "0")
    for line in ("--nodes=2", "--ntasks-per-node=4", "--exclusive", "--reservation=big-run", "--qos=high",
                 "--account=proj", "--constraint=h100", "--partition=gpu", "--mail-type=END", "--gpu-bind=closest",
                 "--time=900"):
        assert f"#SBATCH {line}\n" in text, (line, text)
    assert "wckey" not in text and "runs_per_job" not in text and "poll" not in text
    assert text.index("module load cuda/12.4") < text.index("srun")
    text = slurm_executor({**params, "wckey": "proj-a"}, 1, None)._executor._make_submission_file_text("x", "0")
    assert "#SBATCH --wckey=proj-a\n" in text and "#SBATCH --time=600\n" in text


# --- compute nodes without internet (sweep.offline) ------------------------------------------

@pytest.fixture
def empty_hf_cache(tmp_path, monkeypatch):
    """An empty Hugging Face cache, and the hub off (nothing here may download): the library
    constants ``HF_HUB_CACHE`` / ``HF_HUB_OFFLINE`` (and ``datasets``') set as the environment
    variables would set them in a fresh process."""
    import datasets
    from huggingface_hub import constants

    cache = tmp_path / "hf"
    (cache / "hub").mkdir(parents=True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache / "datasets")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    return cache


def one_error(r) -> str:
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("esopt: error: "), r.stderr[-2000:]
    return lines[0]


def test_offline_sweeps_need_their_models_and_data_in_the_cache(tmp_path, empty_hf_cache):
    """sweep.offline=true: a hub model missing from the cache is refused in the dry run, naming
    esopt.fetch; ``models.paths`` points the size at a local folder instead, and passes; a hub
    dataset missing from the cache is refused too; without sweep.offline the model is not asked."""
    dry = [*SLURM_DRY, "model=qwen0.5b,tiny-xs", f"sweep.root={tmp_path}"]
    line = one_error(cli(*dry, "sweep.offline=true"))
    assert f"model qwen0.5b (Qwen/Qwen2.5-0.5B-Instruct) is not in the Hugging Face cache {empty_hf_cache / 'hub'}" \
           in line and "python -m esopt.fetch" in line
    tiny = REPO / "esopt" / "models" / "tiny" / "tiny-s"
    r = cli(*dry, "sweep.offline=true", f"models.paths={{qwen0.5b: {tiny}}}")
    assert r.returncode == 0 and "2 runs" in r.stdout, r.stderr[-2000:]
    assert cli(*dry).returncode == 0
    line = one_error(cli("esopt.sweep", "-m", "model=tiny-xs", "task=gsm8k", "sweep.offline=true", "sweep.dry_run=true",
                         f"sweep.root={tmp_path}"))
    assert "task gsm8k: cannot load 'openai/gsm8k'" in line and "task.source=<path>" in line


@pytest.mark.parametrize("argv, needle", [
    (["models.paths={tiny-xs: /no/such/folder}"], "models.paths.tiny-xs: '/no/such/folder' is not a directory"),
    (["sweep.offline=true", "logger=[wandb]", "logger_opts.wandb.mode=online"],
     "logger_opts.wandb.mode=online with sweep.offline=true"),
])
def test_offline_inputs_that_cannot_work_are_one_line(tmp_path, argv, needle):
    assert needle in one_error(cli(*SLURM_DRY, *argv, f"sweep.root={tmp_path}"))


def test_fetch_lists_the_grids_inputs_and_writes_its_manifest(tmp_path, empty_hf_cache):
    """``esopt.fetch`` on a tiny grid: its local models listed with their sizes (nothing to
    download), the manifest written in the cache given; a hub model it cannot download (the hub
    is off here) is one line, exit 2."""
    import json

    r = cli("esopt.fetch", "-m", "model=tiny-xs,tiny-s", "--cache-dir", str(tmp_path / "cache"), f"sweep.root={tmp_path}")
    assert r.returncode == 0, r.stderr[-2000:]
    manifest = json.loads((tmp_path / "cache" / "esopt-fetch.json").read_text())
    assert manifest["models"] == [] and [m["name"] for m in manifest["local_models"]] == ["tiny-xs", "tiny-s"]
    size = sum(f.stat().st_size for f in (REPO / "esopt" / "models" / "tiny" / "tiny-s").rglob("*") if f.is_file())
    assert manifest["local_models"][1]["bytes"] == size
    assert f"cache {tmp_path / 'cache'}" in r.stdout and "local folder, not fetched  0.4 MB" in r.stdout
    assert "task  countdown    generated or shipped data, nothing to fetch" in r.stdout
    line = one_error(cli("esopt.fetch", "model=qwen0.5b", f"sweep.root={tmp_path}"))
    assert line.startswith("esopt: error: model qwen0.5b (Qwen/Qwen2.5-0.5B-Instruct): cannot download it: ")



def test_the_disk_peak_counts_every_groups_array_at_once(tmp_path):
    """Three resource groups (mem_gb=${seed}) of one run each, array_parallelism=1: all three
    arrays run at once, so the peak holds three resume checkpoints, not one."""
    import re

    r = cli(*SLURM_DRY, "seed=1,2,3", "hydra.launcher.mem_gb=${seed}", "hydra.launcher.array_parallelism=1",
            "sweep.max_job_hours=1", f"sweep.root={tmp_path}")
    assert r.returncode == 0, r.stderr[-2000:]
    one = re.search(r"and (\d+) kB of resume checkpoint", r.stdout)
    running = re.search(r"\+ (\d+) kB for the running runs' checkpoints", r.stdout)
    assert one and running, r.stdout[-1500:]
    assert abs(int(running.group(1)) - 3 * int(one.group(1))) <= 2


SHA = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def fake_hub_cache(empty_hf_cache):
    """The empty cache with one hub model in it, as ``snapshot_download`` leaves it: Qwen2.5-0.5B's
    snapshot folder (holding the tiny-s checkpoint's files) at commit SHA, and ``refs/main``."""
    import shutil

    repo = empty_hf_cache / "hub" / "models--Qwen--Qwen2.5-0.5B-Instruct"
    shutil.copytree(REPO / "esopt" / "models" / "tiny" / "tiny-s", repo / "snapshots" / SHA)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(SHA)
    return repo


def test_a_fetched_model_passes_offline_and_loads_at_its_revision(tmp_path, fake_hub_cache):
    """With the model in the cache (hub off): the offline dry run passes; esopt.fetch records its
    commit and size without downloading; ``model.revision`` loads that snapshot's weights."""
    import json

    from esopt import models

    r = cli(*SLURM_DRY, "model=qwen0.5b", "sweep.offline=true", f"sweep.root={tmp_path}")
    assert r.returncode == 0, r.stderr[-2000:]
    r = cli("esopt.fetch", "model=qwen0.5b", f"+model.revision={SHA}", f"sweep.root={tmp_path}")
    assert r.returncode == 0, r.stderr[-2000:]
    (entry,) = json.loads((fake_hub_cache.parent / "esopt-fetch.json").read_text())["models"]
    size = sum(f.stat().st_size for f in (fake_hub_cache / "snapshots" / SHA).iterdir())
    assert (entry["repo"], entry["revision"], entry["bytes"]) == ("Qwen/Qwen2.5-0.5B-Instruct", SHA, size)
    assert f"model qwen0.5b     Qwen/Qwen2.5-0.5B-Instruct@{SHA[:12]}" in r.stdout
    model, _ = models.load("qwen0.5b", revision=SHA)
    tiny, _ = models.load("tiny-s")
    assert model.name_or_path == str(fake_hub_cache / "snapshots" / SHA)
    assert all(a.equal(b) for a, b in zip(model.state_dict().values(), tiny.state_dict().values()))
