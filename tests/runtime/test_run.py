"""The run entry point end to end: run directories, summaries, bad input, failures."""

import json

from helpers import cli, model_copy, run_cli

SMALL = ["model=tiny-xs", "algo=none", "eval.problems=8", "eval.samples=4"]


def summaries(root, sweep="default"):
    return {p.parent.name: json.loads(p.read_text()) for p in (root / sweep / "runs").glob("*/summary.json")}


def test_base_run_writes_run_directory(results_root):
    proc = cli("esopt.sweep", *SMALL, f"sweep.root={results_root}")
    assert proc.returncode == 0, proc.stderr
    (rid, s), = summaries(results_root).items()
    assert s["status"] == "completed" and s["error"] is None and s["run_id"] == rid
    assert s["algo"] == "none" and s["model"]["name"] == "tiny-xs" and s["model"]["params"] > 10_000
    for key in ("pop", "sigma", "lr", "seed", "iterations", "tokens_generated", "wall_s"):
        assert key in s
    assert s["final"] == s["base"]
    assert set(s["base"]["pass@k"]) == {"1", "2", "4"}
    assert s["base"]["n_problems"] == 8 and s["base"]["samples"] == 4
    assert len(s["base"]["correct_counts"]) == 8
    assert s["base"]["pass@k"]["1"] == sum(s["base"]["correct_counts"]) / 32
    run = results_root / "default" / "runs" / rid
    assert (run / "config.yaml").exists()
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert lines[0]["kind"] == "eval" and lines[0]["iteration"] == 0
    assert lines[0]["pass@1"] == s["base"]["pass@k"]["1"]
    assert "correct_counts" not in lines[0]
    assert rid in proc.stdout

    again = cli("esopt.sweep", *SMALL, f"sweep.root={results_root}")
    assert again.returncode == 0 and "already completed" in again.stderr
    assert summaries(results_root)[rid]["wall_s"] == s["wall_s"]  # not redone


def test_bad_input_is_one_line_and_nonzero(results_root, tmp_path):
    cases = [
        (["model=qwen9b"], "unknown model 'qwen9b'"),
        (["task=nope"], "unknown task 'nope'"),
        (["algo=ppo"], "unknown algo 'ppo'"),
        (["eval.samples=0"], "eval.samples must be >= 1"),
        ([f"task.source={tmp_path}/missing.jsonl"], "data file not found"),
    ]
    bad_rows = tmp_path / "bad.jsonl"
    bad_rows.write_text('{"nums": [1, 2, 3], "target": 6}\n{"nums": "x", "target": null}\n')
    cases.append(([f"task.source={bad_rows}"], "countdown"))
    for i, (args, message) in enumerate(cases):
        # the first in a new interpreter: the real exit code and all a fresh process prints
        run = run_cli if i == 0 else cli
        proc = run("esopt.sweep", *SMALL, *args, f"sweep.root={results_root}")
        assert proc.returncode == 2, (args, proc.stderr)
        err = proc.stderr.strip()
        assert err.startswith("esopt: error: ") and message in err, (args, err)
        assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert not (results_root / "default" / "runs").exists()  # nothing was started


def test_bad_inputs_found_before_dispatch(results_root, tmp_path):
    """What used to be dispatched and fail inside the run is one line and exit 2 before it:
    an empty model directory, a data file whose rows are all duplicates, an unknown key."""
    empty = tmp_path / "empty-model"
    empty.mkdir()
    dup = tmp_path / "dup.jsonl"
    dup.write_text('{"nums": [1, 2, 3], "target": 6}\n' * 20)
    for args, message in [
        ([f"model.path={empty}"], "has no config.json"),
        ([f"task.source={dup}", "task.n_train=2", "task.n_heldout=0"], "the test split is empty"),
        (["+popsize=8"], "unknown key 'popsize' (did you mean 'pop'?)"),
        (["sweep.name=.."], "sweep.name must be a plain directory name"),  # would write beside results/
    ]:
        proc = cli("esopt.sweep", *SMALL, *args, f"sweep.root={results_root}")
        err = proc.stderr.strip()
        assert proc.returncode == 2 and err.startswith("esopt: error: ") and message in err, (args, err)
        assert len(err.splitlines()) == 1, err
    assert not results_root.exists()  # not even Hydra's .hydra/ was created
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dup.jsonl", "empty-model"]


