"""The embedded tiny model family: character tokenizer and architecture configs.

Every member is a real ``Qwen2ForCausalLM`` (tied embeddings, 128 positions) over a
character-level ``PreTrainedTokenizerFast`` whose vocabulary is four specials plus the 95
printable ASCII characters. Weights are written by ``python -m esopt.cli.pretrain`` into
``esopt/models/tiny/<name>/`` and shipped with the package.
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config

TINY_DIR = Path(__file__).parent / "tiny"

SPECIALS = ("<pad>", "<eos>", "<bos>", "<unk>")  # ids 0..3
CHARS = tuple(chr(i) for i in range(32, 127))      # printable ASCII, ids 4..98
VOCAB = {tok: i for i, tok in enumerate(SPECIALS + CHARS)}
PAD_ID, EOS_ID, BOS_ID, UNK_ID = 0, 1, 2, 3
MAX_POSITIONS = 128

# Architecture per member: (hidden, layers, heads, kv_heads, intermediate). Head size 32
# everywhere (vLLM's CPU attention serves head sizes 32, 64, 80, ...; not 16). About 30k to
# 3.2M parameters (105x), roughly log-spaced. Parameter counts (tied embeddings, vocab 99) are
# checked in tests/models/test_models.py.
HEAD_DIM = 32
ARCH: dict[str, tuple[int, int, int, int, int]] = {
    "tiny-xs": (32, 2, 1, 1, 96),
    "tiny-s": (64, 2, 2, 1, 192),
    "tiny-m": (96, 3, 3, 1, 288),
    "tiny-l": (128, 4, 4, 2, 384),
    "tiny-xl": (192, 4, 6, 2, 576),
    "tiny-2xl": (256, 4, 8, 2, 768),
}
TINY: tuple[str, ...] = tuple(ARCH)


def char_tokenizer() -> PreTrainedTokenizerFast:
    """The tiny family's tokenizer: one token per printable ASCII character.

    Decoding concatenates tokens (no spaces added, no clean-up), so
    ``decode(encode(text)) == text`` for any printable-ASCII text. No BOS is added
    automatically (prompts encode identically with or without ``add_special_tokens``).
    Padding is on the left for batched generation.
    """
    tok = Tokenizer(models.WordLevel(vocab=dict(VOCAB), unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        eos_token="<eos>",
        bos_token="<bos>",
        unk_token="<unk>",
        padding_side="left",
        clean_up_tokenization_spaces=False,
        model_max_length=MAX_POSITIONS,
    )
    return fast


def tiny_config(name: str) -> Qwen2Config:
    """The ``Qwen2Config`` of tiny family member ``name`` (see ``ARCH``)."""
    hidden, layers, heads, kv_heads, inter = ARCH[name]
    return Qwen2Config(
        vocab_size=len(VOCAB),
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=HEAD_DIM,
        max_position_embeddings=MAX_POSITIONS,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        pad_token_id=PAD_ID,
        eos_token_id=EOS_ID,
        bos_token_id=BOS_ID,
        use_cache=True,
    )
