"""Upper bounds on every size-like input, checked before a run is dispatched.

Each bound is far above real use (the study's largest: pop 32, 64 prompts, 32 samples, a few
thousand iterations) and far below what fails by running out of memory: ``pop=1000000000``
would otherwise ask for 7.45 GiB of seeds, a 1e6-number data row or a 10 MB chat context an
11 GB KV cache. One ConfigError line names the input and its limit::

    esopt: error: pop=1000000000 is above the limit 4096 (ES members per iteration; esopt.runtime.limits)

:func:`check_sizes` bounds the config's numbers; :func:`check_context` bounds the longest
prompt of a split the run uses plus its generation budget by the model's context length
(``max_position_embeddings`` in its config.json; the tiny models': 128 positions) plus
:data:`CONTEXT_SLACK` positions.
"""

from __future__ import annotations

from collections.abc import Mapping

from esopt import algorithms
from esopt.core.errors import ConfigError

MAX_POP = 4096               # ES members per iteration (the study: <= 32; 4096 seeds x batch fits a node)
MAX_ITERATIONS = 10**7       # ES iterations / GRPO optimizer steps (the study: <= 1000)
MAX_SAMPLES = 4096           # completions per problem: eval.samples, es.samples (the study: 32)
MAX_PROBLEMS = 10**6         # eval.problems / eval.ood_problems (GSM8K test: 1319; MATH: 5000)
MAX_BATCH = 65536            # prompts per step: es.batch_size, grpo.prompts_per_step (the study: 64 / 8)
MAX_GENERATIONS = 4096       # GRPO group size grpo.num_generations (the study: 8)
MAX_GRAD_ACCUM = 65536       # grpo.grad_accum (divides prompts_per_step * num_generations)
MAX_RANK = 4096              # es.perturb_rank, EGGROLL's low-rank perturbation rank
MAX_NEW_TOKENS = 131072      # any generation budget (the longest hub-model context: 128k)
CONTEXT_SLACK = 2048        # prompt + generation <= the model's context + this many positions: past its
#                            context a RoPE model runs but degrades (the tiny models, 128 positions,
#                            are evaluated out of domain on GSM8K / MATH prompts of up to ~300 tokens);
#                            the bound stops what would exhaust memory (1e6 numbers, a 10 MB chat)
SIZE_LIMITS = {               # the limit of each kind of size-like key an algorithm's block declares
    "batch": MAX_BATCH, "samples": MAX_SAMPLES, "rank": MAX_RANK, "new_tokens": MAX_NEW_TOKENS,
    "generations": MAX_GENERATIONS, "grad_accum": MAX_GRAD_ACCUM,
}
LONGEST_PROMPTS = 4          # prompts tokenized per split by check_context (the longest by characters)
CHARS_PER_TOKEN_MAX = 8      # no tokenizer here: a prompt of more than the limit * this many characters is refused

_TOKENIZERS: dict[str, object] = {}


def _bound(name: str, value, limit: int, why: str) -> None:
    if value is not None and int(value) > limit:
        raise ConfigError(f"{name}={value} is above the limit {limit} ({why}; "
                          f"esopt.runtime.limits)")


def check_sizes(rc) -> None:
    """Every size-like number of ``rc`` (a RunConfig) against its limit above."""
    ev = rc.eval
    _bound("pop", rc.pop, MAX_POP, "ES members per iteration")
    _bound("iterations", rc.iterations, MAX_ITERATIONS, "training iterations / steps")
    _bound("eval.samples", ev.samples, MAX_SAMPLES, "completions per problem")
    _bound("eval.problems", ev.problems, MAX_PROBLEMS, "problems evaluated")
    _bound("eval.ood_problems", ev.ood_problems, MAX_PROBLEMS, "problems evaluated")
    _bound("eval.probe_problems", ev.probe_problems, MAX_PROBLEMS, "problems evaluated per probe")
    _bound("eval.probe_samples", ev.probe_samples, MAX_SAMPLES, "completions per problem")
    _bound("eval.max_new_tokens", ev.max_new_tokens, MAX_NEW_TOKENS, "generation budget")
    for block in algorithms.blocks().values():  # each block's size-like keys, as it declares them
        values = rc.blocks.get(block.name) or {}
        for name, kind, why in block.sizes:
            _bound(f"{block.name}.{name}", _int(values.get(name)), SIZE_LIMITS[kind], why)


