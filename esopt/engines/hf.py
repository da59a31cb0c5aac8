"""Hugging Face `generate` engine (CPU or GPU).

Sampling is done by esopt, not by `generate`'s global-RNG multinomial: a logits processor turns
the logits into z/T (+ nucleus filter) + Gumbel noise and `generate` then takes the argmax
(Gumbel-max: an exact sample from softmax(z/T)). The Gumbel noise of token v at generation
step t of sequence r is a counter-based hash of (seed, r, t, v), where r = prompt_index * n +
sample_index. So a seed gives the same completions whatever `max_batch` (chunking) is, sample r
of a prompt sees the same noise under every model (common random numbers across ES members),
and no global torch RNG state is touched.

Entropy is computed on the fly from each step's raw logits at the sampling temperature
(temperature 1 for greedy), so no [B, L, V] logits are stored; per sample it is the mean over
its generated tokens (EOS included).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList
from transformers.generation.stopping_criteria import StopStringCriteria

from esopt.core import progress
from esopt.engines.base import (Engine, Generation, check_generate_args, encode_prompts, entropy_per_token,
                                resolve_device, trim_at_stop)

_M32 = 0xFFFFFFFF
_VOCAB_SALT = 0x632BE5AB   # offsets the token ids before hashing, so token v's key is not row v's
_GOLDEN = 0x9E3779B9       # 2^32 / golden ratio: spreads consecutive step numbers over the hash
_UNIFORM_BITS = 24         # random bits per uniform: (k + 0.5) / 2^24 is exact in fp32


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """lowbias32 integer hash on int64 tensors holding uint32 values (no int64 overflow:
    each 32-bit multiply is split into 16-bit halves)."""
    x = x ^ (x >> 16)
    x = ((x * 0x352D) + (((x * 0x7FEB) & 0xFFFF) << 16)) & _M32  # x * 0x7FEB352D mod 2^32
    x = x ^ (x >> 15)
    x = ((x * 0xA68B) + (((x * 0x846C) & 0xFFFF) << 16)) & _M32  # x * 0x846CA68B mod 2^32
    return x ^ (x >> 16)


def _row_keys(seed: int, rows: torch.Tensor) -> torch.Tensor:
    """Per-row 32-bit keys from (seed, global row index); constant over the steps of a call."""
    s = _mix32(seed & _M32) ^ ((seed >> 32) & _M32)  # python-int hash of the (any-size) seed
    return _mix32(rows.to(torch.int64) ^ s)


def _vocab_keys(vocab: int, device) -> torch.Tensor:
    return _mix32(torch.arange(vocab, device=device, dtype=torch.int64) + _VOCAB_SALT)


def _gumbel(row_keys: torch.Tensor, step: int, vocab_keys: torch.Tensor) -> torch.Tensor:
    r = _mix32(row_keys ^ _mix32((step * _GOLDEN) & _M32))
    bits = _mix32(r[:, None] ^ vocab_keys[None, :]) >> (32 - _UNIFORM_BITS)
    u = (bits.float() + 0.5) / float(1 << _UNIFORM_BITS)  # uniform in (0, 1), exactly representable
    return -torch.log(-torch.log(u))


def gumbel_noise(seed: int, rows: torch.Tensor, step: int, vocab: int) -> torch.Tensor:
    """Standard Gumbel noise [len(rows), vocab], a pure function of (seed, row, step, token):
    a counter-based generator (lowbias32 hashes), no torch RNG state involved."""
    return _gumbel(_row_keys(seed, rows), step, _vocab_keys(vocab, rows.device))


def top_p_filter(z: torch.Tensor, top_p: float) -> torch.Tensor:
    """Nucleus filter: keep the smallest set of highest-probability tokens whose mass reaches
    top_p (a token is kept iff the mass of strictly more probable tokens is < top_p)."""
    sz, idx = z.sort(dim=-1, descending=True)
    p = sz.softmax(-1)
    remove = (p.cumsum(-1) - p) >= top_p
    remove[..., 0] = False
    return z.scatter(-1, idx, sz.masked_fill(remove, float("-inf")))


class _Sampler(LogitsProcessor):
    """Records per-step entropy of the raw logits; for temperature > 0 returns z/T (nucleus
    filtered) + Gumbel noise so that generate's argmax is a seeded sample."""

    def __init__(self, rows, seed, temperature, top_p, prompt_width, entropy):
        self.row_keys = _row_keys(seed, rows)
        self.vocab_keys: torch.Tensor | None = None
        self.temperature, self.top_p = temperature, top_p
        self.prompt_width = prompt_width
        self.entropy = entropy
        self.entropies: list[torch.Tensor] = []

    def __call__(self, input_ids, scores):
        if self.entropy:
            self.entropies.append(entropy_per_token(scores, self.temperature if self.temperature > 0 else 1.0))
        if self.temperature <= 0:
            return scores
        z = scores / self.temperature
        if self.top_p < 1.0:
            z = top_p_filter(z, self.top_p)
        if self.vocab_keys is None or self.vocab_keys.shape[0] != z.shape[-1]:
            self.vocab_keys = _vocab_keys(z.shape[-1], z.device)
        step = input_ids.shape[1] - self.prompt_width
        return z + _gumbel(self.row_keys, step, self.vocab_keys)


