"""A Llama-3-shaped tokenizer.json for the tiny preset, built offline.

The real Orpheus tokenizer is Llama 3's (128000 BPE tokens, specials from 128000, a template
that prepends <|begin_of_text|>). Ours keeps that shape — same special ids, same template —
but its BPE has no merges: every UTF-8 byte is one token. Ids 256..127999 are placeholders
so that the specials land on their real ids.
"""

from __future__ import annotations

import json
from pathlib import Path

from models.byte_level import byte_alphabet, merge_free_bpe
from models.orpheus import tokens as T

_SPECIALS = {0: "<|begin_of_text|>", 1: "<|end_of_text|>", 9: "<|eot_id|>"}


def write_tiny_tokenizer(folder: Path, specials: dict[int, str] | None = None) -> None:
    """`specials` renames reserved special tokens (offset from <|begin_of_text|> → name), as
    models built on Llama 3 do (CSM: 2 → <|AUDIO|>, 3 → <|audio_eos|>)."""
    names = {**_SPECIALS, **(specials or {})}
    vocab = {ch: i for i, ch in enumerate(byte_alphabet())}
    vocab.update({f"<|placeholder_{i}|>": i for i in range(256, T.BEGIN_OF_TEXT)})
    added = []
    for k in range(256):
        content = names.get(k, f"<|reserved_special_token_{k}|>")
        added.append(
            {
                "id": T.BEGIN_OF_TEXT + k,
                "content": content,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
        )
    bos = _SPECIALS[0]
    spec = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {
            "type": "ByteLevel",
            "add_prefix_space": False,
            "trim_offsets": True,
            "use_regex": True,
        },
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [
                {"SpecialToken": {"id": bos, "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
            ],
            "pair": [
                {"SpecialToken": {"id": bos, "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
                {"SpecialToken": {"id": bos, "type_id": 1}},
                {"Sequence": {"id": "B", "type_id": 1}},
            ],
            "special_tokens": {bos: {"id": bos, "ids": [T.BEGIN_OF_TEXT], "tokens": [bos]}},
        },
        "decoder": {
            "type": "ByteLevel",
            "add_prefix_space": True,
            "trim_offsets": True,
            "use_regex": True,
        },
        "model": merge_free_bpe(vocab),
    }
    (folder / "tokenizer.json").write_text(json.dumps(spec))
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "bos_token": bos,
                "eos_token": _SPECIALS[9],
                "model_max_length": 131072,
                "tokenizer_class": "PreTrainedTokenizerFast",
                "clean_up_tokenization_spaces": True,
            }
        )
    )
    (folder / "special_tokens_map.json").write_text(
        json.dumps({"bos_token": bos, "eos_token": _SPECIALS[9]})
    )
