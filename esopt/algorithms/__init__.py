"""The training algorithms and their registry.

Each entry of :data:`ALGORITHMS` declares, in one place, everything that differs per algorithm;
the run lifecycle (``esopt.runtime``), the sweepers and the study read the entry and never ask
an algorithm its name:

- ``module``: where its ``train(ctx)`` lives, beside ``validate(cfg)`` (every check of its
  knobs, before any work: required of an algorithm that trains), ``resolve(cfg, iterations)``
  (its blocks parsed, once, with every default filled in: what the run's plan holds and ``train`` reads as
  ``ctx.settings``), ``estimate_tokens(settings, iterations, budget)`` (generated-token upper
  bound of a phase, from those resolved settings) and ``budgets(cfg)`` (the iterations of each
  phase; default one phase of all of them). ``None``: it trains nothing (the base model is
  evaluated only). A population strategy over weight perturbations (ES, random search) is one
  class instead (``"esopt.algorithms.es:ES"``, an ``esopt.algorithms.strategy.Strategy``):
  those functions are its own, inherited by a variant, and the shared loop
  (``esopt.algorithms.trainer``) checkpoints its state;
- ``blocks``: the config blocks it reads (:class:`Block`: ``es:``, ``grpo:``, ...), each a
  documented dataclass in its algorithm's module. The registry composes every algorithm's
  blocks into the Hydra config (``esopt.cli.configs``), so a grid holding several algorithms
  accepts any of their keys; each run keeps its own blocks (``esopt.runtime.validate``);
- ``reads``: the top-level axes of :data:`AXES` it reads. What a run does not read stays out of
  its run id, and a grid key it does not read is one note, never an error
  (``esopt: note: es.batch_size has no effect with algo=none``);
- ``phases``: for a sequence, the registered algorithms it runs one after another;
- run time: ``multi_rank`` (several processes split its work), ``shares_gpu`` (it trains the
  model by gradients on the GPU, beside an engine that holds its own weights),
  ``master_weights`` (it trains fp32 master weights whatever ``model.dtype``: GRPO);
- the study: ``kind`` (what the claims count its runs as); the report: ``color`` and ``order``.

    algo = get("es")
    algo.validate(rc); algo.resolve(rc); algo.train(ctx); algo.estimate_tokens(phase, budget); algo.uses("pop")

Adding an algorithm is one module (its config dataclass, ``train``, ``validate``, optionally
``estimate_tokens``) plus one :func:`register` line below (from outside the package: the same
call; tests/algorithms/test_toy_algorithm.py does it); adding a population strategy is one
class and its line (tests/algorithms/test_toy_strategy.py).

- ``none``: evaluate the base model only.
- ``es``: evolution strategies (``esopt.algorithms.es.ES``; noise in ``esopt.noise``).
- ``grpo``: GRPO through TRL's GRPOTrainer (``esopt.algorithms.grpo``).
- ``grpo_es`` / ``es_grpo``: one after the other (``esopt.algorithms.sequence``).
- ``random_search``: ES's perturbations, moving to the best one
  (``esopt.algorithms.random_search.RandomSearch``).
"""

from __future__ import annotations

import importlib
from dataclasses import asdict, dataclass, fields
from types import ModuleType
from typing import Any, Optional

from esopt.core.config import ANALYSIS_KEYS
from esopt.core.errors import ConfigError

# The run's top-level axes that only some algorithms read (each entry's `reads` says which);
# every other top-level key (model, task, engine, seed, eval, ...) every run reads.
AXES = ("pop", "sigma", "lr", "iterations")


def load(ref: Any) -> Any:
    """``"package.module:NAME"`` -> that object, imported on first use (the algorithm modules
    import torch and transformers; the registry stays light). Anything else is returned as is."""
    if not isinstance(ref, str):
        return ref
    module, _, name = ref.partition(":")
    obj = importlib.import_module(module)
    return getattr(obj, name) if name else obj


