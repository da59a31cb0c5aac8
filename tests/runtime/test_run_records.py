"""What a run leaves on disk besides its numbers (issue 44): each evaluation's completions in
``<run>/samples/``, its last checkpoint only while it runs and none once it has completed, or
every checkpoint with ``sweep.keep_checkpoints`` (issue 51)."""

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
    assert not list(rd.path.glob("checkpoint*"))   # the one of iteration 1 went when iteration 2's came

    # kept when asked, and no samples with save_samples=0: the same run (its id unchanged)
    kept = run_config(*ES, "eval.save_samples=0", "sweep.keep_checkpoints=true", f"sweep.root={tmp_path / 'b'}")
    assert run_id(kept) == run_id(rc)
    s2 = run(kept)
    rd2 = store.RunDir.for_run(kept.sweep.root, kept.sweep.name, s2["run_id"])
    assert s2["final"]["pass@k"] == s["final"]["pass@k"]
    assert (rd2.checkpoint_dir / "model.safetensors").is_file() and not (rd2.path / "samples").exists()
    # every checkpoint kept (es.checkpoint_every=1): iteration 1's and 2's, the last one's files shared
    assert sorted(p.name for p in rd2.path.glob("checkpoint*")) == ["checkpoint", "checkpoint-1", "checkpoint-2"]
    one, two = (json.loads((rd2.path / f"checkpoint-{i}" / "state.json").read_text()) for i in (1, 2))
    assert (one["iteration"], two["iteration"]) == (1, 2)
    assert store.verify_manifest(rd2.path / "checkpoint-1") is None
    assert (rd2.path / "checkpoint-1" / "model.safetensors").read_bytes() != (rd2.checkpoint_dir / "model.safetensors").read_bytes()
    assert (rd2.path / "checkpoint-2" / "model.safetensors").samefile(rd2.checkpoint_dir / "model.safetensors")


@pytest.mark.parametrize("value", ["-1", "some", "true"])
def test_save_samples_is_all_or_a_count(value):
    with pytest.raises(ConfigError, match="eval.save_samples must be all or a number of problems >= 0"):
        run_config("model=tiny-xs", f"eval.save_samples={value}", check_data=False)
    assert run_config("model=tiny-xs", "eval.save_samples=all", check_data=False).eval.save_samples == "all"


def test_a_later_attempt_leaves_no_stale_error_and_lines_say_what_was_measured(tmp_path, capsys):
    """Issue 55's full-disk leftovers: a failed attempt's error.txt stayed beside the summary of
    a later completed attempt; a failed run's line read "pass@1 0.133 -> -"; the free-space
    warning said "needs about 0.0 GB ... 0.0 GB free" for a small model on a nearly full disk."""
    from esopt.runtime import budget
    from esopt.runtime.run import print_summary

    rc = run_config("model=tiny-xs", "algo=none", "eval.problems=3", "eval.samples=2", "task.n_test=8",
                    "sweep.retry_failed=true", f"sweep.root={tmp_path}")
    rd = store.RunDir.for_run(rc.sweep.root, rc.sweep.name, rc.run_id)
    rd.create(rc.to_dict())  # as a failed attempt leaves its folder
    rd.write_summary({"status": "failed", "run_id": rc.run_id, "error": "OSError: [Errno 28] No space left on device",
                      "error_type": "OSError", "base": None, "final": None})
    (rd.path / "error.txt").write_text("Traceback ...\nOSError: [Errno 28] No space left on device\n")
    s = run(rc)
    assert s["status"] == "completed" and not (rd.path / "error.txt").exists()
    capsys.readouterr()
    for summary, says in (({**s, "status": "failed", "final": None}, "base pass@1 "),
                          ({**s, "status": "failed", "base": None, "final": None}, "no evaluation recorded")):
        print_summary(summary, rd.path)
        line = capsys.readouterr().out.splitlines()[0]
        assert says in line and "-> -" not in line, line
    assert [budget.size_text(n) for n in (121_000, 3.62e6, 1.2e9, 7, 0.0)] == ["121 kB", "3.62 MB", "1.2 GB", "7 B", "0 B"]
    need = {"peak": 362_000.0}
    free, _ = budget.free_bytes(tmp_path)
    line = budget.disk_warning({**need, "peak": free + 5e5}, tmp_path)
    assert line.startswith(f"this sweep needs about {budget.size_text(free + 5e5)} on disk") and " 0.0 GB" not in line
