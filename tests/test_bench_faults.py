"""benchmarks/bench_faults.py, the fault table (issue 29), on real tiny runs: an ES run killed
after a checkpoint whose weights then get a flipped byte is survived with nothing lost (one
fault class, one attempt: the bench's kill, damage, rerun and comparison), and the comparison
says no to a recovered run that differs from the reference or lacks a record."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys

import pytest

from helpers import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
_spec = importlib.util.spec_from_file_location("bench_faults", REPO / "benchmarks" / "bench_faults.py")
bench = sys.modules["bench_faults"] = importlib.util.module_from_spec(_spec)  # (its dataclasses look it up)
_spec.loader.exec_module(bench)


@pytest.fixture(scope="module")
def faults(tmp_path_factory):
    return bench.Bench(tmp_path_factory.mktemp("faults"))


def test_a_fault_is_survived_with_nothing_lost(faults):
    row = bench.run_fault(faults, "es_flip", attempts=1, seed=0)
    assert (row["attempts"], row["survived"], row["lost"]) == (1, 1, 0), row


def test_the_comparison_says_no_to_a_different_or_incomplete_run(faults, tmp_path):
    refs = faults.reference("es")
    (rid, ref), = refs.items()
    shutil.copytree(faults.sweeps["es"] / "f", tmp_path / "f")
    assert bench.check(refs, tmp_path) == ([], 0)  # the reference itself passes
    run = tmp_path / "f" / "runs" / rid

    weights = run / "model" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0x40
    weights.write_bytes(bytes(data))
    wrong, lost = bench.check(refs, tmp_path)
    assert wrong == [f"{rid}: weights differ: model.safetensors"] and lost == 0

    lines = (run / "metrics.jsonl").read_text().splitlines()
    with open(run / "metrics.jsonl", "a") as f:    # torn by a kill: the store skips it, the comparison counts it
        f.write('{"kind": "train", "iter')
    wrong, lost = bench.check(refs, tmp_path)
    assert wrong == [f"{rid}: weights differ: model.safetensors", f"{rid}: 1 metrics lines cannot be parsed"]
    assert lost == 0
    (run / "metrics.jsonl").write_text("\n".join(lines[:-2]) + "\n")  # the last train and eval lines
    (tmp_path / "f" / "optuna.journal").unlink()
    wrong, lost = bench.check(refs, tmp_path)
    assert any("metrics lines differ" in w for w in wrong) and any("no COMPLETE trial" in w for w in wrong)
    assert lost == 2 + 1  # two metrics lines and the trial

    s = json.loads((run / "summary.json").read_text())
    s["status"] = "running"
    (run / "summary.json").write_text(json.dumps(s))
    assert f"{rid}: status running" in bench.check(refs, tmp_path)[0]

    shutil.rmtree(run)
    wrong, lost = bench.check(refs, tmp_path)
    assert wrong == [f"{rid}: run missing"] and lost == 2 + len(ref["lines"])
