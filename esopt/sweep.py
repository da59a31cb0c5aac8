"""The run entry point: ``python -m esopt.sweep [-m] key=value ...`` (a Hydra app).

One call of :func:`main` is one run of the grid: validate the config, find or create the
run directory, load task / model / engine, evaluate the base model, train with the chosen
algorithm, evaluate again, and write ``summary.json``. A run never raises into the sweep:
failures are recorded as ``failed`` with their error, pruning as ``pruned``.

    python -m esopt.sweep model=tiny-s algo=es pop=16 iterations=30
    python -m esopt.sweep -m model=tiny-s,tiny-m pop=8,16,32 seed=0,1,2
"""

from __future__ import annotations

import os
import re
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from esopt import store
from esopt.config import ConfigError, RunConfig, validate

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
PER_PROBLEM_KEYS = ("correct_counts", "greedy_correct")


class Pruned(Exception):
    """Raised by :meth:`RunContext.evaluate` when the Optuna pruner stops the run."""


class NonFinite(RuntimeError):
    """Raised by an algorithm when rewards or weights stop being finite."""


@dataclass
class _Shared:
    """State shared by a run's context and its phase views."""

    t0: float
    tokens_total: int = 0
    last_eval: dict | None = None
    last_eval_iteration: int | None = None
    phases: list = field(default_factory=list)
    effective: dict = field(default_factory=dict)
    trial: Any = None


@dataclass
class RunContext:
    """What an algorithm's ``train(ctx)`` gets: the run's objects and its recorder.

    ``iterations`` is this phase's budget; ``iteration_offset`` shifts the iteration numbers
    it logs, so a sequence's second phase continues the first one's count.
    """

    cfg: RunConfig
    model: Any
    tokenizer: Any
    engine: Any
    task: Any
    run: store.RunDir
    phase: str
    iterations: int
    iteration_offset: int = 0
    shared: _Shared = field(default_factory=lambda: _Shared(time.time()))

    # --- recording ---------------------------------------------------------------------
    @property
    def tokens_total(self) -> int:
        return self.shared.tokens_total

    def add_tokens(self, n: int) -> None:
        self.shared.tokens_total += int(n)

    def wall_s(self) -> float:
        return time.time() - self.shared.t0

    def log(self, **line: Any) -> None:
        """Append a metrics line; ``iteration`` is phase-local and shifted to the run's count."""
        line.setdefault("kind", "train")
        line["iteration"] = int(line.get("iteration", 0)) + self.iteration_offset
        line.setdefault("phase", self.phase)
        line.setdefault("tokens_total", self.tokens_total)
        line.setdefault("wall_s", round(self.wall_s(), 4))
        self.run.log(**line)

    def set_effective(self, **values: Any) -> None:
        """Record hyperparameters an algorithm resolved from defaults (e.g. sigma, lr)."""
        self.shared.effective.update(values)

    # --- evaluation --------------------------------------------------------------------
    def evaluate(self, iteration: int) -> dict:
        """Shared held-out evaluation: log an eval line, report to Optuna, maybe prune."""
        result = run_eval(self.cfg, self.engine, self.task)
        step = int(iteration) + self.iteration_offset
        self.shared.last_eval, self.shared.last_eval_iteration = result, step
        self.log(kind="eval", iteration=iteration, **eval_line(result))
        trial = self.shared.trial
        if trial is not None:
            trial.report(result, step)
            if trial.should_prune():
                raise Pruned(f"pruned at iteration {step}")
        return result

    def for_phase(self, algo: str, iterations: int, iteration_offset: int) -> "RunContext":
        return RunContext(
            self.cfg, self.model, self.tokenizer, self.engine, self.task, self.run,
            phase=algo, iterations=int(iterations), iteration_offset=int(iteration_offset),
            shared=self.shared,
        )

    def phase_done(self, algo: str, eval_result: dict | None = None) -> None:
        """Record the evaluation after a sequence phase into the summary's ``phases``."""
        if eval_result is None:
            eval_result = self.evaluate(self.iterations)
        self.shared.phases.append({"algo": algo, "iterations": self.iterations, "eval": eval_result})


