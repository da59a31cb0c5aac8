"""One prompt-style rule (``esopt.tasks.prompt_style``) for the run, validation and the dry run.

A local chat model (``model=local model.path=<dir>`` with ``prompt_style: null``) must get the
chat style, and its 1024-token budget, in the dry run's token estimate as in the run itself.
"""

import json
import shutil

import pytest

from esopt import tasks
from esopt.models.tiny import TINY_DIR
from tests.helpers import run_config

TEMPLATE = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"


@pytest.fixture()
def chat_dir(tmp_path):
    """tiny-xs with a chat template in its tokenizer_config.json: a local chat model."""
    d = tmp_path / "tiny-chat"
    shutil.copytree(TINY_DIR / "tiny-xs", d)
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    (d / "tokenizer_config.json").write_text(json.dumps({**cfg, "chat_template": TEMPLATE}))
    return d


def test_the_rule(chat_dir):
    plain = TINY_DIR / "tiny-xs"
    cd = {"name": "countdown"}
    assert tasks.prompt_style({**cd, "style": "compact"}, chat_dir, "chat") == "compact"   # task wins
    assert tasks.prompt_style(cd, chat_dir, "compact") == "compact"                         # then the model
    assert tasks.prompt_style(cd, chat_dir) == "chat"                                       # then the template
    assert tasks.prompt_style(cd, str(chat_dir)) == "chat"
    assert tasks.prompt_style(cd, plain) == "compact"
    assert tasks.prompt_style(cd, None) == "compact"
    assert tasks.prompt_style({"name": "addition"}, chat_dir) == "compact"                  # no chat style
    (chat_dir / "tokenizer_config.json").write_text("{}")
    (chat_dir / "chat_template.jinja").write_text(TEMPLATE)                                # transformers' file
    assert tasks.has_chat_template(chat_dir)
    assert not tasks.has_chat_template(chat_dir / "missing")


def test_dry_run_budget_equals_the_runs_for_a_local_chat_model(chat_dir):
    from hydra_plugins.esopt_sweeper.sweepers import estimate_tokens

    from esopt.runtime.run import load_components

    overrides = ("algo=none", "engine.device=cpu")
    rc = run_config("model=local", f"model.path={chat_dir}", "model.name=tiny-chat", *overrides)
    _, tokenizer, _, task = load_components(rc)                  # what the run builds
    assert tokenizer.chat_template == TEMPLATE
    assert task.style == "chat" and task.max_new_tokens == tasks.task_class("countdown").budgets["chat"]
    assert rc.task_spec.max_new_tokens == task.max_new_tokens    # what the dry run counts
    assert rc.task_spec.style == "chat" and rc.task_spec.stated is None  # the tokenizer decided, as read
    compact = run_config("model=tiny-xs", *overrides)
    assert compact.task_spec.max_new_tokens == tasks.task_class("countdown").budgets["compact"]
    ratio = task.max_new_tokens / compact.task_spec.max_new_tokens
    assert estimate_tokens(rc) == pytest.approx(ratio * estimate_tokens(compact))
