"""What every engine returns and offers: the ``Generation`` record, the ``Engine`` protocol,
and the token-entropy formulas the engines compute while generating.

Every caller (the evaluator, ES, GRPO, the run lifecycle, the analyses) talks to an engine only
through this protocol, weight access included, so none of them asks which engine it has.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol

import torch


@dataclass
class Generation:
    completions: list[list[str]]  # [prompt][sample], decoded, without prompt / pad / EOS
    token_ids: list[list[list[int]]]  # generated ids per sample (EOS excluded)
    lengths: list[list[int]]  # generated token count per sample (EOS included)
    entropy: list[list[float]] | None  # per-sample token-mean entropy (nats) if requested
    n_tokens: int  # total generated tokens (sum of lengths)

    def split(self, parts: int) -> list["Generation"]:
        """``parts`` equal consecutive slices of the prompts (one batched call over a population
        whose member k generated prompts ``k * P .. (k + 1) * P - 1``)."""
        P = len(self.completions) // parts if parts else 0
        out = []
        for k in range(parts):
            sl = slice(k * P, (k + 1) * P)
            out.append(Generation(
                completions=self.completions[sl], token_ids=self.token_ids[sl], lengths=self.lengths[sl],
                entropy=self.entropy[sl] if self.entropy is not None else None,
                n_tokens=int(sum(sum(x) for x in self.lengths[sl]))))
        return out


class WeightOps(Protocol):
    """ES's weight operations on the weights an engine generates with
    (``esopt.engines.weights.Weights`` on in-process tensors; ``esopt.engines.vllm_worker.VLLMWeights``
    inside vLLM workers). Noise is keyed by Hugging Face parameter names, so the same member
    seed perturbs the same weights on every engine; the arithmetic is ``esopt.noise``'s."""

    def perturb(self, member_seed: int, sigma: float, sign: float = 1.0, rank: int | None = None,
                targets: str = "all") -> int: ...
    def restore(self) -> None: ...
    def update(self, seeds, weights, lr: float, rank: int | None = None, n: int | None = None,
               targets: str = "all") -> float: ...
    def anchor(self, decay: float) -> float: ...
    def checksum(self) -> int: ...
    def nonfinite(self) -> str | None: ...
    def snapshot_base(self) -> None: ...
    def drift(self) -> float | None: ...


class Engine(Protocol):
    """A generator over one set of weights, built from its config block by ``from_config``.

    ``generate`` samples completions; ``weights()`` gives ES's weight operations on the weights
    ``generate`` uses; ``sync_from(model)`` makes the engine generate with an HF model's current
    weights (after a GRPO step) and ``sync_to(model)`` copies the engine's weights into the HF
    model (before saving it) -- both are no-ops when the engine generates with that very model
    object (the hf engine).

    An engine class subclasses this protocol, so it states every capability below (the
    defaults: an engine that only generates) and inherits the hooks it does not need; callers
    read them from the class (``esopt.engines.engine_class``) before an engine is built, never
    probe for them, and never ask an engine its name. Capabilities:

    ``batches_population``
        ``generate_population`` scores many ES members in batched forward passes without
        touching the shared weights (``es.batched``); an engine without it raises
        NotImplementedError there and ES scores members one after another.
    ``population_targets``
        The ``es.targets`` a batched population perturbs here, its default first (``all``, or
        ``linear``: the linear layers' weights, what LoRA reaches).
    ``population_full_rank``
        A batched population may be full rank (``es.full_rank``: per-member weight copies);
        False: low-rank members only.
    ``holds_weights``
        The engine generates with its own copy of the weights (vLLM's worker), not with the HF
        model object it was built from: ``sync_from`` / ``sync_to`` move them, and the HF model
        is only a host-side copy (saving, GRPO's policy).
    ``serves_rollouts``
        ``rollouts(prompt_ids, ..., first_row=0)`` samples one completion per prompt as token
        ids, row ``i`` seeded as global row ``first_row + i`` (what a gradient trainer's rollout
        function returns: GRPO's ``grpo.rollouts=engine`` samples through the run's own engine
        instead of TRL's generate, and each of its processes draws its rows as one process would).
    ``scores_text``
        ``score_text(texts)`` scores given texts token by token (the likelihood probes of
        ``eval.probes``); an engine without it cannot run those probes (validation says so).

    Hooks, class methods run before any run starts: ``check`` (can it run the model here),
    ``check_population`` (can it batch this population) and ``prepare`` (its config block
    adjusted for the run). The engine's own knobs live in its config dataclass
    (``esopt.engines.EngineConfig``), which states what the rest of esopt asks of them
    (``gpus_per_engine``, ``gpu_share``, ``sharing_gpu``).
    """

    batches_population: ClassVar[bool] = False
    population_targets: ClassVar[tuple[str, ...]] = ("all",)
    population_full_rank: ClassVar[bool] = False
    holds_weights: ClassVar[bool] = False
    serves_rollouts: ClassVar[bool] = False
    scores_text: ClassVar[bool] = False
    tokenizer: object
    device: torch.device
    max_batch: int

    @classmethod
    def from_config(cls, cfg, model, tokenizer) -> "Engine": ...

    @classmethod
    def check(cls, cfg, model_cfg: Mapping) -> None:
        """Before any run starts: ConfigError (one line) when the engine cannot run the model here."""

    @classmethod
    def check_population(cls, cfg, model_cfg: Mapping, rank: int | None) -> None:
        """Before a run with ``es.batched=true``: ConfigError (one line) when this engine cannot
        batch a population of rank ``rank`` (None: full rank) members of the model."""

    @classmethod
    def prepare(cls, engine_cfg: dict, plan) -> dict:
        """The engine block as the run needs it (``plan``: the run's config, its blocks read
        through ``plan.block(name)``), e.g. vLLM's LoRA room for a batched population. The
        default: the block as written."""
        return engine_cfg

    def generate(self, prompts: Sequence[str], *, n: int = 1, temperature: float = 0.0, top_p: float = 1.0,
                 max_new_tokens: int = 32, seed: int = 0, stop: Sequence[str] = (),
                 return_entropy: bool = False, first_prompt: int = 0) -> Generation: ...

    def generate_population(self, prompts: Sequence[str], members: Sequence[tuple[int, float]], sigma: float, *,
                            rank: int | None, **gen_kwargs) -> list[Generation]:
        """One ``Generation`` per member ``(seed, sign)``: its completions of ``prompts`` under the
        weights ``theta + sign * sigma * eps(seed)`` (rank: EGGROLL low rank, None: full rank)."""
        raise NotImplementedError(f"{type(self).__name__} does not batch a population")

    def score_text(self, texts: Sequence[str]) -> list[tuple[int, float, int]]:
        """Per text, teacher-forced after its first token: (tokens scored, the sum of their log
        probabilities in nats, how many were the model's top-1 prediction)."""
        raise NotImplementedError(f"{type(self).__name__} does not score text")

    def rollouts(self, prompt_ids: Sequence[Sequence[int]], *, temperature: float, top_p: float = 1.0,
                 max_new_tokens: int, seed: int, stop: Sequence[str] = ()) -> list[list[int]]:
        """One sampled completion per prompt, as token ids including the EOS that ended it."""
        raise NotImplementedError(f"{type(self).__name__} does not serve rollouts")

    def weights(self) -> WeightOps: ...

    def sync_from(self, model) -> None: ...

    def sync_to(self, model) -> None: ...

    def close(self) -> None: ...


