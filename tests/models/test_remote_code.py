"""A model directory never runs its own code unless ``model.trust_remote_code=true``, and no
checkpoint esopt reads back is unpickled with code (``torch.load(weights_only=True)``)."""

import json
import os
import pickle
import random
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from esopt.cli import configs
from esopt.cli.common import prepare_argv
from esopt.models.tiny import TINY_DIR

configs.register()
ROOT = Path(__file__).resolve().parents[2]


def _custom_code_dir(tmp_path: Path) -> tuple[Path, Path]:
    """tiny-xs's files with a config.json asking for the directory's own ``evil.py``, which
    writes a marker file when imported."""
    d, marker = tmp_path / "evil-model", tmp_path / "RAN"
    shutil.copytree(TINY_DIR / "tiny-xs", d)
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(model_type="evil_lm", auto_map={"AutoConfig": "evil.EvilConfig",
                                                "AutoModelForCausalLM": "evil.EvilModel"})
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n"
                               "from transformers import PretrainedConfig\n"
                               "class EvilConfig(PretrainedConfig):\n    model_type = 'evil_lm'\n")
    return d, marker


def test_a_directory_asking_for_custom_code_is_refused_before_dispatch(tmp_path):
    d, marker = _custom_code_dir(tmp_path)
    out = subprocess.run(
        [sys.executable, "-m", "esopt.sweep", f"model={d}", "pop=2", "iterations=1", "eval.problems=2",
         "eval.samples=1", f"sweep.root={tmp_path / 'results'}", "sweep.name=rc"],
        input="y\n", capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    err = out.stderr.strip().splitlines()
    assert out.returncode == 2, out.stderr[-2000:]
    assert err == [f"esopt: error: {d}: its config asks to run custom code (auto_map); "
                   "set model.trust_remote_code=true to allow it"], out.stderr[-2000:]
    assert not marker.exists()
    assert not (tmp_path / "results" / "rc" / "runs").exists()


def test_the_knob_allows_it_and_validation_still_imports_nothing(tmp_path, capsys):
    d, marker = _custom_code_dir(tmp_path)
    prepare_argv([f"model={d}", "model.trust_remote_code=true", "eval.problems=2"])
    assert capsys.readouterr().err == "" and not marker.exists()
    with pytest.raises(SystemExit):
        prepare_argv([f"model={d}", "model.trust_remote_code=maybe"])
    assert "model.trust_remote_code must be true or false" in capsys.readouterr().err


def test_the_loader_passes_trust_remote_code(tmp_path):
    """Even called directly, the loader never runs the directory's code nor prompts."""
    from esopt import models

    d, marker = _custom_code_dir(tmp_path)
    with pytest.raises(Exception, match="trust_remote_code"):
        models.load("evil", path=str(d))
    assert not marker.exists()
    with pytest.raises(Exception):  # the knob is passed through: the directory's code runs (and fails)
        models.load("evil", path=str(d), trust_remote_code=True)
    assert marker.exists()


def test_the_knob_leaves_the_run_id_alone():
    from helpers import compose

    from esopt.runtime.validate import run_id, validate

    base = validate(compose("model=tiny-xs", "eval.problems=4"), check_data=False)
    trusted = validate(compose("model=tiny-xs", "eval.problems=4", "model.trust_remote_code=true"),
                       check_data=False)
    assert trusted.model["trust_remote_code"] is True and run_id(base) == run_id(trusted)


class _Boom:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_pretrain_resume_round_trips_and_never_unpickles_code(tmp_path):
    from esopt.models.pretrain import _resume, _save_state

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    batches = types.SimpleNamespace(rng=random.Random(5))
    batches.rng.random()
    history = [{"step": 1, "val_loss": 0.5, "train_loss": 0.7}]
    _save_state(tmp_path, model, opt, batches, history, 1, 2.5, history[0])

    model2, batches2 = torch.nn.Linear(4, 3), types.SimpleNamespace(rng=random.Random(0))
    opt2 = torch.optim.AdamW(model2.parameters(), lr=1e-2)
    got = _resume(tmp_path, model2, opt2, batches2)
    assert got["step"] == 1 and got["best_loss"] == 0.5 and batches2.rng.random() == batches.rng.random()
    assert torch.equal(model2.weight, model.weight)

    marker = tmp_path / "RAN"
    with open(tmp_path / "last.pt", "wb") as f:  # a hostile last.pt: unpickling it would run open()
        pickle.dump({"model": _Boom(str(marker))}, f, protocol=2)
    with pytest.raises(Exception):
        _resume(tmp_path, model2, opt2, batches2)
    assert not marker.exists()
