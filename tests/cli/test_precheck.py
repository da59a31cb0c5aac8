"""The command line is checked before Hydra runs (esopt.cli.common.prepare_argv): one line,
exit 2, nothing created. In-process (fast); tests/runtime/test_run.py runs a few end to end."""

import re

import pytest

from esopt.cli import configs
from esopt.cli.common import prepare_argv
from helpers import rejected

configs.register()


@pytest.mark.parametrize("argv, needle", [
    (["foo=1"], "unknown key 'foo'; known keys: model, task, es, algo"),
    (["+popsize=8"], "unknown key 'popsize' (did you mean 'pop'?)"),
    (["-m", "seed=0,1", "++iteration=5"], "unknown key 'iteration' (did you mean 'iterations'?)"),
    (["eval.sampels=4"], "unknown key 'eval.sampels' (did you mean 'samples'?); known keys in eval:"),
    (["+experiment=nope"], "no config 'experiment/nope' (available: es_vs_grpo_countdown_gpu, es_vs_grpo_gpu"),
    (["hydra/launcher=nope"], "no config 'hydra/launcher/nope' (available: basic, joblib, local"),
    (["pop=[1,"], "cannot parse the overrides"),
    (["sweep.name=.."], "sweep.name must be a plain directory name"),
    (["sweep.name=."], "sweep.name must be a plain directory name"),
    (["sweep.name=a/b"], "sweep.name must be a plain directory name"),
    (["-m", "sweep.name=ok,.."], "got '..'"),
    (["sweep.root=results/../.."], "sweep.root must not contain a '..' component"),
    (["model.path=/nonexistent/ckpt"], "model path not found: /nonexistent/ckpt"),
    (["eval.problems=100000"], "eval.problems=100000 exceeds the test split of task countdown (500 problems)"),
])
def test_bad_command_lines_are_one_line(capsys, argv, needle):
    assert needle in rejected(capsys, *argv)


def test_good_command_lines_pass(capsys):
    prepare_argv(["-m", "algo=es", "pop=8,16", "seed=range(2)", "sigma=tag(log,interval(1e-4,1e-2))",
                  "sweep.name=ok", "sweep.root=/tmp/results", "hydra.sweeper.max_batch_size=2"])
    prepare_argv(["--cfg", "job", "model=tiny-xs", "eval.problems=8"])
    # a multirun's jobs are validated by the sweeper (every job, before any is dispatched)
    prepare_argv(["-m", "model.path=/nonexistent/ckpt,/other"])
    assert capsys.readouterr().err == ""


def test_unknown_top_level_key_in_a_composed_config_is_refused():
    """The same rule holds wherever a config is parsed (sweeper jobs, tests, the Python API)."""
    from helpers import compose

    from esopt.core.config import parse
    from esopt.core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"unknown key 'popsize' \(did you mean 'pop'\?\)"):
        parse(compose("+popsize=8"))


def test_the_config_tree_follows_the_registry_both_ways(monkeypatch, capsys):
    """An algorithm registered and then removed (as a test's fixture does) leaves nothing in
    Hydra's ConfigStore: a later command line neither composes nor accepts its block."""
    from dataclasses import dataclass
    from types import SimpleNamespace

    from hydra.core.config_store import ConfigStore

    from esopt import algorithms

    @dataclass
    class Gone:
        """The ``gone:`` block."""

        step: float = 0.5

    algo = algorithms.Algorithm("gone", "registered, then removed", SimpleNamespace(),
                                blocks=(algorithms.Block("gone", Gone),))
    with monkeypatch.context() as m:
        m.setattr(algorithms, "ALGORITHMS", {**algorithms.ALGORITHMS, "gone": algo})
        prepare_argv(["--cfg", "job", "gone.step=1"])  # registered: its block is a key
        assert "gone" in ConfigStore.instance().repo
    assert "unknown key 'gone.step'" in rejected(capsys, "--cfg", "job", "gone.step=1")
    cs = ConfigStore.instance()
    assert "gone" not in cs.repo and "gone.yaml" not in cs.repo["algo"]
    assert "gone" not in cs.load("algo_blocks.yaml").node and "es" in cs.load("algo_blocks.yaml").node
    prepare_argv(["--cfg", "job", "es.batch_size=4"])  # what stays registered stays


def test_model_directories_are_checked_without_loading(tmp_path, capsys):
    """models.check_dir reads config.json and the safetensors headers only; each broken
    checkpoint is one line naming the problem, before a run is dispatched."""
    import json

    from helpers import model_copy

    from esopt import models
    from esopt.core.errors import ConfigError

    good = model_copy(tmp_path / "good")
    models.check_dir(good)  # a real checkpoint passes
    cases = {}
    cases["has no config.json"] = tmp_path / "empty"
    (tmp_path / "empty").mkdir()
    d = model_copy(tmp_path / "badcfg")
    (d / "config.json").write_bytes(b"\x89PNG not json")
    cases["config.json is unreadable"] = d
    d = model_copy(tmp_path / "notype")
    (d / "config.json").write_text(json.dumps({"hidden_size": 8}))
    cases["config.json has no model_type"] = d
    d = model_copy(tmp_path / "notok")
    for f in d.glob("tokenizer*"):
        f.unlink()
    cases["has no tokenizer"] = d
    d = model_copy(tmp_path / "trunc")
    w = d / "model.safetensors"
    w.write_bytes(w.read_bytes()[: w.stat().st_size // 2])
    cases["are truncated or padded"] = d
    d = model_copy(tmp_path / "garbage")
    (d / "model.safetensors").write_bytes(b"\xff" * 64)
    cases["not a readable safetensors file"] = d
    d = model_copy(tmp_path / "noweights")
    (d / "model.safetensors").unlink()
    cases["has no weights"] = d
    d = model_copy(tmp_path / "shards")
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "model-00002.safetensors"}}))
    cases["weight shard(s) missing: model-00002.safetensors"] = d
    for needle, path in cases.items():
        with pytest.raises(ConfigError, match=re.escape(needle)):
            models.check_dir(path)
    # the evaluate / sweep command line: model=<dir> is checked before Hydra runs
    err = rejected(capsys, f"model={tmp_path / 'trunc'}")
    assert "are truncated or padded" in err