def eval_line(result: dict) -> dict:
    """The evaluator's result without per-problem lists, flattened for metrics.jsonl."""
    line = {k: v for k, v in result.items() if k not in PER_PROBLEM_KEYS}
    # the evaluation's own cost, under names that do not shadow the run's cumulative counters
    line["eval_wall_s"] = line.pop("wall_s", None)
    line["eval_tokens"] = line.pop("tokens_generated", None)
    for k, v in result.get("pass@k", {}).items():
        line[f"pass@{k}"] = v
    return line


def run_eval(cfg: RunConfig, engine, task) -> dict:
    from esopt.evaluate import evaluate

    ev = cfg.eval
    return evaluate(
        engine, task, split=ev.split, problems=ev.problems, samples=ev.samples,
        temperature=ev.temperature, top_p=ev.top_p, max_new_tokens=ev.max_new_tokens,
        seed=ev.seed, greedy=ev.greedy,
    )


def resolve_device(device: str | None) -> str:
    """``auto`` -> ``cuda`` when a GPU is visible, else ``cpu``."""
    if device in (None, "auto"):
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def set_threads(threads, tiny: bool) -> None:
    """CPU torch threads for this process (``engine.threads``; see conf/engine/hf.yaml)."""
    import torch

    if threads in (None, "auto"):
        if not tiny:
            return
        threads = 1
    if int(threads) < 1:
        raise ConfigError(f"engine.threads must be >= 1 or auto, got {threads!r}")
    torch.set_num_threads(int(threads))


def load_components(cfg: RunConfig):
    """Model, tokenizer, engine and task for a run (the same loading for every algorithm)."""
    from transformers.utils import logging as hf_logging

    from esopt import engines, models, tasks

    hf_logging.disable_progress_bar()
    m = cfg.model
    set_threads(cfg.engine.get("threads", "auto"), tiny=m["name"] in models.TINY and not m.get("path"))
    model, tokenizer = models.load(
        m["name"], path=m.get("path"), dtype=m.get("dtype", "float32"),
        device=resolve_device(cfg.engine.get("device", "auto")),
    )
    task = tasks.get(cfg.task, tokenizer=tokenizer, style=cfg.task.get("style") or m.get("prompt_style"))
    engine = engines.get(cfg.engine, model, tokenizer)
    return model, tokenizer, engine, task


def save_model(model, tokenizer, path: Path) -> None:
    """The trained weights, in HF format, where analyses and `esopt.evaluate` find them.

    Written to a temporary sibling and renamed, so a kill never leaves half a model.
    """
    import shutil

    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    getattr(model, "module", model).save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(path, ignore_errors=True)
    os.replace(tmp, path)


def _train(ctx: RunContext) -> None:
    algo = ctx.cfg.algo
    if algo == "none":
        return
    if algo == "es":
        from esopt import es

        es.train(ctx)
    elif algo == "grpo":
        from esopt import grpo

        grpo.train(ctx)
    else:  # grpo_es, es_grpo
        from esopt import sequence

        sequence.train(ctx)


def _missing_analyses(cfg: RunConfig, rd: store.RunDir) -> list[str]:
    if cfg.algo == "none" or not rd.model_dir.is_dir():
        return []
    return [a for a in cfg.analysis if not (rd.path / f"{a}.json").exists()]


def _analyses(cfg: RunConfig, rd: store.RunDir) -> dict:
    """Run the analyses named in ``analysis=[...]`` on the trained model (never raises)."""
    from esopt import analyze

    return analyze.run_analyses(cfg, rd.path, list(cfg.analysis))


def _attach_trial(cfg: RunConfig, rid: str, params: dict):
    try:
        from esopt import tuning
    except ImportError:
        return None
    return tuning.attach(cfg, rid, params)


