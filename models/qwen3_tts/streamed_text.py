"""A streamed request's text as it arrives → the token ids the talker consumes, one a frame.

Pieces of text do not tokenise on their own as they would together (a word cut in two, or
BPE merges across the cut), so only text up to a safe cut is tokenised: up to a space that
follows a non-space. The byte-level BPE's pre-tokeniser never merges across that boundary
(the space starts the next word's pre-token), so the ids of the parts, joined, are the ids of
the whole text; the last, maybe unfinished, word waits for more text or for the final piece.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from models.base import ModelInputError
from models.qwen3_tts.prompt import Encode


def safe_cut(text: str, start: int) -> int:
    """The end of the text that may be tokenised now: before the last space that follows a
    non-space, at or after `start` (else `start`: nothing yet)."""
    for i in range(len(text) - 1, start, -1):
        if text[i] == " " and not text[i - 1].isspace():
            return i
    return start


@dataclass
class StreamedText:
    encode: Encode
    max_chars: int
    text: str = ""  # everything received, the first piece's leading whitespace dropped
    cut: int = 0  # text[:cut] is tokenised
    ids: list[int] = field(default_factory=list)  # its ids

    def add(self, piece: str, final: bool) -> list[int]:
        """The ids of the text that became safe to tokenise with this piece (all of it when
        `final`)."""
        self.text = (self.text + piece).lstrip() if not self.text else self.text + piece
        if len(self.text) > self.max_chars:
            raise ModelInputError(
                f"the streamed text is {len(self.text)} characters; the limit is {self.max_chars}"
            )
        end = len(self.text.rstrip()) if final else safe_cut(self.text, self.cut)
        if end <= self.cut:
            return []
        new = self.encode(self.text[self.cut : end])
        self.cut = end
        self.ids += new
        return new
