"""A new engine is one file plus one registry line: this file is a whole toy engine (a plain
greedy / Gumbel-max decoding loop over an HF model, no KV cache), registered with
``engines.register``, and the test runs it through the sweep as a user would
(``python tests/engines/test_toy_engine.py engine=toy ...`` is ``python -m esopt.sweep``
with the toy engine added). It subclasses the ``Engine`` protocol, so it states every
capability (the protocol's defaults: it only generates) and inherits the hooks it does not
need. ES drives it through the protocol only: its weights are perturbed, restored and updated,
and ``es.batched`` and GRPO's ``grpo.rollouts=engine`` are refused from its capabilities.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch

from esopt import engines
from esopt.core.errors import ConfigError
from esopt.engines.base import Engine, Generation, encode_prompts, entropy_per_token, resolve_device, trim_at_stop
from esopt.engines.weights import Weights


class ToyEngine(Engine):
    """Decodes one sequence at a time with full forward passes over the caller's model; the
    protocol's default capabilities (no batched population, no rollouts, no text scoring)."""

    def __init__(self, model, tokenizer, device: str = "cpu", max_batch: int = 1):
        self.device = torch.device(resolve_device(device))
        self.model = model.to(self.device).eval()
        self.tokenizer, self.max_batch = tokenizer, max_batch
        self.eos = tokenizer.eos_token_id
        self._weights = None

    @classmethod
    def from_config(cls, cfg, model, tokenizer) -> "ToyEngine":
        return cls(model, tokenizer, device=cfg.device, max_batch=cfg.max_batch)

    @classmethod
    def check(cls, cfg, model_cfg) -> None:
        """Runs every model transformers loads."""

    @torch.inference_mode()
    def _decode(self, ids: list[int], steps: int, temperature: float, gen: torch.Generator, stop, entropy: bool):
        out, ents = [], []
        x = torch.tensor([ids], device=self.device)
        for _ in range(steps):
            z = self.model(x).logits[0, -1].float()
            if entropy:
                ents.append(float(entropy_per_token(z, temperature if temperature > 0 else 1.0)))
            if temperature > 0:  # Gumbel-max: an exact sample from softmax(z / T)
                u = torch.rand(z.shape, generator=gen, device=self.device).clamp_(1e-20, 1.0)
                z = z / temperature - torch.log(-torch.log(u))
            t = int(z.argmax())
            out.append(t)
            if t == self.eos or (stop and any(s in self.tokenizer.decode(out) for s in stop)):
                break
            x = torch.cat([x, torch.tensor([[t]], device=self.device)], dim=1)
        return out, ents

    def generate(self, prompts, *, n=1, temperature=0.0, top_p=1.0, max_new_tokens=32, seed=0, stop=(),
                 return_entropy=False) -> Generation:
        texts, ids, lens, ents = [], [], [], []
        for p, prompt_ids in enumerate(encode_prompts(self.tokenizer, prompts)):
            t_p, i_p, l_p, e_p = [], [], [], []
            for s in range(n):
                gen = torch.Generator(device=self.device).manual_seed(seed * 1_000_003 + p * n + s)
                out, ent = self._decode(prompt_ids, max_new_tokens, temperature, gen, tuple(stop), return_entropy)
                l_p.append(len(out))
                out = out[:-1] if out and out[-1] == self.eos else out
                i_p.append(out)
                t_p.append(trim_at_stop(self.tokenizer.decode(out, skip_special_tokens=True), stop))
                e_p.append(sum(ent) / max(len(ent), 1))
            texts.append(t_p), ids.append(i_p), lens.append(l_p), ents.append(e_p)
        return Generation(completions=texts, token_ids=ids, lengths=lens,
                          entropy=ents if return_entropy else None, n_tokens=sum(map(sum, lens)))

    def weights(self) -> Weights:
        if self._weights is None:
            self._weights = Weights(self.model.named_parameters())
        return self._weights

    def sync_from(self, model) -> None:
        assert model is self.model

    sync_to = sync_from

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class ToyConfig(engines.EngineConfig):
    """``engine=toy``: the shared keys only."""

    name: str = "toy"
    max_batch: int = 1

    engine: ClassVar[Any] = ToyEngine


