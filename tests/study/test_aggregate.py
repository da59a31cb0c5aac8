"""esopt.aggregate: reading run directories into tables, bad input, the CLI."""

import json
import shutil

import numpy as np
import pandas as pd
import pytest

from helpers import cli, fill_disk, run_cli, small_disk, write_synthetic_sweep

from esopt.cli.aggregate import main as aggregate_main
from esopt.study import run_read, tables
from esopt.study.report.aggregate import aggregate
from esopt.core.errors import ConfigError

MODELS = {"tiny-xs": 1e6, "tiny-s": 4e6, "tiny-m": 1.6e7}


def make_sweep(tmp_path, name="sweep", **kw):
    """A small synthetic sweep (the helper the benchmark uses too)."""
    kw = {"models": MODELS, "pops": (8, 16, 32), "seeds": (0, 1), "iterations": 4, "eval_every": 2,
          "problems": 20, "samples": 8, **kw}
    root = tmp_path / name
    ids = write_synthetic_sweep(root, **kw)
    return root, ids


def test_tables_have_one_row_per_run_and_every_metrics_line(tmp_path):
    root, ids = make_sweep(tmp_path, algos=("es", "grpo", "none"),
                           statuses={"es-tiny-s-p8-s0": "failed", "es-tiny-s-p16-s1": "running"})
    agg = tables.load(root)
    runs = agg.runs.set_index("run_id")
    assert sorted(runs.index) == sorted(ids)
    for col in ("status", "error", "algo", "task", "model", "params", "pop", "sigma", "lr", "seed",
                "iterations", "base_pass@1", "final_pass@1", "final_pass@8", "final_pass@1_lo",
                "final_maj@8", "final_greedy", "final_entropy", "tokens_generated", "wall_s", "n_lines"):
        assert col in runs.columns, col
    # numbers are the summaries' own
    s = json.loads((root / "runs" / "es-tiny-m-p32-s1" / "summary.json").read_text())
    r = runs.loc["es-tiny-m-p32-s1"]
    assert r["final_pass@1"] == s["final"]["pass@k"]["1"]
    assert r["base_pass@8"] == s["base"]["pass@k"]["8"]
    assert r["final_pass@4_hi"] == s["final"]["pass@k_ci"]["4"][1]
    assert r["params"] == 16_000_000 and r["model"] == "tiny-m" and r["pop"] == 32
    assert runs.loc["es-tiny-s-p16-s1", "status"] == "running"
    assert runs.loc["es-tiny-s-p8-s0", "status"] == "failed"
    assert runs.loc["es-tiny-s-p8-s0", "error"] == "RuntimeError: boom"
    assert np.isnan(runs.loc["es-tiny-s-p8-s0", "final_pass@1"])           # failed: no final
    # curves: every line, in order, flattened
    c = agg.curves
    for rid in ("es-tiny-m-p32-s1", "grpo-tiny-xs-p8-s0"):
        lines = [json.loads(x) for x in (root / "runs" / rid / "metrics.jsonl").read_text().splitlines()]
        mine = c[c["run_id"] == rid]
        assert len(mine) == len(lines) == runs.loc[rid, "n_lines"]
        assert mine["line"].tolist() == list(range(len(lines)))
        assert mine["kind"].tolist() == [x["kind"] for x in lines]
        ev = [x for x in lines if x["kind"] == "eval"]
        assert mine.loc[mine["kind"] == "eval", "pass@2"].tolist() == [x["pass@k"]["2"] for x in ev]
        assert mine.loc[mine["kind"] == "eval", "pass@2_lo"].tolist() == [x["pass@k_ci"]["2"][0] for x in ev]
    assert "rewards" not in c.columns                                      # per-member lists dropped
    assert c.loc[c["run_id"] == "grpo-tiny-xs-p8-s0", "kl"].notna().any()


