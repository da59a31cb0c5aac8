"""The Hydra config tree's structured parts, registered from the code that owns each block, so
every default is stated once (in a documented dataclass or a task's ``knobs``):

    eval: default         esopt.core.config.EvalConfig
    sweep: default        esopt.core.config.SweepConfig
    sparsity: default     esopt.core.config.SparsityConfig (what analysis=[sparsity] evaluates)
    tuning: default       esopt.runtime.tuning.TuningConfig
    logger_opts: default  esopt.runtime.trackers (each tracker's Options)
    engine: auto | hf | vllm     esopt.engines.resolve | HFConfig | VLLMConfig
    task: <name>          esopt.tasks.defaults(name)
    algo_blocks           every algorithm's config blocks (esopt.algorithms: es, grpo, sequence,
                          ...), each also as group <block>: default
    algo: <name>          {algo: <name>} for a registered algorithm without conf/algo/<name>.yaml

Every run's config holds every algorithm's blocks (``algo_blocks``, after the algo choice in
conf/config.yaml), so a grid over several algorithms accepts a key of any of their blocks; the
run keeps its own algorithm's (``esopt.runtime.validate``). An algo yaml therefore sets no block
values (their defaults live in the dataclasses). ``conf/`` holds what is data rather than code:
the top-level axes (config.yaml), the documented algorithm choices (algo/), the models
(model/), the launchers and, through conf/experiment, the presets.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from hydra.core.config_store import ConfigStore

# The Hydra configs: conf/ at the top of the checkout, reached through the esopt/conf link (an
# installed package holds a copy there).
CONF_DIR = Path(__file__).resolve().parent.parent / "conf"

_DONE: tuple = ()  # the registries when register() last ran
_STORED: set = set()  # the (group, name) entries register() last stored


def register() -> None:
    """Make Hydra's ConfigStore hold every structured block of the current registries
    (idempotent; again when an algorithm, an engine or a task was registered or removed since:
    an entry stored for something no longer registered is taken out, so a later composition
    does not carry, say, a test's algorithm block after its registry line was undone)."""
    global _DONE, _STORED
    from esopt import algorithms, engines, tasks

    registered = (tuple(algorithms.ALGORITHMS.items()), tuple(engines.ENGINES.items()), tasks.TASK_NAMES)
    if _DONE == registered:
        return
    from esopt.core.config import RENAMED, EvalConfig, SparsityConfig, SweepConfig
    from esopt.runtime.trackers import default_options
    from esopt.runtime.tuning import TuningConfig

    entries = {}  # (group, name) -> (node, package)
    for group, node in (("eval", EvalConfig), ("sweep", SweepConfig), ("tuning", TuningConfig),
                        ("sparsity", SparsityConfig)):   # and each renamed key's old spelling at null
        old = {k.partition(".")[2]: None for k in RENAMED if k.partition(".")[0] == group}
        entries[group, "default"] = ({**asdict(node()), **old}, None)
    entries["logger_opts", "default"] = (default_options(), None)
    blocks = {name: b.defaults() for name, b in algorithms.blocks().items()}
    for name, node in blocks.items():
        entries[name, "default"] = (node, None)
    entries[None, "algo_blocks"] = (blocks, None)
    for name in algorithms.ALGORITHMS:
        if not (CONF_DIR / "algo" / f"{name}.yaml").exists():  # a file of the same name wins
            entries["algo", name] = ({"algo": name}, "_global_")
    for name, node in engines.ENGINES.items():
        entries["engine", name] = (asdict(node()), None)
    entries["engine", engines.AUTO] = (asdict(engines.EngineConfig(name=engines.AUTO)), None)
    for name in tasks.TASK_NAMES:
        entries["task", name] = (tasks.defaults(name), None)
    cs = ConfigStore.instance()
    for group, name in _STORED - entries.keys():
        _remove(cs, group, name)
    for (group, name), (node, package) in entries.items():
        cs.store(group=group, name=name, node=node, package=package, provider="esopt")
    _DONE, _STORED = registered, set(entries)


def _remove(cs: ConfigStore, group: str | None, name: str) -> None:
    """Take ``group/name`` out of the ConfigStore (Hydra has no call for it: its ``repo`` is a
    tree of dicts, a group a dict of ``<name>.yaml`` entries), and the group when left empty."""
    d = cs.repo if group is None else cs.repo.get(group)
    if isinstance(d, dict):
        d.pop(f"{name}.yaml", None)
        if group is not None and not d:
            cs.repo.pop(group, None)
