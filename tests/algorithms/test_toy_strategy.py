"""Adding a population strategy with state is one file: this file is ES with momentum (its
documented config block, its checks, its tell and its state) and its registry line. The shared
loop (esopt/algorithms/trainer.py) scores its members, checkpoints its state beside the weights
and hands it back on resume: killed in iteration 3 and resumed, it ends on the uninterrupted
run's weights bit for bit, and a resume that drops the state does not (tiny model, the Sevens
task, four iterations of four members).

Momentum over ES's gradient estimate, kept as the seeds and coefficients of the past
estimates (the update stays a seeded weighted sum of perturbations)::

    g_t = (1 / N) sum_i z_i sign_i eps(s_i)        v_t = beta v_{t-1} + g_t        theta += lr v_t
"""

import json
from dataclasses import asdict, dataclass

import numpy as np
import pytest
import torch
from helpers import kill_while_recording, run_config, strategy_context

from esopt import algorithms
from esopt.algorithms.es import ES, ESRun, normalize_rewards
from esopt.core import store
from esopt.core.config import block
from esopt.core.errors import ConfigError

torch.set_num_threads(1)


@dataclass(frozen=True)
class MomentumConfig:
    """The ``momentum:`` block."""

    beta: float = 0.9  # v <- beta v + g: the share of the last step kept, in [0, 1)


@dataclass(frozen=True)
class MomentumRun(ESRun):
    """ES's settings plus ``beta``."""

    beta: float = 0.9

    @classmethod
    def from_run(cls, cfg) -> "MomentumRun":
        return cls(**asdict(ESRun.from_run(cfg)), **asdict(block(MomentumConfig, cfg.block("momentum"), "momentum")))

    def validate(self) -> "MomentumRun":
        if not 0 <= self.beta < 1:
            raise ConfigError(f"momentum.beta must be in [0, 1), got {self.beta}")
        return super().validate()


class MomentumES(ES):
    """ES's ask and checks; its tell steps along the decayed sum of the past estimates."""

    name = "es_momentum"
    config = MomentumRun

    def __init__(self, cfg: MomentumRun):
        super().__init__(cfg)
        self.seeds: list[int] = []
        self.coeffs: list[float] = []

    def tell(self, seeds, signs, rewards, weights) -> float:
        g = normalize_rewards(rewards, self.cfg.normalize) * np.asarray(signs) / len(seeds)
        self.coeffs = [c * self.cfg.beta for c in self.coeffs] + g.tolist()   # v = beta v + g
        self.seeds = self.seeds + list(seeds)
        return weights.update(self.seeds, self.coeffs, self.cfg.lr, rank=self.cfg.noise_rank, n=1)

    def state_dict(self) -> dict:
        return {"seeds": list(self.seeds), "coeffs": list(self.coeffs)}

    def load_state_dict(self, state: dict) -> None:
        self.seeds, self.coeffs = list(state["seeds"]), list(state["coeffs"])


MOMENTUM = algorithms.Algorithm("es_momentum", "ES with momentum", MomentumES,
                                blocks=(algorithms.ES, algorithms.Block("momentum", MomentumConfig)),
                                reads=algorithms.AXES, checkpoint_copies=1.0)


# ----------------------------------------------------------------------------------- tests
@pytest.fixture(scope="module")
def registered():
    """The registry line, for this module only (the registry is restored afterwards)."""
    from hydra.core.global_hydra import GlobalHydra

    saved = dict(algorithms.ALGORITHMS)
    algorithms.register(MOMENTUM)
    yield MOMENTUM
    algorithms.ALGORITHMS.clear()
    algorithms.ALGORITHMS.update(saved)
    GlobalHydra.instance().clear()


def test_its_config_and_checks_are_its_own_and_es(registered):
    over = ("model=tiny-xs", "algo=es_momentum", "pop=4", "iterations=2")
    rc = run_config(*over, "momentum.beta=0.5", check_data=False)
    assert rc.phases[0].settings == MomentumRun(**{**asdict(ESRun.from_run(rc)), "beta": 0.5})
    assert registered.estimate_tokens(rc.phases[0], 8) == algorithms.get("es").estimate_tokens(rc.phases[0], 8) > 0
    with pytest.raises(ConfigError, match=r"momentum.beta must be in \[0, 1\), got 1.5"):
        run_config(*over, "momentum.beta=1.5", check_data=False)
    with pytest.raises(ConfigError, match="es.antithetic needs an even pop"):  # ES's checks, inherited
        run_config(*over, "pop=3", "es.antithetic=true", check_data=False)
    with pytest.raises(ConfigError, match="batches low-rank members only"):     # and the engine's
        run_config(*over, "es.batched=true", "es.full_rank=true", "engine=vllm", check_data=False)


def _ctx(path):
    return strategy_context(path, "es_momentum", momentum={"beta": 0.5})


class Forgetful(MomentumES):
    """The same strategy, resumed without its state."""

    def load_state_dict(self, state: dict) -> None:
        pass


def weights(ctx) -> dict:
    return {k: v.detach().clone() for k, v in ctx.model.named_parameters()}


def test_resume_restores_its_state_bitwise(registered, tmp_path):
    import shutil

    full = _ctx(tmp_path / "a")
    MomentumES.train(full)
    killed = _ctx(tmp_path / "b")
    kill_while_recording(killed, MomentumES.train, 3)
    ckpt = killed.run.checkpoint_dir
    assert json.loads((ckpt / "state.json").read_text())["iteration"] == 2
    assert "strategy.pt" in json.loads((ckpt / store.MANIFEST).read_text())["files"]
    saved = torch.load(ckpt / "strategy.pt", weights_only=True)
    assert len(saved["seeds"]) == len(saved["coeffs"]) == 8  # two iterations of four members
    shutil.copytree(tmp_path / "b", tmp_path / "c")

    resumed = _ctx(tmp_path / "b")
    MomentumES.train(resumed)
    lines = [json.loads(x) for x in resumed.run.metrics_path.read_text().splitlines()]
    assert [x["iteration"] for x in lines if x["kind"] == "train"] == [1, 2, 3, 4]
    a, b = weights(full), weights(resumed)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert full.shared.effective["es_lr"] == 0.05

    forgot = _ctx(tmp_path / "c")
    Forgetful.train(forgot)  # the same checkpoint, its momentum dropped: elsewhere
    c = weights(forgot)
    assert not all(torch.equal(a[k], c[k]) for k in a)
