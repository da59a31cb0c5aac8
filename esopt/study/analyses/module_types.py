"""Module types of a transformer's parameters, by name: the one home of ``MODULE_TYPES``.

Torch-free (the page, ``esopt.study.report.page``, reads the list without loading models); the
drift analysis (``esopt.study.analyses.drift``) groups tensors with :func:`module_type` / :func:`layer_of`.
"""

from __future__ import annotations

import re

MODULE_TYPES = ("embeddings", "attn_q", "attn_k", "attn_v", "attn_o", "attn_qkv", "mlp", "norm",
                "lm_head", "other")   # display order; _TYPE_PATTERNS is the matching order


_TYPE_PATTERNS = (
    ("lm_head", r"(^|\.)(lm_head|embed_out|output_layer)\."),
    ("embeddings", r"(^|\.)(embed_tokens|embed_positions|wte|wpe|word_embeddings|embeddings)\."),
    ("norm", r"norm|(^|\.)ln_?\w*\."),
    ("attn_qkv", r"(^|\.)(qkv_proj|c_attn|query_key_value|Wqkv)\."),
    ("attn_q", r"(^|\.)(q_proj|query)\."),
    ("attn_k", r"(^|\.)(k_proj|key)\."),
    ("attn_v", r"(^|\.)(v_proj|value)\."),
    ("attn_o", r"(^|\.)(o_proj|out_proj)\.|attn\.c_proj\.|attention\.dense\."),
    ("mlp", r"(^|\.)(mlp|feed_forward|ffn)\.|(gate_proj|up_proj|down_proj|fc1|fc2)\."),
)


def module_type(name: str) -> str:
    """Module type of a parameter name (Qwen2/Llama names; common GPT-style names too)."""
    for kind, pattern in _TYPE_PATTERNS:
        if re.search(pattern, name):
            return kind
    return "other"


def layer_of(name: str) -> str:
    """The transformer layer index in a parameter name, or "none" (embeddings, final norm, head)."""
    m = re.search(r"(?:^|\.)(?:layers|h|blocks|layer)\.(\d+)\.", name)
    return m.group(1) if m else "none"
