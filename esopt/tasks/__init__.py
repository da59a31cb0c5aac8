"""Tasks: dataset splits + prompt formatting + a verifier that returns a reward with its parts.

A task never knows which algorithm calls it. Build one from the task config with::

    task = esopt.tasks.get(cfg.task, tokenizer=tok, style=cfg.model.prompt_style)
    rows = task.split("test")                  # datasets.Dataset: prompt, id, gold columns
    v = task.verify(completion, rows[0])       # Verdict(reward, format, answer, correct, extracted)
    vs = task.verdicts(completions, rows)      # the evaluator's batch check (GSM8K: math-verify)

Prompt styles: ``compact`` (the tiny character-level models: ``"3 7 2=23:"`` -> ``"3*7+2"``) and
``chat`` (instruct models: a chat-templated prompt). :func:`prompt_style` is the one rule, used
by the run, validation and the sweep's token estimate alike: the task config's ``style`` key
when set, else the model's ``prompt_style``, else ``chat`` when the tokenizer (or the model's
local directory) has a chat template and the task supports it, else ``compact``.

Splits are always ``train``, ``test`` and ``heldout``, pairwise disjoint (by the task's problem
key), and the same for the same knobs and seed. Each task module documents its split rule.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import math as _math  # esopt.tasks.math would shadow `math`
import os
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from esopt.core.config import SPLITS, at_least
from esopt.core.errors import ConfigError

STYLES: tuple[str, ...] = ("compact", "chat")

# task name -> (module, class name); modules are imported on first use (a registered class: itself).
_CLASSES = {
    "countdown": ("esopt.tasks.countdown", "CountdownTask"),
    "gsm8k": ("esopt.tasks.gsm8k", "GSM8KTask"),
    "addition": ("esopt.tasks.synthetic", "AdditionTask"),
    "compare": ("esopt.tasks.synthetic", "CompareTask"),
    "reverse": ("esopt.tasks.synthetic", "ReverseTask"),
    "math": ("esopt.tasks.math", "MathTask"),
    "arith": ("esopt.tasks.arith", "ArithTask"),
    "successor": ("esopt.tasks.probes", "SuccessorTask"),
    "copy": ("esopt.tasks.probes", "CopyTask"),
    "upper": ("esopt.tasks.probes", "UpperTask"),
    "first_letter": ("esopt.tasks.probes", "FirstLetterTask"),
    "passages": ("esopt.tasks.probes", "PassagesTask"),
}
TASK_NAMES: tuple[str, ...] = tuple(_CLASSES)


@dataclass(frozen=True)
class Verdict:
    reward: float  # total reward used for training (e.g. 0.1*format + answer)
    format: float  # format part
    answer: float  # answer part (1.0 correct / 0.0)
    correct: bool
    extracted: str | None  # normalised final answer (for majority voting), None if none found


class Task:
    """Base class: one subclass per task. Subclasses set the class attributes and implement
    ``_build`` (-> {"train": Dataset, "test": ..., "heldout": ...}) and ``verify``."""

    name: str = ""
    styles: tuple[str, ...] = ("compact",)  # prompt styles this task supports
    knobs: dict[str, Any] = {}  # option -> default (besides name and style)
    # knob -> the value at which it is left out of the run id (knobs added after runs were
    # recorded: a run at that value keeps the id it had before the knob existed; id_knobs)
    id_neutral: dict[str, Any] = {}
    eval_problems: int | None = 200  # problems evaluated when eval.problems is null (None = the whole split)
    verifier: str | None = None  # what decides Verdict.correct, when a task has several ways (recorded)
    budgets: dict[str, int] = {"compact": 24, "chat": 1024}  # style -> default max_new_tokens
    stops: dict[str, tuple[str, ...]] = {}  # style -> extra stop strings
    scored_by: str = "generation"  # or "likelihood": a text scored teacher-forced, nothing generated

    def __init__(self, cfg: Mapping | None = None, tokenizer=None, style: str | None = None):
        self.cfg: dict[str, Any] = self.resolve(resolve_knobs(self.name, cfg or {}, self.knobs))
        self.tokenizer = tokenizer
        chosen = prompt_style(self.cfg, tokenizer, style, supported=self.styles)
        if chosen not in self.styles:
            raise ConfigError(
                f"task {self.name} supports style {' or '.join(self.styles)}, not {chosen!r}"
            )
        self.style: str = chosen
        self.max_new_tokens: int = self.budgets[chosen]
        self.stop: list[str] = list(self.stops.get(chosen, ()))
        self._splits: dict | None = None
        self._validate()

    @classmethod
    def resolve(cls, cfg: dict[str, Any]) -> dict[str, Any]:
        """``cfg`` (every knob present) with the knobs whose default depends on other knobs
        filled in (a ``null`` meaning "the default for this source"). Pure: reads no data.
        Run validation stores the result, so a run's identity holds the values it used."""
        return cfg

    def _validate(self) -> None:
        """Check knob values (raise ConfigError); subclasses override."""

    def _build(self) -> dict:
        raise NotImplementedError

    def split(self, name: str):
        """The split ``name`` ("train" | "test" | "heldout") as a ``datasets.Dataset``."""
        if name not in SPLITS:
            raise ConfigError(f"unknown split {name!r}; known splits: {', '.join(SPLITS)}")
        if self._splits is None:
            self._splits = self._build()
        return self._splits[name]

    def verify(self, completion: str, row: Mapping) -> Verdict:
        raise NotImplementedError

    def rewards(self, completions: Sequence[str], rows: Sequence[Mapping]) -> list[float]:
        """``[verify(c, r).reward for c, r in zip(completions, rows)]`` (same lengths)."""
        if len(completions) != len(rows):
            raise ValueError(f"{len(completions)} completions for {len(rows)} rows")
        return [self.verify(c, r).reward for c, r in zip(completions, rows)]

    def verdicts(self, completions: Sequence[str], rows: Sequence[Mapping]) -> list[Verdict]:
        """The evaluation's verdicts for many completions at once (same lengths). Default:
        ``verify`` each; a task whose evaluation check is costly (GSM8K with math-verify) batches
        it here, while ``verify`` (called per completion in training) stays cheap."""
        if len(completions) != len(rows):
            raise ValueError(f"{len(completions)} completions for {len(rows)} rows")
        return [self.verify(c, r) for c, r in zip(completions, rows)]

    def reference(self, row: Mapping) -> str | None:
        """A gold completion in this task's style (for pretraining / sanity checks), or None."""
        return None

    def __repr__(self) -> str:
        return f"<Task {self.name} style={self.style}>"


