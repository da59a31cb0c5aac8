"""vLLM engine: a thin adapter with the HF engine's interface, for GPU runs (extra: esopt[vllm]).

Differences from the hf engine, by design of vLLM:
- Sampling uses vLLM's own per-request generators (request p gets seed hash(seed, p)), so a
  seed is deterministic within vLLM but does not reproduce the hf engine's samples.
- Entropy is approximate: vLLM returns only the top-`entropy_topk` log-probabilities per token
  (of the raw, unscaled distribution), so the per-token entropy is that of the renormalised
  top-k distribution at the sampling temperature, which underestimates the full-vocabulary
  value. Use the hf engine when entropy matters exactly.
- Prefix caching is off (a KV cache computed under one ES perturbation must never be reused
  under another).
- Weight access goes through `LLM.collective_rpc` and a worker extension; `named_parameters()`
  raises until that is wired (ES issue).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from esopt.core.errors import ConfigError
from esopt.engines.base import Generation


def _import_vllm():
    try:
        import vllm
    except ImportError:
        raise ConfigError("engine 'vllm' needs the vllm extra: pip install esopt[vllm]") from None
    return vllm


class VLLMEngine:
    def __init__(self, llm, tokenizer=None, max_batch: int = 256, entropy_topk: int = 20):
        import torch

        self.llm = llm
        self.model = llm
        self.tokenizer = tokenizer if tokenizer is not None else llm.get_tokenizer()
        self.device = torch.device("cuda")
        self.max_batch = max_batch  # vLLM schedules its own batches (max_num_seqs); informational
        self.entropy_topk = entropy_topk
        self.special_ids = set(self.tokenizer.all_special_ids)

    @classmethod
    def from_config(cls, cfg, model, tokenizer) -> "VLLMEngine":
        """cfg: ``esopt.engines.VLLMConfig``; model: a hub id / local path, or a loaded HF model
        (its name_or_path is used)."""
        vllm = _import_vllm()
        path = model if isinstance(model, str) else getattr(model, "name_or_path", None)
        if not path:
            raise ConfigError("engine 'vllm' needs a model name or path (the HF model has no name_or_path)")
        llm = vllm.LLM(
            model=str(path),
            dtype=cfg.dtype,
            gpu_memory_utilization=float(cfg.gpu_memory_utilization),
            tensor_parallel_size=int(cfg.tensor_parallel_size),
            enforce_eager=bool(cfg.enforce_eager),
            max_num_seqs=int(cfg.max_batch),
            enable_prefix_caching=False,  # a KV cache from one perturbation must not serve another
            # ES weight ops (perturb / restore / update) run inside the workers via collective_rpc
            worker_extension_cls="esopt.engines.vllm_worker.ESWorkerExtension",
            seed=int(cfg.seed),
            **({"max_model_len": int(cfg.max_model_len)} if cfg.max_model_len else {}),
        )
        return cls(llm, tokenizer, max_batch=int(cfg.max_batch), entropy_topk=int(cfg.entropy_topk))

    def weights(self):
        """ES's weight operations inside the vLLM workers (``LLM.collective_rpc``)."""
        from esopt.engines.vllm_worker import VLLMWeights

        return VLLMWeights(self.llm)

    def sync_from(self, model) -> None:
        raise NotImplementedError("copying HF weights into the vLLM workers is not wired yet")

    sync_to = sync_from

    def close(self) -> None:
        self.llm = None

    def generate(
        self,
        prompts: Sequence[str],
        *,
        n: int = 1,
        temperature: float = 0.0,
        top_p: float = 1.0,
        max_new_tokens: int = 32,
        seed: int = 0,
        stop: Sequence[str] = (),
        return_entropy: bool = False,
    ) -> Generation:
        vllm = _import_vllm()
        greedy = temperature <= 0
        params = [
            vllm.SamplingParams(
                n=1 if greedy else n,
                temperature=0.0 if greedy else temperature,
                top_p=1.0 if greedy else top_p,
                max_tokens=max_new_tokens,
                seed=(seed * 1_000_003 + p) % (2**31 - 1),
                stop=list(stop) or None,
                include_stop_str_in_output=True,  # keep the stop string, as the hf engine does
                logprobs=self.entropy_topk if return_entropy else None,
            )
            for p in range(len(prompts))
        ]
        outs = self.llm.generate(list(prompts), params, use_tqdm=False)
        comps, ids, lens, ents = [], [], [], []
        for out in outs:
            samples = list(out.outputs) * (n if greedy else 1)
            c_p, i_p, l_p, e_p = [], [], [], []
            for s in samples:
                tok = list(s.token_ids)
                l_p.append(len(tok))  # vLLM keeps the EOS id in token_ids (not in text)
                eos_stop = s.finish_reason == "stop" and s.stop_reason is None
                i_p.append(tok[:-1] if eos_stop and tok and tok[-1] in self.special_ids else tok)
                c_p.append(s.text)
                if return_entropy:
                    e_p.append(self._approx_entropy(s.logprobs, 1.0 if greedy else temperature))
            comps.append(c_p), ids.append(i_p), lens.append(l_p), ents.append(e_p)
        return Generation(
            completions=comps, token_ids=ids, lengths=lens, entropy=ents if return_entropy else None,
            n_tokens=int(sum(sum(x) for x in lens)),
        )

    @staticmethod
    def _approx_entropy(logprobs, temperature: float) -> float:
        """Token mean of the entropy of the renormalised top-k distribution at `temperature`."""
        hs = []
        for step in logprobs or []:
            lp = np.array([v.logprob for v in step.values()], dtype=np.float64) / temperature
            lp = lp - np.logaddexp.reduce(lp)
            hs.append(float(-(np.exp(lp) * lp).sum()))
        return float(np.mean(hs)) if hs else float("nan")
