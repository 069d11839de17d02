"""A Qwen2-shaped tokenizer.json for the tiny preset, built offline.

The real one is Qwen2's byte-level BPE (151643 tokens, then <|endoftext|>, <|im_start|>,
<|im_end|> …). Ours keeps the ids a Qwen3-TTS prompt depends on: the chat markers at their
real ids, and "assistant" as one token at its real id (the prompt format takes the first three
tokens of "<|im_start|>assistant\\n" as the role). Its BPE has no merges otherwise: every other
UTF-8 byte is one token; ids 256..151642 are placeholders.
"""

from __future__ import annotations

import json
from pathlib import Path

from models.byte_level import byte_alphabet, merge_free_bpe

ENDOFTEXT, IM_START, IM_END = 151643, 151644, 151645
ASSISTANT = 77091  # "assistant" in Qwen2's vocabulary


def _added(token_id: int, content: str, special: bool) -> dict:
    return {
        "id": token_id,
        "content": content,
        "single_word": False,
        "lstrip": False,
        "rstrip": False,
        "normalized": False,
        "special": special,
    }


def write_tiny_tokenizer(folder: Path) -> None:
    vocab = {ch: i for i, ch in enumerate(byte_alphabet())}
    vocab.update({f"<|placeholder_{i}|>": i for i in range(256, ENDOFTEXT) if i != ASSISTANT})
    vocab["assistant"] = ASSISTANT
    added = [
        _added(ASSISTANT, "assistant", special=False),
        _added(ENDOFTEXT, "<|endoftext|>", special=True),
        _added(IM_START, "<|im_start|>", special=True),
        _added(IM_END, "<|im_end|>", special=True),
    ]
    byte_level = {"add_prefix_space": False, "trim_offsets": False, "use_regex": True}
    spec = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", **byte_level},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", **byte_level},
        "model": merge_free_bpe(vocab),
    }
    (folder / "tokenizer.json").write_text(json.dumps(spec))
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "eos_token": "<|im_end|>",
                "pad_token": "<|endoftext|>",
                "model_max_length": 131072,
                "tokenizer_class": "PreTrainedTokenizerFast",
            }
        )
    )
