"""Every data error names the file, the row and the field, and a value the loader would
change (an integer past int64, 1e400, the string "1e5" among numbers) is refused, never
coerced (esopt.tasks.check_json_rows, before datasets reads the file)."""

import json

import pytest

from esopt.cli import configs
from esopt.cli.common import prepare_argv

configs.register()


def _file(tmp_path, last_row: str, ext: str = ".jsonl"):
    rows = [json.dumps({"nums": [i % 9 + 1, 2, 3], "target": 6 + i}) for i in range(60)]
    p = tmp_path / f"data{ext}"
    if ext == ".json":
        p.write_text("[" + ",\n".join(rows + [last_row]) + "]")
    else:
        p.write_text("\n".join(rows + [last_row]) + "\n")
    return p


def _error(capsys, src) -> str:
    with pytest.raises(SystemExit) as e:
        prepare_argv(["model=tiny-xs", "task=countdown", f"task.source={src}", "task.n_train=30",
                      "task.n_heldout=0", "eval.problems=5"])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1 and err.startswith("esopt: error: "), err
    return err


@pytest.mark.parametrize("ext", [".jsonl", ".json"])
@pytest.mark.parametrize("row, field", [
    ('{"nums": [1%s, 2], "target": 5}' % ("0" * 5000), "field 'nums'[0]: number out of range"),
    ('{"nums": [1, 2], "target": 1%s}' % ("0" * 30), "field 'target': number out of range"),
    ('{"nums": [1, 2], "target": 1e400}', "field 'target': number out of range"),
    ('{"nums": [1, 2], "target": NaN}', "field 'target': number out of range"),
    ('{"nums": [1, 2], "target": "1e5"}', "field 'target' holds a string ('1e5') where row 0 holds a number"),
], ids=["big-int-in-list", "big-int", "1e400", "NaN", "string-1e5"])
def test_a_bad_value_names_file_row_and_field(tmp_path, capsys, ext, row, field):
    src = _file(tmp_path, row, ext)
    err = _error(capsys, src)
    assert err.startswith(f"esopt: error: {src}: row 60: {field}"), err


def test_a_string_target_in_scientific_notation_is_refused(tmp_path, capsys):
    """Where every target is a string (the ES-at-scale format), "1e5" reaches the task's own
    rule, which refuses it."""
    rows = [json.dumps({"nums": [i % 9 + 1, 2, 3], "target": str(6 + i)}) for i in range(60)]
    src = tmp_path / "strings.jsonl"
    src.write_text("\n".join(rows + ['{"nums": [1, 2], "target": "1e5"}']) + "\n")
    err = _error(capsys, src)
    assert "row 60" in err and "field 'target' must be a number" in err, err


def test_a_good_file_passes(tmp_path, capsys):
    src = _file(tmp_path, '{"nums": [1, 2], "target": 3}')
    prepare_argv(["model=tiny-xs", "task=countdown", f"task.source={src}", "task.n_train=30",
                  "task.n_heldout=0", "eval.problems=5"])
    assert "error" not in capsys.readouterr().err


def test_strings_the_loader_keeps_are_not_refused(tmp_path, capsys):
    """A field mixing numbers and strings is fine where the strings read back as themselves."""
    from esopt.tasks import check_json_rows

    p = tmp_path / "mixed.jsonl"
    p.write_text("\n".join(json.dumps({"answer": a}) for a in (3, "\\frac{1}{2}", "12", 4.5)) + "\n")
    check_json_rows(str(p), "math")