def _int(value):
    """An integer block value, or None (its block's own check reports other types)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def context_length(model_cfg: Mapping) -> int | None:
    """The model's context (``max_position_embeddings``, of its text config when nested) when
    its config.json is on this machine, else None."""
    from esopt import models

    cfg = models.local_config(model_cfg["name"], model_cfg.get("path")) or {}
    cfg = cfg.get("text_config") or cfg
    n = cfg.get("max_position_embeddings") if isinstance(cfg, Mapping) else None
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


def budget(rc, task) -> int:
    """The longest generation the run asks for: eval.max_new_tokens (or the task's default)
    and the training budget of each of its blocks (``Block.budget``: es.max_new_tokens,
    grpo.max_completion_length)."""
    out = [rc.eval.max_new_tokens or task.max_new_tokens]
    for name, key, values in _budgets(rc):
        if values is not None:
            out.append(_int(values.get(key)) or task.max_new_tokens)
    return max(out)


def _budgets(rc) -> list[tuple]:
    """``(block, its budget key, the run's block or None)`` for every block that has a budget."""
    return [(b.name, b.budget, rc.blocks.get(b.name)) for b in algorithms.blocks().values() if b.budget]


def context_key(rc) -> list:
    """What :func:`check_context` depends on besides the task's rows (validation checks a
    task's data once per distinct key): the model and the configured generation budgets."""
    key = [rc.model.get("path") or rc.model["name"], rc.eval.max_new_tokens]
    for name, budget_key, values in _budgets(rc):
        key += [values is not None, (values or {}).get(budget_key)]
    return key


def _tokenizer(model_dir):
    """The model's tokenizer from its local directory or the Hugging Face cache (a hub id; never
    downloaded), cached per source, or None."""
    from esopt import models

    if model_dir is None:
        return None
    key = str(model_dir)
    if key not in _TOKENIZERS:
        tok = None
        try:
            from transformers import AutoTokenizer, PreTrainedTokenizerFast

            if models.is_char_tokenizer_dir(key):
                tok = PreTrainedTokenizerFast.from_pretrained(key)
            else:
                tok = AutoTokenizer.from_pretrained(key, trust_remote_code=False, local_files_only=True)
        except Exception:  # noqa: BLE001 - no usable tokenizer here: bound by characters
            tok = None
        _TOKENIZERS[key] = tok
    return _TOKENIZERS[key]


def check_context(rc, task, split: str, rows) -> None:
    """The longest prompts of ``rows`` (``task``'s ``split``) plus the generation budget must fit
    the model's context. Cheap: only the :data:`LONGEST_PROMPTS` longest by characters are
    tokenized (with the model's local tokenizer; without one, a prompt longer than
    ``limit * CHARS_PER_TOKEN_MAX`` characters is refused)."""
    from esopt import models

    ctx = context_length(rc.model)
    if ctx is None or "prompt" not in getattr(rows, "column_names", ()):
        return
    new = budget(rc, task)
    limit = ctx + CONTEXT_SLACK
    where = (f"the limit {limit}: the context of model {rc.model.get('path') or rc.model['name']} "
             f"({ctx} positions) + {CONTEXT_SLACK}")
    if new >= limit:
        raise ConfigError(f"the generation budget max_new_tokens={new} is not below {where}; lower "
                          "eval.max_new_tokens / es.max_new_tokens / grpo.max_completion_length")
    prompts = [p for p in rows["prompt"] if isinstance(p, str)]
    longest = sorted(range(len(prompts)), key=lambda i: len(prompts[i]), reverse=True)[:LONGEST_PROMPTS]
    model_dir = models.local_dir(rc.model)
    tok = _tokenizer(model_dir if model_dir is not None else models.REGISTRY.get(rc.model["name"]))
    for i in longest:
        text = prompts[i]
        if tok is None:
            if len(text) > limit * CHARS_PER_TOKEN_MAX:
                n = f"{len(text)} characters"
            else:
                continue
        else:
            if len(text) > limit * CHARS_PER_TOKEN_MAX:  # surely too long: do not tokenize megabytes
                n = f"{len(text)} characters"
            else:
                length = len(tok(text)["input_ids"])  # with BOS, as the engines feed it
                if length + new <= limit:
                    continue
                n = f"{length} tokens"
        raise ConfigError(f"task {task.name}: the {split} split's problem {i} has a prompt of {n}, which with "
                          f"max_new_tokens={new} exceeds {where}; shorten the data or "
                          "choose a model with a longer context")
