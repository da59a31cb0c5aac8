"""The run config's ``sparsity:`` block: what ``analysis=[sparsity]`` evaluates inside a run
(so a preset asks for only the points a claim reads), checked before dispatch, never in the id."""

import json

import pytest
from helpers import cli, rejected, run_config

from esopt.core.config import SparsityConfig
from esopt.study import analyses as SP  # the sparsity module's defaults, re-exported
from esopt.study.analyses.delta import keep_count

CLAIM5 = ("sparsity.fractions=[0.22]", "sparsity.modes=[global,random]")


def test_the_blocks_defaults_are_the_analysis_defaults():
    rc = run_config("model=tiny-xs", check_data=False)
    assert rc.sparsity == SparsityConfig()
    assert (SP.DEFAULT_FRACTIONS, SP.MODES, SP.CONTROL_FRACTIONS) == \
        (rc.sparsity.fractions, rc.sparsity.modes, rc.sparsity.control_fractions)
    assert rc.to_dict()["sparsity"] == {"fractions": [1.0, 0.5, 0.22, 0.1, 0.05, 0.01],
                                        "modes": list(SP.MODES), "control_fractions": [0.22]}


@pytest.mark.parametrize("algo", ["es", "grpo", "es_grpo", "none"])
def test_the_block_does_not_change_the_run_id(algo):
    from esopt.runtime.validate import identity, run_id

    plain = run_config("model=tiny-xs", f"algo={algo}", check_data=False)
    asked = run_config("model=tiny-xs", f"algo={algo}", "analysis=[sparsity]", *CLAIM5,
                       "sparsity.control_fractions=[0.5]", check_data=False)
    assert asked.sparsity != plain.sparsity and asked.sparsity.modes == ("global", "random")
    assert run_id(asked) == run_id(plain) and "sparsity" not in identity(asked)


@pytest.mark.parametrize("bad, needle", [
    ("sparsity.fractions=[0.22,1.5]", "sparsity.fractions must be in [0, 1], got [0.22, 1.5]"),
    ("sparsity.control_fractions=[-0.1]", "sparsity.control_fractions must be in [0, 1]"),
    ("sparsity.fractions=[a]", "sparsity.fractions must be a number, got 'a'"),
    ("sparsity.modes=[global,bogus]", "unknown sparsity.modes 'bogus' (known: global, per_tensor,"),
    ("sparsity.fractions=[]", "sparsity.fractions must not be empty"),
    ("sparsity.modes=[]", "sparsity.modes must not be empty"),
    ("sparsity.control_fractions=[]", "sparsity.control_fractions must not be empty"),
    ("sparsity.nope=1", "unknown key 'sparsity.nope'"),
])
def test_bad_options_are_one_line_and_exit_2(capsys, bad, needle):
    err = rejected(capsys, "model=tiny-xs", "algo=es", "analysis=[sparsity]", bad)
    assert needle in err, err


def test_a_grid_with_one_bad_point_is_refused_before_any_run(tmp_path):
    r = cli("esopt.sweep", "-m", "model=tiny-xs", "algo=es", "analysis=[sparsity]",
                "sparsity.fractions=[0.22],[2]", f"sweep.root={tmp_path}", env={"OMP_NUM_THREADS": "1"})
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr[-2000:]
    assert lines[0].startswith("esopt: error: sparsity.fractions must be in [0, 1], got [2] (run 1: ")
    assert not (tmp_path / "default" / "runs").exists()


def test_a_key_the_run_does_not_read_is_a_note(capsys):
    from esopt.cli.common import prepare_argv

    prepare_argv(["model=tiny-xs", "algo=none", "sparsity.fractions=[0.22]"])
    assert capsys.readouterr().err.strip() == "esopt: note: sparsity.fractions has no effect with algo=none"


def test_a_real_run_evaluates_only_the_points_its_block_asks_for(tmp_path):
    """A tiny ES run with analysis=[sparsity] and claim 5's points: sparsity.json holds the
    global and random masks at 0.22 (4 evaluations: trained, base and those two), not the 22
    of the defaults."""
    from esopt.cli.sweep import analyses
    from esopt.core.store import RunDir
    from esopt.runtime.run import run

    rc = run_config("model=tiny-xs", "algo=es", "pop=4", "iterations=2", "es.batch_size=16",
                    "eval.problems=8", "eval.samples=2", "eval.every=2", "analysis=[sparsity]", *CLAIM5,
                    f"sweep.root={tmp_path}")
    summary = analyses(rc, run(rc))
    assert summary["status"] == "completed", summary.get("error")
    rd = RunDir.for_run(rc.sweep.root, rc.sweep.name, summary["run_id"])
    assert summary["analyses"] == {"sparsity": str(rd.path / "sparsity.json")}
    sp = json.loads((rd.path / "sparsity.json").read_text())
    assert (sp["fractions"], sp["modes"], sp["control_fractions"]) == ([0.22], ["global", "random"], [0.22])
    assert [(c["mode"], c["keep"]) for c in sp["curves"]] == [("global", 0.22), ("random", 0.22)]
    assert sp["nnz"] > 0 and all(c["kept"] == keep_count(0.22, sp["nnz"]) for c in sp["curves"])
    assert (sp["n_problems"], sp["samples"]) == (8, 2)      # the run's own eval sizes
    assert json.loads(json.dumps(RunDir(rd.path).read_summary()["config"]["sparsity"])) == \
        {"fractions": [0.22], "modes": ["global", "random"], "control_fractions": [0.22]}


def test_paper_cpu_asks_its_es_runs_for_claim5s_points_only():
    """The preset decides claim 5 in its one command: its ES runs (the runs claim 5 reads) run
    analysis=[sparsity] at the global mask of keep 0.22 and its equal-norm and random controls,
    the other runs none."""
    from helpers import compose
    from omegaconf import OmegaConf

    grids = OmegaConf.to_container(compose("+experiment=paper_cpu", hydra=True).hydra.sweeper.grids)
    algos = []
    for grid in grids:
        for algo in str(grid["algo"]).split(","):
            rest = [f"{k}={v}" for k, v in grid.items() if k not in ("algo", "seed")]
            rc = run_config("+experiment=paper_cpu", f"algo={algo}", *rest, check_data=False)
            assert rc.analysis == (("sparsity",) if algo == "es" else ()), grid
            assert (rc.sparsity.fractions, rc.sparsity.modes, rc.sparsity.control_fractions) == \
                ((0.22,), ("global", "random", "equal_norm"), (0.22,))
            algos.append(algo)
    assert sorted(algos) == ["es", "es_grpo", "grpo", "grpo_es"]
