"""What a run leaves on disk besides its numbers (issue 44): each evaluation's completions in
``<run>/samples/``, and no resume checkpoint once it has completed (``sweep.keep_checkpoints``)."""

import json

import pytest

from helpers import run_config

from esopt.core import store
from esopt.core.errors import ConfigError
from esopt.runtime.run import run
from esopt.runtime.validate import run_id

ES = ["model=tiny-xs", "algo=es", "pop=4", "iterations=2", "es.batch_size=4", "es.checkpoint_every=1",
      "eval.every=1", "eval.problems=3", "eval.samples=2", "task.n_train=32", "task.n_test=8",
      "task.n_heldout=8"]


def test_a_completed_run_keeps_its_completions_and_frees_its_checkpoint(tmp_path):
    rc = run_config(*ES, "eval.save_samples=1", f"sweep.root={tmp_path / 'a'}")
    s = run(rc)
    rd = store.RunDir.for_run(rc.sweep.root, rc.sweep.name, s["run_id"])
    assert s["status"] == "completed"
    assert sorted(p.name for p in (rd.path / "samples").iterdir()) == [
        "iteration_0.json", "iteration_1.json", "iteration_2.json"]
    base = json.loads((rd.path / "samples" / "iteration_0.json").read_text())
    final = json.loads((rd.path / "samples" / "iteration_2.json").read_text())
    for saved, result in ((base, s["base"]), (final, s["final"])):
        assert len(saved["problems"]) == 1 and len(saved["problems"][0]["completions"]) == 2
        assert sum(c["correct"] for c in saved["problems"][0]["completions"]) == result["correct_counts"][0]
        assert [c["correct"] for c in saved["counts"]] == result["correct_counts"][1:]
        assert saved["truncated"] == result["truncated"] and 0 <= result["truncated"] <= 1
    assert final["iteration"] == 2 and base["problems"][0]["id"] == final["problems"][0]["id"]
    assert not (rd.path / "checkpoint").exists() and (rd.model_dir / "model.safetensors").is_file()

    # kept when asked, and no samples with save_samples=0: the same run (its id unchanged)
    kept = run_config(*ES, "eval.save_samples=0", "sweep.keep_checkpoints=true", f"sweep.root={tmp_path / 'b'}")
    assert run_id(kept) == run_id(rc)
    s2 = run(kept)
    rd2 = store.RunDir.for_run(kept.sweep.root, kept.sweep.name, s2["run_id"])
    assert s2["final"]["pass@k"] == s["final"]["pass@k"]
    assert (rd2.checkpoint_dir / "model.safetensors").is_file() and not (rd2.path / "samples").exists()


@pytest.mark.parametrize("value", ["-1", "some", "true"])
def test_save_samples_is_all_or_a_count(value):
    with pytest.raises(ConfigError, match="eval.save_samples must be all or a number of problems >= 0"):
        run_config("model=tiny-xs", f"eval.save_samples={value}", check_data=False)
    assert run_config("model=tiny-xs", "eval.save_samples=all", check_data=False).eval.save_samples == "all"