@dataclass(frozen=True)
class Block:
    """One config block: ``name:`` in the run config, its keys the fields of a documented
    dataclass declared by the algorithm that owns it."""

    name: str
    config: Any              # the dataclass, or "module:Class" (imported when first needed)
    speed_only: Any = ()     # keys that change how fast a run goes, never its numbers (not in its
    #                          run id): a tuple, or "module:NAME" of one
    sizes: tuple = ()        # (key, kind, what it counts) of its size-like keys, each bounded by the
    #                          limit of its kind (esopt.runtime.limits.SIZE_LIMITS) before dispatch
    budget: Optional[str] = None  # its generation-budget key (null = the task's default): the
    #                          context check bounds the longest prompt plus the largest budget
    id_neutral: Any = ()     # (key, value) pairs: a key at that value is left out of the run id (a
    #                          knob added later keeps the ids runs had before it): a tuple or "module:NAME"
    inert: Any = None        # "module:function": block dict -> {key: why} of the keys its other values
    #                          leave unread (es.perturb_rank without es.batched): said in a note, resolved to the default
    id_form: Any = None      # "module:function": (block dict, engine name) -> the dict the run id hashes (a
    #                          value spelt another way later hashed as it was); None = as it is
    renamed: tuple = ()      # (old key, "block.key" it is now) of a key renamed or moved to another block: the
    #                          old spelling is accepted for one release (one warning line, esopt.core.config.
    #                          renamed) and the run id hashes the value under it, so ids stay as they were

    def dataclass(self) -> type:
        return load(self.config)

    def defaults(self) -> dict:
        """Every key with its default (the Hydra node ``esopt.cli.configs`` registers), and each
        renamed key's old spelling at null (so Hydra accepts it; :func:`renames` moves it)."""
        return {**asdict(self.dataclass()()), **{old: None for old, _ in self.renamed}}

    def keys(self) -> tuple[str, ...]:
        return tuple(f.name for f in fields(self.dataclass()))

    def speed_keys(self) -> tuple[str, ...]:
        return tuple(load(self.speed_only))

    def neutral_values(self) -> tuple[tuple[str, Any], ...]:
        return tuple(load(self.id_neutral))

    def id_dict(self, values: dict, engine: Any = None) -> dict:
        """The block's values as the run id hashes them: each renamed key under its old spelling
        (``renamed``; a key moved to the engine block is read from ``engine``, the run's typed
        engine config or its block), then its ``id_form`` (given the engine's name, which a
        spelling's meaning may depend on)."""
        from esopt import engines

        out = dict(values)
        block = None if engine is None or isinstance(engine, str) else engine
        if isinstance(block, engines.EngineConfig):
            block = asdict(block)
        name = block.get("name", "hf") if block is not None else engine
        for old, new in self.renamed:
            head, _, key = new.partition(".")
            if head == self.name and key in out:
                out[old] = out.pop(key)
            elif head == "engine" and block is not None:  # as written, else its engine's default
                out[old] = block[key] if key in block else getattr(engines.ENGINES.get(name, engines.EngineConfig)(), key)
        return out if self.id_form is None else load(self.id_form)(out, name)

    def inert_keys(self, raw: dict | None) -> dict[str, str]:
        """``{"<block>.<key>": why}`` for the keys of the block as written that its other values
        leave unread (the block's ``inert`` function; none without one)."""
        if self.inert is None:
            return {}
        return {f"{self.name}.{k}": why for k, why in load(self.inert)(dict(raw or {})).items()}


