"""Bad input for engine=vllm is one line and exit 2 before any run starts (no vLLM needed)."""

import importlib.util

import pytest
from helpers import cli, random_model

from esopt import engines
from esopt.core.errors import ConfigError
from esopt.models import char_tokenizer


def _model_dir(tmp_path, head: int):
    """A random tiny Qwen2 with the given attention head size, saved with the char tokenizer."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tok = char_tokenizer()
    if head == 8:
        model = random_model(tok)  # hidden 32, 4 heads
    else:
        model = Qwen2ForCausalLM(Qwen2Config(
            vocab_size=len(tok), hidden_size=2 * head, num_hidden_layers=1, num_attention_heads=2,
            num_key_value_heads=1, intermediate_size=64, max_position_embeddings=128,
            tie_word_embeddings=True, pad_token_id=0, eos_token_id=1, bos_token_id=2))
    path = tmp_path / f"head{head}"
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def _one_line_exit_2(proc, needle):
    err = proc.stderr.strip()
    assert proc.returncode == 2, proc.stderr
    assert err.startswith("esopt: error: ") and needle in err and len(err.splitlines()) == 1, err


def test_head_size_vllm_cannot_serve_on_cpu_is_refused(tmp_path, results_root):
    path = _model_dir(tmp_path, 8)
    proc = cli("esopt.sweep", "engine=vllm", "model=tiny-s", f"model.path={path}", "iterations=1",
                   f"sweep.root={results_root}")
    _one_line_exit_2(proc, "attention head size is 8")
    assert "scripts/install_vllm.sh" not in proc.stderr
    assert not (results_root / "default" / "runs").exists()  # nothing started


def test_engine_vllm_without_vllm_says_how_to_install(tmp_path, results_root):
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here")
    path = _model_dir(tmp_path, 32)
    for module in ("esopt.sweep", "esopt.evaluate"):
        proc = cli(module, "engine=vllm", "model=tiny-s", f"model.path={path}", "eval.problems=4",
                       f"sweep.root={results_root}")
        _one_line_exit_2(proc, "bash scripts/install_vllm.sh")
    assert not (results_root / "default" / "runs").exists()


def test_vllm_engine_settings_are_checked():
    with pytest.raises(ConfigError, match="tensor_parallel_size must be 1"):
        engines.parse({"name": "vllm", "tensor_parallel_size": 2})
    with pytest.raises(ConfigError, match="engine.dtype"):
        engines.parse({"name": "vllm", "dtype": "fp8"})
    with pytest.raises(ConfigError, match="kv_cache_mb"):
        engines.parse({"name": "vllm", "kv_cache_mb": 0})
    assert engines.parse({"name": "vllm"}).enforce_eager is None  # auto: eager on CPU


@pytest.mark.parametrize("args, needle", [
    (("es.full_rank=true",), "engine=vllm batches low-rank members only: es.full_rank=true needs engine=hf"),
    (("es.targets=all",), "batches members over es.targets=linear only"),
    (("es.perturb_rank=33",), "es.perturb_rank=33 is above the smallest linear layer dimension of model 'tiny-s' (32)"),
], ids=["full-rank", "targets-all", "rank-above-layer"])
def test_batched_population_with_vllm_bad_input_is_refused_before_running(tmp_path, results_root, args, needle):
    """es.batched=true with engine=vllm is low-rank LoRA members of the linear layers (issue 43):
    what LoRA cannot do is refused from the engine's declared capabilities, before any run."""
    path = _model_dir(tmp_path, 32)  # hidden 64, one kv head of 32: the smallest layer dimension is 32
    proc = cli("esopt.sweep", "engine=vllm", "algo=es", "model=tiny-s", f"model.path={path}", "es.batched=true",
               *args, f"sweep.root={results_root}")
    _one_line_exit_2(proc, needle)
    assert not (results_root / "default" / "runs").exists()


def test_vllm_without_lora_is_refused(tmp_path, monkeypatch):
    """A vLLM whose build has no LoRA (vllm.lora missing) cannot batch a population."""
    from esopt.engines.vllm import VLLMEngine

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "vllm.lora" else object() if name == "vllm" else real(name, *a))
    path = _model_dir(tmp_path, 32)
    with pytest.raises(ConfigError, match=r"needs vLLM's LoRA support \(vllm.lora\), which this vLLM lacks"):
        VLLMEngine.check_population(engines.parse({"name": "vllm"}), {"name": "tiny-s", "path": str(path)}, 2)