def run(cfg: RunConfig) -> dict:
    """Run one configuration to a recorded end. Returns its summary (never raises, except
    for KeyboardInterrupt/SystemExit, which leave the run resumable)."""
    rid = store.run_id(cfg.identity())
    rd = store.RunDir.for_run(cfg.sweep.root, cfg.sweep.name, rid)
    previous = rd.read_summary() or {}
    status = previous.get("status")
    if status in ("completed", "pruned") or (status == "failed" and not cfg.sweep.retry_failed):
        if status == "completed" and _missing_analyses(cfg, rd):
            previous["analyses"] = _analyses(cfg, rd)  # asked for after the run finished
            rd.write_summary(previous)
        print(f"esopt: run {rid} already {status}; skipped ({rd.path})", file=sys.stderr)
        return previous
    if status == "running":  # interrupted, or still running elsewhere (never start it twice)
        where = store.worker_alive(previous.get("worker"))
        if where:
            print(f"esopt: run {rid} is still running ({where}); not started twice", file=sys.stderr)
            return previous

    rd.create(cfg.to_dict())
    t0 = time.time() - float(previous.get("wall_s") or 0.0)  # resumed runs keep counting
    summary = {
        "status": "running", "error": None, "run_id": rid, "algo": cfg.algo,
        "task": cfg.task.get("name"), "model": {"name": cfg.model["name"], "params": None},
        "pop": cfg.pop if cfg.uses("pop") else None,
        "sigma": cfg.sigma if cfg.uses("sigma") else None,
        "lr": cfg.lr if cfg.uses("lr") else None, "seed": cfg.seed,
        "iterations": cfg.iterations if cfg.uses("iterations") else 0,
        "base": previous.get("base"), "final": None, "phases": [],
        "tokens_generated": 0, "wall_s": 0.0, "sweep": cfg.sweep.name,
        "attempts": int(previous.get("attempts") or 0) + 1, "worker": store.worker_info(),
        "config": cfg.to_dict(),
    }
    rd.write_summary(summary)
    shared = _Shared(t0)
    try:
        model, tokenizer, engine, task = load_components(cfg)
        from esopt.models import n_params

        summary["model"]["params"] = n_params(model)
        params = {"model": cfg.model["name"], "params": summary["model"]["params"], "pop": cfg.pop,
                  "sigma": cfg.sigma, "lr": cfg.lr, "seed": cfg.seed, "algo": cfg.algo}
        shared.trial = _attach_trial(cfg, rid, params)
        ctx = RunContext(cfg, model, tokenizer, engine, task, rd, phase=cfg.algo,
                         iterations=cfg.iterations, shared=shared)
        if summary["base"] is None:
            summary["base"] = run_eval(cfg, engine, task)
            ctx.log(kind="eval", iteration=0, phase="base", **eval_line(summary["base"]))
            rd.write_summary(summary)
        _train(ctx)
        if cfg.algo != "none" and cfg.sweep.save_model:
            save_model(model, tokenizer, rd.model_dir)
        total = cfg.iterations if cfg.algo != "none" else 0
        if cfg.algo == "none":
            summary["final"] = summary["base"]
        elif shared.last_eval is not None and shared.last_eval_iteration == total:
            summary["final"] = shared.last_eval
        else:
            summary["final"] = ctx.evaluate(cfg.iterations)
        if cfg.analysis and cfg.algo != "none" and cfg.sweep.save_model:
            summary["analyses"] = _analyses(cfg, rd)
        summary["status"] = "completed"
    except Pruned as e:
        summary["status"], summary["error"] = "pruned", str(e)
        summary["final"] = shared.last_eval
    except Exception as e:  # noqa: BLE001 - a failing run is recorded, never raised
        summary["status"] = "failed"
        summary["error_type"] = type(e).__name__
        summary["error"] = f"{type(e).__name__}: {e}".splitlines()[0][:500]
        store.atomic_write_text(rd.path / "error.txt", traceback.format_exc())
    finally:
        summary["phases"] = shared.phases
        summary["tokens_generated"] = shared.tokens_total
        summary["wall_s"] = round(time.time() - t0, 3)
        for key in ("sigma", "lr"):
            if shared.effective.get(key) is not None:
                summary[key] = shared.effective[key]
        summary["effective"] = dict(shared.effective)
        if summary["status"] != "running":
            rd.write_summary(summary)
            if shared.trial is not None:
                try:
                    shared.trial.finish(summary)
                except Exception as e:  # noqa: BLE001 - bookkeeping must not lose the result
                    print(f"esopt: warning: could not record trial: {e}", file=sys.stderr)
    return summary


