"""The Hydra config tree's structured parts, registered from the code that owns each block, so
every default is stated once (in a documented dataclass or a task's ``knobs``):

    eval: default         esopt.core.config.EvalConfig
    sweep: default        esopt.core.config.SweepConfig
    tuning: default       esopt.runtime.tuning.TuningConfig
    logger_opts: default  esopt.runtime.trackers (each tracker's Options)
    engine: hf | vllm     esopt.engines.HFConfig | VLLMConfig
    es / grpo / sequence: default   esopt.algorithms.es.ESConfig | grpo.GRPOSettings | sequence.SequenceConfig
    task: <name>          esopt.tasks.defaults(name)

``conf/`` holds what is data rather than code: the top-level axes (config.yaml), the algorithm
choices (algo/), the models (model/), the launchers and, through conf/experiment, the presets.
"""

from __future__ import annotations

from dataclasses import asdict

from hydra.core.config_store import ConfigStore

_DONE = False


def register() -> None:
    """Store every structured block in Hydra's ConfigStore (idempotent)."""
    global _DONE
    if _DONE:
        return
    from esopt import engines, tasks
    from esopt.algorithms.es import ESConfig
    from esopt.algorithms.grpo import GRPOSettings
    from esopt.algorithms.sequence import SequenceConfig
    from esopt.core.config import EvalConfig, SweepConfig
    from esopt.runtime.trackers import default_options
    from esopt.runtime.tuning import TuningConfig

    cs = ConfigStore.instance()
    for group, node in (("eval", EvalConfig), ("sweep", SweepConfig), ("tuning", TuningConfig),
                        ("es", ESConfig), ("grpo", GRPOSettings), ("sequence", SequenceConfig)):
        cs.store(group=group, name="default", node=asdict(node()), provider="esopt")
    cs.store(group="logger_opts", name="default", node=default_options(), provider="esopt")
    for name, node in engines.ENGINES.items():
        cs.store(group="engine", name=name, node=asdict(node()), provider="esopt")
    for name in tasks.TASK_NAMES:
        cs.store(group="task", name=name, node=tasks.defaults(name), provider="esopt")
    _DONE = True