def test_parquet_and_csv_round_trip(tmp_path):
    root, _ = make_sweep(tmp_path, algos=("es", "grpo"))
    agg = tables.load(root)
    paths = tables.write_tables(agg, tmp_path / "out")
    pd.testing.assert_frame_equal(pd.read_parquet(paths["runs.parquet"]), agg.runs)
    pd.testing.assert_frame_equal(pd.read_parquet(paths["curves.parquet"]), agg.curves)
    csv = pd.read_csv(paths["runs.csv"])
    assert list(csv.columns) == list(agg.runs.columns)
    np.testing.assert_allclose(csv["final_pass@1"], agg.runs["final_pass@1"])


def test_the_per_file_reader_gives_the_rows_arrow_gives(tmp_path):
    root, _ = make_sweep(tmp_path, algos=("es", "grpo", "none", "es_grpo"),
                         statuses={"es-tiny-s-p8-s0": "pruned", "es_grpo-tiny-s-p8-s0": "failed"})
    fast, slow = tables.load(root), tables.load(root, per_file=True)
    assert not fast.skipped and not slow.skipped
    assert fast.timings["read_per_file"] == {"summaries": 0, "curves": 0}      # Arrow read every file
    assert slow.timings["read_per_file"] == {"summaries": len(fast.runs), "curves": len(fast.runs)}
    seq = fast.runs.set_index("run_id")
    s = json.loads((root / "runs" / "es_grpo-tiny-m-p16-s1" / "summary.json").read_text())
    assert seq.loc["es_grpo-tiny-m-p16-s1", "phase1_algo"] == "es"
    assert seq.loc["es_grpo-tiny-m-p16-s1", "phase2_pass@1"] == s["phases"][1]["eval"]["pass@k"]["1"]
    assert seq["phase2_pass@1"].isna().sum() == len(seq) - 17      # 18 es_grpo runs, 1 failed
    assert set(fast.runs.columns) == set(slow.runs.columns)
    cols = sorted(fast.runs.columns)
    pd.testing.assert_frame_equal(fast.runs[cols], slow.runs[cols], check_dtype=False)
    cols = sorted(fast.curves.columns)
    assert set(fast.curves.columns) == set(slow.curves.columns)
    pd.testing.assert_frame_equal(fast.curves[cols], slow.curves[cols], check_dtype=False)


def test_only_the_files_arrow_cannot_read_are_read_per_file(tmp_path):
    """Arrow reads a chunk of runs at once; a summary naming another run (a copied folder), a
    key whose type changes between runs and a bad metrics line mid-file: the group is halved
    until the file Arrow trips on stands alone, and only that file is read per file, in one
    chunk or in many. The tables are those the per-file reader gives for every file."""
    root, ids = make_sweep(tmp_path, algos=("es", "grpo"))
    runs = root / "runs"

    def edit(rid, **kv):
        s = json.loads((runs / rid / "summary.json").read_text())
        (runs / rid / "summary.json").write_text(json.dumps({**s, **kv}))

    edit(ids[3], run_id="elsewhere")
    edit(ids[5], attempts="two")
    for rid in ids[6:9]:
        edit(rid, attempts=2)
    lines = (runs / ids[7] / "metrics.jsonl").read_text().splitlines()
    (runs / ids[7] / "metrics.jsonl").write_text("\n".join(lines[:2] + ['{"kind": "train", "bro'] + lines[2:]) + "\n")
    ref = tables.load(root, per_file=True)
    for chunk in (tables.run_read.RUNS_PER_CHUNK, 7):
        agg = tables.load(root, chunk=chunk)
        assert agg.timings["read_per_file"] == {"summaries": 1, "curves": 1}
        assert [s["run_id"] for s in agg.skipped] == [ids[3]] and "names run 'elsewhere'" in agg.skipped[0]["reason"]
        assert agg.runs.set_index("run_id").loc[ids[5:9], "attempts"].tolist() == ["two", "2", "2", "2"]
        assert f"run {ids[7]}: 1 unparseable metrics line(s) skipped (torn write?)" in agg.notes
        assert len(agg.curves[agg.curves["run_id"] == ids[7]]) == len(lines)
        assert agg.notes == ref.notes and agg.skipped == ref.skipped
        pd.testing.assert_frame_equal(agg.runs[sorted(agg.runs.columns)], ref.runs[sorted(ref.runs.columns)])
        pd.testing.assert_frame_equal(agg.curves[sorted(agg.curves.columns)], ref.curves[sorted(ref.curves.columns)])


