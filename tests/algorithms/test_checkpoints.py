"""Unusable checkpoints (issue 29, items 4-5): a flipped byte in the weights, an empty or
garbled trainer_state.json, a truncated rng_state.pth, a torn newer checkpoint. Each is caught
by the sha256 manifest recorded at save, named in one warning line, and the run goes on from
the previous good checkpoint or from the start: its final weights equal an uninterrupted run's.
"""

import json
import shutil

import pytest
import torch
from helpers import Preempted, grpo_context, kill_while_recording
from test_es import lines as es_lines
from test_es import make_ctx
from test_es import run_config as es_config
from test_grpo import config, lines

from esopt import noise
from esopt.algorithms import es, grpo
from esopt.core import store
from esopt.runtime.run import load_components

torch.set_num_threads(1)


def flip_last_byte(path):
    """XOR the last byte of a safetensors file: the top byte (sign, exponent) of a float32."""
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x40
    path.write_bytes(bytes(data))


def truncate(path, keep=0.5):
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


# ----------------------------------------------------------------------------------------- ES
ES_FAULTS = {
    "flipped weight byte": lambda d: flip_last_byte(d / "model.safetensors"),
    "truncated weights": lambda d: truncate(d / "model.safetensors"),
    "garbled state.json": lambda d: (d / "state.json").write_text('{"algo": "es", "iteration": 9'),
    "no manifest": lambda d: (d / "esopt_manifest.json").unlink(missing_ok=True),
}


@pytest.fixture(scope="module")
def es_runs(tmp_path_factory):
    """An uninterrupted ES run and one killed in iteration 3 (checkpoint at 2)."""
    root = tmp_path_factory.mktemp("es")
    cfg = es_config(iterations=4)
    full = make_ctx(root / "full", cfg)
    es.train(full)
    killed = make_ctx(root / "killed", cfg)
    kill_while_recording(killed, es.train, 3)
    return cfg, full, root / "killed"


def test_es_checkpoint_records_every_file_in_its_manifest(es_runs):
    ckpt = es_runs[2] / "run" / "checkpoint"
    assert store.verify_manifest(ckpt) is None
    recorded = json.loads((ckpt / store.MANIFEST).read_text())["files"]
    assert {"model.safetensors", "state.json", "config.json"} <= set(recorded)
    assert "strategy.pt" not in recorded  # ES keeps no state beyond the weights


@pytest.mark.parametrize("fault", list(ES_FAULTS))
def test_es_bad_checkpoint_restarts_to_the_uninterrupted_weights(es_runs, tmp_path, capsys, fault):
    cfg, full, killed = es_runs
    shutil.copytree(killed, tmp_path / "b")
    ckpt = tmp_path / "b" / "run" / "checkpoint"
    ES_FAULTS[fault](ckpt)
    resumed = make_ctx(tmp_path / "b", cfg)
    es.train(resumed)
    warnings = [x for x in capsys.readouterr().err.splitlines() if x.startswith("esopt: warning:")]
    assert len(warnings) == 1 and str(ckpt) in warnings[0] and warnings[0].endswith("restarting the run")
    assert [x["iteration"] for x in es_lines(resumed)] == [1, 2, 3, 4]
    a, b = dict(full.model.named_parameters()), dict(resumed.model.named_parameters())
    assert noise.checksum(a.items()) == noise.checksum(b.items())
    assert resumed.tokens_total == full.tokens_total


def test_es_falls_back_to_the_previous_checkpoint_left_by_a_swap(es_runs, tmp_path, capsys):
    """Killed mid-swap with the new checkpoint bad: the sound ``checkpoint.old`` is used."""
    cfg, full, killed = es_runs
    shutil.copytree(killed, tmp_path / "b")
    ckpt = tmp_path / "b" / "run" / "checkpoint"
    shutil.copytree(ckpt, ckpt.with_name("checkpoint.old"))
    flip_last_byte(ckpt / "model.safetensors")
    resumed = make_ctx(tmp_path / "b", cfg)
    es.train(resumed)
    err = capsys.readouterr().err
    assert f"esopt: warning: {ckpt / 'model.safetensors'}: checksum mismatch; resuming from checkpoint.old" in err
    a, b = dict(full.model.named_parameters()), dict(resumed.model.named_parameters())
    assert noise.checksum(a.items()) == noise.checksum(b.items())


