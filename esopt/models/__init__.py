"""Models: a registry of short names -> hub ids, models converted from an installed package
(``SOURCES``: ``smollm2-135m``, esopt/models/smollm2.py), and the embedded tiny family.

    model, tok = esopt.models.load("tiny-s")                 # shipped weights, no network
    model, tok = esopt.models.load("qwen1.5b", dtype="bfloat16", device="cuda")
    model, tok = esopt.models.load("qwen1.5b", path="/data/qwen")   # a local copy instead
    model, tok = esopt.models.load("smollm2-135m")           # after bash scripts/install_smollm2.sh

Every tokenizer comes back with ``padding_side="left"`` and a pad token (the EOS token when the
hub tokenizer has none). Models come back in eval mode.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Mapping
from pathlib import Path

import torch

from esopt.core.errors import ConfigError
from esopt.core.store import apply_umask, atomic_dir, write_manifest
from esopt.models.tiny import TINY, TINY_DIR, char_tokenizer

REGISTRY: dict[str, str] = {
    "qwen0.5b": "Qwen/Qwen2.5-0.5B-Instruct",
    "qwen1.5b": "Qwen/Qwen2.5-1.5B-Instruct",
    "qwen3b": "Qwen/Qwen2.5-3B-Instruct",
    "qwen7b": "Qwen/Qwen2.5-7B-Instruct",
    "llama1b": "meta-llama/Llama-3.2-1B-Instruct",
    "llama3b": "meta-llama/Llama-3.2-3B-Instruct",
    "llama8b": "meta-llama/Llama-3.1-8B-Instruct",
}
# Models whose weights come from an installed package instead of the hub: name -> (module,
# function); the function returns the local HF folder (converted into a cache on first use) or
# raises ConfigError (one line naming the install command). See esopt/models/smollm2.py.
SOURCES: dict[str, tuple[str, str]] = {
    "smollm2-135m": ("esopt.models.smollm2", "folder"),
}
DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
          "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}

__all__ = ["REGISTRY", "SOURCES", "TINY", "char_tokenizer", "check_dir", "is_char_tokenizer_dir", "is_tiny", "known_names",
           "load", "load_weights", "local_config", "local_dir", "n_params", "param_count", "safetensors_header", "save"]


def known_names() -> tuple[str, ...]:
    return (*TINY, *REGISTRY, *SOURCES)


def sourced_dir(name: str) -> Path:
    """The local folder of a ``SOURCES`` model (converting it on first use; ConfigError)."""
    module, function = SOURCES[name]
    return Path(getattr(importlib.import_module(module), function)())


def _source(name: str, path: str | None, revision: str | None = None) -> str:
    """Where to load ``name`` from: ``path`` if given, the shipped tiny dir, or the hub id (at
    ``revision``: its snapshot folder in the Hugging Face cache, fetched if missing and the hub
    is on, so every engine loads that commit)."""
    if path:
        p = Path(path).expanduser()
        if not p.is_dir():
            raise ConfigError(f"model path not found: {path}")
        return str(p)
    if name in TINY:
        d = TINY_DIR / name
        if not (d / "config.json").is_file():
            raise ConfigError(
                f"tiny model weights missing in {d}; build them with `python -m esopt.cli.pretrain`"
            )
        return str(d)
    if name in SOURCES:
        return str(sourced_dir(name))
    if name in REGISTRY and revision:
        from huggingface_hub import snapshot_download

        try:
            return snapshot_download(REGISTRY[name], revision=str(revision))
        except Exception as e:  # noqa: BLE001 - huggingface_hub's errors: offline, unknown revision, ...
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise ConfigError(f"model {name} ({REGISTRY[name]}) at revision {revision}: {first[:200]}") from None
    if name in REGISTRY:
        return REGISTRY[name]
    raise ConfigError(f"unknown model {name!r} (known: {', '.join(known_names())})")


MAX_HEADER = 100 << 20  # a safetensors header larger than this is corrupt (safetensors' own cap)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def safetensors_header(path: str | os.PathLike) -> dict:
    """The JSON header of a ``.safetensors`` file, read without its tensors: 8 bytes of
    little-endian header length, the header, then the data, whose size must equal the end
    of the last tensor's ``data_offsets`` (as safetensors checks on load). ConfigError names
    what is wrong (truncated, not safetensors, corrupt header)."""
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        n = int.from_bytes(head, "little") if len(head) == 8 else -1
        if n < 2 or n > MAX_HEADER or 8 + n > size:
            raise ConfigError(f"model weights {path} are not a readable safetensors file "
                              f"({size} bytes; truncated or another format)")
        try:
            header = json.loads(f.read(n))
        except ValueError:
            header = None
    if not isinstance(header, dict):
        raise ConfigError(f"model weights {path}: corrupt safetensors header")
    try:
        end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
    except (KeyError, TypeError, ValueError, IndexError):
        raise ConfigError(f"model weights {path}: corrupt safetensors header (bad data_offsets)") from None
    if 8 + n + end != size:
        raise ConfigError(f"model weights {path} are truncated or padded: the header lists {end} bytes "
                          f"of tensors, the file holds {size - 8 - n}")
    return header


def check_dir(path: str | os.PathLike) -> None:
    """Check a local checkpoint directory without loading it (before a run is dispatched):
    it exists, ``config.json`` is a JSON object with a ``model_type``, a tokenizer file is
    there, and there are weights whose headers read back (every ``*.safetensors``, the shards
    named by ``model.safetensors.index.json``, or a ``pytorch_model*.bin`` zip). ConfigError
    (one line) otherwise."""
    p = Path(path).expanduser()
    if not p.exists():
        raise ConfigError(f"model path not found: {path}")
    if not p.is_dir():
        raise ConfigError(f"model path is not a directory: {path}")
    cfg_file = p / "config.json"
    try:
        cfg = json.loads(cfg_file.read_bytes())
    except FileNotFoundError:
        raise ConfigError(f"model path {path} has no config.json (not a checkpoint directory)") from None
    except (OSError, ValueError) as e:
        raise ConfigError(f"model path {path}: config.json is unreadable ({type(e).__name__})") from None
    if not isinstance(cfg, dict) or not cfg.get("model_type"):
        raise ConfigError(f"model path {path}: config.json has no model_type")
    if not any((p / name).is_file() for name in TOKENIZER_FILES):
        raise ConfigError(f"model path {path} has no tokenizer ({', '.join(TOKENIZER_FILES)})")
    for name in TOKENIZER_JSON:
        if (p / name).is_file():
            try:
                tok = json.loads((p / name).read_bytes())
            except (OSError, ValueError, RecursionError) as e:
                raise ConfigError(f"model path {path}: {name} is unreadable ({type(e).__name__})") from None
            if not isinstance(tok, dict):
                raise ConfigError(f"model path {path}: {name} is not a JSON object")
    check_config(p, cfg)
    shards = sorted(p.glob("*.safetensors"))
    index = p / "model.safetensors.index.json"
    if index.is_file():
        try:
            wanted = set(json.loads(index.read_bytes())["weight_map"].values())
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            raise ConfigError(f"model path {path}: model.safetensors.index.json is unreadable") from None
        missing = sorted(w for w in wanted if not (p / w).is_file())
        if missing:
            raise ConfigError(f"model path {path}: weight shard(s) missing: {', '.join(missing[:3])}")
    for shard in shards:
        safetensors_header(shard)
    if shards:
        return
    bins = sorted(p.glob("pytorch_model*.bin"))
    for b in bins:
        with open(b, "rb") as f:
            if f.read(2) != b"PK":
                raise ConfigError(f"model weights {b} are not a torch zip archive (corrupt)")
    if not bins:
        raise ConfigError(f"model path {path} has no weights (*.safetensors or pytorch_model*.bin)")


TOKENIZER_JSON = ("tokenizer.json", "tokenizer_config.json", "vocab.json")   # JSON objects when present


def check_config(p: Path, cfg: dict) -> None:
    """config.json loads as transformers' config class of its ``model_type`` (the field types it
    checks: a non-numeric ``hidden_size`` is one line here, not a failed run). A model_type
    transformers does not know is left to the remote-code check (nothing is imported from ``p``)."""
    from transformers import CONFIG_MAPPING, AutoConfig

    if cfg.get("model_type") not in CONFIG_MAPPING:
        return
    try:
        AutoConfig.from_pretrained(str(p))
    except Exception as e:  # noqa: BLE001 - transformers' validation errors have no common base
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()] or [type(e).__name__]
        raise ConfigError(f"model path {p}: config.json does not load: {' '.join(lines[:2])[:300]}") from None


def check_dtype(dtype, key: str = "model.dtype") -> None:
    """``model.dtype`` (or ``key``) is one the loader knows (checked before dispatch and at load)."""
    if dtype not in DTYPES:
        raise ConfigError(f"unknown {key} {dtype!r} (known: {', '.join(DTYPES)})")


def local_dir(model_cfg: Mapping) -> Path | None:
    """The local directory a run's weights load from (``model.path``, a shipped tiny model's
    folder, or a ``SOURCES`` model's converted folder), None for a hub id: the input the run id
    fingerprints. Run validation calls this, so a missing package is one line before any run."""
    if model_cfg.get("path"):
        return Path(str(model_cfg["path"])).expanduser()
    if model_cfg.get("name") in TINY:
        return TINY_DIR / str(model_cfg["name"])
    if model_cfg.get("name") in SOURCES:
        return sourced_dir(str(model_cfg["name"]))
    return None


def hub_missing(model_cfg: Mapping) -> str | None:
    """For a hub model (no local folder): why it cannot load without the hub, None when its
    ``config.json`` is in this machine's Hugging Face cache (``HF_HUB_CACHE`` / ``HF_HOME``, at
    ``model.revision``, default the main branch) or the model has a local folder."""
    from huggingface_hub import constants, try_to_load_from_cache

    if local_dir(model_cfg) is not None or model_cfg.get("name") not in REGISTRY:
        return None
    repo = REGISTRY[str(model_cfg["name"])]
    found = try_to_load_from_cache(repo, "config.json", revision=model_cfg.get("revision"))
    if isinstance(found, str):
        return None
    return f"model {model_cfg['name']} ({repo}) is not in the Hugging Face cache {constants.HF_HUB_CACHE}"


def is_tiny(model_cfg: Mapping) -> bool:
    """The one rule for "a tiny-family model": a shipped tiny name without a path, or a local
    directory holding the tiny family's character tokenizer (e.g. a run's ``model/``)."""
    path = model_cfg.get("path")
    if path:
        return is_char_tokenizer_dir(str(Path(path).expanduser()))
    return model_cfg.get("name") in TINY


def is_char_tokenizer_dir(src: str) -> bool:
    """True if ``src`` is a local directory holding the tiny family's character tokenizer."""
    f = Path(src) / "tokenizer.json"
    if not f.is_file():
        return False
    try:
        return json.loads(f.read_text())["model"]["type"] == "WordLevel"
    except (ValueError, KeyError, TypeError):
        return False