def test_corrupt_runs_are_skipped_and_listed(tmp_path):
    root, ids = make_sweep(tmp_path)
    runs = root / "runs"
    good = json.loads((runs / ids[0] / "summary.json").read_text())
    bad = {
        "trunc": (runs / ids[0] / "summary.json").read_text()[:200],            # torn write
        "notjson": "this is not json",
        "array": "[1, 2, 3]",
        "nostatus": json.dumps({k: v for k, v in good.items() if k != "status"}),
        "nomodelname": json.dumps({**good, "model": {"params": 5}}),
    }
    for name, text in bad.items():
        (runs / name).mkdir()
        (runs / name / "summary.json").write_text(text)
    (runs / "nosummary").mkdir()
    (runs / "nosummary" / "metrics.jsonl").write_text('{"kind": "train"}\n')
    # a torn last metrics line (killed mid-write) is dropped, the run kept
    with open(runs / ids[1] / "metrics.jsonl", "a") as f:
        f.write('{"kind": "train", "iteration": 9, "rew')
    for per_file in (False, True):
        agg = tables.load(root, per_file=per_file)
        if not per_file:    # only the bad summaries are read per file; Arrow drops the torn line itself
            assert agg.timings["read_per_file"] == {"summaries": len(bad) + 1, "curves": 0}
        reasons = {s["run_id"]: s["reason"] for s in agg.skipped}
        assert set(reasons) == set(bad) | {"nosummary"}
        assert reasons["trunc"].startswith("corrupt summary.json")
        assert reasons["array"] == "corrupt summary.json: a JSON list, not an object"
        assert reasons["nostatus"] == "summary.json lacks status"
        assert reasons["nomodelname"] == "summary.json lacks model.name"
        assert reasons["nosummary"].startswith("no summary.json")
        assert sorted(agg.runs["run_id"]) == sorted(ids)
        assert any(ids[1] in n and "unparseable metrics line" in n for n in agg.notes)
    r = cli("esopt.aggregate", str(root), "--bootstrap", "50", "--no-html")
    assert r.returncode == 0, r.stderr
    assert "5 skipped" not in r.stdout and "6 skipped" in r.stdout
    assert "skipped trunc: corrupt summary.json" in r.stdout
    manifest = json.loads((root / "aggregate.json").read_text())
    assert {s["run_id"] for s in manifest["skipped"]} == set(bad) | {"nosummary"}


def test_different_metric_sets_union_with_nan_and_a_note(tmp_path):
    root, ids = make_sweep(tmp_path)
    p = root / "runs" / ids[0] / "summary.json"
    s = json.loads(p.read_text())
    s["final"]["pass@k"]["64"] = 0.99
    p.write_text(json.dumps(s))
    agg = tables.load(root)
    col = agg.runs.set_index("run_id")["final_pass@64"]
    assert col[ids[0]] == 0.99 and col.drop(ids[0]).isna().all()
    assert any("different metric sets" in n and "pass@64" in n for n in agg.notes)


def test_analysis_files_become_columns(tmp_path):
    root, ids = make_sweep(tmp_path)
    (root / "runs" / ids[0] / "sparsity.json").write_text(json.dumps({"zeroed_frac": 0.78, "by": {"norm": 0.5}}))
    (root / "runs" / ids[1] / "drift.json").write_text("{broken")
    for per_file in (False, True):
        agg = tables.load(root, per_file=per_file)
        assert agg.timings["read_per_file"] == ({"summaries": len(ids), "curves": len(ids)} if per_file
                                                else {"summaries": 0, "curves": 0})
        runs = agg.runs.set_index("run_id")
        assert runs.loc[ids[0], "sparsity_zeroed_frac"] == 0.78
        assert runs.loc[ids[0], "sparsity_by.norm"] == 0.5
        assert runs["sparsity_zeroed_frac"].drop(ids[0]).isna().all()
        assert any("drift.json unreadable" in n for n in agg.notes)


