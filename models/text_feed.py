"""Streaming text input: the ids a request consumes one per generated token while its text is
still arriving (EngineClient.append_text). Plain Python, no torch: the engine's scheduler
reads it to hold a request that has run out of text.

A model that takes streamed text (ModelFacts.appends_text) opens the feed in its
`preprocess_text_stream` and turns each appended piece of text into ids with
`extend_request`; the engine writes one id into `column` of every row it generates (the row
then goes back into the model as the next input), `filler` once the final text is used up.

A prompt may also hold rows whose `column` waits for text (`prompt_gaps`): a layout that
lines the text's start up with rows the model does not generate (Qwen3-TTS's in-context
cloning pairs it with the reference clip's codes). Those take the ids first, in order; the
request is not prefilled until every gap has its id (`filler` for those the final text does
not reach).
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
    # Prompt rows (their indexes, in order) whose `column` still waits for an id.
    prompt_gaps: deque[int] = field(default_factory=deque)

    def extend(self, ids: list[int], final: bool) -> None:
        self.pending.extend(ids)
        self.final = self.final or final

    def fill_prompt(self, rows: list) -> None:
        """Write the ids that have come (after the final text, fillers) into the prompt's gaps:
        `rows` is the request's prompt, rows of ids, changed in place. Call after `extend`,
        before the request is prefilled (it is not while a gap is open: `ready`)."""
        while self.prompt_gaps and (self.pending or self.final):
            index = self.prompt_gaps.popleft()
            fill = self.pending.popleft() if self.pending else self.filler
            row = rows[index]
            rows[index] = (*row[: self.column], fill, *row[self.column + 1 :])

    @property
    def ready(self) -> bool:
        """Whether the next generated token has its id and the prompt all its text (else the
        request waits for text)."""
        return not self.prompt_gaps and (bool(self.pending) or self.final)

    @property
    def drained(self) -> bool:
        """The final text is consumed: the request may now end (a stop token)."""
        return self.final and not self.pending and not self.prompt_gaps

    def take(self) -> int:
        """The id for the next generated token; call only when `ready`."""
        self.consumed += 1
        if self.pending:
            return self.pending.popleft()
        if not self.final:
            raise RuntimeError("a request ran past the text it has")
        return self.filler
