"""Streaming text input: the ids a request consumes one per generated token while its text is
still arriving (EngineClient.append_text). Plain Python, no torch: the engine's scheduler
reads it to hold a request that has run out of text.

A model that takes streamed text (ModelFacts.appends_text) opens the feed in its
`preprocess_text_stream` and turns each appended piece of text into ids with
`extend_request`; the engine writes one id into `column` of every row it generates (the row
then goes back into the model as the next input), `filler` once the final text is used up.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass
class TextFeed:
    column: int  # the column of a generated row that takes the id
    filler: int  # what that column holds after the final text is consumed
    pending: deque[int] = field(default_factory=deque)
    final: bool = False  # the text is complete: no more ids come
    consumed: int = 0  # ids taken so far (fillers included)

    def extend(self, ids: list[int], final: bool) -> None:
        self.pending.extend(ids)
        self.final = self.final or final

    @property
    def ready(self) -> bool:
        """Whether the next generated token has its id (else the request waits for text)."""
        return bool(self.pending) or self.final

    @property
    def drained(self) -> bool:
        """The final text is consumed: the request may now end (a stop token)."""
        return self.final and not self.pending

    def take(self) -> int:
        """The id for the next generated token; call only when `ready`."""
        self.consumed += 1
        if self.pending:
            return self.pending.popleft()
        if not self.final:
            raise RuntimeError("a request ran past the text it has")
        return self.filler