def test_metric_names_map_to_final_columns(tmp_path):
    root, _ = make_sweep(tmp_path)
    cols = tables.load(root).runs.columns
    assert tables.metric_column("pass@1", cols) == "final_pass@1"
    assert tables.metric_column("maj@8", cols) == "final_maj@8"
    assert tables.metric_column("greedy", cols) == "final_greedy"
    assert tables.metric_column("base_pass@1", cols) == "base_pass@1"
    with pytest.raises(ConfigError, match="metric 'pass@64' not found in the runs; available: .*pass@4, pass@8"):
        tables.metric_column("pass@64", cols)


def test_empty_or_missing_sweep_is_a_clear_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="no runs in"):
        tables.load(tmp_path / "empty")
    (tmp_path / "empty" / "runs").mkdir()
    with pytest.raises(ConfigError, match="it is empty"):
        tables.load(tmp_path / "empty")


def test_cli_exit_codes_and_outputs(tmp_path):
    (tmp_path / "empty").mkdir()
    r = run_cli("esopt.aggregate", str(tmp_path / "empty"))
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and r.stderr.startswith("esopt: error: no runs in")
    r = cli("esopt.aggregate", str(tmp_path / "nope"))
    assert r.returncode == 2 and "no such directory" in r.stderr
    # only corrupt runs: nothing readable
    (tmp_path / "allbad" / "runs" / "x").mkdir(parents=True)
    (tmp_path / "allbad" / "runs" / "x" / "summary.json").write_text("{")
    r = cli("esopt.aggregate", str(tmp_path / "allbad"))
    assert r.returncode == 2 and "no readable runs" in r.stderr and "x: corrupt summary.json" in r.stderr

    root, _ = make_sweep(tmp_path)
    r = cli("esopt.aggregate", str(root), "--metric", "pass@99")
    assert r.returncode == 2 and "metric 'pass@99' not found" in r.stderr
    r = cli("esopt.aggregate", str(root), "--bootstrap", "-1")
    assert r.returncode == 2 and "--bootstrap must be >= 0" in r.stderr
    r = cli("esopt.aggregate", str(root), "--metric", "pass@2", "--bootstrap", "100",
                "--tolerance", "0.02", "--seed", "3", "--out", str(tmp_path / "o"))
    assert r.returncode == 0, r.stderr
    assert "18 runs (18 completed)" in r.stdout and "trend (final_pass@2, 3 sizes)" in r.stdout
    for f in ("runs.parquet", "runs.csv", "curves.parquet", "trend.json", "aggregate.json", "report.html"):
        assert (tmp_path / "o" / f).is_file(), f
    assert not (root / "trend.json").exists()                            # --out respected
    tr = json.loads((tmp_path / "o" / "trend.json").read_text())
    assert tr["metric"] == "final_pass@2" and tr["bootstrap"] == 100 and tr["tolerance"] == 0.02
    assert tr["seed"] == 3 and tr["n_model_sizes"] == 3 and tr["n_seeds"] == 2
    for key in ("slope", "intercept", "slope_ci", "intercept_ci", "reading", "reading_reason", "method",
                "models", "variants", "band"):
        assert key in tr
    assert set(tr["models"][0]["pop_star"]) == {"continuous", "discrete", "efficient"}