class _Finish(StoppingCriteria):
    """EOS / stop-string criterion that also records each row's generated length (the step at
    which it finished, finishing token included)."""

    def __init__(self, eos_ids, stop_criteria, prompt_width, batch, device):
        self.eos_ids = eos_ids
        self.stop_criteria = stop_criteria
        self.prompt_width = prompt_width
        self.length = torch.full((batch,), -1, dtype=torch.long, device=device)

    def __call__(self, input_ids, scores, **kwargs):
        done = torch.isin(input_ids[:, -1], self.eos_ids)
        if self.stop_criteria is not None:
            done = done | self.stop_criteria(input_ids, scores)
        self.length = torch.where(done & (self.length < 0), input_ids.shape[1] - self.prompt_width, self.length)
        return done


class HFEngine(Engine):
    """Batched `model.generate` with n samples per prompt, chunked to `max_batch` sequences.
    It generates with the HF model object it is given (moved to ``device``, cast to ``dtype``
    unless auto), so ES perturbs that model's parameters and there is nothing to sync."""

    batches_population = True   # generate_population: esopt.engines.population
    population_targets = ("all", "linear")  # es.targets it batches (esopt.engines.lora)
    population_full_rank = True  # es.full_rank: per-member weight copies
    holds_weights = False       # generates with the caller's model object
    serves_rollouts = True      # rollouts(): keyed by the global row, so G processes draw what one does
    scores_text = True          # score_text: one teacher-forced forward pass per chunk of texts

    def __init__(self, model, tokenizer, device="auto", max_batch: int = 256, dtype: str = "auto"):
        if max_batch < 1:
            from esopt.core.errors import ConfigError

            raise ConfigError(f"engine.max_batch must be >= 1, got {max_batch}")
        self.device = torch.device(resolve_device(device))
        self.model = model.to(self.device).eval()
        if dtype != "auto":
            self.model = self.model.to(getattr(torch, dtype))
        self.tokenizer = tokenizer
        self.max_batch = int(max_batch)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        eos = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
        gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        eos |= set(gen_eos if isinstance(gen_eos, list) else [gen_eos] if gen_eos is not None else [])
        if not eos:
            raise ValueError("tokenizer has no eos_token_id")
        self.eos_ids = sorted(eos)
        self._stop_cache: dict[tuple[str, ...], StopStringCriteria] = {}

    @classmethod
    def from_config(cls, cfg, model, tokenizer) -> "HFEngine":
        """cfg: ``esopt.engines.HFConfig``."""
        return cls(model, tokenizer, device=cfg.device, max_batch=cfg.max_batch, dtype=cfg.dtype)

    @classmethod
    def check(cls, cfg, model_cfg) -> None:
        """Nothing to check before a run: transformers runs every model esopt loads."""

    def named_parameters(self) -> Iterator[tuple[str, torch.Tensor]]:
        """The model's live parameters (edit in place under torch.no_grad() for ES)."""
        return self.model.named_parameters()

    def weights(self):
        """ES's weight operations on the model this engine generates with (in place)."""
        from esopt.engines.weights import Weights

        if getattr(self, "_weights", None) is None:
            self._weights = Weights(self.model.named_parameters())
        return self._weights

    def sync_from(self, model) -> None:
        """Generate with ``model``'s weights: a no-op, this engine generates with that object."""
        if model is not self.model:
            raise ValueError("the hf engine generates with its own model object; pass that one")

    sync_to = sync_from

    def generate_population(self, prompts, members, sigma: float, *, rank: int | None, targets: str = "all", **kw):
        """Every member's completions of ``prompts`` in batched forward passes
        (``esopt.engines.population``: EGGROLL low-rank or full-rank member weights; ``targets``:
        all parameters, or the linear layers' weights only, ``esopt.engines.lora``)."""
        from esopt.engines import population

        return population.generate(self, prompts, members, sigma, rank=rank, targets=targets, **kw)

    def close(self) -> None:
        """Nothing to release (the model belongs to the caller)."""

    def _encode(self, prompts: Sequence[str]) -> list[list[int]]:
        return encode_prompts(self.tokenizer, prompts)

    @torch.inference_mode()
    def score_text(self, texts: Sequence[str]) -> list[tuple[int, float, int]]:
        """Per text: (tokens scored after the first, sum of their log probabilities in nats,
        top-1 hits), in right-padded chunks of ``max_batch`` texts (fp32 log-softmax)."""
        out = []
        encoded = self._encode(texts)
        for i in range(0, len(encoded), self.max_batch):
            chunk = encoded[i:i + self.max_batch]
            width = max(len(ids) for ids in chunk)
            ids = torch.full((len(chunk), width), self.pad_id, dtype=torch.long, device=self.device)
            mask = torch.zeros_like(ids)
            for r, seq in enumerate(chunk):
                ids[r, :len(seq)], mask[r, :len(seq)] = torch.tensor(seq, device=self.device), 1
            logp = torch.log_softmax(self.model(input_ids=ids, attention_mask=mask).logits[:, :-1].float(), dim=-1)
            target, keep = ids[:, 1:], mask[:, 1:].bool()
            picked = logp.gather(-1, target.unsqueeze(-1)).squeeze(-1)
            hits = (logp.argmax(-1) == target) & keep
            for r in range(len(chunk)):
                out.append((int(keep[r].sum()), float(picked[r][keep[r]].sum()), int(hits[r].sum())))
        return out

    @torch.inference_mode()
    def generate(self, prompts: Sequence[str], *, n: int = 1, temperature: float = 0.0, top_p: float = 1.0,
                 max_new_tokens: int = 32, seed: int = 0, stop: Sequence[str] = (),
                 return_entropy: bool = False, first_prompt: int = 0) -> Generation:
        """n samples for each prompt; temperature 0 = greedy (all n identical). See module doc.
        ``first_prompt``: the index of ``prompts[0]`` in a larger request whose samples this call
        reproduces (a rank's share of an evaluation): the sampling noise is keyed by that index."""
        check_generate_args(n, max_new_tokens, top_p)
        encoded = self._encode(prompts)
        stop = tuple(stop)
        eos_t, stop_crit, gconf = self._decoding(stop, max_new_tokens)
        total = len(encoded) * n
        ids_flat: list[list[int]] = []
        len_flat: list[int] = []
        ent_flat: list[float] = []
        with self._neutral_generation_config():
            for start in range(0, total, self.max_batch):
                rows = list(range(start, min(start + self.max_batch, total)))
                ids, lengths, ents = self._generate_rows([encoded[r // n] for r in rows],
                                                         [first_prompt * n + r for r in rows], gconf, eos_t,
                                                         stop_crit, seed, temperature, top_p, return_entropy)
                ids_flat += ids
                len_flat += lengths
                ent_flat += ents
                progress.generated(len(rows), sum(lengths))  # an evaluation's bar / log line
        texts = self.tokenizer.batch_decode(ids_flat, skip_special_tokens=True)
        if stop:
            texts = [trim_at_stop(t, stop) for t in texts]
        P = len(encoded)
        return Generation(
            completions=[texts[p * n:(p + 1) * n] for p in range(P)],
            token_ids=[ids_flat[p * n:(p + 1) * n] for p in range(P)],
            lengths=[len_flat[p * n:(p + 1) * n] for p in range(P)],
            entropy=[ent_flat[p * n:(p + 1) * n] for p in range(P)] if return_entropy else None,
            n_tokens=int(sum(len_flat)),
        )

    @torch.inference_mode()
    def rollouts(self, prompt_ids: Sequence[Sequence[int]], *, temperature: float, top_p: float = 1.0,
                 max_new_tokens: int, seed: int, stop: Sequence[str] = (), first_row: int = 0) -> list[list[int]]:
        """One sampled completion per prompt, as token ids including the EOS that ended it (GRPO's
        rollouts: esopt.algorithms.grpo). Row ``i`` is sampled as global row ``first_row + i`` (the
        sampler's noise is keyed by (seed, row, step, token)), so a process holding rows
        ``[first_row, first_row + len)`` of a step's batch draws exactly what one process drawing the
        whole batch does."""
        check_generate_args(1, max_new_tokens, top_p)
        eos_t, stop_crit, gconf = self._decoding(tuple(stop), max_new_tokens)
        out: list[list[int]] = []
        with self._neutral_generation_config():
            for start in range(0, len(prompt_ids), self.max_batch):
                rows = list(range(start, min(start + self.max_batch, len(prompt_ids))))
                ids, _, _ = self._generate_rows([list(prompt_ids[r]) for r in rows], [first_row + r for r in rows],
                                                gconf, eos_t, stop_crit, seed, temperature, top_p, False, keep_eos=True)
                out += ids
        return out

    def _decoding(self, stop: tuple[str, ...], max_new_tokens: int):
        """What every ``model.generate`` call of one request shares: the EOS ids as a tensor, the
        stop-string criteria (cached per stop tuple; None without stops) and the greedy config
        (sampling is the Gumbel-max logits processor of ``_generate_rows``)."""
        stop_crit = None
        if stop:
            if stop not in self._stop_cache:
                self._stop_cache[stop] = StopStringCriteria(self.tokenizer, list(stop))
            stop_crit = self._stop_cache[stop]
        gconf = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=False, num_beams=1, use_cache=True,
                                 eos_token_id=self.eos_ids, pad_token_id=self.pad_id)
        return torch.tensor(self.eos_ids, device=self.device), stop_crit, gconf

    @contextmanager
    def _neutral_generation_config(self):
        """The model's own generation_config (e.g. an instruct model's repetition_penalty, top_k)
        would fill every unset field of the call's config; generate under a neutral one instead."""
        saved = self.model.generation_config
        self.model.generation_config = GenerationConfig()
        try:
            yield
        finally:
            self.model.generation_config = saved

    def _generate_rows(self, seqs, rows, gconf, eos_t, stop_crit, seed, temperature, top_p, return_entropy,
                       keep_eos: bool = False):
        """One ``model.generate`` call over the sequences ``seqs`` (global row indices ``rows``,
        left-padded): per row the generated ids (EOS dropped unless ``keep_eos``), lengths (EOS
        counted) and, if asked, the token-mean entropy."""
        width = max(len(s) for s in seqs)
        input_ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        attn = torch.zeros((len(rows), width), dtype=torch.long)
        for i, s in enumerate(seqs):
            input_ids[i, width - len(s):] = torch.tensor(s, dtype=torch.long)
            attn[i, width - len(s):] = 1
        input_ids, attn = input_ids.to(self.device), attn.to(self.device)
        sampler = _Sampler(torch.tensor(rows, device=self.device), seed, temperature, top_p, width, return_entropy)
        finish = _Finish(eos_t, stop_crit, width, len(rows), self.device)
        out = self.model.generate(
            input_ids=input_ids, attention_mask=attn, generation_config=gconf,
            logits_processor=LogitsProcessorList([sampler]),
            stopping_criteria=StoppingCriteriaList([finish]),
        )
        gen = out[:, width:]
        steps = gen.shape[1]
        lengths = torch.where(finish.length < 0, steps, finish.length).clamp(max=steps)
        ended_eos = torch.isin(gen[torch.arange(len(rows)), (lengths - 1).clamp(min=0)], eos_t) & (lengths > 0)
        keep = (lengths if keep_eos else lengths - ended_eos.long()).tolist()
        ids = [g[:k] for g, k in zip(gen.tolist(), keep)]
        ents: list[float] = []
        if return_entropy:
            ent = torch.stack(sampler.entropies[:steps], dim=1)  # [B, steps]
            mask = torch.arange(steps, device=ent.device)[None, :] < lengths[:, None]
            ents = ((ent * mask).sum(1) / mask.sum(1).clamp(min=1)).tolist()
        return ids, lengths.tolist(), ents