CAPABILITIES = ("batches_population", "population_targets", "population_full_rank", "holds_weights",
                "serves_rollouts", "scores_text")  # what Engine declares, every engine class states


def check_generate_args(n: int, max_new_tokens: int, top_p: float) -> None:
    """ValueError unless ``n >= 1``, ``max_new_tokens >= 1`` and ``0 < top_p <= 1`` (every engine's
    ``generate``)."""
    if n < 1 or max_new_tokens < 1:
        raise ValueError(f"generate needs n >= 1 and max_new_tokens >= 1, got {n}, {max_new_tokens}")
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")


def resolve_device(device: str | torch.device | None) -> str:
    """``engine.device``: ``auto`` (or None) -> ``cuda`` when a GPU is visible, else ``cpu``;
    anything else as given."""
    if device in (None, "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    return str(device)


def trim_at_stop(text: str, stop: Sequence[str]) -> str:
    """Cut text just after the earliest occurrence of any stop string (kept in the text), as
    every engine returns a completion that ended on a stop string."""
    cut = len(text)
    for s in stop:
        i = text.find(s)
        if i >= 0:
            cut = min(cut, i + len(s))
    return text[:cut]


def truncated(gen: Generation, max_new_tokens: int, stop: Sequence[str] = ()) -> list[list[bool]]:
    """Per prompt and sample: whether the completion was cut at ``max_new_tokens``, i.e. it used
    the whole budget without ending on EOS (``lengths`` counts the EOS, ``token_ids`` drops it)
    or on a stop string (every engine cuts the text just after the first one it holds)."""
    return [[n >= max_new_tokens and len(ids) == n and not any(s in text for s in stop)
             for text, ids, n in zip(texts, ids_p, ns)]
            for texts, ids_p, ns in zip(gen.completions, gen.token_ids, gen.lengths)]


def encode_prompts(tokenizer, prompts: Sequence[str]) -> list[list[int]]:
    """Prompt token ids as every engine feeds them to its model: the tokenizer's special tokens
    (BOS) added, unless every prompt already starts with the BOS text (chat templates)."""
    bos = tokenizer.bos_token
    add_special = not (bos and all(p.startswith(bos) for p in prompts))
    return tokenizer(list(prompts), add_special_tokens=add_special, padding=False)["input_ids"]


def entropy_per_token(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Entropy (nats) of softmax(z / T) at every position: H = logsumexp(z/T) - sum softmax(z/T) * z/T.

    logits [..., V] -> entropies [...], computed in float32; -inf logits (masked tokens) add 0.
    """
    if temperature <= 0:
        raise ValueError(f"entropy temperature must be > 0, got {temperature}")
    z = logits.float() / temperature
    lse = torch.logsumexp(z, dim=-1)
    p = torch.softmax(z, dim=-1)
    pz = torch.where(p > 0, p * z, torch.zeros_like(z))
    return lse - pz.sum(dim=-1)

