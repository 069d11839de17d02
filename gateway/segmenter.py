"""Streamed text → sentence-sized segments, each its own engine request.

An LLM streams its answer a few characters at a time; waiting for the whole answer before
speaking would add its full generation time to the time-to-first-audio. So a response's text is
cut at sentence boundaries as it arrives, and every complete segment starts generating at once.

Rules (docs/gateway.md repeats them for client authors):
- A boundary is sentence-ending punctuation (. ! ? … and the CJK full stops), optionally
  followed by closing quotes or brackets, then whitespace; or a line break. Requiring the
  whitespace means "3.5" and a half-streamed "e.g" are never cut, and a chunk ending in "."
  waits for the next chunk (or `final`) to confirm the boundary.
- The period of a title or a Latin abbreviation that never ends a sentence (`Mr.`, `Mrs.`,
  `Ms.`, `Dr.`, `Prof.`, `vs.`, `e.g.`, `i.e.`) is no boundary: "Dr. Smith" stays in one
  segment, where the model reads "doctor smith", not a segment ending in a bare "dr".
- A segment shorter than `min_chars` is merged with what follows, so "Hi." does not become a
  request of its own (short prompts also give the model little prosody to work with).
- Text that grows past `max_chars` without a boundary is cut at the last space before it, so a
  run-on answer still starts speaking.
"""

from __future__ import annotations

import re

_BOUNDARY = re.compile(r"[.!?…]+[\"'”’»)\]]*\s+|[。！？]+[」』”’)]*\s*|\n+")
# Text ending in one of these words, just before a period: the period is the abbreviation's.
_ABBREVIATION = re.compile(r"(?<![\w.])(?:mr|mrs|ms|dr|prof|vs|e\.g|i\.e)$", re.IGNORECASE)


class SentenceSegmenter:
    def __init__(self, min_chars: int = 20, max_chars: int = 300) -> None:
        self.min_chars = min_chars
        self.max_chars = max_chars
        self._buffer = ""

    @property
    def pending(self) -> str:
        """Text received but not yet part of a segment."""
        return self._buffer

    def push(self, text: str) -> list[str]:
        """Add streamed text; return the segments it completed, in order."""
        self._buffer += text
        segments: list[str] = []
        while (cut := self._next_cut()) is not None:
            segment, self._buffer = self._buffer[:cut].strip(), self._buffer[cut:]
            if segment:
                segments.append(segment)
        return segments

    def finish(self) -> list[str]:
        """The input is closed: whatever remains is the last segment."""
        segments = self.push("")
        rest, self._buffer = self._buffer.strip(), ""
        if rest:
            segments.append(rest)
        return segments

    def _next_cut(self) -> int | None:
        for match in _BOUNDARY.finditer(self._buffer):
            if self._ends_an_abbreviation(match):
                continue
            if len(self._buffer[: match.end()].strip()) >= self.min_chars:
                return match.end()
        if len(self._buffer) <= self.max_chars:
            return None
        space = self._buffer.rfind(" ", 0, self.max_chars)
        return space + 1 if space > 0 else self.max_chars

    def _ends_an_abbreviation(self, match: re.Match[str]) -> bool:
        """Whether the boundary `match` is a lone period closing a title such as "Dr." (a line
        break after it still ends the segment)."""
        text = match.group()
        if not text.startswith(".") or text.startswith("..") or "\n" in text:
            return False
        return _ABBREVIATION.search(self._buffer, 0, match.start()) is not None