def test_sweep_in_progress_minimal_and_odd_summaries(tmp_path, capsys):
    runs = tmp_path / "s" / "runs"
    for name, summary in {
        "a": {"status": "completed", "algo": "es", "model": {"name": "x"}},             # minimal
        "b": {"status": "running", "algo": "grpo", "model": {"name": "y", "params": 5},
              "base": None, "final": None},
        "c": {"status": "failed", "algo": "es", "model": "z", "error": "OOM"},          # model as str
    }.items():
        (runs / name).mkdir(parents=True)
        (runs / name / "summary.json").write_text(json.dumps(summary))
    (runs / "a" / "metrics.jsonl").write_text('{"kind": "train", "iteration": 1, "reward_mean": 0.5}\n')
    assert aggregate_main([str(tmp_path / "s"), "--bootstrap", "10"]) == 0
    out = capsys.readouterr().out
    assert "3 runs (1 completed, 1 running, 1 failed)" in out
    assert "no run has a final evaluation yet" in out and "trend: too few sizes" in out
    runs_csv = pd.read_csv(tmp_path / "s" / "runs.csv").set_index("run_id")
    assert runs_csv.loc["c", "model"] == "z" and runs_csv.loc["c", "error"] == "OOM"
    assert runs_csv.loc["b", "status"] == "running" and runs_csv.loc["b", "params"] == 5
    assert {"pop", "sigma", "lr", "seed"} <= set(runs_csv.columns)
    assert "running" in (tmp_path / "s" / "report.html").read_text()


def _outputs(d):
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.is_file() and p.name != "filler.bin"}


