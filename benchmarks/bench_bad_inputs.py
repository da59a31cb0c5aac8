"""Bad inputs tried as a user would (issue 42's round of 86): each is one command, run as
``python -m esopt.<entry> ...`` in a fresh folder, and counts as **stopped cleanly** when it
exits 2 with exactly one stderr line, ``esopt: error: ...``, and creates no file (the folder
holds only what the case set up). The table counts, by category, the inputs tried and those
stopped cleanly, and names the others.

    python benchmarks/bench_bad_inputs.py                     # every case (~5-10 min on 2 cores)
    python benchmarks/bench_bad_inputs.py --only model,data   # some categories
    python benchmarks/bench_bad_inputs.py --write-docs        # the table into docs/results/bad_inputs.md

Categories: ``keys`` (unknown keys, config groups, override syntax), ``values`` (out-of-range
numbers and choices, single runs and ``-m`` grids), ``names`` (sweep.name / sweep.root and other
names that reach a path), ``model`` (a model folder's files), ``data`` (a data file's rows),
``trackers`` and ``storage`` (logger / tuning.storage), ``evaluate``, ``aggregate``, ``analyze``
and ``plan`` (the other entry points). Issue 42's eleven are among them (``#42`` in their name),
and issue 55's (``#55``: config booleans and integers, files read back, the planner's pilot).
A case is a line of :data:`CASES`; the next round adds its own.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
ENV = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
       "HF_HUB_OFFLINE": "1"}
TINY = ["model=tiny-xs", "algo=es", "pop=2", "iterations=1", "eval.problems=4", "eval.samples=2"]


# ---------------------------------------------------------------------------- what cases set up
def model_dir(d: Path, how: str) -> Path:
    """A copy of tiny-xs's folder at ``d/m`` damaged ``how``."""
    from helpers import model_copy

    m = model_copy(d / "m")
    cfg = json.loads((m / "config.json").read_text())
    if how == "no_config":
        (m / "config.json").unlink()
    elif how == "bad_config":
        (m / "config.json").write_bytes(b"\x89PNG not json")
    elif how == "no_type":
        (m / "config.json").write_text(json.dumps({"hidden_size": 8}))
    elif how == "hidden_size":
        (m / "config.json").write_text(json.dumps({**cfg, "hidden_size": "abc"}))
    elif how == "no_tokenizer":
        for f in m.glob("tokenizer*"):
            f.unlink()
    elif how == "bad_tokenizer":
        (m / "tokenizer.json").write_text("{corrupt")
    elif how == "truncated":
        w = m / "model.safetensors"
        w.write_bytes(w.read_bytes()[: w.stat().st_size // 2])
    elif how == "garbage":
        (m / "model.safetensors").write_bytes(b"\xff" * 64)
    elif how == "no_weights":
        (m / "model.safetensors").unlink()
    elif how == "shards":
        (m / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "model-00002.safetensors"}}))
    elif how == "remote_code":
        (m / "config.json").write_text(json.dumps({**cfg, "model_type": "mystery", "auto_map": {"AutoConfig": "x.Y"}}))
    return m


def data_file(d: Path, first: dict | str, ext: str = "jsonl", good: int = 30) -> Path:
    """A Countdown data file: ``first`` row, then ``good`` good ones."""
    rows = [first if isinstance(first, str) else json.dumps(first)]
    rows += [json.dumps({"nums": [i, 2, 3], "target": i + 5}) for i in range(1, good + 1)]
    p = d / f"c.{ext}"
    p.write_text("[" + ",\n".join(rows) + "]" if ext == "json" else "\n".join(rows) + "\n")
    return p


def a_file(d: Path) -> Path:
    (d / "afile").write_text("x")
    return d / "afile"


DATA = ["task=countdown", "task.n_train=16", "task.n_heldout=4"]


def data(first, ext="jsonl"):
    return lambda d: [*DATA, f"task.source={data_file(d, first, ext)}"]


def model(how):
    return lambda d: [f"model.path={model_dir(d, how)}"]


