"""engine/word_timing.py: word timings from a reading position, token by token (no model)."""

from __future__ import annotations

from engine.word_timing import WordClock, WordTiming
from models.base import TextWord

SPT = 0.04  # 40 ms a token, voxgate-tiny's row

# "hi a there": phones h ay | ␣ | ah | ␣ | dh eh r  (positions 0-1, 3, 5-7)
WORDS = (TextWord("hi", 0, 2), TextWord("a", 3, 4), TextWord("there", 5, 8))


def timings(positions: list[int], audio_tokens: int | None = None) -> list[WordTiming]:
    clock = WordClock(WORDS, SPT)
    out = [w for i, p in enumerate(positions) for w in clock.advance(i, p)]
    if audio_tokens is not None:
        out += clock.finish(audio_tokens)
    return out


def ms(words: list[WordTiming]) -> list[tuple[str, int, int]]:
    return [(w.text, round(w.start_s * 1000), round(w.end_s * 1000)) for w in words]


def test_a_word_ends_when_the_position_passes_it():
    # tokens: 0 1 1 2 3 4 5 6 7 7
    got = timings([0, 1, 1, 2, 3, 4, 5, 6, 7, 7])
    # "hi" from token 0 to token 3 (position 2, the boundary); "a" at 4 until 5; "there" is
    # still being said: its end comes with the audio's (finish).
    assert ms(got) == [("hi", 0, 120), ("a", 160, 200)]


def test_the_last_word_ends_with_the_audio_and_unreached_words_are_dropped():
    assert ms(timings([0, 1, 2, 3, 4, 5, 6, 7, 7], audio_tokens=9)) == [
        ("hi", 0, 80),
        ("a", 120, 160),
        ("there", 200, 360),
    ]
    # Cut by max_tokens while saying "a": "there" was never spoken.
    assert ms(timings([0, 1, 2, 3], audio_tokens=4)) == [("hi", 0, 80), ("a", 120, 160)]


def test_a_jump_over_a_whole_word_gives_it_no_length_but_keeps_the_order():
    got = ms(timings([0, 1, 6, 7], audio_tokens=4))
    assert got == [("hi", 0, 80), ("a", 80, 80), ("there", 80, 160)]


def test_without_a_position_nothing_is_timed():
    clock = WordClock(WORDS, SPT)
    assert clock.advance(0, None) == [] and clock.finish(1) == []