def task_class(name: str) -> type:
    """The ``Task`` subclass of task ``name`` (its module is imported on first use)."""
    if name not in _CLASSES:
        raise ConfigError(f"unknown task {name!r}; known tasks: {', '.join(TASK_NAMES)}")
    entry = _CLASSES[name]
    if isinstance(entry, type):
        return entry
    module, cls = entry
    return getattr(importlib.import_module(module), cls)


def register(cls: type) -> type:
    """Add the ``Task`` subclass ``cls`` under its ``name`` (a task defined outside esopt/tasks,
    e.g. a test's or a benchmark's): validation, the run's plan and ``task=<name>`` then know it.
    Returns ``cls`` (a class decorator)."""
    global TASK_NAMES
    if not (isinstance(cls, type) and issubclass(cls, Task) and cls.name):
        raise ValueError(f"{cls!r} is not a named Task subclass")
    _CLASSES[cls.name] = cls
    TASK_NAMES = tuple(_CLASSES)
    return cls


def defaults(name: str) -> dict:
    """Task ``name``'s config at its defaults: ``{"name", "style": None, **knobs}`` (the
    ``task`` config group is built from this; the knobs are documented in each task module)."""
    cls = task_class(name)
    return {"name": name, "style": None, **cls.knobs}


def resolved(cfg: Mapping) -> dict:
    """Task config ``cfg`` with every knob present (defaults filled in) and the knobs whose
    default depends on the source resolved (``Task.resolve``); unknown keys are a ConfigError."""
    cfg = to_dict(cfg)
    cls = task_class(cfg.get("name"))
    return cls.resolve(resolve_knobs(cls.name, cfg, cls.knobs))