def local_config(name: str, path: str | None = None) -> dict | None:
    """The model's ``config.json`` as a dict when it is on this machine (a directory, a tiny
    model, or a hub id already in the Hugging Face cache), else None. Never downloads."""
    try:
        src = _source(name, path)
    except ConfigError:
        return None
    f = Path(src) / "config.json"
    if not f.is_file():
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(src, "config.json")
        except Exception:  # noqa: BLE001 - not a hub id, or no cache: unknown
            return None
        if not isinstance(cached, str):
            return None
        f = Path(cached)
    try:
        return json.loads(f.read_text())
    except (OSError, ValueError):
        return None


def load(name: str, path: str | None = None, dtype: str = "float32", device="cpu",
         trust_remote_code: bool = False, revision: str | None = None):
    """``(model, tokenizer)`` for a registry / tiny name, or a local HF directory ``path``.

    Unknown name (without ``path``) -> ``ConfigError``. The model is in eval mode on ``device``
    with ``dtype``; the tokenizer pads on the left and has a pad token. ``trust_remote_code``
    (``model.trust_remote_code``, off) is passed to transformers explicitly: a directory's own
    Python files run only when it is true, and transformers never prompts.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

    check_dtype(dtype)
    if not path and name not in known_names():
        raise ConfigError(f"unknown model {name!r} (known: {', '.join(known_names())})")
    src = _source(name, path, revision)
    try:
        if is_char_tokenizer_dir(src):
            # AutoTokenizer would build a Qwen2Tokenizer from config.json's model_type and
            # replace the character pre-tokenizer (spaces would vanish): load the file as is.
            tok = PreTrainedTokenizerFast.from_pretrained(src)
        else:
            tok = AutoTokenizer.from_pretrained(src, trust_remote_code=trust_remote_code)
        model = AutoModelForCausalLM.from_pretrained(src, dtype=DTYPES[dtype], trust_remote_code=trust_remote_code)
    except OSError as e:  # missing files / no network for a hub id
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"cannot load model {name!r} from {src}: {first}") from e
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tok.pad_token_id
    model.to(device)
    model.eval()
    return model, tok


# Parameters of the registry's hub models (their safetensors' tensor sizes; tied embeddings
# once), for estimates made before anything is downloaded (the sweep's disk estimate).
REGISTRY_PARAMS: dict[str, int] = {
    "qwen0.5b": 494_032_768, "qwen1.5b": 1_543_714_304, "qwen3b": 3_085_938_688,
    "qwen7b": 7_615_616_512, "llama1b": 1_235_814_400, "llama3b": 3_212_749_824,
    "llama8b": 8_030_261_248,
}


def param_count(model_cfg: Mapping) -> int | None:
    """A model's parameter count without loading it: from the tensor shapes in the headers of
    its local ``*.safetensors`` files (``model.path``, a tiny or converted model), else from
    :data:`REGISTRY_PARAMS` for a hub name; None when unknown (e.g. ``.bin`` weights only)."""
    try:
        src = local_dir(model_cfg)
    except ConfigError:
        src = None
    if src is None:
        return REGISTRY_PARAMS.get(str(model_cfg.get("name")))
    total = 0
    for shard in sorted(Path(src).glob("*.safetensors")):
        try:
            header = safetensors_header(shard)
        except (ConfigError, OSError):
            return None
        for key, v in header.items():
            if key != "__metadata__":
                n = 1
                for d in v.get("shape", ()):
                    n *= int(d)
                total += n
    return total or None


def n_params(model) -> int:
    """Total number of parameters (tied weights counted once)."""
    return sum(p.numel() for p in model.parameters())


def save(model, tokenizer, path: str | os.PathLike, extra: Mapping[str, str | bytes] | None = None,
         manifest: bool = False, dtype: str | None = None, state: Mapping | None = None) -> Path:
    """Write ``model`` (HF ``save_pretrained``), ``tokenizer`` and the ``extra`` files (name ->
    text or bytes, e.g. a checkpoint's ``state.json``) to ``path`` as a whole or not at all:
    into a temporary sibling first, then renamed over ``path`` (a kill mid-swap leaves the
    previous version as ``<path>.old``). The one model writer of esopt (a run's ``model/``, ES
    checkpoints, sequence phases). ``manifest``: record every file's sha256 last
    (:func:`esopt.core.store.write_manifest`), checked on resume. ``dtype``: write the weights
    cast to it (``model.save_dtype``, e.g. GRPO's fp32 masters as bfloat16 for serving; the
    model itself is not changed); None = as they are. ``state``: the weights to write instead of
    the model's own (a sharded model's gathered state: ``esopt.algorithms.distributed.full_state``)."""
    path = Path(path)
    model = getattr(model, "module", model)
    kwargs: dict = {} if state is None else {"state_dict": dict(state)}
    if dtype is not None:
        check_dtype(dtype)
        cast: dict = {}  # tied tensors (lm_head = embeddings) stay one tensor, so they are written once
        kwargs["state_dict"] = {k: cast.setdefault(v.data_ptr(), v.to(DTYPES[dtype]))
                                for k, v in (model.state_dict() if state is None else state).items()}
    with atomic_dir(path) as tmp:
        model.save_pretrained(tmp, **kwargs)
        if dtype is not None:  # config.json states what the files hold
            cfg_file = tmp / "config.json"
            cfg = json.loads(cfg_file.read_text())
            cfg["dtype"] = str(DTYPES[dtype]).removeprefix("torch.")
            cfg_file.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        for name, content in (extra or {}).items():
            (tmp / name).write_bytes(content) if isinstance(content, bytes) else (tmp / name).write_text(content)
        apply_umask(tmp)  # safetensors writes its files 0600
        if manifest:
            write_manifest(tmp)
    return path


@torch.no_grad()
def load_weights(model, path: str | os.PathLike) -> None:
    """Copy the safetensors weights saved in ``path`` into ``model``'s parameters in place,
    bitwise (the live object keeps its identity, so an engine wrapping it sees the change).
    A tied ``lm_head`` absent from the files is fine; any other mismatch raises."""
    from safetensors.torch import load_file

    saved: dict = {}
    for f in sorted(Path(path).glob("*.safetensors")):
        saved.update(load_file(str(f)))
    params = dict(model.named_parameters())
    missing = [n for n in params if n not in saved and "lm_head" not in n]
    unexpected = [n for n in saved if n not in params]
    if missing or unexpected:
        raise RuntimeError(f"weights in {path} do not match the model: missing {missing[:3]}, "
                           f"unexpected {unexpected[:3]}")
    for name, w in params.items():
        if name in saved:
            w.copy_(saved[name].to(w.device))