def planted(d: Path, spoil=None, name: str = "paper_s") -> Path:
    """A small planted claims sweep at ``d/<name>`` (tests/helpers.py), its files then spoiled."""
    from helpers import write_planted_sweep

    write_planted_sweep(d / name, seeds=(0, 1), problems=20, models={"tiny-xs": 3e4, "tiny-s": 1e5})
    if spoil:
        spoil(d / name)
    return d / name


def unsolved(sweep: Path) -> None:
    """Every run's base and final evaluation solved nothing (a pilot of a model that cannot)."""
    for s in (sweep / "runs").glob("*/summary.json"):
        data = json.loads(s.read_text())
        for ev in (data["base"], data["final"]):
            ev["correct_counts"] = [0] * len(ev["correct_counts"])
        s.write_text(json.dumps(data))


# ------------------------------------------------------------------------------------ the cases
# (category, name, module, argv: a list, or a function of the case folder returning one)
CASES = [
    ("keys", "unknown key foo=1", "esopt.sweep", ["foo=1"]),
    ("keys", "+popsize=8 (did you mean pop)", "esopt.sweep", ["+popsize=8"]),
    ("keys", "-m ++iteration=5", "esopt.sweep", ["-m", "seed=0,1", "++iteration=5"]),
    ("keys", "eval.sampels=4", "esopt.sweep", ["eval.sampels=4"]),
    ("keys", "+experiment=nope", "esopt.sweep", ["+experiment=nope"]),
    ("keys", "hydra/launcher=nope", "esopt.sweep", ["hydra/launcher=nope"]),
    ("keys", "pop=[1, (unparseable)", "esopt.sweep", ["pop=[1,"]),
    ("keys", "model=nosuchmodel", "esopt.sweep", ["model=nosuchmodel"]),
    ("keys", "task=nosuchtask", "esopt.sweep", ["task=nosuchtask"]),
    ("keys", "algo=nosuchalgo", "esopt.sweep", ["algo=nosuchalgo"]),
    ("keys", "engine=nosuchengine", "esopt.sweep", ["engine=nosuchengine"]),
    ("keys", "es.nonsense=1", "esopt.sweep", ["es.nonsense=1"]),
    ("values", "pop=1", "esopt.sweep", ["pop=1"]),
    ("values", "-m pop=8,1", "esopt.sweep", ["-m", "pop=8,1"]),
    ("values", "sigma=-1", "esopt.sweep", ["sigma=-1"]),
    ("values", "-m sigma=1e-3,-1", "esopt.sweep", ["-m", "sigma=1e-3,-1"]),
    ("values", "eval.samples=0", "esopt.sweep", ["eval.samples=0"]),
    ("values", "eval.problems=100000", "esopt.sweep", ["eval.problems=100000"]),
    ("values", "#41 eval.probes=[nonsense]", "esopt.sweep", ["eval.probes=[nonsense]"]),
    ("values", "#41 eval.require_probes=true without probes", "esopt.sweep", ["eval.require_probes=true"]),
    ("values", "#41 eval.probes=[passages] on engine=vllm", "esopt.sweep", ["engine=vllm", "eval.probes=[passages]"]),
    ("values", "iterations=-3", "esopt.sweep", ["iterations=-3"]),
    ("values", "-m model=tiny-xs,nosuchmodel", "esopt.sweep", ["-m", "model=tiny-xs,nosuchmodel"]),
    ("values", "engine.dtype=int4", "esopt.sweep", ["engine.dtype=int4"]),
    ("values", "#42 model.dtype=int8", "esopt.sweep", ["model.dtype=int8"]),
    ("values", "#42 -m model.dtype=int8", "esopt.sweep", ["-m", "model.dtype=int8"]),
    ("values", "tuning.pruner=nosuch", "esopt.sweep", ["tuning.pruner=nosuch"]),
    ("values", "tuning.metric=pass@99", "esopt.sweep", ["tuning.metric=pass@99"]),
    ("values", "tuning.direction=up", "esopt.sweep", ["tuning.direction=up"]),
    ("names", "sweep.name=..", "esopt.sweep", ["sweep.name=.."]),
    ("names", "sweep.name=a/b", "esopt.sweep", ["sweep.name=a/b"]),
    ("names", "-m sweep.name=ok,..", "esopt.sweep", ["-m", "sweep.name=ok,.."]),
    ("names", "sweep.root=results/../..", "esopt.sweep", ["sweep.root=results/../.."]),
    ("names", "sweep.name with a newline", "esopt.sweep", ["sweep.name='a\nb'"]),
    ("names", "sweep.root with a carriage return", "esopt.sweep", ["sweep.root='res\rults'"]),
    ("names", "hydra.launcher.name with a newline", "esopt.sweep", ["hydra.launcher.name='es\nopt'"]),
    ("names", "tuning.study with an escape", "esopt.sweep", ["tuning.study='s\x1b[31m'"]),
    ("names", "#42 sweep.root is a file", "esopt.sweep", lambda d: [f"sweep.root={a_file(d)}"]),
    ("names", "#42 256-byte sweep.name", "esopt.sweep", ["sweep.name=" + "a" * 256]),
    ("names", "#42 unquoted non-ASCII sweep.name", "esopt.sweep", ["sweep.name=héllo"]),
    ("model", "model.path=/nonexistent/ckpt", "esopt.sweep", ["model.path=/nonexistent/ckpt"]),
    ("model", "empty model folder", "esopt.sweep", lambda d: [f"model.path={(d / 'e').mkdir() or d / 'e'}"]),
    ("model", "config.json not JSON", "esopt.sweep", model("bad_config")),
    ("model", "config.json without model_type", "esopt.sweep", model("no_type")),
    ("model", "no config.json", "esopt.sweep", model("no_config")),
    ("model", "no tokenizer", "esopt.sweep", model("no_tokenizer")),
    ("model", "#42 corrupt tokenizer.json", "esopt.sweep", model("bad_tokenizer")),
    ("model", "#42 non-numeric hidden_size", "esopt.sweep", model("hidden_size")),
    ("model", "truncated weights", "esopt.sweep", model("truncated")),
    ("model", "weights not safetensors", "esopt.sweep", model("garbage")),
    ("model", "no weights", "esopt.sweep", model("no_weights")),
    ("model", "a weight shard missing", "esopt.sweep", model("shards")),
    ("model", "custom code without trust_remote_code", "esopt.sweep", model("remote_code")),
    ("data", "missing data file", "esopt.sweep", [*DATA, "task.source=/nonexistent/c.jsonl"]),
    ("data", "nums not a list", "esopt.sweep", data({"nums": 5, "target": 6})),
    ("data", "no target", "esopt.sweep", data({"nums": [1, 2, 3]})),
    ("data", "target 'abc'", "esopt.sweep", data({"nums": [1, 2, 3], "target": "abc"})),
    ("data", "target '1e5' as a string", "esopt.sweep", data({"nums": [1, 2], "target": "1e5"})),
    ("data", "an integer past int64 (json)", "esopt.sweep", data('{"nums": [99999999999999999999999, 2], "target": 6}', "json")),
    ("data", "NaN target", "esopt.sweep", data('{"nums": [1, 2, 3], "target": NaN}')),
    ("data", "a row that is not JSON", "esopt.sweep", data("{not json")),
    ("data", "every row a duplicate", "esopt.sweep",
     lambda d: [*DATA, f"task.source={data_file(d, {'nums': [1, 2, 3], 'target': 6}, good=0)}"]),
    ("data", "#42 nums [1e308, ...]", "esopt.sweep", data({"nums": [1e308, 2, 3], "target": 6})),
    ("data", "#42 nums [1e20, ...]", "esopt.sweep", data({"nums": [1e20, 2, 3], "target": 6})),
    ("data", "#42 target 1e20", "esopt.sweep", data({"nums": [1, 2, 3], "target": 1e20})),
    ("trackers", "logger=[wandbb]", "esopt.sweep", ["logger=[tensorboard,wandbb]"]),
    ("trackers", "mlflow URI scheme htp", "esopt.sweep", ["logger=mlflow", "logger_opts.mlflow.tracking_uri=htp://127.0.0.1:5000"]),
    ("trackers", "mlflow URI without host", "esopt.sweep", ["logger=mlflow", "logger_opts.mlflow.tracking_uri=http://:5000"]),
    ("trackers", "mlflow URI bad port", "esopt.sweep", ["logger=mlflow", "logger_opts.mlflow.tracking_uri=http://127.0.0.1:50x0"]),
    ("trackers", "wandb mode onlin", "esopt.sweep", ["logger=[wandb]", "logger_opts.wandb.mode=onlin"]),
    ("trackers", "mlflow timeout_s=0", "esopt.sweep", ["logger=[mlflow]", "logger_opts.mlflow.timeout_s=0"]),
    ("storage", "storage URL bad port", "esopt.sweep", ["tuning.storage=postgresql://esopt:secret@127.0.0.1:notaport/esopt"]),
    ("storage", "storage URL missing //", "esopt.sweep", ["tuning.storage=postgresql:/esopt"]),
    ("storage", "unknown database", "esopt.sweep", ["tuning.storage=nosuchdb://a@127.0.0.1/esopt"]),
    ("storage", "unknown driver", "esopt.sweep", ["tuning.storage=postgresql+nosuchdriver://a@127.0.0.1/esopt"]),
    ("storage", "no server on the port", "esopt.sweep", ["tuning.storage=postgresql://esopt:x@127.0.0.1:9/esopt"]),
    ("evaluate", "evaluate model=nosuchmodel", "esopt.evaluate", ["model=nosuchmodel"]),
    ("evaluate", "evaluate eval.samples=0", "esopt.evaluate", ["model=tiny-xs", "eval.samples=0"]),
    ("evaluate", "#42 evaluate eval.out=<file>/x.json", "esopt.evaluate",
     lambda d: ["model=tiny-xs", "eval.problems=4", "eval.samples=2", f"eval.out={a_file(d)}/x.json"]),
    ("evaluate", "evaluate eval.out=<a directory>", "esopt.evaluate",
     lambda d: ["model=tiny-xs", "eval.problems=4", "eval.samples=2", f"eval.out={d}"]),
    ("aggregate", "aggregate a missing folder", "esopt.aggregate", ["/nonexistent/sweep"]),
    ("aggregate", "aggregate a folder without runs", "esopt.aggregate", lambda d: [str((d / "s").mkdir() or d / "s")]),
    ("aggregate", "aggregate --tolerance -1", "esopt.aggregate", lambda d: [str(d), "--tolerance", "-1"]),
    ("values", "#55 sweep.save_model='no'", "esopt.sweep", ["sweep.save_model='no'"]),
    ("values", "#55 sweep.keep_checkpoints=1", "esopt.sweep", ["sweep.keep_checkpoints=1"]),
    ("values", "#55 es.batched='0'", "esopt.sweep", ["es.batched='0'"]),
    ("values", "#55 seed=1e30", "esopt.sweep", ["seed=1e30"]),
    ("values", "#55 -m seed=0,1e30", "esopt.sweep", ["-m", "seed=0,1e30"]),
    ("values", "#55 model.trust_remote_code=no", "esopt.sweep", ["model.trust_remote_code=no"]),
    ("aggregate", "#55 aggregate with no argument", "esopt.aggregate", []),
    ("aggregate", "#55 aggregate a torn claims.json", "esopt.aggregate",
     lambda d: [str(planted(d, lambda s: (s / "claims.json").write_text('{"registration": {"des'))), "--claims"]),
    ("aggregate", "#55 aggregate a claims.json that is a list", "esopt.aggregate",
     lambda d: [str(planted(d, lambda s: (s / "claims.json").write_text("[1, 2]"))), "--claims"]),
    ("aggregate", "#55 aggregate a registration whose design is 5", "esopt.aggregate",
     lambda d: [str(planted(d, lambda s: (s / "claims.json").write_text('{"registration": {"design": 5}}'))),
                "--claims"]),
    ("analyze", "#55 analyze connectivity --sweep without a pair", "esopt.analyze",
     lambda d: ["connectivity", "--sweep", str(planted(d, lambda s: [shutil.rmtree(r) for r in (s / "runs").glob("grpo-*")]))]),
    ("analyze", "#55 analyze connectivity --sweep a missing folder", "esopt.analyze",
     ["connectivity", "--sweep", "/nonexistent/sweep"]),
    ("plan", "#55 plan --pilot whose base solved nothing", "esopt.design",
     lambda d: ["-m", "model=tiny-s", "algo=none,es", f"sweep.root={d / 'r'}", "--pilot", str(planted(d, unsolved))]),
    ("plan", "#55 plan --pilot ... --print-components, nothing solved", "esopt.design",
     lambda d: ["--pilot", str(planted(d, unsolved)), "--print-components"]),
]