def id_knobs(cfg: Mapping) -> dict:
    """The task config as it enters the run id: ``cfg`` without the knobs at their
    ``Task.id_neutral`` value (e.g. countdown's ``test_draw`` 0: the standard test split)."""
    cfg = to_dict(cfg)
    neutral = task_class(cfg.get("name")).id_neutral
    return {k: v for k, v in cfg.items() if not (k in neutral and v == neutral[k])}


CHAT_TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")  # beside tokenizer_config.json


def has_chat_template(tokenizer_or_dir) -> bool:
    """Whether a tokenizer, or the model directory it loads from, has a chat template.

    A tokenizer: its ``chat_template``. A directory (``str`` / ``Path``): a ``chat_template``
    in its ``tokenizer_config.json``, or one of ``CHAT_TEMPLATE_FILES`` (how transformers saves
    it), read without loading the tokenizer. None (no tokenizer, a hub id) -> False.
    """
    if tokenizer_or_dir is None:
        return False
    if isinstance(tokenizer_or_dir, (str, os.PathLike)):
        d = Path(tokenizer_or_dir).expanduser()
        if any((d / f).is_file() for f in CHAT_TEMPLATE_FILES):
            return True
        try:
            return bool(json.loads((d / "tokenizer_config.json").read_text()).get("chat_template"))
        except (OSError, ValueError, AttributeError):
            return False
    return bool(getattr(tokenizer_or_dir, "chat_template", None))


def prompt_style(task_cfg: Mapping, tokenizer_or_dir=None, model_style: str | None = None,
                 supported: Sequence[str] | None = None) -> str:
    """The prompt style a task is built with; the one rule (module docstring).

    ``task_cfg["style"]`` when set, else ``model_style`` (the model config's ``prompt_style``),
    else ``"chat"`` when :func:`has_chat_template` (``tokenizer_or_dir``: the run's tokenizer,
    or the model's local directory before it is loaded) and the task supports chat
    (``supported``, default the task class's ``styles``), else ``"compact"``.
    """
    chosen = to_dict(task_cfg).get("style") or model_style
    if chosen is not None:
        return chosen
    styles = supported if supported is not None else task_class(to_dict(task_cfg).get("name")).styles
    return "chat" if "chat" in styles and has_chat_template(tokenizer_or_dir) else "compact"


def get(cfg: Mapping, tokenizer=None, style: str | None = None) -> Task:
    """Build the task named ``cfg["name"]`` with the other keys of ``cfg`` as its knobs."""
    cfg = to_dict(cfg)
    return task_class(cfg.get("name"))(cfg, tokenizer=tokenizer, style=style)


# ---------------------------------------------------------------- helpers for task modules


def to_dict(cfg: Mapping | None) -> dict:
    """A plain dict (resolving an OmegaConf DictConfig and its nested lists)."""
    if cfg is None:
        return {}
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(cfg):
            return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    except ImportError:  # pragma: no cover - omegaconf comes with hydra-core
        pass
    return dict(cfg)


