"""algo=random_search: one file (esopt/algorithms/random_search.py) plus its registry line gets
the shared loop's scoring, records, checkpoints, resume and evaluation schedule
(esopt/algorithms/trainer.py). Tiny model, the Sevens task, a few iterations."""

import json

import numpy as np
import torch
from helpers import SevensTask, kill_while_recording, run_config, strategy_context, tiny_model

from esopt import algorithms, noise
from esopt.algorithms import random_search, trainer
from esopt.algorithms.es import ES, ESRun
from esopt.engines.hf import HFEngine
from esopt.models.tiny import char_tokenizer


def test_the_entry_reads_es_block_pop_sigma_not_lr():
    entry = algorithms.get("random_search")
    assert entry.trains and entry.kind is None  # not counted as ES by the claims
    assert entry.uses("pop") and entry.uses("sigma") and entry.uses("es.batch_size") and not entry.uses("lr")
    rc = run_config("algo=random_search", "model=tiny-xs", "pop=4", check_data=False)
    assert entry.estimate_tokens(rc.phases[0], 16) == algorithms.get("es").estimate_tokens(rc.phases[0], 16) > 0


def test_a_step_moves_to_the_best_members_point_bitwise():
    """Same members as ES; the weights end exactly on the best member's perturbed point."""
    model = tiny_model()
    engine = HFEngine(model, char_tokenizer(), device="cpu")
    task = SevensTask({})
    cfg = ESRun(pop=6, sigma=0.05, lr=0.08, batch_size=8, seed=3)
    base = {k: v.detach().clone() for k, v in model.named_parameters()}
    strategy = random_search.RandomSearch(cfg)
    rows = list(task.split("train"))
    assert strategy.ask(1, len(rows)) == ES(cfg).ask(1, len(rows))
    line = trainer.step(strategy, engine, task, rows, 1)
    seeds, signs, _ = strategy.ask(1, len(rows))
    best = int(np.argmax(line["rewards"]))
    assert line["rewards"][best] > min(line["rewards"])  # a choice was made
    want = noise.perturbed(list(base.items()), seeds[best], cfg.sigma, signs[best])
    got = dict(model.named_parameters())
    assert all(torch.equal(got[k], w) for k, w in zip(base, want))
    assert not all(torch.equal(got[k], base[k]) for k in base)


def _ctx(path, iterations):
    return strategy_context(path, "random_search", iterations)


def test_resume_from_its_checkpoint_is_bitwise_equal_to_uninterrupted(tmp_path):
    """The shared loop's checkpoint and resume, for free: killed while recording iteration 3
    (checkpoint at 2), the resumed run ends on the uninterrupted run's weights, bit for bit."""
    full = _ctx(tmp_path / "a", 4)
    random_search.RandomSearch.train(full)
    killed = _ctx(tmp_path / "b", 4)
    kill_while_recording(killed, random_search.RandomSearch.train, 3)
    state = json.loads((killed.run.checkpoint_dir / "state.json").read_text())
    assert (state["algo"], state["iteration"]) == ("random_search", 2)
    resumed = _ctx(tmp_path / "b", 4)
    random_search.RandomSearch.train(resumed)
    train = [json.loads(x) for x in resumed.run.metrics_path.read_text().splitlines()]
    assert [x["iteration"] for x in train if x["kind"] == "train"] == [1, 2, 3, 4]
    a, b = dict(full.model.named_parameters()), dict(resumed.model.named_parameters())
    base = dict(tiny_model().named_parameters())
    assert all(torch.equal(a[k], b[k]) for k in a) and not all(torch.equal(a[k], base[k]) for k in a)
    assert full.shared.effective == {"sigma": 0.05}  # no lr: random search has none