# ------------------------------------------------------------------------------------ running
def files(d: Path) -> set[str]:
    return {str(p.relative_to(d)) for p in d.rglob("*")}


def try_case(case, work: Path) -> tuple[bool, str]:
    """(stopped cleanly, why not) for one case run in a fresh folder under ``work``."""
    _, name, module, argv = case
    d = Path(tempfile.mkdtemp(prefix="case-", dir=work))
    argv = argv(d) if callable(argv) else list(argv)
    if module == "esopt.sweep":
        if "-m" in argv:
            argv = ["-m", *[a for a in argv if a != "-m"]]
        argv = [argv[0], *TINY, *argv[1:]] if argv[:1] == ["-m"] else [*TINY, *argv]
        if not any(a.startswith("sweep.root=") for a in argv):
            argv.append(f"sweep.root={d / 'results'}")
    before = files(d)
    r = subprocess.run([sys.executable, "-m", module, *argv], cwd=d, env=ENV, capture_output=True, text=True,
                       timeout=600)
    err = [line for line in r.stderr.splitlines() if line.strip()]
    created = sorted(files(d) - before)
    why = []
    if r.returncode != 2:
        why.append(f"exit {r.returncode}")
    if len(err) != 1 or not err[0].startswith("esopt: error: "):
        why.append(f"{len(err)} stderr lines, last: {err[-1][:100] if err else ''!r}")
    if created:
        why.append(f"created {created[:2]}")
    return not why, "; ".join(why)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cats = list(dict.fromkeys(c[0] for c in CASES))
    ap.add_argument("--only", default=None, help=f"comma-separated categories of: {','.join(cats)}")
    ap.add_argument("--write-docs", action="store_true", help="write the table to docs/results/bad_inputs.md")
    args = ap.parse_args(argv)
    only = args.only.split(",") if args.only else cats
    if set(only) - set(cats):
        sys.exit(f"bench: unknown categories {sorted(set(only) - set(cats))} (known: {', '.join(cats)})")
    work, t0, results = Path(tempfile.mkdtemp(prefix="bench_bad_inputs_")), time.time(), []
    try:
        for case in [c for c in CASES if c[0] in only]:
            ok, why = try_case(case, work)
            results.append((case, ok, why))
            print(f"  {case[0]:9} {'ok ' if ok else 'NOT'} {case[1]}" + (f": {why}" if why else ""),
                  file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    header = ["category", "tried", "stopped cleanly", "not stopped cleanly"]
    rows = []
    for cat in only:
        mine = [(c, ok, why) for c, ok, why in results if c[0] == cat]
        bad = [f"{c[1]} ({why})" for c, ok, why in mine if not ok]
        rows.append([cat, len(mine), sum(ok for _, ok, _ in mine), "; ".join(bad) or "-"])
    tried, clean = len(results), sum(ok for _, ok, _ in results)
    rows.append(["all", tried, clean, f"{tried - clean} not clean"])
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(header)]
    for line in [header, *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(line, widths)).rstrip())
    print(f"{clean} of {tried} bad inputs stopped cleanly ({time.time() - t0:.0f} s)")
    if args.write_docs:
        from _results import write_table

        write_table("bad_inputs", "Bad inputs by category", None, header, rows, notes=(
            f"{tried} inputs, each one command in a fresh folder (`python -m esopt.sweep` with a tiny-xs "
            "ES run's flags unless the case is for another entry point). Stopped cleanly: exit "
            "2, exactly one stderr line `esopt: error: ...`, no file created. Issue 42's eleven are the cases "
            "named #42, issue 55's #55. The cases: benchmarks/bench_bad_inputs.py (CASES)."))
    return 0 if clean == tried else 1


if __name__ == "__main__":
    sys.exit(main())