@dataclass(frozen=True)
class Algorithm:
    """One registry entry (module docstring)."""

    name: str
    summary: str                       # one line for --help and the docs
    module: Any = None                 # "esopt.algorithms.grpo", "esopt.algorithms.es:ES" (a strategy
    #                                    class), or either object; None = trains nothing
    blocks: tuple[Block, ...] = ()     # the config blocks it reads
    reads: tuple[str, ...] = ()        # the top-level axes (AXES) it reads
    phases: tuple[str, ...] = ()       # a sequence: the registered algorithms it runs, in order
    multi_rank: bool = False           # runs as several processes (ranks) splitting its work: ES's members,
    #                                    GRPO's batch (data parallel through accelerate, FSDP2 on GPUs)
    shares_gpu: bool = False           # trains the model by gradients beside an engine that holds its own
    #                                    weights (vLLM), on the same GPU, which then takes at most the
    #                                    engine's colocated_gpu_share of it (GRPO); False = the model is only
    #                                    the engine's host copy and stays on the CPU
    master_weights: bool = False       # trains fp32 master weights (and fp32 optimizer state) whatever
    #                                    model.dtype, computing in model.dtype by autocast (GRPO); False =
    #                                    updates the loaded weights in place, in their dtype (ES)
    checkpoint_copies: float = 0.0     # its resume checkpoint's size in copies of the weights (the
    #                                    sweep's disk estimate, esopt.runtime.budget): ES 1 (the weights),
    #                                    GRPO 3 (the weights and AdamW's two moments)
    kind: Optional[str] = None         # what the study's claims count it as: "es" (a population
    #                                    strategy: its runs feed the population claims, sparsity and
    #                                    member scoring), "grpo", "sequence"; None = outside the claims
    generated_share: float = 0.67      # generated tokens over the token bound of its runs when no recorded
    #                                    run of the task and model family says (esopt.runtime.budget):
    #                                    SmolLM2's ES runs generated 0.58-0.77 of the bound; its GRPO runs
    #                                    0.25-0.28 of ES's tokens at a bound ratio of 0.84 (0.21), their
    #                                    evaluations short after GRPO taught short answers (issue 54)
    train_passes: float = 0.0          # forward+backward passes over each generated training token (GRPO:
    #                                    its policy update, x grpo.num_iterations); priced at the training
    #                                    rate, apart from generation (esopt.runtime.budget.run_cost)
    color: str = "#7f7f7f"             # its colour in the report
    order: int = 99                    # its place in the report's legends and tables

    @property
    def trains(self) -> bool:
        """Whether it trains at all (``none`` does not: its final evaluation is the base one)."""
        return self.module is not None

    @property
    def block_names(self) -> tuple[str, ...]:
        return tuple(b.name for b in self.blocks)

    def _module(self) -> ModuleType:
        return load(self.module)

    def uses(self, key: str) -> bool:
        """Whether a run of this algorithm reads ``key``: a top-level axis (``pop``), a block
        (``es``) or a key in one (``es.batch_size``; ``+``/``~`` prefixes ignored). Keys no
        algorithm owns (model, task, engine, seed, eval, ...) every run reads; ``analysis`` (and
        its options, ``sparsity``) reads the trained weights, so only an algorithm that trains
        reads it."""
        head = str(key).lstrip("+~").split(".", 1)[0]
        if head in AXES:
            return head in self.reads
        if head in blocks():
            return head in self.block_names
        if head in ANALYSIS_KEYS:
            return self.trains
        return True

    def validate(self, cfg) -> None:
        """Every check of this algorithm's knobs, before any work (ConfigError, one line)."""
        if not self.trains:
            return
        check = getattr(self._module(), "validate", None)
        if check is None:  # a module without checks would run unchecked: never silently
            raise TypeError(f"algo {self.name!r}: {self.module!r} declares no validate(cfg)")
        check(cfg)

    def resolve(self, cfg, iterations: int | None = None) -> Any:
        """This algorithm's block resolved for one run or phase of ``iterations`` (default the
        run's): its module's ``resolve(cfg, iterations)`` (ES: an ``ESRun`` with sigma / lr filled
        in; GRPO: its settings with lr filled in), checked; None when it declares none (``none``,
        a sequence: its phases resolve). ``esopt.runtime.validate`` calls it once per phase and
        keeps the result in the run's plan."""
        fn = getattr(self._module(), "resolve", None) if self.trains and not self.phases else None
        return None if fn is None else fn(cfg, int(cfg.iterations if iterations is None else iterations))

    @property
    def resolved_blocks(self) -> tuple[str, ...]:
        """The blocks its ``resolve`` parses (all of its own, when its module declares one): a
        run's validation leaves their parsing to it, so each block is parsed once."""
        resolves = self.trains and not self.phases and getattr(self._module(), "resolve", None) is not None
        return self.block_names if resolves else ()

    def phase_names(self) -> tuple[str, ...]:
        """The algorithms it runs, in order: its ``phases``, or itself when it trains; ()."""
        return self.phases or ((self.name,) if self.trains else ())

    def train(self, ctx):
        """Train ``ctx.model`` through ``ctx.engine``; returns the final evaluation or None."""
        return self._module().train(ctx) if self.trains else None

    def budgets(self, cfg) -> tuple[int, ...]:
        """The iterations of each phase, in order (their ends are evaluated); () = no training."""
        if not self.trains:
            return ()
        split = getattr(self._module(), "budgets", None)
        return tuple(split(cfg)) if split is not None else (int(cfg.iterations),)

    def checkpoint_saves(self, phase, eval_every: int) -> int:
        """Checkpoints one phase of a run's plan (``PhasePlan``) writes on its schedule (its
        module's ``checkpoint_saves(settings, iterations, eval_every)``; 0 when it declares
        none): what ``sweep.keep_checkpoints`` keeps (``esopt.runtime.budget.run_disk``)."""
        fn = getattr(self._module(), "checkpoint_saves", None) if self.trains else None
        return int(fn(phase.settings, int(phase.iterations), int(eval_every))) if fn is not None else 0

    def estimate_tokens(self, phase, budget: int, train_rows: int | None = None) -> int:
        """Upper bound on the generated training tokens of one phase of a run's plan
        (``esopt.runtime.runplan.PhasePlan``: its resolved settings over its iterations), every
        completion using its whole ``budget``; ``train_rows`` (the train split's size, when
        known) clamps per-iteration sizes as the run does. 0 when the module declares none."""
        estimate = getattr(self._module(), "estimate_tokens", None) if self.trains else None
        if estimate is None:
            return 0
        import inspect

        n = int(phase.iterations)
        if train_rows is not None and "train_rows" in inspect.signature(estimate).parameters:
            return int(estimate(phase.settings, n, budget, train_rows=train_rows))
        return int(estimate(phase.settings, n, budget))