def resolve_knobs(name: str, cfg: Mapping, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """Defaults overlaid with ``cfg``; ``name`` and ``style`` always present; unknown keys fail."""
    cfg = to_dict(cfg)
    known = {"name": name, "style": None, **defaults}
    unknown = sorted(set(cfg) - set(known))
    if unknown:
        raise ConfigError(
            f"task {name}: unknown option(s) {', '.join(unknown)}; "
            f"known: {', '.join(sorted(known))}"
        )
    return {**known, **cfg}


def check_int(task: str, key: str, value: Any, minimum: int = 0, allow_none: bool = False):
    """``value`` as an int >= minimum (or None if allowed); ConfigError otherwise."""
    return at_least(f"task {task}: {key}", value, minimum, allow_none=allow_none)


def check_counts(task: str, value: Any) -> list[int]:
    """``count`` knob: an int in 2..6 or a non-empty list of those -> list; ConfigError else."""
    counts = [value] if isinstance(value, int) else value
    if (
        not isinstance(counts, (list, tuple))
        or not counts
        or not all(type(k) is int and 2 <= k <= 6 for k in counts)
    ):
        raise ConfigError(f"task {task}: count must be 2..6 or a list of those, got {value!r}")
    return list(counts)


DRAWS_PER_PROBLEM, EXTRA_DRAWS = 50, 1000  # draws a generator may spend: 50 n + 1000 for n problems


def distinct_problems(n: int, draw: Callable[[], dict | None], key: Callable[[dict], Hashable], *,
                      exclude: Iterable = (), keep: Callable[[Hashable], bool] | None = None,
                      too_few: Callable[[int], str]) -> list[dict]:
    """``n`` problems from ``draw()`` (None = a miss), distinct by ``key(p)`` and none in
    ``exclude``, in draw order; a key ``keep`` rejects is seen but not kept. ConfigError with
    ``too_few(found)`` after ``DRAWS_PER_PROBLEM * n + EXTRA_DRAWS`` draws."""
    seen, out = set(exclude), []
    budget = DRAWS_PER_PROBLEM * n + EXTRA_DRAWS
    while len(out) < n:
        budget -= 1
        if budget < 0:
            raise ConfigError(too_few(len(out)))
        p = draw()
        if p is None:
            continue
        k = key(p)
        if k in seen:
            continue
        seen.add(k)
        if keep is None or keep(k):
            out.append(p)
    return out


def chat_prompt(tokenizer, messages: list[dict], suffix: str = "") -> str:
    """Chat-templated prompt text with the assistant turn opened, plus ``suffix``.

    Without a tokenizer or a chat template: a plain-text rendering of the same messages
    (``System: ...`` / ``User: ...`` / ``Assistant:``), so the prompt still ends with ``suffix``.
    """
    if tokenizer is not None and has_chat_template(tokenizer):
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return text + suffix
    lines = [f"{m['role'].capitalize()}: {m['content']}" for m in messages]
    return "\n".join(lines) + "\nAssistant: " + suffix


def make_dataset(rows: list[dict], features: Mapping[str, Any]):
    """``datasets.Dataset`` with the given features (``features``: column -> datasets feature)."""
    import datasets

    cols = {k: [r[k] for r in rows] for k in features}
    return datasets.Dataset.from_dict(cols, features=datasets.Features(features))


DATA_EXTENSIONS = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}


MAX_JSON_INT = 2**63 - 1  # the largest integer a data file may hold (int64, what the loader stores)


class _Oversized(str):
    """An integer literal of a data file too large to keep (see :func:`check_json_rows`)."""


def _json_int(text: str):
    return int(text) if len(text) <= 19 and abs(int(text)) <= MAX_JSON_INT else _Oversized(text)


def _json_float(text: str):
    f = float(text)
    return f if _math.isfinite(f) else _Oversized(text)


def _bad_constant(text: str):
    return _Oversized(text)  # NaN, Infinity, -Infinity: not JSON numbers


def _bad_value(value, path: str = "") -> tuple[str, str] | None:
    """Where in ``value`` (a row's field) a number out of range sits (``"[3]"``), and its text."""
    if isinstance(value, _Oversized):
        return path, f"{value[:40]}{'...' if len(value) > 40 else ''} ({len(value)} characters)"
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for k, v in items:
        found = _bad_value(v, f"{path}[{k!r}]" if isinstance(value, dict) else f"{path}[{k}]")
        if found:
            return found
    return None


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _coerced(text: str) -> bool:
    """Whether datasets would read string ``text`` of a field that other rows hold numbers
    in as another value (its Json column decodes ``"1e5"`` to 100000.0)."""
    try:
        value = json.loads(text)
    except ValueError:
        return False
    return not isinstance(value, str) and json.dumps(value) != text


def _jsonl_row(line: str, path: str, i: int, hooks: dict):
    """One row of a JSON Lines file; ConfigError naming the row when it is not JSON (datasets'
    own error names no row and logs a second line)."""
    try:
        return json.loads(line, **hooks)
    except ConfigError:
        raise
    except (ValueError, RecursionError) as e:
        raise ConfigError(f"{path}: row {i}: not a JSON object ({str(e).splitlines()[0][:80]})") from None


