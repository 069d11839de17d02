"""How many tokens a text's speech may run to, learned from requests that ended by themselves
(no torch): what real-time admission's outlook expects of a stream instead of its
`max_tokens`.

A request's `max_tokens` is a ceiling against runaway generation (1,200 by default: 14 s of
Orpheus, 96 s of Qwen3-TTS), not its length: a sentence of 60 characters ends after a few
seconds. Admission's outlook (engine/realtime_outlook.py) follows every stream to its end as
the KV pages it reads grow, so judging each one by its ceiling sees streams that run minutes
and refuses newcomers long before the engine is full. Speech runs nearly in proportion to
its text, so the engine learns the model's tokens per character from the requests that
stopped on their own (a stop token, not their `max_tokens`, ended them), and bounds a
text's stream by a high quantile of that ratio with a margin, plus half a second of audio for
short texts' pauses and breaths. Until `MIN_SAMPLES` requests have ended that way there is
no bound and the ceiling stands; a stream that runs past its bound is judged by its ceiling
again. Texts spoken at another pace (another voice, another language) move the quantile as
they come; the listeners' buffers guard what the bound misses (engine/listener_guard.py).
"""

from __future__ import annotations

import math

import numpy as np

from engine.turn_cost import SampleWindow

LENGTH_WINDOW = 512  # the latest requests the ratio is learned from
MIN_SAMPLES = 32  # requests ended by themselves before a text's length is bounded
QUANTILE = 0.98  # of tokens per character over the window
MARGIN = 1.1  # on top of the quantile


class SpeechLengths:
    """Tokens per character of text, learned from finished requests; `bound(chars)` is the
    most a text of `chars` characters is expected to take (None until learned)."""

    def __init__(
        self,
        slack_tokens: int,
        window: int = LENGTH_WINDOW,
        min_samples: int = MIN_SAMPLES,
    ) -> None:
        self.slack_tokens = slack_tokens
        self.min_samples = min_samples
        self._ratios = SampleWindow(window)  # observed by the engine loop, read by stats too
        self._cache: tuple[int, float | None] = (-1, None)

    def observe(self, text_chars: int, tokens: int) -> None:
        """A request for `text_chars` characters of text that stopped by itself after
        `tokens` tokens."""
        if text_chars > 0 and tokens > 0:
            self._ratios.append(tokens / text_chars)

    @property
    def samples(self) -> int:
        return len(self._ratios)

    def tokens_per_char(self) -> float | None:
        """The learned ratio's `QUANTILE` (None until `min_samples` requests are in)."""
        cached_version, cached = self._cache
        if cached_version == self._ratios.version:
            return cached  # asked for every live stream at each admission decision
        version, samples = self._ratios.snapshot()
        ratios = sorted(ratio for (ratio,) in samples)
        ratio = None
        if len(ratios) >= self.min_samples:
            ratio = ratios[min(len(ratios) - 1, math.ceil(QUANTILE * len(ratios)) - 1)]
        self._cache = (version, ratio)
        return ratio

    def bound(self, text_chars: int) -> int | None:
        """The most tokens a text of `text_chars` characters is expected to take; None
        while nothing is learned or without a text."""
        if text_chars <= 0:
            return None
        bounds = self.bounds(np.array([text_chars], dtype=np.int64))
        return None if bounds is None else int(bounds[0])

    def bounds(self, text_chars: np.ndarray) -> np.ndarray | None:
        """`bound` of each of `text_chars` at once, 0 where there is no text; None while
        nothing is learned."""
        ratio = self.tokens_per_char()
        if ratio is None:
            return None
        tokens = np.ceil(MARGIN * ratio * text_chars).astype(np.int64) + self.slack_tokens
        return np.where(text_chars > 0, tokens, 0)
