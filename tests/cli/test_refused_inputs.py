"""Issue 42's inputs that got past validation (run folder created and exit 1, or a traceback):
each is now one ``esopt: error:`` line and exit 2 before anything is dispatched. In-process
(``prepare_argv`` is what ``python -m esopt.sweep`` runs first; the sweeper validates every
job of a ``-m`` grid with the same ``validate``); benchmarks/bench_bad_inputs.py runs them all
as a user would."""

import json

import pytest

from helpers import compose, model_copy, rejected

from esopt.cli import configs
from esopt.core.errors import ConfigError
from esopt.runtime.validate import validate

configs.register()

SMALL = ["model=tiny-xs", "algo=es", "pop=2", "iterations=1", "eval.problems=4", "eval.samples=2"]


def refused(capsys, tmp_path, *argv) -> str:
    """The one line ``argv`` is refused with; nothing is created under ``tmp_path/r``."""
    err = rejected(capsys, *SMALL, *argv, f"sweep.root={tmp_path / 'r'}")
    assert not (tmp_path / "r").exists()
    return err


def test_an_unknown_model_dtype_is_refused_before_dispatch(capsys, tmp_path):
    assert "unknown model.dtype 'int8' (known: float32" in refused(capsys, tmp_path, "model.dtype=int8")
    with pytest.raises(ConfigError, match="unknown model.dtype 'int8'"):   # each job of a -m grid
        validate(compose(*SMALL, "model.dtype=int8"), check_data=False)


def test_a_model_folder_with_a_corrupt_tokenizer_or_config_is_refused(capsys, tmp_path):
    tok = model_copy(tmp_path / "tok")
    (tok / "tokenizer.json").write_text("{corrupt")
    assert f"model path {tok}: tokenizer.json is unreadable (JSONDecodeError)" in refused(
        capsys, tmp_path, f"model.path={tok}")
    hs = model_copy(tmp_path / "hs")
    cfg = json.loads((hs / "config.json").read_text())
    (hs / "config.json").write_text(json.dumps({**cfg, "hidden_size": "abc"}))
    err = refused(capsys, tmp_path, f"model.path={hs}")
    assert f"model path {hs}: config.json does not load" in err and "'hidden_size'" in err


def test_a_sweep_root_that_is_a_file_and_a_name_too_long_are_refused(capsys, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    for root in (afile, afile / "sub"):
        assert rejected(capsys, *SMALL, f"sweep.root={root}") == \
            f"esopt: error: sweep.root '{root}': {afile} is a file, not a directory"
    assert "sweep.name is 256 bytes long; a directory name holds at most 255" in refused(
        capsys, tmp_path, "sweep.name=" + "a" * 256)


def test_an_unquoted_non_ascii_name_says_to_quote_it(capsys, tmp_path):
    err = refused(capsys, tmp_path, "sweep.name=héllo")
    assert "LexerNoViableAlt" not in err and "write \"sweep.name='héllo'\"" in err
    rejected(capsys, "-m", *SMALL, "sweep.name=héllo")


@pytest.mark.parametrize("row, field", [
    ({"nums": [1e308, 2, 3], "target": 6}, "'nums' holds 1e+308"),
    ({"nums": [1e20, 2, 3], "target": 6}, "'nums' holds 1e+20"),
    ({"nums": [1, 2, 3], "target": 1e20}, "'target' is 1e+20"),
])
def test_countdown_numbers_past_int64_are_refused_with_the_row(capsys, tmp_path, row, field):
    """They raised OverflowError (a traceback) in the dataset's int64 column."""
    data = tmp_path / "c.jsonl"
    good = [{"nums": [i, 2, 3], "target": i + 5} for i in range(1, 31)]
    data.write_text("".join(json.dumps(r) + "\n" for r in [row, *good]))
    err = refused(capsys, tmp_path, f"task.source={data}", "task.n_train=16", "task.n_heldout=4")
    assert f"{data}: row 0: malformed countdown row: field {field}, past the int64 range" in err


def test_a_data_row_that_is_not_json_is_named(capsys, tmp_path):
    """bench_bad_inputs: a JSON Lines row that is not JSON gave datasets' logged error plus a line
    naming no row (two stderr lines); now one line names the file and the row."""
    data = tmp_path / "c.jsonl"
    data.write_text("{not json\n" + "".join(json.dumps({"nums": [i, 2, 3], "target": i + 5}) + "\n"
                                           for i in range(1, 31)))
    err = refused(capsys, tmp_path, f"task.source={data}", "task.n_train=16", "task.n_heldout=4")
    assert f"{data}: row 0: not a JSON object (Expecting property name" in err


def test_eval_out_is_checked_before_evaluating(capsys, tmp_path):
    """``esopt.evaluate eval.out=<file>/x.json`` evaluated the whole split, then crashed on the
    write and lost it; now the command line is refused before Hydra runs, and a config's value
    before the model is loaded."""
    from esopt.cli.evaluate import evaluate_model

    afile = tmp_path / "afile"
    afile.write_text("x")
    assert f"{afile} is a file, not a directory" in rejected(capsys, "model=tiny-xs", f"eval.out={afile}/x.json")
    for out, needle in ((afile / "x.json", f"{afile} is a file, not a directory"), (tmp_path, "is a directory")):
        with pytest.raises(SystemExit) as e:
            evaluate_model(compose(*SMALL[:1], "algo=none", "eval.problems=4", "eval.samples=2", f"eval.out={out}"))
        err = capsys.readouterr()
        assert e.value.code == 2 and err.err.startswith("esopt: error: eval.out") and needle in err.err
        assert err.out == ""                         # no table: nothing was evaluated


@pytest.mark.parametrize("main, argv", [("esopt.cli.aggregate", []), ("esopt.cli.aggregate", ["d", "--bootstrap", "x"]),
                                        ("esopt.cli.analyze", []), ("esopt.cli.pretrain", ["--seed", "x"])])
def test_a_command_line_usage_error_is_one_esopt_line(capsys, main, argv):
    """argparse's own ``python -m esopt.aggregate: error:`` after a usage dump: now every argparse
    command (cli.common.Parser) says ``esopt: error:`` on one line, exit 2."""
    import importlib

    with pytest.raises(SystemExit) as e:
        importlib.import_module(main).main(argv)
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1 and err.startswith("esopt: error: "), err