def check_json_rows(path: str, task: str) -> None:
    """Read a local ``.json`` / ``.jsonl`` data file as JSON says, before ``datasets`` does:
    its Arrow reader turns an integer past int64 or ``1e400`` into ``inf`` or an error naming
    no row, and its pandas fallback turns the string ``"1e5"`` into 100000 when other rows hold
    numbers. ConfigError naming the file, the row and the field for a number out of range
    (an integer past :data:`MAX_JSON_INT`, a float past the double range, NaN / Infinity) or a
    field holding a number in one row and a string in another."""
    hooks = dict(parse_int=_json_int, parse_float=_json_float, parse_constant=_bad_constant)
    try:
        with open(path, encoding="utf-8") as f:
            if path.lower().endswith(".jsonl"):
                parsed = enumerate(_jsonl_row(line, path, i, hooks)   # rows as datasets counts them
                                   for i, line in enumerate(ln for ln in f if ln.strip()))
            else:
                data = json.load(f, **hooks)
                parsed = enumerate(data) if isinstance(data, list) else iter(())
            numbers: dict[str, int] = {}   # field -> first row holding a number
            strings: dict[str, tuple[int, str]] = {}  # field -> first row holding a string read otherwise
            for i, row in parsed:
                if not isinstance(row, dict):
                    continue
                for field, value in row.items():
                    bad = _bad_value(value)
                    if bad is not None:
                        raise ConfigError(f"{path}: row {i}: field {field!r}{bad[0]}: number out of range "
                                          f"(an integer past int64, a float past 1.8e308, NaN or Infinity): "
                                          f"{bad[1]}")
                    if _is_number(value):
                        numbers.setdefault(field, i)
                    elif isinstance(value, str) and field not in strings and _coerced(value):
                        strings[field] = (i, value)
                    if field in numbers and field in strings:
                        j, text = strings[field]
                        raise ConfigError(f"{path}: row {j}: field {field!r} holds a string ({text!r:.40}) where "
                                          f"row {numbers[field]} holds a number (the loader would read it as "
                                          f"{json.loads(text)!r:.40}); write the field the same way in every row")
    except ConfigError:
        raise
    except (OSError, UnicodeDecodeError, ValueError):
        return  # unreadable or not JSON: datasets' own error (one line) follows


HUB_PROBE_S = 3.0  # seconds to reach the hub before a dataset not in the local cache is given up


def hub_unreachable() -> str | None:
    """Why the Hugging Face hub (``HF_ENDPOINT``) cannot be reached from here, in at most
    ``HUB_PROBE_S`` seconds (name lookup and TCP connect in a thread), else None. ``datasets``
    itself would retry for about 25 s before failing the same way."""
    import socket
    import threading
    from urllib.parse import urlparse

    from huggingface_hub import constants

    url = urlparse(constants.ENDPOINT)
    host, port = url.hostname or "", url.port or (443 if url.scheme == "https" else 80)
    why: list = ["no answer within %.0f s" % HUB_PROBE_S]

    def probe() -> None:
        try:
            socket.create_connection((host, port), timeout=HUB_PROBE_S).close()
            why[0] = None
        except OSError as e:
            why[0] = str(e) or type(e).__name__

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(HUB_PROBE_S + 0.5)
    return None if why[0] is None else f"{constants.ENDPOINT}: {why[0]}"


@contextlib.contextmanager
def hub_offline(enabled: bool = True):
    """Within: ``huggingface_hub`` and ``datasets`` in offline mode, as ``HF_HUB_OFFLINE=1`` /
    ``HF_DATASETS_OFFLINE=1`` make them when set before they are imported (they read those once):
    a hub dataset not in the cache fails at once instead of being downloaded. ``sweep.offline``."""
    import datasets
    from huggingface_hub import constants

    if not enabled:
        yield
        return
    names = ((constants, "HF_HUB_OFFLINE"), (datasets.config, "HF_HUB_OFFLINE"),
             (datasets.config, "HF_DATASETS_OFFLINE"))
    saved = [getattr(m, n, None) for m, n in names]
    for m, n in names:
        setattr(m, n, True)
    try:
        yield
    finally:
        for (m, n), v in zip(names, saved):
            setattr(m, n, v)


def hub_cached(source: str) -> bool:
    """Whether hub dataset ``source`` has been downloaded to this machine's caches (the hub's
    file cache or ``datasets``' prepared one), so ``datasets`` can load it without the hub."""
    import datasets
    from huggingface_hub import constants

    hub = Path(constants.HF_HUB_CACHE) / ("datasets--" + source.replace("/", "--"))
    prepared = Path(datasets.config.HF_DATASETS_CACHE) / source.replace("/", "___")
    return hub.is_dir() or prepared.is_dir()


