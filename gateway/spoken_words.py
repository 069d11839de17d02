"""A response's word timings on their way to the client (`response.words`, docs/protocol.md).

The engine times each word of a segment (engine/word_timing.py) as soon as the tokens saying it
are generated, well ahead of the paced audio. The engine times them in the model's audio; the
client gets them in played time (the audio as time-stretched to the session's `speed`). `SpokenWords` holds them until the audio that
says a word has been queued for the client, so that a word arrives with its audio, and keeps
every word it saw so that a barge-in can report which of them the listener heard.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

from engine.api import WordTiming
from gateway.protocol import ResponseWords, ServerEvent, SpokenWord
from gateway.stretched_audio import PlayedTime


class SpokenWords:
    def __init__(
        self,
        response_id: str,
        emit: Callable[[ServerEvent], None],
        time: PlayedTime | None = None,  # the response's speed (None: 1)
    ) -> None:
        self._response_id = response_id
        self._emit = emit
        self._time = time or PlayedTime()
        self._words: list[SpokenWord] = []  # every word so far, in order
        self._sent = 0  # how many of them went out

    def add(self, offset_s: float, words: Sequence[WordTiming]) -> None:
        """Words of the segment whose audio starts `offset_s` into the response (model time)."""
        for w in words:
            start = round(self._time.played_s(offset_s + w.start_s) * 1000)
            end = round(self._time.played_s(offset_s + w.end_s) * 1000)
            self._words.append(SpokenWord(w.text, start, end))

    def release(self, audio_ms: int | None = None) -> None:
        """Send the words that end within the first `audio_ms` of audio sent (None: all)."""
        ready = self._sent
        while ready < len(self._words) and (
            audio_ms is None or self._words[ready].end_ms <= audio_ms
        ):
            ready += 1
        if ready > self._sent:
            self._emit(ResponseWords(self._response_id, tuple(self._words[self._sent : ready])))
            self._sent = ready

    def heard(self, heard_ms: float) -> tuple[SpokenWord, ...]:
        """The words said to their end within the first `heard_ms` of the response: a prefix."""
        return tuple(itertools.takewhile(lambda w: w.end_ms <= heard_ms, self._words))