def test_failing_run_is_recorded_failed_and_retried_once_its_input_is_fixed(results_root, tmp_path):
    model = model_copy(tmp_path / "ckpt", mismatched=True)  # passes every check, fails to load
    args = [*SMALL, f"model.path={model}", f"sweep.root={results_root}"]
    proc = cli("esopt.sweep", *args)
    assert proc.returncode == 1, proc.stderr[-2000:]
    (rid, s), = summaries(results_root).items()
    assert s["status"] == "failed" and "ignore_mismatched_sizes" in s["error"] and s["error_type"] == "RuntimeError"
    assert (results_root / "default" / "runs" / rid / "error.txt").exists()
    fp = s["inputs"]["model.path"]
    assert fp["kind"] == "dir" and fp["path"] == str(model) and fp["size"] > 0 and len(fp["sha256"]) == 64

    again = cli("esopt.sweep", *args)  # unchanged input: the failure is kept
    assert again.returncode == 1 and "already failed" in again.stderr
    model_copy(model)  # fixed in place: same path, other contents -> a new run, no flag needed
    fixed = cli("esopt.sweep", *args)
    assert fixed.returncode == 0, fixed.stderr[-2000:]
    after = summaries(results_root)
    assert after[rid] == s  # the failed record is kept as it was
    (new_id, done), = ((k, v) for k, v in after.items() if k != rid)
    assert done["status"] == "completed" and done["inputs"]["model.path"]["sha256"] != fp["sha256"]


def test_run_on_a_full_disk_is_recorded_failed_and_leaves_no_temporaries(tmp_path):
    """The disk fills while ES writes its first checkpoint: the half-written checkpoint.tmp is
    removed, the run is recorded failed with the error (not left 'running'), no temporary file
    stays; with room again, a retry completes it."""
    from helpers import fill_disk, small_disk

    with small_disk(tmp_path / "disk", "4m") as disk:
        args = [*SMALL, "algo=es", "pop=4", "iterations=2", "es.batch_size=4", "es.checkpoint_every=1",
                "eval.every=2", "task.n_train=32", "task.n_test=8", "task.n_heldout=8", f"sweep.root={disk}"]
        filler = fill_disk(disk, leave=96 << 10)  # room for the run's records, not a checkpoint
        proc = cli("esopt.sweep", *args)
        assert proc.returncode == 1, proc.stderr[-2000:]
        (rid, s), = summaries(disk).items()
        assert s["status"] == "failed" and ("No space left" in s["error"] or "28" in s["error"]), s["error"]
        run = disk / "default" / "runs" / rid
        left = sorted(p.name for p in run.iterdir())
        assert not [n for n in left if n.endswith(".tmp") or n.startswith(".")], left
        assert "checkpoint" not in left and not (run / "owner.lock").exists()

        filler.unlink()
        again = cli("esopt.sweep", *args, "sweep.retry_failed=true")
        assert again.returncode == 0, again.stderr[-2000:]
        s2 = summaries(disk)[rid]
        assert s2["status"] == "completed" and s2["attempts"] == 2


def test_out_of_domain_set_is_evaluated_at_every_evaluation(results_root):
    """eval.ood_task: base, every eval line and the final evaluation carry the OOD task's
    entropy and Pass@K; the aggregated runs table has them as base_/final_ood_* columns."""
    from esopt.study import tables

    args = ["model=tiny-xs", "algo=es", "pop=2", "iterations=2", "es.batch_size=4", "eval.every=1",
            "eval.problems=4", "eval.samples=2", "eval.ood_task=addition", "eval.ood_split=heldout",
            "eval.ood_problems=3", f"sweep.root={results_root}", "sweep.aggregate=false"]
    proc = cli("esopt.sweep", *args)
    assert proc.returncode == 0, proc.stderr
    (rid, s), = summaries(results_root).items()
    for ev in (s["base"], s["final"]):
        assert ev["ood_task"] == "addition" and ev["ood_split"] == "heldout" and ev["ood_n_problems"] == 3
        assert ev["ood_entropy"] > 0 and set(ev["ood_pass@k"]) == {"1", "2"}
        assert ev["ood_entropy"] != ev["entropy"]
    lines = [json.loads(x) for x in (results_root / "default" / "runs" / rid / "metrics.jsonl").read_text().splitlines()]
    evals = [x for x in lines if x["kind"] == "eval"]
    assert [x["iteration"] for x in evals] == [0, 1, 2]
    assert all(x["ood_entropy"] > 0 for x in evals)
    agg = tables.load(results_root / "default")
    row = agg.runs.set_index("run_id").loc[rid]
    assert row["final_ood_entropy"] == s["final"]["ood_entropy"]
    assert row["base_ood_pass@1"] == s["base"]["ood_pass@k"]["1"]
    assert row["final_ood_entropy_lo"] <= row["final_ood_entropy"] <= row["final_ood_entropy_hi"]
