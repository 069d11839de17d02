"""GPT-2's byte-level alphabet, shared by the tokenizers this repo writes or converts."""

from __future__ import annotations


def byte_alphabet() -> list[str]:
    """The printable stand-in character for each byte value (what `tokenizers`' ByteLevel
    pre-tokeniser maps bytes to): printable Latin-1 bytes stand for themselves, the rest take
    code points from 256 up, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars, extra = [], 0
    for b in range(256):
        if b in printable:
            chars.append(chr(b))
        else:
            chars.append(chr(256 + extra))
            extra += 1
    return chars


def merge_free_bpe(vocab: dict[str, int]) -> dict:
    """A `tokenizers` BPE model over `vocab` with no merges (tokenizer.json's "model"): the
    tiny presets' tokenizers, which spell text byte by byte with the real special ids."""
    return {
        "type": "BPE",
        "dropout": None,
        "unk_token": None,
        "continuing_subword_prefix": None,
        "end_of_word_suffix": None,
        "fuse_unk": False,
        "byte_fallback": False,
        "ignore_merges": False,
        "vocab": vocab,
        "merges": [],
    }