ALGORITHMS: dict[str, Algorithm] = {}


def blocks() -> dict[str, Block]:
    """Every registered algorithm's config blocks, by name (the registry composes them all into
    the Hydra config, so a grid over several algorithms accepts any of their keys)."""
    out: dict[str, Block] = {}
    for algo in ALGORITHMS.values():
        for b in algo.blocks:
            out.setdefault(b.name, b)
    return out


def register(algo: Algorithm) -> Algorithm:
    """Add ``algo`` to the registry (a new block name must not clash with another's block)."""
    for b in algo.blocks:
        known = blocks().get(b.name)
        if known is not None and known.config != b.config:
            raise ValueError(f"block {b.name!r} of algo {algo.name!r} is already {known.config!r}")
    unknown = [k for k in algo.reads if k not in AXES]
    if unknown:
        raise ValueError(f"algo {algo.name!r} reads {unknown}, not among the top-level axes {AXES}")
    ALGORITHMS[algo.name] = algo
    return algo


def sequence_of(name: str, summary: str, *phases: str, **entry: Any) -> Algorithm:
    """A sequence entry (``esopt.algorithms.sequence``): the phases' blocks and axes, plus
    ``sequence:`` (its split of the iterations)."""
    parts = [get(p) for p in phases]
    own = [b for a in parts for b in a.blocks] + [SEQUENCE]
    return Algorithm(
        name, summary, "esopt.algorithms.sequence", blocks=tuple({b.name: b for b in own}.values()),
        reads=tuple(k for k in AXES if any(k in a.reads for a in parts)), phases=tuple(phases),
        shares_gpu=any(a.shares_gpu for a in parts),
        master_weights=any(a.master_weights for a in parts),
        checkpoint_copies=sum(a.checkpoint_copies for a in parts),
        generated_share=sum(a.generated_share for a in parts) / len(parts), **entry)


