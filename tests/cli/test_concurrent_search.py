"""Two ``hydra/sweeper=optuna`` searches on one study (issue 42): the sampler each builds
(``search.OptunaSweeper._sampler``) on a real Optuna journal, asked in turn as two processes
would. In-process: the proposals are the whole question."""

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend

from hydra_plugins.esopt_sweeper.search import OptunaSweeper

SPACE = {"sigma": FloatDistribution(1e-3, 0.1, log=True), "pop": CategoricalDistribution([2, 4])}


def sampler(kind: str, seed: int = 0):
    """The sampler a search with ``hydra.sweeper.sampler=<kind> hydra.sweeper.seed=<seed>`` uses."""
    return OptunaSweeper(sampler=kind, seed=seed, n_startup_trials=2)._sampler()


def proposals(studies, rounds):
    out = []
    for _ in range(rounds):
        for study in studies:
            trial = study.ask(SPACE)
            out.append((trial.params["pop"], trial.params["sigma"]))
    return out


@pytest.mark.parametrize("kind", ["tpe", "random"])
def test_two_searches_on_one_study_propose_distinct_configurations(tmp_path, kind):
    """They proposed the same ones (one identically seeded stream each: 8 trials, 4 distinct
    runs, each run twice). Reseeded from the trial number, which the storage hands out once,
    they differ; one search alone stays reproducible."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = JournalStorage(JournalFileBackend(str(tmp_path / "optuna.journal")))
    a = optuna.create_study(study_name="s", storage=storage, sampler=sampler(kind))
    b = optuna.load_study(study_name="s", storage=storage, sampler=sampler(kind))
    together = proposals([a, b], 4)
    assert len(set(together)) == 8, together
    alone = optuna.create_study(study_name="t", storage=storage, sampler=sampler(kind))
    again = optuna.create_study(sampler=sampler(kind))
    assert proposals([alone], 3) == proposals([again], 3)
    assert together[:2] == proposals([optuna.create_study(sampler=sampler(kind))], 2)  # trials 0, 1
