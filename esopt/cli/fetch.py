"""``python -m esopt.fetch <the overrides a sweep takes>``: on a machine with internet (a login
node), download every hub model and dataset the grid needs into the shared Hugging Face cache,
so that jobs on compute nodes without internet (``sweep.offline=true``) find them there.

    python -m esopt.fetch +experiment=pop_vs_size_gpu
    python -m esopt.fetch -m model=qwen1.5b,qwen7b task=gsm8k --cache-dir /shared/hf/hub

The grid is composed and validated by the esopt sweeper as ``esopt.sweep`` composes it (same
presets, validation, run ids); validating a run loads its task's data, which puts a hub dataset
into ``datasets``' cache. Each hub model is downloaded with ``huggingface_hub.snapshot_download``
at ``model.revision`` (null: the hub's main branch) and its resolved commit is recorded. Models
with a local folder (the tiny family, ``model.path``, ``models.paths``) are listed, not fetched.
Prints the cache and each item's size, and writes ``<cache>/esopt-fetch.json`` (the manifest:
what was fetched, its revision, path and bytes). Flags: ``--cache-dir DIR`` (default: the hub
cache, ``HF_HUB_CACHE`` / ``HF_HOME``; jobs must see the same one). Exit codes: 0 ok, 2 bad
input or a model the hub does not give.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from esopt.cli.common import command_argv, fail

MANIFEST = "esopt-fetch.json"


def split_argv(argv: list[str]) -> tuple[str | None, list[str]]:
    """(--cache-dir, the sweep's overrides)."""
    cache, rest, i = None, [], 0
    while i < len(argv):
        name, eq, value = argv[i].partition("=")
        if name == "--cache-dir":
            if not eq:
                if i + 1 >= len(argv):
                    fail("--cache-dir needs a directory")
                i, value = i + 1, argv[i + 1]
            cache = value
        elif name.startswith("--"):
            fail(f"unknown flag {name} (known: --cache-dir)")
        else:
            rest.append(argv[i])
        i += 1
    return cache, rest


def folder_bytes(path: Path) -> int:
    """Bytes of the files under ``path``, symlinks followed (a hub snapshot links into blobs/)."""
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


def where_data(source) -> str:
    """How a task's data reaches its jobs: generated, a local file or folder, or a hub dataset
    (validating the run loaded it, so it is in ``datasets``' cache now)."""
    from esopt.tasks import hub_cached

    if not source:
        return "generated or shipped data, nothing to fetch"
    if os.path.exists(os.path.expanduser(str(source))):
        return f"local data {source}, nothing to fetch"
    return f"hub dataset {source}" + (", in the datasets cache" if hub_cached(str(source)) else "")


def fetch_model(model: dict, cache: str | None) -> dict:
    """One hub model downloaded (or found) in ``cache``: {name, repo, revision, path, bytes}."""
    from huggingface_hub import snapshot_download

    from esopt import models

    repo = models.REGISTRY[model["name"]]
    try:
        path = Path(snapshot_download(repo, revision=model.get("revision"), cache_dir=cache))
    except Exception as e:  # noqa: BLE001 - huggingface_hub's errors (offline, gated, not found, ...)
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        fail(f"model {model['name']} ({repo}): cannot download it: {first[:300]}")
    return {"name": model["name"], "repo": repo, "revision": path.name, "path": str(path),
            "bytes": folder_bytes(path)}


def main(argv: list[str] | None = None) -> int:
    from huggingface_hub import constants

    from esopt import models
    from esopt.cli.design import compose

    argv = command_argv(argv, __doc__)
    if argv is None:
        return 0
    cache, overrides = split_argv(argv)
    if cache is not None and Path(cache).exists() and not Path(cache).is_dir():
        fail(f"--cache-dir {cache} is not a directory")
    where = Path(cache or constants.HF_HUB_CACHE).expanduser()
    runs = compose(overrides + ["++sweep.offline=false"])  # composing fetches the tasks' hub data
    fetched, local, data = [], [], {}
    for rc in {json.dumps(rc.model.get("name")) + str(models.local_dir(rc.model)): rc for _, rc in runs}.values():
        folder = models.local_dir(rc.model)
        if folder is not None:
            local.append({"name": rc.model["name"], "path": str(folder), "bytes": folder_bytes(folder)})
        else:
            fetched.append(fetch_model(rc.model, cache))
        spec = rc.task_spec.config
        source = spec.get("source")
        data.setdefault(f"{spec['name']}:{source}",
                        {"task": spec["name"], "source": source, "data": where_data(source)})
    where.mkdir(parents=True, exist_ok=True)
    manifest = {"written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cache": str(where),
                "overrides": overrides, "models": fetched, "local_models": local, "tasks": list(data.values())}
    (where / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"esopt.fetch: cache {where} ({len(runs)} runs' inputs)")
    for m in fetched:
        print(f"  model {m['name']:<12} {m['repo']}@{m['revision'][:12]}  {gb(m['bytes'])}  {m['path']}")
    for m in local:
        print(f"  model {m['name']:<12} local folder, not fetched  {gb(m['bytes'])}  {m['path']}")
    for t in data.values():
        print(f"  task  {t['task']:<12} {t['data']}")
    total = sum(m["bytes"] for m in fetched)
    print(f"fetched: {len(fetched)} model(s), {gb(total)}; manifest {where / MANIFEST}")
    if cache is not None:
        print(f"jobs read this cache with: export HF_HUB_CACHE={where}")
    return 0
