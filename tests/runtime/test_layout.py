"""How a run uses what it asks Slurm for: one ES rank per GPU engine, one GRPO process per GPU,
requests that no layout fills refused before submission; the dry run shows the layout."""

import pytest
from helpers import cli, run_config

from esopt.core.errors import ConfigError
from esopt.runtime.layout import launcher_request, layout

SLURM = {"tasks_per_node": 1, "gpus_per_node": 4, "gpus_per_task": None, "cpus_per_task": 32}
LOCAL = {"tasks_per_node": 1, "gpus_per_node": 4, "cpus_per_task": 32}


def rc(*over):
    return run_config(*over, check_data=False)


def test_es_gets_one_rank_per_gpu_engine():
    lay = layout(rc("algo=es", "model=qwen7b"))
    assert (lay.ranks, lay.gpus_per_rank, lay.gpus_requested, lay.gpus_used, lay.note) == (4, 1, 4, 4, None)
    req = launcher_request(rc("algo=es", "model=qwen7b"), SLURM)
    assert (req["tasks_per_node"], req["gpus_per_task"], req["gpus_per_node"], req["cpus_per_task"]) == (4, 1, None, 8)
    with pytest.raises(ConfigError, match="tensor_parallel_size must be 1"):  # one single-GPU engine per rank
        rc("algo=es", "model=qwen7b", "engine=vllm", "engine.tensor_parallel_size=2")
    assert launcher_request(rc("algo=es", "model=qwen7b"), LOCAL)["tasks_per_node"] == 4   # submitit_local
    cpu = layout(rc("algo=es", "model=tiny-s"))
    assert (cpu.ranks, cpu.gpus_per_rank, cpu.gpus_used) == (1, 0, 0)
    two = rc("algo=es", "model=tiny-s", "model.resources.ranks=2")
    assert layout(two).ranks == 2 and launcher_request(two, SLURM)["tasks_per_node"] == 2
    assert launcher_request(two, SLURM)["gpus_per_task"] is None                      # CPU ranks


def test_sequences_and_base_runs_are_one_process_and_say_why():
    for algo in ("none", "es_grpo"):
        lay = layout(rc(f"algo={algo}", "model=qwen7b"))
        assert (lay.ranks, lay.gpus_used) == (1, 1), algo
        assert "runs as one process" in lay.note and "not model.resources.gpus=4" in lay.note
        req = launcher_request(rc(f"algo={algo}", "model=qwen7b"), SLURM)
        assert (req["tasks_per_node"], req["gpus_per_node"]) == (1, 1)
    assert layout(rc("algo=grpo", "model=qwen1.5b")).note is None                     # 1 GPU asked, 1 used


def test_grpo_gets_one_process_per_gpu():
    """GRPO's G processes (FSDP2 on GPUs) are Slurm tasks of one GPU each, like ES's ranks."""
    lay = layout(rc("algo=grpo", "model=qwen7b"))
    assert (lay.ranks, lay.gpus_per_rank, lay.gpus_used, lay.note) == (4, 1, 4, None)
    req = launcher_request(rc("algo=grpo", "model=qwen7b"), SLURM)
    assert (req["tasks_per_node"], req["gpus_per_task"], req["gpus_per_node"]) == (4, 1, None)


@pytest.mark.parametrize("over,message", [
    (("model.resources.ranks=3",), "model.resources.gpus=4 but 3 ranks x 1 GPU(s) per engine would use 3"),
    (("engine=vllm", "engine.tensor_parallel_size=3"), "engine.tensor_parallel_size must be 1"),
    (("model.resources.ranks=0",), "model.resources.ranks must be null or an integer >= 1"),
])
def test_requests_no_layout_fills_are_refused(over, message):
    with pytest.raises(ConfigError) as e:
        rc("algo=es", "model=qwen7b", *over)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_dry_run_shows_gpus_requested_and_used(tmp_path):
    r = cli("esopt.sweep", "-m", "model=qwen7b", "algo=es,grpo", "sweep.dry_run=true", f"sweep.root={tmp_path}",
                env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    header = next(line for line in r.stdout.splitlines() if "run_id" in line).split()
    rows = [line.split() for line in r.stdout.splitlines() if line.strip() and line.split()[0].isdigit()]
    cols = {name: [row[header.index(name)] for row in rows] for name in ("algo", "ranks", "gpus_req", "gpus_used")}
    assert cols == {"algo": ["es", "grpo"], "ranks": ["4", "4"], "gpus_req": ["4", "4"], "gpus_used": ["4", "4"]}
    assert "runs as one process" not in r.stderr
    bad = cli("esopt.sweep", "-m", "model=qwen7b", "model.resources.ranks=3", "sweep.dry_run=true",
                  f"sweep.root={tmp_path}", env={"OMP_NUM_THREADS": "1"})
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].startswith("esopt: error: model.resources.gpus=4")
