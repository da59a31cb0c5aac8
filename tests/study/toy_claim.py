"""A toy twelfth claim, declared in this one file (everything about it on its registry entry):
"ES's completions are shorter than GRPO's", read from a run field ``toy_length`` that the
simulator's core does not make, so its ``draw`` adds it to simulated runs. ``register()`` adds
it to the registry and ``rules.unregister(CID)`` takes it out again (tests/study/test_toy_claim.py)."""

import numpy as np

from esopt.core.metrics import contrast
from esopt.study.claims.rules import _cell, _enough, _probe, claim, measured, unclear

CID = 12
BASE_LENGTH, SD = 10.0, 0.3        # tokens (toy units): GRPO's mean length and the seeds' spread


def draw(recs, kn, c, rng, nothing_trains):
    """Each ES and GRPO run of the comparison cell ends at BASE_LENGTH (ES: minus the planted
    ``toy`` knob) + N(0, SD^2)."""
    for r in recs:
        if r.get("model") == "cell" and r.get("algo") in ("es", "grpo"):
            r["toy_length"] = BASE_LENGTH - (kn["toy"] if r["algo"] == "es" else 0.0) + rng.normal(0, SD)


def rule(data, s):
    es, grpo = data["es"], data["grpo"]
    if (few := _enough({"ES": es, "GRPO": grpo}, s)):
        return few
    e, g = _probe(es, "toy_length"), _probe(grpo, "toy_length")
    if e is None or g is None:
        return unclear("data", "toy_length in every ES and GRPO run")
    t = contrast([(g[:, None], 1.0), (e[:, None], -1.0)])
    return measured(t, f"length ES {e.mean():.2f}, GRPO {g.mean():.2f}", {"es_runs": len(es), "grpo_runs": len(grpo)})


def register():
    claim(CID, "toy_shorter", "ES's completions are shorter than GRPO's (a toy claim).",
          estimand="mean toy_length(GRPO) - mean toy_length(ES)", boundary=0.0, sesoi=1.0,
          statistic="Welch t", variance="seeds (runs)", select=_cell("es", "grpo"),
          strong=2.0, plant=lambda theta, k, *_: k.update(toy=theta), rest={"toy": 0.0}, draw=draw)(rule)
