"""GLM-4's published tiktoken tokenizer → a Hugging Face `tokenizers` Tokenizer.

THUDM/glm-4-voice-9b ships `tokenizer.model` (tiktoken's format: one `base64(token bytes) rank`
per line, ranks 0…n-1 with no gaps) for its remote-code `ChatGLM4Tokenizer`, which runs
`tiktoken.Encoding(pat_str=GLM4_SPLIT_PATTERN, mergeable_ranks=…, special_tokens={})`. Every
token past the BPE ranks (GLM-4's specials `<|endoftext|>`… `<|observation|>`, the audio
markers, the 16384 `<|audio_i|>`) is an added token listed with its id under
`added_tokens_decoder` in `tokenizer_config.json`; transformers cuts text at those before the
BPE runs, and decoding writes their text as is.

The same tokenizer as byte-level BPE: the vocabulary is the ranks (bytes spelled in GPT-2's
byte alphabet), and a merge (a, b) exists for every split of a token into two vocabulary
tokens, ranked by the merged token's rank. tiktoken merges the adjacent pair whose
concatenation has the lowest rank; BPE with those merges does the same, and `ignore_merges`
gives tiktoken's shortcut of taking a whole pre-tokenised piece that is itself a token.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from models.byte_level import byte_alphabet
from models.checkpoint_errors import CheckpointError

# ChatGLM4Tokenizer's split pattern (the same as Llama 3's): contractions, letters with one
# leading non-letter, digits in threes, punctuation runs, newlines, then other whitespace.
GLM4_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
    r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def read_tiktoken_ranks(path: Path) -> dict[bytes, int]:
    """`tokenizer.model` → {token bytes: rank}."""
    ranks: dict[bytes, int] = {}
    for n, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token, validate=True)] = int(rank)
        except ValueError as e:
            raise CheckpointError(
                f"{path}:{n} is not a tiktoken line `base64 rank` ({e}); is this GLM-4's "
                "tokenizer.model?"
            ) from e
    if sorted(ranks.values()) != list(range(len(ranks))):
        raise CheckpointError(f"{path}: the ranks are not 0…{len(ranks) - 1} without gaps")
    missing = [b for b in range(256) if bytes([b]) not in ranks]
    if missing:
        raise CheckpointError(f"{path} lacks single-byte tokens (e.g. byte {missing[0]})")
    return ranks


def read_added_tokens(path: Path, num_ranks: int) -> list[dict]:
    """`tokenizer_config.json`'s added_tokens_decoder → its entries (content, special, lstrip…)
    with their ids, sorted by id."""
    if not path.exists():
        raise CheckpointError(
            f"{path} is missing: GLM-4's tokenizer.model needs it for the special and audio "
            "tokens' ids (added_tokens_decoder); download it with the checkpoint"
        )
    decoder = json.loads(path.read_text()).get("added_tokens_decoder")
    if not decoder:
        raise CheckpointError(f"{path} has no added_tokens_decoder (GLM-4's special tokens)")
    added = []
    for key, entry in decoder.items():
        i = int(key)
        if i < num_ranks:
            raise CheckpointError(
                f"{path}: added token {entry['content']!r} has id {i}, inside the "
                f"{num_ranks} BPE ranks of tokenizer.model"
            )
        added.append({"id": i, **entry})
    return sorted(added, key=lambda t: t["id"])


def recover_merges(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """Every (a, b) with a, b and a+b all tokens, in the order BPE must apply them: by the
    rank of a+b (tiktoken's priority), then by the pieces' ranks (a fixed order for ties)."""
    merges = []
    for token, rank in ranks.items():
        for cut in range(1, len(token)):
            a, b = token[:cut], token[cut:]
            ra, rb = ranks.get(a), ranks.get(b)
            if ra is not None and rb is not None:
                merges.append((rank, ra, rb, a, b))
    merges.sort()
    return [(a, b) for _, _, _, a, b in merges]


def tiktoken_to_tokenizer(model_path: Path, config_path: Path):
    """A `tokenizers.Tokenizer` that encodes and decodes as ChatGLM4Tokenizer does, with every
    added token at its published id."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    ranks = read_tiktoken_ranks(model_path)
    added = read_added_tokens(config_path, len(ranks))
    alphabet = byte_alphabet()

    def spell(token: bytes) -> str:
        return "".join(alphabet[b] for b in token)

    vocab = {spell(t): r for t, r in ranks.items()}
    # Added tokens go into the vocabulary at their own ids (the published ids may leave gaps,
    # which `add_special_tokens` alone would close up); they are matched before the BPE runs.
    vocab.update({t["content"]: t["id"] for t in added})
    merges = [(spell(a), spell(b)) for a, b in recover_merges(ranks)]
    bpe = models.BPE(vocab=vocab, merges=merges, ignore_merges=True, fuse_unk=False)
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(GLM4_SPLIT_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()

    def added_token(t: dict, special: bool) -> AddedToken:
        # The entry's own matching flags (transformers honours them the same way).
        flags = {k: bool(t.get(k, False)) for k in ("lstrip", "rstrip", "single_word")}
        return AddedToken(t["content"], special=special, normalized=False, **flags)

    tok.add_special_tokens([added_token(t, True) for t in added if t.get("special", True)])
    tok.add_tokens([added_token(t, False) for t in added if not t.get("special", True)])
    for t in added:  # the ids must be the published ones, or the model's embeddings mismatch
        if tok.token_to_id(t["content"]) != t["id"]:
            raise CheckpointError(
                f"converting {model_path}: {t['content']!r} did not keep id {t['id']}"
            )
    return tok