def get(name: str) -> Algorithm:
    if name not in ALGORITHMS:
        raise ConfigError(f"unknown algo {name!r} (known: {', '.join(ALGORITHMS)})")
    return ALGORITHMS[name]


def trains(name: Any) -> bool:
    """Whether runs of algorithm ``name`` train (a name no entry has, e.g. in results written by
    another version, counts as training: only the registry's ``none`` is the base model)."""
    entry = ALGORITHMS.get(name)
    return entry.trains if entry is not None else True


def renames() -> dict[str, str]:
    """Every renamed block key, ``{"<block>.<old key>": "<block>.<key>"}`` (each block's
    ``renamed``): what ``esopt.core.config.renamed`` moves, with one warning line."""
    return {f"{b.name}.{old}": new for b in blocks().values() for old, new in b.renamed}


def kind(name: Any) -> Optional[str]:
    """What the claims count algorithm ``name`` as (its entry's ``kind``; None for unknown names)."""
    entry = ALGORITHMS.get(name)
    return entry.kind if entry is not None else None


ES = Block("es", "esopt.algorithms.es:ESConfig", speed_only="esopt.algorithms.es:SPEED_ONLY",
           id_neutral="esopt.algorithms.es:ID_NEUTRAL", inert="esopt.algorithms.es:inert_keys",
           sizes=(("batch_size", "batch", "training prompts per iteration"),
                  ("samples", "samples", "completions per prompt per member"),
                  ("perturb_rank", "rank", "perturbation rank"), ("max_new_tokens", "new_tokens", "generation budget")),
           budget="max_new_tokens", renamed=(("rank", "es.perturb_rank"),))
GRPO = Block("grpo", "esopt.algorithms.grpo:GRPOSettings", id_form="esopt.algorithms.grpo:id_form",
             id_neutral="esopt.algorithms.grpo:ID_NEUTRAL",
             renamed=(("vllm_gpu_memory_utilization", "engine.colocated_gpu_share"),),
             sizes=(("num_generations", "generations", "group size"),
                    ("prompts_per_step", "batch", "prompts per optimizer step"),
                    ("grad_accum", "grad_accum", "micro-batches per step"),
                    ("max_completion_length", "new_tokens", "generation budget")),
             budget="max_completion_length")
SEQUENCE = Block("sequence", "esopt.algorithms.sequence:SequenceConfig")

register(Algorithm("none", "evaluate the base model only", color="#7f7f7f", order=0))
register(Algorithm("es", "evolution strategies", "esopt.algorithms.es:ES", (ES,), AXES, multi_rank=True,
                   kind="es", checkpoint_copies=1.0, color="#1f77b4", order=1))
register(Algorithm("grpo", "GRPO through TRL", "esopt.algorithms.grpo", (GRPO,), ("lr", "iterations"),
                   multi_rank=True, shares_gpu=True, master_weights=True, kind="grpo",
                   checkpoint_copies=3.0, generated_share=0.21, train_passes=1.0, color="#d62728", order=2))
register(sequence_of("grpo_es", "GRPO, then ES from its weights", "grpo", "es", kind="sequence",
                     color="#9467bd", order=3))
register(sequence_of("es_grpo", "ES, then GRPO from its weights", "es", "grpo", kind="sequence",
                     color="#2ca02c", order=4))
register(Algorithm("random_search", "random search over ES's perturbations (a baseline)",
                   "esopt.algorithms.random_search:RandomSearch", (ES,), ("pop", "sigma", "iterations"),
                   checkpoint_copies=1.0, color="#ff7f0e", order=5))
