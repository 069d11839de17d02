"""Chatterbox's text front end: the published punctuation clean-up (tts.punc_norm) and the
English tokenizer (`tokenizer.json`, read with `tokenizers`; spaces are the `[SPACE]` token),
framed by the start/stop text ids T3 expects."""

from __future__ import annotations

from pathlib import Path

from models.chatterbox.config import T3_FACTS, TOKENIZER_FILE
from models.checkpoint_errors import CheckpointError

SPACE = "[SPACE]"
SPECIALS = ("[START]", "[STOP]", "[UNK]", SPACE, "[PAD]", "[SEP]", "[CLS]", "[MASK]")
EMPTY_TEXT = "You need to add some text for me to talk."
REPLACEMENTS = (
    ("...", ", "),
    ("…", ", "),
    (":", ","),
    (" - ", ", "),
    (";", ", "),
    ("—", "-"),
    ("–", "-"),
    (" ,", ","),
    ("“", '"'),
    ("”", '"'),
    ("‘", "'"),
    ("’", "'"),
)
SENTENCE_ENDS = (".", "!", "?", "-", ",")


def normalise_punctuation(text: str) -> str:
    """tts.punc_norm: capitalised, single spaces, uncommon punctuation replaced, a full stop
    added when the text ends without one."""
    if not text:
        return EMPTY_TEXT
    if text[0].islower():
        text = text[0].upper() + text[1:]
    text = " ".join(text.split())
    for old, new in REPLACEMENTS:
        text = text.replace(old, new)
    text = text.rstrip(" ")
    if not text.endswith(SENTENCE_ENDS):
        text += "."
    return text


class TextTokenizer:
    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer

        try:
            self.tokenizer = Tokenizer.from_file(str(path))
        except FileNotFoundError:
            raise CheckpointError(
                f"checkpoint folder {path.parent} lacks {TOKENIZER_FILE}"
            ) from None
        except Exception as exc:
            raise CheckpointError(f"{path} is not a tokenizers JSON file: {exc}") from None
        vocab = self.tokenizer.get_vocab()
        for token in ("[START]", "[STOP]", SPACE):
            if token not in vocab:
                raise CheckpointError(f"{path} lacks the {token} token of Chatterbox's tokenizer")

    def text_ids(self, text: str) -> list[int]:
        """start_text, the normalised text's ids, stop_text (ChatterboxTTS.generate)."""
        ids = self.tokenizer.encode(normalise_punctuation(text).replace(" ", SPACE)).ids
        return [T3_FACTS.start_text, *ids, T3_FACTS.stop_text]
