"""Word timings from a reading model's position in its text (no torch).

A model with `facts.word_timings` says, for each generated token, which position of its text
that token's audio speaks (`SpeechModel.reading_position`: voxgate-tiny's reading pointer), and
its prompt lists the text's words with their positions (`Prompt.words`). Token `r` of the
output covers the audio [r, r + 1) × seconds_per_token, so a word starts with the first token
whose position reaches the word and ends with the first token whose position has passed it.

`WordClock` follows one request token by token and hands out each word once, the moment its end
is known; `finish` ends the word still being spoken with the audio. Words the request never
reached (cut by max_tokens, or cancelled) are never reported: they were not spoken.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the clock only reads a word's fields; no torch for it
    from models.base import TextWord


@dataclass(frozen=True)
class WordTiming:
    """One spoken word and when, in seconds from the start of its request's audio."""

    text: str
    start_s: float
    end_s: float


class WordClock:
    """One request's words, timed as its tokens arrive (module docstring)."""

    def __init__(self, words: Sequence[TextWord], seconds_per_token: float) -> None:
        self._words = tuple(words)
        self._spt = seconds_per_token
        self._next = 0  # the first word not handed out yet
        self._started: int | None = None  # the token at which that word began

    def advance(self, token_index: int, position: int | None) -> list[WordTiming]:
        """Output token `token_index` speaks text `position`: the words it ends."""
        done: list[WordTiming] = []
        if position is None:
            return done
        while self._next < len(self._words):
            word = self._words[self._next]
            if self._started is None:
                if position < word.start:
                    break
                self._started = token_index
            if position < word.end:
                break
            done.append(self._timing(word, token_index))
        return done

    def finish(self, audio_tokens: int) -> list[WordTiming]:
        """The request's audio ended after `audio_tokens` tokens: the word being spoken ends
        with it; words never reached are dropped."""
        if self._started is None or self._next >= len(self._words):
            return []
        return [self._timing(self._words[self._next], audio_tokens)]

    def _timing(self, word: TextWord, end_token: int) -> WordTiming:
        assert self._started is not None
        timing = WordTiming(word.text, self._started * self._spt, end_token * self._spt)
        self._next += 1
        self._started = None
        return timing
