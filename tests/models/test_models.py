"""The model registry, the character tokenizer and the shipped tiny family (fast, CPU)."""

import json

import pytest
import torch

from esopt.core.errors import ConfigError
from esopt.models import REGISTRY, TINY, char_tokenizer, load, n_params
from esopt.models.tiny import CHARS, EOS_ID, PAD_ID, TINY_DIR


def test_registry_hub_ids():
    assert REGISTRY["qwen0.5b"] == "Qwen/Qwen2.5-0.5B-Instruct"
    assert REGISTRY["qwen7b"] == "Qwen/Qwen2.5-7B-Instruct"
    assert REGISTRY["llama1b"] == "meta-llama/Llama-3.2-1B-Instruct"
    assert REGISTRY["llama8b"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert set(REGISTRY) == {"qwen0.5b", "qwen1.5b", "qwen3b", "qwen7b", "llama1b", "llama3b", "llama8b"}
    assert TINY == ("tiny-xs", "tiny-s", "tiny-m", "tiny-l", "tiny-xl", "tiny-2xl")


def test_unknown_name_is_one_line_config_error():
    with pytest.raises(ConfigError) as e:
        load("tiny-xxl")
    msg = str(e.value)
    assert "\n" not in msg and "unknown model 'tiny-xxl'" in msg
    assert "tiny-s" in msg and "qwen1.5b" in msg and "llama8b" in msg


def test_missing_local_path_is_config_error(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load("tiny-s", path=str(tmp_path / "nope"))


def test_tokenizer_round_trips_all_printable_ascii():
    tok = char_tokenizer()
    texts = ["".join(CHARS), "  leading and trailing  ", "3 7 2=23:", "a  b", "(1+2)*3-4/5", " "]
    for text in texts:
        ids = tok(text)["input_ids"]
        assert len(ids) == len(text)  # one token per character, no BOS/EOS added
        assert tok.decode(ids) == text
    assert len(set(tok("".join(CHARS))["input_ids"])) == len(CHARS)
    assert tok.decode([*tok("3*7+2")["input_ids"], EOS_ID, PAD_ID], skip_special_tokens=True) == "3*7+2"
    assert tok.padding_side == "left" and tok.pad_token_id == PAD_ID and tok.eos_token_id == EOS_ID
    batch = tok(["ab", "abcd"], padding=True)
    assert batch["input_ids"][0][:2] == [PAD_ID, PAD_ID] and batch["attention_mask"][0] == [0, 0, 1, 1]


@pytest.fixture(scope="module")
def tiny_models():
    return {name: load(name) for name in TINY}


def test_tiny_family_loads_with_expected_sizes(tiny_models):
    sizes = {}
    for name, (model, tok) in tiny_models.items():
        assert type(model).__name__ == "Qwen2ForCausalLM"
        assert not model.training
        assert model.config.tie_word_embeddings and model.config.vocab_size == len(tok)
        assert tok.padding_side == "left" and tok.pad_token_id == PAD_ID and tok.eos_token_id == EOS_ID
        assert tok.decode(tok("12 3 4=36:")["input_ids"]) == "12 3 4=36:"
        card = json.loads((TINY_DIR / name / "pretrain_card.json").read_text())
        assert card["params"] == n_params(model)
        sizes[name] = n_params(model)
    values = [sizes[n] for n in TINY]
    assert values == sorted(values) and len(set(values)) == 6       # at least 6 sizes
    assert 20_000 <= values[0] <= 50_000 and values[-1] >= 3_000_000
    assert values[-1] / values[0] >= 100                             # spanning at least 100x
    for name, (model, _) in tiny_models.items():                      # vLLM's CPU attention: 32, 64, ...
        assert model.config.head_dim in (32, 64), (name, model.config.head_dim)
    total_bytes = sum((TINY_DIR / n / "model.safetensors").stat().st_size for n in TINY)
    assert total_bytes < 40 * 2**20


def test_save_load_round_trip_keeps_logits(tiny_models, tmp_path):
    model, tok = tiny_models["tiny-s"]
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    again, tok2 = load("ignored-when-path-given", path=str(tmp_path))
    enc = tok(["3 7 2=23:", "add 12 34:"], return_tensors="pt", padding=True)
    with torch.no_grad():
        a = model(**enc).logits
        b = again(**tok2(["3 7 2=23:", "add 12 34:"], return_tensors="pt", padding=True)).logits
    assert torch.equal(a, b)


def test_tiny_models_solve_some_train_problems_greedily(tiny_models):
    from esopt.tasks import countdown, get

    rows = get({"name": "countdown", "n_train": 3700}, style="compact").split("train").select(range(40)).to_list()
    for name in ("tiny-xs", "tiny-l"):
        model, tok = tiny_models[name]
        enc = tok([r["prompt"] for r in rows], return_tensors="pt", padding=True)
        with torch.no_grad():
            out = model.generate(**enc, do_sample=False, max_new_tokens=24,
                                 pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
        texts = tok.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        solved = sum(countdown.check_expression(t, r["numbers"], r["target"]) for t, r in zip(texts, rows))
        valid = sum(countdown.parse_expression(t) is not None for t in texts)
        assert valid >= 36, (name, texts[:5])  # well-formed expressions almost always
        assert solved >= 4, (name, solved)


def test_left_padding_does_not_change_greedy_output(tiny_models):
    model, tok = tiny_models["tiny-m"]
    prompts = ["7 1 5=35:", "12 11 10=100:"]
    with torch.no_grad():
        enc = tok(prompts, return_tensors="pt", padding=True)
        both = model.generate(**enc, do_sample=False, max_new_tokens=12, pad_token_id=0, eos_token_id=1)
        texts = tok.batch_decode(both[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        for p, t in zip(prompts, texts):
            e1 = tok([p], return_tensors="pt")
            one = model.generate(**e1, do_sample=False, max_new_tokens=12, pad_token_id=0, eos_token_id=1)
            assert tok.decode(one[0, e1["input_ids"].shape[1]:], skip_special_tokens=True) == t


def test_pretraining_problems_are_disjoint_from_every_rl_split():
    """The tiny family is pretrained on the generator's "pretrain" pool only (a hash of the
    problem key); the RL splits come from the other half, whatever the split sizes or seed."""
    from esopt.models.pretrain import COUNTDOWN, countdown_problems
    from esopt.tasks import countdown, get

    pre = {countdown.key(p["numbers"], p["target"]) for c in COUNTDOWN["problems"] for p in countdown_problems(c)}
    assert len(pre) > 20_000 and {countdown.pool_of(k) for k in pre} == {"pretrain"}
    for cfg in ({"name": "countdown"}, {"name": "countdown", "seed": 7, "n_train": 3000, "count": 4}):
        task = get(cfg, style="compact")
        for split in ("train", "test", "heldout"):
            keys = {countdown.key(r["numbers"], r["target"]) for r in task.split(split)}
            assert keys and not keys & pre, (cfg, split)
