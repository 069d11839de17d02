"""A GLM-4-Voice-shaped tokenizer.json for the tiny preset, built offline: every UTF-8 byte is
one token (no merges), then GLM-4's specials and `num_audio` speech tokens <|audio_i|> with
consecutive ids, as in the real vocabulary (where text comes first and the audio tokens last)."""

from __future__ import annotations

from pathlib import Path

from models.glm_voice import tokens as T

SPECIALS = (
    T.END_OF_TEXT,
    *T.PREFIX,
    T.SYSTEM,
    T.USER,
    T.ASSISTANT,
    T.OBSERVATION,
    T.BEGIN_OF_AUDIO,
    T.END_OF_AUDIO,
)


def write_tiny_tokenizer(folder: Path, num_audio: int) -> int:
    """Writes folder/tokenizer.json; returns the vocabulary size."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    from models.orpheus.tiny_tokenizer import _byte_alphabet

    vocab = {ch: i for i, ch in enumerate(_byte_alphabet())}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    names = [*SPECIALS, *(T.audio_token(i) for i in range(num_audio))]
    tok.add_special_tokens([AddedToken(n, special=True, normalized=False) for n in names])
    tok.save(str(folder / "tokenizer.json"))
    return tok.get_vocab_size()