def test_full_disk_never_leaves_a_truncated_output(tmp_path):
    """Aggregate on a real small filesystem (tmpfs), then again once it is full: the outputs
    are the previous set, intact (even when the small files would fit but the page does not);
    no temporary is left behind; the command says so in one line."""
    with small_disk(tmp_path / "disk", "16m") as disk:
        root = disk / "sweep"
        write_synthetic_sweep(root, models={"a": 1e6, "b": 4e6}, pops=(8, 16), seeds=(0,), iterations=2,
                              eval_every=2, problems=10, samples=4)
        aggregate(root, bootstrap=20)
        before = _outputs(root)
        assert {"report.html", "runs.parquet", "runs.csv", "curves.parquet", "trend.json",
                "aggregate.json"} <= set(before)
        write_synthetic_sweep(root, models={"c": 1.6e7}, pops=(8, 16), seeds=(0,), iterations=2,
                              eval_every=2, problems=10, samples=4)  # a third model: new outputs

        filler = fill_disk(disk, leave=0)                            # nothing can be written
        with pytest.raises(OSError) as err:
            aggregate(root, bootstrap=20)
        assert err.value.errno == 28                                 # ENOSPC, for real
        assert _outputs(root) == before                              # every previous file intact
        r = cli("esopt.aggregate", str(root))
        assert r.returncode == 1 and r.stderr.strip().startswith("esopt: error: cannot write")
        assert len(r.stderr.strip().splitlines()) == 1 and "No space left" in r.stderr
        assert _outputs(root) == before

        filler.unlink()                                              # room for the small files only
        fill_disk(disk, leave=len(before["report.html"]) // 2)
        with pytest.raises(OSError):
            aggregate(root, bootstrap=20)
        assert _outputs(root) == before          # one set: no new tables beside the old page
        assert not list(root.glob(".aggregate-*"))                   # no temporaries


def test_a_failed_last_write_leaves_the_previous_set(tmp_path, monkeypatch):
    """Every output written but the last one (aggregate.json, written last) fails: nothing of
    the new set replaces the old one (the page, the tables and trend.json agree)."""
    import errno

    from esopt.study.report import aggregate as aggregate_mod

    root, _ = make_sweep(tmp_path)
    aggregate(root, bootstrap=20)
    before = _outputs(root)
    write_synthetic_sweep(root, models={"tiny-l": 6.4e7}, pops=(8,), seeds=(0,), iterations=4,
                          eval_every=2, problems=20, samples=8)
    write_json = aggregate_mod.atomic_write_json

    def full_disk_at_the_end(path, obj):
        if path.name == "aggregate.json":
            raise OSError(errno.ENOSPC, "No space left on device")
        write_json(path, obj)

    monkeypatch.setattr(aggregate_mod, "atomic_write_json", full_disk_at_the_end)
    with pytest.raises(OSError):
        aggregate(root, bootstrap=20)
    assert _outputs(root) == before
    assert not list(root.glob(".aggregate-*"))
    monkeypatch.undo()
    aggregate(root, bootstrap=20)                      # room again: the whole new set
    after = _outputs(root)
    assert all(after[n] != before[n] for n in ("runs.parquet", "runs.csv", "trend.json", "report.html"))
    assert len(pd.read_csv(root / "runs.csv")) == len(pd.read_csv(tmp_path / "sweep" / "runs.csv"))


@pytest.mark.parametrize("per_file", [False, True])
def test_a_non_numeric_field_makes_that_run_unreadable(tmp_path, per_file, capsys):
    root, ids = make_sweep(tmp_path)
    runs = root / "runs"
    planted = {}
    for rid, (key, value) in zip(ids, [("params", "1.5B"), ("pop", "8"), ("seed", [0]), ("seed", True)]):
        path = runs / rid / "summary.json"
        s = json.loads(path.read_text())
        if key == "params":
            s["model"]["params"] = value
        else:
            s[key] = value
        path.write_text(json.dumps(s))
        planted[rid] = "model.params" if key == "params" else key
    agg = tables.load(root, per_file=per_file)
    reasons = {s["run_id"]: s["reason"] for s in agg.skipped}
    assert set(reasons) == set(planted)
    for rid, field in planted.items():
        assert reasons[rid].startswith(f"summary.json: {field} is not a number"), reasons[rid]
    assert sorted(agg.runs["run_id"]) == sorted(set(ids) - set(planted))
    assert agg.runs["params"].dtype.kind in "if" and agg.runs["pop"].dtype.kind in "if"
    assert aggregate_main([str(root), "--bootstrap", "20", "--no-html"]) == 0
    out = capsys.readouterr().out
    assert f"{len(planted)} skipped" in out and "model.params is not a number ('1.5B')" in out


def test_links_out_of_the_sweep_are_not_followed(tmp_path):
    """A run directory, or a run's summary.json / metrics.jsonl, that is a symlink to a place
    outside the sweep is skipped and listed; its content never reaches the tables."""
    root, ids = make_sweep(tmp_path)
    elsewhere, other = make_sweep(tmp_path, name="elsewhere", models={"secret-model": 2e6}, pops=(8,), seeds=(0,))
    runs = root / "runs"
    (runs / "linked-run").symlink_to(elsewhere / "runs" / other[0], target_is_directory=True)
    (runs / "linked-summary").mkdir()
    (runs / "linked-summary" / "summary.json").symlink_to(elsewhere / "runs" / other[0] / "summary.json")
    (runs / "linked-metrics").mkdir()
    (runs / "linked-metrics" / "summary.json").write_text((runs / ids[0] / "summary.json").read_text())
    (runs / "linked-metrics" / "metrics.jsonl").symlink_to(elsewhere / "runs" / other[0] / "metrics.jsonl")
    for per_file in (False, True):
        agg = tables.load(root, per_file=per_file)
        reasons = {s["run_id"]: s["reason"] for s in agg.skipped}
        assert set(reasons) == {"linked-run", "linked-summary", "linked-metrics"}
        assert all("outside the sweep" in r for r in reasons.values()), reasons
        assert "secret-model" not in set(agg.runs["model"])
        assert set(agg.curves["run_id"]) == set(ids)
    aggregate(root, bootstrap=20, html=False)
    assert "secret-model" not in (root / "runs.csv").read_text()


def test_a_copied_or_linked_run_folder_is_counted_once(tmp_path, capsys):
    """Issue 42: ``cp -r runs/<id> runs/<id>.bak`` and ``ln -s <id> runs/alias`` counted the run
    three times (11 runs instead of 9, the mean moved). A run is keyed by the run_id of its
    summary: a folder whose summary names another run, or that is a link, is skipped with one
    line saying why, in both readers and in the CLI's output."""
    root, ids = make_sweep(tmp_path)
    runs = root / "runs"
    shutil.copytree(runs / ids[2], runs / f"{ids[2]}.bak")
    (runs / "alias").symlink_to(ids[2], target_is_directory=True)
    (runs / "linked-summary").mkdir()                        # a folder whose summary is a link to a run's
    (runs / "linked-summary" / "summary.json").symlink_to(runs / ids[1] / "summary.json")
    for per_file in (False, True):
        agg = tables.load(root, per_file=per_file)
        assert sorted(agg.runs["run_id"]) == sorted(ids)
        assert set(agg.curves["run_id"]) == set(ids)
        reasons = {s["run_id"]: s["reason"] for s in agg.skipped}
        assert set(reasons) == {f"{ids[2]}.bak", "alias", "linked-summary"}
        assert reasons["alias"].startswith(f"a symlink to {ids[2]}")
        assert f"names run {ids[2]!r}" in reasons[f"{ids[2]}.bak"]
        assert f"names run {ids[1]!r}" in reasons["linked-summary"]
    assert aggregate_main([str(root), "--bootstrap", "20", "--no-html"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{len(ids)} runs") and "3 skipped" in out
    assert sum(f"skipped {ids[2]}.bak:" in line for line in out.splitlines()) == 1


DEEP = "[" * 20000 + "]" * 20000    # Arrow's JSON reader overflowed the C stack on this (SIGSEGV)


def test_a_deeply_nested_line_is_an_unreadable_line_not_a_crash(tmp_path, capsys):
    """Issue 42: one metrics line nested 20,000 deep killed the aggregator (and the sweep's
    end-of-sweep aggregation) with SIGSEGV in Arrow's reader, and the Python reader raised
    RecursionError. Now it is one unparseable line, the run and the others kept; a summary
    nested that deep makes its run unreadable. (Before the fix this test kills its process.)"""
    root, ids = make_sweep(tmp_path)
    runs = root / "runs"
    with open(runs / ids[0] / "metrics.jsonl", "a") as f:
        f.write('{"kind": "train", "iteration": 99, "x": ' + DEEP + '}\n')
    (runs / "deep-summary").mkdir()
    (runs / "deep-summary" / "summary.json").write_text('{"status": "completed", "x": ' + DEEP + "}")
    n_lines = {rid: len((runs / rid / "metrics.jsonl").read_text().splitlines()) for rid in ids}
    for per_file in (False, True):
        agg = tables.load(root, per_file=per_file)
        assert sorted(agg.runs["run_id"]) == sorted(ids)
        assert len(agg.curves) == sum(n_lines.values()) - 1
        assert any(n == f"run {ids[0]}: 1 unparseable metrics line(s) skipped (torn write?)" for n in agg.notes)
        assert [s["run_id"] for s in agg.skipped] == ["deep-summary"]
        assert agg.skipped[0]["reason"].startswith("corrupt summary.json")
    assert aggregate_main([str(root), "--bootstrap", "20", "--no-html"]) == 0
    assert f"{len(ids)} runs" in capsys.readouterr().out


def test_a_killed_aggregation_leaves_no_staging_folder_behind(tmp_path):
    """Issue 42: ``kill -9`` of the aggregator left ``.aggregate-*`` staging folders forever.
    The next aggregation removes those of dead processes on this host (and old unnamed ones);
    a live process's stage and anything else in the sweep are left alone. The killed one is a
    real process (a child that exits before its stage is removed, as a kill -9 leaves it)."""
    import os
    import socket
    import subprocess
    import sys
    import time

    from esopt.study.report.aggregate import STAGE, STALE_STAGE_S

    root, ids = make_sweep(tmp_path)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    host = socket.gethostname()
    killed = root / f"{STAGE}{host}-{int(dead.stdout)}-abc123"
    live = root / f"{STAGE}{host}-{os.getpid()}-live0000"
    old = root / f"{STAGE}q1w2e3r4"                                 # the earlier naming
    for d in (killed, live, old):
        d.mkdir()
        (d / "runs.parquet").write_bytes(b"half")
    os.utime(old, (time.time() - STALE_STAGE_S - 60,) * 2)
    aggregate(root, bootstrap=20, html=False)
    assert not killed.exists() and not old.exists() and live.exists()
    assert sorted(p.name for p in root.glob(f"{STAGE}*")) == [live.name]
    assert (root / "runs.parquet").exists() and sorted(p.name for p in (root / "runs").iterdir()) == sorted(ids)


def test_a_deleted_metrics_file_is_a_note_not_a_silently_missing_curve(tmp_path):
    """Issue 42: a run whose metrics.jsonl was deleted dropped out of the curves with no word."""
    running = "es-tiny-s-p8-s1"
    root, ids = make_sweep(tmp_path, statuses={running: "running"})
    (root / "runs" / ids[0] / "metrics.jsonl").unlink()
    (root / "runs" / running / "metrics.jsonl").unlink()            # running: no line yet is normal
    for per_file in (False, True):
        agg = tables.load(root, per_file=per_file)
        assert sorted(agg.runs["run_id"]) == sorted(ids)
        assert [n for n in agg.notes if "metrics.jsonl" in n] == [
            f"run {ids[0]}: no metrics.jsonl (deleted?): its curves are missing from the tables and the page"]


def test_runs_with_keys_of_their_own_fold_into_one_json_column(tmp_path, monkeypatch):
    """Each run carrying keys no other run has (a later version's knobs, a tracker's fields)
    would make one column per key (2,000 runs: 20,000 mostly empty columns): past MAX_COLUMNS
    the rarest keys go per row into other_keys as JSON, nothing lost, both readers alike."""
    monkeypatch.setattr(run_read, "MAX_COLUMNS", 150)
    root, ids = make_sweep(tmp_path)
    for i, rid in enumerate(ids):
        path = root / "runs" / rid
        s = json.loads((path / "summary.json").read_text())
        s.update({f"own_{i}_{j}": i * 10 + j for j in range(8)})
        (path / "summary.json").write_text(json.dumps(s))
        lines = [json.loads(x) for x in (path / "metrics.jsonl").read_text().splitlines()]
        (path / "metrics.jsonl").write_text("".join(json.dumps({**x, **{f"x_{i}_{j}": j for j in range(8)}}) + "\n"
                                                    for x in lines))
    for per_file in (False, True):
        agg = tables.load(root, per_file=per_file)
        assert not agg.skipped and sorted(agg.runs["run_id"]) == sorted(ids)
        assert len(agg.runs.columns) <= 150 + 2 and len(agg.curves.columns) <= 150 + 3  # + other_keys, ids
        for i, rid in enumerate(ids):   # each run's own keys: in columns or in other_keys, all there
            row = agg.runs.set_index("run_id").loc[rid]
            own = {k: int(v) for k, v in row.items() if k.startswith("own_") and pd.notna(v)}
            if isinstance(row[tables.OTHER_KEYS], str):
                own.update(json.loads(row[tables.OTHER_KEYS]))
            assert own == {f"own_{i}_{j}": i * 10 + j for j in range(8)}
        line_keys = [sum(k.startswith("x_") and pd.notna(v) for k, v in r.items() if k != tables.OTHER_KEYS)
                     + (len(json.loads(r[tables.OTHER_KEYS])) if isinstance(r[tables.OTHER_KEYS], str) else 0)
                     for r in agg.curves.to_dict("records")]
        assert line_keys == [8] * len(agg.curves)
        assert agg.runs["final_pass@1"].notna().all() and "pop" in agg.runs
        assert any(tables.OTHER_KEYS in n for n in agg.notes)
        if not per_file:
            fast_runs = agg.runs
        else:
            cols = ["run_id", "final_pass@1", "pop", "params", "n_lines"]
            pd.testing.assert_frame_equal(fast_runs[cols].reset_index(drop=True),
                                          agg.runs[cols].reset_index(drop=True), check_dtype=False)


def test_sparse_table_keeps_the_common_keys_as_columns():
    rows = [{"a": 1, "b": "x"}, {"a": 2, "c": 3.5}, {"a": 3, "b": None, "d": [1]}]
    t = tables.sparse_table(rows, cap=2)
    assert t.column_names == ["a", "b", tables.OTHER_KEYS]
    assert t.column("a").to_pylist() == [1, 2, 3] and t.column("b").to_pylist() == ["x", None, None]
    assert t.column(tables.OTHER_KEYS).to_pylist() == [None, '{"c": 3.5}', '{"d": [1]}']