def run_worker(cfg: RunConfig) -> dict:
    """Rank > 0 of a multi-process ES run: train alongside rank 0, which alone records."""
    model, tokenizer, engine, task = load_components(cfg)
    rd = store.RunDir.for_run(cfg.sweep.root, cfg.sweep.name, store.run_id(cfg.identity()))
    _train(RunContext(cfg, model, tokenizer, engine, task, rd, phase=cfg.algo, iterations=cfg.iterations))
    return {"status": "worker"}


def print_summary(summary: dict, path: Path) -> None:
    base, final = summary.get("base") or {}, summary.get("final") or {}

    def p(d, k):
        v = (d.get("pass@k") or {}).get(k)
        return "-" if v is None else f"{v:.3f}"

    kmax = max((int(k) for k in (final.get("pass@k") or {})), default=1)
    print(
        f"run {summary['run_id']} {summary['status']}: algo={summary['algo']} "
        f"model={summary['model']['name']} pass@1 {p(base, '1')} -> {p(final, '1')}, "
        f"pass@{kmax} {p(base, str(kmax))} -> {p(final, str(kmax))}, "
        f"wall {summary['wall_s']:.1f}s"
        + (f"  error: {summary['error']}" if summary.get("error") else "")
    )
    print(f"  {path}")


def fail(message: str, code: int = 2):
    print(f"esopt: error: {message}", file=sys.stderr)
    sys.exit(code)


def check_group_choices(argv: list[str], conf_dir: Path = CONF_DIR) -> None:
    """Reject unknown config-group choices (model=foo) with one line, before Hydra runs."""
    for arg in argv:
        m = re.match(r"^(model|task|algo|engine)=(.*)$", arg)
        if not m or "(" in m.group(2):
            continue
        group, values = m.group(1), m.group(2)
        known = sorted(p.stem for p in (conf_dir / group).glob("*.yaml"))
        for value in values.split(","):
            value = value.strip()
            if value and value not in known:
                fail(f"unknown {group} {value!r} (known: {', '.join(known)})")


def prepare_argv(argv: list[str]) -> list[str]:
    """Check group choices; ``model=<checkpoint dir>`` becomes ``model.path=<dir>``.

    A local directory (an HF ``save_pretrained`` layout, e.g. a run's ``checkpoint/``) is
    loaded as is; its prompt style is detected from its tokenizer (chat template or not).
    """
    out = []
    for arg in argv:
        m = re.match(r"^model=(.+)$", arg)
        if m and "," not in m.group(1) and Path(m.group(1)).is_dir():
            path = Path(m.group(1)).resolve()
            out += [f"model.path={path}", f"model.name={path.name}", "model.prompt_style=null"]
        else:
            out.append(arg)
    check_group_choices(out)
    return out


def main_run(cfg) -> dict:
    """The Hydra task function: validate, run, report. Exit codes: 0 ok, 1 failed, 2 bad input."""
    try:
        rc = validate(cfg)
    except ConfigError as e:
        fail(str(e))
    from esopt import distributed

    if distributed.launched_rank() > 0:  # torchrun / srun rank > 0: a silent ES worker
        return run_worker(rc)
    summary = run(rc)
    rid = summary.get("run_id", "")
    print_summary(summary, store.RunDir.for_run(rc.sweep.root, rc.sweep.name, rid).path)
    return summary


def cli() -> None:
    import hydra
    from hydra.core.hydra_config import HydraConfig

    sys.argv[1:] = prepare_argv(sys.argv[1:])

    @hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
    def _main(cfg):
        summary = main_run(cfg)
        multirun = HydraConfig.get().mode.name == "MULTIRUN"
        if not multirun and summary.get("status") == "failed":
            if summary.get("error_type") == "ConfigError":  # bad input found while loading
                fail(summary["error"].removeprefix("ConfigError: "))
            sys.exit(1)
        return summary

    _main()


if __name__ == "__main__":
    cli()