def local_data_hint(task: str, split: str, layout: str | None) -> str:
    """How to give a task its data locally instead: ``task.source=`` and the expected layout."""
    files = layout or (f"a folder holding <split>.jsonl (or .json / .parquet; {split}.jsonl for this "
                       "split) or a save_to_disk folder, or a .json / .jsonl / .parquet file")
    return f"give the data as a local copy: task.source=<path> ({files})"


def load_split(source: str, task: str, split: str = "train", hub_config: str | None = None,
               layout: str | None = None):
    """``(rows, where)``: one split of a dataset through ``datasets``, and how to name it in an
    error message (``where``: the file path, or the folder / hub name with the split).

    ``source`` is, in this order: a local ``.json``/``.jsonl``/``.parquet`` file (``split`` is
    ignored); a folder holding ``<split>.jsonl`` (or ``.json`` / ``.parquet``), e.g.
    ``../shared/data/gsm8k``; a folder written by ``save_to_disk`` (a ``DatasetDict``'s
    ``split``, or a single ``Dataset``); anything else is a hub dataset name (needs network)
    loaded with config ``hub_config``. Every failure is one ConfigError line. Offline first: a
    hub dataset that is not in the local cache while the hub cannot be reached
    (:func:`hub_unreachable`, a few seconds) or while ``HF_HUB_OFFLINE`` is set fails at once,
    naming ``task.source=`` and the expected files (``layout``: the task's own description).
    """
    import os

    import datasets

    path = os.path.expanduser(str(source))
    kind = DATA_EXTENSIONS.get(os.path.splitext(path)[1].lower())
    try:
        if kind is not None:
            if not os.path.isfile(path):
                raise ConfigError(f"task {task}: data file not found: {path}")
            if kind == "json":
                check_json_rows(path, task)
            return datasets.load_dataset(kind, data_files=path, split="train"), path
        if os.path.isdir(path):
            for ext, k in DATA_EXTENSIONS.items():
                f = os.path.join(path, f"{split}{ext}")
                if os.path.isfile(f):
                    if k == "json":
                        check_json_rows(f, task)
                    return datasets.load_dataset(k, data_files=f, split="train"), f
            if not any(os.path.exists(os.path.join(path, m))
                       for m in ("dataset_dict.json", "state.json", "dataset_info.json")):
                raise ConfigError(
                    f"task {task}: {path} has no {split}.jsonl, {split}.json or {split}.parquet "
                    "and is not a save_to_disk folder"
                )
            ds = datasets.load_from_disk(path)
            if isinstance(ds, datasets.DatasetDict):
                if split not in ds:
                    raise ConfigError(f"task {task}: {path} has splits {', '.join(ds)}, not {split!r}")
                ds = ds[split]
            return ds, f"{path} ({split})"
        if os.path.sep in path and (path.startswith((".", "/", "~")) or os.path.exists(path)):
            raise ConfigError(f"task {task}: data file not found: {path}")
        where = f"{source} ({hub_config + ', ' if hub_config else ''}{split})"
        if not datasets.config.HF_HUB_OFFLINE and not hub_cached(source):
            unreachable = hub_unreachable()
            if unreachable:
                raise ConfigError(f"task {task}: cannot fetch {source!r} from the hub ({unreachable}) and it "
                                  f"is not in the local cache; {local_data_hint(task, split, layout)}")
        return datasets.load_dataset(source, hub_config, split=split), where
    except ConfigError:
        raise
    except Exception as e:  # datasets raises many types; give the user one line
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        hub = not os.path.exists(path) and kind is None
        raise ConfigError(f"task {task}: cannot load {source!r} (split {split!r}): {msg}"
                          + (f"; {local_data_hint(task, split, layout)}" if hub else "")) from e


def load_rows(source: str, task: str, hub_config: str | None = None, hub_split: str = "train"):
    """The rows of ``load_split(source, task, hub_split, hub_config)`` (without ``where``)."""
    return load_split(source, task, hub_split, hub_config)[0]
