"""The ES-at-scale repository's Countdown file as published: rows {id, context, numbers, target,
solution} with string targets ("98"), non-integer targets ("27.4"), rows without a solution, a
published solution that reuses a number, the file's own context as the chat prompt, and the
published split (first 200 rows train, the others test) at the defaults.

tests/data/countdown_es_sample.json: 24 rows written for these tests in that file's format (not
copied from it); ``helpers.write_countdown_es_file`` pads it to the published file's 2,200 rows."""

import json

import pytest
from helpers import cli, COUNTDOWN_ES_SAMPLE, run_config, write_countdown_es_file

from esopt.core.errors import ConfigError
from esopt.tasks import Verdict, get
from esopt.tasks import countdown as cd

SAMPLE = COUNTDOWN_ES_SAMPLE


def sample_rows():
    return json.loads(SAMPLE.read_text())


def es_file(tmp_path, n=2200):
    path = tmp_path / "countdown.json"
    return path, write_countdown_es_file(path, n)


def test_published_file_at_the_defaults(tmp_path):
    path, rows = es_file(tmp_path)
    task = get({"name": "countdown", "source": str(path)}, style="chat")
    assert (task.cfg["n_train"], task.cfg["n_test"], task.cfg["n_heldout"]) == (200, None, 0)
    tr, te, ho = (task.split(s).to_list() for s in ("train", "test", "heldout"))
    assert (len(tr), len(te), len(ho)) == (200, 2000, 0)  # the ES repo: first 200 train, the rest test
    assert [r["numbers"] for r in tr] == [r["numbers"] for r in rows[:200]]
    assert [r["numbers"] for r in te] == [r["numbers"] for r in rows[200:]]
    # string targets are numbers; the column is float64 because some targets are not integers
    assert tr[0]["target"] == 98 and tr[9]["target"] == 27.4
    assert tr[10]["target"] == pytest.approx(800 / 3)
    # the file's own context is the chat prompt, verbatim
    assert [r["prompt"] for r in tr] == [r["context"] for r in rows[:200]]
    assert tr[0]["prompt"].endswith("Let me solve this step by step.\n<think>")
    # rows without a solution (null, or no key at all) load with solution None
    assert tr[12]["solution"] is None and tr[18]["solution"] is None
    # a run config with only task.source validates (train and test non-empty; heldout unused)
    rc = run_config("model=tiny-xs", f"task.source={path}", "algo=es")
    assert (rc.task["n_train"], rc.task["n_test"], rc.task["n_heldout"]) == (200, None, 0)
    assert rc.eval.problems == 200


def test_published_solutions_score_and_quirks_are_caught(tmp_path):
    path, rows = es_file(tmp_path, n=300)
    task = get({"name": "countdown", "source": str(path)}, style="chat")
    train = task.split("train").to_list()
    scored = {}
    for file_row, row in zip(rows, train):
        sol = file_row.get("solution")
        if sol:
            scored[file_row["id"]] = task.verify(f" work</think>\n<answer>{sol}</answer>", row)
    # every published solution earns the full public reward, except the one reusing 47 (row 14)
    assert {i for i, v in scored.items() if v.correct} == set(scored) - {14}
    assert scored[9] == Verdict(pytest.approx(1.1), 1.0, 1.0, True, "98/(47-52)+47")  # 27.4
    assert scored[10].correct  # 266.6666666666667 = 800/3 rounded by the file
    assert scored[14] == Verdict(pytest.approx(0.1), 1.0, 0.0, False, "98/(47-52)+47")
    # compact style renders its prompt, non-integer targets as written
    compact = get({"name": "countdown", "source": str(path)})
    assert compact.split("train")[9]["prompt"] == "98 47 52 47=27.4:"
    assert compact.split("train")[10]["prompt"] == "80 10 3=266.6666666666667:"
    assert compact.verify("98/(47-52)+47", compact.split("train")[9]).correct


def test_non_integer_targets_within_1e5_never_001_away():
    nums = [98, 47, 52, 47]
    assert cd.check_expression("98/(47-52)+47", nums, "27.4")
    assert cd.check_expression("98/(47-52)+47", nums, 27.4)
    for near in ("27.39", "27.41", "27.4001", 27.39):
        assert not cd.check_expression("98/(47-52)+47", nums, near)
    # 800/3: the file's 16-digit rounding is within 1e-5; 3.3e-6 away is too, 3.3e-5 is not
    for target, ok in (("266.6666666666667", True), ("266.66667", True), ("266.6667", False),
                       ("266.67", False), ("266.66", False)):
        assert cd.check_expression("80*10/3", [80, 10, 3], target) is ok, target
    # integer targets: exact as before (tolerance is strict: < 1e-5)
    assert cd.check_expression("3*7+2", [3, 7, 2], "23") and not cd.check_expression("3*7+2", [3, 7, 2], 24)
    assert cd.parse_target(" 98 ") == 98 and cd.parse_target("27.4") * 5 == 137
    for bad in ("abc", "", "nan", "inf", "1e5", None, True, float("nan"), "9" * 41):
        assert cd.parse_target(bad) is None
    assert cd.key([2, 1], "3") == cd.key([1, 2], 3.0) == ((1, 2), 3)
    assert cd.target_text("27.4") == "27.4" and cd.target_text(98.0) == "98"


def test_bad_rows_and_empty_test_split_name_file_row_and_field(tmp_path):
    rows = sample_rows()
    for bad, field in (({"id": 3, "numbers": [3, 4], "target": "ninety"}, "'target' must be a number, got 'ninety'"),
                       ({"id": 3, "numbers": [3, 4], "target": ""}, "'target' must be a number"),
                       ({"id": 3, "context": "x", "target": "5"}, r"'numbers' \(or 'nums'\) is missing"),
                       ({"id": 3, "numbers": [3, 4], "solution": "3+4"}, "'target' is missing")):
        path = tmp_path / "bad.json"
        path.write_text(json.dumps(rows[:3] + [bad] + rows[3:]))
        with pytest.raises(ConfigError, match=f"^{path}: row 3: malformed countdown row: field {field}"):
            get({"name": "countdown", "source": str(path), "n_train": 5}).split("test")
    path = tmp_path / "small.json"
    path.write_text(json.dumps(rows))  # 24 rows: the default 200 train rows leave no test rows
    with pytest.raises(ConfigError, match=rf"^task countdown: {path} has 24 rows; n_train=200 \+ "
                                          "n_heldout=0 leaves no test rows$"):
        run_config("model=tiny-xs", f"task.source={path}")
    # {nums, target} rows (Countdown-Tasks-3to4) keep working, with rendered chat prompts
    path = tmp_path / "tasks34.jsonl"
    path.write_text("".join(json.dumps({"nums": r["numbers"], "target": int(float(r["target"]))}) + "\n"
                            for r in rows if float(r["target"]).is_integer()))
    t = get({"name": "countdown", "source": str(path), "n_train": 4}, style="chat")
    row = t.split("train")[0]
    assert row["target"] == 98 and row["prompt"].startswith("System: You are a helpful assistant.")


def test_cli_non_number_target_exits_2(tmp_path):
    rows = sample_rows()
    rows[5]["target"] = "12a"
    path = tmp_path / "countdown.json"
    path.write_text(json.dumps(rows))
    p = cli("esopt.sweep", "model=tiny-xs", f"task.source={path}", "task.n_train=8",
                f"sweep.root={tmp_path / 'results'}", timeout=300)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        f"esopt: error: {path}: row 5: malformed countdown row: field 'target' must be a number, got '12a'"]