# --------------------------------------------------------------------------------------- GRPO
def _empty(p):
    p.write_text("")


GRPO_FAULTS = {  # fault -> (what it does to a checkpoint, whether a torn newer copy is made)
    "empty trainer_state.json, torn checkpoint-4": (lambda d: _empty(d / "trainer_state.json"), True),
    "garbled trainer_state.json in checkpoint-4": (
        lambda d: (d / "trainer_state.json").write_text('{"global_step": 4, "log_hi'), True),
    "flipped weight byte": (lambda d: flip_last_byte(d / "model.safetensors"), False),
    "truncated rng_state.pth": (lambda d: truncate(d / "rng_state.pth"), False),
    "empty trainer_state.json": (lambda d: _empty(d / "trainer_state.json"), False),
}


@pytest.fixture(scope="module")
def grpo_runs(tmp_path_factory):
    """An uninterrupted GRPO run and one killed after step 3 (checkpoint-2, manifested)."""
    root = tmp_path_factory.mktemp("grpo")
    rc = config(root / "results", "iterations=4", "grpo.save_every=2", "eval.every=4")
    straight = grpo_context(rc, root / "straight")
    grpo.train(straight)
    first = grpo_context(rc, root / "killed", stop_at=3)
    with pytest.raises(Preempted):
        grpo.train(first)
    return rc, straight, root / "killed"


def test_grpo_checkpoint_gets_a_manifest_and_older_ones_go(grpo_runs):
    rc, straight, killed = grpo_runs
    out = straight.run.checkpoint_dir / "grpo"
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-4"]
    assert store.verify_manifest(out / "checkpoint-4") is None
    recorded = json.loads((out / "checkpoint-4" / store.MANIFEST).read_text())["files"]
    assert {"trainer_state.json", "rng_state.pth", "model.safetensors", "optimizer.pt"} <= set(recorded)
    assert [p.name for p in (killed / "checkpoint" / "grpo").glob("checkpoint-*")] == ["checkpoint-2"]


@pytest.mark.parametrize("fault", list(GRPO_FAULTS))
def test_grpo_bad_checkpoint_falls_back_or_restarts(grpo_runs, tmp_path, capsys, fault):
    rc, straight, killed = grpo_runs
    shutil.copytree(killed, tmp_path / "b")
    out = tmp_path / "b" / "checkpoint" / "grpo"
    corrupt, torn_newer = GRPO_FAULTS[fault]
    if torn_newer:  # a save of step 4 that died writing trainer_state.json, manifest or not
        shutil.copytree(out / "checkpoint-2", out / "checkpoint-4")
        if "empty" in fault:
            (out / "checkpoint-4" / store.MANIFEST).unlink()
        target = out / "checkpoint-4"
    else:
        target = out / "checkpoint-2"
    corrupt(target)
    second = grpo_context(rc, tmp_path / "b")
    grpo.train(second)
    warnings = [x for x in capsys.readouterr().err.splitlines() if x.startswith("esopt: warning:")]
    assert len(warnings) == 1 and str(target) in warnings[0], warnings
    assert warnings[0].endswith("resuming from checkpoint-2" if torn_newer else "restarting the run")
    assert [t["iteration"] for t in lines(tmp_path / "b", "train")] == [1, 2, 3, 4]
    a, b = dict(straight.model.named_parameters()), dict(second.model.named_parameters())
    base, _ = load_components(rc)[:2]
    moved = max((a[k] - p).abs().max().item() for k, p in base.named_parameters())
    assert moved > 1e-4
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-3 * moved
    assert second.tokens_total == straight.tokens_total
    assert store.verify_manifest(out / "checkpoint-4") is None
