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

_DONE: tuple = ()  # the algorithms, engines and tasks registered when register() last ran


def register() -> None:
    """Store every structured block in Hydra's ConfigStore (idempotent; again when an algorithm,
    an engine or a task was registered since)."""
    global _DONE
    from esopt import algorithms, engines, tasks

    registered = (tuple(algorithms.ALGORITHMS.items()), tuple(engines.ENGINES.items()), tasks.TASK_NAMES)
    if _DONE == registered:
        return
    from esopt.core.config import EvalConfig, SparsityConfig, SweepConfig
    from esopt.runtime.trackers import default_options
    from esopt.runtime.tuning import TuningConfig

    cs = ConfigStore.instance()
    for group, node in (("eval", EvalConfig), ("sweep", SweepConfig), ("tuning", TuningConfig),
                        ("sparsity", SparsityConfig)):
        cs.store(group=group, name="default", node=asdict(node()), provider="esopt")
    cs.store(group="logger_opts", name="default", node=default_options(), provider="esopt")
    blocks = {name: b.defaults() for name, b in algorithms.blocks().items()}
    for name, node in blocks.items():
        cs.store(group=name, name="default", node=node, provider="esopt")
    cs.store(name="algo_blocks", node=blocks, provider="esopt")
    for name in algorithms.ALGORITHMS:
        if not (CONF_DIR / "algo" / f"{name}.yaml").exists():  # a file of the same name wins
            cs.store(group="algo", name=name, node={"algo": name}, package="_global_", provider="esopt")
    for name, node in engines.ENGINES.items():
        cs.store(group="engine", name=name, node=asdict(node()), provider="esopt")
    cs.store(group="engine", name=engines.AUTO, node=asdict(engines.EngineConfig(name=engines.AUTO)), provider="esopt")
    for name in tasks.TASK_NAMES:
        cs.store(group="task", name=name, node=tasks.defaults(name), provider="esopt")
    _DONE = registered