def _register():
    engines.register(ToyConfig)  # the one registry line (done where used: importing this file
    #                              under pytest must not add "toy" to every worker's --help)


# --- the tests ----------------------------------------------------------------------------
def _sweep(*args, root):
    """``python -m esopt.sweep`` with this file's engine registered (run as this file)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[2]),
                                                       os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, __file__, *args, f"sweep.root={root}"], env=env,
                          capture_output=True, text=True, timeout=900)


SMALL = ("model=tiny-xs", "algo=es", "pop=4", "sigma=0.05", "iterations=2", "es.batch_size=4",
         "eval.problems=4", "eval.samples=2", "eval.max_new_tokens=8")


def test_greedy_toy_completions_match_the_hf_engine(monkeypatch):
    from esopt import models

    monkeypatch.setitem(engines.ENGINES, "toy", ToyConfig)

    model, tok = models.load("tiny-xs")
    toy = engines.get({"name": "toy", "device": "cpu"}, model, tok)
    hf = engines.get({"name": "hf", "device": "cpu"}, model, tok)
    prompts = ["12+7=", "3*4=", "9-5=", "abc"]
    assert toy.generate(prompts, max_new_tokens=6).completions == hf.generate(prompts, max_new_tokens=6).completions


def test_capabilities_are_declared_not_probed(monkeypatch):
    """The toy engine's capabilities come from the protocol it subclasses, and they, not its
    name, refuse what it cannot do before any run (GRPO rollouts, likelihood probes); a class
    that states no capabilities is refused with one line naming the missing ones."""
    from helpers import run_config  # here: this file also runs as a script, without tests/ on the path

    monkeypatch.setitem(engines.ENGINES, "toy", ToyConfig)
    cls = engines.engine_class({"name": "toy"})
    assert (cls.batches_population, cls.serves_rollouts, cls.scores_text, cls.population_targets) == \
        (False, False, False, ("all",))
    with pytest.raises(ConfigError, match="grpo.rollouts=engine needs an engine that serves rollouts"):
        run_config("model=tiny-xs", "engine=toy", "algo=grpo", "grpo.rollouts=engine")
    with pytest.raises(ConfigError, match="engine toy cannot do here"):
        run_config("model=tiny-xs", "engine=toy", "eval.probes=[passages]")

    @dataclass(frozen=True)
    class Bare(engines.EngineConfig):
        name: str = "bare"
        engine: ClassVar[Any] = type("BareEngine", (), {"batches_population": False})

    monkeypatch.setitem(engines.ENGINES, "bare", Bare)
    with pytest.raises(ConfigError, match="BareEngine does not state population_targets, population_full_rank, "
                                          "holds_weights, serves_rollouts, scores_text"):
        engines.engine_class({"name": "bare"})


def test_a_toy_engine_runs_es_through_the_sweep(tmp_path):
    proc = _sweep(*SMALL, "engine=toy", root=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run,) = (tmp_path / "default" / "runs").iterdir()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["config"]["engine"]["name"] == "toy"
    train = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    train = [x for x in train if x["kind"] == "train"]
    assert [x["iteration"] for x in train] == [1, 2] and all(x["update_norm"] > 0 for x in train)
    assert all(x["drift"] > 0 for x in train)  # the toy engine's weights moved
    # its capability, not its name, refuses the batched population: one line, exit 2, nothing run
    refused = _sweep(*SMALL, "engine=toy", "es.batched=true", "sweep.name=batched", root=tmp_path)
    err = refused.stderr.strip()
    assert refused.returncode == 2 and err.startswith("esopt: error: es.batched needs an engine that batches")
    assert len(err.splitlines()) == 1 and not (tmp_path / "batched" / "runs").exists()


if __name__ == "__main__":
    from esopt.cli.sweep import main

    _register()
    main()
