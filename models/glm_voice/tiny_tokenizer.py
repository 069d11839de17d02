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

    from models.byte_level import byte_alphabet

    vocab = {ch: i for i, ch in enumerate(byte_alphabet())}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    names = [*SPECIALS, *(T.audio_token(i) for i in range(num_audio))]
    tok.add_special_tokens([AddedToken(n, special=True, normalized=False) for n in names])
    tok.save(str(folder / "tokenizer.json"))
    return tok.get_vocab_size()


# English text the tiny tiktoken BPE learns its merges on (any text works; this has words,
# digits, punctuation and contractions so the merges cover every kind of piece).
_TRAINING_TEXT = (
    "The quick brown fox jumps over the lazy dog. It's 12:45 and the 3 dogs haven't eaten; "
    "they're waiting for 2024's first snow, which we'll see in December. Speech models turn "
    "sound into tokens, then tokens back into sound: one stream, 12.5 tokens per second. "
    "Hello, hello! How are you doing today? I'm fine, thank you, and you? "
    "Numbers like 1000000 and 3.14159 are split into groups of three digits.\n\n"
    "    Indented lines, tabs\tand trailing spaces   \nare whitespace runs the pattern keeps. "
)


UNREACHABLE_TOKEN = " Voxgate"


def train_tiktoken_ranks(text: str, num_merges: int, seed: int = 0) -> dict[bytes, int]:
    """A small tiktoken vocabulary: the 256 bytes (ranks in a seeded shuffled order, as a real
    vocabulary's byte ranks are not byte order) then `num_merges` BPE merges learned on `text`
    split by GLM-4's pattern, each merge's token ranked after the ones before it."""
    import random

    import regex

    from models.glm_voice.tiktoken_convert import GLM4_SPLIT_PATTERN

    order = list(range(256))
    random.Random(seed).shuffle(order)
    ranks = {bytes([b]): r for r, b in enumerate(order)}
    words: dict[tuple[bytes, ...], int] = {}
    for piece in regex.findall(GLM4_SPLIT_PATTERN, text):
        key = tuple(bytes([b]) for b in piece.encode())
        words[key] = words.get(key, 0) + 1
    for _ in range(num_merges):
        counts: dict[tuple[bytes, bytes], int] = {}
        for word, n in words.items():
            for pair in zip(word, word[1:], strict=False):
                counts[pair] = counts.get(pair, 0) + n
        if not counts:
            break
        best = max(counts, key=lambda p: (counts[p], -ranks[p[0]], -ranks[p[1]]))
        ranks[best[0] + best[1]] = len(ranks)
        merged: dict[tuple[bytes, ...], int] = {}
        for word, n in words.items():
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    out.append(word[i] + word[i + 1])
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] = merged.get(tuple(out), 0) + n
        words = merged
    return ranks


def glm_added_tokens(first_id: int, num_audio: int, audio_gap: int = 0) -> dict[int, str]:
    """GLM-4-Voice's added tokens by id: the specials from `first_id` (the first id past the
    BPE ranks), then, `audio_gap` ids later, the `<|audio_i|>` tokens."""
    names = [*SPECIALS, *(T.audio_token(i) for i in range(num_audio))]
    ids = [first_id + k for k in range(len(SPECIALS))]
    audio_base = first_id + len(SPECIALS) + audio_gap
    ids += [audio_base + i for i in range(num_audio)]
    return dict(zip(ids, names, strict=True))


def write_tiny_tiktoken(folder: Path, num_audio: int, num_merges: int = 300) -> int:
    """THUDM/glm-4-voice-9b's tokenizer layout: `tokenizer.model` (tiktoken: `base64 rank` per
    line) and `tokenizer_config.json` (added_tokens_decoder with the specials and audio
    tokens; the audio tokens start a few ids past the specials, so the ids have a gap as a
    published vocabulary may). No tokenizer.json. Returns the vocabulary size (ids 0…max)."""
    import base64
    import json

    ranks = train_tiktoken_ranks(_TRAINING_TEXT, num_merges)
    # A token no chain of merges reaches, as large published vocabularies have: tiktoken
    # takes a pre-tokenised piece that is itself a token whole, whatever the merges say.
    ranks.setdefault(UNREACHABLE_TOKEN.encode(), len(ranks))
    lines = [
        f"{base64.b64encode(t).decode()} {r}" for t, r in sorted(ranks.items(), key=lambda x: x[1])
    ]
    (folder / "tokenizer.model").write_text("\n".join(lines) + "\n")
    added = glm_added_tokens(len(ranks), num_audio, audio_gap=3)
    config = {
        "tokenizer_class": "ChatGLM4Tokenizer",
        "auto_map": {"AutoTokenizer": ["tokenization_chatglm.ChatGLM4Tokenizer", None]},
        "eos_token": T.END_OF_TEXT,
        "pad_token": T.END_OF_TEXT,
        "added_tokens_decoder": {
            str(i): {
                "content": name,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": True,
            }
            for i, name in added.items()
        },
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    return max(added) + 1
